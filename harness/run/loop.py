"""The one agent loop every condition shares (Section 4, Appendix B).

OpenAI-compatible chat completions with tool calling; at most `max_rounds` tool
rounds, then one forced answer with tools disabled. Tool results longer than
30,000 characters are cut. Bad tool arguments, unknown tools and tool
exceptions go back to the model as tool errors; only exhausted retries of the
model call itself end a run, and the driver records that run as failed.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import openai

from harness.endpoints.pricing import list_cost, paid_cost
from harness.endpoints.proxy import ATTEMPT, ROLE, TAG, usage_split
from harness.run.tools import Tool, ToolError, ToolResult

MAX_RESULT_CHARS = 30_000
RETRYABLE = (openai.RateLimitError, openai.InternalServerError, openai.APITimeoutError,
             openai.APIConnectionError)
_DIRECT = {"temperature", "seed", "max_tokens", "top_p", "reasoning_effort"}


class ModelCallFailed(RuntimeError):
    """Retries exhausted on 429 / 5xx / timeouts: the run fails and counts as wrong."""


@dataclass
class Meter:
    """Everything a run measures about its model calls and tool calls."""

    prices: Any
    offpeak: Any = None
    calls: list[dict] = field(default_factory=list)
    tools: list[dict] = field(default_factory=list)
    adapter: dict | None = None

    def add_call(self, usage: dict, latency: float, finish: str | None, role: str) -> None:
        u = usage_split(usage)
        now = datetime.now(timezone.utc)
        u.update(latency_s=round(latency, 4), finish=finish, role=role,
                 cost_list=list_cost(self.prices, u["hit"], u["miss"], u["output"]),
                 cost_paid=paid_cost(self.prices, self.offpeak, u["hit"], u["miss"], u["output"], now),
                 ts=now.isoformat(timespec="milliseconds"))
        self.calls.append(u)


@dataclass
class LoopResult:
    answer: str
    messages: list[dict]
    tool_rounds: int
    forced: bool


class Agent:
    """Talks to one endpoint (normally the metering proxy) on behalf of one run."""

    def __init__(self, base_url: str, model_cfg, run_tag: str, attempt: int, meter: Meter, role: str = "agent",
                 max_retries: int = 6, backoff_s: float = 1.0):
        self.model_cfg = model_cfg
        self.meter = meter
        self.role = role
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.client = openai.OpenAI(
            base_url=base_url, api_key="metered-by-proxy", max_retries=0,
            timeout=float(model_cfg.get("timeout_s", 600)),
            default_headers={TAG: run_tag, ATTEMPT: str(attempt), ROLE: role})

    def complete(self, messages: list[dict], tools: list[dict] | None = None, tool_choice: str | None = None):
        params = dict(self.model_cfg.get("params") or {})
        kwargs: dict[str, Any] = {k: params.pop(k) for k in list(params) if k in _DIRECT}
        if params:
            kwargs["extra_body"] = params
        if tools:
            kwargs["tools"] = tools
            if tool_choice:
                kwargs["tool_choice"] = tool_choice
        for attempt in range(self.max_retries + 1):
            t0 = time.perf_counter()
            try:
                resp = self.client.chat.completions.create(model=self.model_cfg["model"], messages=messages, **kwargs)
            except RETRYABLE as exc:
                if attempt == self.max_retries:
                    raise ModelCallFailed(f"{type(exc).__name__} after {attempt + 1} attempts: {exc}") from exc
                time.sleep(self.backoff_s * (2 ** attempt) * (0.5 + random.random()))
                continue
            choice = resp.choices[0]
            raw = resp.model_dump()
            self.meter.add_call(raw.get("usage"), time.perf_counter() - t0, choice.finish_reason, self.role)
            if raw.get("adapter"):
                self.meter.adapter = raw["adapter"]
            return choice.message
        raise AssertionError("unreachable")


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
