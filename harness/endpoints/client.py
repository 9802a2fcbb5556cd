"""The metered client every model call of a stage goes through (agents, asked agents, judge).

It talks to the metering proxy, retries what may pass (429, 5xx, timeouts, a 200 reply with
no choices or a body that is not a chat completion), and sorts what does not pass into two
kinds (harness.failures): the run's own failure (`ModelCallFailed`: retries exhausted, a
request the endpoint rejects as bad) and the environment's (`EnvironmentFailure`: key
refused, model not found, upstream unreachable), which stops the stage instead.
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
from harness.endpoints.proxy import ATTEMPT, ROLE, TAG, UNREACHABLE, usage_split
from harness.failures import EnvironmentFailure

RETRYABLE = (openai.RateLimitError, openai.InternalServerError, openai.APITimeoutError,
             openai.APIConnectionError)
_DIRECT = {"temperature", "seed", "max_tokens", "top_p", "reasoning_effort"}


class ModelCallFailed(RuntimeError):
    """The call failed after all retries, or the endpoint rejected it as bad: the run fails."""


class BadReply(RuntimeError):
    """A 200 reply that is not a usable chat completion (no choices, not JSON)."""


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


def environment_failure(exc: openai.APIError, model_cfg) -> EnvironmentFailure | None:
    """The environment failure behind an API error, if it is one."""
    name = model_cfg.get("name")
    where = model_cfg.get("base_url") or model_cfg.get("provider")
    if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
        env = model_cfg.get("api_key_env")
        return EnvironmentFailure(f"model={name}: the endpoint {where} refused the request "
                                  f"(HTTP {exc.status_code}): {exc.message}",
                                  f"check the key in ${env}" if env else "check the endpoint's access settings")
    if isinstance(exc, openai.NotFoundError):
        return EnvironmentFailure(f"model={name}: the endpoint {where} does not know model "
                                  f"{model_cfg.get('model')!r} (HTTP 404): {exc.message}",
                                  "check model.model and model.base_url")
    if isinstance(exc, openai.APIStatusError) and _error_type(exc) == UNREACHABLE:
        return EnvironmentFailure(f"model={name}: cannot reach {where}: {exc.message}",
                                  "start the model server or check model.base_url and the network")
    return None


def _error_type(exc: openai.APIStatusError) -> str | None:
    body = exc.body if isinstance(exc.body, dict) else {}
    err = body.get("error", body) if isinstance(body, dict) else {}
    return err.get("type") if isinstance(err, dict) else None


class Agent:
    """Talks to one endpoint (normally the metering proxy) on behalf of one run."""

    def __init__(self, base_url: str, model_cfg, run_tag: str, attempt: int, meter: Meter, role: str = "agent",
                 max_retries: int = 6, backoff_s: float = 1.0, params: dict | None = None):
        self.model_cfg = model_cfg
        self.meter = meter
        self.role = role
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.params = dict(model_cfg.get("params") or {}) if params is None else dict(params)
        self.client = openai.OpenAI(
            base_url=base_url, api_key="metered-by-proxy", max_retries=0,
            timeout=float(model_cfg.get("timeout_s", 600)),
            default_headers={TAG: run_tag, ATTEMPT: str(attempt), ROLE: role})

    def complete(self, messages: list[dict], tools: list[dict] | None = None, tool_choice: str | None = None):
        params = dict(self.params)
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
                if isinstance(resp, str) or not getattr(resp, "choices", None):
                    raise BadReply("a 200 reply with no choices" if not isinstance(resp, str)
                                   else f"a 200 reply that is not JSON: {resp[:120]!r}")
            except (*RETRYABLE, BadReply, json.JSONDecodeError) as exc:
                env = environment_failure(exc, self.model_cfg) if isinstance(exc, openai.APIError) else None
                if env is not None and attempt == self.max_retries:
                    raise env from exc
                if attempt == self.max_retries:
                    raise ModelCallFailed(f"{type(exc).__name__} after {attempt + 1} attempts: {exc}") from exc
                time.sleep(self.backoff_s * (2 ** attempt) * (0.5 + random.random()))
                continue
            except openai.APIStatusError as exc:
                env = environment_failure(exc, self.model_cfg)
                if env is not None:
                    raise env from exc
                raise ModelCallFailed(f"the endpoint rejected the request (HTTP {exc.status_code}): "
                                      f"{exc.message}") from exc
            choice = resp.choices[0]
            raw = resp.model_dump()
            self.meter.add_call(raw.get("usage"), time.perf_counter() - t0, choice.finish_reason, self.role)
            if raw.get("adapter"):
                self.meter.adapter = raw["adapter"]
            return choice.message
        raise AssertionError("unreachable")
