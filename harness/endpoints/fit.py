"""What an endpoint takes, and how its refusals are told apart (SPEC 10).

`accepts:` in a model config says which request parameters the endpoint takes and how it
spells them; every call is fitted to it where the request is built (Agent.complete), so the
agents, the preflight and both judges send what the endpoint takes without code of their own:

    accepts:
      max_tokens: max_completion_tokens   # a string: the endpoint's spelling of the parameter
      temperature: false                  # false: never sent (a reasoning model takes only its default)
      reasoning_effort: true              # true (or absent): sent as is

A parameter the config does not name is sent as is, so a model config without `accepts`
sends exactly what it did before.

A rejection (HTTP 400/422) is sorted by its body into three kinds:

  request   the request itself is unsupported (an unknown or unsupported parameter or value,
            tool choice not enabled, response format not supported, an invalid tool schema):
            every run would get it, so it stops the stage (EnvironmentFailure);
  context   the run's prompt is longer than the model's context window, or its request larger than the
            endpoint takes (HTTP 413, any body): that run's own failure, never the breaker's;
  unknown   neither: the run fails, and the driver's circuit breaker stops the stage when the
            same rejection ends the first runs of a stage before any run succeeded.
"""

from __future__ import annotations

import re
from typing import Any

REQUEST, CONTEXT, UNKNOWN = "request", "context", "unknown"

_REQUEST_CODES = {"unsupported_parameter", "unsupported_value", "unknown_parameter", "invalid_tool_choice",
                  "tool_use_not_supported", "unsupported_response_format", "invalid_function_parameters"}
_CONTEXT_CODES = {"context_length_exceeded", "string_above_max_length", "request_too_large"}
_CONTEXT = re.compile(r"maximum context length|context length|context window|context_length_exceeded|"
                      r"exceeds the available context size|too many tokens|prompt is too long|"
                      r"input is too long|exceed_context_size", re.I)
_REQUEST = re.compile(r"enable-auto-tool-choice|tool[- _]call[- _]parser|tool choice|tool_choice|"
                      r"does not support tools|tools? (?:is|are) not supported|"
                      r"unsupported parameter|unknown parameter|unrecognized (?:request )?argument|"
                      r"extra inputs are not permitted|unsupported value|is not supported with this model|"
                      r"response_format|response format|invalid schema for function|invalid (?:tool|function) schema|"
                      r"does not support (?:the )?['\"]?\w+['\"]? parameter", re.I)


def fit(params: dict, accepts: dict | None) -> tuple[dict, list[str]]:
    """`params` as this endpoint takes them, and the names left out (in the order given)."""
    accepts = accepts or {}
    out: dict[str, Any] = {}
    dropped: list[str] = []
    for name, value in params.items():
        how = accepts.get(name, True)
        if how is False or how is None:
            dropped.append(name)
        elif isinstance(how, str):
            out[how] = value
        else:
            out[name] = value
    return out, dropped


def check_accepts(accepts) -> None:
    if accepts is None:
        return
    if not isinstance(accepts, dict):
        raise ValueError(f"model.accepts must be a mapping of parameter -> true | false | spelling, got {accepts!r}")
    for k, v in accepts.items():
        if not (isinstance(v, (bool, str)) or v is None):
            raise ValueError(f"model.accepts.{k} must be true, false or the endpoint's name for it, got {v!r}")


def error_body(body) -> dict:
    """The error object of a rejection body: OpenAI's {"error": {...}} or vLLM's flat {"object": "error", ...}."""
    if not isinstance(body, dict):
        return {"message": str(body)} if body else {}
    err = body.get("error", body)
    if isinstance(err, str):
        return {"message": err}
    return err if isinstance(err, dict) else {}


def rejection_kind(status: int | None, body, message: str = "") -> str:
    """REQUEST, CONTEXT or UNKNOWN for a 400/422 (see the module's docstring)."""
    err = error_body(body)
    code = str(err.get("code") or "").lower()
    text = " ".join(str(x) for x in (err.get("message"), message, err.get("type")) if x)
    if status == 413 or code in _CONTEXT_CODES or _CONTEXT.search(text):  # 413: this run's request is too large
        return CONTEXT
    if status not in (400, 422):
        return UNKNOWN
    if code in _REQUEST_CODES or _REQUEST.search(text):
        return REQUEST
    return UNKNOWN


def describe(body, message: str = "") -> str:
    """The server's message, with the parameter it names (OpenAI's `param`)."""
    err = error_body(body)
    msg = str(err.get("message") or message or body)
    param = err.get("param")
    return f"{msg} (param {param})" if param and str(param) not in msg else msg


def fix_for(body, message: str = "") -> str:
    """What to change for a REQUEST rejection."""
    err = error_body(body)
    text = f"{err.get('message') or ''} {message}".lower()
    param = err.get("param")
    if "enable-auto-tool-choice" in text or "tool-call-parser" in text or "tool choice" in text or "tool_choice" in text:
        return ("start the server with tool calling enabled (vLLM: --enable-auto-tool-choice --tool-call-parser "
                "<parser for the model>; SGLang: --tool-call-parser; llama.cpp: --jinja), or choose a model config "
                "whose server calls tools")
    if "tools" in text and "support" in text:
        return "choose a model that supports tool calling (Ollama: e.g. llama3.1:8b or qwen2.5:7b)"
    if param:
        return (f"set model.accepts.{param} to false (not sent) or to the endpoint's name for it "
                f"(e.g. accepts: {{max_tokens: max_completion_tokens, temperature: false}}), or drop it from "
                f"model.params / judge.judge_params; see conf/model/openai_reasoning.yaml")
    return ("fit the request to the endpoint with model.accepts (parameter: false | its spelling) or drop the "
            "parameter named above from model.params / judge.judge_params")
