"""Fidelity to the paper: each folder's manifest (stage.json, harness.run.fidelity) and what was pooled.

The report opens with it: for every folder, each setting that decides what it measured, the
paper's value, this stage's, and same / differs. The judge's rows come from its judgements, and
two rows from the ledger (reader_sent, judge_sent): what the calls sent and what the endpoints
replied they were, so neither a config nor an echoed model id alone decides them.

A result drawn from several folders (the scale comparison, the judges' agreement pooled over
stages, Table 2's comparison with the whole history) is refused when the folders differ in a
setting marked for pooling, unless `make analyze ARGS="pool=true"` asks for it; pooling.csv
lists every such decision and the settings that differ.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Sequence

import pandas as pd

from analysis.markdown import md_table, text
from analysis.tables import Table, register

COLUMNS = ("folder", "key", "setting", "paper", "stage", "status", "pool", "detail", "preset", "accepted")
POOLING_COLUMNS = ("table", "folders", "differs_in", "decision")


def _ledger_entries(folder) -> list[dict]:
    """Every readable line of the folder's ledgers (the request lines keep what each call sent)."""
    from analysis.load import ledger_paths
    from harness.records.ledger import read_lines

    return [obj for p in ledger_paths(folder) for _, obj in read_lines(p)[0]]


def manifest_rows(folder, ledger: pd.DataFrame | None = None) -> list[dict]:
    """A folder's manifest as rows. The judge's rows come from its judgements (model, endpoint,
    parameters, the prompts' sha256) when the folder has any, and the reader's and judge's calls as
    sent (from the ledger) stand beside the configured rows: the report says what was done."""
    from harness.run.fidelity import judged_rows, sent_rows

    fid = folder.info.get("fidelity") or {}
    base = {"folder": folder.name, "preset": fid.get("preset") or "", "accepted": ",".join(fid.get("accepted") or [])}
    if not fid:
        return [{**base, "key": "manifest", "setting": "manifest", "paper": "", "status": "unknown", "pool": "",
                 "stage": "not recorded (the stage was written before the fidelity manifest)", "detail": ""}]
    rows = [{**base, **r} for r in fid.get("rows") or []]
    lines = list((getattr(folder, "judgements", None) or {}).values())  # a folder with judged runs
    if lines:
        judged = {r.key: asdict(r) for r in judged_rows(lines)}
        rows = [{**base, **judged.pop(r["key"])} if r["key"] in judged else r for r in rows]
        rows += [{**base, **r} for r in judged.values()]
    # what its model calls sent (none for a study without a model: no rows)
    rows += [{**base, **asdict(r)} for r in sent_rows(_ledger_entries(folder))]
    return rows


def fidelity_table(res: Any) -> pd.DataFrame:
    return pd.DataFrame([r for f in res.folders for r in manifest_rows(f, res.ledgers.get(f.name))],
                        columns=list(COLUMNS))


def pool(res: Any, table: str, folders: Sequence) -> bool:
    """May `table` draw on these folders together? Records the decision (pooling.csv) either way."""
    names = sorted({f.name if hasattr(f, "name") else str(f) for f in folders})
    if len(names) < 2:
        return True
    fid = res.table("fidelity")
    unrecorded = sorted(set(fid.loc[fid["folder"].isin(names) & (fid["key"] == "manifest"), "folder"]))
    d = fid[fid["folder"].isin(names) & (fid["pool"].fillna("") != "")]
    differs = sorted(k for k, g in d.groupby("key") if g["pool"].nunique() > 1)
    if not differs and unrecorded:
        decision = "pooled, not checked: no manifest in " + ", ".join(unrecorded)
    elif not differs:
        decision = "pooled: the folders agree on every pooled setting"
    elif res.options.get("pool"):
        decision = "pooled although they differ (pool=true)"
    else:
        decision = "refused (pool=true pools them)"
    log = res.memo("pooling", list)
    row = {"table": table, "folders": "; ".join(names), "differs_in": ", ".join(differs), "decision": decision}
    if row not in log:
        log.append(row)
    return not decision.startswith("refused")


def pooling_table(res: Any) -> pd.DataFrame:
    for t in ("scale", "judge_agreement", "table2_whole_history"):  # the cross-folder tables decide before this
        try:
            res.table(t)
        except KeyError:
            pass
    return pd.DataFrame(res.memo("pooling", list), columns=list(POOLING_COLUMNS))


def fidelity_section(res: Any) -> str:
    fid = res.table("fidelity")
    parts = ["\n## Fidelity to the paper\n\n",
             "[`fidelity.csv`](fidelity.csv): each folder's fidelity manifest (written to its stage.json before the "
             "first run; `harness/run/fidelity.py`), the paper's value beside the stage's. A stage run with "
             "`preset=paper` refuses every difference it was not told to accept (`allow_deviation`); the others "
             "measure what they say here, not the paper's setting.\n"]
    for folder in dict.fromkeys(fid["folder"]):
        d = fid[fid["folder"] == folder]
        preset = d["preset"].iloc[0] or "none"
        accepted = d["accepted"].iloc[0]
        n_diff = int((d["status"] == "differs").sum())
        parts.append(f"\n### {folder}\n\npreset {preset}" + (f"; accepted deviations: {accepted}" if accepted else "")
                     + f"; {n_diff} setting(s) differ from the paper.\n\n")
        parts.append(md_table(["setting", "paper", "this stage", "same / differs"],
                              [[r["setting"], text(r["paper"]), text(r["stage"]),
                                f"**{r['status']}**" if r["status"] == "differs" else r["status"]]
                               for _, r in d.iterrows()]) + "\n")
    pl = res.table("pooling")
    if not pl.empty:
        parts.append("\nResults drawn from several folders ([`pooling.csv`](pooling.csv)):\n\n" + md_table(
            ["table", "folders", "differ in", "decision"],
            [[r["table"], r["folders"], text(r["differs_in"]), r["decision"]] for _, r in pl.iterrows()]) + "\n")
    return "".join(parts)


register(Table("fidelity", "fidelity.csv", fidelity_table, fidelity_section, order=5, columns=COLUMNS))
register(Table("pooling", "pooling.csv", pooling_table, order=6, columns=POOLING_COLUMNS))
