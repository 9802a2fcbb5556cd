"""Personalization folders -> one row per trial x method, keyed on the model the endpoint reported.

Which folders: every stage folder of a study analysed here (harness/studies/personal.py),
by its purpose (`stage.purpose` in its config.yaml): `study` folders feed Tables 2, 4, 5,
the latency and exposure tables and Figure 3; `ablation` folders feed Table 6 only; `smoke`
folders (stage.purpose smoke, or a stage whose name says smoke) feed no paper table: found
by a search they are skipped, and said so; named explicitly they are refused; with
`smoke=true` they count as study folders and the report opens with a SMOKE warning.

Which model: the row's `model` is the model id the endpoint reported for the run's
assistant call (the metering proxy's ledger, `response_model`); a run without such a
reply takes the folder's reported assistant model, then the configured id
(`model.model`), then the config name. Two local models served behind one preset
(`model=ollama`) are so two rows, and one model run under two presets is one.

Latency is the paper's: `answer_s`, the assistant's answer call; `retrieval_s` and the
barrier wait are kept beside it, never added to it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from analysis.load import AnalysisError, Folder, find_folders, ledger_frame
from harness.records import RunDir
from judge.rubric import DIMENSIONS, load_rubric

PURPOSES = ("study", "ablation", "smoke")


def purpose(folder: Folder) -> str:
    p = (folder.config().get("stage") or {}).get("purpose")
    if p is not None:
        if str(p) not in PURPOSES:
            raise AnalysisError(f"{folder.name}: stage.purpose must be one of {PURPOSES}, got {p!r}")
        return str(p)
    return "smoke" if "smoke" in folder.stage else "study"


def select(paths, runs_root: str | Path = "runs", smoke: bool = False, log=print) -> list[Folder]:
    """The personalization folders to analyse; smoke folders as the module docstring says."""
    from harness import studies

    mine = studies.analysed_by("analysis.personal")
    folders = [f for f in find_folders(paths or None, runs_root) if f.info.get("kind") in mine]
    named = {Path(p).resolve() for p in paths or ()}
    kept = []
    for f in folders:
        if purpose(f) != "smoke" or smoke:
            kept.append(f)
        elif f.path.resolve() in named:
            raise AnalysisError(f"{f.name} is a smoke stage (it checks the pipeline; its numbers are no paper "
                                "table); smoke=true analyses it, and the report says SMOKE")
        else:
            log(f"analysis.personal: skipped smoke folder {f.name} (no paper table; smoke=true includes it)",
                file=sys.stderr)
    return kept


def reported_models(folder: Folder) -> tuple[dict[str, str], str]:
    """run_id -> the model the endpoint named in the run's assistant replies (else in any of the run's
    replies: every call of a run goes to the stage's one model), and the folder's (joined)."""
    led = ledger_frame(folder)
    if led.empty:
        return {}, ""
    d = led[(led["event"] == "response") & (led["party"] == "agents") & (led["status"] == 200)
            & (led["response_model"] != "")]
    per_run = {}
    for rid, g in d.groupby("run_id"):
        own = g[g["role"] == "assistant"]
        per_run[rid] = ", ".join(sorted(set((own if len(own) else g)["response_model"])))
    own = d[d["role"] == "assistant"]
    return per_run, ", ".join(sorted(set((own if len(own) else d)["response_model"])))


def judge_name(folder: Folder, judge: str | None) -> str | None:
    names = sorted(p.name.removesuffix(".rubric.jsonl") for p in (folder.path / "judgements").glob("*.rubric.jsonl"))
    if judge is not None:
        return judge if judge in names else None
    if len(names) > 1:
        raise AnalysisError(f"{folder.name}: several rubric judges {names}; pick one with judge=NAME")
    return names[0] if names else None


def searched_scope(r: dict) -> str | None:
    """Whose id a method's read searched, with the trial's user written <user>: Mem0's filters, the kernel's view."""
    ml = r.get("method_log") or {}
    user = r.get("user_id")
    if ml.get("filters"):
        return ", ".join(f"{k}=<user>" if v == user else f"{k}={v}" for k, v in sorted(ml["filters"].items()))
    v = ml.get("view")
    if v:
        return f"{v.get('scope')} view of {v.get('agent')} over " + ("<user>" if v.get("org") == user else str(v.get("org")))
    return None


def runs_frame(folders, judge: str | None = None) -> pd.DataFrame:
    rows = []
    for f in folders:
        rd = RunDir(f.path)
        name = judge_name(f, judge)
        lines = load_rubric(rd, name) if name else {}
        per_run, folder_model = reported_models(f)
        kind = purpose(f)
        for r in (x.model_dump(mode="json") for x in rd.records()):
            line = lines.get(r["run_id"]) or {}
            s, llm, kw = line.get("scores") or {}, line.get("llm") or {}, line.get("keyword") or {}
            m = r.get("model") or {}
            cc = r.get("condition_config") or {}
            barrier = r.get("barrier") or {}
            wait = r.get("barrier_wait_s", barrier.get("waited_s"))
            rows.append({
                "folder": f.name, "purpose": kind, "stage": r["stage"],
                "model": per_run.get(r["run_id"]) or folder_model or m.get("model") or m.get("name"),
                "model_source": "reported" if per_run.get(r["run_id"]) or folder_model else
                                "configured id" if m.get("model") else "config name",
                "model_config": m.get("name"), "model_id": m.get("model"),
                "condition": r["condition"], "trial_id": r["trial_id"], "status": r["status"],
                "encoder": (r.get("encoder") or {}).get("name"), "format": cc.get("format"), "threshold": cc.get("threshold"), "cap": cc.get("cap"),
                "words": r["answer_words"], "answer_s": r["answer_s"], "retrieval_s": r["retrieval_s"],
                "barrier_wait_s": wait, "wall_s": r["wall_s"], "calls": len(r["calls"]),
                # calls whose usage the server did not report as counts (harness.endpoints.usage): estimates
                "usage_estimated_calls": sum(bool(c.get("usage_estimated")) for c in r["calls"]),
                "calls_cut_length": sum(c.get("finish") == "length" for c in r["calls"]),  # cut at the token limit
                # the assistant's answer ended at its token limit (finish_reason length): shorter for that, Table 5
                "answer_cut_length": any(c.get("role") == "assistant" and c.get("finish") == "length"
                                         for c in r["calls"]),
                "assistant_prompt": (r.get("assistant_tokens") or {}).get("prompt"),
                "assistant_output": (r.get("assistant_tokens") or {}).get("output"),
                "tokens_prompt": r["tokens"]["prompt"], "tokens_output": r["tokens"]["output"],
                "cost_list": r["cost_list"], "n_injected": r["n_injected"], "n_candidates": r["n_candidates"],
                "injected_scores": [i.get("score") for i in r["injected"]],
                "below_threshold": ((r.get("method_log") or {}).get("dropped") or {}).get("below_threshold"),
                "injected_types": [i.get("memory_type") for i in r["injected"]],
                "foreign_items": r["foreign_items"], "exposure_private": r["exposure_private"],
                "conversation_retrieved": r["conversation_retrieved"],
                "conversation_injected": r["conversation_injected"],
                "audited_items": r.get("audited_items"), "prevented_items": r.get("prevented_items"),
                "prevented_conversation": r.get("prevented_conversation"), "queue_s": r.get("queue_s"),
                "written_items": r.get("written_items"), "unaudited_writes": r.get("unaudited_writes"),
                "searched_scope": searched_scope(r), "scope_items": ((r.get("method_log") or {}).get("read") or {})
                .get("visible"),
                "candidate_types": [i.get("memory_type") for i in r["candidates"]],
                "missed_writes": r["missed_writes"], "timed_out": bool(barrier.get("timed_out")),
                "barrier": barrier.get("barrier", "on" if barrier else None),
                "judge": name, "judge_status": line.get("status"), "hybrid": line.get("hybrid"),
                **{d: s.get(d) for d in DIMENSIONS},
                **{f"llm_{d}": llm.get(d) for d in DIMENSIONS}, **{f"kw_{d}": kw.get(d) for d in DIMENSIONS}})
    return pd.DataFrame(rows)
