"""Shared builders of the tests of conclusions a reader can trust (judge flips, errata, power, the probe):
stages with known labels, a second judge's file, the errata text, small hypotheses and the LongMemEval-shaped
questions the probe plants answers in. Not a test module."""

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


TYPES = ["single-session-user", "multi-session", "temporal-reasoning", "knowledge-update"]


def analyse(tmp_path: Path, prereg: Path, *extra: str, out: str = "results") -> Path:
    out_dir = tmp_path / out
    assert A.main([f"runs={tmp_path / 'runs'}", f"out={out_dir}", f"prereg={prereg}", "replay=none", *extra]) == 0
    return out_dir


def main_stage(tmp_path: Path, sha: str) -> Stage:
    """20 questions, both conditions right on every one under the main judge (H1c: difference 0)."""
    st = Stage(tmp_path / "runs", "main", prereg_sha=sha)
    for i in range(20):
        q = f"q{i:02d}"
        st.add("session_search", q, qtype=TYPES[i % 4], correct=True, prompt=1000, output=100, calls=3)
        st.add("tool_hybrid", q, qtype=TYPES[i % 4], correct=True, prompt=500, output=50, calls=3)
    return st


def second_judge(st: Stage, name: str, wrong: set[str], prompt_source: str = "builtin") -> None:
    """Another judge's file: the main judge's lines with `wrong` runs labelled no."""
    lines = []
    for j in st.judgements:
        j = {**j, "judge": {**j["judge"], "name": name, "identity": f"t:{name}"}, "prompt_source": prompt_source}
        if j["run_id"] in wrong:
            j.update(label=False, reply="no")
        lines.append(j)
    path = st.path / "judgements" / f"{name}.jsonl"
    path.write_text("".join(json.dumps(x, sort_keys=True) + "\n" for x in lines))


ERRATA = """errata_format: 1
name: test-errata
version: "1"
applies_to: [{file: data.json, sha256: dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd}]
entries:
  - {qid: q00, action: answer, answer: "forty-two", source: "https://example.org/report/1", reasoning: "the gold is 41 by mistake"}
  - {qid: q01, action: exclude, source: "https://example.org/report/2", reasoning: "no answer is supported"}
  - {qid: q02, action: evidence, evidence: null, source: "https://example.org/report/3", reasoning: "wrong session"}
notes:
  - {source: "https://example.org/report/4", reasoning: "which file a table used"}
"""


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


def org_stage(tmp_path, sha: str) -> Stage:
    org = Stage(tmp_path / "runs", "org", prereg_sha=sha)
    for i in range(6):
        q = f"p{i}"
        org.add("shared", q, variant="private", correct=True, leak=False)
        org.add("no_view", q, variant="private", correct=False, leak=i < 4)
    return org


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


def comparison(rule: str, n: int, effect: float, spread: float, threshold: float, hypothesis: str = "Hx"):
    from analysis import power as W

    alpha1 = 0.025
    return W.Comparison(hypothesis, rule, f"{rule} test", "a", "b", "", n, effect, "given", spread, "given", threshold,
                        alpha1, 0.01)


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
