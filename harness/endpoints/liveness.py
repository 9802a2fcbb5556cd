"""Is the server failing, or is this run (judgement) unlucky? The one breaker of the driver and both judges.

The server is judged by what it answered since the failures began, never by what succeeded earlier
nor by a one-token probe answering: a unit (a run, or a judgement) whose call ran out of retries
(`retries`) or was rejected in a way the body does not explain (`rejected`) is HELD, not recorded.
Held units are recorded failed only when a later unit succeeds — the server kept answering others,
so the failure was that unit's own conversation. The stage stops (EnvironmentFailure, exit 3) with
every held unit unrecorded when

* `n` held units ran out of retries in a row (units, whatever their keys: the runs of one question count
  each, so a stage of fewer questions than `n` stops after `n` failed runs, not at its end),
* `n` held units were rejected the same way (the same signature: the body with its numbers blanked),
* a unit ran out of retries and the server does not answer one plain request either (`probe`: a
  failing probe stops at once; an answering one decides nothing), or
* the stage ends with units still held (no unit succeeded after them).

Any other failure (a prompt over the context, the run's own loop) is the unit's own and is recorded
at once. `n` is `model.breaker_runs` (3); `n=0` records every failure at once (declared in the
config: a server that must be trusted).
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from harness.failures import EnvironmentFailure

SERVER = ("retries", "rejected")  # the failures that may be the server's


class Breaker:
    def __init__(self, n: int, probe: Callable[[], bool] | None = None, what: str = "runs",
                 fix: str = "fix or restart the model server (model.base_url), then run the same command",
                 server: str = "the model server"):
        self.n, self.probe, self.what, self.fix, self.server = int(n), probe, what, fix, server
        self.held: list[tuple[Any, str, str | None, Any, str]] = []  # (unit, reason, signature, key, error)
        self.tripped = False
        self._lock = threading.Lock()

    def admit(self, unit: Any, ok: bool, reason: str | None = None, signature: str | None = None, key: Any = None,
              error: str = "") -> list:
        """The units to record now, in order; raises EnvironmentFailure when the breaker trips (the units it
        holds stay unrecorded, and so does every unit admitted after)."""
        with self._lock:
            if self.tripped:
                return []  # the stage is stopping: units still in flight stay unrecorded too
            if ok:  # the server answered a unit after the held ones failed: their failures were their own
                out = [u for u, *_ in self.held] + [unit]
                self.held.clear()
                return out
            if reason not in SERVER or self.n <= 0:
                return [unit]
            self.held.append((unit, reason, signature, key, error))
            why = self._why()
        if why is None and reason == "retries" and self.probe is not None and not self.probe():
            why = (f"a {self.what[:-1]} ran out of retries and the server does not answer a plain request either")
        if why is not None:
            self._trip(why, error)
        return []

    def _why(self) -> str | None:
        out = [k for _, r, _, k, _ in self.held if r == "retries"]
        if len(out) >= self.n:  # units, not questions: a stage of 2 questions never had 3 different ones
            return (f"{len(out)} {self.what} in a row ran out of retries since the last success "
                    f"({len(set(out))} different questions)")
        sigs = [s for _, r, s, _, _ in self.held if r == "rejected" and s is not None]
        same = max((sigs.count(s) for s in set(sigs)), default=0)
        if same >= self.n:
            return f"the same endpoint rejection ended {same} {self.what} in a row since the last success"
        return None

    def _trip(self, why: str, error: str) -> None:
        with self._lock:
            if self.tripped:
                return
            self.tripped = True
            k = len(self.held)
        raise EnvironmentFailure(f"{self.server} keeps failing: {why}; its last answer: {error}"[:2000],
                                 f"{self.fix}: the {k} {self.what} it hit stay unrecorded and run again")

    def release(self) -> list:
        """At the end: units still held had no success after them — the server's failure (raised), never
        recorded failed."""
        with self._lock:
            if self.tripped or not self.held:
                self.held.clear()
                return []
            k, last = len(self.held), self.held[-1][4]
        self._trip(f"{k} {self.what} ran out of retries or were rejected and none succeeded after them", last)
        return []
