"""Judgement kinds besides correctness and leaks (judge/kinds/): the share of runs each kind said yes to.

Read from the `score_<kind>` columns of runs.csv, so a kind registered by a plugin shows here
without this module naming it. Repeat 0, ok runs only (a failed run has no judgement of these kinds).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.load import SCORE_PREFIX
from analysis.markdown import integer, link, share, simple_section, text
from analysis.tables import Table, register
from analysis.tables.common import each_condition
from analysis.tables.status import status_line

COLUMNS = ("folder", "variant", "condition", "kind", "n", "n_judged", "yes", "yes_share")


def _build(res: Any) -> pd.DataFrame:
    kinds = [c for c in res.runs.columns if c.startswith(SCORE_PREFIX)]
    rows = []
    for f, variant, c, d in each_condition(res.runs, res.folders):
        for col in kinds:
            j = d[col].dropna()
            if j.empty:
                continue
            rows.append({"folder": f.name, "variant": variant, "condition": c, "kind": col[len(SCORE_PREFIX):],
                         "n": len(d), "n_judged": len(j), "yes": int(j.sum()), "yes_share": float(j.mean())})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def section(res: Any) -> str:
    t = res.table("other_judgements")
    if t.empty:
        return ""
    return (f"\n## Other judgements\n\n{link('other_judgements.csv')}; status: "
            f"{status_line(res, 'other_judgements')}. Judgement kinds registered besides LongMemEval's answer "
            "check (judge/kinds/): the share of judged runs each said yes to.\n\n"
            + simple_section(t, [("folder", "folder", text), ("variant", "variant", text),
                                 ("condition", "condition", text), ("kind", "kind", text), ("runs", "n", integer),
                                 ("judged", "n_judged", integer), ("yes", "yes", integer),
                                 ("yes share", "yes_share", share)]))


register(Table("other_judgements", "other_judgements.csv", _build, section, prereg=("other_judgements",), order=87,
               columns=COLUMNS))
