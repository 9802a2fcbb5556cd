"""The kernel's one encoder worker: every commit's and every read's texts, embedded in batches across users.

The CPU encoder is one resource. Behind a lock, every user's commit queues for it and a read of
user B waits behind user A's embedding; here nobody holds it: callers put their texts on a
queue and wait for their own vectors, and one worker thread takes everything queued and embeds
it in one batch. Reads' queries have their own worker (and, in the stage, their own model
instance), so a read never waits for a batch of commits. Under load the batches grow, so throughput grows
with load instead of the queue (a batch of 64 short items costs a few times one of 4 on a CPU,
not 16 times). The worker counts what it does (`figures`), and `measure` times the raw model
once before the runs (a batch's fixed cost and its cost per text), without the disk cache and
writing nothing: the figure the schedule caps trials in flight with and the dry run forecasts with
(harness/personal/capacity.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

# a memory item as the writers produce them (harness/kernel/items.py statements): the measured batch's texts
PROBE = "The user works with {i} tools and prefers concise answers about their current project number {i}."


@dataclass
class _Job:
    texts: list[str]
    done: threading.Event = field(default_factory=threading.Event)
    out: np.ndarray | None = None
    error: BaseException | None = None


class _Worker:
    """One thread: takes every queued job (up to max_batch texts), embeds them in one call, hands each its rows."""

    def __init__(self, encoder, name: str, max_batch: int):
        self.encoder, self.max_batch = encoder, max_batch
        self.queue: list[_Job] = []
        self.cond = threading.Condition()
        self.closed = False
        self.batches = self.texts = self.largest = 0
        self.seconds = 0.0
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def submit(self, job: _Job) -> np.ndarray:
        with self.cond:
            if self.closed:
                raise RuntimeError("the kernel's encoder worker is closed")
            self.queue.append(job)
            self.cond.notify()
        job.done.wait()
        if job.error is not None:
            raise job.error
        return job.out

    def _take(self) -> list[_Job]:
        jobs, n = [], 0
        while self.queue and (not jobs or n + len(self.queue[0].texts) <= self.max_batch):
            j = self.queue.pop(0)
            jobs.append(j)
            n += len(j.texts)
        return jobs

    def _run(self) -> None:
        while True:
            with self.cond:
                self.cond.wait_for(lambda: self.queue or self.closed)
                if not self.queue:
                    return
                jobs = self._take()
            texts = [t for j in jobs for t in j.texts]
            t0 = time.perf_counter()
            try:
                vecs = self.encoder.embed(texts, progress=False)
            except BaseException as exc:  # noqa: BLE001 - every caller of the batch gets it
                for j in jobs:
                    j.error = exc
                    j.done.set()
                continue
            dt = time.perf_counter() - t0
            self.batches, self.texts, self.seconds = self.batches + 1, self.texts + len(texts), self.seconds + dt
            self.largest = max(self.largest, len(texts))
            i = 0
            for j in jobs:
                j.out, i = vecs[i:i + len(j.texts)], i + len(j.texts)
                j.done.set()

    def figures(self) -> dict:
        return {"batches": self.batches, "texts": self.texts, "largest_batch": self.largest,
                "seconds": round(self.seconds, 4),
                "texts_per_s": round(self.texts / self.seconds, 1) if self.seconds else None}

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        self.thread.join(timeout=30)


class BatchEncoder:
    """embed / embed_query like the encoder it wraps. Commits' texts go to one worker, reads' queries to another
    (`query_encoder`: its own model instance, so a read never waits for a batch of commits; the same encoder when
    none is given); each worker embeds every user's queued texts in one batch. No lock is held between users."""

    def __init__(self, encoder, query_encoder=None, max_batch: int = 512):
        self.encoder = encoder
        self.dim = getattr(encoder, "dim", 384)
        self._writes = _Worker(encoder, "kernel-encoder-commits", int(max_batch))
        self._reads = _Worker(query_encoder if query_encoder is not None else encoder, "kernel-encoder-reads",
                              int(max_batch))

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
    forward([PROBE.format(i=-1)])  # loading is setup

    def timed(n: int) -> float:
        texts = [PROBE.format(i=i) for i in range(n)]
        t0 = time.perf_counter()
        forward(texts)
        return time.perf_counter() - t0

    key = (getattr(encoder, "id", id(encoder)), small, large)
    if key not in _MEASURED:  # once per encoder and process (a sweep's jobs, a test session)
        t_small = min(timed(small), timed(small))  # the first small batch may still pay for warming up
        t_large = timed(large)
        per = max((t_large - t_small) / (large - small), t_large / large / 4, 1e-6)  # noise never makes it free
        _MEASURED[key] = (max(0.0, t_small - small * per), per)
    return _MEASURED[key]


_MEASURED: dict[tuple, tuple[float, float]] = {}
