"""Trust that survives a statistician (issue 34): flips only against the same runs, chance flips,
planted answers that are what they claim, power of the registered rule, errata pins, intervals."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as hst

from analysis import conclusions as C
from tests.analysis_fixtures import JUDGE, Stage, run_id, sha256_file
from tests.test_analysis import csv, holm_by_hand, prereg_file, row
from tests.test_trust import TYPES, analyse, second_judge


def stage_with_hybrid_wrong(tmp_path, sha: str, wrong: int) -> Stage:
    """20 questions; the main judge marks the first `wrong` hybrid answers wrong, every other answer right."""
    st = Stage(tmp_path / "runs", "main", prereg_sha=sha)
    for i in range(20):
        q = f"q{i:02d}"
        st.add("session_search", q, qtype=TYPES[i % 4], correct=True, prompt=1000, output=100, calls=3)
        st.add("tool_hybrid", q, qtype=TYPES[i % 4], correct=i >= wrong, prompt=500, output=50, calls=3)
    return st


def judge_file(st: Stage, name: str, keep, relabel=frozenset()) -> None:
    """Another judge's file: the main judge's lines of the runs `keep` accepts, `relabel` runs turned to no."""
    lines = []
    for j in st.judgements:
        if not keep(j["run_id"]):
            continue
        j = {**j, "judge": {**j["judge"], "name": name, "identity": f"t:{name}"}}
        if j["run_id"] in relabel:
            j.update(label=False, reply="no")
        lines.append(j)
    (st.path / "judgements" / f"{name}.jsonl").write_text("".join(json.dumps(x, sort_keys=True) + "\n" for x in lines))


# ------------------------------------------------------------------------------ 1. a flip is a flip


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


def org_stage(tmp_path, sha: str) -> Stage:
    org = Stage(tmp_path / "runs", "org", prereg_sha=sha)
    for i in range(6):
        q = f"p{i}"
        org.add("shared", q, variant="private", correct=True, leak=False)
        org.add("no_view", q, variant="private", correct=False, leak=i < 4)
    return org


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


def _tiny_hypothesis(rule: str, ya: np.ndarray, yb: np.ndarray):
    """One registered test of `rule` on a two-condition folder (a: ya, b: yb), as prereg reads it."""
    import types

    import pandas as pd

    from analysis import prereg as P

    n = len(ya)
    runs = pd.DataFrame([{"folder": "f", "variant": "", "condition": c, "repeat": 0, "qid": f"q{i:03d}",
                          "correct": float(y[i]), "leak": math.nan}
                         for c, y in (("a", ya), ("b", yb)) for i in range(n)])
    t = {"rule": rule, "a": "a", "b": "b"}
    t.update({"noninferiority": {"margin": 5.0}, "accuracy_above": {"threshold": 0.0},
              "count_at_most": {"condition": "a", "measure": "correct", "threshold": int(ya.sum())},
              "count_at_least": {"condition": "a", "measure": "correct", "threshold": int(ya.sum())}}.get(rule, {}))
    h = {"id": "Hx", "family": "secondary", "stage": "main", "statement": "", "tests": [t],
         "origin": {"source": "reconstructed", "quote": [], "why": "a test"}}
    prereg = P.Prereg(__import__("pathlib").Path("tiny.yaml"), "0" * 64,
                      {"alpha": 0.05, "confidence": 0.95, "seed": 3, "resamples": 200, "primary_resamples": 200,
                       "holm_family": []}, [], [h])
    ctx = P.Context(runs, [types.SimpleNamespace(name="f", stage="main", info={})], None, {})
    return prereg, ctx, runs


def _brute_verdicts(rule: str, fa: np.ndarray, fb: np.ndarray, B: int, seed: int, thr_count: int) -> np.ndarray:
    """Each relabelled row decided independently of prereg: scipy's exact binomial test for McNemar, the
    percentile interval of the paired difference on the analysis's resample draw, a count by hand."""
    from scipy.stats import binomtest

    from analysis.stats import resample_counts

    n = fa.shape[1]
    if rule in ("count_at_most", "count_at_least"):
        k = fa.sum(1)
        ok = k <= thr_count if rule == "count_at_most" else k >= thr_count
        return np.where(ok, "supported", "not supported")
    if rule == "mcnemar_superior":
        a1, b1 = ((fa == 1) & (fb == 0)).sum(1).tolist(), ((fa == 0) & (fb == 1)).sum(1).tolist()
        exact = {(x, y): binomtest(x, x + y, 0.5).pvalue if x + y else 1.0 for x, y in set(zip(a1, b1))}
        p = np.array([exact[k] for k in zip(a1, b1)])
        a1, b1 = np.array(a1), np.array(b1)
        return np.where((p <= 0.05) & (a1 > b1), "supported", np.where(a1 > b1, "direction only", "not supported"))
    d = 100 * (fa - fb)
    boot = d @ resample_counts(n, B, seed).astype(float) / n
    lo, hi = np.quantile(boot, [0.025, 0.975], axis=1)
    est = d.mean(1)
    if rule == "comparison":
        return np.where(lo > 0, "a > b", np.where(hi < 0, "a < b", "no difference shown"))
    thr = -5.0 if rule == "noninferiority" else 0.0
    return np.where(lo > thr, "supported", np.where(est > thr, "direction only", "not supported"))


RULE_KINDS = ("mcnemar_superior", "noninferiority", "accuracy_above", "comparison", "count_at_most", "count_at_least")


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


def _borderline(n: int, a_only: int, b_only: int, B: int, seed: int):
    ya = np.array([1] * a_only + [0] * b_only + [0] * (n - a_only - b_only), float)
    yb = np.array([0] * a_only + [1] * b_only + [0] * (n - a_only - b_only), float)
    import pandas as pd

    from analysis import prereg as P

    runs = pd.DataFrame([{"folder": "f", "variant": "", "condition": c, "repeat": 0, "qid": f"q{i:03d}",
                          "correct": float(y[i]), "leak": math.nan} for c, y in (("a", ya), ("b", yb))
                         for i in range(n)])
    prereg = P.Prereg(__import__("pathlib").Path("x"), "0" * 64,
                      {"alpha": 0.05, "confidence": 0.95, "seed": seed, "resamples": B, "primary_resamples": B,
                       "holm_family": []}, [], [])
    return ya, yb, runs, prereg, P.paired_reads(runs, "f", "", "a", "b")[0]


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


def test_the_corrected_view_scores_every_judge_against_the_corrected_gold(tmp_path):
    """q00's gold is corrected. A second judge marked hybrid's q00 answer wrong against the old gold (a flip of
    H1c under the official gold) and right against the corrected one: under the corrected gold it flips
    nothing; a judge with no judgements against the corrected answer has q00 left out there."""
    from harness.data import errata as E
    from tests.test_trust import ERRATA, main_stage

    pre = prereg_file(tmp_path)
    st = main_stage(tmp_path, sha256_file(pre))
    st.write()
    path = tmp_path / "errata.yaml"
    path.write_text(ERRATA)
    er = E.load(path)
    jdir = st.path / "judgements"

    def against_corrected(name: str) -> None:
        lines = [{**j, "judge": {**j["judge"], "name": f"{name}.{er.tag}"}} for j in st.judgements if j["qid"] == "q00"]
        (jdir / f"{er.judgements_name(name)}.jsonl").write_text("".join(json.dumps(x, sort_keys=True) + "\n"
                                                                       for x in lines))

    against_corrected(JUDGE)
    q00 = run_id("tool_hybrid", "q00")
    second_judge(st, "oldgold", {q00})
    against_corrected("oldgold")
    second_judge(st, "nocorr", {q00})
    out = analyse(tmp_path, pre, f"errata={path}", f"errata_sha256={er.sha256}")
    off = C.compare_verdicts(csv(out, "judge_robustness.csv")).set_index("conclusion")
    assert off.at["H1c", "flips_under"] == "nocorr; oldgold"  # against the official gold both flip it
    t = csv(out / "corrected", "judge_robustness.csv")
    cor = C.compare_verdicts(t).set_index("conclusion")
    assert (cor["flips"] == 0).all() and cor.at["H1c", "checks"] == 2
    h1c = t[t["conclusion"] == "H1c"]
    assert row(h1c, labels="oldgold")["n"] == 19 and row(h1c, labels="oldgold")["verdict"] == "supported"  # q01 out
    assert row(h1c, labels="nocorr")["n"] == 18  # and q00, which it never judged against the corrected answer
    assert row(h1c, labels="nocorr")["against"].endswith("on nocorr's runs")


# ------------------------------------------------------------------------------ 4. errata: pinned, and for its data


def test_an_errata_pin_is_the_full_sha256_and_a_prefix_or_another_file_is_refused(tmp_path):
    import hashlib

    from harness.data import errata as E
    from tests.test_trust import ERRATA

    path = tmp_path / "e.yaml"
    path.write_text(ERRATA)
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    assert E.load(path, sha).sha256 == sha and E.load(path, sha.upper()).sha256 == sha
    for pin in (sha[:1], sha[:12], sha[:63]):
        with pytest.raises(E.ErrataError, match="full 64-digit sha256"):
            E.load(path, pin)
    path.write_text(ERRATA.replace("by mistake", "by mistake!"))  # a modified file under the old pin
    with pytest.raises(E.ErrataError, match="the file changed"):
        E.load(path, sha)
    path.write_text(ERRATA[:ERRATA.index("applies_to:")] + ERRATA[ERRATA.index("entries:"):])
    with pytest.raises(E.ErrataError, match="applies_to"):
        E.load(path)


def test_errata_apply_only_to_the_data_they_list_by_content_and_are_refused_where_none_matches(tmp_path):
    """The main folder's data has the listed sha256; the Org folder's file has the same name (data.json) but
    another content: it keeps the official gold (its q-ids overlap). An errata file listing neither content is
    refused with exit 2, whatever the names."""
    from analysis import run as A
    from tests.test_trust import ERRATA

    pre = prereg_file(tmp_path)
    sha = sha256_file(pre)
    st = stage_with_hybrid_wrong(tmp_path, sha, wrong=0)
    st.write()
    org = Stage(tmp_path / "runs", "org", prereg_sha=sha,
                data={"path": "/gen/data.json", "sha256": "e" * 64, "kind": "org"})  # the listed name, other content
    for q in ("q01", "q02"):  # the same question ids as the main stage's excluded and evidence entries
        org.add("shared", q, variant="public", correct=True)
        org.add("isolated", q, variant="public", correct=False)
    org.write()
    path = tmp_path / "errata.yaml"
    path.write_text(ERRATA)
    out = analyse(tmp_path, pre, f"errata={path}")
    aff = csv(out, "errata.csv")
    assert set(aff["folder"]) == {"main/main"}  # the Org folder is not touched
    runs = csv(out / "corrected", "runs.csv")
    assert set(runs.loc[runs["folder"] == "org/org", "qid"]) == {"q01", "q02"}  # q01 not excluded there
    assert "q01" not in set(runs.loc[runs["folder"] == "main/main", "qid"])
    rep = (out / "report.md").read_text()
    assert "not applied to org/org (data.json, sha256 eeeeeeeeeeee)" in rep
    other = tmp_path / "other.yaml"
    other.write_text(ERRATA.replace("d" * 64, "a" * 64))  # another content (the name data.json kept): refused
    assert A.main([f"runs={tmp_path / 'runs'}", f"out={tmp_path / 'r2'}", f"prereg={pre}", "replay=none",
                   f"errata={other}"]) == 2


@settings(max_examples=40, deadline=None, derandomize=True)
@given(listed=hst.lists(hst.tuples(hst.from_regex(r"[a-z_]{1,12}\.json", fullmatch=True),
                                   hst.from_regex(r"[0-9a-f]{64}", fullmatch=True)), min_size=1, max_size=3),
       name=hst.from_regex(r"[a-z_]{1,12}\.json", fullmatch=True), sha=hst.from_regex(r"[0-9a-f]{64}", fullmatch=True))
def test_errata_apply_by_content_never_by_name(tmp_path_factory, listed, name, sha):
    """Any listed files, any data file: the corrections apply exactly when its sha256 is listed, whatever its name."""
    import yaml

    from harness.data import errata as E

    path = tmp_path_factory.mktemp("e") / "e.yaml"
    path.write_text(yaml.safe_dump({"errata_format": 1, "name": "x", "applies_to": [{"file": f, "sha256": h}
                                                                                     for f, h in listed],
                                    "notes": [{"source": "https://example.org/1", "reasoning": "r"}]}))
    er = E.load(path)
    assert er.applies(sha) == (sha in {h for _, h in listed})
    for f, h in listed:
        assert er.applies(h) and er.applies(h.upper())
    assert not er.applies(None) and not any(er.applies(f) for f, _ in listed)  # a name is never a match
    if sha not in {h for _, h in listed}:
        with pytest.raises(E.ErrataError, match="refused"):
            er.require({sha: f"/x/{listed[0][0]}"}, "here")  # the listed name with another content


def test_the_shipped_errata_list_every_open_report_with_its_choice():
    from pathlib import Path

    from harness.data import errata as E

    er = E.load(Path(__file__).resolve().parents[1] / "data" / "errata" / "longmemeval.yaml")
    rep = er.reports()
    by_issue: dict[str, list[dict]] = {}
    for r in rep:
        for s in r["source"].split():
            by_issue.setdefault(s.rsplit("/", 1)[-1], []).append(r)
    assert {"19", "27", "37", "38", "40", "50"} <= set(by_issue)
    assert {r["choice"] for r in rep} <= {"corrected (answer)", "corrected (evidence)", "excluded", "left"}
    assert [r["qid"] for r in by_issue["50"]] == ["9aaed6a3", "gpt4_f420262d", "gpt4_5dcc0aab"]  # all three items
    assert {r["qid"]: r["choice"] for r in by_issue["40"]} == {"370a8ff4": "corrected (answer)",
                                                               "gpt4_88806d6e": "left"}
    assert by_issue["38"][0]["choice"] == "left"
    assert er.applies_to == {"d6f21ea9d60a0d56f34a05b609c79c88a451d2ae03597821ea3d5a9678c3a442":
                             "longmemeval_s_cleaned.json"}  # by content: the published S file


# ------------------------------------------------------------------------------ 3. power for the rule that decides


def comparison(rule: str, n: int, effect: float, spread: float, threshold: float, hypothesis: str = "Hx"):
    from analysis import power as W

    alpha1 = 0.025
    return W.Comparison(hypothesis, rule, f"{rule} test", "a", "b", "", n, effect, "given", spread, "given", threshold,
                        alpha1, 0.01)


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


# ------------------------------------------------------------------------------ 2. planted answers that are what they claim

LME = [  # LongMemEval-style questions and golds (the shapes of the cleaned S file: alternatives, lists, orders, money)
    ("a1", "multi-session", "How much did I spend on the bike and the helmet in total?", "$2,500"),
    ("a2", "temporal-reasoning", "How many weeks had passed since I recovered from the flu when I went on my 10th "
     "outdoor jog?", "11 weeks (81 days, from 2023-01-19 to 2023-04-10; 12 weeks if rounded up)"),
    ("a3", "temporal-reasoning", "How many days did it take me to finish the book?",
     "21 days. 22 days (including the last day) is also acceptable."),
    ("a4", "temporal-reasoning", "Which event happened first, the purchase of the coffee maker or the malfunction of "
     "the stand mixer?", "The malfunction of the stand mixer"),
    ("a5", "temporal-reasoning", "Who did I meet first, Mark and Sarah or Tom?", "Tom"),
    ("a6", "multi-session", "Which friends came to my birthday dinner?", "Alice, Bob and Carol"),
    ("a7", "single-session-user", "Which pair of shoes did I clean last month?", "white Adidas sneakers"),
    ("a8", "knowledge-update", "How many bikes do I own now?", "3"),
    ("a9", "temporal-reasoning", "When did I start my new job?", "March 2023"),
    ("b1", "multi-session", "What is the order of the three trips I took, from earliest to latest?",
     "Japan, Italy and Peru"),
    ("b2", "multi-session", "How many plants did I buy, and which was the first one?", "4 plants; the first was a fern"),
]


def lme_questions() -> list[dict]:
    qs = [{"qid": q, "qtype": t, "question": text, "gold": g, "abstention": False} for q, t, text, g in LME]
    return qs + [{"qid": "c1_abs", "qtype": "single-session-user", "question": "What is my hamster's name?",
                  "gold": "You did not mention a hamster.", "abstention": True}]


def test_each_transformation_is_applied_only_where_it_keeps_or_changes_the_answer():
    from judge import probe as PR

    kept, dropped = PR.plant_checked(lme_questions(), seed=0)
    by = {(p["qid"], p["kind"]): p["answer"] for p in kept}
    assert not dropped
    # no list is reordered (issue 44: whether a comma or "and" separates items is a reading of the gold)
    assert not any(k == "reordered" for (q, k) in by)
    # a number changed only where it is the asked value, and no accepted alternative survives
    assert ("a7", "changed_number") not in by and ("a9", "changed_number") not in by
    for q in ("a1", "a2", "a3", "a8"):
        changed = by[(q, "changed_number")]
        assert not (PR.numbers(changed) & PR.numbers(dict((x[0], x[3]) for x in LME)[q]))
    assert by[("a1", "changed_number")] == "$2,503"  # "$2,500" is one number
    assert by[("a9", "changed_date")] == "June 2023"
    # every kept answer passes the second rule, and that rule refuses what the old probe planted
    assert all(PR.check(p) == "" for p in kept)
    a2 = next(p for p in kept if p["qid"] == "a2")
    bad = [
        {**a2, "kind": "changed_number", "answer": "15 weeks (81 days; 12 weeks if rounded up)"},  # alternative kept
        {**a2, "kind": "reordered", "qid": "a1", "gold": "$2,500", "answer": "500 and $2",
         "question": LME[0][2]},  # money split
        {**a2, "kind": "reordered", "gold": "Japan, Italy and Peru", "answer": "Peru, Italy and Japan",
         "question": LME[9][2]},  # an order reversed
        {**a2, "kind": "number_words", "answer": "It was twelve weeks."},  # not the gold's number
        {**a2, "kind": "changed_number", "question": "Which pair of shoes did I clean last month?",
         "gold": "2 pairs of white Adidas sneakers", "answer": "5 pairs of white Adidas sneakers"},  # not asked
    ]
    assert all(PR.check(p) for p in bad), [PR.check(p) for p in bad]


def test_a_substring_matcher_fails_the_probe_on_longmemeval_answers():
    """Right answers that share no surface form with the gold (its numbers in words) and wrong ones that do (the
    gold named and denied): the substring control judge errs both ways."""
    from judge import probe as PR

    kept = PR.plant(lme_questions(), seed=0)
    said = [(p["truth"], PR.substring_judge(p["gold"], p["answer"], p["abstention"])) for p in kept]
    fp = sum(1 for truth, yes in said if not truth and yes)
    fn = sum(1 for truth, yes in said if truth and not yes)
    wrong, right = sum(1 for t, _ in said if not t), sum(1 for t, _ in said if t)
    assert fp >= len([q for q in LME]) and fn >= 3  # every denial accepted; the numbers in words refused
    assert fp / wrong > 0.2 and fn / right > 0.1


def test_probe_rates_are_clustered_by_question_and_the_correction_is_per_condition_and_per_difference(tmp_path):
    """A perfect judge's probe on the LongMemEval-style stage (judgements written as `make probe` would): its
    rates are 0, the control's are not; the corrected accuracy of each condition and the corrected paired
    difference carry the accuracy's own sampling error (the old range had none from the accuracy)."""
    from judge.probe import judgements_name, probe_records

    pre = prereg_file(tmp_path)
    st = Stage(tmp_path / "runs", "main", prereg_sha=sha256_file(pre))
    for i, (q, t, text, g) in enumerate(LME * 3):
        qid = f"{q}x{i // len(LME)}"
        for cond, ok in (("session_search", i % 3 != 0), ("tool_hybrid", i % 4 != 0)):
            st.add(cond, qid, qtype=t, gold=g, correct=ok)["question"] = text
    st.write()
    planted = probe_records(st.records, 0)
    template = st.judgements[0]
    lines = [{**template, "run_id": p["run_id"], "qid": p["qid"], "qtype": p["qtype"], "condition": "probe",
              "label": bool(p["condition_notes"]["probe_truth"]), "reply": "yes"} for p in planted]
    (st.path / "judgements" / f"{judgements_name(JUDGE)}.jsonl").write_text(
        "".join(json.dumps(x, sort_keys=True) + "\n" for x in lines))
    out = analyse(tmp_path, pre)
    t = csv(out, "judge_error.csv")
    perfect = row(t, qtype="all", judge=JUDGE)
    assert perfect["false_positives"] == 0 and perfect["false_negatives"] == 0 and perfect["fp_hi"] > 0
    ctl = row(t, qtype="all", judge="substring (control)")
    assert ctl["fp_rate"] > 0.2 and ctl["fn_rate"] > 0.05
    # clustered: the control's errors sit in few questions' answers -> wider than plain Wilson on the answers
    from statsmodels.stats.proportion import proportion_confint

    lo, hi = proportion_confint(ctl["false_positives"], ctl["planted_wrong"], alpha=0.05, method="wilson")
    assert ctl["fp_hi"] - ctl["fp_lo"] >= hi - lo - 1e-12
    c = csv(out, "judge_corrected.csv")
    for cond in ("session_search", "tool_hybrid"):
        r = row(c, kind="condition", what=cond)
        p, n = r["reported"], r["n"]
        assert r["corrected"] == pytest.approx(p)  # no judge error measured: nothing to correct
        half = 1.96 * math.sqrt(p * (1 - p) / n)  # the accuracy's own error, closed form
        assert (r["corrected_hi"] - r["corrected_lo"]) / 2 == pytest.approx(half, rel=0.25)
    d = row(c, kind="difference", what="tool_hybrid − session_search (points)")
    assert d["n"] == 33 and d["corrected"] == pytest.approx(d["reported"]) and d["corrected_lo"] < d["corrected_hi"]


# ------------------------------------------------------------------------------ 5. intervals where numbers are compared


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


def test_the_errata_list_the_open_reports_they_missed_and_claim_nothing_unread():
    """Open LongMemEval reports #12 (ad7109d1), #21 (dd2973ad), #22 (51a45a95) and #41 (370a8ff4 filed again after
    #40 was closed) had no choice recorded; #50's third item was described (a question about shoes) from an excerpt
    that ends at the question id."""
    from pathlib import Path

    from harness.data import errata as E

    er = E.load(Path(__file__).resolve().parents[1] / "data" / "errata" / "longmemeval.yaml")
    by: dict[str, dict[str, str]] = {}
    for r in er.reports():
        for s in r["source"].split():
            by.setdefault(s.rsplit("/", 1)[-1], {})[r["qid"]] = r["choice"]
    assert by["41"] == {"370a8ff4": "corrected (answer)"}
    assert by["21"] == {"dd2973ad": "excluded"}  # acknowledged upstream; no corrected bedtime established
    assert by["12"] == {"ad7109d1": "left"} and by["22"] == {"51a45a95": "left"}
    third = next(n for n in er.notes if n.get("qid") == "gpt4_5dcc0aab")["reasoning"].lower()
    assert "shoe" not in third and "cut off" in third


def _exact_mcnemar_power(n: int, psi: float, delta: float, alpha: float = 0.05) -> float:
    """Independent of analysis.power: m ~ Bin(n, psi) discordant, a_only | m ~ Bin(m, (psi + delta) / (2 psi)),
    decided by scipy's binomtest."""
    from scipy.stats import binom, binomtest

    tot = 0.0
    for m in range(1, n + 1):
        pm = binom.pmf(m, n, psi)
        if pm < 1e-13:
            continue
        for a in range(m // 2 + 1, m + 1):
            if binomtest(a, m, 0.5).pvalue <= alpha:
                tot += pm * binom.sf(a - 1, m, (psi + delta) / (2 * psi))
                break  # every larger a_only is also significant
    return tot


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
