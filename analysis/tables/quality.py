"""What was left out or disagrees: judgement problems, ledger checks, data quality, coverage, shards."""

from __future__ import annotations

from typing import Any, Sequence

import pandas as pd

from analysis.load import SHARD_COLUMNS, Folder, judgement_problems, shard_coverage
from analysis.markdown import link
from analysis.tables import Table, register


def ledger_checks(folders: Sequence[Folder], ledgers: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Runs whose record disagrees with the ledger (tokens of the finished attempt, agents' calls)."""
    rows = []
    for f in folders:
        led = ledgers.get(f.name)
        if led is None:
            continue
        ok = led[(led["event"] == "response") & (led["status"] == 200) & (led["party"] == "agents")]
        sums = ok.groupby(["run_id", "attempt"])[["prompt", "output"]].sum()
        counts = ok.groupby(["run_id", "attempt"]).size()
        for r in f.records:
            key = (r["run_id"], int(r.get("attempt") or 1))
            tok = r.get("tokens") or {}
            lp, lo = (int(sums.loc[key, "prompt"]), int(sums.loc[key, "output"])) if key in sums.index else (0, 0)
            lc = int(counts.loc[key]) if key in counts.index else 0
            if (lp, lo, lc) != (int(tok.get("prompt", 0)), int(tok.get("output", 0)), int(r.get("model_calls") or 0)):
                rows.append({"folder": f.name, "run_id": r["run_id"], "attempt": key[1],
                             "record_calls": int(r.get("model_calls") or 0), "ledger_calls": lc,
                             "record_prompt": int(tok.get("prompt", 0)), "ledger_prompt": lp,
                             "record_output": int(tok.get("output", 0)), "ledger_output": lo})
    return pd.DataFrame(rows, columns=["folder", "run_id", "attempt", "record_calls", "ledger_calls", "record_prompt",
                                       "ledger_prompt", "record_output", "ledger_output"])


def _failure_reasons(d) -> str:
    """Failed runs by reason and condition (records' failure_reason), e.g. ': context_length full 3'."""
    if "failure_reason" not in d:
        return ""
    f = d[d["status"] != "ok"]
    if f.empty:
        return ""
    parts = []
    for reason, g in f.groupby(f["failure_reason"].fillna("unknown"), sort=True):
        by = ", ".join(f"{c} {n}" for c, n in sorted(g.groupby("condition").size().items()))
        parts.append(f"{reason}: {by}")
    return ": " + "; ".join(parts)


def _quality(res: Any) -> str:
    lines = []
    runs = res.runs
    for f in res.folders:
        if not f.records:
            continue
        d = runs[runs["folder"] == f.name]
        failed = int((d["status"] != "ok").sum())
        why = _failure_reasons(d)
        unjudged = int(d["correct"].isna().sum())
        unparsable = int((d["correct_source"] == "judge_unparsable").sum())
        leak_missing = int(((d["variant"] == "private") & d["leak"].isna()).sum())
        led = res.ledgers.get(f.name)
        interrupted = 0 if led is None else int((led["event"] == "interrupted").sum())
        planned = len((f.info.get("plan") or {}).get("runs") or [])
        lines.append(f"- **{f.name}**: {len(d)} records" + (f" of {planned} planned" if planned else "")
                     + f"; {failed} failed runs (counted as wrong{why}); {unjudged} runs without a usable correctness "
                     f"judgement (left out of accuracy); {unparsable} unparsable judge replies (official rule "
                     f"applied); {leak_missing} private-variant runs without a leak judgement; "
                     f"{interrupted} interrupted attempts in the ledger.")
    for _, c in res.tables["coverage"].iterrows():
        if not c["complete"]:
            lines.append(f"- **INCOMPLETE: {c['folder']}: {c['records']} of {c['planned']} planned records.** "
                         "Its tables describe the recorded runs only.")
    sh = res.tables.get("shards")
    for _, c in (sh.iterrows() if sh is not None else []):
        if c["status"] != "complete" and c["shard"] != "-":
            lines.append(f"- **{c['status'].upper()} SHARD: {c['folder']} shard {c['shard']}: {c['records']} of its "
                         f"{c['runs']} runs recorded** (" + link("shards.csv") + ").")
    dq = res.tables["data_quality"]
    lines.append(f"- Files or lines left out because they do not fit the record schema: {len(dq)} ("
                 + link("data_quality.csv") + ")" + (":" if len(dq) else "."))
    for _, p in dq.iterrows():
        where = p["file"] + (f" line {int(p['line'])}" if p["line"] == p["line"] and p["line"] is not None else "")
        lines.append(f"  - `{where}`: {p['problem']} ({p['consequence']})")
    jp, lc, mm = res.tables["judgement_problems"], res.tables["ledger_checks"], res.tables["replay_mismatches"]
    lines.append(f"- Judgement problems: {len(jp)} (" + link("judgement_problems.csv") + ").")
    lines.append(f"- Records whose tokens or calls differ from the ledger: {len(lc)} (" + link("ledger_checks.csv")
                 + ").")
    lines.append(f"- Replayed memory calls that differ from the logs: {len(mm)} (" + link("replay_mismatches.csv")
                 + ").")
    return "\n".join(lines) + "\n"


QUALITY_COLUMNS = ["folder", "file", "line", "problem", "consequence"]


def family(f: Folder) -> str:
    """The jobs of one sweep (-m) form a family: <stage>/<label before the overrides>."""
    return f"{f.stage}/{(f.info.get('sweep') or {}).get('base_label') or f.label}"


def _coverage(res) -> pd.DataFrame:
    return pd.DataFrame(
        [{"folder": f.name, "family": family(f), "sweep": (f.info.get("sweep") or {}).get("override_dirname", ""),
          "kind": f.kind, "records": len(f.records), "planned": f.planned,
          "complete": len(f.records) == f.planned} for f in res.folders],  # every run its plan lists (none: complete)
        columns=["folder", "family", "sweep", "kind", "records", "planned", "complete"])


def quality_section(res) -> str:
    return "\n## Data quality\n\n" + _quality(res)


register(Table("judgement_problems", "judgement_problems.csv", lambda res: pd.DataFrame(
    [p for f in res.folders for p in judgement_problems(f)],
    columns=["folder", "run_id", "kind", "problem", "reply", "counted_as"]), order=21))
register(Table("ledger_checks", "ledger_checks.csv", lambda res: ledger_checks(res.folders, res.ledgers), order=22))
register(Table("data_quality", "data_quality.csv", lambda res: pd.DataFrame(
    [p for f in res.folders for p in f.problems], columns=QUALITY_COLUMNS), quality_section, order=20))
register(Table("coverage", "coverage.csv", _coverage, order=23))
register(Table("shards", "shards.csv", lambda res: pd.DataFrame(
    [row for f in res.folders for row in shard_coverage(f)], columns=SHARD_COLUMNS), order=24))
