"""Prefetch: the memory tool's results for the question itself, placed in the prompt; no tool."""

import time
from dataclasses import dataclass
from typing import ClassVar, get_args

from conditions import Access
from harness.memory.space import SCORINGS
from harness.memory.views import Scope
from conditions.memory_tool import format_results, result_chars

NEEDS = ("memory_space",)  # checked before the first run (harness.run.preflight)
# harness.run.forecast: one call; the eight results are in the prompt
FORECAST = {"calls": 1, "result_chars": 0, "schema_chars": 0, "prefix_chars": 6_500}


@dataclass
class Settings:
    """The search placed in the prompt (conf/condition/prefetch.yaml): the memory tool's, for the question itself."""

    # the keys whose values are names a publish may show (harness.run.settings.publish_names): choices
    NAMES: ClassVar[dict] = {"scoring": SCORINGS, "scope": get_args(Scope)}

    scoring: str = "hybrid"
    scope: str = "own"
    k: int = 8


def forecast(cfg: Settings, question=None) -> dict:
    """One call; the k results placed in the prompt, sized from the question's own history."""
    return FORECAST if question is None else {**FORECAST, "prefix_chars": result_chars(question, cfg.k)}


def build(cfg: Settings, ctx) -> Access:
    view = ctx.view(cfg.scope)
    k = cfg.k
    space = ctx.space  # loads the organisation's units first: setup, not retrieval time
    t0 = time.perf_counter()
    results = space.search(ctx.question.question, view, k=k, scoring=cfg.scoring)
    took = time.perf_counter() - t0
    return Access(
        text=str(cfg.access).format(results=format_results(results, ctx.is_org)),
        retrieval_s=took, sessions=[r.unit.session for r in results],
        log=[{"kind": "search", "agent": view.agent, "query": ctx.question.question, "k": k, "since": None,
              "until": None, "scoring": cfg.scoring, "view": view.describe(),
              "units": [[r.unit.uid, r.unit.owner] for r in results]}])
