"""Kernel-managed injection (the second seed paper): the kernel, not the agent, reads memory.

The assistant gets no memory tool. Before its turn the kernel waits on the
user's write barrier, retrieves candidates from the memory space, keeps only
what the visibility rule admits, drops duplicates, ranks by relevance, keeps at
most `cap` memories scoring at least `threshold`, writes each as a sentence,
truncates the block to a token budget and prepends it to the prompt under
`===== MEMORY CONTEXT =====`.

Visibility: visible(m, a) = owner(m) = a OR sharing(m) = shared, where our units'
"public" is the paper's "shared"; any other or missing value means private.
Visibility never fails open; the barrier does (after `timeout_s`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from harness.data.longmemeval import DATE_FORMAT
from harness.memory.views import View

HEADER = "===== MEMORY CONTEXT ====="
FOOTER = "===== END MEMORY CONTEXT ====="
CHARS_PER_TOKEN = 4  # the budget is model-agnostic, so tokens are estimated from characters
SHARED = {"shared", "public"}


def visible(owner: str, sharing, agent: str) -> bool:
    return owner == agent or (isinstance(sharing, str) and sharing.strip().lower() in SHARED)


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


@dataclass
class Injection:
    block: str
    memories: list  # the space's Results that made it into the block, best first
    log: dict = field(default_factory=dict)


class Kernel:
    def __init__(self, space, barrier: WriteBarrier | None = None, budget_tokens: int = 2000, cap: int = 10,
                 threshold: float = 0.3, scoring: str = "dense", candidates: int = 30, formatter=None):
        self.space, self.barrier = space, barrier or WriteBarrier()
        self.format = formatter or statement  # unit -> the line the block shows (the paper's format step)
        self.budget_tokens, self.cap, self.threshold = budget_tokens, cap, threshold
        self.scoring, self.candidates = scoring, candidates

    def write(self, round_, org: str, owner: str, visibility: str):
        """Commit a round through the barrier; a failed write still releases its number."""
        seq = self.barrier.begin(org)
        try:
            return self.space.commit(round_, org, owner, visibility)
        finally:
            self.barrier.release(org, seq)

    def inject(self, org: str, agent: str, query: str) -> Injection:
        barrier = self.barrier.wait(org)
        results = self.space.search(query, View(org, agent, "shared"), k=self.candidates, scoring=self.scoring)
        kept, seen, dropped = [], set(), {"invisible": 0, "duplicate": 0, "below_threshold": 0}
        for r in results:
            u = r.unit
            if not visible(u.owner, u.visibility, agent):
                dropped["invisible"] += 1
                continue
            key = " ".join(u.text.lower().split())
            if key in seen:
                dropped["duplicate"] += 1
                continue
            seen.add(key)
            if r.score < self.threshold:
                dropped["below_threshold"] += 1
                continue
            kept.append(r)
        kept.sort(key=lambda r: (-r.score, r.unit.uid))
        kept = kept[: self.cap]
        lines, used, final = [], len(HEADER) + len(FOOTER) + 2, []
        for r in kept:
            line = self.format(r.unit)
            if (used + len(line) + 1) / CHARS_PER_TOKEN > self.budget_tokens:
                break
            lines.append(line)
            used += len(line) + 1
            final.append(r)
        block = f"{HEADER}\n" + "\n".join(lines) + f"\n{FOOTER}\n\n" if lines else ""
        return Injection(block, final, {
            "kind": "search", "agent": agent, "query": query, "k": self.candidates, "since": None, "until": None,
            "scoring": self.scoring, "view": View(org, agent, "shared").describe(),
            "units": [[r.unit.uid, r.unit.owner] for r in results], "injected": [r.unit.uid for r in final],
            "dropped": dropped, "barrier": barrier, "threshold": self.threshold, "cap": self.cap,
            "budget_tokens": self.budget_tokens})


def statement(unit) -> str:
    """A memory as a natural-language statement rather than raw structure (the paper's format step)."""
    when = datetime.fromtimestamp(unit.time, tz=timezone.utc).strftime(DATE_FORMAT)
    text = " ".join(unit.text.split())
    text = text.replace("User: ", "the user said: ", 1).replace(" Assistant: ", "; the assistant replied: ", 1)
    return f"- On {when}, {text}"
