"""A conclusion under another judge (analysis/conclusions.py): it flips only against the same runs, under
the judge built to flip it, and the chance of a flip is the registered rule run on relabelled labels."""

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


def test_a_conclusion_flips_exactly_under_the_judge_built_to_flip_it(tmp_path):
    pre = prereg_file(tmp_path)
    st = main_stage(tmp_path, sha256_file(pre))
    st.write()
    flipped = {run_id("tool_hybrid", f"q{i:02d}") for i in range(5)}  # 5 of 20 hybrid answers wrong
    second_judge(st, "strict", flipped)
    second_judge(st, "lenient", set())  # agrees with the main judge
    out = analyse(tmp_path, pre)
    t = csv(out, "judge_robustness.csv")
    main = [lab for lab in t["labels"].unique() if lab.startswith("main")]
    assert len(main) == 1 and "lenient" not in set(t["labels"])  # identical labels: the main judge itself
    h1c = t[t["conclusion"] == "H1c"]
    assert row(h1c, labels=main[0])["verdict"] == "supported"
    s = row(h1c, labels="strict")
    assert s["estimate"] == pytest.approx(-100 * 5 / 20) and s["n"] == 20
    assert s["verdict"] == "not supported" and s["robust"] == "flips under strict"
    pair = t[(t["kind"] == "comparison") & (t["labels"] == "strict")]
    assert len(pair) == 1 and pair["estimate"].iloc[0] == pytest.approx(-25.0)
    assert pair["verdict"].iloc[0] == "a < b" and pair["hi"].iloc[0] < 0
    assert not any(t["conclusion"] == "H1b")  # a token ratio does not read judgements: not repeated
    rep = (out / "report.md").read_text()
    head = rep[:rep.index("## Conclusions under each judge")]
    assert "Conclusions that flip under another judge" in head and "H1c: flips under strict" in head


def test_two_prompt_sources_in_one_file_are_two_judges_and_a_sample_counts_only_its_runs(tmp_path):
    pre = prereg_file(tmp_path)
    st = main_stage(tmp_path, sha256_file(pre))
    st.write()
    # the main judge's file gets a later pass with another prompt file on four runs, all hybrid wrong:
    # the latest line wins for the main analysis, and the older source is a judge of its own
    path = st.path / "judgements" / f"{JUDGE}.jsonl"
    later = []
    for i in range(2):
        for cond, label in (("tool_hybrid", False), ("session_search", True)):
            j = next(x for x in st.judgements if x["run_id"] == run_id(cond, f"q{i:02d}"))
            later.append({**j, "prompt_source": "file:/x/evaluate_qa.py", "label": label, "reply": "no"})
    with open(path, "a") as f:
        f.write("".join(json.dumps(x, sort_keys=True) + "\n" for x in later))
    out = analyse(tmp_path, pre)
    t = csv(out, "judge_robustness.csv")
    labels = set(t["labels"])
    assert f"{JUDGE} [prompts evaluate_qa.py]" in labels and f"{JUDGE} [prompts builtin]" in labels
    only = row(t[t["kind"] == "comparison"], labels=f"{JUDGE} [prompts evaluate_qa.py]")
    assert only["n"] == 2 and only["estimate"] == pytest.approx(-100.0)  # its sample: 2 paired questions


def test_a_judge_that_agrees_fully_on_its_sample_flips_nothing(tmp_path):
    """Appendix E's design: a second judge grades a sample and agrees on every answer of it. On all
    runs the main judge finds hybrid 25 points worse (5 of 20 wrong); on the sample (q10..q19) both find
    no difference. Against the main judge on all runs that looked like two flips; on the same runs it is none."""
    pre = prereg_file(tmp_path)
    st = stage_with_hybrid_wrong(tmp_path, sha256_file(pre), wrong=5)
    st.write()
    judge_file(st, "sample", keep=lambda rid: int(rid.split(".")[2][1:]) >= 10)
    out = analyse(tmp_path, pre)
    t = csv(out, "judge_robustness.csv")
    main = next(lab for lab in t["labels"].unique() if lab.startswith("main") and " on " not in lab)
    ref = f"{main} on sample's runs"
    pair = t[t["kind"] == "comparison"]
    assert row(pair, labels=main)["verdict"] == "a < b"  # all runs: hybrid worse
    s = row(pair, labels="sample")
    assert s["verdict"] == "no difference shown" and s["n"] == 10 and s["against"] == ref
    assert row(pair, labels=ref)["verdict"] == "no difference shown" and row(pair, labels=ref)["n"] == 10
    h1c = t[t["conclusion"] == "H1c"]
    assert row(h1c, labels=main)["verdict"] != row(h1c, labels="sample")["verdict"]  # the old false flip
    assert row(h1c, labels="sample")["verdict"] == row(h1c, labels=ref)["verdict"] == "supported"
    assert not any(str(x).startswith("flips") for x in t["robust"])
    rep = (out / "report.md").read_text()
    assert "Conclusions that flip under another judge" not in rep
    # each judge-reading conclusion is one check; the agreeing judge disagrees on no label: chance 0
    v = C.compare_verdicts(t)
    assert v["flips"].sum() == 0 and v["checks"].sum() == 2  # H1c and the paired comparison (the rest: not run)
    assert (v["not_comparable_under"] == "").all()
    assert v["chance_flips"].sum() == pytest.approx(0.0)
    assert f"{int(v['checks'].sum())} check(s) made" in rep


def test_a_judge_built_to_flip_one_conclusion_flips_that_one_and_the_chance_is_stated(tmp_path):
    """One hybrid answer relabelled wrong: H1c (non-inferiority at -3 points) flips, the paired comparison
    (interval includes 0 on both sides) does not; the chance of each flip is that of an independent
    relabelling written here (the percentile bootstrap on the analysis's resample draw, Holm by hand)."""
    pre = prereg_file(tmp_path)
    st = stage_with_hybrid_wrong(tmp_path, sha256_file(pre), wrong=0)
    st.write()
    judge_file(st, "strict1", keep=lambda rid: True, relabel={run_id("tool_hybrid", "q00")})
    out = analyse(tmp_path, pre)
    t = csv(out, "judge_robustness.csv")
    v = C.compare_verdicts(t).set_index("conclusion")
    assert list(v.index[v["flips"] > 0]) == ["H1c"] and v.at["H1c", "flips_under"] == "strict1"
    main = next(lab for lab in t["labels"].unique() if lab.startswith("main"))
    assert not any(" on " in lab for lab in t["labels"])  # it graded every run: the main rows are its reference
    assert row(t[t["conclusion"] == "H1c"], labels=main)["verdict"] == "supported"
    t3 = csv(out, "table3.csv").set_index("id")
    # independently: r = 1 disagreement in 40 labels; every label flipped at r, H1c and the comparison decided
    r, n, sims = 1 / 40, 20, 4000
    B1, B2 = 400, 200  # the registered primary and secondary resamples: the simulation decides as the report did
    seed = int(t3["seed"].iloc[0])
    from analysis.stats import resample_counts

    k1, k2 = resample_counts(n, B1, seed).astype(float), resample_counts(n, B2, seed).astype(float)
    rng = np.random.default_rng(11)
    ya, yb = np.ones((sims, n)), np.ones((sims, n))
    ya = np.where(rng.random((sims, n)) < r, 1 - ya, ya)
    yb = np.where(rng.random((sims, n)) < r, 1 - yb, yb)
    d = 100 * (ya - yb)
    boot1, boot2 = d @ k1 / n, d @ k2 / n
    lo1 = np.quantile(boot1, 0.025, axis=1)
    p1 = ((boot1 <= -3).sum(1) + 1) / (B1 + 1)
    others = [float(t3.at[h, "p"]) if t3.at[h, "p"] == t3.at[h, "p"] else 1.0 for h in ("H1a", "H1b", "H2a", "H2c")]
    holm_h1c = np.array([holm_by_hand({"x": p, **{str(i): q for i, q in enumerate(others)}})["x"] for p in p1])
    h1c_flip = ~((lo1 > -3) & (holm_h1c <= 0.05))  # the reference: supported
    lo2, hi2 = np.quantile(boot2, [0.025, 0.975], axis=1)
    pair_flip = (lo2 > 0) | (hi2 < 0)  # the reference: no difference shown
    for cid, flip in (("H1c", h1c_flip), ("main/main: tool_hybrid vs session_search", pair_flip)):
        x = row(t[t["conclusion"] == cid], labels="strict1")
        want, se = flip.mean(), math.sqrt(flip.mean() * (1 - flip.mean()) / sims)
        assert abs(x["p_chance"] - want) <= 4.5 * math.hypot(x["p_chance_se"], se) + 0.005, (cid, x["p_chance"], want)
    assert row(t[t["conclusion"] == "H1c"], labels="strict1")["p_chance"] > 0.2  # about 40%: far from 0
    rep = (out / "report.md").read_text()
    assert "H1c: flips under strict1" in rep and "1 flip(s)" in rep
    assert f"{C.CHANCE_SIMS} seeded relabellings" in rep and "Monte Carlo" in rep


def test_h2a_chance_of_a_flip_is_exact_mcnemar_on_relabelled_labels(tmp_path):
    """H2a is decided by exact McNemar and Holm: its chance of a flip is that of McNemar (scipy's exact binomial
    test) on relabelled labels, not of a bootstrap interval (8e-08 reported against 0.166 by relabelling)."""
    from scipy.stats import binomtest

    pre = prereg_file(tmp_path)
    org = Stage(tmp_path / "runs", "org", prereg_sha=sha256_file(pre))
    n, a_only, b_only, both = 30, 12, 1, 10
    for i in range(n):
        q = f"o{i:02d}"
        ra = i < both + a_only
        rb = i < both or both + a_only <= i < both + a_only + b_only
        org.add("shared", q, variant="public", correct=ra)
        org.add("isolated", q, variant="public", correct=rb)
    org.write()
    flipped = {run_id("isolated", f"o{i:02d}", variant="public") for i in range(3)}  # right under the main judge
    judge_file(org, "other", keep=lambda rid: True, relabel=flipped)
    out = analyse(tmp_path, pre)
    t = csv(out, "judge_robustness.csv")
    main = next(lab for lab in t["labels"].unique() if lab.startswith("main"))
    assert row(t[t["conclusion"] == "H2a"], labels=main)["verdict"] == "supported"
    r, sims = 3 / (2 * n), 4000
    rng = np.random.default_rng(5)
    ya = (np.arange(n) < both + a_only).astype(float)
    yb = ((np.arange(n) < both) | ((np.arange(n) >= both + a_only) & (np.arange(n) < both + a_only + b_only))).astype(float)
    fa = np.where(rng.random((sims, n)) < r, 1 - ya, ya)
    fb = np.where(rng.random((sims, n)) < r, 1 - yb, yb)
    a1, b1 = ((fa == 1) & (fb == 0)).sum(1), ((fa == 0) & (fb == 1)).sum(1)
    exact = {(x, y): binomtest(x, x + y, 0.5).pvalue if x + y else 1.0 for x, y in set(zip(a1.tolist(), b1.tolist()))}
    p = np.array([exact[(x, y)] for x, y in zip(a1.tolist(), b1.tolist())])
    holds = (p <= 0.05) & (a1 > b1)
    holm = np.minimum(1, 5 * p)  # the four other primary hypotheses are not run: p = 1
    verdict = np.where(holds & (holm <= 0.05), "supported",
                       np.where(holds, "holds unadjusted only", np.where(a1 > b1, "direction only", "not supported")))
    flip = verdict != "supported"
    x = row(t[t["conclusion"] == "H2a"], labels="other")
    se = math.sqrt(flip.mean() * (1 - flip.mean()) / sims)
    assert abs(x["p_chance"] - flip.mean()) <= 4.5 * math.hypot(x["p_chance_se"], se) + 0.005
    assert 0.02 < x["p_chance"] < 0.9, x["p_chance"]


def test_a_judge_that_never_graded_a_folder_is_not_comparable_there(tmp_path):
    """H2b (Org) under a judge whose only file is in the main folder: not comparable, overlap 0, no flip."""
    pre = prereg_file(tmp_path)
    sha = sha256_file(pre)
    st = stage_with_hybrid_wrong(tmp_path, sha, wrong=0)
    st.write()
    org_stage(tmp_path, sha).write()
    judge_file(st, "lmeonly", keep=lambda rid: True)  # agrees on main; never saw org
    (st.path / "judgements" / "lmeonly.jsonl").write_text(
        (st.path / "judgements" / "lmeonly.jsonl").read_text().replace('"label": true', '"label": false', 1))
    out = analyse(tmp_path, pre)
    t = csv(out, "judge_robustness.csv")
    h2b = t[t["conclusion"] == "H2b"]
    main = next(lab for lab in t["labels"].unique() if lab.startswith("main") and " on " not in lab)
    assert row(h2b, labels=main + " on lmeonly's runs", component=0)["verdict"].startswith("undecided")
    lme = row(h2b, labels="lmeonly", component=0)
    assert lme["verdict"].startswith("undecided") and lme["overlap"] == "0 of 24 labels"  # 12 runs: correct and leak
    v = C.compare_verdicts(t).set_index("conclusion")
    assert v.at["H2b", "flips"] == 0 and v.at["H2b", "checks"] == 0
    assert "lmeonly (overlap 0 of 24 labels)" in v.at["H2b", "not_comparable_under"]
    assert "flips" not in v.at["H2b", "robust"] and "not comparable" in v.at["H2b", "robust"]


@settings(max_examples=14, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(rule=hst.sampled_from(RULE_KINDS), both=hst.integers(0, 12), a_only=hst.integers(0, 10),
       b_only=hst.integers(0, 10), neither=hst.integers(0, 12), r=hst.sampled_from([0.0, 0.01, 0.05, 0.15, 0.3]))
@example(rule="comparison", both=4, a_only=0, b_only=0, neither=4, r=0.01)  # no discordant pair: not 1.000
@example(rule="mcnemar_superior", both=10, a_only=12, b_only=1, neither=7, r=0.05)
def test_the_chance_of_a_flip_agrees_with_an_independent_relabelling(rule, both, a_only, b_only, neither, r):
    """For random paired outcome tables, the chance of a flip the shared function estimates (the rule run by
    prereg.redecide / decide_comparison on relabellings) agrees with a brute-force relabelling written here
    within Monte Carlo error; r = 0 flips nothing."""
    from analysis import prereg as P
    from analysis.tables.common import Settings

    ya = np.array([1] * both + [1] * a_only + [0] * b_only + [0] * neither, float)
    yb = np.array([1] * both + [0] * a_only + [1] * b_only + [0] * neither, float)
    assume(len(ya) >= 2)
    prereg, ctx, runs = _tiny_hypothesis("noninferiority" if rule == "comparison" else rule, ya, yb)
    B, sims = 200, 300
    ref = P.evaluate(prereg, ctx)
    pairs = {"cmp": P.paired_reads(runs, "f", "", "a", "b")[0]} if rule == "comparison" else {}
    cid = "cmp" if rule == "comparison" else "Hx"
    got = C.simulate_flips(prereg, ref, pairs, P.labels_of(runs), {cid: {"correct": (round(r * 1000), 1000)}},
                           np.random.default_rng(1), sims, Settings(3, B, 0.95))
    p, se = got[cid]
    if r == 0:
        assert (p, se) == (0.0, 0.0)
        return
    rng = np.random.default_rng(99)
    m = 3000
    fa = np.where(rng.random((m, len(ya))) < r, 1 - ya, ya)
    fb = np.where(rng.random((m, len(yb))) < r, 1 - yb, yb)
    thr = int(ya.sum())
    base = _brute_verdicts(rule, ya[None, :], yb[None, :], B, 3, thr)[0]
    want = (_brute_verdicts(rule, fa, fb, B, 3, thr) != base).mean()
    tol = 4.5 * math.hypot(se, math.sqrt(want * (1 - want) / m)) + 0.01
    assert abs(p - want) <= tol, (rule, p, want)


@pytest.mark.parametrize("rule", [k for k in RULE_KINDS if k != "comparison"])
def test_the_simulation_decides_through_the_function_that_decided_the_report(rule):
    """redecide on the labels evaluate read gives exactly evaluate's outcome (estimate, interval, p, verdict): the
    relabelling simulation runs the report's own decision, not a model of it."""
    import dataclasses

    from analysis import prereg as P

    ya = np.array([1] * 9 + [1] * 6 + [0] * 2 + [0] * 3, float)
    yb = np.array([1] * 9 + [0] * 6 + [1] * 2 + [0] * 3, float)
    prereg, ctx, runs = _tiny_hypothesis(rule, ya, yb)
    base = P.evaluate(prereg, ctx)
    again = P.redecide(prereg, base, P.labels_of(runs))
    keep = ("estimate", "lo", "hi", "p", "holds", "direction", "n", "note")
    for o0, o1 in zip(base, again):
        assert (o0.outcome, o0.p, o0.supported) == (o1.outcome, o1.p, o1.supported)
        for c0, c1 in zip(o0.components, o1.components):
            assert {k: getattr(c0, k) for k in keep} == {k: getattr(c1, k) for k in keep}
            assert c0.reads is not None and c0 is not c1
    flipped = P.labels_of(runs)
    flipped["correct"] = 1 - flipped["correct"]  # every label flipped: the decision follows the labels
    assert P.redecide(prereg, base, flipped)[0].components[0].estimate != base[0].components[0].estimate
    assert dataclasses.replace(base[0]).outcome == base[0].outcome


def test_the_chance_of_a_flip_reads_only_the_labels_of_its_kind_each_conclusion_reads(tmp_path):
    """The other judge changed 3 public `correct` labels and none of the 30 leak labels H2b counts: H2b cannot
    flip by chance (its leak rate is 0/30, not a rate pooled over every label), and a conclusion on the public
    correct labels is flipped at its own rate (3 of the 60 labels it reads)."""
    pre = prereg_file(tmp_path)
    org = Stage(tmp_path / "runs", "org", prereg_sha=sha256_file(pre))
    for i in range(30):
        q = f"o{i:02d}"
        org.add("shared", q, variant="public", correct=i < 25, prompt=200, output=20)
        org.add("isolated", q, variant="public", correct=i < 5, prompt=200, output=20)
        org.add("ask_agent", q, variant="public", correct=i < 25, prompt=2000, output=200, wall_s=5.0)
    for i in range(30):
        q = f"p{i:02d}"
        org.add("shared", q, variant="private", correct=True, leak=False)
        org.add("no_view", q, variant="private", correct=False, leak=i < 10)
    org.write()
    judge_file(org, "other", keep=lambda rid: True,
               relabel={run_id("shared", f"o{i:02d}", variant="public") for i in range(3)})
    t = csv(analyse(tmp_path, pre), "judge_robustness.csv")
    o = t[t["labels"] == "other"].drop_duplicates("conclusion").set_index("conclusion")
    h2b = o.loc["H2b"]
    assert h2b["p_chance"] == 0.0 and h2b["chance_rate"].startswith("leak 0/"), (h2b["p_chance"], h2b["chance_rate"])
    h2a = o.loc["H2a"]
    assert h2a["chance_rate"] == "correct 3/60", h2a["chance_rate"]


def test_labels_no_conclusion_reads_give_no_chance_of_a_flip(tmp_path):
    """The other judge differs only on repeat-1 runs, which no conclusion reads: every chance is 0 (a pooled rate
    gave H1c 0.42)."""
    pre = prereg_file(tmp_path)
    st = Stage(tmp_path / "runs", "main", prereg_sha=sha256_file(pre))
    for rep in (0, 1):
        for i in range(20):
            st.add("session_search", f"q{i:02d}", repeat=rep, correct=True, prompt=1000, output=100, calls=3)
            st.add("tool_hybrid", f"q{i:02d}", repeat=rep, correct=True, prompt=500, output=50, calls=3)
    st.write()
    judge_file(st, "other", keep=lambda rid: True,
               relabel={run_id("tool_hybrid", "q03", repeat=1), run_id("tool_hybrid", "q04", repeat=1)})
    t = csv(analyse(tmp_path, pre), "judge_robustness.csv")
    o = t[(t["labels"] == "other") & t["p_chance"].notna()]
    assert "H1c" in set(o["conclusion"])
    assert (o["p_chance"] == 0.0).all(), o[["conclusion", "p_chance", "chance_rate"]]
    assert o["chance_rate"].str.contains(r"correct 0/\d+").all()


@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(n=hst.integers(12, 30), a_only=hst.integers(3, 12), b_only=hst.integers(0, 4),
       r=hst.sampled_from([0.0, 0.02, 0.05]))
@example(n=20, a_only=10, b_only=3, r=0.0)  # the auditor's table: 1,000 and 10,000 resamples disagree
@example(n=20, a_only=10, b_only=3, r=0.02)
def test_the_reference_of_the_chance_is_the_reported_verdict_at_the_registered_resamples(n, a_only, b_only, r):
    """On tables near the edge of the interval (10 vs 3 discordant of 20), the simulation decides at the registered
    resamples on the report's bootstrap draw: r = 0 flips nothing, and the chance agrees with a brute-force
    relabelling decided at the registered count against the reported verdict (not a verdict at fewer resamples)."""
    from analysis.stats import resample_counts
    from analysis.tables.common import Settings

    assume(a_only + b_only <= n)
    B, seed = 10_000, 20261009
    ya, yb, runs, prereg, reads = _borderline(n, a_only, b_only, B, seed)
    st = Settings(seed, B, 0.95)
    from analysis import prereg as P

    reported = C.decide_comparison(reads, P.labels_of(runs), st)["verdict"]
    sims = 200
    got = C.simulate_flips(prereg, [], {"cmp": reads}, P.labels_of(runs), {"cmp": {"correct": (round(r * 1000), 1000)}},
                           np.random.default_rng(7), sims, st)["cmp"]
    if r == 0:
        assert got == (0.0, 0.0)
        return
    K = resample_counts(n, B, seed).astype(float)
    rng = np.random.default_rng(99)
    m = 2000
    fa = np.where(rng.random((m, n)) < r, 1 - ya, ya)
    fb = np.where(rng.random((m, n)) < r, 1 - yb, yb)
    lo, hi = np.quantile(100 * (fa - fb) @ K / n, [0.025, 0.975], axis=1)
    v = np.where(lo > 0, "a > b", np.where(hi < 0, "a < b", "no difference shown"))
    want = (v != reported).mean()
    tol = 4.5 * math.hypot(got[1], math.sqrt(want * (1 - want) / m)) + 0.01
    assert abs(got[0] - want) <= tol, (got, want, reported)
