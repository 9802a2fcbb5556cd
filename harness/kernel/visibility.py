"""The kernel's visibility rule (the second seed paper): who may see a memory.

visible(m, a) = owner(m) = a OR sharing(m) = "shared". An absent, malformed or unknown policy
("public", "Shared", " shared", None, 1, a list, ...) or an explicit "private" means private: visibility fails
closed, never open (Section 3.3). In the memory space a shared item's unit carries the index's
own spelling, visibility "public" (MemoryItem.unit writes it only for a well-formed "shared"),
and `unit_visible` is the same rule on units.
"""

from __future__ import annotations

from typing import Any

SHARED = "shared"  # the one policy that shares, compared exactly (Eq. 1: s = "shared"; no lenient parse)
UNIT_PUBLIC = "public"  # how the memory space's units spell a shared item (harness.memory.views)


def is_shared(sharing: Any) -> bool:
    """A well-formed "shared" policy; anything else is private."""
    return isinstance(sharing, str) and sharing == SHARED


def visible(owner: str, sharing, agent: str) -> bool:
    """The paper's Eq. 1 on a memory item's owner and sharing policy."""
    return owner == agent or is_shared(sharing)


def unit_visible(owner: str, visibility, agent: str) -> bool:
    """Eq. 1 on a memory-space unit: its own agent's, or one the kernel indexed as shared ("public")."""
    return owner == agent or visibility == UNIT_PUBLIC
