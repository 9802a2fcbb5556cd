"""Run a stage: every planned run once, concurrently, resumable after any crash.

Runs execute in the plan's seeded interleaved order on a pool of threads (the
agents), each as soon as the memory it reads is ready (harness.run.prepare);
every model call goes through the metering proxy. A run that is already
recorded is never run again (unless `retry_failed=true` and it failed);
a run that was started but not recorded (the driver died, or the stage stopped)
is run again under the next attempt number, and its earlier attempt is marked
`interrupted` in the ledger.

Two kinds of failure (harness.failures): a run whose own model calls fail after
all retries, or whose own conversation breaks the loop, is recorded as failed
(it counts as wrong). An environment failure (key refused, model not found,
upstream unreachable, services down, no sandbox) or an error of the harness
while preparing a run stops the stage: no new run starts, the affected runs stay
unrecorded, and the same command resumes once the cause is fixed.

An endpoint rejection every run gets (an unsupported parameter, tool calling not enabled)
is an environment failure too (harness.endpoints.fit); one that depends on the run (its
prompt exceeds the context window) fails that run with `failure_reason: context_length`.
A rejection the body does not explain goes through a circuit breaker (`Breaker`): when the
same rejection ends the first `model.breaker_runs` (3) runs of a stage before any run
succeeded, the stage stops and those runs stay unrecorded.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from datetime import datetime, timezone
from pathlib import Path

from omegaconf import OmegaConf
from tqdm import tqdm

import conditions
from harness.data.longmemeval import DATE_FORMAT, sha256_file
from harness.endpoints.client import Agent, Meter, ModelCallFailed
from harness.failures import EnvironmentFailure, classify
from harness.records import RunDir, StageMismatch
from harness.records.ledger import Ledger, read_ledger
from harness.records.ledger import mark_interrupted as mark_interrupted_lines
from harness.records.provenance import code_revision, versions
from harness.records.schema import SCHEMA_VERSION, DriverSession, MemoryPrep, RunRecord, StageInfo
from harness.run import fidelity
from harness.run.context import Environment, RunContext
from harness.run.loop import TranscriptRecorder, run_loop
from harness.run.budget import Budget, BudgetReached
from harness.run.plan import Plan, RunSpec
from harness.run.prepare import MemoryPreparer
from harness.run.prompts import system_prompt

REPO = Path(__file__).resolve().parents[2]
PREREG = REPO / "conf" / "prereg" / "hypotheses.yaml"


class StageStopped(RuntimeError):
    """The stage stopped before every run was recorded; the message says why and what to fix."""

    exit_code = 3  # harness.failures.STOPPED


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def stage_info(cfg, plan: Plan) -> dict:
    return {
        "schema_version": SCHEMA_VERSION, "kind": str(cfg.stage.get("kind") or "agents"),
        "stage": plan.stage, "label": plan.label, "seed": plan.seed, "data": plan.data,
        "plan": plan.to_dict(), "versions": versions(), "code": code_revision(REPO),
        "model": OmegaConf.to_container(cfg.model, resolve=True),
        "prereg": {"path": str(PREREG.relative_to(REPO)), "sha256": sha256_file(PREREG) if PREREG.exists() else None},
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "fidelity": fidelity.record(cfg, plan),
    }


def owned_runs(rd: RunDir, plan: Plan) -> list[RunSpec]:
    """The runs this driver may run: its shard's part of the plan, or the whole plan."""
    return rd.shard.select(plan.runs) if rd.shard else list(plan.runs)


def mark_interrupted(rd: RunDir, ledger: Ledger, reason: str = "no record", owned: set[str] | None = None) -> int:
    """Ledger lines of run attempts that never finished stay, and are marked as such.

    Only runs in `owned` (default: all) are marked: a shard never marks the runs other live
    shards are running. Marks already in any ledger of the stage are not repeated."""
    started = {(rid, a) for rid, last in rd.attempts().items() if owned is None or rid in owned
               for a in range(1, last + 1)}
    finished = {(r.run_id, r.attempt) for r in rd.records()}
    marked = {(e["tag"], e["attempt"]) for path in rd.ledger_paths() for e in read_ledger(path)
              if e.get("event") == "interrupted"}
    return mark_interrupted_lines(ledger, started, finished | marked, reason)


def decomposition(calls: list[dict]) -> dict:
    """Proposition 3: input tokens = c * prefix + what results and outputs add round by round."""
    own = [c for c in calls if c["role"] == "agent"]
    if not own:
        return {"calls": 0, "prefix": 0, "results": 0, "output": 0, "input": 0}
    added = sum(max(0, b["prompt"] - a["prompt"] - a["output"]) for a, b in zip(own, own[1:]))
    return {"calls": len(own), "prefix": own[0]["prompt"], "results": added,
            "output": sum(c["output"] for c in own), "input": sum(c["prompt"] for c in own)}


def evidence(q, access_sessions: list[str], tools: list[dict], search_tools: set[str] | None = None) -> dict:
    """Whether the run reached its evidence sessions, at all and with its first search. The searches
    are the tools the condition declares (SEARCH_TOOLS); a condition declaring none: every tool call
    that is not a read."""
    if search_tools:
        searches = [t for t in tools if t["name"] in search_tools]
    else:
        searches = [t for t in tools if (t.get("log") or {}).get("kind") != "read"]
    ev = q.evidence
    hit_any = bool(ev & set(access_sessions)) or any(ev & set(t["sessions"]) for t in tools)
    first = None
    if access_sessions:
        first = bool(ev & set(access_sessions))
    elif searches:
        first = bool(ev & set(searches[0]["sessions"]))
    return {"any": hit_any if (access_sessions or tools) else None, "first_search": first,
            "evidence_sessions": sorted(ev)}


class Breaker:
    """Holds the records of runs an unexplained rejection ended while no run of the stage has
    succeeded yet; `n` of them with the same rejection stop the stage (they stay unrecorded and
    run again on resume). The first successful run disarms it and releases what it held."""

    def __init__(self, n: int, armed: bool = True):
        self.n, self.armed = n, armed and n > 0
        self.held: list[tuple[RunRecord, str]] = []
        self.tripped = False
        self._lock = threading.Lock()

    def admit(self, record: RunRecord, signature: str | None) -> list[RunRecord]:
        """The records to write now; raises EnvironmentFailure when the breaker trips."""
        with self._lock:
            if self.tripped:
                return []  # the stage is stopping: runs still in flight stay unrecorded too
            if not self.armed:
                return [record]
            if record.status == "ok":
                self.armed = False
                out = [r for r, _ in self.held] + [record]
                self.held.clear()
                return out
            if record.failure_reason != "rejected" or signature is None:
                return [record]
            self.held.append((record, signature))
            same = [r for r, sig in self.held if sig == signature]
            if len(same) < self.n:
                return []
            self.tripped = True
        raise EnvironmentFailure(
            f"the same endpoint rejection ended the first {len(same)} runs of this stage and no run has "
            f"succeeded: {record.error}",
            "fit the request to the endpoint (model.accepts, model.params) or fix the server; the runs it ended "
            "stay unrecorded, and the same command runs them again")

    def release(self) -> list[RunRecord]:
        """At the stage's end: what is still held is recorded, unless the breaker tripped."""
        with self._lock:
            out = [] if self.tripped else [r for r, _ in self.held]
            self.held.clear()
            return out


class StageRunner:
    def __init__(self, cfg, plan: Plan, rd: RunDir, info: StageInfo, proxy_url: str, endpoint_info: dict):
        self.cfg, self.plan, self.rd, self.info = cfg, plan, rd, info
        self.proxy_url = proxy_url
        self.endpoint_info = endpoint_info
        self.env = Environment(cfg, plan)
        self.model_cfg = OmegaConf.to_container(cfg.model, resolve=True)
        self.totals = {"tokens": 0, "cost": 0.0, "failed": 0}
        self._lock = threading.Lock()
        self.t0 = time.perf_counter()  # the session's runs start: the times to first results count from here
        self.first: dict[str, float] = {}  # "run_started", "record" -> seconds after t0
        self.started_runs = 0
        self.preparer: MemoryPreparer | None = None
        self.breaker = Breaker(int(self.model_cfg.get("breaker_runs", 3)))
        self.signatures: dict[str, str | None] = {}

    def common(self) -> dict:
        return {"stage": self.plan.stage, "label": self.plan.label, "seed": self.plan.seed,
                "config_hash": self.info.config_hash, "data_sha256": self.plan.data["sha256"],
                "data_path": self.plan.data["path"], "versions": self.info.versions,
                "code": self.info.code.model_dump(),
                "model": {k: self.model_cfg.get(k) for k in ("name", "provider", "model", "params", "first_tool_choice",
                                                            "accepts")},
                "prices": self.model_cfg["prices"], "offpeak": self.model_cfg.get("offpeak"),
                "index": OmegaConf.to_container(self.cfg.index, resolve=True),
                "encoder": OmegaConf.to_container(self.cfg.encoder, resolve=True),
                "prereg_sha256": (self.info.prereg or {}).get("sha256")}

    def execute(self, spec: RunSpec, attempt: int) -> RunRecord:
        """Run one planned run. Raises EnvironmentFailure (or a harness error while preparing
        the run) instead of returning a record the environment's fault would have spoilt."""
        q = self.env.questions[spec.qid]
        cond_cfg = self.cfg.stage.conditions[spec.condition]
        meter = Meter(self.model_cfg["prices"], self.model_cfg.get("offpeak"))
        ctx = RunContext(spec, self.env)
        ctx.first_tool_choice = self.model_cfg.get("first_tool_choice")
        ctx.transcript = TranscriptRecorder()
        ctx.run_agent = lambda role: Agent(self.proxy_url, self.model_cfg, spec.run_id, attempt, meter, role=role,
                                           max_retries=int(self.model_cfg.get("max_retries", 6)),
                                           backoff_s=float(self.model_cfg.get("backoff_s", 1.0)))
        status, error, answer, loop, reason = "ok", None, "", None, None
        preparing = self.preparer is not None and self.preparer.stats["all_ready_s"] is None
        t0 = time.perf_counter()
        try:  # preparing the run (stores, indexes, prefetch): a failure here is not the run's
            access = conditions.load(str(cond_cfg.module)).build(cond_cfg, ctx)
        except Exception as exc:
            raise classify(exc) or exc
        setup_s = time.perf_counter() - t0 - access.retrieval_s
        system = system_prompt(q.date.strftime(DATE_FORMAT), access.text, org=ctx.is_org)
        t1 = time.perf_counter()
        try:
            loop = run_loop(ctx.run_agent("agent"), system, access.prefix + q.question, access.tools,
                            access.max_rounds, first_tool_choice=ctx.first_tool_choice, recorder=ctx.transcript)
            answer = loop.answer
        except EnvironmentFailure:
            raise
        except ModelCallFailed as exc:
            status, error, reason = "failed", f"model: {exc}", exc.reason
            with self._lock:
                self.signatures[spec.run_id] = exc.signature
        except Exception as exc:  # the run's own conversation broke the loop: recorded, never skipped
            env = classify(exc)
            if env is not None:
                raise env from exc
            status, error, reason = "failed", "".join(traceback.format_exception(exc))[-4000:], "loop"
        finally:
            loop_s = time.perf_counter() - t1
            for close in access.close:
                close()
        # time per question: the agent's loop plus any retrieval done for the prompt (prefetch);
        # building stores or indexing memory is setup, measured apart
        for text in ctx.transcript.prompts.values():  # before the record that names them
            self.rd.write_prompt(text)
        calls = meter.calls
        tok = {k: sum(c[k] for c in calls) for k in ("prompt", "hit", "miss", "output", "reasoning")}
        return RunRecord.model_validate({
            "schema_version": SCHEMA_VERSION,
            "run_id": spec.run_id, "condition": spec.condition, "module": str(cond_cfg.module),
            "qid": spec.qid, "qtype": q.qtype, "variant": spec.variant, "repeat": spec.repeat, "org": spec.org,
            "attempt": attempt, "status": status, "error": error, "failure_reason": reason,
            "question": q.question, "question_date": q.date.strftime(DATE_FORMAT), "gold": q.answer,
            "abstention": q.abstention, "answer": answer,
            "model_calls": len(calls), "agent_calls": sum(c["role"] == "agent" for c in calls),
            "tool_calls": len(meter.tools), "tool_rounds": loop.tool_rounds if loop else None,
            "forced_answer": loop.forced if loop else None,
            "tokens": tok, "cost_list": sum(c["cost_list"] for c in calls),
            "cost_paid": sum(c["cost_paid"] for c in calls),
            "wall_s": round(loop_s + access.retrieval_s, 4), "setup_s": round(setup_s, 4),
            "memory_preparing": preparing,
            "retrieval_s": round(access.retrieval_s + sum(t["retrieval_s"] for t in meter.tools), 6),
            "empty_results": sum(bool(t["empty"]) for t in meter.tools),
            "error_results": sum(bool(t["error"]) for t in meter.tools),
            "evidence": evidence(q, access.sessions, meter.tools, conditions.search_tools(str(cond_cfg.module))),
            "decomposition": decomposition(calls),
            "calls": calls, "tools": meter.tools, "prefetch": access.log,
            "condition_notes": access.notes,
            "condition_config": OmegaConf.to_container(cond_cfg, resolve=True),
            "adapter": meter.adapter, "endpoint": self.endpoint_info,
            # which encoder (and whether it is the study's), dense backend and lexical indexes served
            "memory_space": self.env.space_description(),
            "finished": _now(),
            "transcript": ctx.transcript.transcript(),
            **self.common(),
        })

    def run_one(self, spec: RunSpec, attempt: int) -> RunRecord:
        self._mark("run_started")
        self.rd.start_attempt(spec.run_id, attempt, _now())
        record = self.execute(spec, attempt)
        with self._lock:
            signature = self.signatures.pop(spec.run_id, None)
        for r in self.breaker.admit(record, signature):
            self.write(r)
        return record

    def write(self, record: RunRecord) -> None:
        self.rd.write_record(record)
        self._mark("record")
        with self._lock:
            self.totals["tokens"] += record.tokens.prompt + record.tokens.output
            self.totals["cost"] += record.cost_list
            self.totals["failed"] += record.status != "ok"

    def _mark(self, what: str) -> None:
        with self._lock:
            self.first.setdefault(what, round(time.perf_counter() - self.t0, 3))
            self.started_runs += what == "run_started"

    def session(self, started: str, pending: int, stop: str | None) -> DriverSession:
        """This session's line of sessions.jsonl: how long until the first run, record and ready memory."""
        prep = self.preparer.stats if self.preparer is not None else {
            "questions": 0, "ready": 0, "chunks": 0, "embedded": 0, "chunk_s": 0.0, "embed_s": 0.0,
            "first_ready_s": None, "all_ready_s": None}
        return DriverSession(started=started, ended=_now(), host=socket.gethostname(), pid=os.getpid(),
                             pending=pending, started_runs=self.started_runs, stopped=stop,
                             wall_s=round(time.perf_counter() - self.t0, 3),
                             first_run_started_s=self.first.get("run_started"),
                             first_record_s=self.first.get("record"),
                             memory=MemoryPrep(**{k: (round(v, 3) if isinstance(v, float) else v)
                                                  for k, v in prep.items()}))


def open_stage(cfg, plan: Plan, sweep: dict | None = None) -> tuple[RunDir, StageInfo]:
    """Open (or create) the stage folder; `sweep` (the job's overrides in a multirun) goes into stage.json."""
    rd = RunDir.for_stage(cfg)
    info = rd.open(cfg, {**stage_info(cfg, plan), "sweep": sweep})
    if info.data["sha256"] != plan.data["sha256"]:
        raise StageMismatch(f"{rd.root}: the data file changed since this stage started "
                            f"({info.data['sha256'][:12]} -> {plan.data['sha256'][:12]}); use a new stage.label")
    return rd, info


def pending_runs(rd: RunDir, plan: Plan, retry_failed: bool) -> tuple[list[RunSpec], int]:
    """Runs of this driver to do now (unrecorded, and failed ones when asked) and how many of
    its runs are recorded for good (by whichever driver: a record is never made twice)."""
    done = {r.run_id: r.status for r in rd.records()}
    again = {rid for rid, st in done.items() if st != "ok"} if retry_failed else set()
    owned = owned_runs(rd, plan)
    pending = [r for r in owned if r.run_id not in done or r.run_id in again]
    return pending, len(owned) - len(pending)


def run_stage(cfg, plan: Plan, rd: RunDir, info: StageInfo, endpoint, ledger: Ledger, proxy_url: str,
              pending: list[RunSpec], budget: Budget | None = None) -> dict:
    """Run `pending` through an open endpoint and proxy; returns this session's totals.

    Raises StageStopped when an environment failure (or a harness error) stopped it early, and
    BudgetReached when the spending cap did (runs in flight finish; none starts after it).
    """
    attempts = rd.attempts()
    concurrency = max(1, min(int(cfg.concurrency), int(cfg.model.get("max_concurrency") or cfg.concurrency)))
    ids = {r.run_id for r in pending}
    for r in rd.records():  # retry_failed: the failed attempt's calls stay in the ledger, marked
        if r.run_id in ids:
            ledger.append({"event": "interrupted", "tag": r.run_id, "attempt": r.attempt,
                           "reason": "failed run attempted again (retry_failed=true)", "ts": _now()})
    owned = {r.run_id for r in owned_runs(rd, plan)}
    mark_interrupted(rd, ledger, owned=owned)
    runner = StageRunner(cfg, plan, rd, info, proxy_url, endpoint.info)
    runner.breaker.armed = runner.breaker.armed and not any(r.status == "ok" for r in rd.records())
    started = _now()
    stop = None
    try:
        stop = _run_pool(runner, pending, attempts, concurrency, len(owned), len(owned) - len(pending), budget)
        for r in runner.breaker.release():  # failed runs the breaker held while no run had succeeded
            runner.write(r)
    except BaseException as exc:
        stop = f"{type(exc).__name__}: {exc}"[:300]
        raise
    finally:
        session = runner.session(started, len(pending), stop)
        rd.end_session(session)
        print(describe_session(session), file=sys.stderr)
        try:
            runner.env.close()
        except Exception as exc:  # services already gone: say so, but keep the reason the stage stopped
            if stop is None or classify(exc) is None:
                raise
            print(f"warning: could not close the memory space: {exc}", file=sys.stderr)
    t = runner.totals
    print(f"runs done: {t['failed']} failed in this session, {t['tokens']:,} tokens, "
          f"${t['cost']:.4f} at list price", file=sys.stderr)
    recorded = len(owned & {p.stem for p in rd.record_paths()})
    if stop == BUDGET:
        raise BudgetReached(budget.stopped(recorded, len(owned)))
    if stop is not None:
        mark_interrupted(rd, ledger, reason=f"stage stopped: {stop}"[:300], owned=owned)
        whose = f" of shard {rd.shard}" if rd.shard else ""
        raise StageStopped(f"stage stopped before every run{whose} was recorded ({recorded} of {len(owned)} "
                           f"recorded; the rest run on resume): {stop}")
    return t


def describe_session(s: DriverSession) -> str:
    m = s.memory
    fmt = lambda x: "-" if x is None else f"{x:.1f} s"  # noqa: E731
    mem = (f"memory of {m.ready}/{m.questions} questions ready ({m.chunks:,} chunks, {m.embedded:,} embedded, "
           f"the rest cached or repeated; first ready {fmt(m.first_ready_s)}, all {fmt(m.all_ready_s)}); "
           if m.questions else "")
    return (f"session: {s.started_runs} runs started in {s.wall_s:.1f} s; {mem}"
            f"first run started {fmt(s.first_run_started_s)}, first record {fmt(s.first_record_s)}")


def summary(rd: RunDir, labels: dict[str, bool | None] | None, judge_name: str | None) -> str:
    """Per condition: runs, failures, the share of runs that called a tool, tokens, and judged accuracy."""
    rows: dict[tuple[str, str], list[RunRecord]] = {}
    for r in rd.records():
        rows.setdefault((r.condition, r.variant), []).append(r)
    lines = [f"{'condition':<24}{'variant':<9}{'runs':>5}{'failed':>7}{'tool use':>9}{'tokens/run':>11}{'accuracy':>10}"]
    for (cond, var), rs in sorted(rows.items()):
        n = len(rs)
        used = sum(r.tool_calls > 0 for r in rs)
        tokens = sum(r.tokens.prompt + r.tokens.output for r in rs) / n
        judged = [labels.get(r.run_id) for r in rs] if labels else []
        acc = (f"{sum(bool(x) for x in judged) / n:>9.0%}" + ("*" if None in judged else " ")) if labels else "       -  "
        lines.append(f"{cond:<24}{var or '-':<9}{n:>5}{sum(r.status != 'ok' for r in rs):>7}"
                     f"{used / n:>9.0%}{tokens:>11,.0f}{acc}")
    if labels:
        lines.append(f"accuracy judged by {judge_name}; * = some runs not judged yet (counted wrong here)")
    return "\n".join(lines)


BUDGET = "budget"


def needs_memory(cfg):
    """spec -> does its condition read the memory space (declared by the module: NEEDS)?"""
    uses = {name: "memory_space" in getattr(conditions.load(str(c.module)), "NEEDS", ())
            for name, c in cfg.stage.conditions.items()}
    return lambda spec: uses[spec.condition]


def _run_pool(runner: StageRunner, pending: list[RunSpec], attempts: dict[str, int], concurrency: int,
              total: int, done: int, budget: Budget | None = None) -> str | None:
    """Run `pending`; returns why the stage stopped early, or None when every run was attempted.

    A free slot takes the first pending run (in the plan's order) that may start: one that
    needs no memory space, or whose question's memory is ready (harness.run.prepare). With
    `memory_first=true` no run starts before every question's memory is ready."""
    first = bool(runner.cfg.get("memory_first", False))
    preparer = MemoryPreparer(runner.env, pending, needs_memory(runner.cfg)).start()
    runner.preparer = preparer
    bar = tqdm(total=total, initial=done, unit="run", dynamic_ncols=True, file=sys.stderr, position=0)
    stop: list[str] = []
    waiting = list(pending)
    try:
        with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="agent") as pool:
            running = set()
            while waiting and not stop:
                if budget is not None and budget.exhausted:
                    stop.append(BUDGET)
                    break  # runs in flight finish; no new run starts
                if preparer.error is not None:
                    stop.append(_preparer_stop(preparer.error))
                    break
                may_start = not first or preparer.stats["all_ready_s"] is not None
                i = next((i for i, s in enumerate(waiting) if preparer.ready(s)), None) \
                    if len(running) < concurrency and may_start else None
                if i is not None:
                    spec = waiting.pop(i)
                    running.add(pool.submit(runner.run_one, spec, attempts.get(spec.run_id, 0) + 1))
                    continue
                if running:  # a slot frees up, or (within a second) another question is ready
                    finished, running = wait(running, timeout=1.0, return_when=FIRST_COMPLETED)
                    _collect(finished, bar, runner, stop)
                else:
                    preparer.wait(1.0)
            while running:
                finished, running = wait(running, return_when=FIRST_COMPLETED)
                _collect(finished, bar, runner, stop)
    finally:
        preparer.stop()
        bar.close()
    return stop[0] if stop else None


def _preparer_stop(exc: BaseException) -> str:
    env = classify(exc)
    if env is not None:
        return str(env)
    print("".join(traceback.format_exception(exc)), file=sys.stderr)
    return f"harness error while preparing memory: {type(exc).__name__}: {exc} (traceback above)"


def _collect(finished, bar, runner: StageRunner, stop: list[str]) -> None:
    for f in finished:
        exc = f.exception()
        if exc is None:
            bar.update(1)
        elif isinstance(exc, EnvironmentFailure):
            stop.append(str(exc))
        elif isinstance(exc, OSError):
            raise exc  # a storage error must stop the stage loudly
        else:  # a harness bug while preparing a run: stop, show it, record nothing
            tb = "".join(traceback.format_exception(exc))
            print(tb, file=sys.stderr)
            stop.append(f"harness error while preparing a run: {type(exc).__name__}: {exc} (traceback above)")
        t = runner.totals
        bar.set_postfix(tokens=f"{t['tokens']:,}", cost=f"${t['cost']:.4f}", failed=t["failed"])
