"""Run a stage: every planned run once, concurrently, resumable after any crash — for every study.

The driver is generic over a study's run step (`RunStep`: the agent stages' is
harness.run.agents, the personalization study's harness.personal.step): the step plans
the runs, says what the preflight checks and sends, forecasts the cost and executes one
run into a record. Everything else is here, the same for every study.

Runs execute in the plan's seeded interleaved order on a pool of threads, each as soon as
the step says it may start (the agents' memory preparation, harness.run.prepare); every
model call goes through the metering proxy. A run that is already recorded is never run
again (unless `retry_failed=true` and it failed); a run that was started but not recorded
(the driver died, or the stage stopped) is run again under the next attempt number, and
its earlier attempt is marked `interrupted` in the ledger.

Two kinds of failure (harness.failures): a run whose own model calls fail after all
retries, or whose own conversation breaks, is recorded as failed (it counts as wrong). An
environment failure (key refused, model not found, upstream unreachable, services down, no
sandbox) or an error of the harness while preparing a run stops the stage: no new run
starts, the affected runs stay unrecorded, and the same command resumes once the cause is
fixed.

An endpoint rejection every run gets (an unsupported parameter, tool calling not enabled)
is an environment failure too (harness.endpoints.fit); one that depends on the run (its
prompt exceeds the context window) fails that run with `failure_reason: context_length`.
A server that keeps failing is the environment's too (`Breaker`, harness.endpoints.liveness, the
judges' too): a run out of retries or rejected in a way the body does not explain is held, and
recorded failed only when a later run succeeds (the server kept answering others); `model.breaker_runs`
(3) such runs in a row (out of retries, whatever their questions, or with the same rejection), one the server's plain probe
then fails too, or runs still held when the stage ends stop the stage with them unrecorded, whatever
succeeded earlier. A call the spending cap refuses (the metering proxy, harness.run.budget) leaves its
run unrecorded and stops the stage with exit 4. When the stage stops (but for the spending cap and a scheduler's SIGTERM, which let
the runs in flight finish) the step's `abort` is set: the runs in flight send no further call and wait no
further retry (harness.endpoints.client), the proxy forwards nothing more, and the pool is joined before
the driver returns. A record that does not validate is a bug report (bugs/), and that run
is recorded failed (`record_invalid`), never a stage stop (`validated`).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from pydantic import BaseModel
from tqdm import tqdm

from harness.data.longmemeval import sha256_file
from harness.failures import STOPPED, CapReached, EnvironmentFailure, Interrupted, StageStopping, classify
from harness import studies
from harness.endpoints.liveness import Breaker
from harness.records import RunDir, StageMismatch
from harness.records.ledger import Ledger, read_ledger
from harness.records.ledger import mark_interrupted as mark_interrupted_lines
from harness.records.provenance import code_revision, versions
from harness.records.schema import SCHEMA_VERSION, DriverSession, MemoryPrep, StageInfo
from harness.records.shards import DriverLock, Shard
from harness.run.budget import Budget, BudgetReached
from harness.run.prepare import MemoryPreparer
from harness.run.settings import StageSettings, endpoint_node, stage_node

REPO = Path(__file__).resolve().parents[2]
PREREG = REPO / "conf" / "prereg" / "hypotheses.yaml"


class StageStopped(RuntimeError):
    """The stage stopped before every run was recorded; the message says why and what to fix."""

    exit_code = 3  # harness.failures.STOPPED


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")




def stage_info(stage: StageSettings, model: dict, plan, fidelity_record: dict, **extra) -> dict:
    """stage.json's content for `plan` (anything with stage, label, seed, data, runs, to_dict()); stage: the
    stage's typed node, model: the model preset as recorded (resolved)."""
    return {
        "schema_version": SCHEMA_VERSION, "kind": studies.get(stage.get("kind")).kind,
        "record": studies.get(stage.get("kind")).record,
        "stage": plan.stage, "label": plan.label, "seed": plan.seed, "data": plan.data,
        "plan": plan.to_dict(), "versions": versions(), "code": code_revision(REPO),
        "model": model,
        "prereg": {"path": str(PREREG.relative_to(REPO)), "sha256": sha256_file(PREREG) if PREREG.exists() else None},
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "fidelity": fidelity_record, **extra,
    }


class RunStep:
    """What a study gives the driver; one object per command (see harness.run.agents for the agents').

    Before the runs: `plan` (runs with a `run_id`, plus stage, label, seed, data, to_dict()),
    `stage_info()`, `render_plan()`, `fidelity_rows()`, `static_checks(judge_too)` (what costs
    nothing), `request_shapes(judge_too)` (harness.run.preflight.Shape: one metered call each),
    `forecast()` and `concurrency()`. The runs: `start(...)` once the endpoint and proxy are
    open, `prepare(pending)` (which runs may start when), `execute(spec, attempt) -> (record,
    breaker signature or None)`, which raises EnvironmentFailure rather than record a run the
    environment spoilt, and `close()`. After: `summary(rd, labels, judge_name)`."""

    kind = "agents"
    plan: Any

    def __init__(self, cfg):
        self.cfg = cfg
        self.model_cfg = endpoint_node(cfg.model)  # the typed model node every client of the stage is built from
        self.stage: StageSettings = stage_node(cfg)  # the stage's typed node its planner and driver read
        self.rd: RunDir | None = None
        self.info: StageInfo | None = None
        self.endpoint = None
        self.proxy_url = ""
        self.abort = threading.Event()  # set when the stage stops: the runs' meters and the proxy send nothing more

    def start(self, rd: RunDir, info: StageInfo, endpoint, proxy_url: str) -> None:
        self.rd, self.info, self.endpoint, self.proxy_url = rd, info, endpoint, proxy_url

    def prepare(self, pending: list) -> MemoryPreparer:
        """By default every run may start at once (a preparer with nothing to prepare)."""
        return MemoryPreparer(None, pending, lambda spec: False).start()

    def execute(self, spec, attempt: int) -> tuple[BaseModel, str | None]:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def concurrency(self) -> int:
        return max(1, int(self.cfg.concurrency))


def validated(rd: RunDir, build, data: dict, blank: dict) -> BaseModel:
    """`build(data)`, a record; one that does not validate is a bug of the harness, never a stage stop:
    the data (the model's replies in its transcript and calls) goes to bugs/<run>.<attempt>.json with
    the error, and the run is recorded failed (`failure_reason: record_invalid`) with the parts in
    `blank` replaced, so the stage goes on and the report counts it."""
    import json

    from harness.records.rundir import atomic_write

    try:
        return build(data)
    except (ValueError, TypeError) as exc:  # pydantic's ValidationError, the schema's RecordError
        bugs = rd.root / "bugs"
        bugs.mkdir(parents=True, exist_ok=True)
        where = bugs / f"{data.get('run_id')}.{data.get('attempt')}.json"
        atomic_write(where, json.dumps({"error": str(exc), "record": data}, default=str, indent=1))
        print(f"harness bug: the record of {data.get('run_id')} does not validate; recorded as failed, the "
              f"reply and the error are in {where} (please report it)", file=sys.stderr)
        return build({**data, **blank, "status": "failed", "failure_reason": "record_invalid",
                      "error": f"record_invalid: {exc}"[:4000] + f" (bug report: {where})"})


def call_notes(records) -> list[str]:
    """The summary's lines on calls that are not what they seem: usage estimated, replies cut at their
    token limit (finish_reason length), other flags (harness.records.schema.ModelCall.flags)."""
    calls = [c for r in records for c in r.calls]
    est = sum(bool(c.usage_estimated) for c in calls)
    length = sum(c.finish == "length" for c in calls)
    other = sum(any(not f.startswith(("usage:", "finish_reason")) for f in c.flags) for c in calls)
    out = []
    if est:
        out.append(f"~ usage estimated in {est} of {len(calls)} calls (the server's counts were missing or not counts): "
                   "their tokens and costs are estimates")
    if length:
        out.append(f"finish_reason length in {length} calls: those replies were cut at their token limit")
    if other:
        out.append(f"{other} calls flagged (tool calls repaired, a forced answer that came back as a tool call, "
                   "a retried bad reply): the records' calls[].flags say which")
    return out


def owned_runs(rd: RunDir, plan) -> list:
    """The runs this driver may run: its shard's part of the plan, or the whole plan."""
    return rd.shard.select(plan.runs) if rd.shard else list(plan.runs)


def used_attempts(rd: RunDir) -> dict[str, int]:
    """The highest attempt number used per run: started (the attempt logs) or with a call metered under it
    (the ledgers), so a new attempt never takes a number some call was already sent under."""
    out = dict(rd.attempts())
    for path in rd.ledger_paths():
        for e in read_ledger(path):
            if e.get("event") == "request" and isinstance(e.get("attempt"), int) and e.get("tag"):
                out[e["tag"]] = max(out.get(e["tag"], 0), e["attempt"])
    return out


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


class StageRunner:
    """Runs planned runs through a study's step: attempts, the breaker, records, this session's totals."""

    def __init__(self, cfg, plan, rd: RunDir, step: RunStep):
        self.cfg, self.plan, self.rd, self.step = cfg, plan, rd, step
        self.totals = {"tokens": 0, "cost": 0.0, "failed": 0, "estimated": 0}
        self._lock = threading.Lock()
        self.t0 = time.perf_counter()  # the session's runs start: the times to first results count from here
        self.first: dict[str, float] = {}  # "run_started", "record" -> seconds after t0
        self.started_runs = 0
        self.preparer: MemoryPreparer | None = None
        n = int(step.model_cfg.breaker_runs if step.model_cfg.breaker_runs is not None else 3)
        self.breaker = Breaker(n, self._probe, "runs")  # the driver's and both judges' (harness.endpoints.liveness)
        self.budget = None  # the stage's spending cap (harness.run.budget.Budget), kept by the proxy
        self.why: str | None = None  # the environment failure that stopped the stage (StageStopping says less)

    def _probe(self) -> bool:
        from harness.run.preflight import model_call

        check = model_call(self.step.proxy_url, replace(self.step.model_cfg, max_retries=0), "model")
        print(f"probe after a run ran out of retries:{check.line()}", file=sys.stderr)
        return check.ok is not False

    def prepare(self, pending: list) -> MemoryPreparer:
        self.preparer = self.step.prepare(pending)
        return self.preparer

    def run_one(self, spec, attempt: int) -> BaseModel:
        self._mark("run_started")
        self.rd.start_attempt(spec.run_id, attempt, now())
        abort = self.step.abort
        try:
            refused = self.budget.refused if self.budget is not None else 0
            record, signature = self.step.execute(spec, attempt)
            if abort.is_set() and record.status != "ok":  # cut short by the stop, not by its own failure
                raise StageStopping()
            if record.status != "ok" and self.budget is not None and self.budget.refused > refused:
                raise CapReached()  # a call the cap refused inside a library's own client: not the run's failure
            key = getattr(record, "qid", None) or getattr(record, "trial_id", None) or record.run_id
            for r in self.breaker.admit(record, record.status == "ok", record.failure_reason, signature, key,
                                        str(record.error or "")):
                self.write(r)
        except EnvironmentFailure as exc:
            with self._lock:  # why the stage stops: the first failure, not the runs it then cut short
                if self.why is None and not isinstance(exc, StageStopping):
                    self.why = str(exc)
            if not isinstance(exc, CapReached):  # at the cap, each further call is refused on its own
                abort.set()  # the stage stops: the runs in flight send no further call and end at once
            raise
        return record

    def write(self, record: BaseModel) -> None:
        self.rd.write_record(record)
        self._mark("record")
        with self._lock:
            self.totals["tokens"] += sum(c.prompt + c.output for c in record.calls)
            self.totals["estimated"] += sum(bool(getattr(c, "usage_estimated", False)) for c in record.calls)
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
        return DriverSession(started=started, ended=now(), host=socket.gethostname(), pid=os.getpid(),
                             pending=pending, started_runs=self.started_runs, stopped=stop,
                             wall_s=round(time.perf_counter() - self.t0, 3),
                             first_run_started_s=self.first.get("run_started"),
                             first_record_s=self.first.get("record"),
                             memory=MemoryPrep(**{k: (round(v, 3) if isinstance(v, float) else v)
                                                  for k, v in prep.items()}))


def stage_runtime(cfg) -> str | None:
    """The runtime's distribution==version when the stage's conditions use it (part of its hash), else None."""
    import conditions

    if "runtime" not in conditions.needs(cfg.stage.get("conditions")):
        return None
    from harness.runtime import runtime_label

    return runtime_label()


def open_stage(cfg, plan, info: dict, sweep: dict | None = None) -> tuple[RunDir, StageInfo]:
    """Open (or create) the stage folder; `sweep` (the job's overrides in a multirun) goes into stage.json."""
    rd = RunDir.for_stage(cfg)
    info = rd.open(cfg, {**info, "sweep": sweep}, runtime=stage_runtime(cfg))
    if info.data["sha256"] != plan.data["sha256"]:
        raise StageMismatch(f"{rd.root}: the data file changed since this stage started "
                            f"({info.data['sha256'][:12]} -> {plan.data['sha256'][:12]}); use a new stage.label")
    return rd, info


def pending_runs(rd: RunDir, plan, retry_failed: bool) -> tuple[list, int]:
    """Runs of this driver to do now (unrecorded, and failed ones when asked) and how many of
    its runs are recorded for good (by whichever driver: a record is never made twice)."""
    done = {r.run_id: r.status for r in rd.records()}
    again = {rid for rid, st in done.items() if st != "ok"} if retry_failed else set()
    owned = owned_runs(rd, plan)
    pending = [r for r in owned if r.run_id not in done or r.run_id in again]
    return pending, len(owned) - len(pending)


def run_stage(cfg, step: RunStep, rd: RunDir, ledger: Ledger, pending: list, budget: Budget | None = None) -> dict:
    """Run `pending` through the study's step (already started on an open endpoint and proxy);
    returns this session's totals.

    Raises StageStopped when an environment failure (or a harness error) stopped it early, and
    BudgetReached when the spending cap did (runs in flight finish; none starts after it).
    """
    plan = step.plan
    attempts = used_attempts(rd)
    concurrency = step.concurrency()
    ids = {r.run_id for r in pending}
    for r in rd.records():  # retry_failed: the failed attempt's calls stay in the ledger, marked
        if r.run_id in ids:
            ledger.append({"event": "interrupted", "tag": r.run_id, "attempt": r.attempt,
                           "reason": "failed run attempted again (retry_failed=true)", "ts": now()})
    owned = {r.run_id for r in owned_runs(rd, plan)}
    mark_interrupted(rd, ledger, owned=owned)
    runner = StageRunner(cfg, plan, rd, step)
    runner.budget = budget
    started = now()
    stop = None
    try:
        stop = _run_pool(runner, pending, attempts, concurrency, len(owned), len(owned) - len(pending), budget)
        try:
            held = runner.breaker.release()  # runs still held had no success after them: the server's
        except EnvironmentFailure as exc:
            stop, held = stop or str(exc), []
        for r in held:
            runner.write(r)
    except BaseException as exc:
        stop = f"{type(exc).__name__}: {exc}"[:300]
        raise
    finally:
        session = runner.session(started, len(pending), stop)
        rd.end_session(session)
        print(describe_session(session), file=sys.stderr)
        try:
            step.close()
        except Exception as exc:  # services already gone: say so, but keep the reason the stage stopped
            if stop is None or classify(exc) is None:
                raise
            print(f"warning: could not close the memory space: {exc}", file=sys.stderr)
    t = runner.totals
    est = f" (usage of {t['estimated']} calls estimated: the server's counts were missing or not counts)" \
        if t["estimated"] else ""
    print(f"runs done: {t['failed']} failed in this session, {t['tokens']:,} tokens, "
          f"${t['cost']:.4f} at list price{est}", file=sys.stderr)
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


BUDGET = "budget"
ENDING = ("the scheduler is ending this job (SIGTERM: requeued, preempted, cancelled or out of time); no run "
          "started after it, the runs in flight finished")


def _run_pool(runner: StageRunner, pending: list, attempts: dict[str, int], concurrency: int,
              total: int, done: int, budget: Budget | None = None) -> str | None:
    """Run `pending`; returns why the stage stopped early, or None when every run was attempted.

    A free slot takes the first pending run (in the plan's order) that may start: one that
    needs no memory space, or whose question's memory is ready (harness.run.prepare). With
    `memory_first=true` no run starts before every question's memory is ready."""
    first = bool(runner.cfg.get("memory_first", False))
    preparer = runner.prepare(pending)
    bar = tqdm(total=total, initial=done, unit="run", dynamic_ncols=True, file=sys.stderr, position=0)
    stop: list[str] = []
    waiting = list(pending)
    ending = scheduler_ending()
    abort = runner.step.abort
    submitted: dict = {}  # future -> (run id, attempt): which runs were in flight at a Ctrl-C
    in_flight: list[tuple[str, int]] = []
    try:
        with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="agent") as pool:
            try:
                running = set()
                while waiting and not stop:
                    if ending is not None and ending.is_set():
                        stop.append(ENDING)
                        break
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
                        fut = pool.submit(runner.run_one, spec, attempts.get(spec.run_id, 0) + 1)
                        submitted[fut] = (spec.run_id, attempts.get(spec.run_id, 0) + 1)
                        running.add(fut)
                        continue
                    if running:  # a slot frees up, or (within a second) another question is ready
                        finished, running = wait(running, timeout=1.0, return_when=FIRST_COMPLETED)
                        _collect(finished, bar, runner, stop)
                    else:
                        preparer.wait(1.0)
                if stop and stop[0] not in (BUDGET, ENDING):
                    abort.set()  # runs in flight send no further call (a budget or a scheduler's stop lets them finish)
                while running:
                    finished, running = wait(running, return_when=FIRST_COMPLETED)
                    _collect(finished, bar, runner, stop)
                    if stop and stop[0] not in (BUDGET, ENDING):
                        abort.set()
            except BaseException as exc:  # Ctrl-C or a storage error: the pool's exit waits for runs that end at once
                abort.set()
                if isinstance(exc, KeyboardInterrupt):
                    in_flight = [ra for f, ra in submitted.items() if not f.done()]
                raise
    except KeyboardInterrupt:  # the pool has joined: say what became of the runs that were in flight
        have = {r.run_id: r.attempt for r in runner.rd.records()}
        raise Interrupted(len(in_flight), sum(have.get(rid) == att for rid, att in in_flight)) from None
    finally:
        preparer.stop()
        bar.close()
    return stop[0] if stop else None


_ENDING: threading.Event | None = None  # set by SIGTERM inside a SLURM job (scheduler_ending)


def scheduler_ending() -> threading.Event | None:
    """Inside a SLURM job a SIGTERM means the scheduler is ending the job (requeue, preemption, scancel, time
    limit) and kills it KillWait seconds later: from then on no run starts, so a run killed mid-call (and paid
    again on resume) is one that was already in flight. Installed once per process, as early as the CLI can
    (harness.cli.run), so a SIGTERM during the preflight counts too; the handler before ours (submitit's)
    still runs."""
    global _ENDING
    if _ENDING is not None or "SLURM_JOB_ID" not in os.environ \
            or threading.current_thread() is not threading.main_thread():
        return _ENDING
    ending = threading.Event()
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum, frame):
        ending.set()
        if callable(previous):
            previous(signum, frame)

    signal.signal(signal.SIGTERM, on_term)
    _ENDING = ending
    return ending


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
        elif isinstance(exc, CapReached):
            stop.append(BUDGET)
        elif isinstance(exc, StageStopping):
            stop.append(runner.why or str(exc))
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


# ------------------------------------------------------------------------------ one stage, any study


def _same_endpoint(a, b) -> bool:
    from harness.endpoints.registry import identity

    return identity(a) == identity(b)


def drive(step, cfg, sweep: dict | None = None, judge_after=None):
    """One stage of any study through the one driver: plan, preflight, the runs, (the judge).

    `step` is the study's run step (harness.run.driver.RunStep); `judge_after(cfg, rd,
    endpoint, budget) -> labels` judges after the runs when the stage asks for it
    (`stage.judge_after_run`). Returns the stage's RunDir (None for a dry run)."""
    from harness.endpoints.client import retry_line, timeout_s
    from harness.endpoints.proxy import MeteringProxy
    from harness.endpoints.registry import open_endpoint, served_context
    from harness.endpoints.usage import context_tokens, counter
    from harness.records.ledger import Ledger
    from harness.run import fidelity
    from harness.run import preflight as pf

    plan = step.plan
    shard = Shard.parse(cfg.get("shard"))
    judge_after = judge_after if bool(cfg.stage.get("judge_after_run", False)) and shard is None else None
    judging = judge_after is not None
    checks = step.static_checks(judging)
    shapes = step.request_shapes(judging)
    if cfg.dry_run:  # the plan, the checks that cost nothing, the requests it would send, the forecast
        try:
            print(step.render_plan())
            print("fidelity manifest (stage.json; the report opens with it):")
            print(fidelity.render(step.fidelity_rows()))
            print("\n".join(c.line() for c in checks))
            print(retry_line(step.model_cfg))
            print("\n".join(pf.dry_run_lines(shapes)))
            print(step.forecast())
            study = studies.get(cfg.stage.get("kind"))
            if study.power:  # the analysis's power of each comparison, priced with the forecast
                print(study.step("power")(cfg, plan, getattr(step, "forecast_rows", [])))
            print(f"dry run: nothing started ({len(plan.runs)} runs planned)")
        except BrokenPipeError:  # `| head`: the reader has what it wanted
            sys.stderr.close()
        if [c for c in checks if c.ok is False]:
            sys.exit(STOPPED)
        return None
    for c in checks:
        print(c.line(), file=sys.stderr)
    pf.raise_first_failure(checks)
    rd, info = open_stage(cfg, plan, step.stage_info(), sweep)
    model_cfg = OmegaConf.to_container(cfg.model, resolve=True)
    shared = None
    with ExitStack() as stack:
        stack.enter_context(DriverLock(rd.root, shard))  # held until this driver ends, however it ends
        pending, settled = pending_runs(rd, plan, bool(cfg.get("retry_failed", False)))
        whose = f" (shard {shard}: {settled + len(pending)} of them)" if shard else ""
        print(f"{rd.root}: {len(plan.runs)} runs planned{whose}, {settled} recorded, {len(pending)} to run"
              + (" (failed runs again: retry_failed=true)" if cfg.get("retry_failed") else ""), file=sys.stderr)
        if shard and cfg.stage.get("judge_after_run", False):
            print(f"shard {shard}: not judging here; once every shard is done, judge the stage once "
                  f"(make judge STAGE={cfg.stage.name} with the same overrides, stage.label={cfg.stage.label})",
                  file=sys.stderr)
        # the spending cap covers the whole stage: every shard's ledger, the judge's calls too
        budget = Budget(cfg.get("budget_usd"), model_cfg.get("prices"),
                        OmegaConf.to_container(cfg.judge, resolve=True).get("prices"), rd.ledger_paths)
        if budget.cap is not None:
            print(f"  budget: ${budget.spent:.4f} of ${budget.cap:.4f} spent so far (list price, agents and judge)",
                  file=sys.stderr)
        if pending and budget.exhausted:
            raise BudgetReached(budget.stopped(settled, settled + len(pending)))
        if pending:
            endpoint = stack.enter_context(open_endpoint(cfg.model))
            if endpoint.info.get("context_tokens") and not context_tokens(step.model_cfg):
                step.model_cfg.context_tokens = endpoint.info["context_tokens"]  # what the server says it reads
                print(f"  context  {endpoint.info['context_tokens']:,} tokens ({endpoint.info['context_source']})",
                      file=sys.stderr)
            ledger = Ledger(rd.ledger_path)
            stack.callback(ledger.close)
            proxy = stack.enter_context(MeteringProxy(endpoint.base_url, ledger, endpoint.key,
                                                      timeout_s(step.model_cfg), str(step.model_cfg.model),
                                                      context_tokens(step.model_cfg), counter(step.model_cfg), budget))
            proxy.stopping = step.abort  # the stage stopping: the proxy forwards nothing more
            calls = pf.stage_calls(proxy.base_url, cfg, shapes, ledger)  # one per request shape
            print("\n".join(c.line() for c in calls), file=sys.stderr)
            pf.raise_first_failure(calls)
            if step.model_cfg.truncates_silently and not context_tokens(step.model_cfg):
                # Ollama lists a model's context in /api/ps only once it is loaded: the preflight loaded it
                ctx, source = served_context(endpoint.base_url, str(step.model_cfg.model), endpoint.key)
                if ctx:
                    step.model_cfg.context_tokens = proxy.context = ctx
                    print(f"  context  {ctx:,} tokens ({source}, once loaded)", file=sys.stderr)
            if budget.estimated_line():
                print(budget.estimated_line(), file=sys.stderr)
            step.start(rd, info, endpoint, proxy.base_url)
            run_stage(cfg, step, rd, ledger, pending, budget)
            ledger.close()  # the judge appends to the same ledger through its own proxy
            shared = endpoint if _same_endpoint(cfg.judge, cfg.model) else None
        labels = judge_after(cfg, rd, shared, budget) if judging else None
    print(step.summary(rd, labels, str(cfg.judge.name) if judging else None), file=sys.stderr)
    print("\n".join(next_steps(cfg, rd, len(plan.runs), judged=judging)), file=sys.stderr)
    return rd


def next_steps(cfg, rd, planned: int, judged: bool) -> list[str]:
    """What to run next, and that the same command resumes: the last lines of every stage."""
    name = str(cfg.stage.name)
    done = len(rd.record_paths())
    lines = [f"{rd.root}: {done} of {planned} planned runs recorded"
             + ("" if done >= planned else "; the same command resumes where it stopped (what is recorded is kept)")]
    if done >= planned:
        lines.append("the same command again runs nothing more (every run is recorded); retry_failed=true runs "
                     "the failed ones again")
    study = studies.get(cfg.stage.get("kind"))
    if study.judge and not judged:
        lines.append(f"next: make judge STAGE={name} (with the same ARGS), then make analyze")
    else:
        lines.append("next: make analyze (tables, figures, report under results/)")
    return lines
