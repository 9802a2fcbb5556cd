"""Is the server dead, or is this call unlucky? The one rule the stage driver and the judge share.

A call that ran out of retries is the server's failure when no call succeeded since it gave up and the
server does not answer one plain request (the preflight's, one attempt) either; otherwise it is that
call's own (harness.failures). Answered calls are heard from the ledger (a listener); calls failing
together share one probe.
"""

from __future__ import annotations

import threading
import time
from typing import Callable


class Liveness:
    def __init__(self, probe: Callable[[], bool]):
        self.probe = probe  # one plain request: True when the server answered it
        self.last_good: float | None = None  # time.monotonic() of the last answered call (the ledger's)
        self.probe_failed: float | None = None  # time.monotonic() of the last probe the server failed
        self._lock = threading.Lock()

    def heard(self, e: dict) -> None:
        """Ledger listener: an answered call (a 200 that is a completion) shows the server works."""
        if e.get("event") == "response" and e.get("status") == 200 and not e.get("error"):
            self.last_good = time.monotonic()

    def silent_since(self, t: float) -> bool:
        """No call succeeded since `t`, and the server does not answer a plain request either."""
        with self._lock:
            if self.probe_failed is not None and self.probe_failed > t:
                return True
            if self.last_good is not None and self.last_good > t:
                return False
            if not self.probe():
                self.probe_failed = time.monotonic()
                return True
            return False
