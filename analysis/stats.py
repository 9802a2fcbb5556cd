"""Paired statistics for the paper's tables (paper Section 4 and Appendix A; SPEC section 6).

Every comparison is paired over questions: conditions A and B were run on the same n
questions, so the bootstrap resamples *questions* and applies each resample to both
conditions at once.  One call draws its resample indices once (``numpy.random.Generator``
over ``PCG64(seed)``) and every statistic of that call -- all metrics, all pairs, the
accuracy difference -- is computed on the same resamples, so intervals are mutually
consistent and re-running with the same seed reproduces them bit for bit.

Conventions a reader of the tables must know (also in the docstrings below):

* Confidence intervals are percentile intervals (the 2.5th and 97.5th percentiles of the
  bootstrap distribution for 95%), with numpy's default linear interpolation -- the same
  definition as ``scipy.stats.bootstrap(method="percentile")``.
* One-sided bootstrap p-values use the ``(count + 1) / (B + 1)`` convention (Davison &
  Hinkley 1997, eq. 4.11; North et al. 2002): never zero, so it can enter a Holm family,
  and valid as a Monte Carlo p-value.  ``count`` counts the resamples that are *not* on the
  hypothesis's side of the threshold, ties included.  The interval rule "upper 95% bound
  < c" and "p < 0.025" agree except when c lies within one order statistic of the bound.
* Ratios use sums (sum A / sum B == mean A / mean B on paired data).  A zero denominator
  gives ``inf`` (numerator > 0) or ``nan`` (0/0); ``nan`` resamples are left out of the
  interval and of p and counted in ``n_undefined``.
* Median per-question ratio: questions with B_i = 0 are excluded by default
  (``zero_denominator="exclude"``, count in ``n_excluded``); ``"inf"`` keeps them as
  A_i/0 = inf (and 0/0 = 1, equal cost).  See :func:`median_ratio`.
* Accuracy differences are in percentage points, 100 x (mean A - mean B).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, fields
from typing import Any, Collection, Iterable, Mapping, Sequence

import numpy as np

__all__ = [
    "DEFAULT_RESAMPLES",
    "PRIMARY_RESAMPLES",
    "CONFIDENCE",
    "STATISTICS",
    "Estimate",
    "Share",
    "McNemar",
    "HolmRow",
    "NonInferiority",
    "IntersectionUnion",
    "Agreement",
    "PairComparison",
    "ROW_FIELDS",
    "make_rng",
    "resample_indices",
    "resample_counts",
    "percentile_ci",
    "bootstrap_p",
    "compare_many",
    "compare_pair",
    "ratio_of_means",
    "median_ratio",
    "share_cheaper",
    "accuracy_difference",
    "mcnemar_exact",
    "holm",
    "non_inferiority",
    "intersection_union",
    "coefficient_of_variation",
    "agreement",
]

DEFAULT_RESAMPLES = 10_000
PRIMARY_RESAMPLES = 100_000
CONFIDENCE = 0.95
#: statistics :func:`compare_many` can compute per metric and pair
STATISTICS = ("ratio", "median_ratio", "share")
_ZERO_DENOMINATOR = ("exclude", "inf")
# rows of the (B, n) resample matrix drawn per step; bounds memory, not results
_DRAW_ELEMENTS = 1 << 20


# --------------------------------------------------------------------------- validation


def _check_values(x: Any, name: str, *, nonneg: bool = True) -> np.ndarray:
    """1-d finite float array; per-question costs must be >= 0 for ratios to mean anything."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-d array of per-question values, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name}: empty array (no questions)")
    if not np.all(np.isfinite(arr)):
        bad = int(np.count_nonzero(~np.isfinite(arr)))
        raise ValueError(f"{name}: {bad} non-finite value(s) (NaN or inf); fill or drop them explicitly")
    if nonneg and np.any(arr < 0):
        raise ValueError(f"{name}: negative values; per-question costs must be >= 0")
    return arr


def _check_binary(x: Any, name: str) -> np.ndarray:
    """Correctness must be 0/1 (a failed run counts as 0, Appendix F(vi)); anything else is a bug upstream."""
    arr = _check_values(x, name)
    if not np.all((arr == 0) | (arr == 1)):
        raise ValueError(f"{name}: correctness must be 0/1 (or bool)")
    return arr


def _check_same_length(*pairs: tuple[str, np.ndarray]) -> int:
    n = {name: arr.shape[0] for name, arr in pairs}
    if len(set(n.values())) != 1:
        raise ValueError(f"paired arrays must have equal length (same questions), got {n}")
    return next(iter(n.values()))


def _check_matrix(x: Any, name: str, n: int | None, k: int | None, *, binary: bool = False) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"{name}: expected shape (n_questions, n_conditions), got {arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError(f"{name}: no questions")
    if (n is not None and arr.shape[0] != n) or (k is not None and arr.shape[1] != k):
        raise ValueError(f"{name}: shape {arr.shape} does not match ({n}, {k})")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: non-finite value(s) (NaN or inf)")
    if np.any(arr < 0):
        raise ValueError(f"{name}: negative values; per-question costs must be >= 0")
    if binary and not np.all((arr == 0) | (arr == 1)):
        raise ValueError(f"{name}: correctness must be 0/1")
    return arr


def _check_settings(n_resamples: int, seed: int, confidence: float) -> None:
    if not isinstance(n_resamples, numbers.Integral) or isinstance(n_resamples, bool) or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    if not isinstance(seed, numbers.Integral) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if not (0.0 < float(confidence) < 1.0):
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")


# --------------------------------------------------------------------------- resampling


def make_rng(seed: int) -> np.random.Generator:
    """The one generator type of the module, so a seed in a table always means the same stream."""
    return np.random.Generator(np.random.PCG64(seed))


def resample_indices(n: int, n_resamples: int, seed: int) -> np.ndarray:
    """The (n_resamples, n) matrix of question indices a call with this seed uses.

    Row b lists the questions of resample b.  :func:`resample_counts` draws the same
    stream in bounded steps; this full matrix exists for checking and for callers who
    need the raw indices.
    """
    if n < 1:
        raise ValueError("n must be >= 1")
    return make_rng(seed).integers(0, n, size=(n_resamples, n), dtype=np.int32)


_COUNTS_CACHE: dict[tuple, np.ndarray] = {}
_COUNTS_CACHE_BYTES = 256 << 20  # draws kept, oldest dropped first: the relabelling simulation decides every
# relabelling at the registered resamples on the report's own draw, so redrawing it each time would dominate


def resample_counts(n: int, n_resamples: int, seed: int, *, chunk_rows: int | None = None) -> np.ndarray:
    """How often each question occurs in each resample, shape (n, n_resamples).

    WHY counts: every statistic here is a function of the multiset of resampled questions,
    so (n x B) small integers replace (B x n x conditions) doubles: means become one matrix
    product and medians a cumulative count.  Drawn in row chunks from one generator, which
    yields the same indices as :func:`resample_indices` (checked by the tests).
    """
    if n < 1:
        raise ValueError("n must be >= 1")
    key = (n, n_resamples, seed, chunk_rows)
    if key in _COUNTS_CACHE:
        return _COUNTS_CACHE[key]
    rng = make_rng(seed)
    dtype = np.uint16 if n < 2**16 else np.uint32
    counts = np.empty((n, n_resamples), dtype=dtype)
    rows = chunk_rows or max(1, _DRAW_ELEMENTS // n)
    for s in range(0, n_resamples, rows):
        c = min(rows, n_resamples - s)
        idx = rng.integers(0, n, size=(c, n), dtype=np.int32)
        flat = (idx + (np.arange(c, dtype=np.int64) * n)[:, None]).ravel()
        counts[:, s : s + c] = np.bincount(flat, minlength=c * n).reshape(c, n).T
    if counts.nbytes <= _COUNTS_CACHE_BYTES // 2:  # read-only, so a cached draw cannot be changed by a caller
        counts.flags.writeable = False
        while _COUNTS_CACHE and sum(c.nbytes for c in _COUNTS_CACHE.values()) + counts.nbytes > _COUNTS_CACHE_BYTES:
            _COUNTS_CACHE.pop(next(iter(_COUNTS_CACHE)))
        _COUNTS_CACHE[key] = counts
    return counts


# --------------------------------------------------------------------------- intervals and p


def _quantile(sorted_x: np.ndarray, q: float) -> float:
    """Linear-interpolation quantile (numpy's default) that tolerates +inf order statistics."""
    h = (sorted_x.size - 1) * q
    lo, hi = math.floor(h), math.ceil(h)
    xl, xh = sorted_x[lo], sorted_x[hi]
    if lo == hi or xl == xh:
        return float(xl)
    return float(xl + (h - lo) * (xh - xl))


def percentile_ci(boot: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float, int]:
    """(lo, hi, n_undefined): percentile interval of a bootstrap distribution, NaN draws left out."""
    boot = np.asarray(boot, dtype=np.float64).ravel()
    defined = boot[~np.isnan(boot)]
    n_undefined = boot.size - defined.size
    if defined.size == 0:
        return math.nan, math.nan, n_undefined
    alpha = (1.0 - confidence) / 2.0
    if np.all(np.isfinite(defined)):
        lo, hi = np.quantile(defined, [alpha, 1.0 - alpha])
        return float(lo), float(hi), n_undefined
    s = np.sort(defined)
    return _quantile(s, alpha), _quantile(s, 1.0 - alpha), n_undefined


def bootstrap_p(boot: np.ndarray, threshold: float, alternative: str) -> float:
    """One-sided bootstrap p for an interval rule, ``(count + 1) / (B + 1)``.

    ``alternative="less"``: the hypothesis is statistic < threshold (rule "upper bound <
    threshold", e.g. H1b token ratio < 0.7); count = draws >= threshold.
    ``alternative="greater"``: statistic > threshold (rule "lower bound > threshold", e.g.
    non-inferiority); count = draws <= threshold.  Draws equal to the threshold count
    against the hypothesis (conservative).  NaN draws are left out of both count and B.
    """
    boot = np.asarray(boot, dtype=np.float64).ravel()
    boot = boot[~np.isnan(boot)]
    if boot.size == 0:
        return math.nan
    if alternative == "less":
        count = int(np.count_nonzero(boot >= threshold))
    elif alternative == "greater":
        count = int(np.count_nonzero(boot <= threshold))
    else:
        raise ValueError("alternative must be 'less' or 'greater'")
    return (count + 1) / (boot.size + 1)


# --------------------------------------------------------------------------- results


def _as_dict(obj: Any) -> dict[str, Any]:
    """Flat field dict for a CSV row; bootstrap draws are never part of a row."""
    return {f.name: getattr(obj, f.name) for f in fields(obj) if f.name != "boot"}


@dataclass(frozen=True)
class Estimate:
    """A point estimate on the observed questions with its paired-bootstrap percentile CI."""

    statistic: str
    estimate: float
    lo: float
    hi: float
    n: int
    n_resamples: int
    confidence: float
    seed: int
    n_excluded: int = 0  # questions left out (median ratio with B_i = 0)
    n_undefined: int = 0  # resamples where the statistic is undefined (0/0); not in lo, hi, p
    boot: np.ndarray | None = field(default=None, repr=False, compare=False)

    def p_value(self, threshold: float, alternative: str) -> float:
        """One-sided bootstrap p for an interval rule; see :func:`bootstrap_p`."""
        if self.boot is None:
            raise ValueError("bootstrap draws were not kept; rerun with keep_boot=True")
        return bootstrap_p(self.boot, threshold, alternative)

    def as_dict(self) -> dict[str, Any]:
        return _as_dict(self)


@dataclass(frozen=True)
class Share:
    """Shares of questions where A is lower than B (cheaper), equal (ties), higher (dearer).

    ``lo``/``hi`` are the percentile CI of ``cheaper``; ties are reported, never split.
    """

    cheaper: float
    ties: float
    dearer: float
    lo: float
    hi: float
    n: int
    n_resamples: int
    confidence: float
    seed: int
    tie_tol: float = 0.0
    boot: np.ndarray | None = field(default=None, repr=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        return _as_dict(self)


@dataclass(frozen=True)
class McNemar:
    """Exact McNemar test; a_only = A correct and B wrong, b_only = the reverse."""

    n: int
    both: int
    a_only: int
    b_only: int
    neither: int
    p: float

    def as_dict(self) -> dict[str, Any]:
        return _as_dict(self)


@dataclass(frozen=True)
class HolmRow:
    name: str
    p: float
    p_holm: float
    reject: bool
    alpha: float


@dataclass(frozen=True)
class NonInferiority:
    """Accuracy non-inferiority: holds when the lower CI bound of A - B (points) > -margin."""

    margin: float
    estimate: float
    lo: float
    hi: float
    holds: bool
    p: float  # one-sided bootstrap p of "difference > -margin" (nan if draws not kept)
    confidence: float

    def as_dict(self) -> dict[str, Any]:
        return _as_dict(self)


@dataclass(frozen=True)
class IntersectionUnion:
    """A hypothesis that needs all its conditions: p = max of the components' p."""

    p: float
    holds: bool
    alpha: float
    limiting: str  # the component with the largest p
    components: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        return _as_dict(self)


@dataclass(frozen=True)
class Agreement:
    """Raw agreement and Cohen's kappa of two raters (e.g. two judges, Appendix E)."""

    n: int
    agreement: float
    kappa: float  # nan when chance agreement is 1 (both raters constant and equal)
    kappa_se: float
    categories: tuple

    def as_dict(self) -> dict[str, Any]:
        d = _as_dict(self)
        d["categories"] = "|".join(map(str, self.categories))
        return d


ROW_FIELDS = (
    "a", "b", "metric", "statistic", "estimate", "lo", "hi", "n", "n_resamples", "confidence",
    "seed", "n_excluded", "n_undefined", "ties", "dearer", "p", "a_only", "b_only",
)


@dataclass
class PairComparison:
    """All statistics of one pair (A vs B), computed on one shared set of resamples."""

    a: str
    b: str
    n: int
    n_resamples: int
    confidence: float
    seed: int
    ratio: dict[str, Estimate] = field(default_factory=dict)
    median_ratio: dict[str, Estimate] = field(default_factory=dict)
    share: dict[str, Share] = field(default_factory=dict)
    accuracy: Estimate | None = None
    mcnemar: McNemar | None = None

    def rows(self) -> list[dict[str, Any]]:
        """Flat CSV rows with the columns of ``ROW_FIELDS`` (missing values are None)."""
        out: list[dict[str, Any]] = []

        def row(**kw: Any) -> None:
            r = dict.fromkeys(ROW_FIELDS)
            r.update(a=self.a, b=self.b, n=self.n, n_resamples=self.n_resamples,
                     confidence=self.confidence, seed=self.seed)
            r.update(kw)
            out.append(r)

        for metric in dict.fromkeys([*self.ratio, *self.median_ratio, *self.share]):
            if metric in self.ratio:
                e = self.ratio[metric]
                row(metric=metric, statistic="ratio_of_means", estimate=e.estimate, lo=e.lo, hi=e.hi,
                    n_undefined=e.n_undefined)
            if metric in self.median_ratio:
                e = self.median_ratio[metric]
                row(metric=metric, statistic="median_ratio", estimate=e.estimate, lo=e.lo, hi=e.hi,
                    n_excluded=e.n_excluded, n_undefined=e.n_undefined)
            if metric in self.share:
                s = self.share[metric]
                row(metric=metric, statistic="share_cheaper", estimate=s.cheaper, lo=s.lo, hi=s.hi,
                    ties=s.ties, dearer=s.dearer)
        if self.accuracy is not None:
            e, m = self.accuracy, self.mcnemar
            row(metric="correct", statistic="accuracy_diff_points", estimate=e.estimate, lo=e.lo, hi=e.hi,
                p=None if m is None else m.p, a_only=None if m is None else m.a_only,
                b_only=None if m is None else m.b_only)
        return out


# --------------------------------------------------------------------------- engine


def _median_ratios(
    a: np.ndarray, b: np.ndarray, zero_denominator: str
) -> tuple[np.ndarray, np.ndarray]:
    """Per-question ratios A_i/B_i and the mask of questions that enter the median."""
    if zero_denominator not in _ZERO_DENOMINATOR:
        raise ValueError(f"zero_denominator must be one of {_ZERO_DENOMINATOR}")
    r = np.full(a.shape, np.nan)
    pos = b > 0
    r[pos] = a[pos] / b[pos]
    if zero_denominator == "exclude":
        return r, pos
    r[~pos & (a > 0)] = np.inf
    r[~pos & (a == 0)] = 1.0
    return r, np.ones_like(pos)


def _weighted_median_boot(counts: np.ndarray, r: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Median of r over each resample, from the counts alone.

    WHY: sorting r once and walking it while accumulating counts finds the k-th smallest
    resampled value for all B resamples in O(n x B) additions -- several times faster than
    np.median on the materialised (B, n) matrix and with B-sized temporaries only.
    Equal to np.median(r[idx], axis=1) (restricted to valid questions); see the tests.
    """
    order = np.flatnonzero(valid)
    order = order[np.argsort(r[order], kind="stable")]
    r_sorted = r[order]
    nb = counts.shape[1]
    if order.size == 0:
        return np.full(nb, np.nan)
    m: np.ndarray | int
    if order.size == counts.shape[0]:
        m = counts.shape[0]  # every question counts: the middle ranks are scalars
        k1: np.ndarray | int = (m - 1) // 2
        k2: np.ndarray | int = m // 2
    else:
        m = counts[order].sum(axis=0, dtype=np.int64)
        k1 = ((m - 1) // 2).astype(np.int32)  # -1 where m == 0; never matched, set to nan below
        k2 = (m // 2).astype(np.int32)
    # acc and positions fit the counts' dtype (<= n); preallocated buffers, in-place ufuncs
    acc = np.zeros(nb, dtype=counts.dtype)
    pos1 = np.zeros(nb, dtype=counts.dtype)
    pos2 = pos1 if (np.isscalar(k1) and k1 == k2) else np.zeros(nb, dtype=counts.dtype)
    hit = np.empty(nb, dtype=bool)
    for j in order[:-1]:  # after the last position acc == m > k2, so it never counts
        np.add(acc, counts[j], out=acc)
        np.less_equal(acc, k1, out=hit)
        np.add(pos1, hit, out=pos1)
        if pos2 is not pos1:
            np.less_equal(acc, k2, out=hit)
            np.add(pos2, hit, out=pos2)
    med = 0.5 * (r_sorted[pos1] + r_sorted[pos2])
    if not np.isscalar(m):
        med[m == 0] = np.nan
    return med


def _estimate(name: str, est: float, boot: np.ndarray, *, n: int, n_resamples: int, confidence: float,
              seed: int, keep_boot: bool, n_excluded: int = 0) -> Estimate:
    lo, hi, n_undefined = percentile_ci(boot, confidence)
    return Estimate(name, float(est), lo, hi, n, n_resamples, confidence, seed, n_excluded, n_undefined,
                    boot if keep_boot else None)


def _ratio(num: np.ndarray | float, den: np.ndarray | float) -> Any:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.true_divide(num, den)


def compare_many(
    metrics: Mapping[str, Any],
    *,
    pairs: Sequence[tuple[str, str]],
    seed: int,
    conditions: Sequence[str] | None = None,
    correct: Any = None,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = CONFIDENCE,
    statistics: Collection[str] = STATISTICS,
    zero_denominator: str = "exclude",
    tie_tol: float = 0.0,
    keep_boot: bool = False,
    chunk_rows: int | None = None,
) -> dict[tuple[str, str], PairComparison]:
    """Compare many (A, B) pairs of conditions on one shared set of resamples.

    ``metrics`` maps a metric name (tokens, cost, time, model_calls, ...) to a matrix of
    shape (n_questions, n_conditions) -- an array, or a DataFrame whose columns name the
    conditions; ``conditions`` names the columns (required for arrays).  ``correct`` is an
    optional 0/1 matrix of the same shape; with it each pair also gets the accuracy
    difference (points, CI) and exact McNemar.  ``statistics`` picks from
    ``("ratio", "median_ratio", "share")``.

    WHY one call for many pairs: the resamples are drawn once (B x n counts), means of all
    conditions in a resample are one matrix product, and every pair reads the same draws,
    so all rows of a table are paired with each other as well.  Memory is bounded by
    ``chunk_rows`` (draw step) and internal column chunks; results do not depend on either.
    ``keep_boot=True`` keeps every bootstrap distribution (needed for one-sided p and
    non-inferiority p), costing 8 x B bytes per statistic.
    """
    _check_settings(n_resamples, seed, confidence)
    if not metrics and correct is None:
        raise ValueError("nothing to compare: give metrics and/or correct")
    unknown = set(statistics) - set(STATISTICS)
    if unknown:
        raise ValueError(f"unknown statistics {sorted(unknown)}; choose from {STATISTICS}")
    if zero_denominator not in _ZERO_DENOMINATOR:
        raise ValueError(f"zero_denominator must be one of {_ZERO_DENOMINATOR}")
    if tie_tol < 0 or not math.isfinite(tie_tol):
        raise ValueError("tie_tol must be a finite number >= 0")

    if conditions is None:
        first = next(iter(metrics.values())) if metrics else correct
        if not hasattr(first, "columns"):
            raise ValueError("conditions must be given when metrics are plain arrays")
        conditions = list(first.columns)
    conditions = list(conditions)
    if len(set(conditions)) != len(conditions):
        raise ValueError("condition names must be unique")
    col = {c: i for i, c in enumerate(conditions)}
    k = len(conditions)

    def align(x: Any) -> Any:  # DataFrames are taken in the order of `conditions`
        return x[conditions] if hasattr(x, "columns") else x

    mats: dict[str, np.ndarray] = {}
    n: int | None = None
    for name, x in metrics.items():
        mats[name] = _check_matrix(align(x), f"metrics[{name!r}]", n, k)
        n = mats[name].shape[0]
    corr = None if correct is None else _check_matrix(align(correct), "correct", n, k, binary=True)
    if corr is not None:
        n = corr.shape[0]
    assert n is not None

    pairs = [tuple(p) for p in pairs]
    if not pairs:
        raise ValueError("no pairs given")
    for a, b in pairs:
        if a not in col or b not in col:
            raise ValueError(f"pair ({a!r}, {b!r}) names a condition not in {conditions}")
        if a == b:
            raise ValueError(f"pair ({a!r}, {b!r}) compares a condition with itself")
    if len(set(pairs)) != len(pairs):
        raise ValueError("duplicate pairs")
    ia = np.array([col[a] for a, _ in pairs])
    ib = np.array([col[b] for _, b in pairs])

    counts = resample_counts(n, n_resamples, seed, chunk_rows=chunk_rows)
    common = dict(n=n, n_resamples=n_resamples, confidence=confidence, seed=seed, keep_boot=keep_boot)
    out = {p: PairComparison(p[0], p[1], n, n_resamples, confidence, seed) for p in pairs}

    def products(mat: np.ndarray) -> np.ndarray:
        """(columns, B) = mat.T @ counts: the per-resample sums.

        WHY not a matrix product: BLAS kernels block and vectorise the sum over questions
        differently on each CPU (and by chunk), so the last bits of a reported interval would
        depend on the machine. Accumulating question by question, in question order, with
        elementwise IEEE multiply and add gives the same bits everywhere, for any chunking."""
        res = np.zeros((mat.shape[1], n_resamples))
        tmp = np.empty_like(res)
        row = np.empty(n_resamples)
        for i in range(n):
            row[:] = counts[i]
            np.multiply(mat[i][:, None], row[None, :], out=tmp)
            res += tmp
        return res

    for name, v in mats.items():
        if "ratio" in statistics:
            sums = products(v)
            tot = v.sum(axis=0)
            for j, p in enumerate(pairs):
                out[p].ratio[name] = _estimate("ratio_of_means", _ratio(tot[ia[j]], tot[ib[j]]),
                                               _ratio(sums[ia[j]], sums[ib[j]]), **common)
            del sums
        if "share" in statistics:
            va, vb = v[:, ia], v[:, ib]
            cheaper = (va < vb - tie_tol).astype(np.float64)
            dearer = va > vb + tie_tol
            ties = ~(cheaper.astype(bool) | dearer)
            boot = products(cheaper) / n
            for j, p in enumerate(pairs):
                lo, hi, _ = percentile_ci(boot[j], confidence)
                out[p].share[name] = Share(float(cheaper[:, j].mean()), float(ties[:, j].mean()),
                                           float(dearer[:, j].mean()), lo, hi, n, n_resamples, confidence, seed,
                                           tie_tol, boot[j].copy() if keep_boot else None)
            del boot
        if "median_ratio" in statistics:
            for j, p in enumerate(pairs):
                r, valid = _median_ratios(v[:, ia[j]], v[:, ib[j]], zero_denominator)
                est = float(np.median(r[valid])) if valid.any() else math.nan
                boot = _weighted_median_boot(counts, r, valid)
                out[p].median_ratio[name] = _estimate("median_ratio", est, boot,
                                                      n_excluded=int(n - valid.sum()), **common)

    if corr is not None:
        # 0/1 labels: every per-resample sum is an integer below 2^53, exact in any summation order, so a matrix
        # product gives the same bits as `products` on every machine, and in a fraction of its time
        sums = np.empty((corr.shape[1], n_resamples))
        step = max(1, _DRAW_ELEMENTS // n)  # column blocks: a float copy of all counts would be 8 x n x B bytes
        for s in range(0, n_resamples, step):
            sums[:, s : s + step] = corr.T @ counts[:, s : s + step].astype(np.float64)
        acc = corr.mean(axis=0) * 100.0
        for j, p in enumerate(pairs):
            out[p].accuracy = _estimate("accuracy_diff_points", acc[ia[j]] - acc[ib[j]],
                                        (sums[ia[j]] - sums[ib[j]]) * (100.0 / n), **common)
            out[p].mcnemar = mcnemar_exact(corr[:, ia[j]], corr[:, ib[j]])
    return out


def compare_pair(
    a: Mapping[str, Any],
    b: Mapping[str, Any],
    *,
    seed: int,
    correct_a: Any = None,
    correct_b: Any = None,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = CONFIDENCE,
    statistics: Collection[str] = STATISTICS,
    zero_denominator: str = "exclude",
    tie_tol: float = 0.0,
    keep_boot: bool = True,
    names: tuple[str, str] = ("A", "B"),
) -> PairComparison:
    """One pair, all metrics: ``a`` and ``b`` map metric name -> per-question values.

    ``names`` label the two conditions in :meth:`PairComparison.rows`.
    Same resamples as :func:`compare_many` with the same seed and n, so a table built
    either way gives the same numbers (up to floating-point summation order).
    """
    if set(a) != set(b):
        raise ValueError(f"A and B must have the same metrics, got {sorted(a)} and {sorted(b)}")
    if (correct_a is None) != (correct_b is None):
        raise ValueError("give both correct_a and correct_b, or neither")
    metrics = {}
    for name in a:
        xa, xb = _check_values(a[name], f"a[{name!r}]"), _check_values(b[name], f"b[{name!r}]")
        _check_same_length(("a", xa), ("b", xb))
        metrics[name] = np.column_stack([xa, xb])
    correct = None
    if correct_a is not None:
        ca, cb = _check_binary(correct_a, "correct_a"), _check_binary(correct_b, "correct_b")
        _check_same_length(("correct_a", ca), ("correct_b", cb))
        correct = np.column_stack([ca, cb])
    lengths = {m.shape[0] for m in metrics.values()} | ({correct.shape[0]} if correct is not None else set())
    if len(lengths) > 1:
        raise ValueError(f"all metrics and correctness must cover the same questions, got lengths {lengths}")
    if not metrics and correct is None:
        raise ValueError("nothing to compare: give metrics and/or correctness")
    pair = (str(names[0]), str(names[1]))
    res = compare_many(metrics, pairs=[pair], conditions=list(pair), correct=correct, seed=seed,
                       n_resamples=n_resamples, confidence=confidence, statistics=statistics,
                       zero_denominator=zero_denominator, tie_tol=tie_tol, keep_boot=keep_boot)
    return res[pair]


# --------------------------------------------------------------------------- single statistics


def _single(a: Any, b: Any, statistic: str, **kw: Any) -> PairComparison:
    xa, xb = _check_values(a, "a"), _check_values(b, "b")
    _check_same_length(("a", xa), ("b", xb))
    return compare_pair({"x": xa}, {"x": xb}, statistics=(statistic,), **kw)


def ratio_of_means(
    a: Any, b: Any, *, seed: int, n_resamples: int = DEFAULT_RESAMPLES, confidence: float = CONFIDENCE,
    keep_boot: bool = True,
) -> Estimate:
    """mean(A) / mean(B) with a paired percentile CI (the paper's "0.51x the tokens")."""
    return _single(a, b, "ratio", seed=seed, n_resamples=n_resamples, confidence=confidence,
                   keep_boot=keep_boot).ratio["x"]


def median_ratio(
    a: Any, b: Any, *, seed: int, n_resamples: int = DEFAULT_RESAMPLES, confidence: float = CONFIDENCE,
    zero_denominator: str = "exclude", keep_boot: bool = True,
) -> Estimate:
    """Median over questions of A_i / B_i, with a paired percentile CI.

    B_i = 0 has no finite ratio.  ``"exclude"`` (default) leaves such questions out of the
    median, in the estimate and in every resample (a resample's median is over its
    resampled questions with B_i > 0, with multiplicity); ``n_excluded`` reports how many.
    ``"inf"`` keeps them, A_i/0 = +inf (A dearer than any finite ratio) and 0/0 = 1 (equal).
    A resample made only of excluded questions is undefined (``n_undefined``).
    """
    return _single(a, b, "median_ratio", seed=seed, n_resamples=n_resamples, confidence=confidence,
                   zero_denominator=zero_denominator, keep_boot=keep_boot).median_ratio["x"]


def share_cheaper(
    a: Any, b: Any, *, seed: int, n_resamples: int = DEFAULT_RESAMPLES, confidence: float = CONFIDENCE,
    tie_tol: float = 0.0, keep_boot: bool = True,
) -> Share:
    """Share of questions with A_i < B_i (cheaper), |A_i - B_i| <= tie_tol (ties), else dearer."""
    return _single(a, b, "share", seed=seed, n_resamples=n_resamples, confidence=confidence,
                   tie_tol=tie_tol, keep_boot=keep_boot).share["x"]


def accuracy_difference(
    correct_a: Any, correct_b: Any, *, seed: int, n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = CONFIDENCE, keep_boot: bool = True,
) -> Estimate:
    """100 x (accuracy A - accuracy B) in points, with a paired percentile CI."""
    ca, cb = _check_binary(correct_a, "correct_a"), _check_binary(correct_b, "correct_b")
    _check_same_length(("correct_a", ca), ("correct_b", cb))
    res = compare_many({}, pairs=[("A", "B")], conditions=["A", "B"], correct=np.column_stack([ca, cb]),
                       seed=seed, n_resamples=n_resamples, confidence=confidence, keep_boot=keep_boot)
    acc = res[("A", "B")].accuracy
    assert acc is not None
    return acc


def mcnemar_exact(correct_a: Any, correct_b: Any) -> McNemar:
    """Exact (binomial) McNemar on the discordant pairs, via statsmodels.

    Two-sided p = min(1, 2 x P(Bin(b + c, 1/2) <= min(b, c))); 4 vs 0 gives 0.125.  With no
    discordant pair p = 1 (no evidence of a difference).
    """
    ca, cb = _check_binary(correct_a, "correct_a"), _check_binary(correct_b, "correct_b")
    n = _check_same_length(("correct_a", ca), ("correct_b", cb))
    ca, cb = ca.astype(bool), cb.astype(bool)
    both = int(np.count_nonzero(ca & cb))
    a_only = int(np.count_nonzero(ca & ~cb))
    b_only = int(np.count_nonzero(~ca & cb))
    neither = n - both - a_only - b_only
    from statsmodels.stats.contingency_tables import mcnemar  # here: importing statsmodels costs a dry run 0.8 s

    res = mcnemar(np.array([[both, a_only], [b_only, neither]]), exact=True)
    return McNemar(n, both, a_only, b_only, neither, float(res.pvalue))


# --------------------------------------------------------------------------- decisions


def holm(pvalues: Mapping[str, float] | Sequence[float], alpha: float = 0.05) -> list[HolmRow]:
    """Holm step-down adjustment over one family (the five primary hypotheses), as statsmodels' multipletests.

    Accepts a mapping name -> p (order kept) or a sequence (names "0", "1", ...).
    ``reject`` is statsmodels' step-down decision at ``alpha`` (the same as p_holm <= alpha
    except for rounding exactly at the boundary).
    """
    if isinstance(pvalues, Mapping):
        names, ps = [str(k) for k in pvalues], list(pvalues.values())
    else:
        ps = list(pvalues)
        names = [str(i) for i in range(len(ps))]
    arr = np.asarray(ps, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError("holm needs a non-empty 1-d family of p-values")
    if np.any(~np.isfinite(arr)) or np.any((arr < 0) | (arr > 1)):
        raise ValueError("p-values must be finite and in [0, 1]")
    if not (0 < alpha < 1):
        raise ValueError("alpha must be in (0, 1)")
    # statsmodels' Holm step-down (multipletests(method="holm")), written out: its implementation calls
    # gc.collect() on every call, which costs ~70 ms and the relabelling simulation runs Holm thousands of times
    order = np.argsort(arr, kind="mergesort")
    ps = arr[order]
    notreject = ps > alpha / np.arange(arr.size, 0, -1)
    first = int(np.argmax(notreject)) if notreject.any() else arr.size
    rej_sorted = np.arange(arr.size) < first
    adj_sorted = np.minimum(np.maximum.accumulate(ps * np.arange(arr.size, 0, -1)), 1.0)
    reject, p_adj = np.empty(arr.size, bool), np.empty(arr.size)
    reject[order], p_adj[order] = rej_sorted, adj_sorted
    return [HolmRow(nm, float(p), float(q), bool(r), alpha) for nm, p, q, r in zip(names, arr, p_adj, reject)]


def non_inferiority(diff: Estimate, margin: float) -> NonInferiority:
    """Non-inferiority of A's accuracy: lower CI bound of A - B (points) > -margin (e.g. 3).

    ``p`` is the one-sided bootstrap p of "difference > -margin" when the draws were kept.
    """
    if not (margin > 0 and math.isfinite(margin)):
        raise ValueError("margin must be a positive number of points, e.g. 3.0")
    p = diff.p_value(-margin, "greater") if diff.boot is not None else math.nan
    return NonInferiority(float(margin), diff.estimate, diff.lo, diff.hi, bool(diff.lo > -margin), p,
                          diff.confidence)


def intersection_union(pvalues: Mapping[str, float], alpha: float = 0.05) -> IntersectionUnion:
    """Intersection-union test: the hypothesis holds only if every component holds.

    WHY max: rejecting each component at level alpha and requiring all gives a level-alpha
    test of the intersection without any multiplicity correction; its p is the largest p.
    """
    if not pvalues:
        raise ValueError("intersection_union needs at least one component")
    comps = {str(k): float(v) for k, v in pvalues.items()}
    for k, v in comps.items():
        if not (0.0 <= v <= 1.0):
            raise ValueError(f"component {k!r}: p must be in [0, 1], got {v}")
    limiting = max(comps, key=lambda k: comps[k])
    p = comps[limiting]
    return IntersectionUnion(p, p <= alpha, alpha, limiting, comps)


def two_level_accuracy(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]] | None = None, *, seed: int,
                       n_resamples: int = DEFAULT_RESAMPLES, confidence: float = CONFIDENCE
                       ) -> tuple[Estimate, Estimate]:
    """(question-only, two-level) bootstrap of an accuracy in points (or of a - b, paired by question).

    ``a[i]`` holds question i's 0/1 labels over its repeats. Question-only resamples questions and
    keeps each one's mean over its repeats; two-level resamples questions, then each drawn question's
    repeats (with replacement, independently for a and b), so run-to-run variation is inside the
    interval. WHY binomial draws: the sum of c resampled means of r labels with k correct is
    Binomial(c r, k / r) / r, so both levels are one vectorised draw per question and resample."""
    def parts(x):
        r = np.array([len(v) for v in x], dtype=np.int64)
        if (r < 1).any():
            raise ValueError("every question needs at least one judged repeat")
        k = np.array([float(np.sum(v)) for v in x])
        return r, k / r

    ra, pa = parts(a)
    rb, pb = parts(b) if b is not None else (None, None)
    n = len(ra)
    if b is not None and len(rb) != n:
        raise ValueError("a and b must cover the same questions")
    counts = resample_counts(n, n_resamples, seed).astype(np.int64)  # questions x B
    rng = make_rng(seed + 1)
    q_only = (pa[:, None] * counts).sum(0) / n
    two = (rng.binomial(counts * ra[:, None], pa[:, None]) / ra[:, None]).sum(0) / n
    est = float(pa.mean())
    if b is not None:
        q_only = q_only - (pb[:, None] * counts).sum(0) / n
        two = two - (rng.binomial(counts * rb[:, None], pb[:, None]) / rb[:, None]).sum(0) / n
        est -= float(pb.mean())
    common = dict(n=n, n_resamples=n_resamples, confidence=confidence, seed=seed, keep_boot=False)
    return (_estimate("accuracy_points", 100 * est, 100 * q_only, **common),
            _estimate("accuracy_points_two_level", 100 * est, 100 * two, **common))


# --------------------------------------------------------------------------- descriptives


def coefficient_of_variation(x: Any, ddof: int = 1) -> float:
    """Per-question spread relative to the mean: std(ddof=1) / mean.

    Sample standard deviation (ddof=1) by default.  nan when the mean is 0 (undefined).
    """
    arr = _check_values(x, "x")
    if arr.size <= ddof:
        raise ValueError(f"need more than {ddof} value(s) for ddof={ddof}")
    mean = arr.mean()
    if mean == 0:
        return math.nan
    return float(arr.std(ddof=ddof) / mean)


def agreement(labels_a: Iterable[Any], labels_b: Iterable[Any]) -> Agreement:
    """Raw agreement and Cohen's kappa (statsmodels) of two label vectors on the same items.

    Labels may be any hashable values (bools, strings, ints); the table uses the union of
    both raters' categories.  kappa is nan when chance agreement is 1.
    """
    la, lb = list(labels_a), list(labels_b)
    if len(la) != len(lb):
        raise ValueError(f"label vectors must have equal length, got {len(la)} and {len(lb)}")
    if not la:
        raise ValueError("empty label vectors")
    for lab in (*la, *lb):
        if lab is None or (isinstance(lab, float) and math.isnan(lab)):
            raise ValueError("labels contain None or NaN")
    cats = sorted(set(la) | set(lb), key=lambda v: (type(v).__name__, v))
    pos = {c: i for i, c in enumerate(cats)}
    table = np.zeros((len(cats), len(cats)))
    for x, y in zip(la, lb):
        table[pos[x], pos[y]] += 1
    n = len(la)
    agree = float(np.trace(table) / n)
    if len(cats) == 1:
        return Agreement(n, agree, math.nan, math.nan, tuple(cats))
    from statsmodels.stats.inter_rater import cohens_kappa  # here: importing statsmodels costs a dry run 0.8 s

    with np.errstate(divide="ignore", invalid="ignore"):
        res = cohens_kappa(table)
    return Agreement(n, agree, float(res.kappa), float(res.std_kappa), tuple(cats))
