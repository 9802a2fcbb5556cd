"""How many calls an endpoint without declared slots serves at once, measured before the runs.

A server that answers one call at a time (Ollama, llama.cpp) but whose preset declares no slots would queue
the writers' calls of every trial in flight inside it, unseen, and the kernel's reads would time out at the
barrier. So before the runs the stage times one call of one output token alone (the better of two), then
`n` at once (the better of two rounds): when the n take about n times as long the server serves
round(n x alone's waiting / together) at a time, and the stage treats that as its slots (trials in flight and every
call's slot, as for declared ones). However fast a call is, the calls at once are measured: a call answered in 20 ms
by a one-slot server is still one slot (a fast call is repeated, `rounds` calls a side, so the comparison lasts
long enough to see). Only time spent waiting (wall time minus this process's CPU time) counts as the server's:
calls bound by the client's own CPU (an instant server, a proxy in this process) are not a serial server; and a
one-slot server takes at least n x alone's waiting for the n at once, so the estimate stays about one however much
the client's own cost per call is (alone's wall time, which the n at once overlap, made a 20 ms one-slot server
measure 2 slots on a loaded CI machine). An endpoint that serves the n together is not capped here. The calls go
through the stage's metering proxy under role `preflight` (2 + 2 rounds + 2n rounds calls of one token), and only
when the stage asks for more than one trial in flight (at one, there is nothing to cap).
"""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor

from harness.endpoints.client import Agent, Meter, backoff_s
from harness.run.preflight import ROLE, messages

MEASURABLE_S = 0.25  # each side of the comparison lasts at least this long, so a fast server's queue shows
MAX_ROUNDS = 12  # calls per thread at most (a server answering in under 20 ms is measured over 12 rounds)


def endpoint_slots(proxy_url: str, model_cfg, n: int = 4) -> tuple[int | None, dict]:
    """(calls the endpoint serves at once as measured, or None when it served all n together; the figures).
    Always measured, however fast a call is: `rounds` calls one after another, against n threads making `rounds`
    calls each at once (rounds chosen so the serial side lasts about MEASURABLE_S: 20 ms a call is measurable)."""
    def one() -> float:
        agent = Agent(proxy_url, model_cfg, "capacity-probe", 1, Meter(model_cfg.prices, model_cfg.offpeak),
                      role=ROLE, max_retries=2, backoff_s=backoff_s(model_cfg),
                      params={**dict(model_cfg.params or {}), "max_tokens": 1})
        t0 = time.perf_counter()
        agent.complete(messages(dict(model_cfg.params or {})))
        return time.perf_counter() - t0

    def serial(rounds: int) -> float:
        t0 = time.perf_counter()
        for _ in range(rounds):
            one()
        return time.perf_counter() - t0

    def at_once(rounds: int) -> float:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(n) as ex:
            list(ex.map(lambda _: serial(rounds), range(n)))
        return time.perf_counter() - t0

    def timed(f) -> tuple[float, float]:
        c0 = time.process_time()
        wall = f()
        return wall, time.process_time() - c0

    single = min(one(), one())
    rounds = max(1, min(MAX_ROUNDS, math.ceil(MEASURABLE_S / max(single, 1e-3))))
    alone, alone_cpu = min(timed(lambda: serial(rounds)), timed(lambda: serial(rounds)))
    together, cpu = min(timed(lambda: at_once(rounds)), timed(lambda: at_once(rounds)))  # a loaded client is no server
    # the time the n spent not computing in this process (the client, a proxy or a fake server in it): waiting
    # on the server. A serial server makes that about n x alone; calls bound by this process's own CPU do not
    waiting = max(0.0, together - cpu)
    figures = {"single_s": round(single, 4), "rounds": rounds, "alone_s": round(alone, 4),
               "alone_cpu_s": round(alone_cpu, 4), "together_s": round(together, 4), "together_cpu_s": round(cpu, 4),
               "probed": n}
    if together <= 1.5 * alone or waiting <= 1.5 * alone:
        return None, figures
    return max(1, min(n, round(n * max(0.0, alone - alone_cpu) / together))), figures
