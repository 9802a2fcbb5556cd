"""Injection: the kernel, not the agent, reads memory and places it in the prompt.

The assistant gets no memory tool. Before its turn the kernel waits on the
user's write barrier, retrieves candidates from the memory space, keeps only
what the visibility rule admits, drops duplicates, ranks by relevance, keeps at
most `cap` memories scoring at least `threshold`, writes each as a sentence,
truncates the block to a token budget and prepends it to the prompt under
`===== MEMORY CONTEXT =====`.

Visibility (harness.kernel.visibility) never fails open; the barrier
(harness.kernel.barrier) does (after `timeout_s`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

from harness.data.longmemeval import DATE_FORMAT
from harness.memory.views import View

from .barrier import WriteBarrier
from .encoding import for_user
from .visibility import unit_visible

HEADER = "===== MEMORY CONTEXT ====="
FOOTER = "===== END MEMORY CONTEXT ====="
CHARS_PER_TOKEN = 4  # the budget is model-agnostic, so tokens are estimated from characters


@dataclass
class Injection:
    block: str
    memories: list  # the space's Results that made it into the block, best first
    log: dict = field(default_factory=dict)


class Kernel:
    def __init__(self, space, barrier: WriteBarrier | None = None, budget_tokens: int = 2000, cap: int = 10,
                 threshold: float = 0.3, scoring: str = "dense", candidates: int = 30, formatter=None,
                 two_stage: bool = False):
        self.space, self.barrier = space, barrier or WriteBarrier()
        self.format = formatter or statement  # unit -> the line the block shows (the paper's format step)
        self.budget_tokens, self.cap, self.threshold = budget_tokens, cap, threshold
        self.scoring, self.candidates = scoring, candidates
        self.two_stage = two_stage  # A.9: the agent's own memories, then the other agents' shared ones

    def search(self, org: str, agent: str, query: str) -> tuple[list, dict]:
        """The candidates of a read and how many each stage gave. Two stages (A.9, the second paper's kernel):
        the requesting agent's own memories of the user (View scope "own"), then the other agents' memories
        the view admits (scope "shared"), merged by uid, the own stage first; one stage: the shared view."""
        if not self.two_stage:
            res = self.space.search(query, View(org, agent, "shared"), k=self.candidates, scoring=self.scoring)
            return res, {"shared_view": len(res)}
        own = self.space.search(query, View(org, agent, "own"), k=self.candidates, scoring=self.scoring)
        shared = self.space.search(query, View(org, agent, "shared"), k=self.candidates, scoring=self.scoring)
        have = {r.unit.uid for r in own}
        rest = [r for r in shared if r.unit.uid not in have]
        return own + rest, {"agent_scoped": len(own), "cross_agent": sum(r.unit.owner != agent for r in rest)}

    def write(self, round_, org: str, owner: str, visibility: str):
        """Commit a round through the barrier; a failed write still releases its number."""
        seq = self.barrier.begin(org)
        try:
            return self.space.commit(round_, org, owner, visibility)
        finally:
            self.barrier.release(org, seq)

    def inject(self, org: str, agent: str, query: str) -> Injection:
        barrier = self.barrier.wait(org)
        with for_user(org):  # the query queues as this user's at the encoder
            results, stages = self.search(org, agent, query)
        kept, seen, dropped = [], set(), {"invisible": 0, "duplicate": 0, "below_threshold": 0}
        for r in results:
            u = r.unit
            if not unit_visible(u.owner, u.visibility, agent):
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
            "scoring": self.scoring, "view": View(org, agent, "shared").describe(), "stages": stages,
            "units": [[r.unit.uid, r.unit.owner] for r in results], "injected": [r.unit.uid for r in final],
            "dropped": dropped, "barrier": barrier, "threshold": self.threshold, "cap": self.cap,
            "budget_tokens": self.budget_tokens})


def statement(unit) -> str:
    """A memory as a natural-language statement rather than raw structure (the paper's format step)."""
    when = datetime.fromtimestamp(unit.time, tz=timezone.utc).strftime(DATE_FORMAT)
    text = " ".join(unit.text.split())
    text = text.replace("User: ", "the user said: ", 1).replace(" Assistant: ", "; the assistant replied: ", 1)
    return f"- On {when}, {text}"
