"""The metered client every model call of a stage goes through (agents, asked agents, judge).

It fits each request to the endpoint (`model.accepts`, harness.endpoints.fit), talks to the
metering proxy, retries what may pass (429, 5xx, timeouts, a 200 reply with no choices or a
body that is not a chat completion; a 429/503's `Retry-After` is honoured, at most the
client's patience) within the run's retry budget (`model.retry_budget_s`: attempts and waits
are cut to what is left of it), and sorts what does not pass into two kinds
(harness.failures): the run's own failure (`ModelCallFailed`: retries exhausted, a prompt over
the context window, a rejection the body does not explain; the driver's breaker decides
whether retries exhausted are the server's) and the environment's (`EnvironmentFailure`: key
refused, model not found, upstream unreachable, credit gone (`QuotaExhausted`, never
retried), a request the endpoint rejects as unsupported), which stops the stage instead.
Every answered call is metered with its usage checked (harness.endpoints.usage); a bad 200
reply that carried usage was billed and is metered too, flagged as retried.
"""

from __future__ import annotations

import json
import random
import re
import ssl
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import openai

from harness.endpoints import fit as F
from harness.endpoints.pricing import list_cost, paid_cost
from harness.endpoints.proxy import ATTEMPT, BUDGET, DEADLINE, ROLE, STOPPING, STREAMED, TAG, UNREACHABLE, reply_error
from harness.endpoints.settings import EndpointSettings, endpoint_settings
from harness.endpoints.usage import (chars_count, context_tokens, counter, event_stream, max_tokens_of, request_text,
                                    usage_split)
from harness.failures import CapReached, EnvironmentFailure, StageStopping

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
    retry_s: float = 0.0  # seconds this run's calls spent failing and waiting to retry (model.retry_budget_s)
    abort: Any = None  # a threading.Event the driver sets when the stage stops: no further call, no retry wait

    def add_call(self, usage: dict, latency: float, finish: str | None, role: str, sent: dict | None = None,
                 dropped: list[str] | None = None, messages: list | None = None, tools: list | None = None,
                 reply: dict | None = None, context: int | None = None, count=chars_count,
                 flags: list[str] | None = None) -> dict:
        """Meter one answered call (usage checked and estimated as the proxy does: harness.endpoints.usage)."""
        u = usage_split(usage, messages, tools, reply if reply is not None else {}, context, count, max_tokens_of(sent))
        if finish == "length":
            u["flags"].append("finish_reason length: the reply was cut at its token limit")
        u["flags"] += list(flags or [])
        now = datetime.now(timezone.utc)
        u.update(latency_s=round(latency, 4), finish=finish, role=role, sent=sent, dropped=list(dropped or []),
                 cost_list=list_cost(self.prices, u["hit"], u["miss"], u["output"]),
                 cost_paid=paid_cost(self.prices, self.offpeak, u["hit"], u["miss"], u["output"], now),
                 ts=now.isoformat(timespec="milliseconds"))
        self.calls.append(u)
        return u


_QUOTA = re.compile(r"insufficient[_ ]quota|insufficient[_ ](account[_ ])?balance|exceeded your current quota|billing"
                    r"|credit balance|out of credits?|insufficient[_ ]credits?|credit limit|payment required|no credits", re.I)


class QuotaExhausted(EnvironmentFailure):
    """The account's credit or quota is gone: the stage stops at once, nothing is retried."""


def quota_failure(status: int | None, body: Any, message: str, model_cfg) -> EnvironmentFailure | None:
    """Credit gone (OpenAI's 429 `insufficient_quota`, DeepSeek's 402 "Insufficient Balance", OpenRouter's
    "Insufficient credits" with code 402, a gateway's billing error, in an error status or a 200's error object): no retry helps and every run would fail."""
    text = json.dumps(body, default=str) if isinstance(body, (dict, list)) else str(body or "")
    err = body.get("error", body) if isinstance(body, dict) else None
    code = str(err.get("code") or err.get("status") or "") if isinstance(err, dict) else ""  # OpenRouter: 402 in a 200
    if status != 402 and code != "402" and not _QUOTA.search(f"{text} {message or ''}"):
        return None
    mc = endpoint_settings(model_cfg)
    where = mc.base_url or mc.provider
    return QuotaExhausted(f"model={mc.name}: the endpoint {where} says the account has no credit "
                              f"left (HTTP {status}): {F.describe(body, message)}",
                              "add credit or raise the account's quota (or use another key); the runs it hit stay "
                              "unrecorded and the same command runs them")


def environment_failure(exc: openai.APIError, model_cfg) -> EnvironmentFailure | None:
    """The environment failure behind an API error, if it is one."""
    model_cfg = endpoint_settings(model_cfg)
    name = model_cfg.name
    where = model_cfg.base_url or model_cfg.provider
    if isinstance(exc, openai.APIStatusError):
        quota = quota_failure(exc.status_code, exc.body if exc.body is not None else _response_text(exc),
                              exc.message, model_cfg)
        if quota is not None:
            return quota
    if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
        env = model_cfg.api_key_env
        return EnvironmentFailure(f"model={name}: the endpoint {where} refused the request "
                                  f"(HTTP {exc.status_code}): {exc.message}",
                                  f"check the key in ${env}" if env else "check the endpoint's access settings")
    if isinstance(exc, openai.NotFoundError):
        return EnvironmentFailure(f"model={name}: the endpoint {where} does not know model "
                                  f"{model_cfg.model!r} (HTTP 404): {exc.message}",
                                  "check model.model and model.base_url")
    if isinstance(exc, openai.APIStatusError) and _error_type(exc) == BUDGET:
        return CapReached(str((exc.body.get("error", exc.body) if isinstance(exc.body, dict) else {}).get("message")
                              or exc.message))
    if isinstance(exc, openai.APIStatusError) and _error_type(exc) == STOPPING:
        return StageStopping()
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
    return f"{status}:{re.sub(r'[0-9]+', 'N', text)[:200]}"


def _error_type(exc: openai.APIStatusError) -> str | None:
    body = exc.body if isinstance(exc.body, dict) else {}
    err = body.get("error", body) if isinstance(body, dict) else {}
    return err.get("type") if isinstance(err, dict) else None


RETRY_BUDGET_S = 600.0  # default model.retry_budget_s: the seconds one run's calls may spend failing


def timeout_s(mc: EndpointSettings) -> float:
    """`model.timeout_s`, default 600 s: one attempt's deadline."""
    return float(mc.timeout_s if mc.timeout_s is not None else 600)


def max_retries(mc: EndpointSettings) -> int:
    return int(mc.max_retries if mc.max_retries is not None else 6)


def backoff_s(mc: EndpointSettings) -> float:
    return float(mc.backoff_s if mc.backoff_s is not None else 1.0)


def retry_budget_s(mc: EndpointSettings) -> float:
    return float(mc.retry_budget_s or RETRY_BUDGET_S)


def client_timeout(deadline: float) -> float:
    """How long the client waits for the metering proxy, which keeps the attempt's deadline itself (its
    answer comes within about twice the deadline: a last read may start just before it): the client never
    gives up on a reply the proxy then meters as answered."""
    return 2 * deadline + 10.0


def worst_wait(model_cfg) -> tuple[float, float]:
    """(bounded, unbounded): the longest a failing server holds one run — by `model.retry_budget_s` — and
    how long one call's retries alone would take without it (every attempt timing out, the longest backoff)."""
    mc = endpoint_settings(model_cfg)
    timeout, n, backoff = timeout_s(mc), max_retries(mc), backoff_s(mc)
    patience = float(mc.max_wait_s or timeout)
    unbounded = (n + 1) * timeout + sum(min(patience, max(backoff * 2 ** i * 1.5, 0)) for i in range(n))
    budget = retry_budget_s(mc)
    return min(budget + 1.0, unbounded), unbounded


def retry_line(model_cfg) -> str:
    """The dry run's line: how long a server that fails every call can hold each run."""
    mc = endpoint_settings(model_cfg)
    bounded, unbounded = worst_wait(mc)
    return (f"  retries  a server failing every call holds each run at most {bounded:,.0f} s "
            f"(model.retry_budget_s={retry_budget_s(mc):g}; one call's "
            f"{max_retries(mc) + 1} attempts of timeout_s={timeout_s(mc):g} "
            f"and their backoff would take {unbounded:,.0f} s); such a run is held until a later run succeeds, and the "
            f"stage stops (exit 3) with the held runs unrecorded when model.breaker_runs="
            f"{mc.breaker_runs if mc.breaker_runs is not None else 3} runs fail in a row, the probe "
            f"fails too, or none succeeds after them")


def silently_cut(messages: list[dict], tools: list[dict] | None, call: dict, model_cfg,
                 count=chars_count) -> str | None:
    """For an endpoint that cuts a prompt past its context instead of refusing it (`truncates_silently`:
    Ollama at its default context): why this reply answered less than was sent, or None.

    Judged by what the server knows, not by a share of an estimate: the prompt tokens it counted are at
    its context (`context_tokens`: the config's, or what Ollama reports, harness.endpoints.registry) —
    or, the context unknown, exactly at a power-of-two context size — while more than that was sent."""
    model_cfg = endpoint_settings(model_cfg)
    if not model_cfg.truncates_silently or call.get("usage_estimated"):
        return None
    counted = int(call["prompt"])
    ctx = context_tokens(model_cfg)
    if ctx:
        at_ceiling = counted >= ctx - max(8, ctx // 100)
    else:
        at_ceiling = counted >= 512 and counted & (counted - 1) == 0
    sent = count(request_text(messages, tools))
    if not at_ceiling or sent <= counted:
        return None
    where = f"its context of {ctx:,} tokens" if ctx else f"a context of {counted:,} tokens"
    return (f"the endpoint answered a prompt of about {sent:,} tokens having read {counted:,} of them, {where}: it "
            f"cut the prompt without refusing (Ollama: start the server with OLLAMA_CONTEXT_LENGTH above {sent:,}, "
            f"or set model.params.options.num_ctx)")


_tls: ssl.SSLContext | None = None
_tls_lock = threading.Lock()


def tls_context() -> ssl.SSLContext:
    """The one TLS context of every Agent's client, as httpx would build it (the CA bundle, SSL_CERT_FILE).
    Building one reads the CA bundle, ~20 ms of CPU: once per process, not once per run (an Agent per run)."""
    global _tls
    with _tls_lock:
        if _tls is None:
            import httpx

            _tls = httpx.create_ssl_context()
        return _tls


class Agent:
    """Talks to one endpoint (normally the metering proxy) on behalf of one run."""

    def __init__(self, base_url: str, model_cfg: EndpointSettings, run_tag: str, attempt: int, meter: Meter,
                 role: str = "agent", max_retries: int = 6, backoff_s: float = 1.0, params: dict | None = None):
        """model_cfg: the endpoint's typed node (EndpointSettings / JudgeSettings, built at the config edge by
        harness.run.settings.endpoint_node); a plain mapping is typed the same way (endpoint_settings)."""
        self.model_cfg = model_cfg = endpoint_settings(model_cfg)
        self.meter = meter
        self.role = role
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.params = dict(model_cfg.params or {}) if params is None else dict(params)
        self.timeout_s = timeout_s(model_cfg)
        self.retry_budget_s = retry_budget_s(model_cfg)
        self.context, self.count = context_tokens(model_cfg), counter(model_cfg)
        self.client = openai.OpenAI(
            base_url=base_url, api_key="metered-by-proxy", max_retries=0, timeout=self.timeout_s,
            default_headers={TAG: run_tag, ATTEMPT: str(attempt), ROLE: role},
            http_client=openai.DefaultHttpxClient(verify=tls_context()))

    def request(self, tools: list[dict] | None = None, tool_choice: str | None = None) -> tuple[dict, dict, list[str]]:
        """The call's keyword arguments, what is sent besides the messages (param names and values after
        fitting to `model.accepts`; tools by name) and the parameters left out."""
        fitted, dropped = F.fit(self.params, self.model_cfg.accepts)
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

    def _meter(self, raw: dict, t0: float, messages, tools, sent, dropped, flags=None) -> dict:
        choices = raw.get("choices")
        first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
        return self.meter.add_call(raw.get("usage"), time.perf_counter() - t0, first.get("finish_reason"), self.role,
                                   sent=sent, dropped=dropped, messages=messages, tools=tools,
                                   reply=first.get("message") or {}, context=self.context, count=self.count,
                                   flags=flags)

    def _check_abort(self) -> None:
        if self.meter.abort is not None and self.meter.abort.is_set():
            raise StageStopping()

    def complete(self, messages: list[dict], tools: list[dict] | None = None, tool_choice: str | None = None):
        """One answered call. Retries what may pass within the run's retry budget (`model.retry_budget_s`,
        shared by every call of the run: attempts and waits are cut to what is left of it)."""
        kwargs, sent, dropped = self.request(tools, tool_choice)
        patience = float(self.model_cfg.max_wait_s or self.timeout_s)
        for attempt in range(self.max_retries + 1):
            self._check_abort()
            left = self.retry_budget_s - self.meter.retry_s
            t0 = time.perf_counter()
            resp = None
            try:
                if left <= 0:
                    raise ModelCallFailed(f"the run's retry budget of {self.retry_budget_s:g} s is spent "
                                          f"(model.retry_budget_s)")
                deadline = max(1.0, min(self.timeout_s, left))  # kept by the proxy (harness.endpoints.proxy)
                client = self.client.with_options(timeout=client_timeout(deadline))
                resp = client.chat.completions.create(model=self.model_cfg.model, messages=messages,
                                                      extra_headers={DEADLINE: f"{deadline:.3f}"}, **kwargs)
                if isinstance(resp, str):
                    raise BadReply(f"a 200 reply that is not JSON: {resp[:120]!r}")
                raw = resp.model_dump(exclude_unset=True, warnings=False)
                problem = reply_error(raw)  # the proxy's test, so ledger and records agree on what failed
                if problem:
                    quota = quota_failure(200, raw.get("error"), "", self.model_cfg) if raw.get("error") else None
                    if quota is not None:
                        raise quota
                    raise BadReply(problem)
            except (*RETRYABLE, BadReply, json.JSONDecodeError) as exc:
                failed_s = time.perf_counter() - t0
                if isinstance(exc, BadReply) and isinstance(resp, str):
                    stream = event_stream(resp)
                    if stream is not None:  # billed although no completion (no usage chunk: estimated), as in the ledger
                        self._meter({"usage": stream[0], "choices": [{"message": stream[1]}]}, t0, messages, tools,
                                    sent, dropped, [f"retried: {STREAMED}"])
                elif isinstance(exc, BadReply) and resp is not None:
                    raw = resp.model_dump(exclude_unset=True, warnings=False)
                    if isinstance(raw.get("usage"), dict) and raw["usage"]:  # billed although unusable: it counts
                        self._meter(raw, t0, messages, tools, sent, dropped, [f"retried: {exc}"[:200]])
                env = environment_failure(exc, self.model_cfg) if isinstance(exc, openai.APIError) else None
                if env is not None and (attempt == self.max_retries or isinstance(env, (QuotaExhausted, StageStopping))):
                    raise env from exc
                self.meter.retry_s += failed_s
                left = self.retry_budget_s - self.meter.retry_s
                if attempt == self.max_retries or left <= 0:
                    spent = "" if attempt == self.max_retries else f" (the run's retry budget of {self.retry_budget_s:g} s spent)"
                    raise ModelCallFailed(f"{type(exc).__name__} after {attempt + 1} attempts{spent}; the server's last "
                                          f"answer: {exc}"[:1500]) from exc
                wait = retry_after(exc, patience)
                wait = wait if wait is not None else self.backoff_s * (2 ** attempt) * (0.5 + random.random())
                wait = min(wait, left)
                self.meter.retry_s += wait
                if self.meter.abort is not None:
                    self.meter.abort.wait(wait)  # the stage stopping ends the wait at once
                else:
                    time.sleep(wait)
                continue
            except openai.APIStatusError as exc:
                env = environment_failure(exc, self.model_cfg)
                if env is not None:
                    raise env from exc
                body = exc.body if exc.body is not None else _response_text(exc)
                kind = F.rejection_kind(exc.status_code, body, exc.message)
                text = F.describe(body, exc.message)
                if kind == F.CONTEXT:
                    what = "the request is too large for the endpoint" if exc.status_code == 413 else \
                        "the prompt exceeds the model's context window"
                    raise ModelCallFailed(f"{what} (HTTP {exc.status_code}): {text}", reason="context_length") from exc
                raise ModelCallFailed(f"the endpoint rejected the request (HTTP {exc.status_code}): {text}",
                                      reason="rejected", signature=_signature(exc.status_code, text)) from exc
            choice = resp.choices[0]
            call = self._meter(raw, t0, messages, tools, sent, dropped)
            cut = silently_cut(messages, tools, call, self.model_cfg, self.count)
            if cut:
                raise ModelCallFailed(cut, reason="context_length")
            if raw.get("adapter"):
                self.meter.adapter = raw["adapter"]
            return choice.message
        raise AssertionError("unreachable")
