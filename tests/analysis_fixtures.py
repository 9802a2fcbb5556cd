"""Run folders with known answers, written by hand for the analysis tests.

`Stage` collects runs (records), judgements and ledger lines and writes them in the
layout of harness.records / judge.run / harness.endpoints.proxy: stage.json, config.yaml,
records/<run_id>.json, judgements/<judge>.jsonl (+ .info.json) and ledger.jsonl.
Every number is chosen by the test, so expected results are computed by hand.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from harness.records.schema import RunRecord

PRICES = {"currency": "USD", "hit": 0.006, "miss": 0.30, "output": 1.20, "usd_per_currency": 1.0, "cny_per_usd": 7.2}
OFFPEAK = {"start_utc": "16:30", "end_utc": "00:30", "factor": 0.5}
JUDGE = "testjudge"
ON_PEAK_TS = "2026-10-08T10:00:00.000+00:00"
OFF_PEAK_TS = "2026-10-08T18:00:00.000+00:00"


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _call(role: str, prompt: int, hit: int, output: int, ts: str) -> dict:
    return {"role": role, "prompt": prompt, "hit": hit, "miss": prompt - hit, "output": output, "reasoning": 0,
            "cache_reported": True, "latency_s": 1.0, "finish": "stop", "cost_list": 0.0, "cost_paid": 0.0, "ts": ts}


def _tool(t: dict) -> dict:
    """A tool call as the loop logs it; tests give the name, sessions and the memory log."""
    return {"name": "memory_search", "arguments": "{}", "chars": 0, "sessions": [], "empty": False, "error": False,
            "retrieval_s": 0.0, "wall_s": 0.0, "cut": False, "log": None, **t}


def answered_record(run_id: str, qid: str, qtype: str, variant: str, question: str, gold: str, answer: str) -> dict:
    """A complete, valid record of a run that answered without calling a model (for judge tests)."""
    rec = {
        "schema_version": 1, "run_id": run_id, "condition": run_id.split(".")[0], "module": "none", "qid": qid,
        "qtype": qtype, "variant": variant, "repeat": 0, "org": f"{qid}@{variant}" if variant else qid, "attempt": 1,
        "status": "ok", "error": None, "question": question, "question_date": "2023/05/30 (Tue) 23:40",
        "gold": gold, "abstention": qid.endswith("_abs"), "answer": answer, "model_calls": 0, "agent_calls": 0,
        "tool_calls": 0, "tool_rounds": 0, "forced_answer": False,
        "tokens": {"prompt": 0, "hit": 0, "miss": 0, "output": 0, "reasoning": 0}, "cost_list": 0.0,
        "cost_paid": 0.0, "wall_s": 0.0, "setup_s": 0.0, "retrieval_s": 0.0, "empty_results": 0, "error_results": 0,
        "evidence": {"any": None, "first_search": None, "evidence_sessions": []},
        "decomposition": {"calls": 0, "prefix": 0, "results": 0, "output": 0, "input": 0},
        "calls": [], "tools": [], "prefetch": [], "condition_notes": {}, "condition_config": {}, "adapter": None,
        "endpoint": {}, "memory_space": None, "finished": ON_PEAK_TS, "stage": "smoke", "label": "smoke",
        "seed": 0, "config_hash": "c" * 64, "data_sha256": "d" * 64, "data_path": "hand-written",
        "versions": {}, "code": {"commit": None, "dirty": None}, "model": {}, "prices": PRICES, "offpeak": None,
        "index": {}, "encoder": {}, "prereg_sha256": None,
    }
    RunRecord.model_validate(rec)
    return rec


def run_id(condition: str, qid: str, variant: str = "", repeat: int = 0) -> str:
    return f"{condition}.{variant or 'lme'}.{qid}.r{repeat}"


@dataclass
class Stage:
    root: Path  # the runs root
    stage: str
    label: str | None = None
    prereg_sha: str | None = None
    conditions: list[str] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)
    judgements: list[dict] = field(default_factory=list)
    ledger: list[dict] = field(default_factory=list)
    created: str = "2026-10-08T09:00:00+00:00"
    data: dict = field(default_factory=lambda: {"path": "/nonexistent/data.json", "sha256": "d" * 64, "kind": "synth"})
    config_extra: dict = field(default_factory=dict)
    judge_prices: dict = field(default_factory=lambda: dict(PRICES))
    fidelity: dict | None = None  # stage.json's fidelity manifest (harness.run.fidelity), when the test gives one

    @property
    def path(self) -> Path:
        return self.root / self.stage / (self.label or self.stage)

    def add(self, condition: str, qid: str, *, qtype: str = "single-session-user", variant: str = "", repeat: int = 0,
            status: str = "ok", correct: bool | None = True, leak: bool | None = None, prompt: int = 1000,
            output: int = 100, hit: int = 0, calls: int = 1, tool_calls: int = 0, wall_s: float = 1.0,
            ts: str = ON_PEAK_TS, evidence: dict | None = None, decomposition: dict | None = None,
            tools: list | None = None, prefetch: list | None = None, judge_status: str = "ok",
            abstention: bool = False, module: str | None = None, attempt: int = 1, judged: bool = True,
            asked_calls: list[tuple[int, int]] | None = None, gold: str = "gold",
            answer: str = "an answer") -> dict:
        """One run; its model calls split `prompt`/`output` evenly (the remainder on the first call)."""
        if condition not in self.conditions:
            self.conditions.append(condition)
        rid = run_id(condition, qid, variant, repeat)
        call_list = []
        for i in range(calls):
            p = prompt // calls + (prompt % calls if i == 0 else 0)
            o = output // calls + (output % calls if i == 0 else 0)
            h = hit // calls + (hit % calls if i == 0 else 0)
            call_list.append(_call("agent", p, h, o, ts))
        for p, o in asked_calls or []:
            call_list.append(_call("asked:a1", p, 0, o, ts))
        tok_p = sum(c["prompt"] for c in call_list)
        tok_o = sum(c["output"] for c in call_list)
        tok_h = sum(c["hit"] for c in call_list)
        cost = sum((c["hit"] * PRICES["hit"] + c["miss"] * PRICES["miss"] + c["output"] * PRICES["output"]) / 1e6
                   for c in call_list)
        rec = {
            "schema_version": 1, "run_id": rid, "condition": condition, "module": module or condition, "qid": qid, "qtype": qtype,
            "variant": variant, "repeat": repeat, "org": f"{qid}@{variant}" if variant else qid,
            "attempt": attempt, "status": status, "error": None if status == "ok" else "model: failed",
            "question": f"question {qid}", "question_date": "2023/05/30 (Tue) 23:40", "gold": gold,
            "abstention": abstention,
            "answer": "" if status != "ok" else answer,
            "model_calls": len(call_list), "agent_calls": calls, "tool_calls": tool_calls,
            "tool_rounds": tool_calls if status == "ok" else None, "forced_answer": False if status == "ok" else None,
            "tokens": {"prompt": tok_p, "hit": tok_h, "miss": tok_p - tok_h, "output": tok_o, "reasoning": 0},
            "cost_list": cost, "cost_paid": cost, "wall_s": wall_s, "setup_s": 0.0, "retrieval_s": 0.01,
            "empty_results": 0, "error_results": 0,
            "evidence": evidence if evidence is not None else {"any": None, "first_search": None,
                                                                "evidence_sessions": []},
            "decomposition": decomposition if decomposition is not None else {
                "calls": calls, "prefix": call_list[0]["prompt"] if calls else 0, "results": 0,
                "output": sum(c["output"] for c in call_list if c["role"] == "agent"),
                "input": sum(c["prompt"] for c in call_list if c["role"] == "agent")},
            "calls": call_list, "tools": [_tool(t) for t in tools or []], "prefetch": prefetch or [],
            "condition_notes": {}, "condition_config": {"module": module or condition}, "adapter": None,
            "endpoint": {}, "memory_space": None, "finished": ts,
            "stage": self.stage, "label": self.label or self.stage, "data_path": self.data["path"],
            "versions": {"python": "3.11"}, "model": {"name": "test", "model": "test-model"},
            "index": {"name": "exact"}, "encoder": {"name": "minilm"},
            "config_hash": "c" * 64, "seed": 0, "data_sha256": self.data["sha256"], "prices": PRICES,
            "offpeak": OFFPEAK, "prereg_sha256": self.prereg_sha, "code": {"commit": "abc123", "dirty": False},
        }
        self.records.append(rec)
        for c in call_list:
            call_id = hashlib.sha256(f"{rid}{len(self.ledger)}".encode()).hexdigest()[:16]
            base = {"call": call_id, "tag": rid, "attempt": attempt, "role": c["role"], "model": "test-model",
                    "path": "/chat/completions"}
            self.ledger.append({**base, "event": "request", "ts": ts})
            self.ledger.append({**base, "event": "response", "ts": ts, "status": 200, "prompt": c["prompt"],
                                "hit": c["hit"], "miss": c["miss"], "output": c["output"], "reasoning": 0})
        if judged:
            kinds = [("correct", correct)] + ([("leak", leak)] if variant == "private" else [])
            for kind, label in kinds:
                if status != "ok":
                    self.judgements.append(self._judgement(rid, kind, False, "failed_run"))
                elif label is not None or judge_status != "ok":
                    self.judgements.append(self._judgement(rid, kind, label if judge_status != "failed" else None,
                                                           judge_status))
        return rec

    def _judgement(self, rid: str, kind: str, label, status: str) -> dict:
        rec = next(r for r in self.records if r["run_id"] == rid)
        return {"schema_version": 1, "run_id": rid, "kind": kind, "condition": rec["condition"],
                "variant": rec["variant"], "qid": rec["qid"], "qtype": rec["qtype"], "run_status": rec["status"],
                "judge": {"name": JUDGE, "model": "judge-model", "provider": "openai_compatible",
                          "base_url": "http://127.0.0.1:1/v1", "identity": "t:j", "params": {}},
                "prompt_source": "builtin", "prompt_source_sha256": "e" * 64, "template": "base",
                "answer_slot": None, "prompt_sha256": "f" * 64, "prompt": "p", "attempt": 1, "usage": None,
                "cost_list": 0.0, "cost_paid": 0.0, "error": None,
                "reply": "yes" if label else "no", "label": label, "status": status,
                "cached": False, "ts": "2026-10-09T00:00:00.000+00:00"}

    def judge_call(self, rid: str, prompt: int, output: int, ts: str = ON_PEAK_TS, model: str = "judge-model") -> None:
        call_id = hashlib.sha256(f"judge{rid}{len(self.ledger)}".encode()).hexdigest()[:16]
        base = {"call": call_id, "tag": f"judge:{rid}", "attempt": 1, "role": "judge", "model": model,
                "path": "/chat/completions"}
        self.ledger.append({**base, "event": "request", "ts": ts})
        self.ledger.append({**base, "event": "response", "ts": ts, "status": 200, "prompt": prompt, "hit": 0,
                            "miss": prompt, "output": output})

    def write(self) -> Path:
        p = self.path
        (p / "records").mkdir(parents=True, exist_ok=True)
        cfg = {"seed": 0, "stage": {"name": self.stage, "label": self.label or self.stage, "kind": "agents",
                                    "conditions": {c: {"module": c} for c in self.conditions}},
               "judge": {"name": JUDGE}, "cache_dir": str(self.root / ".cache"), **self.config_extra}
        (p / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        info = {"schema_version": 1, "kind": "agents", "versions": {"python": "3.11"},
                "config_hash": "c" * 64, "stage": self.stage, "label": self.label or self.stage, "seed": 0,
                "data": self.data, "plan": {"runs": [r["run_id"] for r in self.records]},
                "model": {"name": "test", "model": "test-model", "prices": PRICES, "offpeak": OFFPEAK},
                "prereg": {"path": "conf/prereg/hypotheses.yaml", "sha256": self.prereg_sha},
                "code": {"commit": "abc123", "dirty": False}, "created": self.created}
        if self.fidelity is not None:
            info["fidelity"] = self.fidelity
        (p / "stage.json").write_text(json.dumps(info, indent=1, sort_keys=True))
        for r in self.records:
            RunRecord.model_validate(r)  # the fixture writes what the driver would: fail here if it drifts
            (p / "records" / f"{r['run_id']}.json").write_text(json.dumps(r, indent=1, sort_keys=True))
        (p / "ledger.jsonl").write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in self.ledger))
        if self.judgements:
            (p / "judgements").mkdir(exist_ok=True)
            (p / "judgements" / f"{JUDGE}.jsonl").write_text(
                "".join(json.dumps(j, sort_keys=True) + "\n" for j in self.judgements))
            (p / "judgements" / f"{JUDGE}.info.json").write_text(json.dumps(
                {"judge": {"name": JUDGE, "model": "judge-model", "prices": self.judge_prices, "offpeak": OFFPEAK},
                 "prompts": {"source": "builtin", "source_sha256": "e" * 64}}, sort_keys=True))
        return p
