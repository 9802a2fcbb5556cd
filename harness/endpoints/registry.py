"""Which server answers a model config, with what key: the provider registry.

A provider turns a model config into a running upstream (base URL, key, what it is). The
identity of an endpoint is provider, model *and* base URL: two servers serving the same
model name (vLLM's `default`) are different judges and different readers.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

from harness.failures import EnvironmentFailure
from harness.plugins import Registry


class EndpointError(EnvironmentFailure):
    """The model config cannot be served as given (unknown provider, missing key)."""


@dataclass
class Endpoint:
    base_url: str  # the upstream's OpenAI base URL (the metering proxy sits in front of it)
    key: str | None
    provider: str
    model: str
    info: dict = field(default_factory=dict)


def _get(cfg, key, default=None):
    return cfg.get(key, default) if hasattr(cfg, "get") else getattr(cfg, key, default)


@contextmanager
def _local(cfg) -> Iterator[Endpoint]:
    from harness.endpoints.local_model import LocalModel

    with LocalModel(ctx_size=int(_get(cfg, "ctx_size", 8192)), parallel=int(_get(cfg, "parallel", 1) or 1)) as lm:
        # the local server's URL changes from start to start; its identity is the model file
        yield Endpoint(lm.base_url, None, "local", str(_get(cfg, "model")), {"local": lm.info()})


@contextmanager
def _openai_compatible(cfg) -> Iterator[Endpoint]:
    base_url = _get(cfg, "base_url")
    if not base_url:
        raise EndpointError(f"model={_get(cfg, 'name')}: no base_url", "set model.base_url (or its environment variable)")
    key = None
    env = _get(cfg, "api_key_env")
    if env:
        key = os.environ.get(str(env))
        if not key:
            raise EndpointError(f"model={_get(cfg, 'name')} needs an API key in ${env}, which is not set",
                                f"export {env}=... (or set model.api_key_env=null for a server without keys)")
    info = {}
    # what the server says its context is: usage is bounded by it (harness.endpoints.usage.bound), and the
    # silent cut of a server that truncates is judged by it (harness.endpoints.client.silently_cut)
    ctx, source = served_context(str(base_url), str(_get(cfg, "model")), key) if _get(cfg, "truncates_silently") \
        else listed_context(str(base_url), str(_get(cfg, "model")), key)
    if ctx:
        info = {"context_tokens": ctx, "context_source": source}
    yield Endpoint(str(base_url).rstrip("/"), key, "openai_compatible", str(_get(cfg, "model")), info)


def listed_context(base_url: str, model: str, key: str | None = None) -> tuple[int | None, str | None]:
    """The context the server lists for `model` in GET /v1/models: vLLM's (and SGLang's) `max_model_len`,
    a gateway's `context_length`; (None, None) when it lists none (hosted APIs) or cannot be asked."""
    import httpx

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        with httpx.Client(timeout=5.0, headers=headers) as c:
            r = c.get(f"{base_url.rstrip('/')}/models")
            if r.status_code != 200:
                return None, None
            for m in (r.json() or {}).get("data") or []:
                if not isinstance(m, dict) or m.get("id") != model:
                    continue
                for k in ("max_model_len", "context_length"):
                    v = m.get(k)
                    if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                        return v, f"/v1/models {k}"
    except (httpx.HTTPError, ValueError, AttributeError):
        pass
    return None, None


def served_context(base_url: str, model: str, key: str | None = None) -> tuple[int | None, str | None]:
    """The context an Ollama server runs `model` with: the loaded model's `context_length` (GET /api/ps),
    else a `num_ctx` in its parameters (POST /api/show); (None, None) from a server that says neither.
    (The model's own maximum in /api/show's model_info is not what Ollama serves by default.)"""
    import re

    import httpx

    root = base_url.rstrip("/").removesuffix("/v1")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        with httpx.Client(timeout=5.0, headers=headers) as c:
            ps = c.get(f"{root}/api/ps")
            if ps.status_code == 200:
                for m in (ps.json() or {}).get("models") or []:
                    if model in (m.get("name"), m.get("model")) and isinstance(m.get("context_length"), int):
                        return m["context_length"], "ollama /api/ps"
            show = c.post(f"{root}/api/show", json={"model": model})
            if show.status_code == 200:
                found = re.search(r"(?m)^\s*num_ctx\s+(\d+)", str((show.json() or {}).get("parameters") or ""))
                if found:
                    return int(found[1]), "ollama /api/show num_ctx"
    except (httpx.HTTPError, ValueError, AttributeError):
        pass
    return None, None


PROVIDERS: Registry[Callable] = Registry("endpoint provider", None)  # a plugin registers its own the same way
PROVIDERS.register("local", _local)
PROVIDERS.register("openai_compatible", _openai_compatible)


def open_endpoint(cfg):
    """Context manager yielding the Endpoint for a model (or judge) config."""
    provider = str(_get(cfg, "provider"))
    if provider not in PROVIDERS:
        raise EndpointError(f"unknown provider {provider!r} in model={_get(cfg, 'name')}",
                            f"use one of: {', '.join(sorted(PROVIDERS))}")
    return PROVIDERS.get(provider)(cfg)


def identity(cfg) -> str:
    """Provider, model and base URL of a config, without starting anything (cache keys, records).

    The local model's server gets a new port each start; its identity is the model file."""
    provider = str(_get(cfg, "provider"))
    base = "local" if provider == "local" else str(_get(cfg, "base_url") or "").rstrip("/")
    return f"{provider}:{_get(cfg, 'model')}@{base}"
