"""Kernel-managed injection (second seed paper): memories placed in the prompt by the kernel; no tool.

The kernel retrieves under the agent's view (own OR shared), re-checks visibility,
de-duplicates, keeps at most `cap` memories scoring at least `threshold`, writes
them as statements within a token budget, and prepends the block to the user's
message. The kernel is harness/kernel/ (injection.py).
"""

import time
from dataclasses import dataclass
from typing import ClassVar

from conditions import Access
from harness.memory.space import SCORINGS
from harness.kernel import Kernel, WriteBarrier

NEEDS = ("memory_space",)  # checked before the first run (harness.run.preflight)
FORECAST = {"calls": 1, "result_chars": 0, "schema_chars": 0}  # harness.run.forecast: the block is injected


@dataclass
class Settings:
    """The kernel's retrieval and injection (conf/condition/kernel.yaml); scoring dense: the 0.3 threshold is a cosine."""

    # the keys whose values are names a publish may show (harness.run.settings.publish_names): choices
    NAMES: ClassVar[dict] = {"scoring": SCORINGS}

    scoring: str = "dense"
    candidates: int = 30
    cap: int = 10
    threshold: float = 0.3
    budget_tokens: int = 2000
    barrier_timeout_s: float = 5.0


def build(cfg: Settings, ctx) -> Access:
    space = ctx.space  # loading the organisation's units is setup
    kernel = Kernel(space, WriteBarrier(cfg.barrier_timeout_s), cfg.budget_tokens, cfg.cap, cfg.threshold, cfg.scoring,
                    cfg.candidates)
    t0 = time.perf_counter()
    inj = kernel.inject(ctx.spec.org, ctx.agent, ctx.question.question)
    return Access(text=cfg.access or "", prefix=inj.block, retrieval_s=time.perf_counter() - t0,
                  sessions=[r.unit.session for r in inj.memories], log=[inj.log],
                  notes={"injected": len(inj.memories), "dropped": inj.log["dropped"],
                         "barrier": inj.log["barrier"]})
