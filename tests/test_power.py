"""Power before paying (analysis/power.py): the registered rule's power and sample size, exact McNemar
against scipy, simulated interval rules against closed forms, and pilot ranges that contain their point."""

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


def test_power_and_sample_size_match_statsmodels():
    from statsmodels.stats.power import NormalIndPower

    from analysis import power as W

    sm = NormalIndPower()
    for distance, sd, n in ((0.013, 0.55, 180), (0.3, 1.0, 40), (0.05, 0.4, 500)):
        es = distance / sd
        assert W.power(distance, sd, n, 0.025) == pytest.approx(
            sm.power(effect_size=es, nobs1=n, alpha=0.025, ratio=0, alternative="larger"), rel=1e-9)
        n80 = sm.solve_power(effect_size=es, alpha=0.025, power=0.8, ratio=0, alternative="larger")
        assert W.n_for(distance, sd, 0.025) == math.ceil(n80)
    assert W.n_for(-0.01, 0.5, 0.025) == math.inf  # an effect on the wrong side of the threshold: never


def test_power_from_a_pilot_of_known_variance_and_its_cost(tmp_path):
    """A pilot with 10 paired questions: 4 discordant (3 for the hybrid tool), tokens chosen by hand."""
    from analysis import power as W
    from analysis import prereg as P
    from analysis.power import pilot_runs

    st = Stage(tmp_path / "runs", "pilot", label="p")
    tok_ss = [1000, 1200, 800, 1500, 900, 1100, 1000, 1300, 700, 1000]
    tok_hy = [500, 700, 300, 900, 600, 400, 500, 800, 300, 500]
    hy_only, ss_only = {"q0", "q1", "q2"}, {"q3"}
    for i in range(10):
        q = f"q{i}"
        st.add("session_search", q, correct=q not in hy_only, prompt=tok_ss[i] - 100, output=100)
        st.add("tool_hybrid", q, correct=q not in ss_only, prompt=tok_hy[i] - 50, output=50)
    st.write()
    pilot = pilot_runs(tmp_path / "runs", "test-model")
    assert pilot and len(pilot["runs"]) == 20
    pre = P.load()
    costs = {"session_search": 0.01, "tool_hybrid": 0.004}
    rows = {(c.hypothesis, c.rule): c for c in W.comparisons(
        pre, "main", {("", "tool_hybrid", "session_search"): 180}, costs, pilot)}
    # H1c: non-inferiority at 3 points, powered at the pre-registered -1.7 points; psi = 4/10 from the pilot
    h1c = rows[("H1c", "noninferiority")]
    assert h1c.effect == -1.7 and h1c.effect_from.startswith("pre-registered") and h1c.spread == pytest.approx(0.4)
    delta = -0.017
    sd = math.sqrt(0.4 - delta ** 2)
    z = 1.959963984540054
    assert h1c.power == pytest.approx(float(norm.cdf((delta + 0.03) * math.sqrt(180) / sd - z)), rel=1e-9)
    assert h1c.n80 == math.ceil(((z + 0.8416212335729143) * sd / (delta + 0.03)) ** 2)
    # H1b: tokens ratio < 0.7 at the pre-registered 0.51, the log-ratio sd from the pilot (delta method)
    h1b = rows[("H1b", "ratio_upper_below")]
    a, b = np.array(tok_hy, float), np.array(tok_ss, float)
    sd_log = np.std(a / a.mean() - b / b.mean(), ddof=1)
    assert h1b.spread == pytest.approx(sd_log, rel=1e-12)
    assert h1b.power == pytest.approx(float(norm.cdf(math.log(0.7 / 0.51) * math.sqrt(180) / sd_log - z)), rel=1e-9)
    assert h1b.cost_per_question == pytest.approx(0.014)
    text = W.render(rows.values())
    line = next(x for x in text.splitlines() if x.startswith("H1b"))
    # n for 80% and its cost: the simulated rule's n (analysis.power.simulated_n), not the normal formula's
    assert f"{h1b.n80_rule:,.0f}" in line and f"${0.014 * h1b.n80_rule:.4f}" in line and f"{h1b.power:.2f}" in line
    # without a pilot: the stated assumption, and it says so
    h1c0 = next(c for c in W.comparisons(pre, "main", {("", "tool_hybrid", "session_search"): 180}, costs, None)
                if c.hypothesis == "H1c")
    assert h1c0.spread == W.ASSUMPTIONS["discordant"] and h1c0.spread_from.startswith("assumed")


def test_power_at_must_be_a_number(tmp_path):
    from analysis import prereg as P

    bad = prereg_file(tmp_path, edit=lambda d: d["hypotheses"][0].update(power_at="big"))
    with pytest.raises(P.PreregError, match="power_at must be a number"):
        P.load(bad)


def test_exact_mcnemar_p_and_power_match_scipy_binomtest():
    from scipy.stats import binomtest, multinomial

    from analysis import power as W

    a, b = np.meshgrid(np.arange(0, 25), np.arange(0, 25))
    got = W.mcnemar_p(a.ravel(), b.ravel())
    want = [1.0 if x + y == 0 else binomtest(int(x), int(x + y), 0.5).pvalue for x, y in zip(a.ravel(), b.ravel())]
    assert got == pytest.approx(want, rel=1e-10, abs=1e-14)
    assert W.mcnemar_p(4, 0) == pytest.approx(0.125)  # SPEC §6
    # the power summed by brute force over every outcome of 30 questions, with binomtest deciding
    n, psi, delta = 30, 0.4, 0.2
    probs = [(psi + delta) / 2, (psi - delta) / 2, 1 - psi]
    brute = sum(multinomial.pmf([i, j, n - i - j], n, probs)
                for i in range(n + 1) for j in range(n + 1 - i)
                if i > j and binomtest(i, i + j, 0.5).pvalue <= 0.05)
    assert W.mcnemar_power(n, psi, delta, 0.05) == pytest.approx(brute, rel=1e-9)


def test_the_exact_mcnemar_sample_size_is_larger_than_the_normal_formula_and_is_the_smallest_that_reaches_80():
    from analysis import power as W

    for psi, delta in ((0.3, 0.1), (0.2, 0.08), (0.5, 0.15)):
        c = comparison("mcnemar_superior", 100, 100 * delta, psi, 0.0)
        n = int(c.n80_rule)
        assert n >= c.n80  # the normal formula overstates the exact test's power
        assert W.mcnemar_power(n, psi, delta, 0.05) >= 0.8 > W.mcnemar_power(n - 1, psi, delta, 0.05)
        c.n_planned = n
        assert c.power > W.mcnemar_power(n, psi, delta, 0.05) - 0.005  # and at that n the formula says more
        sim = W.simulate(c, seed=3)  # the simulation of the same rule agrees with the exact sum
        exact = W.mcnemar_power(n, psi, delta, 0.05)
        assert sim.power == pytest.approx(exact, abs=3.5 * math.sqrt(exact * (1 - exact) / len(sim.holds)))


@pytest.mark.parametrize("rule,n,effect,spread,threshold", [
    ("noninferiority", 400, 0.0, 0.3, -3.0),
    ("accuracy_above", 300, 8.0, 0.35, 0.0),
    ("ratio_upper_below", 150, 0.55, 1.0, 0.7),
    ("ratio_lower_above", 120, 1.2, 0.8, 1.0),
])
def test_the_simulated_bootstrap_rule_agrees_with_the_normal_closed_form_at_large_n(rule, n, effect, spread, threshold):
    """The interval rules: the bootstrap percentile bound against the normal formula, within 0.05."""
    from analysis import power as W

    c = comparison(rule, n, effect, spread, threshold)
    sim = W.simulate(c, seed=1, sims=1000, boot=500)
    assert 0.1 < c.power < 0.95  # a point where the two can differ
    assert sim.power == pytest.approx(c.power, abs=0.05)
    # Holm at rank 1 of 5 needs the one-sided p <= 0.01: the normal formula at alpha 0.01
    d, sd = c.distance_sd()
    assert np.mean(sim.holds & (sim.p <= 0.01)) == pytest.approx(W.power(d, sd, n, 0.01), abs=0.05)


def test_intersection_union_power_is_the_joint_power_and_holm_lowers_it(tmp_path):
    """H2c's three tests at the planned 120: the decision's power is P(all hold), about the product of the
    components' (simulated independently), below each; Holm's range sits below the unadjusted power."""
    from analysis import power as W
    from analysis import prereg as P

    pre = P.load()
    rows = W.comparisons(pre, "org", {("public", "shared", "ask_agent"): 120}, {})
    assert [c.index for c in rows if c.hypothesis == "H2c"] == [0, 1, 2]
    assessed = W.assess(rows, seed=0)
    comps = [a.at_effect.power for a in assessed]
    lines = W.hypothesis_lines(assessed, pre)
    line = next(x for x in lines if x.startswith("H2c at the power_at"))
    joint = float(line.split("power ")[1].split(";")[0])
    assert joint <= min(comps) + 0.005 and joint == pytest.approx(np.prod(comps), abs=0.04)  # printed to 2 digits
    lo = float(line.split("primary hypotheses ")[1].split(" ")[0])
    assert lo <= joint
    text = W.render(rows, pre)
    assert "H2c at the smallest effects of interest" in text and "0.4x" in text


def test_an_impossible_input_is_refused_with_the_reason_not_given_a_power():
    from analysis import power as W

    c = comparison("mcnemar_superior", 80, 40.0, 0.3, 0.0)  # 40 points with 30% discordant: no data has it
    assert "below the effect" in c.refused and math.isnan(c.power) and math.isnan(c.n80_rule)
    with pytest.raises(W.Refused, match="below the effect"):
        W.simulate(c)
    text = W.render([c])
    line = next(x for x in text.splitlines() if x.startswith("Hx"))
    assert "refused: discordant share 0.30 is below the effect 0.40" in line and "1.00" not in line
    assert W.refusal("noninferiority", 50, 1.0, 0.0).startswith("the pilot has no discordant question")
    assert W.refusal("ratio_upper_below", 50, -0.5, 1.0).startswith("a ratio of means must be positive")


def test_a_small_pilot_gives_a_wide_range_of_power_and_a_large_one_a_narrow_one():
    from analysis import power as W

    ranges = {}
    for m in (12, 400):
        c = comparison("noninferiority", 300, 0.0, 0.25, -3.0)
        c.pilot_n = m
        lo, hi = c.spread_range()
        assert lo < 0.25 < hi
        a = W.assess([c], seed=0, sims=600, boot=300)[0]
        assert a.pilot_range[0] <= a.at_effect.power + 0.03 and a.at_effect.power <= a.pilot_range[1] + 0.03
        ranges[m] = a.pilot_range[1] - a.pilot_range[0]
    assert ranges[12] > 2 * ranges[400]


def test_the_dry_runs_power_is_the_simulation_of_the_registered_rule():
    """What `dry_run=true` prints (power_lines -> render) for H1c at 180 questions is simulate()'s figure."""
    from analysis import power as W
    from analysis import prereg as P

    pre = P.load()
    rows = W.comparisons(pre, "main", {("", "tool_hybrid", "session_search"): 180}, {})
    text = W.render(rows, pre)
    h1c = next(c for c in rows if c.hypothesis == "H1c")
    sim = W.simulate(h1c, seed=int(pre.settings["seed"]))
    line = next(x for x in text.splitlines() if x.startswith("H1c accuracy"))
    assert line.split()[line.split().index("180") + 2] == f"{sim.power:.2f}"
    assert "smallest" in text and "H1c at the smallest effects of interest" in text


def test_the_pilot_range_gives_the_questions_80_percent_needs_at_both_ends():
    """A 12-question pilot: the n for 80% over its interval of the spread, each end the simulated rule's."""
    import dataclasses

    from analysis import power as W

    c = comparison("noninferiority", 180, -1.7, 4 / 12, -3.0)
    c.pilot_n = 12
    a = W.assess([c], seed=0, sims=300, boot=200)[0]
    lo, hi = c.spread_range()
    want = sorted(dataclasses.replace(c, spread=x).n80_rule for x in (lo, hi))
    assert a.pilot_n80 == pytest.approx(tuple(want))
    assert want[0] < c.n80_rule < want[1] and want[1] > 3 * want[0]  # a 12-question pilot leaves the n wide open
    assert f"(n80 {want[0]:,.0f}-{want[1]:,.0f})" in W.render([c])


def test_a_pilot_interval_with_an_impossible_end_is_clipped_and_still_contains_the_point():
    """The issue's case: a 10-question pilot with 2 discordant questions, a 10-point effect: the Jeffreys
    lower end of the discordant share (about 0.04) is below the 0.10 a 10-point difference needs. The end is
    clipped to 0.10 and said so; the range is no longer one point and contains the point power."""
    from analysis import power as W

    c = comparison("accuracy_above", 60, 10.0, 0.2, 0.0)
    c.pilot_n = 10
    lo, hi = c.spread_range()
    assert lo < 0.10 < 0.2 < hi
    a = W.assess([c], seed=0, sims=400, boot=200)[0]
    assert "clipped to 0.100" in a.clipped
    assert a.pilot_range[0] <= a.at_effect.power <= a.pilot_range[1]
    assert a.pilot_range[1] - a.pilot_range[0] > 0.2  # not "0.38-0.38"
    text = W.render([c])
    assert "pilot range clipped: the pilot's lower end" in text and "*" in text


def test_power_at_a_tiny_n_is_warned_about():
    from analysis import power as W

    c = comparison("mcnemar_superior", 2, 20.0, 0.3, 0.0)
    assert "warning: 2 planned question(s)" in W.render([c])
    c = comparison("noninferiority", 300, 0.0, 0.5, -5.0)
    c.pilot_n = 2
    assert [w.split(":")[0] for w in W.tiny(c)] == ["the spread comes from 2 pilot question(s)"]
    assert W.tiny(comparison("noninferiority", 300, 0.0, 0.3, -5.0)) == []


@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(rule=hst.sampled_from(["noninferiority", "accuracy_above", "mcnemar_superior", "ratio_upper_below"]),
       m=hst.integers(1, 40), k=hst.integers(0, 40), effect=hst.sampled_from([0.0, 3.0, 10.0, 25.0]),
       n=hst.sampled_from([2, 30, 120]))
def test_the_pilot_power_range_always_contains_the_point_power(rule, m, k, effect, n):
    """Random pilots: whatever the pilot's size and spread, the range over its interval contains the power at its
    own spread, and an end no data can have is clipped and said so."""
    from analysis import power as W

    k = min(k, m)
    if rule == "ratio_upper_below":
        c = comparison(rule, n, 0.6, 0.2 + k / 10, 0.7)
    else:
        c = comparison(rule, n, effect, k / m, -3.0 if rule == "noninferiority" else 0.0)
    c.pilot_n = m
    assume(not c.refused and c.spread_range() is not None)
    a = W.assess([c], seed=0, sims=200, boot=100, search_n=False)[0]
    assert a.pilot_range[0] <= a.at_effect.power <= a.pilot_range[1]
    lo = c.spread_range()[0]
    assert bool(a.clipped) == (c.accuracy and lo < abs(effect) / 100)


@pytest.mark.parametrize("rule,effect,spread,threshold", [
    ("noninferiority", 0.0, 0.3, -5.0),
    ("accuracy_above", 10.0, 0.4, 0.0),
    ("ratio_upper_below", 0.55, 1.0, 0.7),
    ("ratio_lower_above", 1.3, 0.8, 1.0)])
def test_the_n_for_80_of_an_interval_rule_is_searched_on_the_simulated_rule(rule, effect, spread, threshold):
    """The interval rules' n for 80% is found on the same simulation their power is (the bootstrap percentile
    bound, seeded): the simulated rule reaches 80% there and not a few questions below it. The normal formula
    is the search's first guess and stays within 15% of it (its `approx`)."""
    from analysis import power as W

    c = comparison(rule, 100, effect, spread, threshold)
    n = c.n80_rule
    assert n == c.n80_rule  # seeded and cached: the same n each time it is asked
    boot = W.BOOT // 2 if not c.accuracy else W.BOOT  # what assess simulates with

    def pw(k):
        return W.simulate(c, n=int(k), boot=boot).power
    assert pw(n) >= 0.8 > pw(n - 1)  # the search's crossing, on the rule itself
    assert pw(round(0.85 * n)) < 0.8  # well below it the rule falls short
    assert n == pytest.approx(c.n80, rel=0.15)


def test_the_exact_mcnemar_n_for_80_is_the_smallest_n_that_reaches_it_on_a_saw_tooth():
    """The exact test's power is not monotone in n (psi 1.0, delta 0.2: 0.804 at 199, 0.787 at 200, 0.817 at 203):
    a bisection stops at a local crossing (203). The smallest n with 80% is 199."""
    from analysis import power as W

    psi, delta = 1.0, 0.2
    got = int(W.mcnemar_n(psi, delta, 0.05))
    assert _exact_mcnemar_power(got, psi, delta) >= 0.8
    assert all(_exact_mcnemar_power(k, psi, delta) < 0.8 for k in range(180, got))
    assert got == 199


def test_an_interval_rules_n_for_80_below_the_cap_is_the_simulated_rules_not_the_normal_formulas():
    """Below SIM_N_CAP questions the n for 80% is searched on the simulated rule: it reaches 80% there. A
    normal-formula n of 2,609 that the simulated rule does not reach (its search doubling past the cap) was
    returned as it was; the search now stops at the cap, and an n beyond it is at least the cap."""
    from analysis import power as W

    c = comparison("accuracy_above", 100, 3.0, 0.3, 0.0)
    assert c.n80 < W.SIM_N_CAP  # the normal formula's n is below the cap: the simulation decides
    n = c.n80_rule
    boot = W.BOOT // 2 if not c.accuracy else W.BOOT  # what assess and simulated_n simulate with
    if n <= W.SIM_N_CAP:
        assert W.simulate(c, n=int(n), boot=boot).power >= 0.8
        assert W.simulate(c, n=int(n) - 1, boot=boot).power < 0.8
    else:
        assert W.simulate(c, n=W.SIM_N_CAP, boot=boot).power < 0.8
