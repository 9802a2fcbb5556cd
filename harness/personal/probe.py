"""How many calls an endpoint without declared slots serves at once, measured before the runs.

A server that answers one call at a time (Ollama, llama.cpp) but whose preset declares no slots would queue
the writers' calls of every trial in flight inside it, unseen, and the kernel's reads would time out at the
barrier. So before the runs the stage times one call of one output token alone (the better of two), then
`n` at once (the better of two rounds): when the n take about n times as long the server serves round(n x single / together) at a
time, and the stage treats that as its slots (trials in flight and every call's slot, as for declared ones).
An endpoint that answers at once (a single call under 50 ms) or serves the n together is not capped here.
The calls go through the stage's metering proxy under role `preflight` (2, or 2 + 2n, calls of one token),
and only when the stage asks for more than one trial in flight (at one, there is nothing to cap).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from harness.endpoints.client import Agent, Meter, backoff_s
from harness.run.preflight import ROLE, messages

INSTANT_S = 0.05  # a single call faster than this: the server is not what bounds the stage


def endpoint_slots(proxy_url: str, model_cfg, n: int = 4) -> tuple[int | None, dict]:
    """(calls the endpoint serves at once as measured, or None when it served all n together; the figures)."""
    def one() -> float:
        agent = Agent(proxy_url, model_cfg, "capacity-probe", 1, Meter(model_cfg.prices, model_cfg.offpeak),
                      role=ROLE, max_retries=2, backoff_s=backoff_s(model_cfg),
                      params={**dict(model_cfg.params or {}), "max_tokens": 1})
        t0 = time.perf_counter()
        agent.complete(messages(dict(model_cfg.params or {})))
        return time.perf_counter() - t0

    def at_once() -> float:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(n) as ex:
            list(ex.map(lambda _: one(), range(n)))
        return time.perf_counter() - t0

    single = min(one(), one())
    if single < INSTANT_S:
        return None, {"single_s": round(single, 4), "together_s": None, "probed": 1}
    together = min(at_once(), at_once())  # the better of two: a loaded client is not a serial server
    figures = {"single_s": round(single, 4), "together_s": round(together, 4), "probed": n}
    if together <= 1.5 * single:
        return None, figures
    return max(1, min(n, round(n * single / together))), figures
