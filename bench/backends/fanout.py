"""Fan-out: searching 1..N per-agent stores one by one against one shared index with the agents as a list."""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

from harness.data.longmemeval import sha256_file
from harness.memory.bench import pct

from .cases import FANOUT_DENSE, K, LEXICAL_PER_VIEW, LEXICAL_SHARED, ORG, agent_of
from .engines import engine_label

def fanout_steps(n: int) -> list[int]:
    """How many agents' stores the fan-out searches: the paper's 1, 10, 50 and all (Figure 7)."""
    return sorted({1, min(10, n), min(50, n), n})


def fanout_side(data: Path, qs, units, vecs, queries, seed: int, vers) -> tuple[list[dict], list[dict]]:
    """Searching 1..N per-agent stores one by one vs one shared index with the agents as a list,
    lexical (the runtime's session stores vs FTS5 owner IN) and dense (one HNSW index per agent
    vs one Redis index with a TAG list)."""
    from harness.memory.backends.base import Query, backend_class, make_backend
    from harness.memory.backends.fts5 import fts_query

    n = len(qs)
    steps = fanout_steps(n)
    stores = None
    try:
        from harness.runtime.store import build_store, open_session_db

        sha = sha256_file(data)
        stores = [build_store(q, sha, agent=agent_of(i), layout="backends").path for i, q in enumerate(qs)]
    except Exception as exc:  # noqa: BLE001 - reported in the output, not hidden
        print(f"fan-out over runtime stores not measured: {exc}", file=sys.stderr)
    agents = [agent_of(i) for i in range(n)]
    rq = make_backend(FANOUT_DENSE, **backend_class(FANOUT_DENSE).private_params(f"study{seed}_fan"))
    rq.add(units, vecs)
    per_agent = {a: rq.owner_index(a) for a in agents}
    for name in per_agent.values():
        rq.wait_indexed(name)
    sh = make_backend(LEXICAL_SHARED)
    sh.add(units)
    rng = random.Random(seed)
    sample = queries[: min(len(queries), 30)]
    text_of = {q.qid: q.question for q in qs}
    rows = []
    for m in steps:
        lex_stores, lex_shared, dense_stores, dense_shared = [], [], [], []
        for qid, agent, vec in sample:
            q_text = text_of[qid]
            owners = [agent] + rng.sample([a for a in agents if a != agent], m - 1)
            if stores is not None:
                t = time.perf_counter()
                for o in owners:  # open, search, close: what fan-out over the agents' own stores costs
                    db = open_session_db(stores[agents.index(o)])
                    try:
                        db.search_messages(fts_query(q_text) or "x", limit=20)
                    finally:
                        db.close()
                lex_stores.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            sh.search_owners(Query(text=q_text), ORG, owners, K)
            lex_shared.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            for o in owners:
                rq.search_index(per_agent[o], Query(vector=vec), K)
            dense_stores.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            rq.search_owners(Query(vector=vec), ORG, owners, K)
            dense_shared.append((time.perf_counter() - t) * 1000)

        def p(xs, q):
            return round(pct(xs, q), 3) if xs else None

        rows.append({"agents": m, "queries": len(sample),
                     "runtime_stores_p50_ms": p(lex_stores, 50), "runtime_stores_p95_ms": p(lex_stores, 95),
                     "fts5_owner_in_p50_ms": p(lex_shared, 50), "fts5_owner_in_p95_ms": p(lex_shared, 95),
                     "redis_per_agent_p50_ms": p(dense_stores, 50), "redis_per_agent_p95_ms": p(dense_stores, 95),
                     "redis_tag_list_p50_ms": p(dense_shared, 50), "redis_tag_list_p95_ms": p(dense_shared, 95),
                     "engine_lexical": engine_label(LEXICAL_PER_VIEW, vers),
                     "engine_dense": engine_label(FANOUT_DENSE, vers)})
    for name in per_agent.values():
        rq.drop_index(name)
    rq.close()
    sh.close()
    fps = []
    if stores is not None:
        from harness.runtime.hermes import runtime_label

        fps.append({"backend": f"runtime session stores ({runtime_label()}, {n} files)", "units": len(units),
                    "storage": "disk", "total_bytes": sum(Path(p).stat().st_size for p in stores),
                    "engine": f"SQLite {vers.get('sqlite')}"})
    return rows, fps
