"""Benchmark of analysis.stats at the paper's primary-test size.

100,000 paired resamples over 180 questions x 16 conditions: all conditions against one
reference plus a few other pairs, five cost metrics and correctness.  WHY: the Holm family
and the primary tests use 100,000 resamples (Appendix A), and the table builder computes a
whole table per call; this shows that stays well under a minute on a small shared machine.

    python -m analysis.bench_stats [--resamples 100000] [--questions 180] [--conditions 16] [--seed N]
"""

from __future__ import annotations

import argparse
import resource
import time
import tracemalloc

import numpy as np

from analysis import stats

METRICS = ("tokens", "cost", "time", "model_calls", "tool_calls")


def synthetic(n: int, k: int, seed: int = 0) -> tuple[dict[str, np.ndarray], np.ndarray, list[str]]:
    """Skewed, correlated per-question costs like the paper's (some conditions make no tool calls)."""
    rng = np.random.default_rng(seed)
    difficulty = rng.lognormal(0.0, 0.8, size=(n, 1))  # shared by all conditions: pairs are correlated
    scale = rng.uniform(0.1, 2.0, size=(1, k))
    tokens = 13_000 * difficulty * scale * rng.lognormal(0.0, 0.5, size=(n, k))
    calls = 1 + rng.poisson(2.0 * scale, size=(n, k)).astype(float)
    tool_calls = np.maximum(calls - 1, 0)
    tool_calls[:, -1] = 0  # a no-tool condition (prefetch-like): zero denominators exist
    metrics = {
        "tokens": tokens,
        "cost": tokens * 3e-7 * rng.uniform(0.8, 1.2, size=(n, k)),
        "time": 0.8 * calls + rng.gamma(2.0, 0.5, size=(n, k)),
        "model_calls": calls,
        "tool_calls": tool_calls,
    }
    correct = (rng.random((n, k)) < rng.uniform(0.75, 0.97, size=(1, k))).astype(float)
    return metrics, correct, [f"c{j:02d}" for j in range(k)]


def pairs_for(conditions: list[str]) -> list[tuple[str, str]]:
    """Every condition against the reference c00, plus five comparisons among the others."""
    ref, rest = conditions[0], conditions[1:]
    extra = [(rest[i], rest[i + 1]) for i in range(0, min(10, len(rest) - 1), 2)]
    return [(c, ref) for c in rest] + extra


def run(label: str, fn) -> tuple[str, float, float, float]:
    """Wall and CPU seconds (CPU is less sensitive to other work on a shared machine) and peak traced MiB."""
    tracemalloc.start()
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    secs, cpu = time.perf_counter() - t0, time.process_time() - c0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return label, secs, cpu, peak / 2**20


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--resamples", type=int, default=stats.PRIMARY_RESAMPLES)
    ap.add_argument("--questions", type=int, default=180)
    ap.add_argument("--conditions", type=int, default=16)
    ap.add_argument("--seed", type=int, default=20261009)
    args = ap.parse_args(argv)

    metrics, correct, conditions = synthetic(args.questions, args.conditions)
    pairs = pairs_for(conditions)
    B, n = args.resamples, args.questions
    common = dict(pairs=pairs, conditions=conditions, seed=args.seed, n_resamples=B)

    cases = [
        ("draw resample counts", lambda: stats.resample_counts(n, B, args.seed)),
        ("ratio of means, 5 metrics", lambda: stats.compare_many(metrics, statistics=("ratio",), **common)),
        ("accuracy diff + McNemar", lambda: stats.compare_many({}, correct=correct, **common)),
        ("median ratio, tokens only", lambda: stats.compare_many({"tokens": metrics["tokens"]},
                                                                 statistics=("median_ratio",), **common)),
        ("full table (all stats, 5 metrics + acc)", lambda: stats.compare_many(metrics, correct=correct, **common)),
        ("full table, keep_boot=True", lambda: stats.compare_many(metrics, correct=correct, keep_boot=True,
                                                                  **common)),
    ]
    print(f"analysis.stats benchmark: {B:,} resamples, {n} questions x {args.conditions} conditions, "
          f"{len(pairs)} pairs, {len(METRICS)} metrics + correctness")
    print(f"naive (B x n x conditions) float64 array would be {B * n * args.conditions * 8 / 2**30:.2f} GiB")
    print(f"{'case':<42} {'wall s':>7} {'cpu s':>7} {'peak MiB (tracemalloc)':>23}")
    for label, fn in cases:
        label, secs, cpu, peak = run(label, fn)
        print(f"{label:<42} {secs:>7.2f} {cpu:>7.2f} {peak:>23.1f}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(f"process max RSS: {rss:.0f} MiB")


if __name__ == "__main__":
    main()
