"""mem0_user (beyond the paper, issue 23 item 5): Mem0 searched by user once its own adds are in, no identity resolution.

The same real Mem0 as mem0_default (its own extraction on add, its own search, the same
collection settings; conditions/personal/mem0_default.py), with one difference: the assistant's
search is scoped to the user (`filters={"user_id"}`), not to the assistant agent, so it may read
what every writer stored about the user. What it lacks next to kernel_shared is exactly what the
kernel adds beyond scoping: the kernel's barrier (it waits for this trial's own `add` calls, at most
`write_wait_s`, and says which it missed; it knows nothing of other writes for the user) and identity resolution (the request's own user id is
used as given), plus the kernel's per-type sharing policy (Mem0 has none: every fact of the user is
visible). Comparing mem0_user with kernel_shared therefore separates the barrier and identity
resolution from mere user scoping. Mem0 keeps no sharing policy, so each returned fact carries its
writer's memory type and no policy: the record's exposure counts every fact of another agent, and
conversation_retrieved the conversation extractor's (private in the kernel). The log keeps how many memories Mem0 held for the user when
the read began (`user_memories`, read before the timed search) beside what it returned.
"""

from __future__ import annotations

import time
from concurrent.futures import wait
from dataclasses import dataclass

from harness.personal import writers
from harness.personal.method import Injected

from . import mem0_default
from .mem0_default import Mem0Default


@dataclass
class Settings(mem0_default.Settings):
    """Mem0's options and how long a read waits for the trial's own adds (conf/condition/mem0_user.yaml)."""

    write_wait_s: float = 5.0


class Mem0User(Mem0Default):
    searched_by = "user_id"
    def scope(self) -> dict:
        return {"user_id": self.ctx.trial["user_id"]}

    def inject(self) -> Injected:
        """Wait for this trial's own adds (at most `write_wait_s`, fail-open like the kernel's barrier), then search
        by user; the log's `barrier` says how long it waited and whether it gave up, `finish` which adds it missed."""
        t0 = time.monotonic()
        done, late = wait(self.futures, timeout=float(self.cfg.write_wait_s))
        self.late = [i for i, f in enumerate(self.futures) if f in late]
        barrier = {"snapshot": len(self.futures), "waited_s": round(time.monotonic() - t0, 6),
                   "timed_out": bool(late), "barrier": "mem0_user waits for its own adds"}
        return self.read(self.scope(), barrier)

    def describe(self, r: dict) -> dict:
        return {"user_id": r.get("user_id"), "owner": r.get("agent_id"), "sharing": None,
                "memory_type": getattr(writers.WRITERS.get(r.get("agent_id")), "memory_type", None),
                "content": {"value": r.get("memory")}, "score": r.get("score")}

    def finish(self) -> dict:
        out = super().finish()
        late = getattr(self, "late", [])
        out["reads"] = {"writes_before_read": len(self.futures), "missed": len(late), "unfinished": len(late),
                        "failed": len(out["write_errors"]),
                        "missed_writers": [str(self.cfg.writers[i]) for i in late]}
        return out


build = Mem0User
