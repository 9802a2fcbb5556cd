"""Table 4 and Section 4.4: kernel_shared against each baseline, per model x dimension.

For naive_concat (the paper's Table 4 and Figure 3), vanilla_rag and mem0_default: mean
difference (kernel - baseline), 95% percentile bootstrap CI, Welch's t, Mann-Whitney U
(two-sided) and the rank-biserial correlation (positive: the kernel wins more pairs).
A comparison is marked significant, as the paper bolds it, when both p < 0.05.
"""

from __future__ import annotations

import pandas as pd

from analysis.markdown import md_table, pval
from analysis.personal import Table, register

from .common import BASELINES, DIMENSION_NAMES, DIMENSIONS, KERNEL, compare

COLUMNS = ("model", "baseline", "dimension", "n_a", "n_b", "mean_a", "mean_b", "diff", "ci_low", "ci_high",
           "welch_t", "welch_p", "mwu_u", "mwu_p", "rank_biserial", "significant")


def build(st) -> pd.DataFrame:
    runs = st.study
    rows = []
    for model, g in runs.groupby("model", sort=True):
        for base in BASELINES:
            for d in DIMENSIONS:
                a = g.loc[g.condition == KERNEL, d].dropna().astype(float)
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
    t = st.table("table4")
    head = ["model", "dimension", f"{KERNEL} vs baseline", "difference [95% CI]", "Welch t", "p", "U", "p",
            "rank-biserial"]
    parts = [("## Table 4 and Section 4.4: kernel_shared vs each baseline\n\n"
              "[`table4_kernel_vs_baselines.csv`](table4_kernel_vs_baselines.csv); independent samples; "
              "bold: p < 0.05 under both Welch's t and Mann-Whitney U.\n")]
    for base in BASELINES:
        d = t[t.baseline == base]
        title = "Table 4: vs naive_concat" if base == "naive_concat" else f"Section 4.4: vs {base}"
        parts.append(f"\n### {title}\n\n" + (md_table(head, _rows(d)) if len(d) else f"(no {base} beside {KERNEL})")
                     + "\n")
    return "".join(parts)


register(Table("table4", "table4_kernel_vs_baselines.csv", build, section, order=40, columns=COLUMNS))
