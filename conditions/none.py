"""No memory and no tool: what the model answers from the question alone."""

from conditions import Access

FORECAST = {"calls": 1, "result_chars": 0, "schema_chars": 0}  # harness.run.forecast: one answer


def build(cfg, ctx) -> Access:
    return Access(text=str(cfg.get("access") or ""))
