"""naive_concat (second seed paper): every profile and task message, unfiltered, in the prompt.

No writers, no memory system: the soft ceiling on available context.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.personal.method import Injected, Method, RunCtx


@dataclass
class Settings:
    """No options of its own: every message of the trial in the prompt."""

HEADER = "Everything the user has told you:"


class NaiveConcat(Method):
    def __init__(self, cfg: Settings, ctx: RunCtx):
        self.ctx = ctx

    def inject(self) -> Injected:
        m = self.ctx.trial["messages"]
        block = f"{HEADER}\n{m['profile']}\n{m['task']}"
        return Injected(block, log={"chars": len(block)})


build = NaiveConcat
