"""The one agent loop every condition shares (Section 4, Appendix B).

OpenAI-compatible chat completions with tool calling; at most `max_rounds` tool
rounds, then one forced answer with tools disabled. Tool results longer than
30,000 characters are cut. Bad tool arguments, unknown tools and tool
exceptions go back to the model as tool errors; only exhausted retries of the
model call itself end a run, and the driver records that run as failed. A tool
that fails because of the environment (services down, no sandbox) raises an
EnvironmentFailure, which stops the stage instead (harness.failures).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from harness.endpoints.client import Agent, Meter
from harness.failures import classify
from harness.run.tools import Tool, ToolError, ToolResult

MAX_RESULT_CHARS = 30_000


@dataclass
class LoopResult:
    answer: str
    messages: list[dict]
    tool_rounds: int
    forced: bool


def _cut(text: str) -> str:
    if len(text) <= MAX_RESULT_CHARS:
        return text
    return text[:MAX_RESULT_CHARS] + f"\n[... cut: {len(text) - MAX_RESULT_CHARS} more characters]"


def call_tool(tools: dict[str, Tool], name: str, raw_args: str, meter: Meter) -> str:
    """Run one tool call; every failure becomes a tool error the model can read."""
    entry: dict[str, Any] = {"name": name, "arguments": raw_args}
    t0 = time.perf_counter()
    try:
        if name not in tools:
            raise ToolError(f"unknown tool {name!r}; available: {', '.join(sorted(tools))}")
        try:
            args = json.loads(raw_args or "{}")
        except json.JSONDecodeError as exc:
            raise ToolError(f"arguments are not valid JSON: {exc.msg}") from None
        if not isinstance(args, dict):
            raise ToolError("arguments must be a JSON object")
        try:
            result = tools[name](**args)
        except TypeError as exc:
            raise ToolError(f"bad arguments: {exc}") from None
    except ToolError as exc:
        result = ToolResult(f"error: {exc}", error=True)
        entry["failure"] = "tool_error"
    except Exception as exc:  # a tool's own bug must not end the run; it is recorded
        env = classify(exc)
        if env is not None:  # services down, no sandbox: not the run's fault, the stage stops
            raise env from exc
        result = ToolResult(f"error: {type(exc).__name__}: {exc}", error=True)
        entry["failure"] = "exception"
    text = _cut(result.text)
    entry.update(chars=len(text), sessions=sorted(set(result.sessions)), empty=result.empty, error=result.error,
                 retrieval_s=round(result.retrieval_s, 6), wall_s=round(time.perf_counter() - t0, 6),
                 cut=len(result.text) > MAX_RESULT_CHARS, log=result.log)
    meter.tools.append(entry)
    return text


def run_loop(agent: Agent, system: str, question: str, tools: list[Tool], max_rounds: int = 10,
             first_tool_choice: str | None = None) -> LoopResult:
    """`first_tool_choice` ("required") makes the first call use a tool; a model config sets it
    for models that otherwise answer from their prior without ever searching (the local 1.5B)."""
    messages: list[dict] = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    by_name = {t.name: t for t in tools}
    schemas = [t.schema() for t in tools] or None
    rounds = 0
    while True:
        forced = bool(schemas) and rounds >= max_rounds
        choice = "none" if forced else (first_tool_choice if rounds == 0 else None)
        msg = agent.complete(messages, schemas, tool_choice=choice)
        calls = [] if forced else (msg.tool_calls or [])
        if not calls:
            messages.append({"role": "assistant", "content": msg.content or ""})
            return LoopResult((msg.content or "").strip(), messages, rounds, forced)
        rounds += 1
        messages.append({"role": "assistant", "content": msg.content or "",
                         "tool_calls": [{"id": c.id, "type": "function",
                                         "function": {"name": c.function.name, "arguments": c.function.arguments}}
                                        for c in calls]})
        for c in calls:
            text = call_tool(by_name, c.function.name, c.function.arguments, agent.meter)
            messages.append({"role": "tool", "tool_call_id": c.id, "content": text})
