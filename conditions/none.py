"""No memory and no tool: what the model answers from the question alone."""

from dataclasses import dataclass

from conditions import Access

FORECAST = {"calls": 1, "result_chars": 0, "schema_chars": 0}  # harness.run.forecast: one answer


@dataclass
class Settings:
    """No options of its own."""


def build(cfg: Settings, ctx) -> Access:
    return Access(text=cfg.access or "")
