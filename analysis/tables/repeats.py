"""Table 5: run-to-run agreement of the conditions run twice on the same questions, and
repeat_intervals.csv: where repeats exist, each condition's accuracy and each paired accuracy
difference of Tables 1 and 2 with two 95% intervals side by side: the question-only bootstrap (each
question's mean over its repeats) and the two-level one (questions, then repeats within each), which
holds the run-to-run variation Table 5 shows. Exploratory."""

from __future__ import annotations

import math
from typing import Sequence

import pandas as pd

from analysis import stats
from analysis.load import Folder
from analysis.markdown import ESTIMATED, ci, estimated_calls, integer, link, md_table, num, share, simple_section, text
from analysis.tables import Table, register
from analysis.tables.common import each_condition, select
from analysis.tables.status import status_line as _status_line


def agreement_table(runs: pd.DataFrame, folders: Sequence[Folder]) -> pd.DataFrame:
    rows = []
    for f, variant, c, r0 in each_condition(runs, folders):  # repeat 0 beside repeat 1
        r1 = select(runs, f.name, variant, c, 1)
        if r1.empty:
            continue
        m = r0.merge(r1, on="qid", suffixes=("_0", "_1"), validate="one_to_one")
        j = m[m["correct_0"].notna() & m["correct_1"].notna()]
        a0, a1 = j["correct_0"].astype(bool), j["correct_1"].astype(bool)
        n = len(j)
        row = {"folder": f.name, "variant": variant, "condition": c, "n_questions": len(m),
               "n_judged_both": n, "n_unjudged": len(m) - n,
               "identical": int((a0 == a1).sum()), "both_correct": int((a0 & a1).sum()),
               "both_wrong": int((~a0 & ~a1).sum()), "r0_only": int((a0 & ~a1).sum()),
               "r1_only": int((~a0 & a1).sum())}
        row["identical_share"] = row["identical"] / n if n else math.nan
        row["both_correct_share"] = row["both_correct"] / n if n else math.nan
        row["kappa"] = stats.agreement(a0.tolist(), a1.tolist()).kappa if n else math.nan
        if len(m):
            t0, t1 = m["tokens_0"].to_numpy(float), m["tokens_1"].to_numpy(float)
            row["tokens_r1_over_r0"] = float(t1.sum() / t0.sum()) if t0.sum() else math.nan
        row[ESTIMATED] = estimated_calls(m, f"{ESTIMATED}_0") + estimated_calls(m, f"{ESTIMATED}_1")
        rows.append(row)
    return pd.DataFrame(rows)


def table5_section(res) -> str:
    """Table 5."""
    t = res.tables
    parts: list[str] = []
    # Table 5
    parts.append("\n## Table 5: run-to-run agreement on repeated questions\n\n")
    parts.append(f"{link('table5.csv')}; status: {_status_line(res, 'table5')}. Repeat 0 vs repeat 1 on the "
                 "questions run twice with both runs judged.\n\n")
    parts.append(simple_section(t["table5"], [
        ("folder", "folder", text), ("variant", "variant", text), ("condition", "condition", text),
        ("questions", "n_questions", integer), ("judged both", "n_judged_both", integer),
        ("identical", "identical_share", share), ("both correct", "both_correct_share", share),
        ("only r0", "r0_only", integer), ("only r1", "r1_only", integer), ("kappa", "kappa", lambda x: num(x, 3)),
        ("tokens r1/r0", "tokens_r1_over_r0", num)]))

    return "".join(parts)


REPEAT_COLUMNS = ("folder", "variant", "kind", "what", "n_questions", "runs", "estimate", "question_lo", "question_hi",
                  "two_level_lo", "two_level_hi", "resamples", "seed")


def _labels(runs: pd.DataFrame, folder: str, variant: str, cond: str) -> dict[str, list[float]]:
    d = runs[(runs["folder"] == folder) & (runs["variant"] == variant) & (runs["condition"] == cond)
             & runs["correct"].notna()]
    return {q: g["correct"].astype(float).tolist() for q, g in d.groupby("qid", sort=True)}


def repeat_intervals(res) -> pd.DataFrame:
    from analysis.conclusions import accuracy_pairs

    runs, st = res.runs, res.settings
    rows = []
    repeated = {(f.name, v, c) for f, v, c, _ in each_condition(runs, res.folders)
                if not select(runs, f.name, v, c, 1).empty}

    def add(folder, variant, kind, what, la, lb=None):
        qs = sorted(set(la) & set(lb)) if lb is not None else sorted(la)
        if not qs:
            return
        a = [la[q] for q in qs]
        b = [lb[q] for q in qs] if lb is not None else None
        q_only, two = stats.two_level_accuracy(a, b, seed=st.seed, n_resamples=st.resamples, confidence=st.confidence)
        rows.append({"folder": folder, "variant": variant, "kind": kind, "what": what, "n_questions": len(qs),
                     "runs": sum(map(len, a)) + (sum(map(len, b)) if b else 0), "estimate": q_only.estimate,
                     "question_lo": q_only.lo, "question_hi": q_only.hi, "two_level_lo": two.lo,
                     "two_level_hi": two.hi, "resamples": st.resamples, "seed": st.seed})

    for folder, variant, c in sorted(repeated):
        add(folder, variant, "accuracy", f"{c} (%)", _labels(runs, folder, variant, c))
    for folder, variant, a, b in accuracy_pairs(res):
        if (folder, variant, a) in repeated and (folder, variant, b) in repeated:
            add(folder, variant, "difference", f"{a} − {b} (points)", _labels(runs, folder, variant, a),
                _labels(runs, folder, variant, b))
    return pd.DataFrame(rows, columns=list(REPEAT_COLUMNS))


def repeat_section(res) -> str:
    t = res.table("repeat_intervals")
    if t.empty:
        return ""
    return ("\n## Intervals with the repeats\n\n" + f"{link('repeat_intervals.csv')}; status: *exploratory*. Where "
            "questions were run more than once, each accuracy and paired difference over all repeats, with the "
            "question-only bootstrap interval (each question's mean over its repeats) beside the two-level one "
            "(questions, then repeats within each question: run-to-run variation included).\n\n"
            + md_table(["folder", "variant", "", "questions", "runs", "question-only [95% CI]", "two-level [95% CI]"],
                       [[r.folder, text(r.variant), r.what, integer(r.n_questions), integer(r.runs),
                         ci(r.estimate, r.question_lo, r.question_hi, 1), ci(r.estimate, r.two_level_lo, r.two_level_hi, 1)]
                        for r in t.itertuples()]) + "\n")


register(Table("table5", "table5.csv", lambda res: agreement_table(res.runs, res.folders), table5_section,
               prereg=("table5",), order=70))
register(Table("repeat_intervals", "repeat_intervals.csv", repeat_intervals, repeat_section, prereg=("table5",),
               order=71, columns=REPEAT_COLUMNS))
