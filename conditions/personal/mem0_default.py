"""mem0_default (second seed paper): the real Mem0 library as the unmanaged external memory.

Each writer hands its message to `Memory.add(..., user_id, agent_id=<writer>, infer=True)`
asynchronously: Mem0 itself extracts the facts with its own prompts (one LLM call per add in mem0ai
2.x, measured by harness/personal/forecast.py mem0_add from the installed library), through its own
OpenAI client pointed at the metering proxy (tagged by path, so every call lands in the
ledger under this run; its usage is also added to the run's meter). AssistantAgent's
memory is Mem0's `search(query, filters={"user_id", "agent_id": assistant})` issued at
once, with no write barrier and the per-agent scoping Mem0 gives by default: the fully
private endpoint of Appendix A.2. The writers store under their own agent ids and the assistant
writes nothing, so that search finds nothing, however long it waited: the records show it
(method_log.filters, read.visible = 0, written_items > 0) and the report's mechanism table
(analysis/personal/mechanism.py) states it beside the score. The exposure audit reads the user's
whole partition in `finish`, after the trial's adds have landed. Embeddings: the project's local MiniLM through Mem0's
`huggingface` embedder, loaded once per process; vector store: Mem0's `pgvector` provider on
the PostgreSQL the project starts (the same server the kernel's items live in), one collection
per condition and process, dropped at the end of the stage, searched completely: `hnsw: false`
(the default here) builds no HNSW index, so a search is an exact scan under the user filter
(Mem0's HNSW post-filters: at 1,500 users it finds almost none of a user's facts,
bench/kernel_scale.py), and `threshold` (Mem0's own default 0.1) is the condition's, declared.
Every read is checked: `read.short` counts what Mem0 held under the read's scope, up to k,
that the search did not return.
"""

from __future__ import annotations

import copy
import os
import threading
import time
from dataclasses import dataclass, field

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


@dataclass
class Settings:
    """conf/condition/mem0_default.yaml: the writers, the search's k and minimum score, Mem0's LLM reply cap,
    and whether its collection has an HNSW index (Mem0's HNSW post-filters)."""

    writers: list = field(default_factory=lambda: ["profile_agent", "task_agent", "conversation_extractor"])
    k: int = 10
    llm_max_tokens: int = 400
    hnsw: bool = False
    threshold: float = 0.1


def llm_config(cfg: Settings, shared, run_id: str, attempt: int, meter: Meter) -> dict:
    """Mem0's LLM for one run: its own OpenAI client through the metering proxy, tagged by this run, whose usage
    is added to the run's meter."""
    mc = shared.model_cfg

    def metered(_llm, response, params) -> None:
        # usage as sent (unset fields left out) and, should it need estimating, the request and reply it came from
        usage = response.usage.model_dump(exclude_unset=True) if getattr(response, "usage", None) else None
        reply = response.choices[0].message.model_dump(exclude_unset=True) if response.choices else {}
        meter.add_call(usage, 0.0, response.choices[0].finish_reason if response.choices else None, "mem0",
                       messages=params.get("messages") if isinstance(params, dict) else None, reply=reply)

    return {"model": str(mc.model), "api_key": "metered-by-proxy", "temperature": 0.0,
            "max_tokens": int(cfg.llm_max_tokens),
            "openai_base_url": tagged_url(shared.proxy_url, run_id, attempt, "mem0"),
            "response_callback": metered}


def mem0_config(cfg: Settings, shared, condition: str, llm: dict) -> dict:
    return {
        "llm": {"provider": "openai", "config": llm},
        "embedder": {"provider": "huggingface", "config": {"model": minilm_dir(), "embedding_dims": 384}},
        "vector_store": {"provider": "pgvector", "config": {
            "connection_string": _pg_url(), "collection_name": f"mem0_{shared.token}_{condition}",
            "embedding_model_dims": 384, "hnsw": cfg.hnsw}},
        "history_db_path": os.path.join(str(shared.cfg.cache_dir), "mem0", f"history_{shared.token}.db"),
    }


def _store(cfg: Settings, shared, condition: str):
    """This condition's Mem0 (its collection), built once per process; every condition shares the first one's
    embedder, so the model is loaded once, never per run."""
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    def make():
        from mem0 import Memory
        from mem0.configs.base import MemoryConfig
        from mem0.utils.factory import VectorStoreFactory

        conf = mem0_config(cfg, shared, condition, llm_config(cfg, shared, "setup", 0, Meter(
            shared.model_cfg.prices, shared.model_cfg.offpeak)))
        os.makedirs(os.path.dirname(conf["history_db_path"]), exist_ok=True)
        with _INIT:
            first = shared._memories.get("mem0:embedder")
            if first is None:
                mem = Memory.from_config(conf)
                shared._memories["mem0:embedder"] = _Held(mem)
            else:  # the loaded embedder, this condition's own collection
                mem = copy.copy(first.mem)
                mem.config = MemoryConfig(**conf)
                vs = mem.config.vector_store
                mem.vector_store = VectorStoreFactory.create(vs.provider, vs.config)
                mem.collection_name = vs.config.collection_name
                mem._entity_store = None
            mem.get_all(filters={"user_id": "collection-check"}, top_k=1)  # first use creates the table, once
        return _Dropper(mem)

    return shared.once(f"mem0:{condition}", make).mem


def memory(cfg: Settings, ctx: RunCtx, meter: Meter):
    """The condition's Mem0 for one run: the process's store and embedder, this run's metered LLM."""
    from mem0.utils.factory import LlmFactory

    mem = copy.copy(_store(cfg, ctx.shared, ctx.condition))
    mem.llm = LlmFactory.create("openai", llm_config(cfg, ctx.shared, ctx.run_id, ctx.attempt, meter))
    return mem


class Mem0Default(Method):
    services = frozenset({"postgres"})  # Mem0's vector store: the project's PostgreSQL
    writes = "mem0"
    # whose id the assistant's search filters by (the manifest and the report say it): the assistant's own agent id,
    # under which no writer stores anything, so it retrieves nothing whatever it waits (the mechanism of its floor)
    searched_by = "user_id and agent_id=assistant_agent"

    @classmethod
    def setup(cls, cfg: Settings, shared, condition: str) -> None:
        """Mem0's embedder and this condition's collection, before the first run."""
        _store(cfg, shared, condition)

    def __init__(self, cfg: Settings, ctx: RunCtx):
        self.cfg, self.ctx = cfg, ctx
        self.mem = memory(cfg, ctx, ctx.meter)
        self.futures = []

    def write(self) -> None:
        """Each writer's message to Mem0's own add, one after another as the paper's pipeline runs its writers;
        each add holds one endpoint slot (Mem0 makes its LLM calls one after another inside it)."""
        t, slots = self.ctx.trial, self.ctx.shared.slots

        def add(w):
            return lambda: slots.hold(lambda: self.mem.add(t["messages"][w.message], user_id=t["user_id"],
                                                           agent_id=w.name, infer=True))[0]

        self.futures = writers.in_order(self.ctx.shared.pool(self.ctx.condition),
                                        [add(writers.WRITERS[str(n)]) for n in self.cfg.writers])

    def scope(self) -> dict:
        return {"user_id": self.ctx.trial["user_id"], "agent_id": assistant.NAME}

    def inject(self) -> Injected:
        return self.read(self.scope(), None)

    def read(self, scope: dict, barrier: dict | None) -> Injected:
        """Mem0's search under `scope`, complete (no HNSW index: an exact scan under the filter; `threshold`
        declared in the condition's yaml), with a short-read check: what Mem0 held under the scope before the
        search against what it returned."""
        t, k = self.ctx.trial, int(self.cfg.k)
        held = self.mem.get_all(filters=scope, top_k=10_000)["results"]  # before the timed search
        t0 = time.perf_counter()
        res = self.mem.search(t["query"], filters=scope, top_k=k, threshold=float(self.cfg.threshold))["results"]
        dt = time.perf_counter() - t0
        items = [self.describe(r) for r in res]
        block = (HEADER + "\n" + "\n".join(f"- {r.get('memory')}" for r in res)) if res else ""
        expected = min(k, len(held))
        read = {"visible": len(held), "expected": expected, "returned": len(res),
                "short": max(0, expected - len(res)), "threshold": float(self.cfg.threshold),
                "plan": "hnsw" if self.cfg.hnsw else "exact scan"}
        log = {"filters": scope, "returned": len(res), "user_memories": len(held), "read": read}
        if barrier is not None:
            log["barrier"] = barrier
        return Injected(block, items, list(items), dt + float((barrier or {}).get("waited_s") or 0.0), log)

    def describe(self, r: dict) -> dict:
        return {"user_id": r.get("user_id"), "owner": r.get("agent_id"), "memory_type": None, "sharing": "private",
                "content": {"value": r.get("memory")}, "score": r.get("score")}

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
        # the exposure audit, once this trial's adds have landed (every future above has resolved): the user's whole
        # partition under no agent scope (every writer's fact), so what the scope kept out is counted in full; an
        # add still open would be unaudited, never kept out (none is: finish waited for them all). An add that had
        # not landed when the read ran (`late`, set by a method that waits for its adds) is unaudited too: its
        # facts were not there to be returned, so they are left out of the audit, never counted kept out
        late = [self.futures[i] for i in getattr(self, "late", [])]
        late_ids = set()
        for f in late:
            try:
                late_ids |= {r.get("id") for r in (f.result() or {}).get("results", [])}
            except Exception:  # noqa: BLE001 - a failed add stored nothing (its error is in write_errors)
                pass
        open_adds = sum(not f.done() for f in self.futures)
        audit = self.mem.get_all(filters={"user_id": self.ctx.trial["user_id"]}, top_k=10_000)["results"]
        return {"write_errors": errors, "writes": [{"items": n} for n in written],
                "audit": [self.describe(r) for r in audit if r.get("id") not in late_ids],
                "unaudited_writes": open_adds + len(late)}


def _environment(exc: BaseException, model_cfg: dict):
    """The environment failure behind an exception Mem0 raised (its own OpenAI client, its PostgreSQL)."""
    import openai

    from harness.endpoints.client import environment_failure
    from harness.failures import classify

    if isinstance(exc, openai.APIError):
        return environment_failure(exc, model_cfg)
    return classify(exc)


class _Held:
    """The process's first Mem0 (its loaded embedder); its collection is dropped by its condition's _Dropper."""

    def __init__(self, mem):
        self.mem = mem

    def close(self) -> None:
        pass


class _Dropper:
    """Removes this process's Mem0 collection when the stage ends."""

    def __init__(self, mem):
        self.mem = mem

    def close(self) -> None:
        try:
            self.mem.vector_store.delete_col()
        except Exception:  # the stage's records are written; a leftover table is named by process token
            pass


build = Mem0Default
