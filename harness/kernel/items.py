"""Memory items as the second paper defines them: m = (user, owner agent, type, sharing policy, content).

The structured content is kept for retrieval and auditing; what reaches the prompt is
its natural-language statement (the paper's format step) or, as an ablation, the raw
JSON. In the memory space an item is one Unit: org = user (views never cross users),
owner = the writing agent, visibility "public" only for a well-formed "shared" policy
and "private" for any other (so an absent, malformed or unknown policy, "public" included,
stays private in the index's filter as well as in the kernel's re-check).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from harness.memory.units import Unit

from .visibility import UNIT_PUBLIC, is_shared

TYPES = ("profile", "task_context", "conversation")
FORMATS = ("statement", "json")

PROFILE_LINES = {
    "preferences": "The user {v}.", "tools": "The user works with {v}.",
    "language": "The user's main programming language is {v}.",
    "response_style": "The user wants answers to be {v}.", "name": "The user's name is {v}.",
}
TASK_LINES = {
    "project": "The user is currently working on {v}.", "goals": "A goal of the user's current work: {v}.",
    "blockers": "The user is blocked by {v}.", "next_steps": "A next step the user has planned: {v}.",
}


@dataclass(frozen=True)
class MemoryItem:
    user_id: str
    owner: str
    memory_type: str
    sharing: Any  # "shared" | "private" | anything else (treated as private)
    content: dict
    seq: int = 0  # the barrier sequence number of the write that produced it
    number: int = 0  # position among the writes' items, unique per (user, owner, type)
    created: float = field(default_factory=time.time)

    def statement(self) -> str:
        field_, value = self.content.get("field"), self.content.get("value")
        lines = PROFILE_LINES if self.memory_type == "profile" else TASK_LINES
        if self.memory_type == "conversation" or field_ not in lines:
            return f"Earlier the user mentioned: {value if value is not None else json.dumps(self.content)}"
        return lines[field_].format(v=value)

    def raw_json(self) -> str:
        return json.dumps({"memory_type": self.memory_type, "owner_agent": self.owner, **self.content},
                          ensure_ascii=False, sort_keys=True)

    def unit(self) -> Unit:
        visibility = UNIT_PUBLIC if is_shared(self.sharing) else "private"  # fail closed, in the index too
        return Unit(self.user_id, self.owner, visibility, self.created, f"{self.owner}/{self.memory_type}",
                    self.seq * 1000 + self.number, 0, self.statement())

    def describe(self, score: float | None = None) -> dict:
        return {"user_id": self.user_id, "owner": self.owner, "memory_type": self.memory_type,
                "sharing": self.sharing, "content": self.content, "seq": self.seq,
                **({"score": round(float(score), 6)} if score is not None else {})}


def line(item: MemoryItem, fmt: str) -> str:
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    return "- " + (item.statement() if fmt == "statement" else item.raw_json())
