"""Ways of reaching memory, one module each; `conf/condition/<name>.yaml` names its module.

A condition module defines `build(cfg, ctx) -> Access`: the access paragraph of the
system prompt and the tools of one run. The driver knows nothing else about it,
so a new condition is one module and one config file.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

from harness.run.tools import Tool


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


def load(module: str):
    mod = importlib.import_module(f"conditions.{module}")
    if not hasattr(mod, "build"):
        raise TypeError(f"conditions.{module} has no build(cfg, ctx)")
    return mod
