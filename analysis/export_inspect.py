"""`python -m analysis.export_inspect [runs=PATH ...] [out=inspect_logs] [judge=NAME]` — runs as Inspect logs.

So that a researcher can look inside any run with UK AISI's viewer (`inspect view`, what
`make view` starts) or read them with its dataframe API (`inspect_ai.analysis.samples_df`).
One log per stage folder x condition: task = condition, sample = run (id = question id, with
`:public`/`:private` in LongMemEval-Org), epoch = repeat + 1. Each sample holds the run's
transcript as chat messages and tool calls (the system prompt from prompts/<sha256>.txt),
the asked agents' dialogues as events, the judge's label as the `correct` score (the label
the analysis counts: a failed run is wrong, an unjudged run has no score), the leak label
for Org private runs, the count of private units retrieved under a view as the
`private_under_view` score, usage as model usage, and our measurements as metadata.
A failed run keeps its error; a run started but never recorded is a sample with an error.
A study with an export of its own names it in the study registry (harness/studies/: `Study.inspect`;
the personalization study's is analysis.inspect_personal, one log per method); a folder whose study is
not registered (a plugin's, not loaded) is left out and named (exit 1).

Arguments (key=value): runs= as for analysis.run (default every stage folder under runs/
but the pilots), out= (default inspect_logs; replaced as a whole, never a folder this
command did not write), judge= (default: the stage's judge or the only judgements file).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd
from inspect_ai.event import InfoEvent
from inspect_ai.log import (EvalConfig, EvalDataset, EvalError, EvalLog, EvalMetric, EvalResults, EvalRevision,
                            EvalSample, EvalScore, EvalSpec, EvalStats, write_eval_log)
from inspect_ai.model import (ChatMessageAssistant, ChatMessageSystem, ChatMessageTool, ChatMessageUser, ModelOutput,
                              ModelUsage)
from inspect_ai.scorer import Score
from inspect_ai.tool import ToolCall, ToolCallError

from harness import studies
from harness.failures import announce
from analysis.load import SCORE_PREFIX, AnalysisError, Folder, find_folders, ledger_frame, load_folder, runs_frame
from analysis.tables.fidelity import manifest_rows
from harness.run.replay import memory_logs, visibility_of
from harness.records import RunDir

MARKER = ".generated-by-export-inspect"
UNDER_VIEW = ("own", "shared")  # scopes whose view must never admit another agent's private unit


# ------------------------------------------------------------------------------ memory results


def retrieved(log: dict, org_run: bool) -> list[dict]:
    """Each unit a memory call returned: owner, session, round, private/public, and whether it is
    another agent's private unit under an own/shared view (which the view must never admit)."""
    view = log.get("view") or {}
    out = []
    for uid, owner in log.get("units") or []:
        parts = str(uid).split("|")
        vis = visibility_of(owner, org_run)
        out.append({"unit": uid, "owner": owner, "session": parts[1] if len(parts) > 2 else None,
                    "round": parts[2] if len(parts) > 2 else None, "visibility": vis,
                    "view": f"{view.get('scope')} of {view.get('agent')}",
                    "private_under_view": (org_run and vis == "private" and owner != view.get("agent")
                                           and view.get("scope") in UNDER_VIEW)})
    return out


def _line(u: dict) -> str:
    flag = "  <-- PRIVATE UNIT UNDER A VIEW" if u["private_under_view"] else ""
    return (f"{u['owner']} ({u['visibility']}) session {u['session']} round {u['round']} "
            f"[{u['view']}]{flag}")


# ------------------------------------------------------------------------------ messages


def _arguments(raw: str) -> tuple[dict, str | None]:
    try:
        args = json.loads(raw or "{}")
    except json.JSONDecodeError as exc:
        return {}, f"arguments are not valid JSON: {exc.msg}"
    return (args, None) if isinstance(args, dict) else ({}, "arguments are not a JSON object")


def messages(loop: dict, record: dict, rd: RunDir, model: str) -> list:
    """One loop of the transcript as Inspect chat messages, system prompt first."""
    org_run = bool(record["variant"])
    system = rd.prompt(loop["system_sha256"])
    out: list = [ChatMessageSystem(content=system if system is not None else
                                   f"(system prompt {loop['system_sha256']} is not in {rd.root}/prompts)",
                                   metadata={"sha256": loop["system_sha256"], "tools_offered": loop["tools"]})]
    names: dict[str, str] = {}
    for m in loop["messages"]:
        if m["role"] == "user":
            out.append(ChatMessageUser(content=m["content"]))
        elif m["role"] == "assistant":
            calls = []
            for c in m.get("tool_calls") or []:
                args, err = _arguments(c["arguments"])
                names[c["id"]] = c["name"]
                calls.append(ToolCall(id=c["id"], function=c["name"], arguments=args, parse_error=err))
            call = record["calls"][m["call"]] if m.get("call") is not None else None
            out.append(ChatMessageAssistant(content=m["content"], tool_calls=calls or None, model=model,
                                            metadata={"usage": call} if call else None))
        else:
            tool = record["tools"][m["tool"]] if m.get("tool") is not None else {}
            units = [u for log in memory_logs({"tools": [tool]}) for u in retrieved(log, org_run)]
            meta: dict[str, Any] = {k: tool.get(k) for k in ("chars", "cut", "empty", "error", "retrieval_s",
                                                              "sessions", "failure")}
            if units:
                meta["retrieved"] = [_line(u) for u in units]
                meta["private_under_view"] = sum(u["private_under_view"] for u in units)
            if m.get("asked"):
                meta["asked"] = [a["role"] for a in m["asked"]]
            err = ToolCallError("unknown", m["content"]) if tool.get("error") else None
            out.append(ChatMessageTool(content=m["content"], tool_call_id=m.get("tool_call_id"),
                                       function=names.get(m.get("tool_call_id") or "", tool.get("name")),
                                       error=err, metadata=meta))
    return out


def asked_loops(loop: dict) -> list[dict]:
    """Every asked agent's loop under this loop's tool calls, depth first."""
    out = []
    for m in loop["messages"]:
        for a in m.get("asked") or []:
            out.append(a)
            out += asked_loops(a)
    return out


def _render(msgs: list) -> str:
    """An asked agent's dialogue as Markdown, for the viewer's transcript."""
    parts = []
    for m in msgs:
        head = f"**{m.role}**" + (f" ({m.function})" if m.role == "tool" else "")
        body = m.text if m.text else ""
        if m.role == "assistant" and m.tool_calls:
            body += "".join(f"\n\ncalls `{c.function}({json.dumps(c.arguments, ensure_ascii=False)})`"
                            for c in m.tool_calls)
        lines = (m.metadata or {}).get("retrieved") if m.role == "tool" else None
        if lines:
            body += "\n\nretrieved:\n" + "\n".join(f"- {x}" for x in lines)
        parts.append(f"{head}\n\n{body}")
    return "\n\n---\n\n".join(parts)


# ------------------------------------------------------------------------------ samples


def _label(value: float) -> str | None:
    return None if pd.isna(value) else ("C" if value else "I")


def _judge_score(value: float, source: str, j: dict | None, answer: str, correct: bool = True) -> Score | None:
    if pd.isna(value):
        return None
    meta = {"source": source}
    if j:
        meta.update(judge=j["judge"]["name"], status=j["status"], prompt=j["prompt"], prompt_sha256=j["prompt_sha256"])
    reply = (j or {}).get("reply")
    explanation = (f"judge reply: {reply}" if reply is not None else
                   "the run failed: counted as wrong" if source == "failed_run" else source)
    return Score(value=_label(value) if correct else float(value), answer=answer, explanation=explanation,
                 metadata=meta)


def sample_id(record: dict) -> str:
    return f"{record['qid']}:{record['variant']}" if record["variant"] else record["qid"]


def model_name(record: dict) -> str:
    m = record.get("model") or {}
    return f"{m.get('provider') or 'openai'}/{m.get('model') or m.get('name')}"


def sample(record: dict, row: pd.Series, folder: Folder, rd: RunDir) -> EvalSample:
    model = model_name(record)
    loop = record.get("transcript")
    msgs = messages(loop, record, rd, model) if loop else []
    events = []
    for a in asked_loops(loop) if loop else []:
        events.append(InfoEvent(source=a["role"], data=_render(messages(a, record, rd, model))))
    org_run = bool(record["variant"])
    units = [u for log in memory_logs(record) for u in retrieved(log, org_run)]
    by_owner: dict[str, int] = {}
    for u in units:
        by_owner[u["owner"]] = by_owner.get(u["owner"], 0) + 1
    under_view = [_line(u) for u in units if u["private_under_view"]]
    scores: dict[str, Score] = {}
    s = _judge_score(row["correct"], row["correct_source"], folder.judgements.get((record["run_id"], "correct")),
                     record["answer"])
    if s is not None:
        scores["correct"] = s
    if record["variant"] == "private":
        s = _judge_score(row["leak"], row["leak_source"], folder.judgements.get((record["run_id"], "leak")),
                         record["answer"], correct=False)
        if s is not None:
            scores["leak"] = s
    for col in (c for c in row.index if c.startswith(SCORE_PREFIX)):  # registered judgement kinds (judge/kinds/)
        kind = col[len(SCORE_PREFIX):]
        s = _judge_score(row[col], "judge", folder.judgements.get((record["run_id"], kind)), record["answer"])
        if s is not None:
            scores[kind] = s
    if org_run:
        scores["private_under_view"] = Score(value=len(under_view), explanation="\n".join(under_view) or "none",
                                             metadata={"units": under_view})
    tok = record["tokens"]
    usage = ModelUsage(input_tokens=tok["prompt"], output_tokens=tok["output"],
                       total_tokens=tok["prompt"] + tok["output"], input_tokens_cache_read=tok["hit"],
                       reasoning_tokens=tok["reasoning"] or None, total_cost=record["cost_list"])
    interrupted = list(range(1, record["attempt"]))
    meta = {
        "run_id": record["run_id"], "condition": record["condition"], "variant": record["variant"],
        "qtype": record["qtype"], "abstention": record["abstention"], "repeat": record["repeat"],
        "status": record["status"], "attempt": record["attempt"], "interrupted_attempts": interrupted,
        "tokens_prompt": tok["prompt"], "tokens_hit": tok["hit"], "tokens_miss": tok["miss"],
        "tokens_output": tok["output"], "tokens_reasoning": tok["reasoning"],
        "cost_list_usd": record["cost_list"], "cost_paid_usd": record["cost_paid"],
        "evidence_any": record["evidence"]["any"], "evidence_first_search": record["evidence"]["first_search"],
        "retrieval_s": record["retrieval_s"], "wall_s": record["wall_s"], "setup_s": record["setup_s"],
        "model_calls": record["model_calls"], "tool_calls": record["tool_calls"],
        "units_by_owner": dict(sorted(by_owner.items())), "private_under_view": under_view,
        "correct_source": row["correct_source"],
        "transcript": "recorded" if loop else "not recorded (a record written before transcripts)",
    }
    if record["variant"]:
        meta["leak_source"] = row["leak_source"]
    error = None
    if record["status"] != "ok":
        first = (record["error"] or "failed").strip().splitlines()[-1]
        error = EvalError(message=first, traceback=record["error"] or "", traceback_ansi=record["error"] or "")
    finished = datetime.fromisoformat(record["finished"])
    return EvalSample(
        id=sample_id(record), epoch=record["repeat"] + 1, input=record["question"], target=record["gold"],
        messages=msgs, output=ModelOutput.from_content(model, record["answer"]), scores=scores or None,
        metadata=meta, events=events, model_usage={model: usage}, error=error,
        started_at=None, completed_at=finished, total_time=record["wall_s"], working_time=record["wall_s"])


def planned_run(run_id: str) -> dict:
    """A planned run id (harness.run.plan.RunSpec.run_id: condition.variant-or-lme.qid.rN) as its parts."""
    condition, variant, rest = run_id.split(".", 2)
    qid, _, repeat = rest.rpartition(".r")
    return {"run_id": run_id, "condition": condition, "variant": "" if variant == "lme" else variant, "qid": qid,
            "repeat": int(repeat)}


def unrecorded_sample(run: dict, attempt: int) -> EvalSample:
    """A run that started (`attempt` times) but has no record: the stage stopped or was killed."""
    msg = f"interrupted: started {attempt} time(s), never recorded (the stage stopped; it runs again on resume)"
    return EvalSample(id=f"{run['qid']}:{run['variant']}" if run.get("variant") else run["qid"],
                      epoch=int(run.get("repeat", 0)) + 1, input=f"(run {run['run_id']} not recorded)", target="",
                      metadata={"run_id": run["run_id"], "status": "interrupted", "attempts": attempt},
                      error=EvalError(message=msg, traceback=msg, traceback_ansi=msg))


# ------------------------------------------------------------------------------ logs


def eval_log(folder: Folder, condition: str, records: list[dict], runs: pd.DataFrame) -> EvalLog:
    rd = RunDir(folder.path)
    info = folder.info
    rows = runs[(runs["folder"] == folder.name) & (runs["condition"] == condition)].set_index("run_id")
    attempts = rd.attempts()
    samples = [sample(r, rows.loc[r["run_id"]], folder, rd) for r in records]
    planned = [r for r in map(planned_run, (info.get("plan") or {}).get("runs") or []) if r["condition"] == condition]
    recorded = {r["run_id"] for r in records}
    samples += [unrecorded_sample(r, attempts[r["run_id"]]) for r in planned
                if r["run_id"] not in recorded and r["run_id"] in attempts]
    missing = [r["run_id"] for r in planned if r["run_id"] not in recorded]
    first = records[0] if records else {}
    model = model_name(first) if first else str((info.get("model") or {}).get("model"))
    judged = rows[(rows["repeat"] == 0) & rows["correct"].notna()]
    metrics = {"accuracy": EvalMetric(name="accuracy", value=float(judged["correct"].mean()) if len(judged) else 0.0,
                                      params={"repeat": 0, "judged": len(judged), "judge": folder.judge})}
    scores = [EvalScore(name="correct", scorer=f"judge:{folder.judge}", metrics=metrics,
                        scored_samples=int(rows["correct"].notna().sum()),
                        unscored_samples=int(rows["correct"].isna().sum()))]
    code = info.get("code") or {}
    created = str(info.get("created"))
    fidelity = manifest_rows(folder, ledger_frame(folder))  # the log opens with what it measured against the paper
    ids = sorted({s.id for s in samples}, key=str)
    spec = EvalSpec(
        created=created, task=condition, task_id=f"{folder.name}/{condition}", run_id=folder.name,
        dataset=EvalDataset(name=_data_name(info), samples=len(ids), sample_ids=ids),
        model=model, config=EvalConfig(epochs=max([int(r.get("repeat", 0)) + 1 for r in planned] or [1])),
        revision=EvalRevision(type="git", origin="", commit=code.get("commit") or "", dirty=code.get("dirty")),
        metadata={"fidelity": [{k: r[k] for k in ("setting", "paper", "stage", "status")} for r in fidelity],
                  "fidelity_differs": [r["key"] for r in fidelity if r["status"] == "differs"],
                  "stage": folder.stage, "label": folder.label, "folder": folder.name, "seed": info.get("seed"),
                  "config_hash": info.get("config_hash"), "data_sha256": (info.get("data") or {}).get("sha256"),
                  "judge": folder.judge, "planned_runs": len(planned), "recorded_runs": len(records),
                  "accuracy_counts": "repeat 0, judged runs; a failed run counts as wrong (analysis.load)"})
    total = ModelUsage()
    for s in samples:
        for u in (s.model_usage or {}).values():
            total = total + u
    done = [r["finished"] for r in records]
    stats = EvalStats(started_at=created, completed_at=max(done) if done else "", model_usage={model: total})
    status = "success" if not missing else "error"
    error = None if not missing else EvalError(
        message=f"{len(missing)} of {len(planned)} planned runs not recorded", traceback="\n".join(missing),
        traceback_ansi="\n".join(missing))
    return EvalLog(eval=spec, status=status, results=EvalResults(total_samples=len(samples),
                   completed_samples=len(records), scores=scores), stats=stats, samples=samples, error=error)


def _data_name(info: dict) -> str:
    """The data file by its name, never its local path (the same for a folder and its published copy)."""
    return re.split(r"[\\/]", str((info.get("data") or {}).get("path") or ""))[-1]


def log_file_name(folder: Folder, condition: str) -> str:
    """Inspect's own pattern, <time>_<task>_<id>.eval, which its log list parses (no "_" inside the parts).
    Its parts come from records (a published dataset's are untrusted): one that is no plain name is refused."""
    try:
        created = datetime.fromisoformat(str(folder.info.get("created"))).astimezone(timezone.utc)
    except ValueError:
        raise AnalysisError(f"{folder.name}: stage.json's created {folder.info.get('created')!r} is no time") from None
    for what, part in (("condition", condition), ("stage", folder.stage), ("label", folder.label)):
        if not re.fullmatch(r"[^/\\\x00.][^/\\\x00]{0,199}", str(part)):  # no separator, no leading dot
            raise AnalysisError(f"{folder.name}: {what} {part!r} is no plain name; it cannot name a log file")
    return (f"{created.strftime('%Y-%m-%dT%H-%M-%S+00-00')}_{condition.replace('_', '-')}_"
            f"{folder.stage.replace('_', '-')}-{folder.label.replace('_', '-')}.eval")


def export(folders: Sequence[Folder], out: Path, own: Sequence[tuple[Path, Callable]] = (),
           judge: str | None = None) -> list[Path]:
    """Write every log into a fresh folder, then put it in place of `out` (`own`: the folders of a study
    with an Inspect export of its own, harness/studies/ `Study.inspect`, each with that step)."""
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
        raise AnalysisError(f"{out} exists and was not written by analysis.export_inspect; choose another out=")
    runs = runs_frame(folders) if folders else None
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    written = []
    try:
        for f in folders:
            for cond in f.condition_order():
                recs = [r for r in f.records if r["condition"] == cond]
                name = log_file_name(f, cond)
                write_eval_log(eval_log(f, cond, recs, runs), str(tmp / name))
                written.append(out / name)
        for path, eval_logs in own:
            for name, log in eval_logs(path, judge):
                write_eval_log(log, str(tmp / name))
                written.append(out / name)
        (tmp / MARKER).write_text("Rewritten by `python -m analysis.export_inspect` (make view); do not edit.\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return written


def parse_args(argv: Sequence[str]) -> dict:
    opts: dict = {"runs": [], "out": "inspect_logs", "judge": None, "runs_root": "runs"}
    for a in argv:
        if a in ("-h", "--help", "help"):
            print(__doc__)
            sys.exit(0)
        key, eq, value = a.partition("=")
        if eq and key.lower() in opts:
            key = key.lower()
            if key == "runs":
                opts["runs"] += [v for v in value.split(",") if v]
            else:
                opts[key] = value or None
        elif not eq and Path(a).exists():
            opts["runs"].append(a)
        else:
            raise AnalysisError(f"unknown argument {a!r}; see python -m analysis.export_inspect --help")
    return opts


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        opts = parse_args(argv)
        t0 = time.perf_counter()
        found = find_folders(opts["runs"] or None, opts["runs_root"])
        own, mine, left_out = [], [], []
        for f in found:  # each folder by its study (harness/studies/): its own export, or agent run records
            try:
                study = studies.get(f.info.get("kind"))
            except studies.StudyError as exc:  # a plugged-in study's folder, its plugin not loaded
                left_out.append(f"{f.path}: {exc}")
                continue
            (own.append((f.path, study.step("inspect"))) if study.inspect else mine.append(f))
        folders = [load_folder(f, opts["judge"]) for f in mine]
        folders = [f for f in folders if f.records or f.info.get("plan", {}).get("runs")]
        if not folders and not own:
            raise AnalysisError(f"no stage folders with runs under {opts['runs'] or opts['runs_root']}"
                                + "".join(f"; left out {why}" for why in left_out))
        written = export(folders, Path(opts["out"]), own, opts["judge"])
    except AnalysisError as exc:
        return announce(exc)  # error: ..., exit 2 (harness.failures)
    for f in folders:
        for p in f.problems:
            print(f"left out: {p['file']}: {p['problem']}", file=sys.stderr)
    for why in left_out:
        print(f"left out: {why}", file=sys.stderr)
    print(f"wrote {len(written)} Inspect log(s) for {len(folders) + len(own)} stage folder(s) to {opts['out']} "
          f"in {time.perf_counter() - t0:.1f} s")
    return 1 if left_out else 0


if __name__ == "__main__":
    sys.exit(main())
