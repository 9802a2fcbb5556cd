"""The lexical side: one FTS5 index with an owner column against exact per-view BM25."""

from __future__ import annotations

import statistics
import time

from harness.memory.bench import pct

from .cases import CASES, K, LEXICAL_PER_VIEW, LEXICAL_SHARED, SPLIT_OF, view_for
from .engines import engine_label

def lexical_side(splits, qs, queries, pub, vers) -> tuple[list[dict], list[dict]]:
    """One FTS5 index with an owner column vs exact per-view BM25. The per-view indexes are built one
    at a time (agents whose views admit the same units share one) and dropped after their queries, so
    memory holds the units and one view, never every view of a case at once."""
    from harness.memory.backends.base import Query, make_backend

    rows, fps = [], []
    engine = engine_label(LEXICAL_PER_VIEW, vers)
    for split, us in splits.items():
        cases = [c for c in CASES if SPLIT_OF[c] == split]
        shared, per_view = make_backend(LEXICAL_SHARED), make_backend(LEXICAL_PER_VIEW)
        shared.add(us)
        per_view.add(us)
        largest = 0
        for case in cases:
            groups: dict[str, list] = {}
            for (qid, agent, _), q in zip(queries, qs):
                view = view_for(case, agent)
                key = ("*" if view is None else "public" if case.startswith("public") and agent in pub[split]
                       else agent if case in ("one", "public10", "public50") else "org")
                groups.setdefault(key, []).append((agent, q.question))
            rec, short, ms = [], 0, []
            for key, members in groups.items():
                v0 = view_for(case, members[0][0])
                for agent, text in members:
                    view = view_for(case, agent)
                    query = Query(text=text)
                    t = time.perf_counter()
                    got = shared.search(query, view, K)
                    ms.append((time.perf_counter() - t) * 1000)
                    gt = per_view.search(query, v0, K)  # same admitted units as the agent's own view
                    short += len(got) < K
                    rec.append(len({h.uid for h in got} & {h.uid for h in gt}) / len(gt) if gt else 1.0)
                largest = max(largest, per_view.footprint()["view_index_bytes"] or 0)
                per_view.drop_view(v0)
            rows.append({"config": "fts5_shared vs per-view BM25", "case": case, "queries": len(rec),
                         "overlap_at_10": round(statistics.mean(rec), 4), "short_lists": short,
                         "p50_ms": round(pct(ms, 50), 3), "p95_ms": round(pct(ms, 95), 3),
                         "views_built": len(groups), "engine": engine})
        if split == "p10":
            fps.append({"backend": "fts5_shared (owner column)", "units": len(us), "storage": "memory",
                        "total_bytes": shared.footprint()["total_bytes"], "engine": engine})
            fps.append({"backend": "fts5 per view (one view at a time)", "units": len(us), "storage": "memory",
                        "total_bytes": per_view.footprint()["total_bytes"], "largest_view_bytes": largest,
                        "engine": engine})
        shared.close()
        per_view.close()
    return rows, fps
