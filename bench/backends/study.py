"""The backend study itself (see bench/backends/__init__.py), its report and its entry points.

    python -m bench.backends --out runs/backends/x [--data FILE] [--histories 12] [--builds 3]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

from harness.data.longmemeval import sha256_file
from harness.memory.bench import pct

from .cases import (CASES, FANOUT_DENSE, K, LEXICAL_PER_VIEW, LEXICAL_SHARED, PUBLIC_SHARE, REPO, SPLIT_OF, TRUTH, Config, agent_of, build_seed, build_units,
                    default_stage, load_histories, parse_configs, public_agents, view_for)
from .calibrate import stage_realism
from .diagnostics import diagnostics
from .engines import (apply_query, engine_label, engine_versions, footprint_row, k_prime_of, make_index,
                      query_defaults, server_memory)
from .fanout import fanout_side
from .lexical import lexical_side
from .measure import (delta_on_index, local_prediction, measure_case, render_survivors, summarise, survivors_row,
                      write_csv)
from .plan import plan, render_plan

def run(data: Path, out: Path, histories: int | None = 12, qids: Sequence[str] | None = None,
        encoder_name: str = "minilm", seed: int = 0, stage: dict | None = None, cfg=None,
        fidelity: dict | None = None) -> dict:
    """Run the study into `out` (a stage folder). `stage` is the stage section (default: the stage config);
    `cfg` the resolved Hydra config when run as a stage (its hash guards the folder); `fidelity` its
    manifest (harness.run.fidelity), written into stage.json."""
    from omegaconf import OmegaConf

    from harness import services
    from harness.memory.backends.base import Query, backend_class, make_backend
    from harness.memory.encoder import load_encoder
    from harness.records import RunDir
    from harness.records.provenance import code_revision
    from harness.records.schema import SCHEMA_VERSION

    stage = dict(stage or default_stage())
    cfgs = parse_configs(stage["configs"])
    if stage.get("only"):
        cfgs = [c for c in cfgs if c.id in stage["only"] or c.backend in stage["only"]]
    if not any(c.backend == TRUTH for c in cfgs):
        raise ValueError("the study needs the exact configuration (its ground truth and reference)")
    builds = int(stage.get("builds", 3))
    out.mkdir(parents=True, exist_ok=True)
    wall: dict[str, float] = {}
    t_all = time.perf_counter()
    started = services.up(only=services_needed(cfgs, stage))
    try:
        qs = load_histories(data, histories, qids)
        n = len(qs)
        pub = {b: public_agents(n, PUBLIC_SHARE[b], seed) for b in PUBLIC_SHARE}
        splits = {b: build_units(qs, pub[b]) for b in PUBLIC_SHARE}
        units = splits["p10"]
        vers = engine_versions([c.backend for c in cfgs] + ([FANOUT_DENSE] if stage.get("fanout", True) else [])
                               + ([LEXICAL_SHARED, LEXICAL_PER_VIEW] if stage.get("lexical", True) else []))
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
            truth[b] = make_backend(TRUTH)
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
            n_builds = builds if backend_class(first.backend).approximate else 1
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
                    if backend is not None and backend.in_place_visibility:
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
                        mem0 = server_memory(first.backend)
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
                        footprints.append(footprint_row(backend, first, fam, len(us), build_s, mem0, vers))
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

        write_csv(out / "recall.csv", summary, "backend_recall")
        write_csv(out / "survivors.csv", survivors, "backend_survivors")
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


def service_parts(cfgs, stage: dict) -> list[tuple[str, dict]]:
    """(service, its connection settings) of every server the chosen configurations' backends declare, and the
    fan-out side's dense backend when that side runs: a study of in-process backends has none."""
    from harness.memory.backends.base import backend_class

    names = [c.backend for c in cfgs] + ([FANOUT_DENSE] if stage.get("fanout", True) else [])
    return [(svc, dict(part)) for n in dict.fromkeys(names) for svc, part in backend_class(n).service_configs(
        {"name": n, **next((c.build for c in cfgs if c.backend == n), {})})]


def services_needed(cfgs, stage: dict) -> set[str]:
    """The servers the study starts (service_parts' names): a study of in-process backends starts none."""
    return {svc for svc, _ in service_parts(cfgs, stage)}


def chosen_configs(stage: dict) -> list:
    """The stage's configurations as `run` filters them (`only`)."""
    cfgs = parse_configs(stage["configs"])
    return [c for c in cfgs if c.id in stage["only"] or c.backend in stage["only"]] if stage.get("only") else cfgs


def run_study(cfg, sweep: dict | None = None) -> dict | None:
    """The `backends` stage (`make run STAGE=backends`): the stage's sample as the corpus and queries.

    Writes runs/<stage>/<label>/ (stage.json + CSVs), which `make analyze` reads (Figures 2 and 7,
    H3a-H3c). `dry_run=true` prints the plan and the expected time and touches nothing.
    """
    from omegaconf import OmegaConf

    from harness.data import source
    from harness.data.samples import draw
    from harness.records.shards import Shard, ShardError
    from harness.run.plan import scan

    if Shard.parse(cfg.get("shard")):
        raise ShardError("the backends study is not sharded (no model calls); run it without shard=")

    stage = OmegaConf.to_container(cfg.stage, resolve=True)
    hist = stage.get("histories")
    spec = cfg.samples[str(stage["sample"])]
    n = int(spec.get("limit") or 6 * int(spec.get("per_type") or 30))  # six question types
    n = min(n, int(hist)) if hist else n
    from harness.data.source import cached_sha256
    from harness.run import fidelity

    def manifest(path: Path) -> list:
        data = {"path": str(path), "sha256": cached_sha256(path, Path(str(cfg.cache_dir))), "kind": cfg.data.get("kind")}
        rows = fidelity.backend_manifest(cfg, data, service_parts(chosen_configs(stage), stage))
        print("fidelity manifest (stage.json; the report opens with it):\n" + fidelity.render(rows), flush=True)
        return rows

    if cfg.get("dry_run"):
        print(render_plan(plan(stage, n, None)))
        # the checks the real run makes, on the data it reads (a generated file not yet written: held in memory)
        fidelity.raise_refusals(cfg, manifest(source.resolve(cfg.data, write=False)))
        return None
    from harness import services

    path = source.resolve(cfg.data)
    # the servers the study uses are started before the manifest asks them their versions (`run` starts none then)
    started = services.up(only=services_needed(chosen_configs(stage), stage))
    try:
        rows = manifest(path)
        fidelity.raise_refusals(cfg, rows)
        qids = draw(scan(path), cfg.samples, int(cfg.seed), names=[str(stage["sample"])])[str(stage["sample"])]["ids"]
        out = Path(str(cfg.runs_dir)) / str(stage["name"]) / str(stage["label"])
        return run(path, out, int(hist) if hist else None, qids, str(cfg.encoder.name), int(cfg.seed), stage=stage,
                   cfg=cfg, fidelity=fidelity.record(cfg, rows=rows))
    finally:
        services.down(only=started)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.backends")
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
