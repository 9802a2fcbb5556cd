"""Views: what one agent may retrieve, written as a predicate, never as a list of agents.

shared: org = O AND (owner = me OR visibility = public)   (the paper's Eq. 2)
own:    org = O AND owner = me                            (isolated, ask_agent's own loops)
all:    org = O                                            (no view)
since/until restrict further by commit time. Each backend compiles a View into
its own filter syntax; `admits` is the reference semantics the tests hold them to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .units import Unit

Scope = Literal["shared", "own", "all"]


@dataclass(frozen=True)
class View:
    org: str
    agent: str | None = None
    scope: Scope = "shared"
    since: float | None = None  # epoch seconds, inclusive
    until: float | None = None  # epoch seconds, inclusive

    def __post_init__(self):
        if self.scope not in ("shared", "own", "all"):
            raise ValueError(f"unknown view scope {self.scope!r}")
        if self.scope != "all" and not self.agent:
            raise ValueError(f"a {self.scope!r} view needs an agent")

    def admits(self, u: Unit) -> bool:
        if u.org != self.org:
            return False
        if self.scope == "own" and u.owner != self.agent:
            return False
        if self.scope == "shared" and not (u.owner == self.agent or u.visibility == "public"):
            return False
        if self.since is not None and u.time < self.since:
            return False
        if self.until is not None and u.time > self.until:
            return False
        return True

    @property
    def key(self) -> str:
        """Identifies the view without its date filter: one lexical index per key (Proposition 1)."""
        return f"{self.org}|{self.scope}|{self.agent or '*'}"

    def without_dates(self) -> "View":
        return View(self.org, self.agent, self.scope)

    def describe(self) -> dict:
        return {"org": self.org, "agent": self.agent, "scope": self.scope, "since": self.since, "until": self.until}
