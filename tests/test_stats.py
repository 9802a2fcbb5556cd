"""Tests of analysis.stats against independently computed values.

Expected values come from closed forms, from direct (slow, obvious) computations on the
same resample indices, or from other libraries (scipy, statsmodels) -- never from running
analysis.stats itself and pasting its output.
"""

from __future__ import annotations

import gc
import math
import statistics as pystats
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from analysis import stats as S

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --------------------------------------------------------------------------- fixtures


def paired_costs(n: int = 180, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """Skewed, strongly correlated per-question token counts (A about half of B)."""
    rng = np.random.default_rng(seed)
    difficulty = rng.lognormal(9.0, 1.0, n)
    b = difficulty * rng.lognormal(0.0, 0.3, n)
    a = 0.5 * difficulty * rng.lognormal(0.0, 0.3, n)
    return a, b


def correctness(n: int = 180, seed: int = 11) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    base = rng.random(n) < 0.9
    flip = rng.random(n) < 0.08
    return base.astype(float), np.where(flip, ~base, base).astype(float)


# --------------------------------------------------------------------------- resampling


def test_resample_indices_are_pcg64_integers():
    idx = S.resample_indices(50, 200, seed=3)
    expected = np.random.Generator(np.random.PCG64(3)).integers(0, 50, size=(200, 50), dtype=np.int32)
    assert idx.shape == (200, 50)
    np.testing.assert_array_equal(idx, expected)


@pytest.mark.parametrize("n,chunk", [(180, None), (180, 7), (13, 1), (13, 999), (1, 3)])
def test_counts_are_bincounts_of_the_indices(n, chunk):
    """Chunked drawing must give exactly the single-draw index matrix (same stream)."""
    B = 257
    idx = S.resample_indices(n, B, seed=5)
    counts = S.resample_counts(n, B, seed=5, chunk_rows=chunk)
    direct = np.stack([np.bincount(row, minlength=n) for row in idx], axis=1)
    np.testing.assert_array_equal(counts, direct)
    assert np.all(counts.sum(axis=0) == n)


# --------------------------------------------------------------------------- ratio of means


@pytest.mark.parametrize("c", [2.0, 0.5, 0.7, 1.0])
def test_constant_ratio_has_zero_width_ci(c):
    b = np.random.default_rng(0).lognormal(8, 1, 90)
    e = S.ratio_of_means(c * b, b, seed=1, n_resamples=500)
    assert e.estimate == pytest.approx(c, rel=1e-12)
    assert e.lo == pytest.approx(c, rel=1e-12) and e.hi == pytest.approx(c, rel=1e-12)
    assert e.hi - e.lo < 1e-12


def test_ratio_boot_equals_direct_computation_on_same_indices():
    a, b = paired_costs(60)
    B = 2000
    e = S.ratio_of_means(a, b, seed=9, n_resamples=B)
    idx = S.resample_indices(60, B, seed=9)
    direct = a[idx].mean(axis=1) / b[idx].mean(axis=1)
    np.testing.assert_allclose(e.boot, direct, rtol=1e-12)
    assert e.estimate == pytest.approx(a.mean() / b.mean(), rel=1e-12)
    lo, hi = np.percentile(direct, [2.5, 97.5])
    assert e.lo == pytest.approx(lo, rel=1e-10) and e.hi == pytest.approx(hi, rel=1e-10)
    assert (e.n, e.n_resamples, e.seed, e.confidence) == (60, B, 9, 0.95)


def test_ratio_ci_matches_scipy_paired_percentile_bootstrap():
    """Same estimand by scipy's own resampler; tolerance is 0.1 bootstrap SE (~4 MC SDs)."""
    a, b = paired_costs(60, seed=21)
    B = 20_000
    ours = S.ratio_of_means(a, b, seed=2, n_resamples=B)

    def ratio(x, y, axis=-1):
        return x.mean(axis=axis) / y.mean(axis=axis)

    ref = sps.bootstrap((a, b), ratio, paired=True, vectorized=True, method="percentile",
                        n_resamples=B, confidence_level=0.95, rng=np.random.default_rng(123))
    se = np.std(ours.boot, ddof=1)
    assert se == pytest.approx(ref.standard_error, rel=0.05)
    assert abs(ours.lo - ref.confidence_interval.low) < 0.1 * se
    assert abs(ours.hi - ref.confidence_interval.high) < 0.1 * se
    # the tolerance is tight enough to tell paired from unpaired resampling on this data
    unpaired = sps.bootstrap((a, b), ratio, paired=False, vectorized=True, method="percentile",
                             n_resamples=B, confidence_level=0.95, rng=np.random.default_rng(123))
    assert abs(ours.lo - unpaired.confidence_interval.low) > 0.1 * se


def test_same_seed_identical_different_seed_different():
    a, b = paired_costs(40)
    e1 = S.ratio_of_means(a, b, seed=4, n_resamples=300)
    e2 = S.ratio_of_means(a, b, seed=4, n_resamples=300)
    e3 = S.ratio_of_means(a, b, seed=5, n_resamples=300)
    assert e1 == e2  # all reported fields
    np.testing.assert_array_equal(e1.boot, e2.boot)
    assert not np.array_equal(e1.boot, e3.boot)
    assert e1.estimate == e3.estimate


def test_swapping_a_and_b_inverts_the_ratio():
    a, b = paired_costs(80)
    B = 4000
    ab = S.ratio_of_means(a, b, seed=8, n_resamples=B)
    ba = S.ratio_of_means(b, a, seed=8, n_resamples=B)
    assert ba.estimate == pytest.approx(1 / ab.estimate, rel=1e-12)
    np.testing.assert_allclose(ba.boot, 1 / ab.boot, rtol=1e-12)
    # interpolated percentiles commute with 1/x only up to one gap between order statistics
    s = np.sort(ab.boot)
    h = (B - 1) * 0.975
    gap = 1 / s[math.floor(h)] - 1 / s[math.ceil(h)]
    assert abs(ba.lo - 1 / ab.hi) <= gap + 1e-12
    h = (B - 1) * 0.025
    gap = 1 / s[math.floor(h)] - 1 / s[math.ceil(h)]
    assert abs(ba.hi - 1 / ab.lo) <= gap + 1e-12


def test_zero_denominators_in_ratio_of_means():
    # sum B = 0: the ratio is +inf, not an error
    e = S.ratio_of_means([1.0, 2.0, 3.0], [0.0, 0.0, 0.0], seed=0, n_resamples=50)
    assert e.estimate == math.inf and e.lo == math.inf and e.hi == math.inf
    # resamples made only of questions with A = B = 0 are 0/0: left out and counted
    a = np.array([0.0, 0.0, 2.0])
    b = np.array([0.0, 0.0, 1.0])
    B = 400
    e = S.ratio_of_means(a, b, seed=1, n_resamples=B)
    idx = S.resample_indices(3, B, seed=1)
    undefined = ~np.any(idx == 2, axis=1)
    assert e.n_undefined == int(undefined.sum()) > 0
    assert e.lo == e.hi == 2.0


# --------------------------------------------------------------------------- median ratio


def test_median_ratio_boot_equals_np_median_of_resampled_ratios():
    a, b = paired_costs(180)
    B = 3000
    e = S.median_ratio(a, b, seed=6, n_resamples=B)
    idx = S.resample_indices(180, B, seed=6)
    r = a / b
    np.testing.assert_allclose(e.boot, np.median(r[idx], axis=1), rtol=1e-14)
    assert e.estimate == pytest.approx(np.median(r), rel=1e-14)
    assert e.n_excluded == 0


def test_median_ratio_constant_is_exact():
    b = np.random.default_rng(1).lognormal(5, 1, 51)
    e = S.median_ratio(0.25 * b, b, seed=0, n_resamples=300)
    assert e.estimate == e.lo == e.hi == 0.25


def test_median_ratio_excludes_zero_denominators():
    rng = np.random.default_rng(3)
    n, B = 40, 1500
    a = rng.integers(0, 5, n).astype(float)
    b = rng.integers(0, 5, n).astype(float)
    e = S.median_ratio(a, b, seed=2, n_resamples=B)
    keep = b > 0
    assert e.n_excluded == int((~keep).sum()) > 0
    assert e.estimate == pytest.approx(np.median(a[keep] / b[keep]))
    r = np.where(keep, a / np.where(keep, b, 1), np.nan)
    idx = S.resample_indices(n, B, seed=2)
    np.testing.assert_allclose(e.boot, np.nanmedian(r[idx], axis=1), rtol=1e-14)


def test_median_ratio_inf_mode():
    a = np.array([1.0, 0.0, 3.0, 2.0, 5.0])
    b = np.array([0.0, 0.0, 1.0, 4.0, 1.0])
    e = S.median_ratio(a, b, seed=0, n_resamples=400, zero_denominator="inf")
    r = np.array([np.inf, 1.0, 3.0, 0.5, 5.0])  # A/0 = inf, 0/0 = 1 by definition
    assert e.n_excluded == 0
    assert e.estimate == np.median(r) == 3.0
    idx = S.resample_indices(5, 400, seed=0)
    np.testing.assert_array_equal(e.boot, np.median(r[idx], axis=1))


@FAST
@given(
    data=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 3)), min_size=1, max_size=15),
    seed=st.integers(0, 2**32),
    mode=st.sampled_from(["exclude", "inf"]),
)
def test_median_ratio_matches_direct_on_random_small_data(data, seed, mode):
    a = np.array([x for x, _ in data], dtype=float)
    b = np.array([y for _, y in data], dtype=float)
    B = 40
    e = S.median_ratio(a, b, seed=seed, n_resamples=B, zero_denominator=mode)
    pos = b > 0
    if mode == "exclude":
        r = np.where(pos, a / np.where(pos, b, 1), np.nan)
    else:
        r = np.where(pos, a / np.where(pos, b, 1), np.where(a > 0, np.inf, 1.0))
    idx = S.resample_indices(len(a), B, seed=seed)
    rows = [row[~np.isnan(row)] for row in r[idx]]
    direct = np.array([np.median(x) if x.size else np.nan for x in rows])
    np.testing.assert_array_equal(e.boot, direct)
    assert e.n_undefined == sum(x.size == 0 for x in rows)


# --------------------------------------------------------------------------- share cheaper


def test_share_cheaper_counts_and_ties():
    a = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 10.0])
    b = np.array([2, 2, 4, 3, 5, 7, 6, 9, 9, 11.0])
    s = S.share_cheaper(a, b, seed=0, n_resamples=500)
    assert (s.cheaper, s.ties, s.dearer) == (0.5, 0.3, 0.2)
    idx = S.resample_indices(10, 500, seed=0)
    np.testing.assert_allclose(s.boot, (a < b)[idx].mean(axis=1), rtol=1e-14)
    t = S.share_cheaper(a, b + 0.01, seed=0, n_resamples=100, tie_tol=0.05)
    assert (t.cheaper, t.ties, t.dearer) == (0.5, 0.3, 0.2)
    assert s.lo <= s.cheaper <= s.hi


# --------------------------------------------------------------------------- accuracy


def test_accuracy_difference_closed_form_and_direct_boot():
    ca, cb = correctness(120)
    B = 2000
    e = S.accuracy_difference(ca, cb, seed=3, n_resamples=B)
    assert e.estimate == pytest.approx(100 * (ca.mean() - cb.mean()), abs=1e-12)
    idx = S.resample_indices(120, B, seed=3)
    np.testing.assert_allclose(e.boot, 100 * (ca[idx].mean(1) - cb[idx].mean(1)), atol=1e-10)
    same = S.accuracy_difference(ca, ca, seed=3, n_resamples=B)
    assert same.estimate == same.lo == same.hi == 0.0


def test_mcnemar_four_to_zero_gives_0125():
    ca = [1, 1, 1, 1, 0, 1, 0]
    cb = [0, 0, 0, 0, 0, 1, 0]
    m = S.mcnemar_exact(ca, cb)
    assert m.p == pytest.approx(2 * 0.5**4)  # = 0.125
    assert (m.both, m.a_only, m.b_only, m.neither) == (1, 4, 0, 2)
    assert S.mcnemar_exact(cb, ca).p == m.p


@FAST
@given(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=80))
def test_mcnemar_equals_binomial_test_on_discordant_pairs(pairs):
    ca = np.array([x for x, _ in pairs], dtype=float)
    cb = np.array([y for _, y in pairs], dtype=float)
    m = S.mcnemar_exact(ca, cb)
    n10 = int(np.sum((ca == 1) & (cb == 0)))
    n01 = int(np.sum((ca == 0) & (cb == 1)))
    assert (m.a_only, m.b_only) == (n10, n01)
    if n10 + n01 == 0:
        assert m.p == 1.0
    else:
        assert m.p == pytest.approx(sps.binomtest(n10, n10 + n01, 0.5).pvalue, rel=1e-9)


# --------------------------------------------------------------------------- one-sided p, NI, IUT, Holm


def test_bootstrap_p_closed_form():
    boot = np.arange(100) / 100  # 0.00 .. 0.99
    assert S.bootstrap_p(boot, 0.7, "less") == pytest.approx(31 / 101)  # 0.70..0.99 are >= 0.7
    assert S.bootstrap_p(boot, 0.7, "greater") == pytest.approx(72 / 101)  # 0.00..0.70 are <= 0.7
    assert S.bootstrap_p(boot, 2.0, "less") == pytest.approx(1 / 101)  # never 0
    assert S.bootstrap_p(np.array([0.1, np.nan, 0.9]), 0.5, "less") == pytest.approx(2 / 3)
    with pytest.raises(ValueError):
        S.bootstrap_p(boot, 0.5, "two-sided")


def test_one_sided_p_at_the_upper_bound_is_alpha_over_two():
    """p at c = upper 95% bound is 2.5% up to one order statistic (links the interval rule to p)."""
    a, b = paired_costs(180)
    B = 10_000
    e = S.ratio_of_means(a, b, seed=12, n_resamples=B)
    floor_h = math.floor((B - 1) * 0.975)
    above = B - floor_h  # draws at positions floor(h)..B-1
    assert (above - 1 + 1) / (B + 1) <= e.p_value(e.hi, "less") <= (above + 1) / (B + 1)
    # a threshold above the bound gives p below 2.5% + 1/(B+1); below it, above 2.5%
    assert e.p_value(e.hi * 1.01, "less") <= 0.025 + 1 / (B + 1)
    assert e.p_value(e.hi * 0.99, "less") > 0.025


def test_non_inferiority_rule():
    ca, cb = correctness(180)
    B = 2000
    d = S.accuracy_difference(ca, cb, seed=4, n_resamples=B)
    for margin in (1.0, 3.0, 10.0, 30.0):
        ni = S.non_inferiority(d, margin)
        assert ni.holds == (d.lo > -margin)
        idx = S.resample_indices(180, B, seed=4)
        direct = 100 * (ca[idx].mean(1) - cb[idx].mean(1))
        assert ni.p == pytest.approx((np.sum(direct <= -margin + 1e-9) + 1) / (B + 1))
    same = S.non_inferiority(S.accuracy_difference(ca, ca, seed=4, n_resamples=B), 3.0)
    assert same.holds and same.p == pytest.approx(1 / (B + 1))
    with pytest.raises(ValueError):
        S.non_inferiority(d, -3.0)


@FAST
@given(st.dictionaries(st.text(min_size=1, max_size=4), st.floats(0, 1), min_size=1, max_size=6))
def test_intersection_union_is_max_p(ps):
    r = S.intersection_union(ps, alpha=0.05)
    assert r.p == max(ps.values())
    assert ps[r.limiting] == r.p
    assert r.holds == all(p <= 0.05 for p in ps.values())


def holm_closed_form(p: np.ndarray) -> np.ndarray:
    m = p.size
    order = np.argsort(p, kind="stable")
    adj = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out = np.empty(m)
    out[order] = np.minimum(adj, 1.0)
    return out


@FAST
@given(st.lists(st.floats(0, 1), min_size=1, max_size=8))
def test_holm_matches_closed_form_and_statsmodels(ps):
    # statsmodels' Holm runs gc.collect() on every call (~0.1-0.3 s here); it does not touch the result
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gc, "collect", lambda *args: 0)
        check_holm(ps)


def check_holm(ps):
    rows = S.holm(ps, alpha=0.05)
    got = np.array([r.p_holm for r in rows])
    np.testing.assert_allclose(got, holm_closed_form(np.array(ps)), rtol=1e-12, atol=1e-15)
    reject, padj, _, _ = multipletests(ps, alpha=0.05, method="holm")
    np.testing.assert_allclose(got, padj)
    assert [r.reject for r in rows] == list(reject)


def test_holm_keeps_names_and_paper_style_family():
    fam = {"H1a": 0.40, "H1b": 0.021, "H1c": 0.30, "H2a": 0.0001, "H2c": 0.001}
    rows = {r.name: r for r in S.holm(fam)}
    # H1b is third smallest of five: 0.021 x 3 (closed form, monotone here)
    assert rows["H1b"].p_holm == pytest.approx(0.063)
    assert not rows["H1b"].reject and rows["H2a"].reject


# --------------------------------------------------------------------------- CV and agreement


def test_coefficient_of_variation():
    x = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert S.coefficient_of_variation(x) == pytest.approx(pystats.stdev(x) / pystats.mean(x))
    assert S.coefficient_of_variation(x, ddof=0) == pytest.approx(pystats.pstdev(x) / pystats.mean(x))
    assert math.isnan(S.coefficient_of_variation([0.0, 0.0, 0.0]))
    assert S.coefficient_of_variation([5.0, 5.0]) == 0.0
    with pytest.raises(ValueError):
        S.coefficient_of_variation([1.0])


def test_kappa_hand_computed_2x2():
    # table [[20, 5], [10, 15]]: po = 35/50 = 0.7; pe = .5*.6 + .5*.4 = 0.5; kappa = 0.2/0.5 = 0.4
    ra = ["yes"] * 25 + ["no"] * 25
    rb = ["yes"] * 20 + ["no"] * 5 + ["yes"] * 10 + ["no"] * 15
    r = S.agreement(ra, rb)
    assert r.n == 50
    assert r.agreement == pytest.approx(0.7)
    assert r.kappa == pytest.approx(0.4)
    assert S.agreement(rb, ra).kappa == pytest.approx(0.4)


def test_kappa_three_categories_from_definition():
    rng = np.random.default_rng(5)
    ra = rng.integers(0, 3, 200)
    rb = np.where(rng.random(200) < 0.7, ra, rng.integers(0, 3, 200))
    po = np.mean(ra == rb)
    pe = sum(np.mean(ra == c) * np.mean(rb == c) for c in range(3))
    r = S.agreement(ra.tolist(), rb.tolist())
    assert r.agreement == pytest.approx(po)
    assert r.kappa == pytest.approx((po - pe) / (1 - pe))


def test_kappa_degenerate_cases():
    assert S.agreement([True, False, True], [True, False, True]).kappa == pytest.approx(1.0)
    const = S.agreement([1, 1, 1], [1, 1, 1])
    assert const.agreement == 1.0 and math.isnan(const.kappa)
    assert S.agreement([1, 1], [0, 0]).kappa == pytest.approx(0.0)  # po = pe = 0
    with pytest.raises(ValueError):
        S.agreement([1, 0], [1])
    with pytest.raises(ValueError):
        S.agreement([], [])
    with pytest.raises(ValueError):
        S.agreement([1, None], [1, 0])


# --------------------------------------------------------------------------- many comparisons


def matrix_data(n: int = 60, k: int = 5, seed: int = 0):
    rng = np.random.default_rng(seed)
    diff = rng.lognormal(0, 0.8, (n, 1))
    tokens = 1000 * diff * rng.uniform(0.2, 2, (1, k)) * rng.lognormal(0, 0.4, (n, k))
    calls = 1 + rng.poisson(2, (n, k)).astype(float)
    correct = (rng.random((n, k)) < 0.85).astype(float)
    return {"tokens": tokens, "calls": calls}, correct, [f"c{i}" for i in range(k)]


def test_compare_many_equals_single_pair_functions():
    metrics, correct, conds = matrix_data()
    pairs = [("c1", "c0"), ("c2", "c0"), ("c3", "c4")]
    res = S.compare_many(metrics, correct=correct, conditions=conds, pairs=pairs, seed=17,
                         n_resamples=700, keep_boot=True)
    for a, b in pairs:
        ia, ib = conds.index(a), conds.index(b)
        pc = res[(a, b)]
        for m in metrics:
            single = S.ratio_of_means(metrics[m][:, ia], metrics[m][:, ib], seed=17, n_resamples=700)
            np.testing.assert_allclose(pc.ratio[m].boot, single.boot, rtol=1e-12)
            assert (pc.ratio[m].lo, pc.ratio[m].hi) == pytest.approx((single.lo, single.hi), rel=1e-12)
            med = S.median_ratio(metrics[m][:, ia], metrics[m][:, ib], seed=17, n_resamples=700)
            np.testing.assert_array_equal(pc.median_ratio[m].boot, med.boot)
        acc = S.accuracy_difference(correct[:, ia], correct[:, ib], seed=17, n_resamples=700)
        np.testing.assert_allclose(pc.accuracy.boot, acc.boot, atol=1e-10)
        assert pc.mcnemar == S.mcnemar_exact(correct[:, ia], correct[:, ib])


def test_compare_many_results_do_not_depend_on_chunking():
    metrics, correct, conds = matrix_data(k=4)
    kw = dict(correct=correct, conditions=conds, pairs=[("c1", "c0"), ("c2", "c3")], seed=1,
              n_resamples=500, keep_boot=True)
    ref = S.compare_many(metrics, **kw)
    small = S.compare_many(metrics, chunk_rows=3, **kw)
    for p in ref:
        assert ref[p].rows() == small[p].rows()
        np.testing.assert_array_equal(ref[p].ratio["tokens"].boot, small[p].ratio["tokens"].boot)


_BLAS_PROBE = """
import hashlib, json, sys
import numpy as np
sys.path.insert(0, {repo!r})
from analysis import stats as S
from tests.test_stats import matrix_data
from threadpoolctl import threadpool_info
metrics, correct, conds = matrix_data(k=6)
res = S.compare_many(metrics, correct=correct, conditions=conds, pairs=[("c1", "c0"), ("c2", "c3"), ("c5", "c4")],
                     seed=3, n_resamples=2000, keep_boot=True)
h = hashlib.sha256()
for p in sorted(res):
    h.update(json.dumps(res[p].rows(), sort_keys=True, default=repr).encode())
    for st in (res[p].ratio, res[p].share):
        for m in sorted(st):
            h.update(np.ascontiguousarray(st[m].boot).tobytes())
    h.update(np.ascontiguousarray(res[p].accuracy.boot).tobytes())
arch = {{i.get("architecture") for i in threadpool_info() if i.get("internal_api") == "openblas"}}
print(json.dumps({{"hash": h.hexdigest(), "arch": sorted(a or "" for a in arch)}}))
"""


def test_bootstrap_bits_do_not_depend_on_the_blas_kernel():
    """The same bootstrap under two OpenBLAS kernels (older generic ones every x86-64 CPU runs)
    must give the same bits: reported intervals may not depend on the machine."""
    import json
    import os
    import platform
    import subprocess
    import sys

    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip(f"OPENBLAS_CORETYPE names x86-64 kernels; this machine is {platform.machine()}")
    repo = str(Path(__file__).resolve().parents[1])
    out = {}
    for core in ("Nehalem", "Haswell"):
        env = {**os.environ, "OPENBLAS_CORETYPE": core}
        res = subprocess.run([sys.executable, "-c", _BLAS_PROBE.format(repo=repo)], capture_output=True, text=True,
                             env=env, timeout=300, cwd=repo)
        assert res.returncode == 0, res.stderr
        out[core] = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["Nehalem"]["arch"] != out["Haswell"]["arch"], f"the kernel choice did not take effect: {out}"
    assert out["Nehalem"]["hash"] == out["Haswell"]["hash"]


def test_compare_many_accepts_dataframes_and_builds_rows():
    metrics, correct, conds = matrix_data(k=3)
    frames = {m: pd.DataFrame(v, columns=conds)[conds[::-1]] for m, v in metrics.items()}  # shuffled cols
    res_df = S.compare_many(frames, correct=pd.DataFrame(correct, columns=conds), pairs=[("c1", "c0")],
                            seed=2, n_resamples=200)
    res_np = S.compare_many(metrics, correct=correct, conditions=conds, pairs=[("c1", "c0")], seed=2,
                            n_resamples=200)
    rows = res_df[("c1", "c0")].rows()
    # column order changes the BLAS summation order, so equal up to rounding
    for r_df, r_np in zip(rows, res_np[("c1", "c0")].rows(), strict=True):
        assert r_df.keys() == r_np.keys()
        for key, value in r_np.items():
            if isinstance(value, float):
                assert r_df[key] == pytest.approx(value, rel=1e-12), key
            else:
                assert r_df[key] == value, key
    assert {r["statistic"] for r in rows} == {"ratio_of_means", "median_ratio", "share_cheaper",
                                              "accuracy_diff_points"}
    assert all(set(r) == set(S.ROW_FIELDS) for r in rows)
    assert len(rows) == 2 * 3 + 1
    acc = [r for r in rows if r["statistic"] == "accuracy_diff_points"][0]
    assert acc["p"] == S.mcnemar_exact(correct[:, 1], correct[:, 0]).p


def test_ci_contains_estimate_for_every_statistic():
    metrics, correct, conds = matrix_data(n=180, k=6, seed=4)
    res = S.compare_many(metrics, correct=correct, conditions=conds,
                         pairs=[(c, "c0") for c in conds[1:]], seed=3, n_resamples=2000)
    for pc in res.values():
        for e in [*pc.ratio.values(), *pc.median_ratio.values(), pc.accuracy]:
            assert e.lo <= e.estimate <= e.hi, e
        for s in pc.share.values():
            assert s.lo <= s.cheaper <= s.hi
            assert s.cheaper + s.ties + s.dearer == pytest.approx(1.0)


def test_swapped_pair_mirrors_every_statistic():
    metrics, correct, conds = matrix_data()
    res = S.compare_many(metrics, correct=correct, conditions=conds, pairs=[("c1", "c2"), ("c2", "c1")],
                         seed=5, n_resamples=500, keep_boot=True)
    ab, ba = res[("c1", "c2")], res[("c2", "c1")]
    np.testing.assert_allclose(ba.ratio["tokens"].boot, 1 / ab.ratio["tokens"].boot, rtol=1e-12)
    assert ba.share["calls"].cheaper == ab.share["calls"].dearer
    assert ba.share["calls"].ties == ab.share["calls"].ties
    assert ba.accuracy.estimate == pytest.approx(-ab.accuracy.estimate)
    assert (ba.accuracy.lo, ba.accuracy.hi) == pytest.approx((-ab.accuracy.hi, -ab.accuracy.lo))
    assert (ba.mcnemar.a_only, ba.mcnemar.b_only, ba.mcnemar.p) == (ab.mcnemar.b_only, ab.mcnemar.a_only,
                                                                     ab.mcnemar.p)


def test_primary_resample_count_is_honoured():
    """The primary tests use 100,000 resamples: the count reaches the draws unchanged."""
    rng = np.random.default_rng(0)
    a, b = rng.lognormal(size=12), rng.lognormal(size=12)
    e = S.ratio_of_means(a, b, seed=0, n_resamples=S.PRIMARY_RESAMPLES)
    assert S.PRIMARY_RESAMPLES == 100_000 and S.DEFAULT_RESAMPLES == 10_000
    assert e.n_resamples == 100_000 and e.boot.shape == (100_000,)
    idx = S.resample_indices(12, S.PRIMARY_RESAMPLES, seed=0)
    np.testing.assert_allclose(e.boot, a[idx].mean(1) / b[idx].mean(1), rtol=1e-12)


# --------------------------------------------------------------------------- percentile helper


def test_percentile_ci_with_infinite_draws():
    boot = np.array([1.0] * 90 + [np.inf] * 10)
    lo, hi, undefined = S.percentile_ci(boot, confidence=0.8)
    assert (lo, hi, undefined) == (1.0, math.inf, 0)  # h = 99 * 0.9 = 89.1 lies between 1.0 and inf
    lo, hi, undefined = S.percentile_ci(np.array([np.nan, 2.0, 4.0]), confidence=0.5)
    assert undefined == 1 and (lo, hi) == (2.5, 3.5)
    lo, hi, undefined = S.percentile_ci(np.array([np.nan, np.nan]))
    assert math.isnan(lo) and math.isnan(hi) and undefined == 2


# --------------------------------------------------------------------------- input errors


@pytest.mark.parametrize(
    "a,b,match",
    [
        ([1.0, 2.0], [1.0], "equal length"),
        ([], [], "empty"),
        ([1.0, np.nan], [1.0, 2.0], "non-finite"),
        ([1.0, np.inf], [1.0, 2.0], "non-finite"),
        ([1.0, -2.0], [1.0, 2.0], "negative"),
        ([[1.0, 2.0]], [[1.0, 2.0]], "1-d"),
    ],
)
def test_bad_value_inputs_raise(a, b, match):
    for fn in (S.ratio_of_means, S.median_ratio, S.share_cheaper):
        with pytest.raises(ValueError, match=match):
            fn(a, b, seed=0, n_resamples=10)


def test_bad_settings_and_correctness_raise():
    a, b = [1.0, 2.0, 3.0], [2.0, 2.0, 2.0]
    with pytest.raises(ValueError, match="0/1"):
        S.mcnemar_exact([1, 0, 2], [1, 0, 1])
    with pytest.raises(ValueError, match="0/1"):
        S.accuracy_difference([1, 0, 0.5], [1, 0, 1], seed=0)
    with pytest.raises(ValueError, match="equal length"):
        S.mcnemar_exact([1, 0], [1, 0, 1])
    with pytest.raises(ValueError, match="n_resamples"):
        S.ratio_of_means(a, b, seed=0, n_resamples=0)
    with pytest.raises(ValueError, match="seed"):
        S.ratio_of_means(a, b, seed=-1)
    with pytest.raises(ValueError, match="confidence"):
        S.ratio_of_means(a, b, seed=0, confidence=95)
    with pytest.raises(ValueError, match="zero_denominator"):
        S.median_ratio(a, b, seed=0, zero_denominator="skip")
    with pytest.raises(ValueError, match="tie_tol"):
        S.share_cheaper(a, b, seed=0, tie_tol=-1)
    with pytest.raises(ValueError, match="p-values"):
        S.holm([0.1, 1.5])
    with pytest.raises(ValueError):
        S.intersection_union({})


def test_compare_many_input_errors():
    metrics, correct, conds = matrix_data(k=3)
    ok = dict(conditions=conds, seed=0, n_resamples=10)
    with pytest.raises(ValueError, match="not in"):
        S.compare_many(metrics, pairs=[("c1", "zz")], **ok)
    with pytest.raises(ValueError, match="itself"):
        S.compare_many(metrics, pairs=[("c1", "c1")], **ok)
    with pytest.raises(ValueError, match="no pairs"):
        S.compare_many(metrics, pairs=[], **ok)
    with pytest.raises(ValueError, match="does not match"):
        S.compare_many(metrics, correct=correct[:-1], pairs=[("c1", "c0")], **ok)
    with pytest.raises(ValueError, match="does not match"):
        S.compare_many({"t": metrics["tokens"][:, :2]}, pairs=[("c1", "c0")], **ok)
    with pytest.raises(ValueError, match="conditions must be given"):
        S.compare_many(metrics, pairs=[("c1", "c0")], seed=0)
    bad = metrics["tokens"].copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        S.compare_many({"t": bad}, pairs=[("c1", "c0")], **ok)
    with pytest.raises(ValueError, match="unknown statistics"):
        S.compare_many(metrics, pairs=[("c1", "c0")], statistics=("mean",), **ok)
