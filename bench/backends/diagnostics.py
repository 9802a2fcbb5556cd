"""Corpus diagnostics checked against the realistic range of the stage's own encoder."""

from __future__ import annotations

from typing import Sequence

import numpy as np

def nn_cosines(vecs: np.ndarray, pool: int, seed: int) -> np.ndarray:
    """Cosine of each chunk of a seeded random pool of `pool` chunks to its nearest other chunk in the pool.

    Within a fixed-size pool, not the whole corpus: the nearest neighbour of a chunk gets closer as
    the corpus grows, so only a fixed pool makes a 3,000-chunk calibration (bench.backends.calibrate)
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


def realism_checks(d: dict, real: dict) -> dict:
    """Each measure against its threshold (conf/stage/backends.yaml `realism`, set by bench.backends.calibrate)."""
    checks = {}
    if "nn_cosine_median_max" in real:
        checks["nn_cosine_median"] = d["nn_cosine_median"] <= float(real["nn_cosine_median_max"])
    if "nn_cosine_above_095_max" in real:
        checks["nn_cosine_above_095"] = d["nn_cosine_above_095"] <= float(real["nn_cosine_above_095_max"])
    if "distinct_queries_min" in real:
        checks["distinct_queries"] = d["distinct_queries"] / max(1, d["queries"]) >= float(real["distinct_queries_min"])
    ur = real.get("unfiltered_recall")
    if ur and ur["config"] in (d.get("unfiltered_recall") or {}):  # measured only when that configuration ran
        checks["unfiltered_recall"] = d["unfiltered_recall"][ur["config"]] >= float(ur["min"])
    return checks


def unchecked(d: dict, real: dict) -> list[str]:
    """The thresholds this stage could not check: the unfiltered recall of a configuration it did not run
    (a stage of other backends, e.g. a new one beside exact, is judged on the corpus measures alone)."""
    ur = real.get("unfiltered_recall")
    if ur and ur["config"] not in (d.get("unfiltered_recall") or {}):
        return [f"unfiltered recall of {ur['config']} (not run in this stage)"]
    return []


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
