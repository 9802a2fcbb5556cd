"""LongMemEval-Org (Appendix C): one question's history split over six agents.

a0 receives the question; a1-a3 keep their memory public, a4 and a5 private.
For question q a generator seeded with (14, q, variant) shuffles the two target
agents (two of a1-a3 in the public variant; a4, a5 in the private one), gives the
evidence sessions, in sorted order (of the benchmark's answer_session_ids, as the paper
says; not in time order), alternately to the first two targets, and gives
every other session to an agent drawn uniformly from a0..a5. a0 never holds
evidence. The seed is the string repr of the tuple, which Python's random hashes
with SHA-512, so the assignment is the same on every machine and run.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .longmemeval import Question

AGENTS = ("a0", "a1", "a2", "a3", "a4", "a5")
ASKER = "a0"
PUBLIC_AGENTS = ("a1", "a2", "a3")
PRIVATE_AGENTS = ("a4", "a5")
# a0's visibility never decides a measured result (others read only their own units or
# a0 reads its own); it is public like the other non-private assistants.
VISIBILITY = {"a0": "public", "a1": "public", "a2": "public", "a3": "public",
              "a4": "private", "a5": "private"}
VARIANTS = ("public", "private")


@dataclass(frozen=True)
class OrgAssignment:
    qid: str
    variant: str
    owner: dict[str, str]  # opaque session id -> agent
    targets: tuple[str, str]

    def sessions_of(self, agent: str) -> list[str]:
        return [sid for sid, a in self.owner.items() if a == agent]


def assign(q: Question, variant: str) -> OrgAssignment:
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if q.abstention:
        raise ValueError(f"{q.qid}: LongMemEval-Org uses non-abstention questions only")
    rng = random.Random(repr((14, q.qid, variant)))
    pool = list(PUBLIC_AGENTS if variant == "public" else PRIVATE_AGENTS)
    rng.shuffle(pool)
    targets = (pool[0], pool[1])
    evidence = list(q.evidence_order) or sorted(q.evidence)
    owner: dict[str, str] = {}
    for i, sid in enumerate(evidence):
        owner[sid] = targets[i % 2]
    for s in q.sessions:
        if s.sid not in owner:
            owner[s.sid] = rng.choice(AGENTS)
    return OrgAssignment(q.qid, variant, owner, targets)
