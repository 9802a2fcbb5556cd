"""Every conclusion of the analysis recomputed on other labels: would it still hold?

A conclusion is a pre-registered hypothesis (its outcome, and each test's effect and interval)
or a paired accuracy comparison of Tables 1 and 2 (a − b in points with its bootstrap interval;
its verdict: a > b or a < b when the interval excludes 0, else no difference shown). The labels
change when another judge graded the runs (analysis/tables/judge_robustness.py) or when the gold
is corrected (analysis/errata.py); both call `conclusions` with a runs frame whose `correct`
(and `leak`) columns hold the other labels, and `compare_verdicts` to say which conclusion flips.
Nothing else differs: the same questions, pairing, seed and resamples as the main analysis.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from analysis import prereg as P
from analysis.tables.common import compare

COLUMNS = ("conclusion", "kind", "component", "test", "labels", "main", "n", "estimate", "lo", "hi", "p",
           "holds", "verdict")
NOT_DECIDED = ("not run", "not evaluable")


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
                         "holds": None if c.holds is None else bool(c.holds), "verdict": o.outcome})
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
                     "verdict": pair_verdict(e.estimate, e.lo, e.hi) if e else "not evaluable"})
    return rows


def compare_verdicts(rows: pd.DataFrame) -> pd.DataFrame:
    """Per conclusion: the main verdict and which other labels flip it (a decided, different verdict).
    Labels under which the conclusion could not be decided are listed apart, never counted as a flip."""
    out = []
    if rows.empty:
        return pd.DataFrame(columns=["conclusion", "kind", "main_verdict", "flips_under", "undecided_under", "robust"])
    for cid, g in rows.groupby("conclusion", sort=False):
        per = g.drop_duplicates("labels").set_index("labels")["verdict"]
        main_l = g.loc[g["main"].astype(bool), "labels"]
        main_v = per[main_l.iloc[0]] if len(main_l) else ""
        others = [lab for lab in per.index if not len(main_l) or lab != main_l.iloc[0]]
        undecided = [lab for lab in others if str(per[lab]).startswith(NOT_DECIDED)]
        flips = [lab for lab in others if lab not in undecided and per[lab] != main_v]
        robust = ("flips under " + ", ".join(flips)) if flips else (
            "holds under all" + (f" (undecided under {', '.join(undecided)})" if undecided else ""))
        out.append({"conclusion": cid, "kind": g["kind"].iloc[0], "main_verdict": main_v,
                    "flips_under": "; ".join(flips), "undecided_under": "; ".join(undecided), "robust": robust})
    return pd.DataFrame(out)
