"""The kernel's visibility rule (the second seed paper): who may see a memory.

visible(m, a) = owner(m) = a OR sharing(m) = shared, where our units' "public" is the
paper's "shared"; any other or missing value means private. Visibility never fails open.
"""

from __future__ import annotations

from typing import Any

SHARED = {"shared", "public"}


def visible(owner: str, sharing, agent: str) -> bool:
    return owner == agent or (isinstance(sharing, str) and sharing.strip().lower() in SHARED)


def is_shared(sharing: Any) -> bool:
    """A well-formed "shared" policy of a memory item (stored as the unit's "public"); anything else is private."""
    return isinstance(sharing, str) and sharing.strip().lower() == "shared"
