"""The personalization study's stage folders as Inspect logs (what analysis.export_inspect writes for them).

One log per stage folder x method: sample = trial (id = trial id), holding the assistant's
call as it was sent (its system prompt from prompts/<sha256>.txt, the injected block as a
second system message, the user's query) and its answer; the rubric judge's three scores
(judge/rubric.py; a failed run has none); and the measurements as metadata — answer_s (the
paper's latency) with retrieval_s and barrier_wait_s beside it, what was injected, missed
writes, foreign items, exposure. A failed run keeps its error; a run started but never
recorded is a sample with an error.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from inspect_ai.log import (EvalConfig, EvalDataset, EvalError, EvalLog, EvalMetric, EvalResults, EvalRevision,
                            EvalSample, EvalScore, EvalSpec, EvalStats)
from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageUser, ModelOutput, ModelUsage
from inspect_ai.scorer import Score

from harness.records import RunDir

DIMENSIONS = ("profile_usage", "task_usage", "integration")  # judge/rubric.py's
META = ("run_id", "condition", "user_id", "status", "failure_reason", "attempt", "answer_s", "retrieval_s",
        "barrier_wait_s", "wall_s", "n_injected", "n_candidates", "missed_writes", "foreign_items", "exposure_private",
        "conversation_injected", "answer_words", "cost_list", "cost_paid")


def rubric_judge(rd: RunDir, judge: str | None) -> str | None:
    """The rubric judge to show: the one asked for, or the folder's only rubric file."""
    names = sorted(p.name[: -len(".rubric.jsonl")] for p in (rd.root / "judgements").glob("*.rubric.jsonl"))
    if judge:
        return judge if judge in names else None
    return names[0] if len(names) == 1 else None


def _messages(r: dict, rd: RunDir, model: str) -> list:
    t = r.get("transcript")
    if not t:
        return []
    system = rd.prompt(t["system_sha256"])
    out: list = [ChatMessageSystem(content=system if system is not None else
                                   f"(system prompt {t['system_sha256']} is not in {rd.root}/prompts)")]
    for m in t["messages"]:
        cls = {"system": ChatMessageSystem, "user": ChatMessageUser}.get(m["role"])
        out.append(cls(content=m["content"]) if cls else ChatMessageAssistant(content=m["content"], model=model))
    return out


def sample(r: dict, line: dict | None, rd: RunDir) -> EvalSample:
    m = r.get("model") or {}
    model = f"{m.get('provider') or 'openai'}/{m.get('model') or m.get('name')}"
    scores = {}
    if line and line.get("scores"):
        for d in DIMENSIONS:
            scores[d] = Score(value=float(line["scores"][d]), answer=r["answer"],
                              explanation=f"judge reply: {line.get('reply')}",
                              metadata={"judge": (line.get("judge") or {}).get("name"), "hybrid": line.get("hybrid")})
    tok = r["tokens"]
    usage = ModelUsage(input_tokens=tok["prompt"], output_tokens=tok["output"], total_tokens=tok["prompt"] + tok["output"],
                       input_tokens_cache_read=tok.get("hit"), total_cost=r["cost_list"])
    error = None
    if r["status"] != "ok":
        first = (r["error"] or "failed").strip().splitlines()[-1]
        error = EvalError(message=first, traceback=r["error"] or "", traceback_ansi=r["error"] or "")
    meta = {k: r.get(k) for k in META} | {"rubric": (line or {}).get("status"), "block_chars": r["block_chars"]}
    return EvalSample(id=r["trial_id"], epoch=1, input=r["query"], target="", messages=_messages(r, rd, model),
                      output=ModelOutput.from_content(model, r["answer"]), scores=scores or None, metadata=meta,
                      model_usage={model: usage}, error=error, completed_at=datetime.fromisoformat(r["finished"]),
                      total_time=r["wall_s"], working_time=r["answer_s"])


def _unrecorded(run_id: str, attempts: int) -> EvalSample:
    msg = f"interrupted: started {attempts} time(s), never recorded (the stage stopped; it runs again on resume)"
    return EvalSample(id=run_id.split("__")[0], epoch=1, input=f"(run {run_id} not recorded)", target="",
                      metadata={"run_id": run_id, "status": "interrupted", "attempts": attempts},
                      error=EvalError(message=msg, traceback=msg, traceback_ansi=msg))


def eval_logs(root: Path, judge: str | None = None) -> list[tuple[str, EvalLog]]:
    """(file name, log) per method of one personalization stage folder."""
    from judge.rubric import load_rubric

    rd = RunDir(root)
    info = rd.stage()
    name = rubric_judge(rd, judge)
    rubric = load_rubric(rd, name) if name else {}
    records = [r.model_dump(mode="json") for r in rd.records()]
    planned = list(info.plan.get("runs") or [])
    attempts = rd.attempts()
    created = datetime.fromisoformat(str(info.created)).astimezone(timezone.utc)
    out = []
    for cond in sorted({rid.rsplit("__", 1)[1] for rid in planned} | {r["condition"] for r in records}):
        recs = [r for r in records if r["condition"] == cond]
        done = {r["run_id"] for r in recs}
        mine = [rid for rid in planned if rid.rsplit("__", 1)[1] == cond]
        samples = [sample(r, rubric.get(r["run_id"]), rd) for r in recs]
        samples += [_unrecorded(rid, attempts[rid]) for rid in mine if rid not in done and rid in attempts]
        missing = [rid for rid in mine if rid not in done]
        model = str((info.model or {}).get("model"))
        scored = [s for s in samples if s.scores]
        metrics = {d: EvalMetric(name=d, value=sum(s.scores[d].value for s in scored) / len(scored) if scored else 0.0,
                                 params={"scored": len(scored), "judge": name}) for d in DIMENSIONS}
        spec = EvalSpec(created=str(info.created), task=cond, task_id=f"{info.stage}/{info.label}/{cond}",
                        run_id=f"{info.stage}/{info.label}",
                        dataset=EvalDataset(name=str(info.data.get("path")), samples=len(samples),
                                            sample_ids=sorted({s.id for s in samples}, key=str)),
                        model=model, config=EvalConfig(epochs=1),
                        revision=EvalRevision(type="git", origin="", commit=info.code.commit or "",
                                              dirty=info.code.dirty),
                        metadata={"fidelity": (info.fidelity or {}).get("rows"), "stage": info.stage,
                                  "label": info.label, "kind": "personal", "seed": info.seed,
                                  "config_hash": info.config_hash, "data_sha256": info.data.get("sha256"),
                                  "judge": name, "planned_runs": len(mine), "recorded_runs": len(recs),
                                  "latency": "answer_s: the assistant's answer call (the paper's latency)"})
        total = ModelUsage()
        for s in samples:
            for u in (s.model_usage or {}).values():
                total = total + u
        log = EvalLog(eval=spec, status="success" if not missing else "error",
                      results=EvalResults(total_samples=len(samples), completed_samples=len(recs),
                                          scores=[EvalScore(name="rubric", scorer=f"rubric:{name}", metrics=metrics,
                                                            scored_samples=len(scored),
                                                            unscored_samples=len(samples) - len(scored))]),
                      stats=EvalStats(started_at=str(info.created),
                                      completed_at=max((r["finished"] for r in recs), default=""),
                                      model_usage={model: total}), samples=samples,
                      error=None if not missing else EvalError(
                          message=f"{len(missing)} of {len(mine)} planned runs not recorded",
                          traceback="\n".join(missing), traceback_ansi="\n".join(missing)))
        fname = (f"{created.strftime('%Y-%m-%dT%H-%M-%S+00-00')}_{cond.replace('_', '-')}_"
                 f"{info.stage.replace('_', '-')}-{info.label.replace('_', '-')}.eval")
        out.append((fname, log))
    return out
