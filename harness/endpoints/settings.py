"""The typed endpoint node the client receives: a model preset (conf/model/) as EndpointSettings, a judge
preset (conf/judge/) as JudgeSettings.

WHY here and not in harness.run.settings: the client (this package) reads these fields and may not import
the run layer above it. The config edge (harness.run.settings.endpoint_node) builds and checks the node
from a preset and the overrides; `endpoint_settings` only types a node that arrives otherwise (a test's
or the bench's plain mapping), so every reader of the client reads attributes of one class.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Optional


@dataclass
class EndpointSettings:
    """A model preset (conf/model/) and, with JudgeSettings' keys, a judge preset (conf/judge/)."""

    name: str = "???"
    provider: str = "???"
    model: Optional[str] = None
    base_url: Optional[str] = None
    api_key_env: Optional[str] = None
    params: dict = field(default_factory=dict)  # open: sent as the provider spells it
    accepts: dict = field(default_factory=dict)
    prices: dict = field(default_factory=dict)
    offpeak: Optional[dict] = None
    reasoning_effort: Optional[str] = None  # the one reasoning setting; filled from whichever spelling params use
    timeout_s: Optional[float] = None
    retry_budget_s: Optional[float] = None
    max_retries: Optional[int] = None
    backoff_s: Optional[float] = None
    max_wait_s: Optional[float] = None
    max_concurrency: Optional[int] = None
    parallel: Optional[int] = None
    ctx_size: Optional[int] = None
    breaker_runs: Optional[int] = None
    first_tool_choice: Optional[str] = None
    truncates_silently: Optional[bool] = None
    context_tokens: Optional[int] = None
    tokenizer: Optional[str] = None  # a local tokenizer.json the usage estimate counts with (harness.endpoints.usage)
    speed: Optional[Any] = None

    def get(self, key: str, default: Any = None) -> Any:
        """A mapping's read, for the records and readers that take a preset or a record's plain copy alike."""
        value = getattr(self, key, None)
        return default if value is None else value


@dataclass
class JudgeSettings(EndpointSettings):
    prompts: str = "builtin"
    judge_params: dict = field(default_factory=dict)  # open
    kinds: Optional[list] = None  # judgement kinds (judge/kinds/), default [answer_check]


JUDGE_ONLY = {f.name for f in fields(JudgeSettings)} - {f.name for f in fields(EndpointSettings)}


def endpoint_settings(node: Any) -> EndpointSettings:
    """`node` as the typed endpoint node: returned as it is when it is one, else its keys (a plain mapping
    or DictConfig, interpolations resolved) on EndpointSettings, or JudgeSettings when it carries a judge's
    keys. A key neither declares is a TypeError naming it."""
    if isinstance(node, EndpointSettings):
        return node
    from omegaconf import DictConfig, OmegaConf

    value = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node or {})
    schema = JudgeSettings if JUDGE_ONLY & set(value) else EndpointSettings
    unknown = set(value) - {f.name for f in fields(schema)}
    if unknown:
        raise TypeError(f"endpoint settings: no such setting {', '.join(sorted(unknown))} "
                        f"({schema.__name__} takes: {', '.join(f.name for f in fields(schema))})")
    return schema(**{k: v for k, v in value.items() if v is not None})  # None: the default
