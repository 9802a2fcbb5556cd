"""The backend study (Section 5.4, SPEC 7): index backends under views of different selectivity.

Corpus: the chunks of the sampled histories, each history one agent of one org
("bench"); the queries are the histories' questions, each asked by the agent that
holds its history. Views are cases, not code paths (as in VectorDBBench):

    one       owner = me                          s = 1/N
    public10  owner = me OR visibility = public,  10% of agents public
    public50  the same with 50% of agents public
    all       no predicate but the org

Visibility is data in the index, so the study builds every backend twice: once
with 10% of agents public (serving one, public10 and all) and once with 50%
(serving public50). Ground truth is exact search under the same view.

Reported per (configuration, case): recall@10 against exact, short result lists
(< 10), mean results, median/p95 latency of the index call (query vectors are
precomputed; query embedding is timed apart), and Proposition 2's global
prediction K'*s beside the local one (per query, the in-view units among the
exact unfiltered top-K', capped at k). Plus: footprint per backend, pgvector's
plan per query for the one-agent view, fan-out over 1..N per-agent runtime
stores against one shared index with the view as a list of agents (Redis TAG
list, FTS5 owner IN), the write-path delta, and the lexical side: one shared
FTS5 index with an owner column against exact per-view BM25 (Proposition 1).

    python -m harness.memory.study --out runs/backends [--data FILE] [--histories 12] [--encoder minilm]
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
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from harness.data.longmemeval import Question, iter_questions, sha256_file
from harness.memory.units import Unit, units_of_sessions
from harness.memory.views import View
from harness.memory.bench import pct

ORG = "bench"
K = 10
K_PRIME = 40  # pgvector's default ef_search: the candidates a post-filter sees
CASES = ("one", "public10", "public50", "all")
PUBLIC_SHARE = {"public10": 0.1, "public50": 0.5}


@dataclass(frozen=True)
class Config:
    """One backend configuration: how to build it and which query-time settings to apply."""

    id: str
    family: str  # build key: configurations of one family share a built index
    backend: str
    build: dict
    query: dict  # attributes set on the backend before its queries


def configs(prefix: str) -> list[Config]:
    r = {"index": f"{prefix}_rqe", "drop_existing": True}
    v8 = {"prefix": f"{prefix}:vq8", "quant": "Q8", "drop_existing": True}
    v32 = {"prefix": f"{prefix}:vfp32", "quant": "NOQUANT", "drop_existing": True}
    pg = {"table": f"{prefix}_pg", "drop_existing": True, "ef_search": 40}
    return [
        Config("exact", "exact", "exact", {}, {}),
        Config("redis_qe_ef10", "redis_qe", "redis_qe", r, {"ef_runtime": 10}),
        Config("redis_qe_ef100", "redis_qe", "redis_qe", r, {"ef_runtime": 100}),
        Config("vectorset_q8", "vectorset_q8", "vectorset", v8, {}),
        Config("vectorset_fp32", "vectorset_fp32", "vectorset", v32, {}),
        Config("pgvector_off", "pgvector", "pgvector", pg, {"iterative_scan": "off", "owner_btree": False}),
        Config("pgvector_relaxed", "pgvector", "pgvector", pg, {"iterative_scan": "relaxed_order", "owner_btree": False}),
        Config("pgvector_strict", "pgvector", "pgvector", pg, {"iterative_scan": "strict_order", "owner_btree": False}),
        Config("pgvector_btree", "pgvector", "pgvector", pg, {"iterative_scan": "off", "owner_btree": True}),
    ]


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


def view_for(case: str, agent: str) -> View:
    if case == "one":
        return View(ORG, agent, "own")
    if case == "all":
        return View(ORG, None, "all")
    return View(ORG, agent, "shared")


# -------------------------------------------------------------------------------- measuring


def measure(search: Callable[[View, np.ndarray], list], truth: Callable[[View, np.ndarray], list],
            queries: list[tuple[str, str, np.ndarray]], case: str, admits_top: Callable) -> list[dict]:
    rows = []
    for w in queries[:3]:  # warm-up
        search(view_for(case, w[1]), w[2])
    for qid, agent, vec in queries:
        view = view_for(case, agent)
        t = time.perf_counter()
        hits = search(view, vec)
        ms = (time.perf_counter() - t) * 1000
        gt = truth(view, vec)
        rec = len({h.uid for h in hits} & {h.uid for h in gt}) / len(gt) if gt else 1.0
        rows.append({"qid": qid, "agent": agent, "case": case, "results": len(hits), "recall": rec,
                     "latency_ms": ms, "local_pred": admits_top(view, vec)})
    return rows


def summarise(cfg_id: str, case: str, rows: list[dict], s: float) -> dict:
    return {"config": cfg_id, "case": case, "selectivity": round(s, 5), "queries": len(rows),
            "recall_at_10": round(statistics.mean(r["recall"] for r in rows), 4),
            "short_lists": sum(1 for r in rows if r["results"] < K),
            "mean_results": round(statistics.mean(r["results"] for r in rows), 3),
            "p50_ms": round(pct([r["latency_ms"] for r in rows], 50), 3),
            "p95_ms": round(pct([r["latency_ms"] for r in rows], 95), 3),
            "global_pred": round(K_PRIME * s, 3),
            "local_pred": round(statistics.mean(r["local_pred"] for r in rows), 3)}


def plan_summary(plan: str) -> str:
    for line in plan.splitlines():
        if "Scan" in line:
            return line.strip().lstrip("->").strip().split("  (cost")[0]
    return plan.splitlines()[0] if plan else ""


def write_csv(path: Path, rows: list[dict]) -> None:
    if not rows:
        return
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        w.writeheader()
        w.writerows(rows)


def versions() -> dict:
    from importlib.metadata import version

    from harness import services

    out = {}
    try:
        st = services.status()
        out.update(redis=st["redis"].get("redis"), redisearch=st["redis"].get("search"),
                   postgres=st["postgres"].get("postgres"), pgvector=st["postgres"].get("pgvector"))
    except Exception as exc:  # noqa: BLE001 - recorded, the study still runs what it can
        out["services_error"] = str(exc)
    for pkg in ("hermes-agent", "sentence-transformers", "torch", "redis", "psycopg"):
        try:
            out[pkg] = version(pkg)
        except Exception:  # noqa: BLE001
            out[pkg] = None
    import sqlite3

    out["sqlite"] = sqlite3.sqlite_version
    return out


# -------------------------------------------------------------------------------- the study


def run(data: Path, out: Path, histories: int | None = 12, qids: Sequence[str] | None = None,
        encoder_name: str = "minilm", seed: int = 0, only: Sequence[str] | None = None,
        fanout: bool = True, delta_rounds: int = 30, lexical: bool = True) -> dict:
    from tqdm import tqdm

    from harness import services
    from harness.memory.backends.base import Query, make_backend
    from harness.memory.encoder import load_encoder

    out.mkdir(parents=True, exist_ok=True)
    started = services.up()
    try:
        qs = load_histories(data, histories, qids)
        n = len(qs)
        enc = load_encoder(encoder_name)
        pub = {c: public_agents(n, PUBLIC_SHARE[c], seed) for c in PUBLIC_SHARE}
        builds = {"p10": build_units(qs, pub["public10"]), "p50": build_units(qs, pub["public50"])}
        units = builds["p10"]
        print(f"corpus: {n} histories = agents, {len(units)} chunks; encoder {enc.id}"
              + ("" if enc.describe()["study_encoder"] else " (NOT the study's encoder)"), flush=True)
        t0 = time.perf_counter()
        vecs = enc.embed([u.text for u in units], progress=True)
        embed_s = time.perf_counter() - t0
        # query vectors: through the cache (what the index sees); the raw forward timed apart
        queries = [(q.qid, agent_of(i), enc.embed_query(q.question)) for i, q in enumerate(qs)]
        q_ms = []
        enc.forward(["warm up the model"], batch_size=1)  # the first call loads the model: not a query cost
        for q in qs[:min(n, 50)]:
            t = time.perf_counter()
            enc.forward([q.question], batch_size=1)
            q_ms.append((time.perf_counter() - t) * 1000)

        truth = {b: make_backend("exact") for b in builds}
        for b, us in builds.items():
            truth[b].add(us, vecs)
        by_uid = {u.uid: u for u in units}
        by_uid50 = {u.uid: u for u in builds["p50"]}
        total = len(units)

        def admits_top(build):
            ex, lookup = truth[build], (by_uid if build == "p10" else by_uid50)

            def f(view, vec):
                top = ex.search(Query(vector=vec), None, K_PRIME)
                return min(K, sum(view.admits(lookup[h.uid]) for h in top))
            return f

        def sel(case, build):
            ex = truth[build]
            return statistics.mean(ex.count(view_for(case, a)) for _, a, _ in queries) / total

        case_build = {"one": "p10", "public10": "p10", "all": "p10", "public50": "p50"}
        cfgs = [c for c in configs(f"study{seed}") if not only or c.id in only or c.family in only]
        summary, per_query, plans, footprints = [], [], [], []
        families = list(dict.fromkeys(c.family for c in cfgs))
        bar = tqdm(total=len(cfgs) * len(CASES), desc="backends x cases", unit="case")
        for fam in families:
            fam_cfgs = [c for c in cfgs if c.family == fam]
            for build in ("p10", "p50"):
                cases = [c for c in CASES if case_build[c] == build]
                first = fam_cfgs[0]
                backend = make_backend(first.backend, **first.build)
                t = time.perf_counter()
                backend.add(builds[build], vecs)
                build_s = time.perf_counter() - t
                if build == "p10":
                    footprints.append({"backend": fam, "units": len(units), "build_s": round(build_s, 2),
                                       **{k: v for k, v in backend.footprint().items() if k != "units"}})
                for cfg in fam_cfgs:
                    for attr, val in cfg.query.items():
                        setattr(backend, attr, val)
                    if cfg.backend == "pgvector":
                        with backend._conn() as c, c.transaction():
                            backend._ensure_indexes(c)
                            c.execute(f"ANALYZE {backend.table}")
                    for case in cases:
                        def search(view, vec, b=backend):
                            return b.search(Query(vector=vec), view, K)

                        def gt(view, vec, ex=truth[build]):
                            return ex.search(Query(vector=vec), view, K)

                        rows = measure(search, gt, queries, case, admits_top(build))
                        for r in rows:
                            r["config"] = cfg.id
                        per_query += rows
                        summary.append(summarise(cfg.id, case, rows, sel(case, build)))
                        if cfg.backend == "pgvector" and case == "one":
                            for qid, agent, vec in queries:
                                plans.append({"config": cfg.id, "qid": qid, "agent": agent, "plan": plan_summary(
                                    backend.explain(Query(vector=vec), view_for("one", agent), K))})
                        bar.update(1)
                if hasattr(backend, "drop"):
                    backend.drop()
                backend.close()
        bar.close()

        lex_rows, fan = [], []
        if lexical:
            lex_rows, fps = lexical_side(units, builds["p50"], qs, queries)
            footprints += fps
        if fanout:
            fan, fps = fanout_side(data, qs, units, vecs, queries, seed)
            footprints += fps
        order = {c.id: i for i, c in enumerate(cfgs)}
        summary.sort(key=lambda r: (order[r["config"]], CASES.index(r["case"])))
        from harness.memory.bench import bench_delta

        # the hash encoder is no model: a delta with it would not measure embedding
        delta = bench_delta(encoder_name, delta_rounds, "redis_qe") if delta_rounds and encoder_name != "hash" else None

        write_csv(out / "recall.csv", summary)
        write_csv(out / "per_query.csv", [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}
                                          for r in per_query])
        write_csv(out / "pgvector_plans.csv", plans)
        write_csv(out / "footprint.csv", footprints)
        write_csv(out / "lexical.csv", lex_rows)
        write_csv(out / "fanout.csv", fan)
        meta = {"data": str(data), "data_sha256": sha256_file(data), "histories": n, "chunks": len(units),
                "qids": [q.qid for q in qs], "seed": seed, "k": K, "k_prime": K_PRIME,
                "public_agents": {c: sorted(v) for c, v in pub.items()},
                "encoder": enc.describe(), "embed_s": round(embed_s, 2),
                "query_embedding_ms": {"p50": pct(q_ms, 50), "p95": pct(q_ms, 95), "n": len(q_ms)},
                "delta": delta, "versions": versions()}
        (out / "meta.json").write_text(json.dumps(meta, indent=2))
        print_report(summary, footprints, plans, lex_rows, fan, meta)
        return {"summary": summary, "footprint": footprints, "plans": plans, "lexical": lex_rows,
                "fanout": fan, "meta": meta}
    finally:
        services.down(only=started)


def lexical_side(units10, units50, qs, queries) -> tuple[list[dict], list[dict]]:
    """One FTS5 index with an owner column vs exact per-view BM25 (the per-view indexes)."""
    from harness.memory.backends.base import Query, make_backend

    rows, fps = [], []
    for build, us, cases in (("p10", units10, ("one", "public10", "all")), ("p50", units50, ("public50",))):
        shared, per_view = make_backend("fts5_shared"), make_backend("fts5")
        shared.add(us)
        per_view.add(us)
        for case in cases:
            rec, short, ms = [], 0, []
            for (qid, agent, _), q in zip(queries, qs):
                view = view_for(case, agent)
                query = Query(text=q.question)
                t = time.perf_counter()
                got = shared.search(query, view, K)
                ms.append((time.perf_counter() - t) * 1000)
                gt = per_view.search(query, view, K)
                short += len(got) < K
                rec.append(len({h.uid for h in got} & {h.uid for h in gt}) / len(gt) if gt else 1.0)
            rows.append({"config": "fts5_shared vs per-view BM25", "case": case, "queries": len(rec),
                         "overlap_at_10": round(statistics.mean(rec), 4), "short_lists": short,
                         "p50_ms": round(pct(ms, 50), 3), "p95_ms": round(pct(ms, 95), 3)})
        if build == "p10":
            fps.append({"backend": "fts5_shared (owner column)", "units": len(us),
                        "total_bytes": shared.footprint()["total_bytes"]})
            fv = per_view.footprint()
            fps.append({"backend": f"fts5 per view ({fv['views']} views built)", "units": len(us),
                        "total_bytes": fv["total_bytes"], "view_index_bytes": fv["view_index_bytes"]})
        shared.close()
        per_view.close()
    return rows, fps


def fanout_side(data: Path, qs, units, vecs, queries, seed: int) -> tuple[list[dict], list[dict]]:
    """Searching 1..N per-agent runtime stores one by one vs one shared index with the agents as a list."""
    from harness.memory.backends.base import Query, make_backend
    from harness.memory.backends.fts5 import fts_query

    n = len(qs)
    steps = sorted({1, max(1, round(0.1 * n)), max(1, round(0.5 * n)), n})
    rows = []
    stores = None
    try:
        from harness.runtime.store import build_store, open_session_db

        sha = sha256_file(data)
        stores = [build_store(q, sha, agent=agent_of(i), layout="backends").path for i, q in enumerate(qs)]
    except Exception as exc:  # noqa: BLE001 - reported in the output, not hidden
        print(f"fan-out over runtime stores not measured: {exc}", file=sys.stderr)
    rq = make_backend("redis_qe", index=f"study{seed}_fan", drop_existing=True, drop_on_close=True)
    rq.add(units, vecs)
    sh = make_backend("fts5_shared")
    sh.add(units)
    agents = [agent_of(i) for i in range(n)]
    rng = random.Random(seed)
    sample = queries[: min(len(queries), 30)]
    for m in steps:
        per_store, tag, fts = [], [], []
        for qid, agent, vec in sample:
            q_text = next(q.question for q in qs if q.qid == qid)
            owners = [agent] + rng.sample([a for a in agents if a != agent], m - 1)
            if stores is not None:
                idx = [agents.index(o) for o in owners]
                t = time.perf_counter()
                for i in idx:  # open, search, close: what fan-out over the agents' own stores costs
                    db = open_session_db(stores[i])
                    try:
                        db.search_messages(fts_query(q_text) or "x", limit=20)
                    finally:
                        db.close()
                per_store.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            rq.search_owners(Query(vector=vec), ORG, owners, K)
            tag.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            sh.search_owners(Query(text=q_text), ORG, owners, K)
            fts.append((time.perf_counter() - t) * 1000)
        rows.append({"agents": m, "queries": len(sample),
                     "runtime_stores_p50_ms": round(pct(per_store, 50), 3) if per_store else None,
                     "runtime_stores_p95_ms": round(pct(per_store, 95), 3) if per_store else None,
                     "redis_tag_list_p50_ms": round(pct(tag, 50), 3), "redis_tag_list_p95_ms": round(pct(tag, 95), 3),
                     "fts5_owner_in_p50_ms": round(pct(fts, 50), 3), "fts5_owner_in_p95_ms": round(pct(fts, 95), 3)})
    rq.close()
    sh.close()
    fps = []
    if stores is not None:
        from harness.runtime.hermes import runtime_label

        fps.append({"backend": f"runtime session stores ({runtime_label()}, {n} files)", "units": len(units),
                    "total_bytes": sum(Path(p).stat().st_size for p in stores)})
    return rows, fps


def print_report(summary, footprints, plans, lex, fan, meta) -> None:
    print(f"\nrecall@10 against exact, {meta['histories']} agents, {meta['chunks']} chunks, encoder "
          f"{meta['encoder']['encoder_id']}")
    kps = "K's"
    print(f"{'config':<18} {'case':<9} {'s':>7} {'recall':>7} {'short':>6} {'mean n':>7} {'p50 ms':>8} "
          f"{'p95 ms':>8} {kps:>6} {'local':>6}")
    for r in summary:
        print(f"{r['config']:<18} {r['case']:<9} {r['selectivity']:>7.4f} {r['recall_at_10']:>7.3f} "
              f"{r['short_lists']:>6} {r['mean_results']:>7.2f} {r['p50_ms']:>8.2f} {r['p95_ms']:>8.2f} "
              f"{r['global_pred']:>6.2f} {r['local_pred']:>6.2f}")
    print("\nfootprint (bytes)")
    for f in footprints:
        print("  " + ", ".join(f"{k}={v}" for k, v in f.items()))
    if plans:
        from collections import Counter

        print("\npgvector plans, one-agent view:")
        for cfg in dict.fromkeys(p["config"] for p in plans):
            c = Counter(p["plan"] for p in plans if p["config"] == cfg)
            print(f"  {cfg}: " + "; ".join(f"{k} x{v}" for k, v in c.most_common()))
    if lex:
        print("\nlexical: one FTS5 index with an owner column vs per-view BM25 (top-10 overlap)")
        for r in lex:
            print("  " + ", ".join(f"{k}={v}" for k, v in r.items()))
    if fan:
        print("\nfan-out: per-agent runtime stores one by one vs one shared index with the agents as a list")
        for r in fan:
            print("  " + ", ".join(f"{k}={v}" for k, v in r.items()))
    q = meta["query_embedding_ms"]
    print(f"\nquery embedding (raw forward, CPU): p50 {q['p50']:.1f} ms, p95 {q['p95']:.1f} ms; corpus embedding "
          f"{meta['embed_s']:.1f} s (cache hits are free)")
    d = meta.get("delta")
    if d:
        print(f"write path delta (redis_qe): p50 {d['delta_p50_ms']:.1f} ms, p95 {d['delta_p95_ms']:.1f} ms; "
              f"embed p50 {d['embed_p50_ms']:.1f} ms, vector insert p50 {d['insert_dense_p50_ms']:.2f} ms")


def run_study(cfg) -> dict:
    """The `backends` stage (`make run STAGE=backends`): the stage's sample as the corpus and queries.

    Writes the study's CSVs to runs/backends/<label>/, where the analysis reads them (H3a-H3c).
    `stage.histories` caps the corpus (null: the whole sample, ~85 min of embedding on real S).
    """
    from harness.data import source
    from harness.data.samples import draw
    from harness.run.plan import scan

    path = source.resolve(cfg.data)
    sample = str(cfg.stage.sample)
    qids = draw(scan(path), cfg.samples, int(cfg.seed), names=[sample])[sample]["ids"]
    out = Path(str(cfg.runs_dir)) / str(cfg.stage.name) / str(cfg.stage.label)
    hist = cfg.stage.get("histories")
    return run(path, out, int(hist) if hist else None, qids, str(cfg.encoder.name), int(cfg.seed),
               only=list(cfg.stage.only) if cfg.stage.get("only") else None,
               fanout=bool(cfg.stage.get("fanout", True)), delta_rounds=int(cfg.stage.get("delta_rounds", 30)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.memory.study")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--data", type=Path, default=None, help="LongMemEval-format file (default: generated S)")
    ap.add_argument("--histories", default="12", help="how many histories (agents); 'all' for every one")
    ap.add_argument("--qids", type=Path, default=None, help="file with one question id per line (a sample)")
    ap.add_argument("--encoder", default="minilm", choices=["minilm", "bge", "hash"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default=None, help="comma-separated config ids or families")
    ap.add_argument("--no-fanout", action="store_true")
    ap.add_argument("--no-lexical", action="store_true")
    ap.add_argument("--delta-rounds", type=int, default=30)
    args = ap.parse_args(argv)
    if args.data is None:
        from harness.memory.bench import default_data

        args.data = default_data()
    hist = None if args.histories == "all" else int(args.histories)
    qids = [x.strip() for x in args.qids.read_text().splitlines() if x.strip()] if args.qids else None
    run(args.data, args.out, hist, qids, args.encoder, args.seed,
        args.only.split(",") if args.only else None, not args.no_fanout, args.delta_rounds, not args.no_lexical)
    return 0


if __name__ == "__main__":
    sys.exit(main())
