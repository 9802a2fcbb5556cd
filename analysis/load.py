"""Run folders -> tidy frames: one row per run, per judgement, per ledger line.

Everything the analysis reports comes from three sources per stage folder
(runs/<stage>/<label>/): the run records, the judgements of one judge and the
metering ledger. Rules applied here, and nowhere else:

* Correctness comes from the judge's latest "correct" judgement of the run
  (judge.run.load_judgements). A failed run counts as wrong (Appendix F(vi)) whatever
  the judge file says. A run with no usable judgement gets correct = NaN and a
  `correct_source` saying why ("missing", "judge_failed", ...); it is reported and
  left out of accuracy, never counted as right or wrong. An "unparsable" reply keeps
  the label of the official rule ("yes" in the reply) and is reported.
* Leak (Org private variant only) comes from the "leak" judgement the same way; a
  failed run has no answer, so it states nothing: leak = 0.
* tokens = prompt + output tokens of every model call of the run (asked agents
  included); cost in US dollars at list price and as paid; time = wall seconds.
* Inputs are read in sorted order so that every later step is deterministic.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import pandas as pd
import yaml

from harness.records.ledger import read_ledger

REPO = Path(__file__).resolve().parents[1]
JUDGED_KINDS = ("correct", "leak")
RUN_COLUMNS = [
    "folder", "stage", "label", "run_id", "condition", "variant", "qid", "qtype", "abstention", "repeat",
    "attempt", "status", "correct", "correct_source", "leak", "leak_source", "model_calls", "agent_calls",
    "tool_calls", "tokens", "prompt", "hit", "miss", "output", "reasoning", "cost", "cost_paid", "time",
    "retrieval_s", "empty_results", "error_results", "ev_first", "ev_any", "dec_calls", "dec_prefix",
    "dec_results", "dec_output", "dec_input", "config_hash", "data_sha256", "seed", "prereg_sha256",
    "code_commit", "code_dirty",
]


class AnalysisError(RuntimeError):
    """Bad input that the user must fix (no folders, ambiguous judge, unreadable file)."""


@dataclass
class Folder:
    """One stage folder, runs/<stage>/<label>/."""

    path: Path
    info: dict  # stage.json
    name: str = ""  # "<stage dir>/<label dir>", how tables and the report name the folder
    records: list[dict] = field(default_factory=list)
    judge: str | None = None  # judgements/<judge>.jsonl used for correctness
    judgements: dict[tuple[str, str], dict] = field(default_factory=dict)
    judge_info: dict | None = None  # judgements/<judge>.info.json, when the judge wrote one

    @property
    def stage(self) -> str:
        return str(self.info.get("stage") or self.path.parent.name)

    @property
    def label(self) -> str:
        return str(self.info.get("label") or self.path.name)

    @property
    def kind(self) -> str:
        """agents (has run records) or the stage config's kind (backends: the index study)."""
        if self.records:
            return "agents"
        return str(self.config().get("stage", {}).get("kind") or ("backends" if self.stage == "backends" else "agents"))

    @property
    def is_org(self) -> bool:
        return any(r.get("variant") for r in self.records)

    def config(self) -> dict:
        p = self.path / "config.yaml"
        if not p.exists():
            return {}
        return yaml.safe_load(p.read_text(encoding="utf-8")) or {}

    def condition_order(self) -> list[str]:
        """Conditions in the order the stage config defines them, then any others sorted."""
        declared = list((self.config().get("stage") or {}).get("conditions") or {})
        seen = sorted({r["condition"] for r in self.records})
        return [c for c in declared if c in seen] + [c for c in seen if c not in declared]


# ------------------------------------------------------------------------------ folders


def _stage_dirs(path: Path) -> list[Path]:
    if (path / "stage.json").exists():
        return [path]
    found = sorted({p.parent for p in path.glob("*/stage.json")} | {p.parent for p in path.glob("*/*/stage.json")})
    return found


def find_folders(paths: Iterable[str | Path] | None, runs_root: str | Path = "runs") -> list[Folder]:
    """Stage folders to analyse, sorted by name.

    No paths: every stage folder under `runs_root` except the pilot (never in any result,
    Appendix A). A path may be a stage folder, a folder of labels, or a runs root; a pilot
    named explicitly is analysed (the report says it is the pilot).
    """
    explicit = bool(paths)
    roots = [Path(p) for p in paths] if explicit else [Path(runs_root)]
    dirs: list[Path] = []
    for root in roots:
        if not root.exists():
            raise AnalysisError(f"{root}: no such folder")
        found = _stage_dirs(root)
        if not found and explicit:
            raise AnalysisError(f"{root}: not a stage folder (no stage.json) and none below it")
        dirs += found
    out: dict[str, Folder] = {}
    for d in dirs:
        try:
            info = json.loads((d / "stage.json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise AnalysisError(f"{d}/stage.json: unreadable ({exc})") from None
        f = Folder(d, info, name=f"{d.parent.name}/{d.name}")
        if not explicit and f.stage == "pilot":
            continue
        out.setdefault(f.name, f)
    return [out[k] for k in sorted(out)]


def load_records(folder: Folder) -> list[dict]:
    recs = []
    rdir = folder.path / "records"
    for p in sorted(rdir.glob("*.json")) if rdir.exists() else []:
        try:
            recs.append(json.loads(p.read_text(encoding="utf-8")))
        except json.JSONDecodeError as exc:
            raise AnalysisError(f"{p}: unreadable record ({exc})") from None
    return sorted(recs, key=lambda r: r["run_id"])


# ------------------------------------------------------------------------------ judgements


def judge_names(folder: Folder) -> list[str]:
    jdir = folder.path / "judgements"
    if not jdir.exists():
        return []
    return sorted(p.stem for p in jdir.glob("*.jsonl") if not p.name.endswith(".attempts.jsonl"))


def choose_judge(folder: Folder, wanted: str | None) -> str | None:
    """The judge whose file gives correctness: `wanted`, else the stage config's judge, else the only file."""
    names = judge_names(folder)
    if wanted:
        return wanted if wanted in names else None
    configured = str((folder.config().get("judge") or {}).get("name") or "")
    if configured in names:
        return configured
    if len(names) == 1:
        return names[0]
    if not names:
        return None
    raise AnalysisError(f"{folder.path}: several judgements files {names} and none is the stage's judge "
                        f"{configured!r}; choose one with judge=NAME")


def read_judgements(folder: Folder, judge: str) -> dict[tuple[str, str], dict]:
    """(run_id, kind) -> latest judgement line. The one place that reads judgements files.

    The same rule as judge.run.load_judgements (the latest line per (run_id, kind) wins, a
    torn last line is ignored; a test holds the two equal), without importing the judge's
    model client.
    """
    out: dict[tuple[str, str], dict] = {}
    for e in read_ledger(folder.path / "judgements" / f"{judge}.jsonl"):
        if "run_id" in e and "kind" in e:
            out[(e["run_id"], e["kind"])] = e
    return out


def read_judge_info(folder: Folder, judge: str) -> dict | None:
    p = folder.path / "judgements" / f"{judge}.info.json"
    if not p.exists():
        return None
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return None


def load_folder(folder: Folder, judge: str | None = None) -> Folder:
    folder.records = load_records(folder)
    if folder.records:
        folder.judge = choose_judge(folder, judge)
        if folder.judge:
            folder.judgements = read_judgements(folder, folder.judge)
            folder.judge_info = read_judge_info(folder, folder.judge)
    return folder


def _label_of(record: dict, judgement: dict | None) -> tuple[float, str]:
    """(value, source) of one judged quantity of an ok run: 1/0 from the judge, NaN when missing."""
    if judgement is None:
        return math.nan, "missing"
    status = str(judgement.get("status"))
    label = judgement.get("label")
    if status in ("ok", "unparsable") and isinstance(label, bool):
        return float(label), "judge" if status == "ok" else "judge_unparsable"
    return math.nan, f"judge_{status}"


# ------------------------------------------------------------------------------ frames


def _usd(record: dict, key: str) -> float:
    prices = record.get("prices") or {}
    return float(record.get(key) or 0.0) * float(prices.get("usd_per_currency", 1.0) or 1.0)


def run_rows(folder: Folder) -> list[dict]:
    rows = []
    for r in folder.records:
        ok = r.get("status") == "ok"
        if ok:
            correct, csrc = _label_of(r, folder.judgements.get((r["run_id"], "correct")))
        else:
            correct, csrc = 0.0, "failed_run"
        if r.get("variant") == "private":
            if ok:
                leak, lsrc = _label_of(r, folder.judgements.get((r["run_id"], "leak")))
            else:
                leak, lsrc = 0.0, "failed_run"
        else:
            leak, lsrc = math.nan, "n/a"
        tok = r.get("tokens") or {}
        ev = r.get("evidence") or {}
        dec = r.get("decomposition") or {}
        code = r.get("code") or {}

        def b(x: Any) -> float:
            return math.nan if x is None else float(bool(x))

        rows.append({
            "folder": folder.name, "stage": folder.stage, "label": folder.label, "run_id": r["run_id"],
            "condition": r["condition"], "variant": r.get("variant") or "", "qid": str(r["qid"]),
            "qtype": r.get("qtype"), "abstention": bool(r.get("abstention")), "repeat": int(r.get("repeat") or 0),
            "attempt": int(r.get("attempt") or 1), "status": r.get("status"),
            "correct": correct, "correct_source": csrc, "leak": leak, "leak_source": lsrc,
            "model_calls": int(r.get("model_calls") or 0), "agent_calls": int(r.get("agent_calls") or 0),
            "tool_calls": int(r.get("tool_calls") or 0),
            "tokens": int(tok.get("prompt", 0)) + int(tok.get("output", 0)),
            "prompt": int(tok.get("prompt", 0)), "hit": int(tok.get("hit", 0)), "miss": int(tok.get("miss", 0)),
            "output": int(tok.get("output", 0)), "reasoning": int(tok.get("reasoning", 0)),
            "cost": _usd(r, "cost_list"), "cost_paid": _usd(r, "cost_paid"),
            "time": float(r.get("wall_s") or 0.0), "retrieval_s": float(r.get("retrieval_s") or 0.0),
            "empty_results": int(r.get("empty_results") or 0), "error_results": int(r.get("error_results") or 0),
            "ev_first": b(ev.get("first_search")), "ev_any": b(ev.get("any")),
            "dec_calls": int(dec.get("calls", 0)), "dec_prefix": int(dec.get("prefix", 0)),
            "dec_results": int(dec.get("results", 0)), "dec_output": int(dec.get("output", 0)),
            "dec_input": int(dec.get("input", 0)),
            "config_hash": r.get("config_hash"), "data_sha256": r.get("data_sha256"), "seed": r.get("seed"),
            "prereg_sha256": r.get("prereg_sha256"), "code_commit": code.get("commit"),
            "code_dirty": code.get("dirty"),
        })
    return rows


def runs_frame(folders: Iterable[Folder]) -> pd.DataFrame:
    rows = [row for f in folders for row in run_rows(f)]
    df = pd.DataFrame(rows, columns=RUN_COLUMNS)
    return df.sort_values(["folder", "variant", "condition", "qid", "repeat"], kind="mergesort").reset_index(drop=True)


def judgement_problems(folder: Folder) -> list[dict]:
    """Every run whose correctness (or leak) the judge did not settle, and judgements of unknown runs."""
    out = []
    ids = {r["run_id"]: r for r in folder.records}
    for r in folder.records:
        kinds = ["correct"] + (["leak"] if r.get("variant") == "private" else [])
        for kind in kinds:
            if r.get("status") != "ok":
                continue
            j = folder.judgements.get((r["run_id"], kind))
            value, src = _label_of(r, j)
            if src != "judge":
                out.append({"folder": folder.name, "run_id": r["run_id"], "kind": kind,
                            "problem": src if folder.judge else "no judgements file",
                            "reply": None if j is None else j.get("reply"),
                            "counted_as": "not counted" if math.isnan(value) else f"label {bool(value)} (official rule)"})
    for (run_id, kind) in sorted(folder.judgements):
        if run_id not in ids:
            out.append({"folder": folder.name, "run_id": run_id, "kind": kind, "problem": "judgement of no record",
                        "reply": folder.judgements[(run_id, kind)].get("reply"), "counted_as": "not counted"})
    return out


# ------------------------------------------------------------------------------ ledger


def ledger_frame(folder: Folder) -> pd.DataFrame:
    """One row per ledger line (request, response, interrupted) with party and condition."""
    rows = []
    for i, e in enumerate(read_ledger(folder.path / "ledger.jsonl")):
        tag = str(e.get("tag") or "")
        prefix, _, rest = tag.partition(":")
        judged = e.get("role") == "judge" or (rest and prefix.startswith("judge"))
        run_id = rest if (rest and prefix.startswith("judge")) else tag
        rows.append({
            "folder": folder.name, "line": i, "event": e.get("event"), "call": e.get("call"), "tag": tag,
            "run_id": run_id, "condition": run_id.split(".")[0] if run_id else "",
            "party": (prefix if prefix.startswith("judge") else "judge") if judged else "agents",
            "role": e.get("role") or "", "attempt": int(e.get("attempt") or 0), "status": e.get("status"),
            "model": e.get("model") or "", "prompt": int(e.get("prompt") or 0), "hit": int(e.get("hit") or 0),
            "miss": int(e.get("miss") or 0), "output": int(e.get("output") or 0), "ts": e.get("ts") or "",
        })
    cols = ["folder", "line", "event", "call", "tag", "run_id", "condition", "party", "role", "attempt", "status",
            "model", "prompt", "hit", "miss", "output", "ts"]
    return pd.DataFrame(rows, columns=cols)


def first_call_ts(ledger: pd.DataFrame) -> str | None:
    """Timestamp of the stage's first model request by an agent (judging comes later)."""
    req = ledger[(ledger["event"] == "request") & (ledger["party"] == "agents")]
    return None if req.empty else str(min(req["ts"]))


# ------------------------------------------------------------------------------ prices


def _load_yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def judge_prices_from_conf(judge: str) -> dict | None:
    """Prices of conf/judge/<judge>.yaml (its `/model@_here_` default overlaid by its own keys)."""
    p = REPO / "conf" / "judge" / f"{judge}.yaml"
    if not p.exists():
        return None
    cfg = _load_yaml(p)
    merged: dict = {}
    for d in cfg.get("defaults") or []:
        if isinstance(d, dict):
            for k, v in d.items():
                if str(k).startswith("/model"):
                    mp = REPO / "conf" / "model" / f"{v}.yaml"
                    if mp.exists():
                        merged.update(_load_yaml(mp))
    merged.update({k: v for k, v in cfg.items() if k != "defaults"})
    if "prices" not in merged:
        return None
    return {"model": merged.get("model"), "prices": merged["prices"], "offpeak": merged.get("offpeak")}


def price_book(folder: Folder) -> dict[str, dict]:
    """party -> {prices, offpeak, models, source}: the agents' from stage.json, each judge's from its info file."""
    book: dict[str, dict] = {}
    model = folder.info.get("model") or {}
    book["agents"] = {"prices": model.get("prices"), "offpeak": model.get("offpeak"),
                      "model": model.get("model"), "source": "stage.json model"}
    jdir = folder.path / "judgements"
    for p in sorted(jdir.glob("*.info.json")) if jdir.exists() else []:
        try:
            info = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            continue
        j = info.get("judge") or {}
        if j.get("prices"):
            name = p.name[: -len(".info.json")]
            book[f"judge:{name}"] = {"prices": j["prices"], "offpeak": j.get("offpeak"), "model": j.get("model"),
                                     "source": f"judgements/{p.name}"}
    return book
