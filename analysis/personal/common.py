"""What the personalization tables share: the paper's method names and the unpaired comparison.

The paper's tests are on independent samples (n = 150 per condition): Welch's t, the
Mann-Whitney U, a percentile bootstrap CI of the mean difference (each group resampled on
its own) and the rank-biserial correlation. Here every trial meets every method, but the
tests stay unpaired, as the paper's are.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from judge.rubric import DIMENSIONS  # noqa: F401  (the three rubric dimensions, in the paper's order)

KERNEL = "kernel_shared"
BASELINES = ("naive_concat", "vanilla_rag", "mem0_default")  # Table 1 of the paper
METHODS = (*BASELINES, KERNEL)
PAPER_THRESHOLD = 0.3  # Section 4.2
RESAMPLES, SEED = 10_000, 0
DIMENSION_NAMES = {"profile_usage": "Profile", "task_usage": "Task", "integration": "Integration"}


def method_order(names) -> list[str]:
    """The paper's four methods in its order, then any others sorted."""
    names = set(names)
    return [m for m in METHODS if m in names] + sorted(names - set(METHODS))


def bootstrap_diff_ci(a, b, resamples: int = RESAMPLES, seed: int = SEED, confidence: float = 0.95):
    """Percentile CI of mean(a) - mean(b), each group resampled on its own (independent samples)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    rng = np.random.default_rng(seed)
    da = a[rng.integers(0, len(a), (resamples, len(a)))].mean(axis=1)
    db = b[rng.integers(0, len(b), (resamples, len(b)))].mean(axis=1)
    lo, hi = np.quantile(da - db, [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(lo), float(hi)


def rank_biserial(u_a: float, n_a: int, n_b: int) -> float:
    """r = 2U/(n_a n_b) - 1 for U of group a: the share of pairs a wins minus the share it loses."""
    return 2 * u_a / (n_a * n_b) - 1


def compare(a, b, resamples: int = RESAMPLES, seed: int = SEED) -> dict:
    """a vs b: means, difference, bootstrap CI, Welch t, Mann-Whitney U (two-sided), rank-biserial."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    out = {"n_a": len(a), "n_b": len(b), "mean_a": a.mean() if len(a) else np.nan,
           "mean_b": b.mean() if len(b) else np.nan}
    out["diff"] = out["mean_a"] - out["mean_b"]
    if len(a) < 2 or len(b) < 2:
        return {**out, "ci_low": np.nan, "ci_high": np.nan, "welch_t": np.nan, "welch_p": np.nan,
                "mwu_u": np.nan, "mwu_p": np.nan, "rank_biserial": np.nan}
    lo, hi = bootstrap_diff_ci(a, b, resamples, seed)
    with np.errstate(divide="ignore", invalid="ignore"):  # two constant groups: Welch's t is undefined (NaN)
        w = stats.ttest_ind(a, b, equal_var=False)
    t, p = float(w.statistic), float(w.pvalue)
    mw = stats.mannwhitneyu(a, b, alternative="two-sided")
    return {**out, "ci_low": lo, "ci_high": hi, "welch_t": t, "welch_p": p,
            "mwu_u": float(mw.statistic), "mwu_p": float(mw.pvalue),
            "rank_biserial": rank_biserial(float(mw.statistic), len(a), len(b))}


def mean_sd(x) -> str:
    x = np.asarray(x, float)
    x = x[~np.isnan(x)]
    if not len(x):
        return "–"
    return f"{x.mean():.2f} ± {x.std(ddof=1):.2f}" if len(x) > 1 else f"{x.mean():.2f}"
