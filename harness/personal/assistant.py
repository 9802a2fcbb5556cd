"""AssistantAgent (Section 3.5): answers from whatever the method injected; it retrieves nothing itself.

The injected block is a system message placed before the user's query, as the kernel
does it (Appendix A.8); a method that injects nothing leaves the prompt bare.
"""

from __future__ import annotations

import time

NAME = "assistant_agent"
SYSTEM = ("You are AssistantAgent, a helpful personal assistant for the user's work. Answer the user's request "
          "directly and helpfully. Tailor the answer to what you know about the user and their current work.")


def messages(block: str, query: str) -> list[dict]:
    out = [{"role": "system", "content": SYSTEM}]
    if block:
        out.append({"role": "system", "content": block})
    out.append({"role": "user", "content": query})
    return out


def answer(agent, block: str, query: str) -> tuple[str, float, float, list[dict]]:
    """(reply text, seconds of the call, seconds queued for an endpoint slot before it, the messages sent).

    The call's seconds are the paper's latency (Section 4.5); a client that holds the endpoint's slots
    (harness.personal.method.Slotted) says how long it queued, which is kept apart."""
    msgs = messages(block, query)
    before = getattr(agent, "queued_s", 0.0)
    t0 = time.perf_counter()
    msg = agent.complete(msgs)
    total = time.perf_counter() - t0
    queued = getattr(agent, "queued_s", 0.0) - before
    return (msg.content or "").strip(), total - queued, queued, msgs
