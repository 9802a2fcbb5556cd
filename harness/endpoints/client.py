"""The metered client every model call of a stage goes through (agents, asked agents, judge).

It fits each request to the endpoint (`model.accepts`, harness.endpoints.fit), talks to the
metering proxy, retries what may pass (429, 5xx, timeouts, a 200 reply with no choices or a
body that is not a chat completion; a 429/503's `Retry-After` is honoured, at most the
client's patience), and sorts what does not pass into two kinds (harness.failures): the run's
own failure (`ModelCallFailed`: retries exhausted, a prompt over the context window, a
rejection the body does not explain) and the environment's (`EnvironmentFailure`: key
refused, model not found, upstream unreachable, a request the endpoint rejects as
unsupported), which stops the stage instead.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import openai

from harness.endpoints import fit as F
from harness.endpoints.pricing import list_cost, paid_cost
from harness.endpoints.proxy import ATTEMPT, ROLE, TAG, UNREACHABLE, usage_split
from harness.failures import EnvironmentFailure

RETRYABLE = (openai.RateLimitError, openai.InternalServerError, openai.APITimeoutError,
             openai.APIConnectionError)
_DIRECT = {"temperature", "seed", "max_tokens", "max_completion_tokens", "top_p", "reasoning_effort",
           "response_format"}


class ModelCallFailed(RuntimeError):
    """The call failed after all retries, or the endpoint rejected it as bad: the run fails.

    `reason` says why, for the record (`failure_reason`) and the report: `retries` (429, 5xx,
    timeouts, bad 200 replies until the retries ran out), `context_length` (the run's prompt
    is longer than the model's window) or `rejected` (a rejection the body does not explain;
    `signature` is what the driver's circuit breaker compares)."""

    def __init__(self, message: str, reason: str = "retries", signature: str | None = None):
        super().__init__(message)
        self.reason, self.signature = reason, signature


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

    def add_call(self, usage: dict, latency: float, finish: str | None, role: str, sent: dict | None = None,
                 dropped: list[str] | None = None) -> None:
        u = usage_split(usage)
        now = datetime.now(timezone.utc)
        u.update(latency_s=round(latency, 4), finish=finish, role=role, sent=sent, dropped=list(dropped or []),
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
    if isinstance(exc, openai.APIStatusError) and exc.status_code in (400, 422):
        body = exc.body if exc.body is not None else _response_text(exc)
        if F.rejection_kind(exc.status_code, body, exc.message) == F.REQUEST:
            return EnvironmentFailure(f"model={name}: the endpoint {where} rejects the request itself "
                                      f"(HTTP {exc.status_code}), so every run would fail: {F.describe(body, exc.message)}",
                                      F.fix_for(body, exc.message))
    return None


def _response_text(exc: openai.APIStatusError) -> str:
    try:
        return exc.response.text
    except Exception:  # noqa: BLE001 - a body that cannot be read is an empty one
        return ""


def retry_after(exc: BaseException, limit: float) -> float | None:
    """Seconds a 429/503 asks to wait (`Retry-After`: seconds or an HTTP date), at most `limit`."""
    resp = getattr(exc, "response", None)
    if resp is None or getattr(exc, "status_code", None) not in (429, 503):
        return None
    value = (resp.headers.get("retry-after") or "").strip()
    if not value:
        return None
    try:
        wait = float(value)
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        wait = (when - datetime.now(timezone.utc)).total_seconds()
    return max(0.0, min(wait, limit))


def _signature(status: int, text: str) -> str:
    """A rejection with its numbers blanked out: the same refusal of different runs compares equal."""
    import re

    return f"{status}:{re.sub(r'[0-9]+', 'N', text)[:200]}"


def _error_type(exc: openai.APIStatusError) -> str | None:
    body = exc.body if isinstance(exc.body, dict) else {}
    err = body.get("error", body) if isinstance(body, dict) else {}
    return err.get("type") if isinstance(err, dict) else None


CUT_BELOW = 0.4  # reported prompt tokens under this share of the characters' estimate: the server cut it
CUT_MIN_TOKENS = 1000  # shorter prompts are never checked (templates and tokenizers vary too much)


def silently_cut(messages: list[dict], tools: list[dict] | None, usage: dict | None, model_cfg) -> str | None:
    """For an endpoint that cuts a prompt past its context instead of refusing it (`truncates_silently`:
    Ollama at its default context): why this reply answered less than was sent, or None. The estimate
    is four characters a token, and a cut is called only when the server counted under 40% of it."""
    if not model_cfg.get("truncates_silently") or not isinstance(usage, dict):
        return None
    counted = usage.get("prompt_tokens")
    if not isinstance(counted, int):
        return None
    sent = (len(json.dumps(messages, ensure_ascii=False)) + len(json.dumps(tools or []))) // 4
    if sent < CUT_MIN_TOKENS or counted >= CUT_BELOW * sent:
        return None
    return (f"the endpoint answered a prompt of about {sent:,} tokens having read {counted:,} of them: it cut "
            f"the prompt to its context window without refusing (Ollama: start the server with "
            f"OLLAMA_CONTEXT_LENGTH above {sent:,})")


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

    def request(self, tools: list[dict] | None = None, tool_choice: str | None = None) -> tuple[dict, dict, list[str]]:
        """The call's keyword arguments, what is sent besides the messages (param names and values after
        fitting to `model.accepts`; tools by name) and the parameters left out."""
        fitted, dropped = F.fit(self.params, self.model_cfg.get("accepts"))
        sent = dict(fitted)
        params = dict(fitted)
        kwargs: dict[str, Any] = {k: params.pop(k) for k in list(params) if k in _DIRECT}
        if params:
            kwargs["extra_body"] = params
        if tools:
            kwargs["tools"] = tools
            sent["tools"] = [t.get("function", {}).get("name") for t in tools]
            if tool_choice:
                kwargs["tool_choice"] = tool_choice
                sent["tool_choice"] = tool_choice
        return kwargs, sent, dropped

    def complete(self, messages: list[dict], tools: list[dict] | None = None, tool_choice: str | None = None):
        kwargs, sent, dropped = self.request(tools, tool_choice)
        patience = float(self.model_cfg.get("max_wait_s") or self.model_cfg.get("timeout_s", 600))
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
                wait = retry_after(exc, patience)
                time.sleep(wait if wait is not None else self.backoff_s * (2 ** attempt) * (0.5 + random.random()))
                continue
            except openai.APIStatusError as exc:
                env = environment_failure(exc, self.model_cfg)
                if env is not None:
                    raise env from exc
                body = exc.body if exc.body is not None else _response_text(exc)
                kind = F.rejection_kind(exc.status_code, body, exc.message)
                text = F.describe(body, exc.message)
                if kind == F.CONTEXT:
                    raise ModelCallFailed(f"the prompt exceeds the model's context window (HTTP {exc.status_code}): "
                                          f"{text}", reason="context_length") from exc
                raise ModelCallFailed(f"the endpoint rejected the request (HTTP {exc.status_code}): {text}",
                                      reason="rejected", signature=_signature(exc.status_code, text)) from exc
            choice = resp.choices[0]
            raw = resp.model_dump()
            self.meter.add_call(raw.get("usage"), time.perf_counter() - t0, choice.finish_reason, self.role,
                                sent=sent, dropped=dropped)
            cut = silently_cut(messages, tools, raw.get("usage"), self.model_cfg)
            if cut:
                raise ModelCallFailed(cut, reason="context_length")
            if raw.get("adapter"):
                self.meter.adapter = raw["adapter"]
            return choice.message
        raise AssertionError("unreachable")
