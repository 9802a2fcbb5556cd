"""S vs M histories: each condition of the scale stage at S (the main stage) and at M, Figure 5."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import pandas as pd

from analysis import figures, stats
from analysis.load import Folder
from analysis.markdown import ESTIMATED, estimated_calls, estimated_caption, integer, link, num, simple_section, text
from analysis.tables import Table, register
from analysis.tables.common import Settings, conditions_in, select
from analysis.tables.status import status_line as _status_line


def growth(runs: pd.DataFrame, f_from: str, f_to: str, cond: str, metric: str = "tokens") -> pd.DataFrame:
    """Per-question metric of `cond` at two stages (repeat 0), on the questions both ran."""
    a = select(runs, f_from, "", cond)[["qid", metric, "correct"]]
    b = select(runs, f_to, "", cond)[["qid", metric, "correct"]]
    return a.merge(b, on="qid", suffixes=("_from", "_to"), validate="one_to_one").sort_values("qid", kind="mergesort")


def scale_table(runs: pd.DataFrame, s_folder: Folder, m_folder: Folder, st: Settings) -> pd.DataFrame:
    """Each condition of the scale stage at S (the main stage, same questions) and at M."""
    rows = []
    for c in conditions_in(runs, m_folder.name, "", m_folder.condition_order()):
        g = growth(runs, s_folder.name, m_folder.name, c)
        if g.empty:
            continue
        j = g[g["correct_from"].notna() & g["correct_to"].notna()]
        row = {"folder_s": s_folder.name, "folder_m": m_folder.name, "condition": c, "n_paired": len(g),
               "n_judged_both": len(j),
               "accuracy_s_pct": float(j["correct_from"].mean() * 100) if len(j) else math.nan,
               "accuracy_m_pct": float(j["correct_to"].mean() * 100) if len(j) else math.nan,
               "mean_tokens_s": float(g["tokens_from"].mean()), "mean_tokens_m": float(g["tokens_to"].mean())}
        row["accuracy_change_pts"] = row["accuracy_m_pct"] - row["accuracy_s_pct"]
        e = stats.ratio_of_means(g["tokens_to"].to_numpy(float), g["tokens_from"].to_numpy(float), seed=st.seed,
                                 n_resamples=st.resamples, confidence=st.confidence, keep_boot=False)
        row.update(tokens_growth=e.estimate, tokens_growth_lo=e.lo, tokens_growth_hi=e.hi)
        gc = growth(runs, s_folder.name, m_folder.name, c, "model_calls")
        row["model_calls_growth"] = (float(gc["model_calls_to"].sum() / gc["model_calls_from"].sum())
                                     if gc["model_calls_from"].sum() else math.nan)
        row[ESTIMATED] = sum(estimated_calls(d[d["qid"].isin(g["qid"])]) for d in (
            select(runs, s_folder.name, "", c), select(runs, m_folder.name, "", c)))  # their tokens are estimates
        row.update(seed=st.seed, n_resamples=st.resamples, confidence=st.confidence)
        rows.append(row)
    return pd.DataFrame(rows)


def scale_section(res) -> str:
    """S vs M."""
    t = res.tables
    parts: list[str] = []
    parts.append("\n## S vs M histories (scale)\n\n")
    parts.append(f"{link('scale.csv')}; status: {_status_line(res, 'scale')}. Each condition of the scale stage on "
                 "its questions, at S (main stage) and M.\n\n")
    parts.append(simple_section(t["scale"], [
        ("condition", "condition", text), ("n", "n_paired", integer), ("acc S %", "accuracy_s_pct", lambda x: num(x, 1)),
        ("acc M %", "accuracy_m_pct", lambda x: num(x, 1)), ("change pts", "accuracy_change_pts", lambda x: num(x, 1)),
        ("tokens S", "mean_tokens_s", integer), ("tokens M", "mean_tokens_m", integer),
        ("growth M/S", "tokens_growth", num), ("lo", "tokens_growth_lo", num), ("hi", "tokens_growth_hi", num),
        ("calls growth", "model_calls_growth", num)]))
    if "figure5.png" in res.figures:
        parts.append(f"\n![{res.figures['figure5.png']}](figure5.png)\n")

    return "".join(parts)


def stage_pairs(folders: Sequence[Folder]) -> list[tuple[Folder, Folder]]:
    """(S folder, M folder) for the scale comparison: the main and scale stages, one folder each."""
    mains = [f for f in folders if f.stage == "main" and f.records]
    scales = [f for f in folders if f.stage == "scale" and f.records]
    return [(m, s) for m in mains for s in scales] if len(mains) == 1 and len(scales) == 1 else []


def _scale(res) -> pd.DataFrame:
    from analysis.tables.fidelity import pool

    parts = [scale_table(res.runs, s_f, m_f, res.settings) for s_f, m_f in stage_pairs(res.folders)
             if pool(res, "scale", [s_f, m_f])]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def draw_figure5(res, out: Path) -> dict[str, str]:
    scale = res.table("scale")
    if not scale.empty and figures.figure5(scale, out / "figure5.png"):
        return {"figure5.png": "Figure 5: S vs M histories on the scale questions"
                + estimated_caption(estimated_calls(scale))}
    return {}


register(Table("scale", "scale.csv", _scale, scale_section, prereg=("scale",), order=120, draw=draw_figure5))
