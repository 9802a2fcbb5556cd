"""Dollars per correct answer: one definition, in tables 1, 2 and 6, reproduced from the ledger when a run was
retried, with a bootstrap interval."""

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


def test_dollars_per_correct_answer_in_tables_1_2_and_6(tmp_path):
    pre = prereg_file(tmp_path)
    st = Stage(tmp_path / "runs", "main", prereg_sha=sha256_file(pre))
    for i in range(10):
        st.add("session_search", f"q{i}", correct=i < 6, prompt=1000, output=100)
        st.add("tool_hybrid", f"q{i}", correct=i < 9, prompt=500, output=50)
    st.judge_call(run_id("tool_hybrid", "q0"), prompt=2000, output=10)
    st.write()
    org = Stage(tmp_path / "runs", "org", prereg_sha=sha256_file(pre))
    for i in range(4):
        org.add("shared", f"p{i}", variant="public", correct=i < 3, prompt=2000, output=0)
        org.add("isolated", f"p{i}", variant="public", correct=False, prompt=100, output=0)
    org.write()
    out = analyse(tmp_path, pre)
    per_run = {"session_search": (1000 * 0.30 + 100 * 1.20) / 1e6, "tool_hybrid": (500 * 0.30 + 50 * 1.20) / 1e6}
    t1 = csv(out, "table1.csv")
    assert row(t1, condition="session_search")["usd_per_correct"] == pytest.approx(10 * per_run["session_search"] / 6)
    assert row(t1, condition="tool_hybrid")["usd_per_correct"] == pytest.approx(10 * per_run["tool_hybrid"] / 9)
    t2 = csv(out, "table2.csv")
    assert row(t2, condition="shared")["usd_per_correct"] == pytest.approx(4 * 2000 * 0.30 / 1e6 / 3)
    assert pd.isna(row(t2, condition="isolated")["usd_per_correct"])  # no correct answer: undefined, not 0
    t6 = csv(out, "table6.csv")
    agents = row(t6, folder="main/main", party="agents", condition="tool_hybrid")
    assert agents["correct_answers"] == 9 and agents["usd_per_correct"] == pytest.approx(10 * per_run["tool_hybrid"] / 9)
    judge = row(t6, folder="main/main", party="judge", condition="all")
    assert judge["correct_answers"] == 15 and judge["usd_per_correct"] == pytest.approx((2000 * 0.30 + 10 * 1.20) / 1e6 / 15)
    assert "USD per correct" in (out / "report.md").read_text()


def test_usd_per_correct_reproduces_from_the_ledger_when_a_run_was_retried(tmp_path):
    """A run whose first attempt (100k prompt tokens, metered) was superseded: the money was spent, so USD per
    correct answer by hand from the ledger counts it, in Table 6 and in Table 1 (repeat 0: the same runs here)."""
    from tests.analysis_fixtures import PRICES, Stage, sha256_file
    from tests.test_analysis import csv, prereg_file, row

    pre = prereg_file(tmp_path)
    st = Stage(tmp_path / "runs", "main", prereg_sha=sha256_file(pre))
    for i in range(10):
        st.add("session_search", f"q{i:02d}", correct=i % 2 == 0, prompt=1000, output=100, attempt=2 if i == 0 else 1)
        st.add("tool_hybrid", f"q{i:02d}", correct=True, prompt=500, output=50)
    base = {"call": "deadbeef00000001", "tag": "session_search.lme.q00.r0", "attempt": 1, "role": "agent",
            "model": "test-model", "path": "/chat/completions", "ts": "2026-10-08T10:00:00.000+00:00"}
    st.ledger += [{**base, "event": "request"}, {**base, "event": "response", "status": 200, "prompt": 100000,
                                                 "hit": 0, "miss": 100000, "output": 0, "reasoning": 0}]
    st.write()
    out = analyse(tmp_path, pre)
    by_hand = (10 * (1000 * PRICES["miss"] + 100 * PRICES["output"]) + 100000 * PRICES["miss"]) / 1e6 / 5
    assert row(csv(out, "table6.csv"), party="agents", condition="session_search")["usd_per_correct"] == \
        pytest.approx(by_hand)
    assert row(csv(out, "table1.csv"), condition="session_search")["usd_per_correct"] == pytest.approx(by_hand)


def test_dollars_per_correct_answer_has_one_definition_and_a_bootstrap_interval(tmp_path):
    """Table 1's USD per correct is the runs' list cost over their correct answers, with the percentile
    interval of that ratio over questions (checked against a bootstrap written here with numpy)."""
    pre = prereg_file(tmp_path)
    st = Stage(tmp_path / "runs", "main", prereg_sha=sha256_file(pre))
    rng = np.random.default_rng(5)
    prompts = rng.integers(200, 3000, size=30)
    for i in range(30):
        st.add("session_search", f"q{i:02d}", correct=i % 3 != 0, prompt=int(prompts[i]), output=100)
        st.add("tool_hybrid", f"q{i:02d}", correct=i % 5 != 0, prompt=500, output=50)
    st.write()
    out = analyse(tmp_path, pre)
    ss = row(csv(out, "table1.csv"), condition="session_search")
    runs = csv(out, "runs.csv")
    d = runs[(runs["condition"] == "session_search") & (runs["repeat"] == 0)]
    cost, ok = d["cost"].to_numpy(float), d["correct"].fillna(0).to_numpy(float)
    assert ss["usd_per_correct"] == pytest.approx(cost.sum() / ok.sum())
    idx = np.random.default_rng(0).integers(0, len(cost), size=(4000, len(cost)))
    boot = cost[idx].sum(1) / ok[idx].sum(1)
    lo, hi = np.quantile(boot, [0.025, 0.975])
    assert ss["usd_per_correct_lo"] == pytest.approx(lo, rel=0.05) and ss["usd_per_correct_hi"] == pytest.approx(hi, rel=0.05)
    assert "USD per correct [95% CI]" in (out / "report.md").read_text()
    assert "list USD per correct (every repeat)" in (out / "report.md").read_text()
