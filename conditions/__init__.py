"""Ways of reaching memory, one module each; `conf/condition/<name>.yaml` names its module.

A condition module defines `build(cfg, ctx) -> Access`: the access paragraph of the
system prompt and the tools of one run. The driver knows nothing else about it,
so a new condition is one module and one config file. What the rest of the harness
needs to know about a condition it reads from the module (each optional):

  NEEDS          what the preflight must check (memory_space, sandbox, runtime)
  FORECAST       its typical run for the cost forecast (or forecast(cfg) -> dict)
  SEARCH_TOOLS   tool names whose calls the tool_use table counts as searches
  REPLAY         log kind -> how the exposure replay re-executes it (a `search` is the space's own)
  NOT_REPLAYED   why its memory calls are not replayed (fan-out: the runtime's stores)
  tool_texts(cfg, org)  the texts the model reads from its tools (fidelity manifest: sha256 pinned in conf/paper.yaml)

and from its yaml: `reference: true` (the condition every other one of a table is compared
with) and `compare_with: [...]` (further pairs the tables report, this condition first).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

from harness.plugins import Registry, caller
from harness.runtime.tools import Tool


@dataclass
class Access:
    text: str  # the {access} paragraph, with any prefetched memories or history inlined
    tools: list[Tool] = field(default_factory=list)
    prefix: str = ""  # put before the user's message (kernel-managed injection)
    max_rounds: int = 10
    retrieval_s: float = 0.0  # retrieval done before the loop (prefetch)
    sessions: list[str] = field(default_factory=list)  # sessions placed in the prompt before the loop
    log: list[dict] = field(default_factory=list)  # pre-loop retrievals, for the exposure replay
    notes: dict[str, Any] = field(default_factory=dict)  # what the record should say about this condition
    close: list[Callable[[], None]] = field(default_factory=list)  # run after the loop (open stores, ...)


CONDITIONS: Registry[ModuleType] = Registry("condition", __name__, is_entry=lambda m: hasattr(m, "build"))


def register(name: str) -> ModuleType:
    """`conditions.register("toy")` in a plugin module: its yaml may then say `module: toy`."""
    origin = caller()
    return CONDITIONS.register(name, sys.modules[origin], origin)


def modules() -> list:
    """Every agent-run condition module (the tree's and the plugins'; the personalization methods,
    conditions/personal/, are another contract)."""
    return [m for n, m in sorted(CONDITIONS.items().items()) if not n.startswith("personal.")]


def needs(nodes) -> set[str]:
    """What the stage's conditions need (their NEEDS: memory_space, sandbox, runtime); nodes: key -> node."""
    out: set[str] = set()
    for c in (nodes or {}).values():
        out |= set(getattr(load(str(c.module)), "NEEDS", ()))
    return out


def search_tools(module: str | None = None) -> set[str]:
    """The tool names a condition module declares as searches (SEARCH_TOOLS); for a module this tree
    cannot load (a folder from elsewhere), every tree condition's."""
    try:
        return set(getattr(load(str(module)), "SEARCH_TOOLS", ())) if module else _all_search_tools()
    except ImportError:
        return _all_search_tools()


def _all_search_tools() -> set[str]:
    return {t for m in modules() for t in getattr(m, "SEARCH_TOOLS", ())}


def load(module: str):
    """The registered condition module named `module` (`memory_tool`, `personal.naive_concat`, a plugin's
    `mypkg/toy`); any other name is refused with ModuleNotFoundError and nothing imported.

    WHY: the one point where a condition's code is loaded by name, written as an allowlist. The names come
    from configs and from records of received datasets; code is only ever found among the modules installed
    here (the tree's and the plugins named by entry point or $MEMSPACE_PLUGINS), never imported from a name
    a record carries (`module: venv.__main__` ran venv in the analyst's folder)."""
    if isinstance(module, str) and module in CONDITIONS:
        return CONDITIONS.get(module)
    raise ModuleNotFoundError(f"no condition module {str(module)[:80]!r} is registered (known: "
                              f"{', '.join(CONDITIONS.names())}; a plugin registers its own with "
                              "conditions.register('<pkg>/<name>'))", name="conditions")
