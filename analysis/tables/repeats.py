"""Table 5: run-to-run agreement of the conditions run twice on the same questions."""

from __future__ import annotations

import math
from typing import Sequence

import pandas as pd

from analysis import stats
from analysis.load import Folder
from analysis.markdown import integer, link, num, share, simple_section, text
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


register(Table("table5", "table5.csv", lambda res: agreement_table(res.runs, res.folders), table5_section,
               prereg=("table5",), order=70))
