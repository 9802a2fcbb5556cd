"""Shared pieces of the personalization tests: a scripted writer/assistant policy and a stage config."""

from __future__ import annotations

import json
import time
from pathlib import Path

from hydra import compose, initialize_config_dir

CONF = str(Path(__file__).resolve().parent.parent / "conf")


def last_user(req: dict) -> str:
    return next(m["content"] for m in reversed(req["messages"]) if m["role"] == "user")


class Script:
    """Writers echo the user's message into their JSON fields (so every item carries text unique to its
    user); Mem0's extraction gets one fact; the assistant repeats the start of its memory block.
    `writer_delay_s` makes writers late; `broken` names writers whose reply is not JSON; `hang` names
    writers that sleep `hang_s` (longer than the client's timeout)."""

    def __init__(self, writer_delay_s: float = 0.0, broken=(), hang=(), hang_s: float = 30.0):
        self.writer_delay_s, self.broken, self.hang, self.hang_s = writer_delay_s, set(broken), set(hang), hang_s

    def __call__(self, req: dict) -> dict:
        system = req["messages"][0]["content"]
        text = last_user(req)
        for name, field in (("ProfileAgent", "preferences"), ("TaskAgent", "project"),
                            ("ConversationExtractor", "note")):
            if system.startswith(f"You are {name}"):
                if name in self.hang:
                    time.sleep(self.hang_s)
                time.sleep(self.writer_delay_s)
                if name in self.broken:
                    return {"role": "assistant", "content": "sorry, no JSON today"}
                return {"role": "assistant", "content": json.dumps({field: [text] if field != "note" else text})}
        if "memory" in system.lower() and "json" in system.lower() and req.get("response_format"):
            return {"role": "assistant", "content": json.dumps({"memory": [{"text": "The user shared some facts: "
                                                                            + text[-120:]}]})}
        block = req["messages"][1]["content"] if len(req["messages"]) > 2 else ""
        return {"role": "assistant", "content": "Focus on this. " + block[:300]}


def stage_cfg(tmp: Path, fake_url: str, methods: list[str], n: int = 4, extra: list[str] = (),
              stage: str = "personal_smoke"):
    overrides = [f"stage={stage}", "model=vllm", f"model.base_url={fake_url}", "model.backoff_s=0.01",
                 "model.max_retries=2", f"runs_dir={tmp}/runs", f"cache_dir={tmp}/cache",
                 f"stage.trials.n={n}", f"stage.methods=[{','.join(methods)}]", *extra]
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def records(rd) -> dict[str, dict]:
    return {r.run_id: r.model_dump(mode="json") for r in rd.records()}


# ------------------------------------------------------------------------------ generated folders for the tables

def fake_folder(root: Path, stage: str, label: str, model: dict, runs: list[dict], reported: str | None = None,
                purpose: str | None = "study", judge: str = "fakejudge", trials_path: Path | None = None) -> Path:
    """A personalization stage folder written as the stage writes one (stage.json, config.yaml, records/, the
    ledger, rubric judgements), without running it: each `runs` entry gives condition, trial_id and optionally
    llm / keyword scores (dicts over the three dimensions), words, answer_s, wall_s, injected [(type, score)],
    n_candidates, exposure_private, status, format, threshold, calls. `reported` is the model id the endpoint named
    in each assistant reply (None: no ledger lines)."""
    import yaml

    from harness.data import personal as trials_data
    from harness.records.schema import SCHEMA_VERSION

    d = Path(root) / stage / label
    (d / "records").mkdir(parents=True)
    trials_path = trials_path or trials_data.ensure(Path(root) / "trials.json", 4, 0)
    code = {"commit": None, "dirty": None}
    info = {"schema_version": SCHEMA_VERSION, "kind": "personal", "config_hash": "x", "stage": stage, "label": label,
            "seed": 0, "data": {"path": str(trials_path), "sha256": "0", "n": 4},
            "plan": {"runs": [f"{r['trial_id']}__{r['condition']}" for r in runs]}, "versions": {}, "code": code,
            "model": model, "prereg": None, "created": "2026-01-01T00:00:00"}
    (d / "stage.json").write_text(json.dumps(info))
    stage_cfg = {"kind": "personal", "name": stage, "label": label, **({"purpose": purpose} if purpose else {})}
    (d / "config.yaml").write_text(yaml.safe_dump({"stage": stage_cfg, "model": model}))
    ledger, rubric = [], []
    for r in runs:
        rid = f"{r['trial_id']}__{r['condition']}"
        inj = [{"user_id": "u", "owner": "profile_agent", "memory_type": t, "sharing": "shared", "content": {},
                "seq": 1, "score": s} for t, s in r.get("injected", [])]
        cands = [{"user_id": "u", "owner": "profile_agent", "memory_type": t, "sharing": "shared", "content": {},
                  "seq": 1} for t, _ in r.get("injected", [])]
        cc = {"module": f"personal.{r['condition']}", "format": r.get("format", "statement"),
              **({"threshold": r["threshold"]} if "threshold" in r else {})}
        rec = {"stage": stage, "label": label, "seed": 0, "config_hash": "x", "data_sha256": "0",
               "data_path": str(trials_path), "versions": {}, "code": code, "model": model,
               "prices": {"currency": "USD", "hit": 0.0, "miss": 0.0, "output": 0.0, "usd_per_currency": 1.0},
               "offpeak": None, "index": {"name": "exact"}, "encoder": {"name": "minilm"},
               "schema_version": SCHEMA_VERSION, "run_id": rid, "trial_id": r["trial_id"], "user_id": "u",
               "condition": r["condition"], "module": cc["module"], "condition_config": cc, "attempt": 1,
               "status": r.get("status", "ok"), "error": None, "query": "What next?", "answer": "word " * r.get("words", 5),
               "answer_words": r.get("words", 5), "wall_s": r.get("wall_s", 1.0), "answer_s": r.get("answer_s", 1.0),
               "retrieval_s": 0.01, "block": "", "block_chars": 0, "injected": inj, "n_injected": len(inj),
               "candidates": cands, "n_candidates": r.get("n_candidates", len(cands)), "resolved_user": "u",
               "identity_rule": "request", "foreign_items": 0, "exposure_private": r.get("exposure_private", 0),
               "conversation_retrieved": r.get("conversation_retrieved", 0), "conversation_injected": 0,
               "barrier": None, "method_log": {}, "missed_writes": None, "writes_before_read": None,
               "failed_writes": None, "unfinished_writes": None, "write_errors": [], "writes": [], "calls": r.get("calls", []),
               "calls_by_role": {}, "tokens": {"prompt": 100, "hit": 0, "miss": 100, "output": 10},
               "assistant_tokens": {"prompt": 90, "output": 10, "latency_s": r.get("answer_s", 1.0)},
               "cost_list": 0.0, "cost_paid": 0.0, "finished": "2026-01-01T00:00:00", "kind": "personal"}
        (d / "records" / f"{rid}.json").write_text(json.dumps(rec))
        if reported:
            ledger.append({"event": "response", "tag": rid, "attempt": 1, "ts": "t", "role": "assistant",
                           "status": 200, "model": model.get("model"), "response_model": reported})
        if "llm" in r:
            rubric.append({"run_id": rid, "kind": "rubric", "condition": r["condition"], "trial_id": r["trial_id"],
                           "model": model.get("name"), "judge": {"name": judge}, "hybrid": False, "prompt": None,
                           "prompt_sha256": None, "status": "ok", "llm": r["llm"], "keyword": r.get("keyword"),
                           "scores": {k: float(v) for k, v in r["llm"].items()}, "cached": False, "error": None,
                           "ts": "t"})
    (d / "ledger.jsonl").write_text("".join(json.dumps(e) + "\n" for e in ledger))
    if rubric:
        (d / "judgements").mkdir()
        (d / "judgements" / f"{judge}.rubric.jsonl").write_text("".join(json.dumps(e) + "\n" for e in rubric))
    return d


def scores(p: int, t: int, i: int) -> dict:
    return {"profile_usage": p, "task_usage": t, "integration": i}
