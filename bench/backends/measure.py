"""One case on one built index: recall against exact, latency, the server's time and plan, the
survivors of a post-filter beside Proposition 2's predictions, and the write-path delta."""

from __future__ import annotations

import csv
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Sequence

import numpy as np

from harness.memory.bench import pct
from harness.memory.units import Unit
from harness.memory.views import View

from .cases import K, ORG, Config, view_for
from .engines import filter_mode, k_prime_of

def local_prediction(nearest: Sequence[str], view: View | None, units: dict, k_prime: int) -> int:
    """Proposition 2's local prediction: how many of the K' nearest neighbours of the query in the
    unfiltered index (uids in exact order) the view admits -- what a post-filter over an exact
    candidate list of K' would keep."""
    return sum(1 for uid in nearest[:k_prime] if view is None or view.admits(units[uid]))



def measure_case(backend, cfg: Config, case: str, build: int, queries, truth, local) -> tuple[list[dict], dict]:
    """Every query of one case on one built index: per-query rows and the server-side figures.
    truth(qid, agent) -> the exact top K under the view; local(qid, agent, k') -> Proposition 2's local
    prediction (how many of the exact K' nearest neighbours, unfiltered, the view admits)."""
    from harness.memory.backends.base import Query

    for _, a, v in queries[:3]:  # warm-up
        backend.search(Query(vector=v), view_for(case, a), K)
    before = backend.server_counter()  # the engine's own (calls, microseconds), where it keeps one
    timed = []
    for qid, agent, vec in queries:
        view = view_for(case, agent)
        t = time.perf_counter()
        hits = backend.search(Query(vector=vec), view, K)
        timed.append((qid, agent, vec, view, hits, (time.perf_counter() - t) * 1000))
    server = {}
    if before is not None:
        after = backend.server_counter()
        calls = after[0] - before[0]
        server["server_mean_ms"] = round((after[1] - before[1]) / calls / 1000, 4) if calls else None
    kp = k_prime_of(cfg)
    cur = backend.candidate_list()
    if cur is not None and cur != kp:
        raise RuntimeError(f"{cfg.id}: candidate list (ef_search) {cur} on the index, K' {kp} in the configuration")
    rows = []
    for qid, agent, vec, view, hits, ms in timed:
        gt = truth(qid, agent)
        rec = len({h.uid for h in hits} & {h.uid for h in gt}) / len(gt) if gt else 1.0
        row = {"config": cfg.id, "case": case, "build": build, "qid": qid, "agent": agent, "results": len(hits),
               "recall": rec, "latency_ms": ms, "server_ms": None, "plan": None, "k_prime": kp,
               "local_pred": local(qid, agent, kp), "filter": None, "survivors": None, "candidates": None}
        probe = backend.probe(Query(vector=vec), view, K)  # EXPLAIN ANALYZE, FT.PROFILE, ... (or nothing)
        row["server_ms"], row["plan"] = probe.get("server_ms"), probe.get("plan")
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


def write_csv(path: Path, rows: list[dict], kind: str | None = None) -> None:
    """Rows as CSV; with `kind`, each row is first validated as that schema type (harness.records.schema)."""
    if not rows:
        return
    if kind:
        from harness.records.schema import parse

        for i, r in enumerate(rows, 1):
            parse(kind, r, path, i)
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
