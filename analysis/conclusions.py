"""Every conclusion of the analysis recomputed on other labels: would it still hold?

A conclusion is a pre-registered hypothesis (its outcome, and each test's effect and interval)
or a paired accuracy comparison of Tables 1 and 2 (a − b in points with its bootstrap interval;
its verdict: a > b or a < b when the interval excludes 0, else no difference shown). The labels
change when another judge graded the runs (analysis/tables/judge_robustness.py) or when the gold
is corrected (analysis/errata.py); both call `conclusions` with a runs frame whose `correct`
(and `leak`) columns hold the other labels, and `compare_verdicts` to say which conclusion flips.
Nothing else differs: the same questions, pairing, seed and resamples as the main analysis.

A check is one conclusion under one other set of labels, set against a reference verdict on the
same runs (`against`): a judge that graded a sample is compared with the main judge on that
sample, never with the main judge on all runs. A check whose verdict or reference is undecided
(missing judgements, nothing graded) is "not comparable" and shows its overlap (n of the main's n).
`p_chance` is the probability that the check flips by chance: each label the other judge gave
disagrees independently with the main judge's at that judge's observed rate r (no systematic
disagreement), which moves an accuracy difference in points by N(-2 r d, 100^2 2 r (1 - r) / n) and
a count of k by k - Binom(k, r) + Binom(n - k, r) (exact); summed over the checks it is the flips chance alone gives.
"""

from __future__ import annotations

import math
from typing import Any

from statistics import NormalDist

import numpy as np
import pandas as pd

from analysis import prereg as P
from analysis.tables.common import compare

COLUMNS = ("conclusion", "kind", "component", "test", "labels", "main", "n", "estimate", "lo", "hi", "p",
           "holds", "verdict", "rule", "threshold", "against", "p_chance", "folder", "overlap")
NOT_DECIDED = ("not run", "not evaluable", "undecided", "descriptive")
ACCURACY_RULES = ("noninferiority", "accuracy_above", "mcnemar_superior")  # decided on the lower bound
COUNT_RULES = {"count_at_most": "<=", "count_at_least": ">="}
_N = NormalDist()


def comparison_id(folder: str, variant: str, a: str, b: str) -> str:
    return f"{folder}{' ' + variant if variant else ''}: {a} vs {b}"


def pair_verdict(est: float, lo: float, hi: float) -> str:
    if est is None or (isinstance(est, float) and math.isnan(est)):
        return "not evaluable"
    if lo > 0:
        return "a > b"
    if hi < 0:
        return "a < b"
    return "no difference shown"


def accuracy_pairs(res: Any) -> list[tuple[str, str, str, str]]:
    """(folder, variant, a, b) of every paired accuracy comparison of Tables 1 and 2."""
    pairs = res.table("comparisons")
    if pairs.empty:
        return []
    acc = pairs[pairs["statistic"] == "accuracy_diff_points"]
    return list(dict.fromkeys((r.folder, r.variant, r.a, r.b) for r in acc.itertuples()))


def outcome_rows(outcomes: list, judged: set[str], labels: str, main: bool) -> list[dict]:
    """One row per test of every hypothesis in `judged` (those reading judgements; the others cannot change)."""
    rows = []
    for o in outcomes:
        if o.id not in judged:
            continue
        for c in o.components:
            rows.append({"conclusion": o.id, "kind": "hypothesis", "component": c.index, "test": c.what,
                         "labels": labels, "main": main, "n": c.n, "estimate": c.estimate, "lo": c.lo, "hi": c.hi,
                         "p": math.nan if c.p is None else c.p,
                         "holds": None if c.holds is None else bool(c.holds), "verdict": o.outcome,
                         "rule": c.rule, "threshold": 0.0 if c.rule == "mcnemar_superior" else c.threshold,
                         "against": "", "p_chance": math.nan, "folder": c.folder, "overlap": ""})
    return rows


def main_outcomes(res: Any) -> list:
    res.table("table3")  # evaluates the hypotheses once (analysis/tables/prereg_tables.py)
    return list(res.outcomes)


def conclusions(res: Any, runs: pd.DataFrame, labels: str, main: bool = False, outcomes: list | None = None
                ) -> list[dict]:
    """The rows of every label-dependent conclusion computed on `runs` (labels: who gave them).
    `outcomes` given (e.g. every hypothesis evaluated on fewer questions): every hypothesis is a row."""
    judged = {h["id"] for h in res.prereg.hypotheses if outcomes is not None or P.reads_judgements(h)}
    if main:
        outcomes = main_outcomes(res)
    elif outcomes is None:
        ctx = P.Context(runs, res.folders, res.table("table4"), res.first_calls)
        outcomes = P.reevaluate(res.prereg, ctx, main_outcomes(res))
    rows = outcome_rows(outcomes, judged, labels, main)
    for folder, variant, a, b in accuracy_pairs(res):
        p = compare(runs, folder, variant, a, b, res.settings, metrics=())
        e = p.accuracy.accuracy if p.accuracy is not None else None
        rows.append({"conclusion": comparison_id(folder, variant, a, b), "kind": "comparison", "component": 0,
                     "test": f"accuracy {a} − {b} (points)", "labels": labels, "main": main, "n": p.n_judged,
                     "estimate": e.estimate if e else math.nan, "lo": e.lo if e else math.nan,
                     "hi": e.hi if e else math.nan, "p": p.accuracy.mcnemar.p if p.accuracy is not None else math.nan,
                     "holds": None,
                     "verdict": pair_verdict(e.estimate, e.lo, e.hi) if e else "not evaluable",
                     "rule": "comparison", "threshold": 0.0, "against": "", "p_chance": math.nan, "folder": folder,
                     "overlap": ""})
    return rows


def undecided(verdict: Any) -> bool:
    return not isinstance(verdict, str) or verdict.startswith(NOT_DECIDED)


def _stay(rule: str, est: float, lo: float, hi: float, thr: float, n: float, r: float) -> float:
    """P(one decision keeps its outcome) when every label flips independently with probability r."""
    if not n or not all(math.isfinite(x) for x in (est, n, r)) or r <= 0:
        return 1.0
    if rule in COUNT_RULES:  # exact: the count keeps k - Binom(k, r) and gains Binom(n - k, r)
        from scipy.stats import binom

        k, n = int(round(est)), int(n)
        after = np.convolve(binom.pmf(np.arange(k + 1)[::-1], k, r), binom.pmf(np.arange(n - k + 1), n - k, r))
        counts = np.arange(len(after))
        held = (counts <= thr) if COUNT_RULES[rule] == "<=" else (counts >= thr)
        p_hold = float(after[held].sum())
        return p_hold if (k <= thr if COUNT_RULES[rule] == "<=" else k >= thr) else 1 - p_hold
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return 1.0
    mu, s = -2 * r * est, 100 * math.sqrt(2 * r * (1 - r) / n)
    up = 1 - _N.cdf((thr - lo - mu) / s)  # P(lower bound above thr)
    if rule in ACCURACY_RULES:
        return up if lo > thr else 1 - up
    if rule == "comparison":
        down = _N.cdf((thr - hi - mu) / s)  # P(upper bound below thr)
        v = pair_verdict(est, lo, hi)
        return up if v == "a > b" else down if v == "a < b" else max(0.0, 1 - up - down)
    return 1.0  # a rule that does not read judgements


def chance_of_flip(reference: pd.DataFrame, r: float) -> float:
    """P(the reference's conclusion flips) under random disagreement at rate r: any of its decisions moves."""
    stay = 1.0
    for x in reference.itertuples():
        stay *= _stay(str(x.rule), float(x.estimate), float(x.lo), float(x.hi), float(x.threshold), float(x.n), r)
    return 1 - stay


def compare_verdicts(rows: pd.DataFrame) -> pd.DataFrame:
    """Per conclusion: the main verdict, which checks flip it (decided, and another verdict than their
    reference on the same runs), which are not comparable (with their overlap), and the checks made."""
    cols = ["conclusion", "kind", "main_verdict", "flips_under", "not_comparable_under", "checks", "flips",
            "chance_flips", "robust"]
    if rows.empty:
        return pd.DataFrame(columns=cols)
    out = []
    for cid, g in rows.groupby("conclusion", sort=False):
        per = g.drop_duplicates("labels").set_index("labels")
        main_l = g.loc[g["main"].astype(bool), "labels"]
        main_label = main_l.iloc[0] if len(main_l) else ""
        main_v = per.at[main_label, "verdict"] if main_label else ""
        n_main = g.loc[g["labels"] == main_label, "n"]
        flips, apart, checks, chance = [], [], 0, 0.0
        for lab, x in per.iterrows():
            if str(main_v).startswith("not run"):
                break  # no conclusion to check (its stage was not analysed)
            ref = x.get("against") or ""
            if lab == main_label or not ref or ref not in per.index:
                continue  # the main rows and the references are not checks
            if undecided(x["verdict"]) or undecided(per.at[ref, "verdict"]):
                over = x.get("overlap") or f"n={_n(g.loc[g['labels'] == lab, 'n'])} of {_n(n_main)}"
                apart.append(f"{lab} (overlap {over})")
                continue
            checks += 1
            chance += float(x["p_chance"]) if x["p_chance"] == x["p_chance"] else 0.0
            if x["verdict"] != per.at[ref, "verdict"]:
                flips.append(lab)
        tail = f" (not comparable: {'; '.join(apart)})" if apart else ""
        robust = ("flips under " + ", ".join(flips)) if flips else (
            ("holds under all" if checks else "no comparable check") + tail)
        out.append({"conclusion": cid, "kind": g["kind"].iloc[0], "main_verdict": main_v,
                    "flips_under": "; ".join(flips), "not_comparable_under": "; ".join(apart), "checks": checks,
                    "flips": len(flips), "chance_flips": chance, "robust": robust + (tail if flips else "")})
    return pd.DataFrame(out, columns=cols)


def _n(ns: pd.Series) -> str:
    v = pd.to_numeric(ns, errors="coerce").fillna(0)
    return f"{int(v.sum()):d}"


def summary(verdicts: pd.DataFrame, what: str) -> str:
    """'12 checks under other judges; 1 flip; chance alone would give about 0.4' (the report's line)."""
    if verdicts.empty:
        return ""
    k, f, e = int(verdicts["checks"].sum()), int(verdicts["flips"].sum()), float(verdicts["chance_flips"].sum())
    nc = int((verdicts["not_comparable_under"].astype(str) != "").sum())
    chance = (f"; random disagreement at each judge's observed rate would flip about {e:.2f} of them"
              if what == "judges" else "")
    return (f"{k} check(s) made ({what}; each conclusion under each other set of labels against the reference on "
            f"the same runs), {f} flip(s){chance}; {nc} conclusion(s) with a check that is not comparable.")
