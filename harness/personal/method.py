"""What a personalization method (conditions/personal/<name>.py, `build(cfg, ctx) -> Method`) gives the run step.

One Method per trial x method run: `write()` hands the user's messages to its writers
(asynchronously: it returns at once), `inject()` gives the block the assistant will
see, `finish()` waits for its writers and says what was written and what the read
missed. Shared holds what lives for the whole stage: the identity resolver, the
writers' pool, the encoder, one kernel memory per condition and the metered endpoint.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from harness.kernel.identity import IdentityResolver


@dataclass
class Injected:
    block: str
    items: list[dict] = field(default_factory=list)  # what reached the prompt, as MemoryItem.describe()
    candidates: list[dict] = field(default_factory=list)  # what the store returned before any check
    retrieval_s: float = 0.0
    log: dict = field(default_factory=dict)


class Method:
    def write(self) -> None:
        pass

    def inject(self) -> Injected:
        raise NotImplementedError

    def finish(self) -> dict:
        return {}

    def close(self) -> None:
        pass


@dataclass
class Shared:
    cfg: Any  # the whole Hydra config
    proxy_url: str
    model_cfg: dict
    resolver: IdentityResolver
    pool: Any  # the writers' executor
    encoder: Any
    token: str  # names this process's stores (mem0 collections), so a rerun never reads old writes
    _memories: dict = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def once(self, key: str, make: Callable[[], Any]) -> Any:
        """One object per key for the whole stage (a condition's kernel memory, its mem0 collection)."""
        with self._lock:
            if key not in self._memories:
                self._memories[key] = make()
            return self._memories[key]

    def close(self) -> None:
        for m in self._memories.values():
            close = getattr(m, "close", None)
            if close:
                close()


@dataclass
class RunCtx:
    trial: dict
    condition: str
    shared: Shared
    agent: Callable[..., Any]  # agent(role, json=False) -> harness.run.loop.Agent metered into this run
    meter: Any
    run_id: str
    attempt: int
