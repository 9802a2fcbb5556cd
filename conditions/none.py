"""No memory and no tool: what the model answers from the question alone."""

from conditions import Access


def build(cfg, ctx) -> Access:
    return Access(text=str(cfg.get("access") or ""))
