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


def answer(agent, block: str, query: str) -> tuple[str, float, list[dict]]:
    """(reply text, seconds, the messages sent)."""
    msgs = messages(block, query)
    t0 = time.perf_counter()
    msg = agent.complete(msgs)
    return (msg.content or "").strip(), time.perf_counter() - t0, msgs
