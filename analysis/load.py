"""Run folders -> tidy frames: one row per run, per judgement, per ledger line.

Everything the analysis reports comes from three sources per stage folder
(runs/<stage>/<label>/): the run records, the judgements of one judge and the
metering ledger. Rules applied here, and nowhere else:

* Correctness comes from the judge's latest "correct" judgement of the run
  (judge.answer_check.load_judgements). A failed run counts as wrong (Appendix F(vi)) whatever
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

from analysis.literal import literal
from harness.records.ledger import read_lines
from harness.records.privacy import WITHHELD
from harness.records.schema import RecordError, parse, read_json

REPO = Path(__file__).resolve().parents[1]
JUDGED_KINDS = ("correct", "leak")
RUN_COLUMNS = [
    "folder", "stage", "label", "run_id", "condition", "variant", "qid", "qtype", "abstention", "repeat",
    "attempt", "status", "failure_reason", "correct", "correct_source", "leak", "leak_source", "model_calls", "agent_calls",
    "tool_calls", "tokens", "prompt", "hit", "miss", "output", "reasoning", "cost", "cost_paid", "time",
    "retrieval_s", "empty_results", "error_results", "ev_first", "ev_any", "dec_calls", "dec_prefix",
    "dec_results", "dec_output", "dec_input", "config_hash", "data_sha256", "seed", "prereg_sha256",
    "code_commit", "code_dirty", "memory_preparing", "overrides", "searches", "k_set", "k1", "k_sum",
    "dated", "dated_empty", "literal", "result_chars", "usage_estimated_calls",
]


_SEARCH_TOOLS: dict[str, set[str]] = {}


def tool_choices(tools: list[dict], module: str | None = None) -> dict:
    """How the model filled its tool calls: calls that overrode a schema default, and for the
    searches of the run's condition (its SEARCH_TOOLS, e.g. memory_search) the k it asked for
    (absent = the tool's default) and the searches it limited to dates (since/until), with how
    many of those came back empty."""
    import conditions

    if module not in _SEARCH_TOOLS:
        _SEARCH_TOOLS[module] = conditions.search_tools(module)
    searching = _SEARCH_TOOLS[module]
    out = {"overrides": 0, "searches": 0, "k_set": 0, "k1": 0, "k_sum": 0, "dated": 0, "dated_empty": 0}
    for t in tools:
        out["overrides"] += bool(t.get("overrode_defaults"))
        if t["name"] not in searching:
            continue
        out["searches"] += 1
        try:
            args = json.loads(t["arguments"] or "{}")
        except json.JSONDecodeError:
            args = None
        args = args if isinstance(args, dict) else {}
        k = args.get("k")
        if args.get("since") or args.get("until"):
            out["dated"] += 1
            out["dated_empty"] += bool(t.get("empty"))
        if isinstance(k, int) and not isinstance(k, bool):
            out["k_set"] += 1
            out["k1"] += k == 1
            out["k_sum"] += k
    return out


class AnalysisError(RuntimeError):
    """Bad input that the user must fix (no folders, ambiguous judge, unreadable file)."""

    exit_code = 2  # harness.failures.BAD_INPUT


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
    problems: list[dict] = field(default_factory=list)  # data quality: files or lines left out, and why

    def problem(self, path: str | Path, what: str, line: int | None = None, left_out: str = "left out") -> None:
        """A file or line left out; the file is named as `<stage>/<label>/<file>`, as tables name folders, so
        results do not depend on where the folder lies (nor show a local path; a published copy reads the same)."""
        try:
            shown = f"{self.name}/{Path(path).relative_to(self.path).as_posix()}"
        except ValueError:
            shown = str(path)
        self.problems.append({"folder": self.name, "file": shown, "line": line, "problem": what,
                              "consequence": left_out})

    @property
    def planned(self) -> int:
        return len(self.info.get("plan", {}).get("runs") or [])

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

    @property
    def is_pilot(self) -> bool:
        """pilot and pilot_local: checks before a study, never in its results (Appendix A)."""
        return self.stage.startswith("pilot")

    def condition_conf(self, name: str) -> dict:
        """A condition's settings as the stage ran it, over the tree's conf/condition/<name>.yaml (so a
        folder written before a key existed, such as `reference` or `compare_with`, reads today's)."""
        if not hasattr(self, "_cond_conf"):
            self._cond_conf: dict[str, dict] = {}
        if name not in self._cond_conf:
            from harness.records.privacy import local_preset

            # a condition's name comes from the records (a received dataset's too): a local preset name, never a path
            p = local_preset("condition", name)
            base = (yaml.safe_load(p.read_text(encoding="utf-8")) or {}) if p and p.is_file() else {}
            ran = ((self.config().get("stage") or {}).get("conditions") or {}).get(name) or {}
            self._cond_conf[name] = {**base, **ran}
        return self._cond_conf[name]

    def condition_order(self) -> list[str]:
        """Conditions in the order the stage config defines them, then any others sorted."""
        declared = list((self.config().get("stage") or {}).get("conditions") or {})
        seen = sorted({r["condition"] for r in self.records})
        return [c for c in declared if c in seen] + [c for c in seen if c not in declared]


# ------------------------------------------------------------------------------ folders


def _stage_dirs(path: Path) -> list[Path]:
    if (path / "stage.json").exists():
        return [path]
    # a published dataset (make publish): its folders, rebuilt and checked
    from analysis import publish

    if publish.is_published(path):
        try:
            return publish.stage_dirs(path)
        except publish.PublishError as exc:
            raise AnalysisError(str(exc)) from None
    found = sorted({p.parent for p in path.glob("*/stage.json")} | {p.parent for p in path.glob("*/*/stage.json")})
    return found


def find_folders(paths: Iterable[str | Path] | None, runs_root: str | Path = "runs") -> list[Folder]:
    """Stage folders to analyse, sorted by name.

    No paths: every stage folder under `runs_root` except the pilots (pilot, pilot_local:
    never in any result, Appendix A). A path may be a stage folder, a folder of labels, a runs root, or a
    dataset written by `make publish` (its folders rebuilt from its tables); a pilot named explicitly is
    analysed (the report says it is the pilot).
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
    bad: list[dict] = []
    for d in dirs:
        try:
            info = read_json("stage", d / "stage.json").model_dump(mode="json")
        except RecordError as exc:
            bad.append({"folder": f"{d.parent.name}/{d.name}", "file": f"{d.parent.name}/{d.name}/stage.json", "line": None,
                        "problem": exc.problem, "consequence": "folder left out"})
            continue
        f = Folder(d, info, name=f"{d.parent.name}/{d.name}")
        if not explicit and f.is_pilot:
            continue
        out.setdefault(f.name, f)
    folders = [out[k] for k in sorted(out)]
    if bad:
        if not folders:
            raise AnalysisError("no readable stage folder: " + "; ".join(f"{b['file']}: {b['problem']}" for b in bad))
        folders[0].problems.extend(bad)
    return folders


def load_records(folder: Folder) -> list[dict]:
    """Every record that validates, as a dict; each one that does not is a data-quality problem.

    A record is also left out when its file name is not its run id, or when another file
    already holds the same run id (the first in sorted order is kept)."""
    recs: dict[str, dict] = {}
    rdir = folder.path / "records"
    for p in sorted(rdir.glob("*.json")) if rdir.exists() else []:
        try:
            rec = read_json("record", p)
        except RecordError as exc:
            folder.problem(p, exc.problem)
            continue
        if rec.run_id != p.stem:
            folder.problem(p, f"the file holds run {rec.run_id!r}, not {p.stem!r}")
            continue
        if rec.run_id in recs:
            folder.problem(p, f"duplicated run id {rec.run_id!r}")
            continue
        recs[rec.run_id] = rec.model_dump(mode="json")
    return [recs[k] for k in sorted(recs)]


# ------------------------------------------------------------------------------ judgements


def judge_names(folder: Folder) -> list[str]:
    jdir = folder.path / "judgements"
    if not jdir.exists():
        return []
    return sorted(p.stem for p in jdir.glob("*.jsonl") if not p.name.endswith(".attempts.jsonl")
                  and not any(m in p.name for m in SIDE_JUDGEMENTS))


# judgements files that are not a judge of the stage's answers: against corrected gold (analysis/errata.py)
# and of the judge probe's planted answers (judge/probe.py)
SIDE_JUDGEMENTS = (".errata-", ".probe")


def choose_judge(folder: Folder, wanted: str | None) -> str | None:
    """The judge whose file gives correctness: `wanted`, else the stage config's judge, else the only file."""
    names = judge_names(folder)
    if wanted:
        if wanted not in names:
            raise AnalysisError(f"{folder.path}: no judgements of judge {wanted!r}; judges found: "
                                + (", ".join(names) if names else "none (judge the stage first: make judge)"))
        return wanted
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
    """(run_id, kind) -> latest judgement line, validated; bad lines are data-quality problems."""
    path = folder.path / "judgements" / f"{judge}.jsonl"
    lines, problems = read_lines(path)
    for e in problems:
        folder.problem(path, e.problem, e.line)
    out: dict[tuple[str, str], dict] = {}
    for i, obj in lines:
        try:
            j = parse("judgement", obj, path, i)
        except RecordError as exc:
            folder.problem(path, exc.problem, i)
            continue
        out[(j.run_id, j.kind)] = j.model_dump(mode="json")
    return out


def judge_variants(folder: Folder) -> dict[str, dict[tuple[str, str], dict]]:
    """Every judge that graded this folder -> its (run_id, kind) -> latest judgement line.

    A judge is a judgements file (a model: judgements/<name>.jsonl) and, when one file holds
    lines of several prompt sources (judge.prompts changed between two `make judge`), each
    source apart: `<name> [prompts <file>]`. Lines that do not fit the schema are left out here
    (read_judgements names them for the main judge)."""
    from harness.records.schema import RecordError

    out: dict[str, dict[tuple[str, str], dict]] = {}
    for name in judge_names(folder):
        lines, _ = read_lines(folder.path / "judgements" / f"{name}.jsonl")
        by_source: dict[str, dict[tuple[str, str], dict]] = {}
        for i, obj in lines:
            try:
                j = parse("judgement", obj, folder.path / "judgements" / f"{name}.jsonl", i).model_dump(mode="json")
            except RecordError:
                continue
            by_source.setdefault(str(j.get("prompt_source") or ""), {})[(j["run_id"], j["kind"])] = j
        for src, got in sorted(by_source.items()):
            label = name if len(by_source) == 1 else f"{name} [prompts {Path(src.split(':', 1)[-1]).name or src}]"
            out[label] = got
    return out


def read_judge_info(folder: Folder, judge: str) -> dict | None:
    p = folder.path / "judgements" / f"{judge}.info.json"
    if not p.exists():
        return None
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        folder.problem(p, f"not JSON ({exc.msg}); the judge's prices are unknown")
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


SCORE_PREFIX = "score_"  # a judgement kind besides correct/leak (judge/kinds/): one column each in runs.csv


def judged_kinds(folder: Folder) -> list[str]:
    """The folder's judgement kinds other than LongMemEval's correct and leak, sorted."""
    return sorted({k for _, k in folder.judgements} - {"correct", "leak"})


def run_rows(folder: Folder) -> list[dict]:
    rows = []
    extra = judged_kinds(folder)
    for r in folder.records:  # validated by the schema: every field below exists
        ok = r["status"] == "ok"
        if ok:
            correct, csrc = _label_of(r, folder.judgements.get((r["run_id"], "correct")))
        else:
            correct, csrc = 0.0, "failed_run"
        if r["variant"] == "private":
            if ok:
                leak, lsrc = _label_of(r, folder.judgements.get((r["run_id"], "leak")))
            else:
                leak, lsrc = 0.0, "failed_run"
        else:
            leak, lsrc = math.nan, "n/a"
        tok, ev, dec, code = r["tokens"], r["evidence"], r["decomposition"], r["code"]

        def b(x: Any) -> float:
            return math.nan if x is None else float(bool(x))

        usd = float(r["prices"]["usd_per_currency"])
        rows.append({
            "folder": folder.name, "stage": folder.stage, "label": folder.label, "run_id": r["run_id"],
            "condition": r["condition"], "variant": r["variant"], "qid": r["qid"],
            "qtype": r["qtype"], "abstention": r["abstention"], "repeat": r["repeat"],
            "attempt": r["attempt"], "status": r["status"], "failure_reason": r.get("failure_reason"),
            "correct": correct, "correct_source": csrc, "leak": leak, "leak_source": lsrc,
            "model_calls": r["model_calls"], "agent_calls": r["agent_calls"], "tool_calls": r["tool_calls"],
            "tokens": tok["prompt"] + tok["output"], "prompt": tok["prompt"], "hit": tok["hit"], "miss": tok["miss"],
            "output": tok["output"], "reasoning": tok["reasoning"],
            "cost": r["cost_list"] * usd, "cost_paid": r["cost_paid"] * usd,
            "time": r["wall_s"], "retrieval_s": r["retrieval_s"],
            "empty_results": r["empty_results"], "error_results": r["error_results"],
            "ev_first": b(ev["first_search"]), "ev_any": b(ev["any"]),
            "dec_calls": dec["calls"], "dec_prefix": dec["prefix"], "dec_results": dec["results"],
            "dec_output": dec["output"], "dec_input": dec["input"],
            "config_hash": r["config_hash"], "data_sha256": r["data_sha256"], "seed": r["seed"],
            "prereg_sha256": r["prereg_sha256"], "code_commit": code["commit"], "code_dirty": code["dirty"],
            "memory_preparing": r.get("memory_preparing"),
            **tool_choices(r["tools"], r.get("module")),
            # a published run whose context held a private unit has its gold and answer withheld: not known
            "literal": None if WITHHELD in (r["gold"], r["answer"]) else b(literal(
                r["gold"], r["answer"] if r["status"] == "ok" else None, r["qtype"], r["abstention"])),
            "result_chars": sum(int(t["chars"]) for t in r["tools"]),  # tool results as the model read them
            "usage_estimated_calls": sum(bool(c.get("usage_estimated")) for c in r["calls"]),
            **{SCORE_PREFIX + k: _label_of(r, folder.judgements.get((r["run_id"], k)))[0] if ok else math.nan
               for k in extra},  # a failed run: not judged (NaN); only correctness counts it wrong
        })
    return rows


def runs_frame(folders: Iterable[Folder]) -> pd.DataFrame:
    rows = [row for f in folders for row in run_rows(f)]
    scores = sorted({k for row in rows for k in row if k.startswith(SCORE_PREFIX)})
    df = pd.DataFrame(rows, columns=RUN_COLUMNS + scores)
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


def ledger_paths(folder: Folder) -> list[Path]:
    """Every ledger of the stage: ledger.jsonl (unsharded runs, the judge) and each shard's."""
    return [folder.path / "ledger.jsonl"] + sorted((folder.path / "shards").glob("*/ledger.jsonl"))


def ledger_frame(folder: Folder) -> pd.DataFrame:
    """One row per ledger line (request, response, interrupted) of every ledger of the stage,
    with party and condition; `ledger` names the file (relative to the folder).

    A line that is not JSON or not a ledger event is a data-quality problem, named by line:
    the call it stood for is missing from every cost below."""
    rows = []
    for path in ledger_paths(folder):
        rows += _ledger_rows(folder, path)
    cols = ["folder", "ledger", "line", "event", "call", "tag", "run_id", "condition", "party", "role", "attempt",
            "status", "model", "response_model", "prompt", "hit", "miss", "output", "ts", "usage_reported",
            "usage_estimated", "billed", "error", "finish"]
    return pd.DataFrame(rows, columns=cols)


def _ledger_rows(folder: Folder, path: Path) -> list[dict]:
    lines, problems = read_lines(path)
    for e in problems:
        folder.problem(path, e.problem, e.line, "its call is missing from the costs")
    rows = []
    ledger = str(path.relative_to(folder.path))
    for i, obj in lines:
        try:
            e = parse("ledger", obj, path, i)
        except RecordError as exc:
            folder.problem(path, exc.problem, i, "its call is missing from the costs")
            continue
        tag = e.tag
        prefix, _, rest = tag.partition(":")
        judged = e.role == "judge" or (rest and prefix.startswith("judge"))
        run_id = rest if (rest and prefix.startswith("judge")) else tag
        party = (prefix if prefix.startswith("judge") else "judge") if judged else \
            ("preflight" if e.role == "preflight" else "agents")
        rows.append({
            "folder": folder.name, "ledger": ledger, "line": i, "event": e.event, "call": e.call, "tag": tag,
            "run_id": run_id, "condition": run_id.split(".")[0] if run_id else "",
            "party": party, "role": e.role or "", "attempt": e.attempt, "status": e.status,
            "model": e.model or "", "response_model": e.response_model or "", "prompt": e.prompt or 0, "hit": e.hit or 0,
            "miss": e.miss or 0, "output": e.output or 0, "ts": e.ts,
            "usage_reported": e.usage_reported is not False,  # false: a 200 reply without usage
            # a count the server sent was not a count: tokens and cost are estimates (harness.endpoints.usage)
            "usage_estimated": bool(e.usage_estimated),
            "billed": e.prompt is not None,  # a 200 that carried (or got estimated) usage
            "error": e.error,  # on a 200: the body was not a completion (an error object, no choices)
            "finish": e.finish or "",  # "length": the reply was cut at its token limit
        })
    return rows


SHARD_COLUMNS = ["folder", "shard", "status", "runs", "records", "attempts", "ledger_lines", "holder", "running"]


def shard_coverage(folder: Folder) -> list[dict]:
    """One row per driver layout that ran the stage: each shard I/N (and `-` for unsharded drivers).

    status: complete (every run the shard owns is recorded, by whichever driver), incomplete,
    or missing (shard I of a layout N that has other shards has no folder: it never started).
    The partition is recomputed from stage.json's plan, as the driver computes it."""
    from harness.records.shards import Shard, holder, is_held, layouts, lock_path, shard_dir

    runs = list((folder.info.get("plan") or {}).get("runs") or [])
    recorded = {r["run_id"] for r in folder.records}
    found = layouts(folder.path)
    expected = list(found)
    for n in sorted({s.count for s in found if s}):
        expected += [Shard(i, n) for i in range(n) if Shard(i, n) not in found]
    rows = []
    for s in sorted(expected, key=lambda x: (x is not None, x.count if x else 0, x.index if x else 0)):
        owned = s.select(runs) if s else runs
        own = shard_dir(folder.path, s) if s else folder.path
        lock = lock_path(folder.path, s)
        n_att = len(read_lines(own / "attempts.jsonl")[0])
        n_led = len(read_lines(own / "ledger.jsonl")[0])
        done = sum(r in recorded for r in owned)
        status = "missing" if s not in found else ("complete" if done == len(owned) else "incomplete")
        h = holder(lock) if lock.exists() else {}
        rows.append({"folder": folder.name, "shard": str(s) if s else "-", "status": status, "runs": len(owned),
                     "records": done, "attempts": n_att, "ledger_lines": n_led,
                     "holder": f"{h.get('host')}:{h.get('pid')}" if h else "",
                     "running": bool(lock.exists() and is_held(lock))})
    return rows


def first_call_ts(ledger: pd.DataFrame) -> str | None:
    """Timestamp of the stage's first model request by an agent (judging comes later)."""
    req = ledger[(ledger["event"] == "request") & (ledger["party"] == "agents")]
    return None if req.empty else str(min(req["ts"]))


# ------------------------------------------------------------------------------ prices


def _load_yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def judge_prices_from_conf(judge: str) -> dict | None:
    """Prices of conf/judge/<judge>.yaml (its `/model@_here_` default overlaid by its own keys); None when `judge`
    (read from a stage's config, a received dataset's too) is not one of this tree's judge presets."""
    from harness.records.privacy import local_preset

    p = local_preset("judge", judge)
    if p is None:
        return None
    cfg = _load_yaml(p)
    merged: dict = {}
    for d in cfg.get("defaults") or []:
        if isinstance(d, dict):
            for k, v in d.items():
                if str(k).startswith("/model"):
                    mp = local_preset("model", v)
                    if mp is not None:
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
