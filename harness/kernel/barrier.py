"""The kernel's per-user write barrier (the second seed paper): a read waits for the writes before it.

WriteBarrier orders each user's writes by sequence number and makes a read wait for every
write issued before it (fail-open after `timeout_s`, and says so); Unordered is the
ablation that issues numbers but never waits.

Isolation by construction: every user has its own condition variable (`_Lane`), so a read
waits on its own user's lane only and a write of user A never wakes, holds or delays a
read of user B. The registry lock is taken only to find or create a user's lane (no wait
and no write happens under it).
"""

from __future__ import annotations

import threading
import time


class _Lane:
    """One user's sequence numbers: issued, still pending, and the condition its readers wait on."""

    __slots__ = ("cond", "issued", "pending")

    def __init__(self):
        self.cond = threading.Condition(threading.Lock())
        self.issued = 0
        self.pending: set[int] = set()


class WriteBarrier:
    """Per-user write ordering: each write gets a sequence number; a read waits for the ones before it.

    A read snapshots the highest number issued for its user and blocks until every
    write up to it is released (committed or failed), or until `timeout_s` passes,
    after which it proceeds (fail-open) and says so. Users never wait on each other:
    each has its own lane (lock and condition).
    """

    def __init__(self, timeout_s: float = 5.0):
        self.timeout_s = timeout_s
        self._lanes: dict[str, _Lane] = {}
        self._registry = threading.Lock()

    def _lane(self, user: str) -> _Lane:
        lane = self._lanes.get(user)
        if lane is None:
            with self._registry:
                lane = self._lanes.setdefault(user, _Lane())
        return lane

    def begin(self, user: str) -> int:
        lane = self._lane(user)
        with lane.cond:
            lane.issued += 1
            lane.pending.add(lane.issued)
            return lane.issued

    def release(self, user: str, seq: int) -> None:
        lane = self._lane(user)
        with lane.cond:
            lane.pending.discard(seq)
            lane.cond.notify_all()

    def pending(self, user: str) -> set[int]:
        """The user's numbers not yet released (a copy)."""
        lane = self._lane(user)
        with lane.cond:
            return set(lane.pending)

    def wait(self, user: str) -> dict:
        t0 = time.monotonic()
        lane = self._lane(user)
        with lane.cond:
            snapshot = lane.issued
            done = lane.cond.wait_for(lambda: not any(s <= snapshot for s in lane.pending), timeout=self.timeout_s)
        return {"snapshot": snapshot, "waited_s": round(time.monotonic() - t0, 6), "timed_out": not done}


class Unordered(WriteBarrier):
    """The ablation: sequence numbers are still issued (so misses can be counted) but reads never wait."""

    def wait(self, user: str) -> dict:
        lane = self._lane(user)
        with lane.cond:
            snapshot = lane.issued
        return {"snapshot": snapshot, "waited_s": 0.0, "timed_out": False, "barrier": "off"}
