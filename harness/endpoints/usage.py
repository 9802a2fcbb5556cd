"""A reply's usage block, read and checked: what a call costs is never silently zero.

`usage_split` reads prompt tokens split into cache hit and miss as each provider reports them
(DeepSeek `prompt_cache_hit_tokens` / `prompt_cache_miss_tokens`; OpenAI, vLLM and newer
llama.cpp `prompt_tokens_details.cached_tokens`, OpenAI's reasoning models also
`completion_tokens_details.reasoning_tokens`; Ollama and older llama.cpp plain
`prompt_tokens` / `completion_tokens`). Every count is checked: one that is missing, null,
not a whole number, negative or beyond what the model can take (`bound`: the smaller of the context the
endpoint reports — vLLM's `max_model_len`, Ollama's loaded context — or the preset declares, and the
request's own size in UTF-8 bytes (a token is at least one) plus its chat template and `max_tokens`)
is flagged per call (`flags`) and replaced by an estimate from the request and the reply
(`usage_estimated`), never billed as reported: the model's tokenizer when the config names one
(`model.tokenizer`: a tokenizer.json), four characters a token otherwise.
The proxy (ledger, spending cap) and the run's meter (records) call it on the same request
and reply, so both hold the same numbers.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Callable

CEILING = 10_000_000  # no served model reads more than this: a larger count is not a count
CHARS_PER_TOKEN = 4
TEMPLATE_TOKENS = 1024  # what a chat template may add around the messages and tools
DEFAULT_OUTPUT = 4096  # the most a request without max_tokens is taken to answer, the context unknown


def bound(messages: Any = None, tools: Any = None, max_tokens: int | None = None, context: int | None = None) -> int:
    """The most tokens one count of a call's usage can be: the SMALLER of the model's context (when known) and
    the request's own size bound, its size in UTF-8 bytes (a token is at least one byte) plus a chat template
    plus its max_tokens (the context, else DEFAULT_OUTPUT, when it sets none). A count within the context but
    beyond what this request could be (100,000 prompt tokens for 1,100 characters) is not a count either."""
    own = None
    if messages is not None:
        size = len(request_text(messages, tools).encode("utf-8"))
        own = size + TEMPLATE_TOKENS + int(max_tokens or context or DEFAULT_OUTPUT)
    if context:
        return int(context) if own is None else min(int(context), own)
    return min(CEILING, own if own is not None else TEMPLATE_TOKENS + int(max_tokens or DEFAULT_OUTPUT))


def max_tokens_of(req: Any) -> int | None:
    """The output limit a request (or its sent parameters) sets: max_tokens or max_completion_tokens."""
    if not isinstance(req, dict):
        return None
    asked = [v for v in (req.get("max_tokens"), req.get("max_completion_tokens"))
             if isinstance(v, int) and not isinstance(v, bool) and v > 0]
    return max(asked) if asked else None


def context_tokens(model_cfg) -> int | None:
    """The context the model is served with, as far as the config knows it: `context_tokens`, the local
    server's `ctx_size`, or Ollama's `num_ctx` among the params (`options.num_ctx`)."""
    if not model_cfg:
        return None
    params = model_cfg.get("params") or {}
    options = params.get("options") or {}
    for v in (model_cfg.get("context_tokens"), model_cfg.get("ctx_size"), params.get("num_ctx"),
              options.get("num_ctx") if isinstance(options, dict) else None):
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def chars_count(text: str) -> int:
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


@functools.lru_cache(maxsize=8)
def _tokenizer(path: str):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(path)


def counter(model_cfg) -> Callable[[str], int]:
    """How the estimate counts tokens: the model's own tokenizer (`model.tokenizer`: a local
    tokenizer.json, read with `tokenizers`), else characters / 4."""
    path = (model_cfg or {}).get("tokenizer")
    if not path:
        return chars_count
    tok = _tokenizer(str(path))  # a missing file fails here, at the stage's start, naming it
    return lambda text: len(tok.encode(text, add_special_tokens=False).ids)


def request_text(messages: Any, tools: Any) -> str:
    """What a request makes the model read, as one string (the proxy and the client build it alike)."""
    return json.dumps(messages or [], ensure_ascii=False, sort_keys=True) + json.dumps(tools or [], sort_keys=True)


def reply_text(message: Any) -> str:
    """What a reply's message wrote: its content and its tool calls' names and arguments."""
    if not isinstance(message, dict):
        return ""
    parts = [message.get("content") if isinstance(message.get("content"), str) else ""]
    for c in message.get("tool_calls") or []:
        fn = (c or {}).get("function") or {} if isinstance(c, dict) else {}
        args = fn.get("arguments")
        parts += [str(fn.get("name") or ""), args if isinstance(args, str) else json.dumps(args, sort_keys=True)]
    return "".join(p or "" for p in parts)


def event_stream(text: str) -> tuple[Any, dict] | None:
    """(usage, message) of an event stream (`data: {chunk}` lines) sent to a request that did not ask for one
    (`stream: false`): the last usage block any chunk carried, and the text the deltas wrote. None when the
    text is not an event stream. The reply is no completion, but its usage was billed."""
    usage, content, chunks = None, [], 0
    for line in text.splitlines():
        if not line.startswith("data:") or line[5:].strip() == "[DONE]":
            continue
        try:
            chunk = json.loads(line[5:])
        except json.JSONDecodeError:
            continue
        if not isinstance(chunk, dict):
            continue
        chunks += 1
        if isinstance(chunk.get("usage"), dict) and chunk["usage"]:
            usage = chunk["usage"]
        for c in chunk.get("choices") or []:
            delta = c.get("delta") if isinstance(c, dict) else None
            if isinstance(delta, dict) and isinstance(delta.get("content"), str):
                content.append(delta["content"])
    return (usage, {"content": "".join(content)}) if chunks else None


def _count(block: dict, key: str, limit: int, flags: list[str], where: str = "") -> int | None:
    name = f"{where}{key}"
    if key not in block:
        flags.append(f"usage: {name} missing")
        return None
    v = block[key]
    if v is None:
        flags.append(f"usage: {name} null")
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
        flags.append(f"usage: {name} not a whole number ({str(v)[:40]!r})")
        return None
    if v < 0:
        flags.append(f"usage: {name} negative ({int(v)})")
        return None
    if v > limit:
        flags.append(f"usage: {name} beyond what the model can take ({int(v):,} > {limit:,})")
        return None
    return int(v)


def _optional(block: Any, key: str, limit: int, flags: list[str], where: str) -> int | None:
    """A count that may be absent (a cache split, reasoning tokens): checked only when present."""
    if not isinstance(block, dict) or block.get(key) is None:
        return None
    return _count(block, key, limit, flags, where)


def usage_split(usage: Any, messages: Any = None, tools: Any = None, reply: Any = None,
                context: int | None = None, count: Callable[[str], int] = chars_count,
                max_tokens: int | None = None) -> dict:
    """The call's tokens (prompt, hit, miss, output, reasoning), whether the cache split and the usage
    were reported, whether any count is an estimate, and a flag per count that is not a count (beyond
    `bound`: what the model can take)."""
    flags: list[str] = []
    limit = bound(messages, tools, max_tokens, context)
    if not isinstance(usage, dict) or not usage:
        flags.append("usage: missing" if usage in (None, {}) else f"usage: not an object ({str(usage)[:40]!r})")
        usage, reported_usage = {}, False
    else:
        reported_usage = True
    prompt = _count(usage, "prompt_tokens", limit, flags) if reported_usage else None
    # a reply never holds more than the request's max_tokens (reasoning included)
    output = _count(usage, "completion_tokens", min(limit, max_tokens or limit), flags) if reported_usage else None
    reasoning = _optional(usage.get("completion_tokens_details"), "reasoning_tokens", limit, flags,
                          "completion_tokens_details.") or 0
    estimated = prompt is None or output is None
    if prompt is None:
        prompt = count(request_text(messages, tools)) if messages is not None else 0
    if output is None:
        output = count(reply_text(reply)) if reply is not None else 0
    hit, reported = 0, False
    if "prompt_cache_hit_tokens" in usage:
        got = _optional(usage, "prompt_cache_hit_tokens", limit, flags, "")
        hit, reported = (got, True) if got is not None else (0, False)
    elif isinstance(usage.get("prompt_tokens_details"), dict) and \
            usage["prompt_tokens_details"].get("cached_tokens") is not None:
        got = _optional(usage["prompt_tokens_details"], "cached_tokens", limit, flags, "prompt_tokens_details.")
        hit, reported = (got, True) if got is not None else (0, False)
    if hit > prompt:
        flags.append(f"usage: cached tokens ({hit:,}) above prompt tokens ({prompt:,})")
        hit, reported = 0, False
    if estimated and reported_usage and not flags:  # cannot happen, but an estimate is always named
        flags.append("usage: estimated")
    return {"prompt": prompt, "hit": hit, "miss": max(prompt - hit, 0), "output": output, "reasoning": reasoning,
            "cache_reported": reported, "usage_reported": reported_usage, "usage_estimated": estimated,
            "flags": flags}
