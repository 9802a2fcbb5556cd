"""mem0_default (second seed paper): the real Mem0 library as the unmanaged external memory.

Each writer hands its message to `Memory.add(..., user_id, agent_id=<writer>, infer=True)`
asynchronously: Mem0 itself extracts the facts with its own prompts, through its own
OpenAI client pointed at the metering proxy (tagged by path, so every call lands in the
ledger under this run; its usage is also added to the run's meter). AssistantAgent's
memory is Mem0's `search(query, filters={"user_id", "agent_id": assistant})` issued at
once, with no write barrier and the per-agent scoping Mem0 gives by default: the fully
private endpoint of Appendix A.2. Embeddings: the project's local MiniLM through Mem0's
`huggingface` embedder; vector store: Mem0's `pgvector` provider on the PostgreSQL the
project starts (the same server the kernel's items live in), one collection per
condition and process, dropped at the end of the stage.
"""

from __future__ import annotations

import os
import threading
import time

from harness.endpoints.client import Meter
from harness.personal import assistant, writers
from harness.personal.method import Injected, Method, RunCtx
from harness.endpoints.proxy import tagged_url

HEADER = "Relevant memories:"
_INIT = threading.Lock()  # Mem0 creates its table on first use; concurrent CREATEs race inside PostgreSQL


def _pg_url() -> str:
    from harness import services

    s = services.settings()
    parts = dict(kv.split("=", 1) for kv in s.pg_dsn.split())
    return f"postgresql://{parts['user']}@{parts['host']}:{parts['port']}/{parts['dbname']}"


def minilm_dir() -> str:
    from harness.memory.encoder import SPECS, resolve_model_dir

    return str(resolve_model_dir(SPECS["minilm"]))


def mem0_config(cfg, ctx: RunCtx, meter: Meter) -> dict:
    mc = ctx.shared.model_cfg

    def metered(_llm, response, params) -> None:
        # usage as sent (unset fields left out) and, should it need estimating, the request and reply it came from
        usage = response.usage.model_dump(exclude_unset=True) if getattr(response, "usage", None) else None
        reply = response.choices[0].message.model_dump(exclude_unset=True) if response.choices else {}
        meter.add_call(usage, 0.0, response.choices[0].finish_reason if response.choices else None, "mem0",
                       messages=params.get("messages") if isinstance(params, dict) else None, reply=reply)

    return {
        "llm": {"provider": "openai", "config": {
            "model": str(mc["model"]), "api_key": "metered-by-proxy", "temperature": 0.0,
            "max_tokens": int(cfg.llm_max_tokens),
            "openai_base_url": tagged_url(ctx.shared.proxy_url, ctx.run_id, ctx.attempt, "mem0"),
            "response_callback": metered}},
        "embedder": {"provider": "huggingface", "config": {"model": minilm_dir(), "embedding_dims": 384}},
        "vector_store": {"provider": "pgvector", "config": {
            "connection_string": _pg_url(), "collection_name": f"mem0_{ctx.shared.token}_{ctx.condition}",
            "embedding_model_dims": 384, "hnsw": bool(cfg.get("hnsw", True))}},
        "history_db_path": os.path.join(str(ctx.shared.cfg.cache_dir), "mem0", f"history_{ctx.shared.token}.db"),
    }


def memory(cfg, ctx: RunCtx, meter: Meter):
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from mem0 import Memory

    conf = mem0_config(cfg, ctx, meter)
    os.makedirs(os.path.dirname(conf["history_db_path"]), exist_ok=True)
    with _INIT:
        mem = Memory.from_config(conf)
        mem.get_all(filters={"user_id": "collection-check"}, top_k=1)  # first use creates the table, once
        return mem


class Mem0Default(Method):
    def __init__(self, cfg, ctx: RunCtx):
        self.cfg, self.ctx = cfg, ctx
        self.mem = memory(cfg, ctx, ctx.meter)
        ctx.shared.once(f"mem0:{ctx.condition}", lambda: _Dropper(self.mem))  # drops the collection at stage end
        self.futures = []

    def write(self) -> None:
        t = self.ctx.trial
        for name in self.cfg.writers:
            w = writers.WRITERS[str(name)]
            self.futures.append(self.ctx.shared.pool.submit(
                self.mem.add, t["messages"][w.message], user_id=t["user_id"], agent_id=w.name, infer=True))

    def inject(self) -> Injected:
        t = self.ctx.trial
        t0 = time.perf_counter()
        res = self.mem.search(t["query"], filters={"user_id": t["user_id"], "agent_id": assistant.NAME},
                              top_k=int(self.cfg.k))["results"]
        dt = time.perf_counter() - t0
        items = [{"user_id": r.get("user_id"), "owner": r.get("agent_id"), "memory_type": None, "sharing": "private",
                  "content": {"value": r.get("memory")}, "score": r.get("score")} for r in res]
        block = (HEADER + "\n" + "\n".join(f"- {r.get('memory')}" for r in res)) if res else ""
        return Injected(block, items, list(items), dt, {"filters": {"user_id": t["user_id"], "agent_id": assistant.NAME},
                                                         "returned": len(res)})

    def finish(self) -> dict:
        written, errors = [], []
        for f in self.futures:
            try:
                written.append(len((f.result() or {}).get("results", [])))
            except Exception as exc:  # Mem0 raises on a failed LLM call: recorded, never hidden
                env = _environment(exc, self.ctx.shared.model_cfg)
                if env is not None:  # a refused key or a stopped PostgreSQL is the stage's, not a failed write
                    raise env from exc
                errors.append(f"{type(exc).__name__}: {exc}"[:300])
        return {"write_errors": errors, "writes": [{"items": n} for n in written]}

    def close(self) -> None:
        closer = getattr(self.mem, "close", None)
        if closer:
            closer()


def _environment(exc: BaseException, model_cfg: dict):
    """The environment failure behind an exception Mem0 raised (its own OpenAI client, its PostgreSQL)."""
    import openai

    from harness.endpoints.client import environment_failure
    from harness.failures import classify

    if isinstance(exc, openai.APIError):
        return environment_failure(exc, model_cfg)
    return classify(exc)


class _Dropper:
    """Removes this process's Mem0 collection when the stage ends."""

    def __init__(self, mem):
        self.mem = mem

    def close(self) -> None:
        try:
            self.mem.vector_store.delete_col()
        except Exception:  # the stage's records are written; a leftover table is named by process token
            pass


def build(cfg, ctx: RunCtx) -> Method:
    return Mem0Default(cfg, ctx)
