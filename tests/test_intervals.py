"""Bootstrap intervals where numbers are compared: the two-level (question, then repeat) bootstrap against
index resampling and its variance, and repeat intervals beside the question-only ones."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as hst
from scipy.stats import norm

from analysis import conclusions as C
from analysis import run as A
from tests.analysis_fixtures import JUDGE, Stage, run_id, sha256_file
from tests.test_analysis import csv, holm_by_hand, prereg_file, row
from tests.trust_fixtures import (ERRATA, LME, RULE_KINDS, TYPES, _borderline, _brute_verdicts,
                                  _exact_mcnemar_power, _tiny_hypothesis, analyse, comparison, judge_file,
                                  lme_questions, main_stage, org_stage, second_judge, stage_with_hybrid_wrong)


def test_two_level_bootstrap_against_index_resampling_and_its_variance():
    """Questions then repeats: against resampling by index, and wider than question-only exactly when
    repeats disagree (the two-level variance adds the within-question term)."""
    from analysis import stats

    rng = np.random.default_rng(11)
    n, r = 60, 3
    p = rng.uniform(0.2, 0.9, size=n)
    a = [list((rng.random(r) < p[i]).astype(float)) for i in range(n)]
    q_only, two = stats.two_level_accuracy(a, seed=4, n_resamples=4000)
    assert q_only.estimate == pytest.approx(100 * np.mean([np.mean(x) for x in a]))
    idx_rng = np.random.default_rng(99)  # resampled by index (questions, then each drawn one's repeats)
    qs = idx_rng.integers(0, n, size=(4000, n))
    reps = idx_rng.integers(0, r, size=(4000, n, r))
    means = np.array(a)[qs[..., None], reps].mean(axis=(1, 2))
    lo, hi = np.quantile(100 * means, [0.025, 0.975])
    assert two.lo == pytest.approx(lo, abs=1.2) and two.hi == pytest.approx(hi, abs=1.2)
    # closed form: var = var(question means)/n + mean(within variance / r)/n
    qm = np.array([np.mean(x) for x in a])
    within = np.array([np.var(x) for x in a])
    sd_two = 100 * math.sqrt(np.var(qm) / n + np.mean(within / r) / n)
    assert (two.hi - two.lo) / (2 * 1.96) == pytest.approx(sd_two, rel=0.12)
    assert (two.hi - two.lo) > (q_only.hi - q_only.lo)
    same = [[x[0]] * r for x in a]  # repeats that never disagree: the two intervals coincide (up to resampling)
    q2, t2 = stats.two_level_accuracy(same, seed=4, n_resamples=4000)
    assert (t2.lo, t2.hi) == pytest.approx((q2.lo, q2.hi), abs=1e-9)


def test_repeat_intervals_are_reported_beside_the_question_only_ones(tmp_path):
    pre = prereg_file(tmp_path)
    st = Stage(tmp_path / "runs", "main", prereg_sha=sha256_file(pre))
    for i in range(24):
        for rep in (0, 1):
            st.add("session_search", f"q{i:02d}", repeat=rep, correct=(i + rep) % 3 != 0)
            st.add("tool_hybrid", f"q{i:02d}", repeat=rep, correct=(i * (rep + 1)) % 4 != 0, prompt=500)
    st.write()
    out = analyse(tmp_path, pre)
    t = csv(out, "repeat_intervals.csv")
    acc = row(t, kind="accuracy", what="session_search (%)")
    assert acc["n_questions"] == 24 and acc["runs"] == 48
    assert acc["estimate"] == pytest.approx(100 * np.mean([((i + r) % 3 != 0) for i in range(24) for r in (0, 1)]))
    assert acc["two_level_hi"] - acc["two_level_lo"] > acc["question_hi"] - acc["question_lo"]
    diff = row(t, kind="difference")
    assert diff["what"] == "tool_hybrid − session_search (points)" and diff["runs"] == 96
    assert "## Intervals with the repeats" in (out / "report.md").read_text()
