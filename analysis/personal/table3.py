"""Table 3 (Section 4.3, Appendix A.1): human rater vs the rubric judge, by method, with intra-rater consistency.

Built from every analysed folder's validation/ratings.csv (the filled sheet of
`python -m analysis.personal.validation sample ...`; see validation.py); a folder without
one adds nothing, and the section says how to make one.
"""

from __future__ import annotations

import pandas as pd

from analysis.personal import Table, register

from .validation import agree, render

COLUMNS = ("folder", "judge", "dimension", "method", "n", "human_mean", "judge_mean", "exact", "within_one", "mae",
           "spearman_rho", "spearman_p", "intra_pairs", "intra_same", "intra_mean_abs_diff")


def build(st) -> pd.DataFrame:
    frames = []
    for f in st.folders:
        ratings = f.path / "validation" / "ratings.csv"
        if not ratings.exists():
            continue
        t, intra, info = agree(ratings)
        frames.append(t.assign(folder=f.name, judge=info["judge"], dimension=info["dimension"], intra_pairs=intra["pairs"],
                               intra_same=intra["same"], intra_mean_abs_diff=intra["mean_abs_diff"]))
    return pd.concat(frames, ignore_index=True)[list(COLUMNS)] if frames else pd.DataFrame(columns=list(COLUMNS))


def section(st) -> str:
    t = st.table("table3")
    head = "## Table 3: human rater vs judge, by method\n\n[`table3_human_validation.csv`](table3_human_validation.csv)\n\n"
    if t.empty:
        return head + ("No ratings yet: `python -m analysis.personal.validation sample runs=<folder>` writes a blinded "
                       "sheet into <folder>/validation/; the rater's filled copy saved there as ratings.csv makes "
                       "this table.\n")
    parts = [head]
    for folder, d in t.groupby("folder", sort=True):
        r0 = d.iloc[0]
        intra = {"pairs": int(r0.intra_pairs), "same": int(r0.intra_same), "mean_abs_diff": r0.intra_mean_abs_diff}
        parts.append(f"### {folder}\n\n" + render(d, intra, {"dimension": r0.dimension, "judge": r0.judge}))
    return "\n".join(parts)


register(Table("table3", "table3_human_validation.csv", build, section, order=30, columns=COLUMNS))
