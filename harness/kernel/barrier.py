"""The kernel's per-user write barrier (the second seed paper): a read waits for the writes before it.

WriteBarrier orders each user's writes by sequence number and makes a read wait for every
write issued before it (fail-open after `timeout_s`, and says so); Unordered is the
ablation that issues numbers but never waits.
"""

from __future__ import annotations

import threading
import time


class WriteBarrier:
    """Per-user write ordering: each write gets a sequence number; a read waits for the ones before it.

    A read snapshots the highest number issued for its user and blocks until every
    write up to it is released (committed or failed), or until `timeout_s` passes,
    after which it proceeds (fail-open) and says so. Users never wait on each other.
    """

    def __init__(self, timeout_s: float = 5.0):
        self.timeout_s = timeout_s
        self._cond = threading.Condition()
        self._issued: dict[str, int] = {}
        self._pending: dict[str, set[int]] = {}

    def begin(self, user: str) -> int:
        with self._cond:
            seq = self._issued.get(user, 0) + 1
            self._issued[user] = seq
            self._pending.setdefault(user, set()).add(seq)
            return seq

    def release(self, user: str, seq: int) -> None:
        with self._cond:
            self._pending.get(user, set()).discard(seq)
            self._cond.notify_all()

    def wait(self, user: str) -> dict:
        t0 = time.monotonic()
        with self._cond:
            snapshot = self._issued.get(user, 0)

            def drained() -> bool:
                return not any(s <= snapshot for s in self._pending.get(user, ()))

            done = self._cond.wait_for(drained, timeout=self.timeout_s)
        return {"snapshot": snapshot, "waited_s": round(time.monotonic() - t0, 6), "timed_out": not done}


class Unordered(WriteBarrier):
    """The ablation: sequence numbers are still issued (so misses can be counted) but reads never wait."""

    def wait(self, user: str) -> dict:
        with self._cond:
            snapshot = self._issued.get(user, 0)
        return {"snapshot": snapshot, "waited_s": 0.0, "timed_out": False, "barrier": "off"}
