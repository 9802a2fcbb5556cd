"""What the backend stage will do and how long it should take, from the rates in the stage config."""

from __future__ import annotations

from harness.memory.backends.base import backend_class

from .cases import FANOUT_DENSE, TRUTH, parse_configs
from .fanout import fanout_steps

# -------------------------------------------------------------------------------- plan and time


def plan(stage: dict, n_histories: int, n_chunks: int | None, encoder_cached: float = 0.0) -> dict:
    """What the stage will do and how long it should take, by part, from the rates in the stage config."""
    cfgs = parse_configs(stage["configs"])
    if stage.get("only"):
        cfgs = [c for c in cfgs if c.id in stage["only"] or c.backend in stage["only"]]
    builds = int(stage.get("builds", 3))
    rates = stage.get("rates") or {}
    n = n_histories
    chunks = n_chunks if n_chunks is not None else round(float(rates.get("chunks_per_history", 421)) * n)
    bms, qms, ums = rates.get("build_ms_per_chunk", {}), rates.get("query_ms", {}), rates.get("update_ms_per_chunk", {})
    fams = {c.family: c.backend for c in cfgs}
    cls = {b: backend_class(b) for b in fams.values()}
    per = {f: builds if cls[b].approximate else 1 for f, b in fams.items()}
    p50 = {f: any("public50" in c.cases for c in cfgs if c.family == f) for f in fams}
    # the 50% split: the same graph with visibility changed in place, or (Redis: HSET re-indexes the
    # document and re-inserts its vector) a second build
    n_builds = {f: per[f] * (2 if p50[f] and not cls[b].in_place_visibility else 1) for f, b in fams.items()}
    n_updates = {f: per[f] if p50[f] and cls[b].in_place_visibility else 0 for f, b in fams.items()}
    flipped = 0.5 * chunks  # agents public in exactly one of the two independently drawn splits
    build_s = sum(n_builds[f] * chunks * float(bms.get(b, 1.0)) + n_updates[f] * flipped * float(ums.get(b, 0.1))
                  for f, b in fams.items()) / 1000
    def n_of(c):
        return builds if cls[c.backend].approximate else 1

    nq = sum(len(c.cases) * n_of(c) for c in cfgs) * n

    def asked(c):  # the measured search and the backend's probes (EXPLAIN ANALYZE / FT.PROFILE, survivors)
        return 1 + cls[c.backend].probes_per_query(c.query)
    query_s = sum(len(c.cases) * n_of(c) * n * float(qms.get(c.backend, 3.0)) * asked(c)
                  for c in cfgs) / 1000
    reference_s = 7 * n * float(qms.get(TRUTH, 20.0)) / 1000  # unfiltered K' per split + truth per case
    # lexical: per-view FTS5 indexes one at a time; a 10% view holds ~0.1, a 50% view ~0.5 of the corpus
    lexical_s = (chunks * (5 + 0.35 * n) * float(rates.get("lexical_us_per_unit", 47)) / 1e6
                 if stage.get("lexical", True) else 0.0)
    steps = fanout_steps(n)
    fanout_s = (chunks * (float(bms.get(FANOUT_DENSE, 0.7)) + n * float(rates.get("fanout_filter_us_per_chunk", 8)) / 1000) / 1000
                + min(30, n) * sum(steps) * float(rates.get("fanout_store_ms", 4)) / 1000) if stage.get("fanout", True) else 0.0
    stores_s = chunks * float(rates.get("stores_ms_per_chunk", 0.9)) / 1000 if stage.get("fanout", True) else 0.0
    embed_s = chunks * (1 - encoder_cached) / float(rates.get("embed_chunks_per_s", 24))
    warm = build_s + query_s + reference_s + lexical_s + fanout_s
    return {"histories": n, "chunks": chunks, "builds": builds,
            "configs": [{"id": c.id, "backend": c.backend, "build": c.build, "query": c.query, "cases": list(c.cases)}
                        for c in cfgs],
            "families": {f: n_builds[f] for f in fams}, "in_place_updates": {f: n_updates[f] for f in fams},
            "queries": nq,
            "expected_s": {"embed_cold": round(embed_s), "runtime_stores_cold": round(stores_s), "build": round(build_s),
                           "query": round(query_s), "reference": round(reference_s), "lexical": round(lexical_s),
                           "fanout": round(fanout_s), "total_warm_cache": round(warm),
                           "total_cold_cache": round(warm + embed_s + stores_s)}}


def render_plan(p: dict) -> str:
    lines = [f"backends stage: {p['histories']} histories = agents, ~{p['chunks']:,} chunks, {p['builds']} builds "
             f"per approximate index, {len(p['configs'])} configurations, {p['queries']:,} measured queries"]
    for c in p["configs"]:
        lines.append(f"  {c['id']:<30} {c['backend']:<10} build {c['build'] or '{}'} query {c['query'] or '{}'} "
                     f"cases {','.join(c['cases'])}")
    lines.append("  index builds: " + ", ".join(f"{f} x{n}" + (f" (+{p['in_place_updates'][f]} in-place visibility "
                                                                "changes)" if p["in_place_updates"].get(f) else "")
                                              for f, n in p["families"].items()))
    e = p["expected_s"]
    lines.append(f"expected time: builds {e['build'] / 60:.1f} min, queries {e['query'] / 60:.1f} min, ground truth "
                 f"{e['reference'] / 60:.1f} min, lexical side {e['lexical'] / 60:.1f} min, fan-out {e['fanout'] / 60:.1f} "
                 f"min: {e['total_warm_cache'] / 60:.0f} min with a warm cache; a cold cache adds embedding "
                 f"{e['embed_cold'] / 60:.0f} min and the runtime stores {e['runtime_stores_cold'] / 60:.0f} min: "
                 f"{e['total_cold_cache'] / 60:.0f} min cold")
    return "\n".join(lines)
