"""mem0_user (beyond the paper, issue 23 item 5): Mem0 searched by user, with no barrier and no identity resolution.

The same real Mem0 as mem0_default (its own extraction on add, its own search, the same
collection settings; conditions/personal/mem0_default.py), with one difference: the assistant's
search is scoped to the user (`filters={"user_id"}`), not to the assistant agent, so it may read
what every writer stored about the user. What it lacks next to kernel_shared is exactly what the
kernel adds beyond scoping: the write barrier (the search is issued at once, while the writers'
`add` calls may still be extracting) and identity resolution (the request's own user id is
used as given), plus the kernel's per-type sharing policy (Mem0 has none: every fact of the user is
visible). Comparing mem0_user with kernel_shared therefore separates the barrier and identity
resolution from mere user scoping. Mem0 keeps no sharing policy, so each returned fact carries its
writer's memory type and no policy: the record's exposure counts every fact of another agent, and
conversation_retrieved the conversation extractor's (private in the kernel). The log keeps how many memories Mem0 held for the user when
the read began (`user_memories`, read before the timed search) beside what it returned.
"""

from __future__ import annotations

import time

from harness.personal import writers
from harness.personal.method import Injected, RunCtx

from .mem0_default import HEADER, Mem0Default


class Mem0User(Mem0Default):
    def inject(self) -> Injected:
        t = self.ctx.trial
        scope = {"user_id": t["user_id"]}
        held = self.mem.get_all(filters=scope, top_k=1000)["results"]  # before the timed search: what it could find
        t0 = time.perf_counter()
        res = self.mem.search(t["query"], filters=scope, top_k=int(self.cfg.k))["results"]
        dt = time.perf_counter() - t0
        items = [{"user_id": r.get("user_id"), "owner": r.get("agent_id"), "sharing": None,
                  "memory_type": getattr(writers.WRITERS.get(r.get("agent_id")), "memory_type", None),
                  "content": {"value": r.get("memory")}, "score": r.get("score")} for r in res]
        block = (HEADER + "\n" + "\n".join(f"- {r.get('memory')}" for r in res)) if res else ""
        return Injected(block, items, list(items), dt, {"filters": scope, "returned": len(res),
                                                         "user_memories": len(held)})


def build(cfg, ctx: RunCtx) -> Mem0User:
    return Mem0User(cfg, ctx)
