"""Table 4 and Section 4.4: the method under test against each baseline, per model x dimension.

For each baseline (the reference one is the paper's Table 4 and Figure 3; the others Section
4.4), roles from the methods' configs (common.py): mean difference (under test - baseline), 95% percentile bootstrap CI, Welch's t, Mann-Whitney U
(two-sided) and the rank-biserial correlation (positive: the kernel wins more pairs).
A comparison is marked significant, as the paper bolds it, when both p < 0.05.
"""

from __future__ import annotations

import pandas as pd

from analysis.markdown import md_table, pval
from analysis.personal import Table, register

from .common import DIMENSION_NAMES, DIMENSIONS, compare

COLUMNS = ("model", "baseline", "dimension", "n_a", "n_b", "mean_a", "mean_b", "diff", "ci_low", "ci_high",
           "welch_t", "welch_p", "mwu_u", "mwu_p", "rank_biserial", "significant")


def build(st) -> pd.DataFrame:
    runs, who = st.study, st.roles
    rows = []
    for model, g in runs.groupby("model", sort=True):
        for base in who.baselines:
            for d in DIMENSIONS:
                a = g.loc[g.condition == who.under_test, d].dropna().astype(float)
                b = g.loc[g.condition == base, d].dropna().astype(float)
                if len(a) and len(b):
                    c = compare(a, b, st.resamples)
                    rows.append({"model": model, "baseline": base, "dimension": d, **c,
                                 "significant": bool(c["welch_p"] < 0.05 and c["mwu_p"] < 0.05)})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _rows(t: pd.DataFrame) -> list[list]:
    out = []
    for r in t.itertuples():
        cell = f"{r.diff:+.2f} [{r.ci_low:+.2f}, {r.ci_high:+.2f}]"
        out.append([r.model, DIMENSION_NAMES[r.dimension], f"{r.mean_a:.2f} vs {r.mean_b:.2f}",
                    f"**{cell}**" if r.significant else cell, f"{r.welch_t:.2f}", pval(r.welch_p),
                    f"{r.mwu_u:.0f}", pval(r.mwu_p), f"{r.rank_biserial:+.2f}"])
    return out


def section(st) -> str:
    t, who = st.table("table4"), st.roles
    head = ["model", "dimension", f"{who.under_test} vs baseline", "difference [95% CI]", "Welch t", "p", "U", "p",
            "rank-biserial"]
    parts = [(f"## Table 4 and Section 4.4: {who.under_test} vs each baseline\n\n"
              "[`table4_kernel_vs_baselines.csv`](table4_kernel_vs_baselines.csv); independent samples; "
              "bold: p < 0.05 under both Welch's t and Mann-Whitney U.\n")]
    for base in who.baselines:
        d = t[t.baseline == base]
        title = f"Table 4: vs {base}" if base == who.reference else f"Section 4.4: vs {base}"
        parts.append(f"\n### {title}\n\n" + (md_table(head, _rows(d)) if len(d) else f"(no {base} beside {who.under_test})")
                     + "\n")
    return "".join(parts)


register(Table("table4", "table4_kernel_vs_baselines.csv", build, section, order=40, columns=COLUMNS))
