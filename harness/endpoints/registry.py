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
    yield Endpoint(str(base_url).rstrip("/"), key, "openai_compatible", str(_get(cfg, "model")))


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
