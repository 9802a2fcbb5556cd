"""Run a stage: every planned run once, concurrently, resumable after any crash.

Runs execute in the plan's seeded interleaved order on a pool of threads (the
agents); every model call goes through the metering proxy. A run that is
already recorded is never run again; a run that was started but not recorded
(the driver died) is run again under the next attempt number, and its earlier
attempt is marked `interrupted` in the ledger. A run whose model calls fail
after all retries is recorded as failed (it counts as wrong), never skipped.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from omegaconf import OmegaConf
from tqdm import tqdm

import conditions
from harness.run.context import Environment, RunContext
from harness.data.longmemeval import DATE_FORMAT, sha256_file
from harness.run.loop import Agent, Meter, ModelCallFailed, run_loop
from harness.records.provenance import code_revision, versions
from harness.run.plan import Plan, RunSpec
from harness.run.prompts import system_prompt
from harness.endpoints.proxy import MeteringProxy
from harness.records.ledger import Ledger, read_ledger
from harness.records import RunDir, StageMismatch

PREREG = Path(__file__).resolve().parents[2] / "conf" / "prereg" / "hypotheses.yaml"


class EndpointError(RuntimeError):
    pass


@contextmanager
def model_endpoint(model_cfg, concurrency: int):
    """Yield (upstream base URL, API key or None, info) for the configured model."""
    if model_cfg.provider == "local":
        from harness.endpoints.local_model import LocalModel

        parallel = int(model_cfg.get("parallel", 1))
        with LocalModel(ctx_size=int(model_cfg.ctx_size), parallel=parallel) as lm:  # ctx per slot
            yield lm.base_url, None, {"local": lm.info()}
        return
    key = None
    if model_cfg.get("api_key_env"):
        key = os.environ.get(str(model_cfg.api_key_env))
        if not key and model_cfg.name in ("deepseek", "openai"):
            raise EndpointError(f"model={model_cfg.name} needs the environment variable {model_cfg.api_key_env}")
    yield str(model_cfg.base_url), key, {}


def sha256_of(path: Path) -> str | None:
    return sha256_file(path) if path.exists() else None


def stage_info(cfg, plan: Plan) -> dict:
    return {
        "stage": plan.stage, "label": plan.label, "seed": plan.seed, "data": plan.data,
        "plan": plan.to_dict(), "versions": versions(), "code": code_revision(Path(__file__).parent),
        "model": OmegaConf.to_container(cfg.model, resolve=True),
        "prereg": {"path": str(PREREG.relative_to(PREREG.parents[2])), "sha256": sha256_of(PREREG)},
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def mark_interrupted(rd: RunDir, ledger: Ledger, done: set[str]) -> int:
    """Ledger lines of attempts that never finished stay, and are marked as such."""
    marked = {(e["tag"], e["attempt"]) for e in read_ledger(rd.ledger_path) if e.get("event") == "interrupted"}
    n = 0
    for run_id, last in rd.attempts().items():
        for attempt in range(1, last + 1):
            finished = run_id in done and attempt == last
            if not finished and (run_id, attempt) not in marked:
                ledger.append({"event": "interrupted", "tag": run_id, "attempt": attempt,
                               "ts": datetime.now(timezone.utc).isoformat(timespec="milliseconds")})
                n += 1
    return n


def decomposition(calls: list[dict]) -> dict:
    """Proposition 3: input tokens = c * prefix + what results and outputs add round by round."""
    own = [c for c in calls if c["role"] == "agent"]
    if not own:
        return {"calls": 0, "prefix": 0, "results": 0, "output": 0, "input": 0}
    added = sum(max(0, b["prompt"] - a["prompt"] - a["output"]) for a, b in zip(own, own[1:]))
    return {"calls": len(own), "prefix": own[0]["prompt"], "results": added,
            "output": sum(c["output"] for c in own), "input": sum(c["prompt"] for c in own)}


def evidence(q, access_sessions: list[str], tools: list[dict]) -> dict:
    searches = [t for t in tools if t.get("log", {}).get("kind") != "read" and t["name"] != "ask_agent"]
    ev = q.evidence
    hit_any = bool(ev & set(access_sessions)) or any(ev & set(t["sessions"]) for t in tools)
    first = None
    if access_sessions:
        first = bool(ev & set(access_sessions))
    elif searches:
        first = bool(ev & set(searches[0]["sessions"]))
    return {"any": hit_any if (access_sessions or tools) else None, "first_search": first,
            "evidence_sessions": sorted(ev)}


class StageRunner:
    def __init__(self, cfg, plan: Plan, rd: RunDir, info: dict, proxy_url: str, endpoint_info: dict):
        self.cfg, self.plan, self.rd, self.info = cfg, plan, rd, info
        self.proxy_url = proxy_url
        self.endpoint_info = endpoint_info
        self.env = Environment(cfg, plan)
        self.model_cfg = OmegaConf.to_container(cfg.model, resolve=True)
        self.totals = {"tokens": 0, "cost": 0.0, "failed": 0}
        self._lock = threading.Lock()

    def common(self) -> dict:
        return {"stage": self.plan.stage, "label": self.plan.label, "seed": self.plan.seed,
                "config_hash": self.info["config_hash"], "data_sha256": self.plan.data["sha256"],
                "data_path": self.plan.data["path"], "versions": self.info["versions"], "code": self.info["code"],
                "model": {k: self.model_cfg.get(k) for k in ("name", "provider", "model", "params", "first_tool_choice")},
                "prices": self.model_cfg.get("prices"), "offpeak": self.model_cfg.get("offpeak"),
                "index": OmegaConf.to_container(self.cfg.index, resolve=True),
                "encoder": OmegaConf.to_container(self.cfg.encoder, resolve=True),
                "prereg_sha256": self.info.get("prereg", {}).get("sha256")}

    def execute(self, spec: RunSpec, attempt: int) -> dict:
        q = self.env.questions[spec.qid]
        cond_cfg = self.cfg.stage.conditions[spec.condition]
        meter = Meter(self.model_cfg["prices"], self.model_cfg.get("offpeak"))
        ctx = RunContext(spec, self.env)
        ctx.first_tool_choice = self.model_cfg.get("first_tool_choice")
        ctx.run_agent = lambda role: Agent(self.proxy_url, self.model_cfg, spec.run_id, attempt, meter, role=role,
                                           max_retries=int(self.model_cfg.get("max_retries", 6)),
                                           backoff_s=float(self.model_cfg.get("backoff_s", 1.0)))
        status, error, answer, access, loop = "ok", None, "", None, None
        t0 = time.perf_counter()
        setup_s = loop_s = 0.0
        try:
            access = conditions.load(str(cond_cfg.module)).build(cond_cfg, ctx)  # stores, indexes, prefetch
            setup_s = time.perf_counter() - t0 - access.retrieval_s
            system = system_prompt(q.date.strftime(DATE_FORMAT), access.text, org=ctx.is_org)
            t1 = time.perf_counter()
            try:
                loop = run_loop(ctx.run_agent("agent"), system, access.prefix + q.question, access.tools,
                                access.max_rounds,
                                first_tool_choice=ctx.first_tool_choice)
            finally:
                loop_s = time.perf_counter() - t1
                for close in access.close:
                    close()
            answer = loop.answer
        except ModelCallFailed as exc:
            status, error = "failed", f"model: {exc}"
        except Exception as exc:  # recorded as a failed run with its traceback, never skipped
            status, error = "failed", "".join(traceback.format_exception(exc))[-4000:]
        # time per question: the agent's loop plus any retrieval done for the prompt (prefetch);
        # building stores or indexing memory is setup, measured apart
        wall = loop_s + (access.retrieval_s if access else 0.0)
        calls = meter.calls
        tok = {k: sum(c[k] for c in calls) for k in ("prompt", "hit", "miss", "output", "reasoning")}
        record = {
            "run_id": spec.run_id, "condition": spec.condition, "module": str(cond_cfg.module),
            "qid": spec.qid, "qtype": q.qtype, "variant": spec.variant, "repeat": spec.repeat, "org": spec.org,
            "attempt": attempt, "status": status, "error": error,
            "question": q.question, "question_date": q.date.strftime(DATE_FORMAT), "gold": q.answer,
            "abstention": q.abstention, "answer": answer,
            "model_calls": len(calls), "agent_calls": sum(c["role"] == "agent" for c in calls),
            "tool_calls": len(meter.tools), "tool_rounds": loop.tool_rounds if loop else None,
            "forced_answer": loop.forced if loop else None,
            "tokens": tok, "cost_list": sum(c["cost_list"] for c in calls),
            "cost_paid": sum(c["cost_paid"] for c in calls),
            "wall_s": round(wall, 4), "setup_s": round(setup_s, 4),
            "retrieval_s": round((access.retrieval_s if access else 0.0) + sum(t["retrieval_s"] for t in meter.tools), 6),
            "empty_results": sum(bool(t["empty"]) for t in meter.tools),
            "error_results": sum(bool(t["error"]) for t in meter.tools),
            "evidence": evidence(q, access.sessions if access else [], meter.tools),
            "decomposition": decomposition(calls),
            "calls": calls, "tools": meter.tools, "prefetch": access.log if access else [],
            "condition_notes": access.notes if access else {},
            "condition_config": OmegaConf.to_container(cond_cfg, resolve=True),
            "adapter": meter.adapter, "endpoint": self.endpoint_info,
            # which encoder (and whether it is the study's), dense backend and lexical indexes served
            "memory_space": self.env.space_description(),
            "finished": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
            **self.common(),
        }
        return record

    def run_one(self, spec: RunSpec, attempt: int) -> dict:
        self.rd.start_attempt(spec.run_id, attempt, datetime.now(timezone.utc).isoformat(timespec="milliseconds"))
        record = self.execute(spec, attempt)
        self.rd.write_record(record)
        with self._lock:
            self.totals["tokens"] += record["tokens"]["prompt"] + record["tokens"]["output"]
            self.totals["cost"] += record["cost_list"]
            self.totals["failed"] += record["status"] != "ok"
        return record


def same_model(a, b) -> bool:
    return (a.get("provider"), a.get("model"), a.get("base_url")) == (b.get("provider"), b.get("model"), b.get("base_url"))


def run_stage(cfg, plan: Plan) -> RunDir:
    rd = RunDir.for_stage(cfg)
    info = rd.open(cfg, stage_info(cfg, plan))
    if info["data"]["sha256"] != plan.data["sha256"]:
        raise StageMismatch(f"{rd.root}: the data file changed since this stage started "
                            f"({info['data']['sha256'][:12]} -> {plan.data['sha256'][:12]}); use a new stage.label")
    done = rd.done()
    pending = [r for r in plan.runs if r.run_id not in done]
    attempts = rd.attempts()
    print(f"{rd.root}: {len(plan.runs)} runs planned, {len(done)} recorded, {len(pending)} to run", file=sys.stderr)
    judge_after = bool(cfg.stage.get("judge_after_run", False))
    judged = False
    if pending:
        concurrency = max(1, min(int(cfg.concurrency), int(cfg.model.get("max_concurrency") or cfg.concurrency)))
        ledger = Ledger(rd.ledger_path)
        mark_interrupted(rd, ledger, done)
        try:
            with model_endpoint(cfg.model, concurrency) as endpoint, \
                    MeteringProxy(endpoint[0], ledger, endpoint[1], float(cfg.model.get("timeout_s", 600)),
                                  str(cfg.model.model)) as proxy:
                runner = StageRunner(cfg, plan, rd, info, proxy.base_url, endpoint[2])
                runner.env.questions  # load (and validate) the questions before any agent starts
                _run_pool(runner, pending, attempts, concurrency, len(plan.runs), len(done))
                t = runner.totals
                print(f"runs done: {t['failed']} failed in this session, {t['tokens']:,} tokens, "
                      f"${t['cost']:.4f} at list price", file=sys.stderr)
                if judge_after and same_model(cfg.judge, cfg.model):
                    ledger.close()  # the judge appends to the same ledger through its own proxy
                    _judge(cfg, rd, endpoint)
                    judged = True
        finally:
            ledger.close()
    if judge_after and not judged:
        _judge(cfg, rd, None)
    print(summary(rd, str(cfg.judge.name) if judge_after else None), file=sys.stderr)
    return rd


def _judge(cfg, rd: RunDir, endpoint) -> None:
    from judge.run import judge_stage

    judge_stage(cfg, rd, endpoint=endpoint)  # prints its own summary


def summary(rd: RunDir, judge_name: str | None) -> str:
    """Per condition: runs, failures, the share of runs that called a tool, tokens, and judged accuracy."""
    labels = {}
    if judge_name:
        from judge.run import load_judgements

        labels = {rid: j.get("label") for (rid, kind), j in load_judgements(rd, judge_name).items() if kind == "correct"}
    rows: dict[tuple[str, str], list[dict]] = {}
    for r in rd.records():
        rows.setdefault((r["condition"], r["variant"]), []).append(r)
    lines = [f"{'condition':<24}{'variant':<9}{'runs':>5}{'failed':>7}{'tool use':>9}{'tokens/run':>11}{'accuracy':>10}"]
    for (cond, var), rs in sorted(rows.items()):
        n = len(rs)
        used = sum(r["tool_calls"] > 0 for r in rs)
        tokens = sum(r["tokens"]["prompt"] + r["tokens"]["output"] for r in rs) / n
        judged = [labels.get(r["run_id"]) for r in rs]
        acc = (f"{sum(bool(x) for x in judged) / n:>9.0%}" + ("*" if None in judged else " ")) if labels else "       -  "
        lines.append(f"{cond:<24}{var or '-':<9}{n:>5}{sum(r['status'] != 'ok' for r in rs):>7}"
                     f"{used / n:>9.0%}{tokens:>11,.0f}{acc}")
    if labels:
        lines.append(f"accuracy judged by {judge_name}; * = some runs not judged yet (counted wrong here)")
    return "\n".join(lines)


def _run_pool(runner: StageRunner, pending: list[RunSpec], attempts: dict[str, int], concurrency: int,
              total: int, done: int) -> None:
    bar = tqdm(total=total, initial=done, unit="run", dynamic_ncols=True, file=sys.stderr)
    try:
        with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="agent") as pool:
            running = set()
            for spec in pending:
                running.add(pool.submit(runner.run_one, spec, attempts.get(spec.run_id, 0) + 1))
                if len(running) >= concurrency:
                    finished, running = wait(running, return_when=FIRST_COMPLETED)
                    _collect(finished, bar, runner)
            while running:
                finished, running = wait(running, return_when=FIRST_COMPLETED)
                _collect(finished, bar, runner)
    finally:
        bar.close()
        runner.env.close()


def _collect(finished, bar, runner: StageRunner) -> None:
    for f in finished:
        f.result()  # a storage error here must stop the stage loudly
        bar.update(1)
        t = runner.totals
        bar.set_postfix(tokens=f"{t['tokens']:,}", cost=f"${t['cost']:.4f}", failed=t["failed"])
