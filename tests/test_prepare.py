"""Memory preparation beside the runs (harness.run.prepare and the driver's pool).

The environment here is a stand-in whose embedding of each question waits for a gate the
test opens, so which run may start when is decided by the test, not by timing.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

from omegaconf import OmegaConf

from harness.run.agents import needs_memory
from harness.run.driver import _run_pool
from harness.run.plan import RunSpec
from harness.run.prepare import MemoryPreparer


class GatedEncoder:
    def __init__(self, gates: dict[str, threading.Event], fail: str | None = None):
        self.gates, self.fail = gates, fail
        self.stats = SimpleNamespace(embedded=0)
        self.calls: list[str] = []

    def missing(self, texts):
        return len(set(texts))

    def embed(self, texts, progress=None):
        qid = texts[0].split(":")[0]
        self.calls.append(qid)
        assert self.gates[qid].wait(30), f"gate {qid} never opened"
        if qid == self.fail:
            raise RuntimeError("the encoder broke")
        self.stats.embedded += len(texts)


class GatedEnv:
    """What the preparer reads of an Environment: the space (its encoder) and a run's units."""

    def __init__(self, gates, chunks_per_question=3, fail=None):
        self.space = SimpleNamespace(dense=object(), encoder=GatedEncoder(gates, fail))
        self.n = chunks_per_question

    def units(self, spec):
        return [SimpleNamespace(text=f"{spec.qid}:{i}") for i in range(self.n)]


CFG = OmegaConf.create({"stage": {"conditions": {"tool": {"module": "memory_tool"}, "none": {"module": "none"},
                                                 "prefetch": {"module": "prefetch"}}}})


def test_questions_are_prepared_in_order_of_first_need_and_runs_without_memory_never_wait():
    gates = {q: threading.Event() for q in ("q1", "q2", "q3")}
    pending = [RunSpec("none", "q3", "", 0), RunSpec("tool", "q2", "", 0), RunSpec("prefetch", "q1", "", 0),
               RunSpec("tool", "q1", "", 0), RunSpec("none", "q1", "", 0)]
    p = MemoryPreparer(GatedEnv(gates), pending, needs_memory(CFG.stage.conditions))
    assert [s.qid for s in p.order] == ["q2", "q1"]  # q3 is only read by a run without memory
    p.start()
    try:
        assert p.ready(pending[0]) and p.ready(pending[4])
        assert not p.ready(pending[1]) and not p.ready(pending[2])
        gates["q2"].set()
        while not p.ready(pending[1]):
            p.wait(5)
        assert not p.ready(pending[3])  # q1 still embedding
        gates["q1"].set()
        while p.stats["all_ready_s"] is None:
            p.wait(5)
        assert p.ready(pending[3])
        assert p.stats["questions"] == 2 and p.stats["chunks"] == 6 and p.stats["embedded"] == 6
        assert p.stats["first_ready_s"] <= p.stats["all_ready_s"]
    finally:
        for g in gates.values():
            g.set()
        p.stop()


class Runner:
    """The parts of StageRunner the pool uses; run_one opens the next gate when told to."""

    def __init__(self, env, on_start=None):
        self.env, self.cfg = env, CFG
        self.step = SimpleNamespace(abort=threading.Event())  # the stop the pool sets and its runs obey
        self.totals = {"tokens": 0, "cost": 0.0, "failed": 0}
        self.started: list[str] = []
        self.on_start = on_start or {}

    def prepare(self, pending):  # what AgentStep.prepare does
        self.preparer = MemoryPreparer(self.env, pending, needs_memory(self.cfg.stage.conditions)).start()
        return self.preparer

    def run_one(self, spec, attempt):
        self.started.append(spec.run_id)
        if spec.run_id in self.on_start:
            self.on_start[spec.run_id].set()


def test_a_free_slot_takes_the_first_run_that_may_start():
    gates = {q: threading.Event() for q in ("q1", "q2")}
    tool_q1, none_q2, tool_q2 = RunSpec("tool", "q1", "", 0), RunSpec("none", "q2", "", 0), RunSpec("tool", "q2", "", 0)
    gates["q2"].set()  # q2 would be ready at once, but it is embedded after q1 (order of first need)
    runner = Runner(GatedEnv(gates), on_start={none_q2.run_id: gates["q1"]})
    stop = _run_pool(runner, [tool_q1, none_q2, tool_q2], {}, concurrency=1, total=3, done=0)
    assert stop is None
    # the run without memory goes first although the plan puts it second; it opens q1's gate
    assert runner.started == [none_q2.run_id, tool_q1.run_id, tool_q2.run_id]
    assert runner.env.space.encoder.calls == ["q1", "q2"]


def test_a_preparation_error_stops_the_stage_and_names_the_cause():
    gates = {"q1": threading.Event(), "q2": threading.Event()}
    gates["q1"].set()
    pending = [RunSpec("tool", "q1", "", 0), RunSpec("tool", "q2", "", 0), RunSpec("tool", "q2", "", 1)]
    runner = Runner(GatedEnv(gates, fail="q2"), on_start={pending[0].run_id: gates["q2"]})  # then q2 fails
    stop = _run_pool(runner, pending, {}, concurrency=2, total=3, done=0)
    assert stop is not None and "harness error while preparing memory" in stop and "the encoder broke" in stop
    assert runner.started == [pending[0].run_id]  # q2's runs never started


def test_memory_first_starts_no_run_before_every_question_is_ready():
    gates = {"q1": threading.Event()}
    none_q2, tool_q1 = RunSpec("none", "q2", "", 0), RunSpec("tool", "q1", "", 0)
    runner = Runner(GatedEnv(gates))
    runner.cfg = OmegaConf.merge(CFG, {"memory_first": True})
    pool = threading.Thread(target=_run_pool, args=(runner, [none_q2, tool_q1], {}, 2, 2, 0))
    pool.start()
    pool.join(1.0)
    assert runner.started == []  # the run without memory waits too: q1 is still embedding
    gates["q1"].set()
    pool.join(30)
    assert not pool.is_alive() and runner.started == [none_q2.run_id, tool_q1.run_id]
