"""Memory preparation beside the runs: the first results arrive after one question's chunks.

Embedding the histories is the slow part of a stage (on 2 CPU cores MiniLM embeds ~50
chunks/s: ~25 min for the main stage's 180 questions). The preparer, a background
thread, chunks and embeds the histories question by question, in the order the pending
runs first need them, into the encoder's disk cache (each call is embedded in
length-sorted batches, harness.memory.encoder); the driver starts every run that needs
no memory space at once and every other run as soon as its question is ready. Each
chunk is embedded once across stages and sessions: a ready question costs a cache
lookup. The index itself is filled by the question's first run (its setup time), as
before.

ONNX Runtime and int8 quantisation were measured and rejected (issue 13): fp32 ONNX ran
at 0.97x the torch forward pass; dynamic int8 at 1.9x, but agreed with the fp32 top 10
on only 0.88 of queries.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable, Sequence

from tqdm import tqdm

from harness.run.plan import RunSpec


class MemoryPreparer:
    """Embeds, in the background, the histories of the runs that `needs(spec)` says use memory."""

    def __init__(self, env, pending: Sequence[RunSpec], needs: Callable[[RunSpec], bool]):
        self.env = env
        first: dict[str, RunSpec] = {}
        for spec in pending:
            if needs(spec):
                first.setdefault(spec.qid, spec)
        self.order = list(first.values())  # one spec per question, in order of first need
        self.needs = needs
        self._ready: set[str] = set()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self.t0 = time.perf_counter()
        self.stats = {"questions": len(self.order), "ready": 0, "chunks": 0, "embedded": 0, "chunk_s": 0.0,
                      "embed_s": 0.0, "first_ready_s": None, "all_ready_s": None}
        self._thread = threading.Thread(target=self._work, name="memory-preparer", daemon=True)

    def start(self) -> "MemoryPreparer":
        if not self.order:
            self.stats["all_ready_s"] = 0.0
        self._thread.start()
        return self

    def _work(self) -> None:
        bar = None
        try:
            if not self.order:
                return
            space = self.env.space  # builds the space (connects to its index) and loads the encoder
            if space.dense is None:  # lexical only: nothing to embed, every question is ready
                self._mark([s.qid for s in self.order])
                return
            enc = space.encoder
            bar = tqdm(total=len(self.order), unit="question", desc="memory ready", dynamic_ncols=True,
                       file=sys.stderr, position=1, leave=False)
            for spec in self.order:
                if self._stop.is_set():
                    return
                t = time.perf_counter()
                texts = [u.text for u in self.env.units(spec)]
                t1 = time.perf_counter()
                missing = enc.missing(texts)
                enc.embed(texts, progress=False)
                t2 = time.perf_counter()
                self.stats["chunks"] += len(texts)
                self.stats["embedded"] += missing
                self.stats["chunk_s"] += t1 - t
                self.stats["embed_s"] += t2 - t1
                self._mark([spec.qid])
                bar.update(1)
                bar.set_postfix(chunks=f"{self.stats['chunks']:,}", embedded=f"{self.stats['embedded']:,}")
        except BaseException as exc:  # the driver stops the stage with it (harness.failures.classify)
            self.error = exc
        finally:
            if bar is not None:
                bar.close()
            with self._cond:
                self._cond.notify_all()

    def _mark(self, qids: list[str]) -> None:
        with self._cond:
            self._ready.update(qids)
            now = round(time.perf_counter() - self.t0, 3)
            self.stats["ready"] = len(self._ready)
            if self.stats["first_ready_s"] is None:
                self.stats["first_ready_s"] = now
            if len(self._ready) == len(self.order):
                self.stats["all_ready_s"] = now
            self._cond.notify_all()

    def ready(self, spec: RunSpec) -> bool:
        """May this run start now? (Runs without memory always may.)"""
        if not self.needs(spec):
            return True
        with self._cond:
            return spec.qid in self._ready

    def wait(self, timeout: float) -> None:
        """Sleep until another question is ready, the preparer fails or `timeout` passes."""
        with self._cond:
            if self.error is None and self._thread.is_alive():
                self._cond.wait(timeout)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
