"""The backend study (Section 5.4, SPEC 7): index backends under views of different selectivity.

Corpus: the chunks of the sampled histories, each history one agent of one org
("bench"); the queries are the histories' questions, each asked by the agent that
holds its history. Views are cases, not code paths (as in VectorDBBench):

    unfiltered  no predicate at all (not even the org): where the search effort matters
    one         owner = me                          s = 1/N
    public10    owner = me OR visibility = public,  10% of agents public
    public50    the same with 50% of agents public
    all         the org predicate only

Configurations are data (conf/stage/backends.yaml `stage.configs`): a backend, its
build parameters and the query-time settings. Configurations with the same backend
and build share one built index. Visibility is data in the index: each index is built
with the 10% split (unfiltered, one, public10, all) and then, for public50, gets the 50%
split's visibility changed in place where that leaves the graph alone (exact, vector sets,
pgvector with HOT updates); Redis, whose HSET re-inserts the vector, is built again. The
ground truth of each case uses that case's split. Each approximate index is built `builds` times, its units inserted in
an order shuffled by a recorded seed (the engines' own level draws are not seedable);
recall is reported per build and as mean and range over builds. Ground truth is
exact search under the same view.

Per (configuration, case): recall@10 against exact, short result lists (< 10),
client-observed latency p50/p95 of the index call (query vectors precomputed) beside
the server's own time (pgvector: EXPLAIN ANALYZE execution time per query; Redis:
FT.SEARCH microseconds from INFO commandstats), the plan pgvector chose and the
policy Redis executed (FT.PROFILE) per query, and Proposition 2: the survivors of a
post-filter (pgvector, iterative scan off: what its ef_search = K' candidates kept before
truncation to 10) beside the local prediction (how many of the exact K' nearest neighbours,
unfiltered, the view admits) and the global one, K'*s (survivors.csv). Plus: footprint after all of a backend's indexes exist,
the write-path delta on each backend's own loaded index with its parts, fan-out over
1..N per-agent stores (lexical: the runtime's session stores; dense: one HNSW index
per agent) against one shared index (FTS5 with owner IN; Redis with a TAG list),
the lexical side (one FTS5 index with an owner column against exact per-view BM25,
built one view at a time so memory stays bounded), and corpus diagnostics (nearest-
neighbour cosine, distinct queries, unfiltered HNSW recall) checked against a
realistic range before the figures count. The range is the stage's own encoder's: calibrated on
real chitchat text with that encoder (harness.memory.calibrate.for_encoder: recorded in the stage
config for its id, cached by id, or calibrated at the start of the stage), because cosines are a
property of the vector space.

Everything goes into one stage folder, runs/<stage>/<label>/: stage.json (through
the record schema), the CSVs (every row names its engine and version), diagnostics.json (with the
thresholds and the encoder id they were calibrated with), calibration.json (where the thresholds
came from and the calibration's own measurement).

    python -m harness.memory.study --out runs/backends/x [--data FILE] [--histories 12] [--builds 3]
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import random
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

import numpy as np

from harness.data.longmemeval import Question, iter_questions, sha256_file
from harness.memory.bench import pct
from harness.memory.units import Unit, units_of_sessions
from harness.memory.views import View

REPO = Path(__file__).resolve().parents[2]
STAGE_CONF = REPO / "conf" / "stage" / "backends.yaml"
ORG = "bench"
K = 10
K_PRIME = 40  # pgvector's default ef_search: the candidates a post-filter sees
CASES = ("unfiltered", "one", "public10", "public50", "all")
SPLIT_OF = {"unfiltered": "p10", "one": "p10", "public10": "p10", "all": "p10", "public50": "p50"}
PUBLIC_SHARE = {"p10": 0.1, "p50": 0.5}
APPROXIMATE = ("redis_qe", "vectorset", "pgvector")


@dataclass(frozen=True)
class Config:
    """One configuration: a backend, how it is built, the query-time settings, the cases it runs."""

    id: str
    backend: str
    build: dict = field(default_factory=dict)
    query: dict = field(default_factory=dict)
    cases: tuple[str, ...] = CASES

    @property
    def family(self) -> str:
        """Configurations of one family share a built index."""
        return self.backend + ("" if not self.build else ":" + json.dumps(self.build, sort_keys=True))


def parse_configs(items) -> list[Config]:
    out, seen = [], set()
    for it in items:
        it = dict(it)
        cases = tuple(it.get("cases") or CASES)
        bad = [c for c in cases if c not in CASES]
        if bad or it["id"] in seen:
            raise ValueError(f"configuration {it['id']!r}: unknown cases {bad}" if bad else f"duplicate id {it['id']!r}")
        seen.add(it["id"])
        out.append(Config(it["id"], it["backend"], dict(it.get("build") or {}), dict(it.get("query") or {}), cases))
    return out


def default_stage() -> dict:
    """The stage section of conf/stage/backends.yaml (the command line uses the same cases)."""
    import yaml

    return yaml.safe_load(STAGE_CONF.read_text())["stage"]


# -------------------------------------------------------------------------------- corpus


def load_histories(path: Path, histories: int | None, qids: Sequence[str] | None = None) -> list[Question]:
    if qids:
        want = list(qids)
        got = {q.qid: q for q in iter_questions(path) if q.qid in set(want)}
        missing = [q for q in want if q not in got]
        if missing:
            raise SystemExit(f"{len(missing)} question ids not in {path}: {missing[:3]}")
        qs = [got[q] for q in want]
    else:
        qs = list(itertools.islice(iter_questions(path), histories))
    if histories and len(qs) > histories:
        qs = qs[:histories]
    return qs


def agent_of(i: int) -> str:
    return f"h{i:03d}"


def build_units(qs: list[Question], public: set[str]) -> list[Unit]:
    units = []
    for i, q in enumerate(qs):
        a = agent_of(i)
        units += units_of_sessions(q.sessions, ORG, lambda sid, a=a: a,
                                   lambda agent: "public" if agent in public else "private")
    return units


def public_agents(n: int, share: float, seed: int) -> set[str]:
    agents = [agent_of(i) for i in range(n)]
    rng = random.Random(repr((seed, "public", share)))
    return set(rng.sample(agents, max(1, round(share * n))))


def view_for(case: str, agent: str) -> View | None:
    if case == "unfiltered":
        return None
    if case == "one":
        return View(ORG, agent, "own")
    if case == "all":
        return View(ORG, None, "all")
    return View(ORG, agent, "shared")


def build_seed(seed: int, build: int) -> int:
    """The seed of one build's insertion order (recorded in stage.json)."""
    return random.Random(repr(("build", seed, build))).getrandbits(31)


# -------------------------------------------------------------------------------- provenance


def engine_versions() -> dict:
    """Versions read from the running servers (not from client libraries), SQLite and the Python side."""
    import sqlite3

    import psycopg
    import redis

    from harness import services
    from harness.records.provenance import versions

    s = services.settings()
    out: dict = {}
    r = redis.Redis.from_url(s.redis_url)
    try:
        out["redis_server"] = r.info("server")["redis_version"]
        mods = {m[b"name"].decode(): int(m[b"ver"]) for m in r.execute_command("MODULE", "LIST")}
        v = mods.get("search")
        out["redisearch"] = f"{v // 10000}.{v // 100 % 100}.{v % 100}" if v else None
        vs = mods.get("vectorset")
        # vector sets ship inside Redis 8 and report the server's version number
        out["vectorset"] = (f"{vs // 10000}.{vs // 100 % 100}.{vs % 100}" if vs else None) if "vectorset" in mods else None
    finally:
        r.close()
    with psycopg.connect(s.pg_dsn) as c:
        out["postgresql"] = c.execute("SHOW server_version").fetchone()[0]
        row = c.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
        out["pgvector"] = row[0] if row else None
    out["sqlite"] = sqlite3.sqlite_version
    out.update({f"py:{k}": v for k, v in versions().items()})
    return out


def engine_label(backend: str, v: dict) -> str:
    return {"exact": f"numpy {v.get('py:numpy')}",
            "redis_qe": f"Redis {v.get('redis_server')} + RediSearch {v.get('redisearch')}",
            "vectorset": f"Redis {v.get('redis_server')} vector sets {v.get('vectorset')}",
            "pgvector": f"PostgreSQL {v.get('postgresql')} + pgvector {v.get('pgvector')}",
            "fts5": f"SQLite {v.get('sqlite')} FTS5"}.get(backend, backend)


# -------------------------------------------------------------------------------- plan and time


IN_PLACE = ("exact", "vectorset", "pgvector")  # backends whose visibility changes in place (set_visibility)


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
    per = {f: 1 if b == "exact" else builds for f, b in fams.items()}
    p50 = {f: any("public50" in c.cases for c in cfgs if c.family == f) for f in fams}
    # the 50% split: the same graph with visibility changed in place, or (Redis: HSET re-indexes the
    # document and re-inserts its vector) a second build
    n_builds = {f: per[f] * (2 if p50[f] and b not in IN_PLACE else 1) for f, b in fams.items()}
    n_updates = {f: per[f] if p50[f] and b in IN_PLACE else 0 for f, b in fams.items()}
    flipped = 0.5 * chunks  # agents public in exactly one of the two independently drawn splits
    build_s = sum(n_builds[f] * chunks * float(bms.get(b, 1.0)) + n_updates[f] * flipped * float(ums.get(b, 0.1))
                  for f, b in fams.items()) / 1000
    nq = sum(len(c.cases) * (1 if c.backend == "exact" else builds) for c in cfgs) * n

    def asked(c):  # the measured search, its EXPLAIN ANALYZE / FT.PROFILE, the post-filter survivors statement
        return 1 + (c.backend in ("pgvector", "redis_qe")) + (c.backend == "pgvector"
                                                               and c.query.get("iterative_scan", "off") == "off")
    query_s = sum(len(c.cases) * (1 if c.backend == "exact" else builds) * n * float(qms.get(c.backend, 3.0)) * asked(c)
                  for c in cfgs) / 1000
    reference_s = 7 * n * float(qms.get("exact", 20.0)) / 1000  # unfiltered K' per split + truth per case
    # lexical: per-view FTS5 indexes one at a time; a 10% view holds ~0.1, a 50% view ~0.5 of the corpus
    lexical_s = (chunks * (5 + 0.35 * n) * float(rates.get("lexical_us_per_unit", 47)) / 1e6
                 if stage.get("lexical", True) else 0.0)
    steps = fanout_steps(n)
    fanout_s = (chunks * (float(bms.get("redis_qe", 0.7)) + n * float(rates.get("fanout_filter_us_per_chunk", 8)) / 1000) / 1000
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


# -------------------------------------------------------------------------------- measuring


def make_index(cfg: Config, name: str):
    from harness.memory.backends.base import make_backend

    params = dict(cfg.build)
    if cfg.backend == "redis_qe":
        params.update(index=name, drop_existing=True, drop_on_close=True)
    elif cfg.backend == "vectorset":
        params.update(prefix=name.replace("_", ":"), drop_existing=True, drop_on_close=True)
    elif cfg.backend == "pgvector":
        # heap pages half full: the 50% split's visibility change is then a HOT update that leaves the
        # HNSW graph alone (on full pages every changed row is re-inserted into the graph)
        params.update(table=name.lower(), drop_existing=True, drop_on_close=True)
        params.setdefault("fillfactor", 50)
    return make_backend(cfg.backend, **params)


def apply_query(backend, cfg: Config, defaults: dict) -> None:
    for attr, val in {**defaults, **cfg.query}.items():
        setattr(backend, attr, val)
    if cfg.backend == "pgvector":
        with backend._conn() as c, c.transaction():
            backend._ensure_indexes(c)
            c.execute(f"ANALYZE {backend.table}")


def query_defaults(backend) -> dict:
    """The settings a configuration may change, as the backend was built (restored before each configuration)."""
    keys = {"redis_qe": ("ef_runtime", "hybrid_policy", "batch_size"), "vectorset": ("ef", "filter_ef"),
            "pgvector": ("ef_search", "iterative_scan", "max_scan_tuples", "owner_btree", "overfetch")}
    return {k: getattr(backend, k) for k in keys.get(backend.name, ())}


def plan_summary(plan: str) -> str:
    for line in plan.splitlines():
        if "Scan" in line:
            return line.strip().lstrip("->").strip().split("  (cost")[0]
    return plan.splitlines()[0] if plan else ""


def k_prime_of(cfg: Config) -> int:
    """K' of Proposition 2: the candidates the engine's graph search hands to the filter. pgvector: its
    ef_search; the other engines have no fixed candidate list, so the paper's K' = 40 is the reference."""
    return int(cfg.query.get("ef_search", K_PRIME)) if cfg.backend == "pgvector" else K_PRIME


def local_prediction(nearest: Sequence[str], view: View | None, units: dict, k_prime: int) -> int:
    """Proposition 2's local prediction: how many of the K' nearest neighbours of the query in the
    unfiltered index (uids in exact order) the view admits -- what a post-filter over an exact
    candidate list of K' would keep."""
    return sum(1 for uid in nearest[:k_prime] if view is None or view.admits(units[uid]))


def filter_mode(cfg: Config, view: View | None, plan: str | None) -> str:
    """How the engine applied the view to this query (only a post-filter has survivors to count)."""
    if view is None:
        return "no filter"
    if cfg.backend == "exact":
        return "pre-filter"
    if cfg.backend == "redis_qe":
        return {"ADHOC_BF": "pre-filter", "BATCHES": "batches"}.get(plan or "", plan or "?")
    if cfg.backend == "vectorset":
        return "in-search filter"
    if "hnsw" not in (plan or ""):
        return "pre-filter"
    return "post-filter" if cfg.query.get("iterative_scan", "off") == "off" else "iterative scan"


def measure_case(backend, cfg: Config, case: str, build: int, queries, truth, local) -> tuple[list[dict], dict]:
    """Every query of one case on one built index: per-query rows and the server-side figures.
    truth(qid, agent) -> the exact top K under the view; local(qid, agent, k') -> Proposition 2's local
    prediction (how many of the exact K' nearest neighbours, unfiltered, the view admits)."""
    from harness.memory.backends.base import Query

    for _, a, v in queries[:3]:  # warm-up
        backend.search(Query(vector=v), view_for(case, a), K)
    redis = cfg.backend == "redis_qe"
    before = backend.server_usec() if redis else None
    timed = []
    for qid, agent, vec in queries:
        view = view_for(case, agent)
        t = time.perf_counter()
        hits = backend.search(Query(vector=vec), view, K)
        timed.append((qid, agent, vec, view, hits, (time.perf_counter() - t) * 1000))
    server = {}
    if redis:
        after = backend.server_usec()
        calls = after[0] - before[0]
        server["server_mean_ms"] = round((after[1] - before[1]) / calls / 1000, 4) if calls else None
    kp = k_prime_of(cfg)
    if cfg.backend == "pgvector" and backend.ef_search != kp:
        raise RuntimeError(f"{cfg.id}: ef_search {backend.ef_search} on the index, K' {kp} in the configuration")
    rows = []
    for qid, agent, vec, view, hits, ms in timed:
        gt = truth(qid, agent)
        rec = len({h.uid for h in hits} & {h.uid for h in gt}) / len(gt) if gt else 1.0
        row = {"config": cfg.id, "case": case, "build": build, "qid": qid, "agent": agent, "results": len(hits),
               "recall": rec, "latency_ms": ms, "server_ms": None, "plan": None, "k_prime": kp,
               "local_pred": local(qid, agent, kp), "filter": None, "survivors": None, "candidates": None}
        if cfg.backend == "pgvector":
            row["server_ms"], text = backend.statement(Query(vector=vec), view, K)
            row["plan"] = plan_summary(text)
        elif redis:
            row["plan"] = backend.executed_policy(Query(vector=vec), view, K)
        row["filter"] = filter_mode(cfg, view, row["plan"])
        if row["filter"] == "post-filter":
            sv = backend.post_filter_survivors(Query(vector=vec), view, kp)
            if sv["survivors"] is None:  # LIMIT K' was planned without the HNSW scan: survivors not observable
                row["filter"] = "post-filter, K' planned otherwise"
            row["survivors"], row["candidates"] = sv["survivors"], sv["candidates"]
        rows.append(row)
    return rows, server


def survivors_row(cfg: Config, case: str, rows: list[dict], s: float, engine: str) -> dict:
    """Observed survivors of the filter against Proposition 2's local (K' nearest, exact) and global (K's)
    predictions, over queries x builds; engines that do not post-filter say how they filter instead."""
    modes = Counter(r["filter"] for r in rows)
    post = [r for r in rows if r["survivors"] is not None]
    kp = rows[0]["k_prime"]

    def mean(xs):
        return round(statistics.mean(xs), 3) if xs else None

    sv = mean([r["survivors"] for r in post])
    loc_post = mean([r["local_pred"] for r in post])
    return {"config": cfg.id, "backend": cfg.backend, "case": case, "selectivity": round(s, 5), "k_prime": kp,
            "filter": "; ".join(f"{k} x{v}" for k, v in modes.most_common()), "rows": len(rows),
            "post_filter_rows": len(post), "survivors": sv,
            "survivors_min": min((r["survivors"] for r in post), default=None),
            "survivors_max": max((r["survivors"] for r in post), default=None),
            "candidates": mean([r["candidates"] for r in post]),
            "local_pred": mean([r["local_pred"] for r in rows]), "local_pred_post": loc_post,
            "global_pred": round(kp * s, 3),
            "survivors_minus_local": mean([r["survivors"] - r["local_pred"] for r in post]),
            "survivors_over_local": round(sv / loc_post, 4) if sv is not None and loc_post else None,
            "local_over_global": round(statistics.mean(r["local_pred"] for r in rows) / (kp * s), 4) if s else None,
            "mean_results": mean([r["results"] for r in rows]), "engine": engine}


def summarise(cfg: Config, case: str, rows: list[dict], s: float, server: list[dict], engine: str) -> dict:
    per_build = {}
    for r in rows:
        per_build.setdefault(r["build"], []).append(r)
    rec = [statistics.mean(r["recall"] for r in b) for b in per_build.values()]
    short = [sum(1 for r in b if r["results"] < K) for b in per_build.values()]
    srv = [r["server_ms"] for r in rows if r["server_ms"] is not None]
    smean = [x["server_mean_ms"] for x in server if x.get("server_mean_ms") is not None]
    plans = Counter(r["plan"] for r in rows if r["plan"])
    return {"config": cfg.id, "backend": cfg.backend, "case": case, "selectivity": round(s, 5),
            "queries": len(rows) // max(1, len(per_build)), "builds": len(per_build),
            "recall_at_10": round(statistics.mean(rec), 4), "recall_min": round(min(rec), 4),
            "recall_max": round(max(rec), 4), "short_lists": round(statistics.mean(short), 2),
            "short_lists_max": max(short), "mean_results": round(statistics.mean(r["results"] for r in rows), 3),
            "p50_ms": round(pct([r["latency_ms"] for r in rows], 50), 3),
            "p95_ms": round(pct([r["latency_ms"] for r in rows], 95), 3),
            "server_p50_ms": round(pct(srv, 50), 4) if srv else (round(statistics.mean(smean), 4) if smean else None),
            "server_time": ("EXPLAIN ANALYZE execution, p50" if srv else
                            "INFO commandstats FT.SEARCH, mean" if smean else None),
            "plans": "; ".join(f"{k} x{v}" for k, v in plans.most_common()) or None,
            "k_prime": rows[0]["k_prime"], "global_pred": round(rows[0]["k_prime"] * s, 3),
            "local_pred": round(statistics.mean(r["local_pred"] for r in rows), 3),
            "engine": engine}


def render_survivors(rows) -> str:
    """Survivors of the filter (before truncation to k) beside Proposition 2's local and global predictions."""
    out = ["survivors of the filter before truncation to 10, against Proposition 2: local = how many of the K' "
           "exact nearest neighbours (unfiltered) the view admits, global = K's (means over queries x builds)",
           f"{'config':<30} {'case':<10} {'K_':>4} {'survivors':>11} {'local':>7} {'K_s':>8} {'surv-local':>10} "
           f"{'surv/local':>10} {'local/K_s':>9}  filter".replace("K_s", "K's").replace("K_", "K'")]

    def f(x, w, d=2):
        return f"{'-':>{w}}" if x is None or x == "" else f"{float(x):>{w}.{d}f}"

    for r in rows:
        post = r["survivors"] not in (None, "")
        mode = r["filter"].split(" x")[0] if r["filter"] else "?"
        sv = f(r["survivors"], 11) if post else f"{mode:>11}"
        out.append(f"{r['config']:<30} {r['case']:<10} {r['k_prime']:>4} {sv} {f(r['local_pred'], 7)} "
                   f"{f(r['global_pred'], 8)} {f(r['survivors_minus_local'], 10)} {f(r['survivors_over_local'], 10, 3)} "
                   f"{f(r['local_over_global'], 9, 3)}  {r['filter']}")
    return "\n".join(out)


def write_csv(path: Path, rows: list[dict]) -> None:
    if not rows:
        return
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        w.writeheader()
        w.writerows(rows)


def delta_on_index(backend, enc, agent: str, rounds: int, nonce: str) -> dict | None:
    """Commit -> searchable on the study's own loaded index: embed (raw forward), insert, until visible."""
    from harness.memory.backends.base import Query

    if rounds <= 0:
        return None
    parts = {"embed": [], "insert": [], "visible": [], "delta": []}
    uids = []
    view = View(ORG, agent, "own")
    for i in range(rounds):
        text = (f"Round {i} ({nonce}): I planted {i + 3} tomato seedlings along the south fence today, "
                f"and the ones from round {i - 1} are already flowering.")
        u = Unit(ORG, agent, "private", 2.0e9 + i, f"delta-{nonce}", i + 1, 0, text)
        t0 = time.perf_counter()
        vec = enc.forward([text], batch_size=1)
        t1 = time.perf_counter()
        backend.add([u], np.asarray(vec, dtype=np.float32))
        t2 = time.perf_counter()
        while True:
            if any(h.uid == u.uid for h in backend.search(Query(vector=vec[0]), view, K)):
                break
            if time.perf_counter() - t2 > 5:
                break
        t3 = time.perf_counter()
        uids.append(u.uid)
        for k, v in (("embed", t1 - t0), ("insert", t2 - t1), ("visible", t3 - t2), ("delta", t3 - t0)):
            parts[k].append(v * 1000)
    backend.delete(uids)
    return {"rounds": rounds, **{f"{k}_p50_ms": round(pct(v, 50), 3) for k, v in parts.items()},
            "delta_p95_ms": round(pct(parts["delta"], 95), 3)}


def nn_cosines(vecs: np.ndarray, pool: int, seed: int) -> np.ndarray:
    """Cosine of each chunk of a seeded random pool of `pool` chunks to its nearest other chunk in the pool.

    Within a fixed-size pool, not the whole corpus: the nearest neighbour of a chunk gets closer as
    the corpus grows, so only a fixed pool makes a 3,000-chunk calibration (harness.memory.calibrate)
    comparable with a 123,000-chunk stage."""
    x = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    rng = np.random.default_rng(seed)
    x = x[rng.choice(len(x), size=min(pool, len(x)), replace=False)]
    out = np.empty(len(x), dtype=np.float32)
    for i in range(0, len(x), 512):
        sims = x[i:i + 512] @ x.T
        sims[np.arange(len(sims)), np.arange(i, i + len(sims))] = -np.inf
        out[i:i + 512] = sims.max(axis=1)
    return out


def corpus_diagnostics(vecs: np.ndarray, query_texts: Sequence[str], pool: int, seed: int) -> dict:
    """The text-likeness measures of a corpus: nearest-neighbour cosine in a fixed pool, distinct queries."""
    nn = nn_cosines(vecs, pool, seed)
    return {"nn_pool": int(len(nn)), "nn_cosine_p10": round(float(np.percentile(nn, 10)), 4),
            "nn_cosine_median": round(float(np.median(nn)), 4), "nn_cosine_p90": round(float(np.percentile(nn, 90)), 4),
            "nn_cosine_above_095": round(float((nn > 0.95).mean()), 4),
            "distinct_queries": len(set(query_texts)), "queries": len(query_texts)}


THRESHOLD_KEYS = ("nn_cosine_median_max", "nn_cosine_above_095_max", "distinct_queries_min", "unfiltered_recall")


def stage_realism(stage: dict, enc) -> dict:
    """The realistic range this stage applies, for its own encoder: {"encoder_id", "source", "thresholds", ...}.

    `stage.realism` holds `calibration` (the parameters) and `recorded` (thresholds measured once and kept
    in the config, per encoder id); see harness.memory.calibrate.for_encoder. Thresholds written directly
    under `stage.realism` (the keys of THRESHOLD_KEYS) are applied as given, whatever the encoder."""
    real = dict(stage.get("realism") or {})
    fixed = {k: real[k] for k in THRESHOLD_KEYS if k in real}
    if fixed:
        return {"encoder_id": enc.id, "source": "stage config (fixed thresholds, applied to any encoder)",
                "thresholds": fixed, "params": None, "measurement": None, "cache": None}
    from harness.memory.calibrate import for_encoder

    return for_encoder(enc, real.get("calibration"), real.get("recorded") or ())


def realism_checks(d: dict, real: dict) -> dict:
    """Each measure against its threshold (conf/stage/backends.yaml `realism`, set by harness.memory.calibrate)."""
    checks = {}
    if "nn_cosine_median_max" in real:
        checks["nn_cosine_median"] = d["nn_cosine_median"] <= float(real["nn_cosine_median_max"])
    if "nn_cosine_above_095_max" in real:
        checks["nn_cosine_above_095"] = d["nn_cosine_above_095"] <= float(real["nn_cosine_above_095_max"])
    if "distinct_queries_min" in real:
        checks["distinct_queries"] = d["distinct_queries"] / max(1, d["queries"]) >= float(real["distinct_queries_min"])
    ur = real.get("unfiltered_recall")
    if ur:
        got = (d.get("unfiltered_recall") or {}).get(ur["config"])
        checks["unfiltered_recall"] = None if got is None else got >= float(ur["min"])
    return checks


def diagnostics(vecs, qs, summary, stage: dict, seed: int, realism: dict | None = None) -> dict:
    """The corpus diagnostics checked against `realism` (stage_realism's answer; default: thresholds
    written directly under stage.realism, for no encoder in particular)."""
    d = corpus_diagnostics(vecs, [q.question for q in qs], int(stage.get("nn_pool", 3000)), seed)
    d["unfiltered_recall"] = {r["config"]: r["recall_at_10"] for r in summary if r["case"] == "unfiltered"}
    if realism is None:
        real = stage.get("realism") or {}
        realism = {"encoder_id": None, "source": "stage config", "thresholds": {k: real[k] for k in THRESHOLD_KEYS
                                                                               if k in real}}
    real = realism["thresholds"]
    d["checks"] = realism_checks(d, real)
    d["realistic"] = all(v is True for v in d["checks"].values()) if d["checks"] else None
    d["thresholds"] = real
    d["thresholds_encoder"] = realism.get("encoder_id")  # the encoder the thresholds were calibrated with
    d["thresholds_source"] = realism.get("source")
    return d


# -------------------------------------------------------------------------------- the study


def run(data: Path, out: Path, histories: int | None = 12, qids: Sequence[str] | None = None,
        encoder_name: str = "minilm", seed: int = 0, stage: dict | None = None, cfg=None,
        fidelity: dict | None = None) -> dict:
    """Run the study into `out` (a stage folder). `stage` is the stage section (default: the stage config);
    `cfg` the resolved Hydra config when run as a stage (its hash guards the folder); `fidelity` its
    manifest (harness.run.fidelity), written into stage.json."""
    from omegaconf import OmegaConf

    from harness import services
    from harness.memory.backends.base import Query, make_backend
    from harness.memory.encoder import load_encoder
    from harness.records import RunDir
    from harness.records.provenance import code_revision
    from harness.records.schema import SCHEMA_VERSION

    stage = dict(stage or default_stage())
    cfgs = parse_configs(stage["configs"])
    if stage.get("only"):
        cfgs = [c for c in cfgs if c.id in stage["only"] or c.backend in stage["only"]]
    if not any(c.backend == "exact" for c in cfgs):
        raise ValueError("the study needs the exact configuration (its ground truth and reference)")
    builds = int(stage.get("builds", 3))
    out.mkdir(parents=True, exist_ok=True)
    wall: dict[str, float] = {}
    t_all = time.perf_counter()
    started = services.up()
    try:
        qs = load_histories(data, histories, qids)
        n = len(qs)
        pub = {b: public_agents(n, PUBLIC_SHARE[b], seed) for b in PUBLIC_SHARE}
        splits = {b: build_units(qs, pub[b]) for b in PUBLIC_SHARE}
        units = splits["p10"]
        vers = engine_versions()
        enc = load_encoder(encoder_name)
        p = plan(stage, n, len(units))
        if cfg is None:
            cfg = OmegaConf.create({"stage": {**stage, "kind": "backends"}, "data": str(data), "histories": n,
                                    "encoder": encoder_name, "seed": seed})
        info = {"schema_version": SCHEMA_VERSION, "kind": "backends", "stage": str(stage.get("name", "backends")),
                "label": str(stage.get("label", out.name)), "seed": seed,
                "data": {"path": str(data), "sha256": sha256_file(data), "histories": n, "chunks": len(units),
                         "qids": [q.qid for q in qs]},
                "plan": {**p, "build_seeds": [build_seed(seed, b) for b in range(builds)],
                         "public_agents": {b: sorted(v) for b, v in pub.items()}},
                "versions": {**{k: (None if v is None else str(v)) for k, v in vers.items()},
                             "encoder": enc.id},
                "code": code_revision(REPO), "model": None, "prereg": _prereg(), "encoder": enc.describe(),
                "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "fidelity": fidelity}
        RunDir(out).open(cfg, info)
        print(render_plan(p), flush=True)
        print(f"corpus: {n} histories = agents, {len(units)} chunks; encoder {enc.id}"
              + ("" if enc.describe()["study_encoder"] else " (NOT the study's encoder)"), flush=True)

        t = time.perf_counter()
        realism = stage_realism(stage, enc)  # this encoder's realistic range (may calibrate now, then cached)
        wall["calibration"] = time.perf_counter() - t
        (out / "calibration.json").write_text(json.dumps(realism, indent=2))
        print(f"realistic range for encoder {enc.id} ({realism['source']}): {realism['thresholds']}", flush=True)

        t = time.perf_counter()
        vecs = enc.embed([u.text for u in units], progress=True)
        wall["embed"] = time.perf_counter() - t
        queries = [(q.qid, agent_of(i), enc.embed_query(q.question)) for i, q in enumerate(qs)]
        q_ms = []
        enc.forward(["warm up the model"], batch_size=1)
        for q in qs[:min(n, 50)]:
            t = time.perf_counter()
            enc.forward([q.question], batch_size=1)
            q_ms.append((time.perf_counter() - t) * 1000)

        truth = {}
        for b, us in splits.items():
            truth[b] = make_backend("exact")
            truth[b].add(us, vecs)
        lookup = {b: {u.uid: u for u in us} for b, us in splits.items()}
        # Ground truth and Proposition 2's local prediction depend on (split, case, query) only: computed
        # once here, not again for every configuration and build (at paper size that was most of the time).
        t = time.perf_counter()
        kp_max = max(k_prime_of(c) for c in cfgs)
        nearest = {b: {qid: [h.uid for h in truth[b].search(Query(vector=v), None, kp_max)] for qid, _, v in queries}
                   for b in splits}
        vec_of = {qid: v for qid, _, v in queries}
        gt_cache: dict = {}

        def refs(split, case):
            def truth_of(qid, agent):
                key = (split, case, qid)
                if key not in gt_cache:
                    gt_cache[key] = truth[split].search(Query(vector=vec_of[qid]), view_for(case, agent), K)
                return gt_cache[key]

            def local_of(qid, agent, k_prime):
                return local_prediction(nearest[split][qid], view_for(case, agent), lookup[split], k_prime)
            return truth_of, local_of

        def sel(case, split):
            ex = truth[split]
            return statistics.mean(ex.count(view_for(case, a)) for _, a, _ in queries) / len(units)

        wall["reference"] = time.perf_counter() - t
        # the 50% split differs from the 10% split only in the visibility of some agents' units
        flips = {u.uid: u.visibility for u, u10 in zip(splits["p50"], splits["p10"]) if u.visibility != u10.visibility}
        summary, survivors, per_query, footprints, deltas, builds_log = [], [], [], [], [], []
        t_meas, t_build = time.perf_counter(), 0.0
        families = list(dict.fromkeys(c.family for c in cfgs))
        for fam in families:
            fam_cfgs = [c for c in cfgs if c.family == fam]
            first = fam_cfgs[0]
            n_builds = 1 if first.backend == "exact" else builds
            results: dict[tuple[str, str], tuple[list, list]] = {}
            for b in range(n_builds):
                order = list(range(len(units)))
                random.Random(build_seed(seed, b)).shuffle(order)
                backend = None
                for split in ("p10", "p50"):
                    cases_here = {c for c in CASES if SPLIT_OF[c] == split}
                    if not any(set(c.cases) & cases_here for c in fam_cfgs):
                        continue
                    us = [splits[split][i] for i in order]
                    t = time.perf_counter()
                    if backend is not None and hasattr(backend, "set_visibility"):
                        # visibility is data, not structure: change it in place, keep the graph
                        upd = backend.set_visibility(flips)
                        how = "visibility updated in place"
                        if "hot" in upd and upd["hot"] < upd["updated"]:
                            how += f" ({upd['updated'] - upd['hot']} non-HOT updates entered the HNSW index)"
                    else:
                        if backend is not None:
                            backend.close()
                        upd = {}
                        backend = make_index(first, f"study{seed}_{first.backend}_{families.index(fam)}")
                        mem0 = _server_memory(first.backend)
                        backend.add(us, vecs[order])
                        defaults = query_defaults(backend)  # as built: restored before each configuration
                        how = "built"
                    build_s = time.perf_counter() - t
                    t_build += build_s
                    builds_log.append({"family": fam, "build": b, "split": split, "how": how, "seconds": round(build_s, 2),
                                       **upd})
                    print(f"  {fam} ({split}, build {b}): {how}, {len(us)} units, {build_s:.1f} s", flush=True)
                    for c in fam_cfgs:
                        apply_query(backend, c, defaults)
                        for case in [k for k in c.cases if SPLIT_OF[k] == split]:
                            rows, server = measure_case(backend, c, case, b, queries, *refs(split, case))
                            acc = results.setdefault((c.id, case), ([], []))
                            acc[0].extend(rows)
                            acc[1].append(server)
                    if split == "p10" and b == 0:
                        footprints.append(_footprint(backend, first, fam, len(us), build_s, mem0, vers))
                        d = delta_on_index(backend, enc, agent_of(0), int(stage.get("delta_rounds", 30)),
                                           f"{seed}-{fam}-{time.time_ns()}") if encoder_name != "hash" else None
                        if d:
                            deltas.append({"backend": fam, "index_units": len(us), **d,
                                           "engine": engine_label(first.backend, vers), "encoder": enc.id})
                if backend is not None:
                    backend.close()
            for c in fam_cfgs:
                for case in c.cases:
                    if (c.id, case) in results:
                        rows, server = results[(c.id, case)]
                        per_query += rows
                        s_ = sel(case, SPLIT_OF[case])
                        summary.append(summarise(c, case, rows, s_, server, engine_label(c.backend, vers)))
                        survivors.append(survivors_row(c, case, rows, s_, engine_label(c.backend, vers)))
        wall["builds"] = t_build
        wall["queries"] = time.perf_counter() - t_meas - t_build

        lex_rows, fan = [], []
        if stage.get("lexical", True):
            t = time.perf_counter()
            lex_rows, fps = lexical_side(splits, qs, queries, pub, vers)
            footprints += fps
            wall["lexical"] = time.perf_counter() - t
        if stage.get("fanout", True):
            t = time.perf_counter()
            fan, fps = fanout_side(data, qs, units, vecs, queries, seed, vers)
            footprints += fps
            wall["fanout"] = time.perf_counter() - t
        order = {c.id: i for i, c in enumerate(cfgs)}
        summary.sort(key=lambda r: (order[r["config"]], CASES.index(r["case"])))
        survivors.sort(key=lambda r: (order[r["config"]], CASES.index(r["case"])))
        t = time.perf_counter()
        diag = diagnostics(vecs, qs, summary, stage, seed, realism)
        wall["diagnostics"] = time.perf_counter() - t
        wall["total"] = time.perf_counter() - t_all
        diag.update({"query_embedding_ms": {"p50": pct(q_ms, 50), "p95": pct(q_ms, 95), "n": len(q_ms)},
                     "wall_s": {k: round(v, 1) for k, v in wall.items()}, "encoder": enc.describe(),
                     "versions": info["versions"], "builds": builds_log})

        write_csv(out / "recall.csv", summary)
        write_csv(out / "survivors.csv", survivors)
        write_csv(out / "per_query.csv", [{**{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()},
                                           "engine": engine_label(r["config"] and _backend_of(cfgs, r["config"]), vers)}
                                          for r in per_query])
        write_csv(out / "footprint.csv", footprints)
        write_csv(out / "delta.csv", deltas)
        write_csv(out / "lexical.csv", lex_rows)
        write_csv(out / "fanout.csv", fan)
        (out / "diagnostics.json").write_text(json.dumps(diag, indent=2))
        print_report(summary, footprints, deltas, lex_rows, fan, diag, survivors)
        return {"summary": summary, "survivors": survivors, "footprint": footprints, "delta": deltas, "lexical": lex_rows, "fanout": fan,
                "diagnostics": diag, "per_query": per_query}
    finally:
        services.down(only=started)


def _backend_of(cfgs: list[Config], cid: str) -> str:
    return next(c.backend for c in cfgs if c.id == cid)


def _prereg() -> dict | None:
    p = REPO / "conf" / "prereg" / "hypotheses.yaml"
    return {"path": str(p.relative_to(REPO)), "sha256": sha256_file(p)} if p.exists() else None


def _server_memory(backend: str) -> int | None:
    if backend not in ("redis_qe", "vectorset"):
        return None
    import redis

    from harness import services

    r = redis.Redis.from_url(services.settings().redis_url)
    try:
        return int(r.info("memory")["used_memory"])
    finally:
        r.close()


def _footprint(backend, cfg: Config, fam: str, units: int, build_s: float, mem0: int | None, vers: dict) -> dict:
    """Footprint with every index of the family in place (pgvector: the owner b-tree too)."""
    if cfg.backend == "pgvector":
        backend.owner_btree = True
        with backend._conn() as c, c.transaction():
            backend._ensure_indexes(c)
    fp = {k: v for k, v in backend.footprint().items() if k != "units"}
    mem1 = _server_memory(cfg.backend)
    if mem0 is not None and mem1 is not None:
        fp["server_memory_growth_bytes"] = mem1 - mem0
    if cfg.backend == "pgvector":  # the heap is ~2x at fillfactor 50 (room for HOT updates); the HNSW index is not
        fp["fillfactor"] = backend.fillfactor or 100
    storage = {"exact": "memory", "redis_qe": "memory", "vectorset": "memory", "pgvector": "disk"}[cfg.backend]
    return {"backend": fam, "units": units, "build_s": round(build_s, 2), "storage": storage, **fp,
            "engine": engine_label(cfg.backend, vers)}


# -------------------------------------------------------------------------------- lexical side


def lexical_side(splits, qs, queries, pub, vers) -> tuple[list[dict], list[dict]]:
    """One FTS5 index with an owner column vs exact per-view BM25. The per-view indexes are built one
    at a time (agents whose views admit the same units share one) and dropped after their queries, so
    memory holds the units and one view, never every view of a case at once."""
    from harness.memory.backends.base import Query, make_backend

    rows, fps = [], []
    engine = engine_label("fts5", vers)
    for split, us in splits.items():
        cases = [c for c in CASES if SPLIT_OF[c] == split]
        shared, per_view = make_backend("fts5_shared"), make_backend("fts5")
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


# -------------------------------------------------------------------------------- fan-out


def fanout_steps(n: int) -> list[int]:
    """How many agents' stores the fan-out searches: the paper's 1, 10, 50 and all (Figure 7)."""
    return sorted({1, min(10, n), min(50, n), n})


def fanout_side(data: Path, qs, units, vecs, queries, seed: int, vers) -> tuple[list[dict], list[dict]]:
    """Searching 1..N per-agent stores one by one vs one shared index with the agents as a list,
    lexical (the runtime's session stores vs FTS5 owner IN) and dense (one HNSW index per agent
    vs one Redis index with a TAG list)."""
    from harness.memory.backends.base import Query, make_backend
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
    rq = make_backend("redis_qe", index=f"study{seed}_fan", drop_existing=True, drop_on_close=True)
    rq.add(units, vecs)
    per_agent = {a: rq.owner_index(a) for a in agents}
    for name in per_agent.values():
        rq.wait_indexed(name)
    sh = make_backend("fts5_shared")
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
                     "engine_lexical": engine_label("fts5", vers), "engine_dense": engine_label("redis_qe", vers)})
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


# -------------------------------------------------------------------------------- report


def print_report(summary, footprints, deltas, lex, fan, diag, survivors=()) -> None:
    print(f"\nrecall@10 against exact (mean over builds [min, max]), encoder {diag['encoder']['encoder_id']}")
    print(f"{'config':<30} {'case':<10} {'s':>7} {'recall':>7} {'range':>13} {'short':>6} {'p50 ms':>8} "
          f"{'server':>8}  plans")
    for r in summary:
        srv = "-" if r["server_p50_ms"] is None else f"{r['server_p50_ms']:.2f}"
        print(f"{r['config']:<30} {r['case']:<10} {r['selectivity']:>7.4f} {r['recall_at_10']:>7.3f} "
              f"[{r['recall_min']:.2f},{r['recall_max']:.2f}] {r['short_lists']:>6.1f} {r['p50_ms']:>8.2f} "
              f"{srv:>8}  {r['plans'] or ''}")
    if survivors:
        print("\n" + render_survivors(survivors))
    for title, rows in (("footprint (bytes, after every index of the backend exists)", footprints),
                        ("write-path delta on each backend's loaded index (ms)", deltas),
                        ("lexical: one FTS5 index with an owner column vs per-view BM25 (top-10 overlap)", lex),
                        ("fan-out: per-agent stores one by one vs one shared index with the agents as a list", fan)):
        if rows:
            print("\n" + title)
            for r in rows:
                print("  " + ", ".join(f"{k}={v}" for k, v in r.items()))
    print(f"\ncorpus diagnostics: nearest-neighbour cosine median {diag['nn_cosine_median']} (p10 "
          f"{diag['nn_cosine_p10']}, p90 {diag['nn_cosine_p90']}), {diag['nn_cosine_above_095']:.1%} above 0.95; "
          f"{diag['distinct_queries']} distinct of {diag['queries']} queries; unfiltered recall "
          + ", ".join(f"{k} {v:.3f}" for k, v in diag["unfiltered_recall"].items()))
    print(f"realistic range: {diag['realistic']} ({diag['checks']})"
          + ("" if diag["realistic"] else "  -> the analysis will not draw Figures 2 and 7 from this folder"))
    q = diag["query_embedding_ms"]
    print(f"query embedding (raw forward, CPU): p50 {q['p50']:.1f} ms, p95 {q['p95']:.1f} ms")
    print("wall time by part (s): " + ", ".join(f"{k} {v}" for k, v in diag["wall_s"].items()))


# -------------------------------------------------------------------------------- entry points


def run_study(cfg) -> dict | None:
    """The `backends` stage (`make run STAGE=backends`): the stage's sample as the corpus and queries.

    Writes runs/<stage>/<label>/ (stage.json + CSVs), which `make analyze` reads (Figures 2 and 7,
    H3a-H3c). `dry_run=true` prints the plan and the expected time and touches nothing.
    """
    from omegaconf import OmegaConf

    from harness.data import source
    from harness.data.samples import draw
    from harness.run.plan import scan

    stage = OmegaConf.to_container(cfg.stage, resolve=True)
    hist = stage.get("histories")
    spec = cfg.samples[str(stage["sample"])]
    n = int(spec.get("limit") or 6 * int(spec.get("per_type") or 30))  # six question types
    n = min(n, int(hist)) if hist else n
    from harness.data.source import cached_sha256
    from harness.run import fidelity

    def manifest(path: Path) -> list:
        data = {"path": str(path), "sha256": cached_sha256(path, Path(str(cfg.cache_dir))), "kind": cfg.data.get("kind")}
        rows = fidelity.backend_manifest(cfg, data)
        print("fidelity manifest (stage.json; the report opens with it):\n" + fidelity.render(rows), flush=True)
        return rows

    if cfg.get("dry_run"):
        print(render_plan(plan(stage, n, None)))
        known = Path(str(cfg.data.path))
        if known.is_file():  # a generated file is not written by a dry run
            fidelity.raise_refusals(cfg, manifest(known))
        return None
    path = source.resolve(cfg.data)
    rows = manifest(path)
    fidelity.raise_refusals(cfg, rows)
    qids = draw(scan(path), cfg.samples, int(cfg.seed), names=[str(stage["sample"])])[str(stage["sample"])]["ids"]
    out = Path(str(cfg.runs_dir)) / str(stage["name"]) / str(stage["label"])
    return run(path, out, int(hist) if hist else None, qids, str(cfg.encoder.name), int(cfg.seed), stage=stage, cfg=cfg,
               fidelity=fidelity.record(cfg, rows=rows))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.memory.study")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--data", type=Path, default=None, help="LongMemEval-format file (default: generated S)")
    ap.add_argument("--histories", default="12", help="how many histories (agents); 'all' for every one")
    ap.add_argument("--qids", type=Path, default=None, help="file with one question id per line (a sample)")
    ap.add_argument("--encoder", default="minilm", choices=["minilm", "bge", "hash"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--builds", type=int, default=None)
    ap.add_argument("--only", default=None, help="comma-separated config ids or backends")
    ap.add_argument("--no-fanout", action="store_true")
    ap.add_argument("--no-lexical", action="store_true")
    ap.add_argument("--delta-rounds", type=int, default=None)
    ap.add_argument("--dry-run", action="store_true", help="print the plan and the expected time only")
    args = ap.parse_args(argv)
    stage = default_stage()
    stage.update({k: v for k, v in {"builds": args.builds, "delta_rounds": args.delta_rounds,
                                    "only": args.only.split(",") if args.only else None}.items() if v is not None})
    stage["fanout"], stage["lexical"] = not args.no_fanout, not args.no_lexical
    hist = None if args.histories == "all" else int(args.histories)
    if args.dry_run:
        print(render_plan(plan(stage, hist or 180, None)))
        return 0
    if args.data is None:
        from harness.memory.bench import default_data

        args.data = default_data()
    qids = [x.strip() for x in args.qids.read_text().splitlines() if x.strip()] if args.qids else None
    run(args.data, args.out, hist, qids, args.encoder, args.seed, stage=stage)
    return 0


if __name__ == "__main__":
    sys.exit(main())
