"""Table 3 (Section 4.3, Appendix A.1): human rater vs the rubric judge, by method, with intra-rater consistency.

Built from every analysed folder's validation/ratings.csv (the filled sheet of
`python -m analysis.personal.validation sample ...`; see validation.py); a folder without
one adds nothing, and the section says how to make one.
"""

from __future__ import annotations

import pandas as pd

from analysis.markdown import md_table
from analysis.personal import Table, register

from .validation import agree

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


def _f(x, nd=2) -> str:
    return "–" if pd.isna(x) else f"{x:.{nd}f}"


def render(table: pd.DataFrame, intra: dict, info: dict) -> str:
    body = [[r.method, r.n, _f(r.human_mean), _f(r.judge_mean), f"{100 * r.exact:.1f}%", f"{100 * r.within_one:.1f}%",
             _f(r.mae), _f(r.spearman_rho, 3), "–" if pd.isna(r.spearman_p) else f"{r.spearman_p:.2g}"]
            for r in table.itertuples()]
    return (md_table(["method", "n", "human mean", "judge mean", "exact", "within one", "MAE", "Spearman ρ", "p"],
                     body) + f"\n\nDimension {info['dimension']}, judge {info['judge']}. Intra-rater: the same score "
            f"on {intra['same']} of {intra['pairs']} duplicate pairs, mean absolute difference "
            f"{_f(intra['mean_abs_diff'])}.\n")


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
