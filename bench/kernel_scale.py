"""The kernel at the study's size and at ten times it (`make bench`; a benchmark, numbers depend on the machine).

The personalization stage keeps every user's items in one memory space per method. Here each of
N generated users (harness/data/personal.py) has the items a well-formed extraction of their
profile and task messages gives (Phase 2 sharing: all shared) written through the kernel's
system calls, then one read per user with the trial's query, at the stage's cap (10) and a
threshold that keeps everything (-1, as the stage sets it for MiniLM). Per index and N it prints
the mean number injected, the users who got none, the short reads (the index returned fewer of the
user's visible items than min(cap, visible)) and the plan the reads took. With plain pgvector
(HNSW at ef_search 40, the view applied after the index scan) the reads collapse as N grows; the
stage's pgvector_kernel, Redis's query engine (a pre-filter) and the exact index do not.

The Mem0 methods' store (`--mem0 hnsw,exact`): Mem0's own pgvector collection (mem0's PGVector,
its insert and search SQL) holding the same facts, one row per fact with Mem0's payload (user_id,
agent_id, the text), searched by user as mem0_user searches it. `hnsw` is Mem0's default (an HNSW
index: the user filter applies after the index scan); `exact` is the stage's `hnsw: false` (no
index: an exact scan under the filter). The short reads are those returning fewer than
min(k, the user's facts).

    python -m bench.kernel_scale [--users 150,1500] [--indexes pgvector,pgvector_kernel,...] [--mem0 hnsw,exact]
        [--encoder minilm]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

from harness.data import personal as trials_data
from harness.kernel import IdentityResolver, KernelMemory, MemoryItem
from harness.kernel.syscalls import Syscalls
from harness.personal import assistant
from harness.personal.writers import PROFILE, TASK, Writer

CONF = Path(__file__).resolve().parent.parent / "conf"
# an index of the bench: a conf/index yaml, with overrides for the variants the stage could be given
INDEXES = {
    "pgvector": ("pgvector", []),
    "pgvector_relaxed": ("pgvector", ["index.iterative_scan=relaxed_order"]),
    "pgvector_kernel": ("pgvector_kernel", []),
    "redis_qe": ("redis_qe", []),
    "vectorset": ("vectorset", []),
    "hybrid": ("hybrid", []),
    "exact": ("exact", []),
}
CAP = 10


def extracted(trial: dict, writer: Writer, ticket, sharing: str = "shared") -> list[MemoryItem]:
    """The items a well-formed extraction of the trial's message for `writer` yields (its structured facts)."""
    facts = trial["profile"] if writer is PROFILE else trial["task"]
    out: list[MemoryItem] = []
    for f in writer.fields:
        values = facts.get(f)
        for v in values if isinstance(values, list) else [values]:
            out.append(MemoryItem(ticket.user, writer.name, writer.memory_type, sharing, {"field": f, "value": v},
                                  ticket.seq, len(out)))
    return out


def index_config(name: str) -> dict:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    yaml, overrides = INDEXES[name]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"index={yaml}", *overrides])
    return OmegaConf.to_container(cfg.index, resolve=True)


def kernel_over(index_cfg: dict, encoder, cap: int = CAP) -> Syscalls:
    from harness.memory.space import space_from_config

    space = space_from_config(index_cfg, encoder=encoder)
    return Syscalls(KernelMemory(space, IdentityResolver(), cap=cap, threshold=-1.0))


def fill(kernel: Syscalls, trials: list[dict]) -> None:
    """Every user's profile and task items, one write per writer, through the system calls."""
    for t in trials:
        for w in (PROFILE, TASK):
            kernel.write(w.name, lambda ticket, w=w, t=t: extracted(t, w, ticket), t["user_id"])


def read_all(kernel: Syscalls, trials: list[dict]) -> list:
    """One read per user with the trial's query: the Retrievals."""
    return [kernel.retrieve(assistant.NAME, t["query"], t["user_id"]) for t in trials]


def measure(name: str, index_cfg: dict, users: int, encoder) -> dict:
    trials = trials_data.generate(users, 0)["trials"]
    kernel = kernel_over(index_cfg, encoder)
    try:
        t0 = time.perf_counter()
        fill(kernel, trials)
        t1 = time.perf_counter()
        times, got, plans = [], [], []
        for t in trials:
            s = time.perf_counter()
            got.append(kernel.retrieve(assistant.NAME, t["query"], t["user_id"]))
            times.append(time.perf_counter() - s)
            plans.append(got[-1].read.plan or {})
    finally:
        kernel.close()
    injected = [len(r.injection.memories) for r in got]
    paths = Counter(str(p.get("path")) for p in plans)
    return {"index": name, "users": users, "items": sum(r.read.visible for r in got),
            "mean_injected": statistics.fmean(injected), "none": sum(n == 0 for n in injected),
            "short_reads": sum(r.read.short > 0 for r in got), "min": min(injected),
            "plans": dict(paths), "write_s": t1 - t0, "read_p50_ms": 1000 * statistics.median(times)}


def mem0_store(hnsw: bool, dims: int, name: str):
    """Mem0's own pgvector collection on the project's PostgreSQL (the stage's settings but the index flag)."""
    from mem0.vector_stores.pgvector import PGVector

    from conditions.personal.mem0_default import _pg_url

    return PGVector(dbname=None, collection_name=name, embedding_model_dims=dims, user=None, password=None, host=None, port=None,
                    diskann=False, hnsw=hnsw, connection_string=_pg_url())


def mem0_facts(trial: dict) -> list[tuple[str, str]]:
    """(writer, fact text) of a user: the statements a well-formed extraction gives, as Mem0 stores text."""
    return [(w.name, it.statement()) for w in (PROFILE, TASK)
            for it in extracted(trial, w, _Ticket(trial["user_id"], 1))]


class _Ticket:
    def __init__(self, user: str, seq: int):
        self.user, self.seq = user, seq


def measure_mem0(users: int, hnsw: bool, encoder, k: int = CAP, measured: int | None = None) -> dict:
    """Every user's facts in one Mem0 collection, then Mem0's search by user for each (or the first `measured`)."""
    import secrets
    import uuid

    trials = trials_data.generate(users, 0)["trials"]
    rows = [(t["user_id"], agent, text) for t in trials for agent, text in mem0_facts(t)]
    store = mem0_store(hnsw, encoder.dim, f"mem0_bench_{secrets.token_hex(4)}")
    try:
        t0 = time.perf_counter()
        vecs = encoder.embed([text for _, _, text in rows], progress=False)
        store.insert([v.tolist() for v in vecs], [{"user_id": u, "agent_id": a, "data": x} for u, a, x in rows],
                     [str(uuid.uuid4()) for _ in rows])
        t1 = time.perf_counter()
        held = Counter(u for u, _, _ in rows)
        got, times = [], []
        for t in trials[:measured]:
            q = encoder.embed_query(t["query"]).tolist()
            s = time.perf_counter()
            res = store.search(t["query"], q, top_k=k, filters={"user_id": t["user_id"]})
            times.append(time.perf_counter() - s)
            assert all(r.payload.get("user_id") == t["user_id"] for r in res), "Mem0 returned another user's fact"
            got.append((len(res), min(k, held[t["user_id"]])))
    finally:
        store.delete_col()
    returned = [n for n, _ in got]
    return {"index": f"mem0_{'hnsw' if hnsw else 'exact'}", "users": users, "items": len(rows),
            "mean_injected": statistics.fmean(returned), "none": sum(n == 0 for n in returned),
            "short_reads": sum(n < want for n, want in got), "min": min(returned),
            "plans": {"hnsw post-filter" if hnsw else "exact scan": len(got)}, "write_s": t1 - t0,
            "read_p50_ms": 1000 * statistics.median(times)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--users", default="150,1500", help="comma-separated user counts")
    ap.add_argument("--indexes", default=",".join(INDEXES), help=f"comma-separated, of {', '.join(INDEXES)}")
    ap.add_argument("--mem0", default="hnsw,exact", help="Mem0's collection: hnsw (Mem0's default), exact (the stage's)")
    ap.add_argument("--encoder", default="minilm", help="minilm (the stage's offline encoder) or hash")
    a = ap.parse_args(argv)
    names = [n for n in a.indexes.split(",") if n]
    unknown = [n for n in names if n not in INDEXES]
    if unknown:
        print(f"unknown index {unknown}; known: {', '.join(INDEXES)}", file=sys.stderr)
        return 2
    from harness import services
    from harness.memory.encoder import load_encoder

    services.up(services.settings())
    encoder = load_encoder(a.encoder)
    configs = {name: index_config(name) for name in names}
    print(f"kernel reads at scale (cap {CAP}, threshold -1, Phase 2 sharing; encoder {a.encoder})")
    print(f"{'index':<18}{'users':>6}{'items':>7}{'mean inj':>9}{'none':>6}{'short':>6}{'min':>5}"
          f"{'write s':>9}{'read p50 ms':>12}  plans")
    for n in (int(x) for x in a.users.split(",")):
        for name in names:
            r = measure(name, configs[name], n, encoder)
            print(f"{r['index']:<18}{r['users']:>6}{r['items']:>7}{r['mean_injected']:>9.2f}{r['none']:>6}"
                  f"{r['short_reads']:>6}{r['min']:>5}{r['write_s']:>9.1f}{r['read_p50_ms']:>12.2f}  "
                  + ", ".join(f"{k} {v}" for k, v in sorted(r["plans"].items())), flush=True)
        for mode in (m for m in a.mem0.split(",") if m):
            r = measure_mem0(n, mode == "hnsw", encoder)
            print(f"{r['index']:<18}{r['users']:>6}{r['items']:>7}{r['mean_injected']:>9.2f}{r['none']:>6}"
                  f"{r['short_reads']:>6}{r['min']:>5}{r['write_s']:>9.1f}{r['read_p50_ms']:>12.2f}  "
                  + ", ".join(f"{k} {v}" for k, v in sorted(r["plans"].items())), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
