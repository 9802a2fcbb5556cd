"""Table 2: mean +- SD of each rubric dimension per assistant model x method (150 trials each in the paper).

A failed run is not judged (judge/rubric.py: no score) and is counted in `failed`, not in
a cell's n; a reply the judge could not score has no score and is left out of that cell's n.
"""

from __future__ import annotations

import pandas as pd

from analysis.markdown import md_table
from analysis.personal import Table, register

from .common import DIMENSION_NAMES, DIMENSIONS, mean_sd

COLUMNS = ("model", "condition", "folders", "scoring", "n", "failed", *(f"{d}_{s}" for d in DIMENSIONS for s in ("mean", "sd", "n")))


def build(st) -> pd.DataFrame:
    runs = st.study
    rows = []
    for model, g in runs.groupby("model", sort=True):
        for cond in st.roles.order(g.condition):
            c = g[g.condition == cond]
            hybrid = set(c.hybrid.dropna())
            row = {"model": model, "condition": cond, "folders": "; ".join(sorted(set(c.folder))),
                   "scoring": ", ".join(sorted("hybrid" if h else "llm" for h in hybrid)) or "unjudged",
                   "n": len(c), "failed": int((c.status != "ok").sum())}
            for d in DIMENSIONS:
                x = c[d].dropna().astype(float)
                row[f"{d}_mean"], row[f"{d}_sd"], row[f"{d}_n"] = x.mean(), x.std(ddof=1), len(x)
            rows.append(row)
    return pd.DataFrame(rows, columns=list(COLUMNS))


def section(st) -> str:
    t = st.table("table2")
    runs = st.study
    head = ["model", "method", "n", *DIMENSION_NAMES.values()]
    body = [[r.model, r.condition, f"{r.n}" + (f" ({r.failed} failed)" if r.failed else ""),
             *(mean_sd(runs.loc[(runs.model == r.model) & (runs.condition == r.condition), d]) for d in DIMENSIONS)]
            for r in t.itertuples()]
    pooled = t[t.folders.str.contains(";")]
    note = ("" if pooled.empty else "**Pooled over several folders of one model:** " + "; ".join(
        f"{r.model} / {r.condition}: {r.folders}" for r in pooled.itertuples()) + ".\n\n")
    scoring = ", ".join(sorted(set(t.scoring))) if len(t) else "–"
    return ("## Table 2: scores per model x method (mean ± SD)\n\n[`table2_scores.csv`](table2_scores.csv); "
            f"rubric 1-5 per dimension; scores as the judge recorded them ({scoring}: hybrid = (keyword + LLM) / 2, "
            "Appendix A.10).\n\n" + note + (md_table(head, body) if body else "(no judged study folder)") + "\n")


register(Table("table2", "table2_scores.csv", build, section, order=20, columns=COLUMNS))
