"""What a personalization method (conditions/personal/<name>.py, `build(cfg, ctx) -> Method`) gives the run step.

One Method per trial x method run: `write()` hands the user's messages to its writers
(asynchronously: it returns at once), `inject()` gives the block the assistant will
see, `finish()` waits for its writers and says what was written and what the read
missed. Shared holds what lives for the whole stage: the identity resolver, one writers'
pool per method (so one method's slow writes never hold another's back), the endpoint's
slots, the encoder, one kernel memory per condition and the metered endpoint.

A method declares what it needs (`services`: e.g. {"postgres"} for Mem0's store; `writes`:
what its writers cost, "kernel" | "mem0" | None) as class attributes, so the stage's services
and forecast come from the method, never from its module's name.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from harness.endpoints.settings import EndpointSettings
from harness.kernel.identity import IdentityResolver


@dataclass
class Injected:
    block: str
    items: list[dict] = field(default_factory=list)  # what reached the prompt, as MemoryItem.describe()
    candidates: list[dict] = field(default_factory=list)  # what the store returned before any check
    retrieval_s: float = 0.0
    log: dict = field(default_factory=dict)


class Method:
    services: frozenset[str] = frozenset()  # servers the method reads beyond the stage's index
    writes: str | None = None  # "kernel": one extraction call per writer; "mem0": Mem0's own add; None: no writers

    @classmethod
    def setup(cls, cfg, shared: "Shared", condition: str) -> None:
        """Once per process before the first run (loading a model, creating a store): setup is never a run's time."""

    def write(self) -> None:
        pass

    def inject(self) -> Injected:
        raise NotImplementedError

    def finish(self) -> dict:
        """After the run's writes have landed: what was written and what the read missed; a method that reads a
        store also gives its exposure audit here ("audit": the user's items under no view, "unaudited_writes")."""
        return {}

    def close(self) -> None:
        pass


class MethodGate:
    """Runs of one method at a time: a run enters only while no run of another method is inside, in arrival order
    (the plan's), so one method's work (Mem0's extraction and embedding, the kernel's commits) never shares the
    CPU, the writers or the endpoint with another's. Waiting here is scheduling, never part of a run's times."""

    def __init__(self):
        self._cond = threading.Condition()
        self.active: str | None = None
        self.inside = 0
        self._arrivals = 0
        self._waiting: dict[int, str] = {}

    def _may_enter(self, n: int, method: str) -> bool:
        if self.active not in (None, method):
            return False
        return all(m == method for k, m in self._waiting.items() if k < n)  # no other method arrived first

    def run(self, method: str, fn: Callable[[], Any]) -> Any:
        with self._cond:
            n = self._arrivals = self._arrivals + 1
            self._waiting[n] = method
            self._cond.wait_for(lambda: self._may_enter(n, method))
            del self._waiting[n]
            self.active, self.inside = method, self.inside + 1
            self._cond.notify_all()
        try:
            return fn()
        finally:
            with self._cond:
                self.inside -= 1
                if not self.inside:
                    self.active = None
                self._cond.notify_all()


class Slots:
    """The endpoint's concurrent calls (model.max_concurrency; None: unlimited): every model call of the stage
    holds a slot, so a call never queues inside the server unseen and the time spent waiting for a slot is
    measured (the assistant's `queue_s`), never counted in its latency (`answer_s`)."""

    def __init__(self, n: int | None):
        self.n = n
        self._sem = threading.BoundedSemaphore(n) if n else None

    def hold(self, fn: Callable[[], Any]) -> tuple[Any, float, float]:
        """(fn's result, seconds queued for a slot, seconds of the call)."""
        t0 = time.perf_counter()
        if self._sem is not None:
            self._sem.acquire()
        t1 = time.perf_counter()
        try:
            return fn(), t1 - t0, time.perf_counter() - t1
        finally:
            if self._sem is not None:
                self._sem.release()


class Slotted:
    """A client whose every `complete` holds one of the endpoint's slots."""

    def __init__(self, agent: Any, slots: Slots):
        self.agent, self.slots = agent, slots
        self.queued_s = 0.0

    def complete(self, *args, **kwargs):
        out, queued, _ = self.slots.hold(lambda: self.agent.complete(*args, **kwargs))
        self.queued_s += queued
        return out


@dataclass
class Shared:
    cfg: Any  # the whole Hydra config
    proxy_url: str
    model_cfg: EndpointSettings  # the typed model node (harness.endpoints.settings)
    resolver: IdentityResolver
    encoder: Any
    token: str  # names this process's stores (mem0 collections), so a rerun never reads old writes
    slots: Slots = field(default_factory=lambda: Slots(None))
    gate: MethodGate = field(default_factory=MethodGate)
    workers: int = 4  # threads of each method's writers' pool
    _memories: dict = field(default_factory=dict)
    _pools: dict = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _pool_lock: threading.Lock = field(default_factory=threading.Lock)  # apart: a slow `once` never holds a pool up

    def pool(self, condition: str) -> ThreadPoolExecutor:
        """The writers' pool of one method (its own threads: no method's writes wait behind another's)."""
        with self._pool_lock:
            if condition not in self._pools:
                self._pools[condition] = ThreadPoolExecutor(max_workers=self.workers,
                                                            thread_name_prefix=f"writer-{condition}")
            return self._pools[condition]

    def once(self, key: str, make: Callable[[], Any]) -> Any:
        """One object per key for the whole stage (a condition's kernel memory, its mem0 collection)."""
        with self._lock:
            if key not in self._memories:
                self._memories[key] = make()
            return self._memories[key]

    def close(self) -> None:
        from harness.kernel.encoding import BatchEncoder

        try:
            for p in self._pools.values():
                p.shutdown(wait=True)
        finally:
            for m in self._memories.values():
                close = getattr(m, "close", None)
                if close:
                    close()
            if isinstance(self.encoder, BatchEncoder):  # its worker; the encoder itself is the process's
                self.encoder.close()


@dataclass
class RunCtx:
    trial: dict
    condition: str
    shared: Shared
    agent: Callable[..., Any]  # agent(role, json=False) -> harness.run.loop.Agent metered into this run
    meter: Any
    run_id: str
    attempt: int
