"""Benchmarks of the memory layer (`make bench`; not tests: numbers depend on the machine).

1. Embedding throughput: the cached `Encoder.embed` path (cold cache: sorted
   batches, cache writes) and a warm cache, against the encoder's raw forward pass
   on the same chunks.
2. memory_search latency p50/p95 under a one-agent view of ~700 units, per index
   (exact, fts5, hybrid, redis_qe, vectorset, pgvector), the query vector taken
   from the cache so the index is what is timed; query embedding is timed apart.
3. The write path delta (commit -> searchable by dense retrieval), p50/p95, on
   rounds the encoder has never seen (a private cache), with its components.

Corpus: generated LongMemEval-format histories (each history = one agent's
memory); the measured agent holds the first `--agent-histories` histories.

    python -m harness.memory.bench [--data FILE] [--encoder minilm] [--chunks 256] [--queries 60]
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from harness.data.longmemeval import iter_questions
from harness.memory.units import Round, units_of_sessions
from harness.memory.views import View

REPO = Path(__file__).resolve().parents[2]


# a timed index beyond the backends' own names: a backend with other settings (the menu's data)
VARIANTS = {"pgvector_relaxed": ("pgvector", {"iterative_scan": "relaxed_order"})}


def resolve(name: str) -> tuple[str, dict]:
    """(backend, settings) of a timed index: a variant, or a backend by its own name."""
    return VARIANTS.get(name, (name, {}))


def hybrid_dense() -> str:
    """The dense side hybrid fuses with in the agent runs (conf/index/hybrid.yaml), also the write path's."""
    import yaml

    return str(yaml.safe_load((REPO / "conf" / "index" / "hybrid.yaml").read_text())["dense"]["name"])


def pct(xs, q):
    return float(np.percentile(np.asarray(xs, dtype=float), q)) if len(xs) else float("nan")


def default_data() -> Path:
    from harness.data.synth import file_name

    p = REPO / ".cache" / "data" / file_name("s", 0)
    if not p.exists():
        from harness.data.synth import write

        write(p.parent, 0, "s", p)
    return p


def corpus(path: Path, agent_histories: int, other_histories: int):
    """Units of org 'bench': agent a0 holds the first histories, every later history is another agent."""
    qs = list(itertools.islice(iter_questions(path), agent_histories + other_histories))
    if len(qs) < agent_histories + other_histories:
        raise SystemExit(f"{path} has only {len(qs)} questions")
    units = []
    for i, q in enumerate(qs):
        owner = "a0" if i < agent_histories else f"h{i:03d}"
        vis = "private"
        units += units_of_sessions(q.sessions, "bench", lambda sid, o=owner: o, lambda a, v=vis: v)
    return qs, units


def bench_embedding(encoder_name: str, texts: list[str]) -> list[dict]:
    from harness.memory.encoder import Encoder

    with tempfile.TemporaryDirectory() as tmp:
        enc = Encoder(encoder_name, cache_dir=tmp)
        enc.forward(texts[:4])  # load the model and warm up outside the timings
        rows = []
        t = time.perf_counter()
        enc.forward(texts)
        raw = time.perf_counter() - t
        rows.append({"path": "raw forward (batch 32, input order)", "chunks": len(texts), "seconds": raw})
        t = time.perf_counter()
        enc.embed(texts, progress=False)
        cold = time.perf_counter() - t
        rows.append({"path": "embed(), cold cache (sorted batches + cache writes)", "chunks": len(texts), "seconds": cold})
        t = time.perf_counter()
        enc.embed(texts, progress=False)
        warm = time.perf_counter() - t
        rows.append({"path": "embed(), warm cache", "chunks": len(texts), "seconds": warm})
        q = []
        for text in texts[:20]:
            t = time.perf_counter()
            enc.forward([text[:200]], batch_size=1)
            q.append((time.perf_counter() - t) * 1000)
        enc.close()
    for r in rows:
        r["chunks_per_s"] = r["chunks"] / r["seconds"] if r["seconds"] > 0 else float("inf")
    rows.append({"path": "query embedding (one 200-char query, raw)", "p50_ms": pct(q, 50), "p95_ms": pct(q, 95)})
    return rows


def build_spaces(encoder, units, which: list[str]):
    from harness.memory.backends.base import backend_class, make_backend
    from harness.memory.backends.fts5 import FTS5PerView
    from harness.memory.space import MemorySpace

    encoder.embed([u.text for u in units])  # once, through the cache; every space then reads it
    spaces = {}
    for name in which:
        b, p = resolve(name)
        params = {**p, **backend_class(b).private_params(f"bench_lat_{name}")}  # its own index, dropped on close
        sp = MemorySpace(encoder, make_backend(b, **params), FTS5PerView())
        sp.add_units(units)
        spaces[name] = sp
    return spaces


def bench_search(encoder, units, queries: list[str], which: list[str], k: int = 8) -> list[dict]:
    from harness.memory.backends.base import Query, backend_class

    kind = {w: backend_class(resolve(w)[0]).kind for w in which}
    hd = hybrid_dense()
    dense = [w for w in which if kind[w] == "dense"]
    if any(kind[w] != "dense" for w in which) and hd not in dense:
        dense.append(hd)  # hybrid fuses per-view FTS5 with this dense index, as in the agent runs
    spaces = build_spaces(encoder, units, dense)
    view = View("bench", "a0", "own")
    n_view = sum(1 for u in units if view.admits(u))
    for q in queries:
        encoder.embed_query(q)  # cache the query vectors: the index is what is timed
    rows = []
    plan = []
    for name in which:
        if kind[name] == "lexical":
            sp, scoring = spaces[hd], "bm25"
        elif kind[name] == "hybrid":
            sp, scoring = spaces[hd], "hybrid"
        else:
            sp, scoring = spaces[name], "dense"
        for q in queries[:3]:
            sp.search(q, view, k=k, scoring=scoring)  # warm-up (builds the view's lexical index)
        ms, n_res, index_ms = [], [], []
        for q in queries:
            t = time.perf_counter()
            res = sp.search(q, view, k=k, scoring=scoring)
            ms.append((time.perf_counter() - t) * 1000)
            n_res.append(len(res))
            backend = sp.lexical if scoring == "bm25" else (sp.dense if scoring == "dense" else None)
            if backend is not None:
                qq = Query(text=q, vector=encoder.embed_query(q))
                t = time.perf_counter()
                backend.search(qq, view, k)
                index_ms.append((time.perf_counter() - t) * 1000)
        rows.append({"index": name if kind[name] != "hybrid" else f"{name} (fts5 + {hd}, RRF 50/50)",
                     "scoring": scoring, "view_units": n_view, "queries": len(queries),
                     "p50_ms": pct(ms, 50), "p95_ms": pct(ms, 95),
                     "index_p50_ms": pct(index_ms, 50) if index_ms else None,
                     "short_lists": sum(1 for n in n_res if n < k)})
        if not plan and kind[name] == "dense" and hasattr(sp.dense, "explain"):  # the engine shows its plan
            qq = Query(vector=encoder.embed_query(queries[0]))
            plan = [ln.strip() for ln in sp.dense.explain(qq, view, k).splitlines() if "Scan" in ln]
    for sp in {id(s): s for s in spaces.values()}.values():
        sp.close()
    return rows, plan


def bench_delta(encoder_name: str, n: int, dense: str) -> dict:
    """Commit rounds never seen before (private cache) and time commit -> searchable."""
    from harness.memory.backends.base import backend_class, make_backend
    from harness.memory.backends.fts5 import FTS5PerView
    from harness.memory.encoder import Encoder
    from harness.memory.space import MemorySpace

    with tempfile.TemporaryDirectory() as tmp:
        enc = Encoder(encoder_name, cache_dir=tmp)
        enc.forward(["warm up"])
        params = backend_class(dense).private_params("bench_delta")
        sp = MemorySpace(enc, make_backend(dense, **params), FTS5PerView())
        for agent in ("a0", "a1", "a2"):  # three views whose lexical indexes a public round must enter
            sp.search("warm", View("w", agent, "shared"), scoring="bm25")
        reps = []
        nonce = time.time_ns()
        for i in range(n):
            user = f"Round {i} ({nonce}): I planted {i + 3} tomato seedlings along the south fence today."
            assistant = ("That is a good spot; tomatoes like six to eight hours of sun. " * (1 + i % 10))[:900]
            reps.append(sp.commit(Round(f"sdelta{i}", 1, user, assistant, 1.7e9 + i), "w", "a0", "public"))
        sp.close()
        enc.close()
    ms = lambda xs: [x * 1000 for x in xs]  # noqa: E731
    d = ms([r.delta for r in reps])
    return {"dense": dense, "rounds": n, "delta_p50_ms": pct(d, 50), "delta_p95_ms": pct(d, 95),
            "embed_p50_ms": pct(ms([r.embed_s for r in reps]), 50),
            "insert_dense_p50_ms": pct(ms([r.insert_dense_s for r in reps]), 50),
            "insert_lexical_p50_ms": pct(ms([r.insert_lexical_s for r in reps]), 50),
            "lexical_views_per_round": statistics.mean(r.lexical_views for r in reps),
            "probes_mean": statistics.mean(r.probes for r in reps)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.memory.bench")
    ap.add_argument("--data", type=Path, default=None, help="LongMemEval-format file (default: generated S)")
    ap.add_argument("--encoder", default="minilm", choices=["minilm", "bge"])
    ap.add_argument("--chunks", type=int, default=256, help="chunks for the embedding benchmark")
    ap.add_argument("--agent-histories", type=int, default=2, help="histories held by the measured agent")
    ap.add_argument("--other-histories", type=int, default=4, help="histories of other agents in the index")
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--delta-rounds", type=int, default=40)
    ap.add_argument("--indexes", default="exact,fts5,hybrid,redis_qe,vectorset,pgvector,pgvector_relaxed")
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = ap.parse_args(argv)

    from harness import services
    from harness.memory.encoder import load_encoder

    started = services.up()
    try:
        path = args.data or default_data()
        qs, units = corpus(path, args.agent_histories, args.other_histories)
        enc = load_encoder(args.encoder)
        print(f"encoder {enc.id}" + ("" if enc.spec.study_encoder else "  (NOT the study's encoder)"))
        print(f"corpus  {path.name}: {len(units)} chunks, agent a0 holds "
              f"{sum(1 for u in units if u.owner == 'a0')}; machine {platform.machine()}, "
              f"{__import__('os').cpu_count()} cpus\n")
        texts = sorted({u.text for u in units}, key=lambda t: hashlib.sha1(t.encode()).hexdigest())[:args.chunks]
        emb = bench_embedding(args.encoder, texts)
        print("1. embedding throughput")
        for r in emb:
            if "chunks_per_s" in r:
                print(f"   {r['path']:<52} {r['chunks']:>5} chunks {r['seconds']:>7.2f} s {r['chunks_per_s']:>9.1f} chunks/s")
            else:
                print(f"   {r['path']:<52} p50 {r['p50_ms']:.1f} ms  p95 {r['p95_ms']:.1f} ms")
        all_q = [q.question for q in iter_questions(path)][:args.queries]
        rows, plan = bench_search(enc, units, all_q, args.indexes.split(","))
        print(f"\n2. memory_search (k=8, one result per round) under a one-agent view of {rows[0]['view_units']} "
              f"units ({len(units)} in the index), {len(all_q)} queries; query vectors cached")
        print(f"   {'index':<38} {'scoring':<7} {'p50 ms':>8} {'p95 ms':>8} {'index p50':>10} {'short':>6}")
        for r in rows:
            ip = f"{r['index_p50_ms']:.2f}" if r["index_p50_ms"] is not None else "-"
            print(f"   {r['index']:<38} {r['scoring']:<7} {r['p50_ms']:>8.2f} {r['p95_ms']:>8.2f} {ip:>10} "
                  f"{r['short_lists']:>6}")
        if plan:
            print("   plan of the first index that explains itself (one-agent view): " + " / ".join(plan))
        hd = hybrid_dense()
        d = bench_delta(args.encoder, args.delta_rounds, hd)
        print(f"\n3. write path: commit -> searchable ({hd} + per-view FTS5), {d['rounds']} unseen rounds")
        print(f"   delta p50 {d['delta_p50_ms']:.1f} ms  p95 {d['delta_p95_ms']:.1f} ms   (median parts: embed "
              f"{d['embed_p50_ms']:.1f} ms, vector insert {d['insert_dense_p50_ms']:.2f} ms, lexical insert "
              f"{d['insert_lexical_p50_ms']:.2f} ms into {d['lexical_views_per_round']:.0f} views; "
              f"{d['probes_mean']:.2f} probes)")
        if args.json:
            args.json.write_text(json.dumps({"encoder": enc.describe(), "embedding": emb, "search": rows,
                                             "pgvector_plan": plan, "delta": d}, indent=2))
    finally:
        services.down(only=started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
