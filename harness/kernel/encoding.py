"""The kernel's encoder workers: every commit's and every read's texts, embedded in batches across users.

The CPU encoder is one resource. Behind a lock, every user's commit queues for it and a read of
user B waits behind user A's embedding; here nobody holds it: callers put their texts on their
user's queue (`for_user`; the kernel's commit and read paths set it) and wait for their own vectors,
and the worker's two threads take the users' queues round robin, one job of each user per batch, a
user with a batch in flight skipped: so a user's batch held anywhere inside the encoder call occupies
one thread at most and the other keeps serving everyone else, and a user's many jobs never push
another's back. A batch that fails is embedded again job by job, so only the job whose texts cannot
be embedded fails. Reads' queries have their own worker (and, in the stage, their own model
instance), so a read never waits for a batch of commits. What stays shared is the model's forward
pass (harness/memory/encoder.py runs one at a time): that is capacity, bounded by the schedule, not
isolation (docs/personal-schedule.md). Under load the batches grow, so throughput grows
with load instead of the queue (a batch of 64 short items costs a few times one of 4 on a CPU,
not 16 times). The worker counts what it does (`figures`), and `measure` times the raw model
once before the runs (a batch's fixed cost and its cost per text), without the disk cache and
writing nothing: the figure the schedule caps trials in flight with and the dry run forecasts with
(harness/personal/capacity.py).
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

# a memory item as the writers produce them (harness/kernel/items.py statements): the measured batch's texts
PROBE = "The user works with {i} tools and prefers concise answers about their current project number {i}."


_USER: contextvars.ContextVar = contextvars.ContextVar("kernel_encoder_user", default=None)


@contextlib.contextmanager
def for_user(user: str):
    """Texts embedded inside this block queue as `user`'s (the kernel's commit and read paths wrap the space's
    calls in it); outside it, each calling thread is its own queue."""
    token = _USER.set(user)
    try:
        yield
    finally:
        _USER.reset(token)


@dataclass
class _Job:
    texts: list[str]
    key: object = None
    done: threading.Event = field(default_factory=threading.Event)
    out: np.ndarray | None = None
    error: BaseException | None = None


class _Worker:
    """`threads` threads over one queue per user, taken round robin: each batch takes at most one job of each user
    (up to max_batch texts) from users that have no batch in flight, embeds them in one call and hands each job its
    rows. So one user's batch in flight occupies at most one thread, and the others keep serving every other user;
    a user's many jobs never push another user's back; a batch that fails is embedded again job by job, so only the
    job that cannot be embedded fails."""

    def __init__(self, encoder, name: str, max_batch: int, threads: int = 2):
        self.encoder, self.max_batch = encoder, max_batch
        self.queues: dict[object, deque[_Job]] = {}  # insertion order is the round robin's order
        self.busy: set[object] = set()  # users with a batch in flight
        self.cond = threading.Condition()
        self.closed = False
        self.batches = self.texts = self.largest = self.retried = 0
        self.seconds = 0.0
        self.threads = [threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True)
                        for i in range(max(1, int(threads)))]
        for t in self.threads:
            t.start()

    def submit(self, job: _Job) -> np.ndarray:
        if job.key is None:
            job.key = _USER.get() or ("thread", threading.get_ident())
        with self.cond:
            if self.closed:
                raise RuntimeError("the kernel's encoder worker is closed")
            self.queues.setdefault(job.key, deque()).append(job)
            self.cond.notify()
        job.done.wait()
        if job.error is not None:
            raise job.error
        return job.out

    def queued(self) -> int:
        """Texts waiting (not yet in a batch)."""
        with self.cond:
            return sum(len(j.texts) for q in self.queues.values() for j in q)

    def _ready(self) -> bool:
        return any(k not in self.busy for k in self.queues)

    def _take(self) -> list[_Job]:
        jobs, n = [], 0
        for key in [k for k in self.queues if k not in self.busy]:
            q = self.queues[key]
            if jobs and n + len(q[0].texts) > self.max_batch:
                break
            jobs.append(q.popleft())
            n += len(jobs[-1].texts)
            del self.queues[key]  # to the back of the round robin (or gone when empty)
            if q:
                self.queues[key] = q
            self.busy.add(key)
        return jobs

    def _embed(self, jobs: list[_Job]) -> None:
        texts = [t for j in jobs for t in j.texts]
        t0 = time.perf_counter()
        try:
            vecs = self.encoder.embed(texts, progress=False)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller whose texts fail
            if len(jobs) == 1:
                jobs[0].error = exc
                jobs[0].done.set()
                return
            with self.cond:
                self.retried += 1
            for j in jobs:  # which job's texts fail: only that one fails
                self._embed([j])
            return
        dt = time.perf_counter() - t0
        with self.cond:
            self.batches, self.texts, self.seconds = self.batches + 1, self.texts + len(texts), self.seconds + dt
            self.largest = max(self.largest, len(texts))
        i = 0
        for j in jobs:
            j.out, i = vecs[i:i + len(j.texts)], i + len(j.texts)
            j.done.set()

    def _run(self) -> None:
        while True:
            with self.cond:
                self.cond.wait_for(lambda: self._ready() or (self.closed and not self.queues))
                if not self._ready():
                    return
                jobs = self._take()
            try:
                self._embed(jobs)
            finally:
                with self.cond:
                    self.busy.difference_update(j.key for j in jobs)
                    self.cond.notify_all()

    def figures(self) -> dict:
        return {"batches": self.batches, "texts": self.texts, "largest_batch": self.largest,
                "seconds": round(self.seconds, 4), "threads": len(self.threads), "failed_batches_split": self.retried,
                "texts_per_s": round(self.texts / self.seconds, 1) if self.seconds else None}

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        for t in self.threads:
            t.join(timeout=30)


class BatchEncoder:
    """embed / embed_query like the encoder it wraps. Commits' texts go to one worker, reads' queries to another
    (`query_encoder`: its own model instance, so a read never waits for a batch of commits; the same encoder when
    none is given); each worker embeds every user's queued texts in one batch. No lock is held between users."""

    def __init__(self, encoder, query_encoder=None, max_batch: int = 512, threads: int = 2):
        self.encoder = encoder
        self.dim = getattr(encoder, "dim", 384)
        self._writes = _Worker(encoder, "kernel-encoder-commits", int(max_batch), threads)
        self._reads = _Worker(query_encoder if query_encoder is not None else encoder, "kernel-encoder-reads",
                              int(max_batch), threads)

    def __getattr__(self, name):  # id, stats, spec, describe, missing, warm, ...: the wrapped encoder's
        if name == "encoder":
            raise AttributeError(name)
        return getattr(self.encoder, name)

    def embed(self, texts: Sequence[str], progress: bool | None = None) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        return self._writes.submit(_Job(texts))

    def embed_query(self, text: str) -> np.ndarray:
        return self._reads.submit(_Job([text]))[0]

    def figures(self) -> dict:
        """What the workers did during the stage: batches, texts, the largest batch, texts per second."""
        return {"commits": self._writes.figures(), "reads": self._reads.figures()}

    def close(self) -> None:
        """Stop the workers once their queues are empty (the wrapped encoders stay open: they are their owner's)."""
        self._writes.close()
        self._reads.close()


def measure(encoder, small: int = 8, large: int = 64) -> tuple[float, float]:
    """(seconds a batch costs whatever its size, seconds per text), from one batch of `small` and one of `large`
    item-like texts through the raw model (no cache read or written; the model loaded first, untimed): a batch of
    n costs about a + b n on a CPU, which is why one worker batching every user's texts keeps up with load. The
    schedule's and the dry run's figure for the encoder."""
    forward = getattr(encoder, "forward", None)
    if forward is None:
        forward = lambda ts: encoder.embed(ts, progress=False)  # noqa: E731

    def timed(n: int) -> float:
        texts = [PROBE.format(i=i) for i in range(n)]
        t0 = time.perf_counter()
        forward(texts)
        return time.perf_counter() - t0

    key = (getattr(encoder, "id", id(encoder)), small, large)
    if key not in _MEASURED:  # once per encoder and process (a sweep's jobs, a test session); loaded only then
        forward([PROBE.format(i=-1)])  # loading is setup
        t_small = min(timed(small), timed(small))  # the first small batch may still pay for warming up
        t_large = timed(large)
        per = max((t_large - t_small) / (large - small), t_large / large / 4, 1e-6)  # noise never makes it free
        _MEASURED[key] = (max(0.0, t_small - small * per), per)
    return _MEASURED[key]


_MEASURED: dict[tuple, tuple[float, float]] = {}
