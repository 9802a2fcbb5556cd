"""Kernel-managed injection (second seed paper): memories placed in the prompt by the kernel; no tool.

The kernel retrieves under the agent's view (own OR shared), re-checks visibility,
de-duplicates, keeps at most `cap` memories scoring at least `threshold`, writes
them as statements within a token budget, and prepends the block to the user's
message. The kernel is harness/kernel/ (injection.py).
"""

import time

from conditions import Access
from harness.kernel import Kernel, WriteBarrier

NEEDS = ("memory_space",)  # checked before the first run (harness.run.preflight)
FORECAST = {"calls": 1, "result_chars": 0, "schema_chars": 0}  # harness.run.forecast: the block is injected


def build(cfg, ctx) -> Access:
    space = ctx.space  # loading the organisation's units is setup
    kernel = Kernel(space, WriteBarrier(float(cfg.barrier_timeout_s)), int(cfg.budget_tokens), int(cfg.cap),
                    float(cfg.threshold), str(cfg.scoring), int(cfg.candidates))
    t0 = time.perf_counter()
    inj = kernel.inject(ctx.spec.org, ctx.agent, ctx.question.question)
    return Access(text=str(cfg.get("access") or ""), prefix=inj.block, retrieval_s=time.perf_counter() - t0,
                  sessions=[r.unit.session for r in inj.memories], log=[inj.log],
                  notes={"injected": len(inj.memories), "dropped": inj.log["dropped"],
                         "barrier": inj.log["barrier"]})
