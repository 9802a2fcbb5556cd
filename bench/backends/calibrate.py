"""Calibrate the backend study's realistic range on real human text (issue 11).

The study counts its figures only when its corpus looks like text (conf/stage/backends.yaml
`stage.realism`). This measures the same diagnostics on a corpus made only of real
conversations -- `chitchat-dataset` (7,168 human conversations, MIT, installs offline), each
conversation one session of alternating user/assistant messages, cut by the study's own chunker
(harness.memory.units) and embedded with the study's encoder -- and proposes thresholds from it
with the margins below. `--data FILE` measures a LongMemEval-format corpus (e.g. the generated
S histories) the same way, for comparison.

    python -m bench.backends.calibrate                      # real text (chitchat), ~3,000 chunks
    python -m bench.backends.calibrate --encoder bge --for-stage   # the backend stage's per-encoder cache, now
    python -m bench.backends.calibrate --data .cache/data/synth_s_seed0_chat_q2.json --histories 5

Measures (the same functions the study uses): nearest-neighbour cosine within a fixed pool of
chunks (bench.backends.diagnostics.nn_cosines), distinct query texts, and unfiltered recall@10 of the
Redis HNSW index (M 16, EF_CONSTRUCTION 200) at EF_RUNTIME 10 and 100 against exact search.
Queries: for chitchat, messages with a question mark from conversations outside the corpus; for
--data, the file's questions. Recall depends on corpus size (it falls as the graph grows: the
paper saw 0.81 / ~0.98 at EF 10 / 100 on 123k chunks); the threshold is on EF 100, where a
text-like corpus stays high at any size we run.

The range is per encoder: cosines are a property of the vector space (bge-small-en-v1.5's
nearest-neighbour cosines sit higher than MiniLM's), so thresholds measured with one encoder
would wrongly pass or suppress a corpus embedded with another. `for_encoder(enc)` gives the
backend stage its encoder's thresholds: an entry recorded in the stage config for that encoder
id (MiniLM's issue-11 measurement), else a cached calibration for that id
(.cache/calibration/, MEMSPACE_CACHE moves .cache), else it calibrates now on the same real
text with that encoder and caches the result. The stage writes what it used to its folder.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from bench.backends.cases import K
from bench.backends.diagnostics import THRESHOLD_KEYS, corpus_diagnostics

# threshold = real-text value +/- margin (cosines absolute; shares absolute)
MARGINS = {"nn_cosine_median": 0.05, "nn_cosine_above_095": 0.05, "distinct_queries": 0.10, "unfiltered_recall": 0.05}
POOL = 3000  # chunks in the nearest-neighbour pool (the study's `nn_pool`)
# what a per-encoder calibration measures (conf/stage/backends.yaml `realism.calibration` may change it)
CALIBRATION = {"source": "chitchat-dataset", "chunks": POOL, "queries": 180, "seed": 0, "pool": POOL}


def chat_corpus(chunks: int, queries: int, seed: int):
    """Units of whole chitchat conversations (seeded order) until `chunks`, and held-out question messages."""
    from harness.data.longmemeval import Session, Turn
    from harness.data.synth import chat_conversations
    from harness.memory.units import units_of_sessions

    convs = list(chat_conversations())
    random.Random(seed).shuffle(convs)
    units, used, start = [], 0, datetime(2023, 1, 1)
    for i, msgs in enumerate(convs):
        if len(units) >= chunks:
            break
        turns = tuple(Turn("user" if j % 2 == 0 else "assistant", m) for j, m in enumerate(msgs))
        units += units_of_sessions([Session(f"c{i:05d}", start + timedelta(days=i), turns)], "calib",
                                   lambda sid: "a0", lambda a: "private")
        used = i + 1
    qs = []
    for msgs in convs[used:]:
        qs += [m for m in msgs if "?" in m and len(m) > 15]
        if len(qs) >= queries:
            break
    return units[:chunks], qs[:queries], {"source": "chitchat-dataset", "conversations": used}


def file_corpus(path: Path, histories: int, queries: int):
    """Units of the first `histories` histories of a LongMemEval-format file; its first `queries` questions."""
    import itertools

    from harness.data.longmemeval import iter_questions
    from bench.backends.cases import ORG, agent_of
    from harness.memory.units import units_of_sessions

    qs = list(itertools.islice(iter_questions(path), max(histories, queries)))
    units = []
    for i, q in enumerate(qs[:histories]):
        units += units_of_sessions(q.sessions, ORG, lambda sid, a=agent_of(i): a, lambda a: "private")
    return units, [q.question for q in qs[:queries]], {"source": str(path), "histories": histories}


def unfiltered_recall(units, vecs: np.ndarray, qvecs: np.ndarray, efs=(10, 100)) -> dict:
    """Recall@10 of one Redis HNSW index with no filter against exact search, per EF_RUNTIME."""
    from harness import services
    from harness.memory.backends.base import Query, make_backend

    x = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    uids = [u.uid for u in units]
    started = services.up()
    try:
        rq = make_backend("redis_qe")
        try:
            rq.add(units, vecs)
            out = {}
            for ef in efs:
                rq.ef_runtime = ef
                rec = []
                for q in qvecs:
                    truth = {uids[i] for i in np.argsort(-(x @ (q / np.linalg.norm(q))), kind="stable")[:K]}
                    got = {h.uid for h in rq.search(Query(vector=q), None, K)}
                    rec.append(len(got & truth) / K)
                out[f"redis_ef{ef}"] = round(float(np.mean(rec)), 4)
            return out
        finally:
            rq.close()
    finally:
        services.down(only=started)


def thresholds(real: dict) -> dict:
    """The study's realistic range from a real-text measurement, with MARGINS (no recall threshold
    when the measurement has no unfiltered recall)."""
    out = {"nn_cosine_median_max": round(real["nn_cosine_median"] + MARGINS["nn_cosine_median"], 2),
           "nn_cosine_above_095_max": round(real["nn_cosine_above_095"] + MARGINS["nn_cosine_above_095"], 2),
           "distinct_queries_min": round(real["distinct_queries"] / real["queries"] - MARGINS["distinct_queries"], 2)}
    recall = (real.get("unfiltered_recall") or {}).get("redis_ef100")
    if recall is not None:
        out["unfiltered_recall"] = {"config": "redis_ef100", "min": round(recall - MARGINS["unfiltered_recall"], 2)}
    return out


def measure(units, queries, encoder, cache_dir: str | None, seed: int, pool: int = POOL, recall: bool = True) -> dict:
    """The diagnostics of `units` embedded with `encoder` (an encoder, or a name to load); `recall=False`
    skips the unfiltered Redis recall (no server needed)."""
    from harness.memory.encoder import load_encoder

    enc = load_encoder(encoder, cache_dir=cache_dir) if isinstance(encoder, str) else encoder
    vecs = enc.embed([u.text for u in units], progress=True)
    d = corpus_diagnostics(vecs, queries, pool, seed)
    if recall:
        qvecs = enc.embed(list(dict.fromkeys(queries)))
        d["unfiltered_recall"] = unfiltered_recall(units, vecs, qvecs)
    d.update({"chunks": len(units), "encoder": enc.id})
    return d


def calibration_dir() -> Path:
    from harness.memory.encoder import cache_root

    return cache_root().parent / "calibration"


def cache_path(encoder_id: str, params: dict, cache_dir: str | Path | None = None) -> Path:
    """One file per encoder id and calibration (its parameters and margins enter the name)."""
    key = hashlib.sha256(json.dumps({"encoder_id": encoder_id, "params": params, "margins": MARGINS},
                                    sort_keys=True).encode()).hexdigest()[:16]
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", encoder_id.split(":", 1)[0])
    return Path(cache_dir or calibration_dir()) / f"{safe}-{key}.json"


def for_encoder(enc, params: dict | None = None, recorded=(), cache_dir: str | Path | None = None,
                recall: bool = True) -> dict:
    """The realistic range for `enc` (an Encoder or HashEncoder): {"encoder_id", "source", "thresholds",
    "params", "measurement", "cache"}.

    source: "recorded" (an entry of `recorded` -- the stage config's `realism.recorded` -- carries this
    encoder id), "cache" (calibrated before for this id with these parameters), or "calibrated" (now:
    chitchat text with the study's chunker, embedded with `enc`; written to the cache)."""
    params = {**CALIBRATION, **{k: v for k, v in (params or {}).items() if k in CALIBRATION}}
    for r in recorded or ():
        r = dict(r)
        if r.get("encoder_id") == enc.id:
            th = {k: v for k, v in r.items() if k not in ("encoder_id", "note")}
            return {"encoder_id": enc.id, "source": "recorded", "thresholds": th, "params": params,
                    "measurement": None, "cache": None, "note": r.get("note")}
    path = cache_path(enc.id, params, cache_dir)
    if path.exists():
        try:
            d = json.loads(path.read_text())
            if d.get("encoder_id") == enc.id and d.get("params") == params and "thresholds" in d:
                return {**d, "source": "cache", "cache": str(path)}
        except ValueError:
            pass  # a torn file: calibrate again
    units, queries, src = chat_corpus(int(params["chunks"]), int(params["queries"]), int(params["seed"]))
    m = {**src, **measure(units, queries, enc, None, int(params["seed"]), int(params["pool"]), recall=recall)}
    d = {"encoder_id": enc.id, "params": params, "margins": MARGINS, "measurement": m, "thresholds": thresholds(m),
         "calibrated": datetime.now(UTC).isoformat(timespec="seconds")}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".partial")
    tmp.write_text(json.dumps(d, indent=2))
    tmp.replace(path)
    return {**d, "source": "calibrated", "cache": str(path)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.backends.calibrate")
    ap.add_argument("--data", type=Path, default=None, help="LongMemEval-format file instead of real chitchat text")
    ap.add_argument("--histories", type=int, default=5, help="with --data: histories whose chunks form the corpus")
    ap.add_argument("--chunks", type=int, default=POOL, help="chitchat: chunks in the corpus")
    ap.add_argument("--queries", type=int, default=180)
    ap.add_argument("--encoder", default="minilm")
    ap.add_argument("--cache-dir", default=None, help="embedding cache folder (default .cache/embeddings)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="write the measurement (and thresholds) as JSON")
    ap.add_argument("--for-stage", action="store_true",
                    help="the backend stage's thresholds for --encoder (recorded, cached, or calibrated now and "
                         "cached), with the stage config's calibration parameters")
    args = ap.parse_args(argv)
    if args.for_stage:
        from harness.memory.encoder import load_encoder
        from bench.backends.cases import default_stage

        real = default_stage().get("realism") or {}
        d = for_encoder(load_encoder(args.encoder, cache_dir=args.cache_dir), real.get("calibration"),
                        real.get("recorded") or ())
        print(json.dumps(d, indent=2))
        if args.out:
            args.out.write_text(json.dumps(d, indent=2))
        return 0
    if args.data:
        units, queries, src = file_corpus(args.data, args.histories, args.queries)
    else:
        units, queries, src = chat_corpus(args.chunks, args.queries, args.seed)
    d = {**src, **measure(units, queries, args.encoder, args.cache_dir, args.seed)}
    if not args.data:
        d["thresholds"] = thresholds(d)
    print(json.dumps(d, indent=2))
    if args.out:
        args.out.write_text(json.dumps(d, indent=2))
    return 0


def stage_realism(stage: dict, enc) -> dict:
    """The realistic range this stage applies, for its own encoder: {"encoder_id", "source", "thresholds", ...}.

    `stage.realism` holds `calibration` (the parameters) and `recorded` (thresholds measured once and kept
    in the config, per encoder id); see bench.backends.calibrate.for_encoder. Thresholds written directly
    under `stage.realism` (the keys of THRESHOLD_KEYS) are applied as given, whatever the encoder."""
    real = dict(stage.get("realism") or {})
    fixed = {k: real[k] for k in THRESHOLD_KEYS if k in real}
    if fixed:
        return {"encoder_id": enc.id, "source": "stage config (fixed thresholds, applied to any encoder)",
                "thresholds": fixed, "params": None, "measurement": None, "cache": None}
    return for_encoder(enc, real.get("calibration"), real.get("recorded") or ())


if __name__ == "__main__":
    sys.exit(main())
