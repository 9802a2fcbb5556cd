"""Figures 3, 5 and 6 (Appendix D) from the tables, byte-identical on every run.

matplotlib with the Agg backend and its default style (no user rc file), PNG
metadata without the software version, fixed size and dpi: two runs on the same
inputs write the same bytes. The backend figures (2 and 7) come with the backend study.

What a reader needs: every accuracy (a share of judged runs) carries its 95% Wilson
interval (statsmodels) as an error bar, and a token-growth ratio its bootstrap interval
from the table; conditions are told apart by marker and colour in a legend, so no two
labels can print on top of each other; log axes get 1-2-5 ticks written as plain numbers;
a quantity that was not measured is drawn as a hatched outline saying so, never as zero.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter  # noqa: E402
from statsmodels.stats.proportion import proportion_confint  # noqa: E402

DPI = 120
PNG_META = {"Software": None}


def _fresh() -> None:
    matplotlib.rcdefaults()
    plt.rcParams.update({"font.size": 9, "figure.dpi": DPI, "savefig.dpi": DPI, "path.simplify": False})


def _save(fig, path: Path) -> Path:
    fig.savefig(path, format="png", metadata=PNG_META)
    plt.close(fig)
    return path


MARKERS = "osD^vP*Xh<>p"
CONFIDENCE = 0.95
NOT_MEASURED = "not measured"


def interval_pct(pct: float, n: float) -> tuple[float, float]:
    """95% Wilson interval (in %) of a share given in % of n runs; NaN when nothing was judged."""
    if n is None or pd.isna(n) or n <= 0 or pd.isna(pct):
        return math.nan, math.nan
    count = round(pct / 100 * n)
    lo, hi = proportion_confint(count, int(n), alpha=1 - CONFIDENCE, method="wilson")
    return float(lo * 100), float(hi * 100)


def _yerr(values: list[float], ns: list[float]) -> np.ndarray:
    """Error-bar half-lengths (below, above) for matplotlib from Wilson intervals."""
    lo_hi = [interval_pct(v, n) for v, n in zip(values, ns)]
    # max(0, .): at 0% or 100% the bound equals the share up to rounding, which may fall on either side
    return np.array([[0.0 if math.isnan(lo) else max(0.0, v - lo) for v, (lo, _) in zip(values, lo_hi)],
                     [0.0 if math.isnan(hi) else max(0.0, hi - v) for v, (_, hi) in zip(values, lo_hi)]])


def _plain(x, _pos=None) -> str:
    return f"{x:,.0f}" if x >= 1 else f"{x:g}"


def _log_ticks(axis, values) -> None:
    """Ticks written as plain numbers: 1-2-5 per decade, or evenly spaced round numbers when the
    values span less than a factor of 5 (where decades alone would leave one or two ticks)."""
    v = [x for x in values if x > 0 and not pd.isna(x)]
    narrow = bool(v) and max(v) / min(v) < 5
    axis.set_major_locator(MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]) if narrow
                           else LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(_plain))
    axis.set_minor_formatter(NullFormatter())


def _token_axis(ax, values) -> None:
    """Log scale when tokens span more than a factor of 10, plain numbers on the ticks either way."""
    v = [x for x in values if x > 0]
    if v and max(v) / min(v) > 10:
        ax.set_xscale("log")
        ax.set_xlim(min(v) / 1.5, max(v) * 1.5)  # from the data: unjudged points (NaN accuracy) draw nothing
        _log_ticks(ax.xaxis, v)
    else:
        ax.xaxis.set_major_formatter(FuncFormatter(_plain))


def _style(i: int) -> dict:
    return {"marker": MARKERS[i % len(MARKERS)], "color": f"C{i % 10}"}


def _legend(ax, **kw) -> None:
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False, **kw)


def _accuracy_points(ax, d: pd.DataFrame) -> list:
    """One point per condition at (mean tokens, accuracy), its 95% interval, named in the legend
    (the handles, in the table's order of conditions)."""
    handles = []
    for i, (_, r) in enumerate(d.iterrows()):
        if pd.isna(r["accuracy_pct"]):  # nothing judged yet: no point, and the legend says so
            (h,) = ax.plot([], [], linestyle="none", label=f"{r['condition']} (not judged)", **_style(i))
        else:
            h = ax.errorbar([r["mean_tokens"]], [r["accuracy_pct"]], yerr=_yerr([r["accuracy_pct"]], [r["n_judged"]]),
                            linestyle="none", capsize=3, markersize=5,
                            label=f"{r['condition']} (n={int(r['n_judged'])})", **_style(i))
        handles.append(h)
    ax.set_ylim(-3, 103)
    return handles


def figure3(t1: pd.DataFrame, folder: str, path: Path) -> Path | None:
    fig = draw_figure3(t1, folder)
    return None if fig is None else _save(fig, path)


def draw_figure3(t1: pd.DataFrame, folder: str):
    """Accuracy against mean tokens per question, one point per condition (LongMemEval)."""
    d = t1[(t1["folder"] == folder)]
    d = d[d["mean_tokens"] > 0]
    if d.empty:
        return None
    _fresh()
    fig, ax = plt.subplots(figsize=(7.2, 4.0))
    handles = _accuracy_points(ax, d)
    _token_axis(ax, d["mean_tokens"].tolist())
    ax.set_xlabel("tokens per question (mean)")
    ax.set_ylabel("accuracy (%), 95% Wilson interval")
    ax.set_title(f"Accuracy against tokens: {folder}")
    ax.grid(True, alpha=0.3)
    _legend(ax, handles=handles)
    fig.tight_layout()
    return fig


def figure5(scale: pd.DataFrame, path: Path) -> Path | None:
    fig = draw_figure5(scale)
    return None if fig is None else _save(fig, path)


def draw_figure5(scale: pd.DataFrame):
    """S vs M: accuracy (with 95% intervals) and tokens of each condition on the scale questions."""
    if scale is None or scale.empty:
        return None
    _fresh()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9.0, 3.8))
    for i, (_, r) in enumerate(scale.iterrows()):
        st = _style(i)
        acc = [r["accuracy_s_pct"], r["accuracy_m_pct"]]
        a1.errorbar([0, 1], acc, yerr=_yerr(acc, [r["n_judged_both"]] * 2), capsize=3, markersize=5,
                    label=r["condition"], **st)
        growth = (f"x{r['tokens_growth']:.2f} [{r['tokens_growth_lo']:.2f}, {r['tokens_growth_hi']:.2f}]"
                  if not pd.isna(r.get("tokens_growth")) else "growth n/a")
        a2.plot([0, 1], [r["mean_tokens_s"], r["mean_tokens_m"]], markersize=5, label=f"{r['condition']}: {growth}", **st)
    for ax, ylab in ((a1, "accuracy (%), 95% Wilson interval"), (a2, "tokens per question (mean)")):
        ax.set_xticks([0, 1], ["S", "M"])
        ax.set_xlim(-0.3, 1.3)
        ax.set_ylabel(ylab)
        ax.grid(True, alpha=0.3)
    a1.set_ylim(-3, 103)
    a2.set_yscale("log")
    _log_ticks(a2.yaxis, [*scale["mean_tokens_s"], *scale["mean_tokens_m"]])
    _legend(a2, title="tokens M/S, 95% interval", title_fontsize=7)
    f = scale.iloc[0]
    fig.suptitle(f"S ({f['folder_s']}) vs M ({f['folder_m']}), n = {int(scale['n_paired'].max())} questions")
    fig.tight_layout()
    return fig


def figure6(t2: pd.DataFrame, folder: str, path: Path) -> Path | None:
    fig = draw_figure6(t2, folder)
    return None if fig is None else _save(fig, path)


def draw_figure6(t2: pd.DataFrame, folder: str):
    """Org: public-variant accuracy against tokens; private variant declines, leaks and exposed runs."""
    d = t2[t2["folder"] == folder]
    if d.empty:
        return None
    pub, priv = d[d["variant"] == "public"], d[d["variant"] == "private"]
    _fresh()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11.0, 4.2))
    if not pub.empty:
        handles = _accuracy_points(a1, pub[pub["mean_tokens"] > 0])
        _token_axis(a1, pub["mean_tokens"].tolist())
        _legend(a1, handles=handles)
    a1.set_xlabel("tokens per question (mean)")
    a1.set_ylabel("accuracy (%), 95% Wilson interval")
    a1.set_title("public variant")
    a1.grid(True, alpha=0.3)
    if not priv.empty:
        x = np.arange(len(priv))
        w = 0.27
        series = [("declined (correct)", priv["accuracy_pct"], priv["n_judged"]),
                  ("stated the private answer", priv["leaks"] / priv["leak_judged"].where(priv["leak_judged"] > 0) * 100,
                   priv["leak_judged"]),
                  ("private units in context", priv["exposed_runs"] / priv["n_questions"].where(priv["n_questions"] > 0)
                   * 100, priv["n_questions"])]
        handles = []
        for j, (label, values, ns) in enumerate(series):
            xs = x + (j - 1) * w
            vals, ns = values.to_numpy(float), ns.to_numpy(float)
            measured = ~np.isnan(vals)
            if measured.any():
                a2.bar(xs[measured], vals[measured], w, yerr=_yerr(list(vals[measured]), list(ns[measured])),
                       capsize=2, color=to_rgba(f"C{j}"), error_kw={"elinewidth": 0.8})
            handles.append(Patch(facecolor=to_rgba(f"C{j}"), label=label))
            for xm in xs[~measured]:  # not measured: an outline with a label, never a bar of height 0
                a2.bar([xm], [100], w, fill=False, hatch="//", edgecolor="0.6", linewidth=0.6)
                a2.text(xm, 50, NOT_MEASURED, rotation=90, ha="center", va="center", fontsize=6, color="0.35")
        if np.isnan(np.concatenate([v.to_numpy(float) for _, v, _ in series])).any():
            handles.append(Patch(fill=False, hatch="//", edgecolor="0.6", label=NOT_MEASURED))
        a2.set_xticks(list(x), priv["condition"].tolist(), rotation=30, ha="right")
        a2.set_ylabel("% of runs, 95% Wilson interval")
        a2.set_ylim(0, 105)
        _legend(a2, handles=handles)
    a2.set_title("private variant")
    a2.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"LongMemEval-Org: {folder}")
    fig.tight_layout()
    return fig


def figure_recall(summary: pd.DataFrame, path: Path) -> Path | None:
    fig = draw_figure_recall(summary)
    return None if fig is None else _save(fig, path)


def draw_figure_recall(summary: pd.DataFrame):
    """Accuracy against the recall the runs' own searches got (vs exact search under the same view):
    one point per condition (marker) and index (colour; smaller markers for later indexes, so points
    with equal values stay visible)."""
    d = summary[summary["mean_recall"].notna()]
    if d.empty:
        return None
    _fresh()
    fig, ax = plt.subplots(figsize=(9.0, 4.4))
    indexes = list(dict.fromkeys(d["index"]))
    conds = list(dict.fromkeys(d["condition"]))
    for _, r in d.iterrows():
        i, c = indexes.index(r["index"]), conds.index(r["condition"])
        st = {"marker": MARKERS[c % len(MARKERS)], "color": f"C{i % 10}",
              "markersize": max(3.0, 9.0 - 2.5 * i), "linestyle": "none"}
        if pd.isna(r["accuracy_pct"]):
            ax.plot([], [], label=f"{r['condition']} · {r['index']} (not judged)", **st)
            continue
        ax.errorbar([r["mean_recall"] * 100], [r["accuracy_pct"]], yerr=_yerr([r["accuracy_pct"]], [r["n_judged"]]),
                    capsize=3, label=f"{r['condition']} · {r['index']} (n={int(r['n_judged'])})", **st)
    ax.set_xlim(-3, 103)
    ax.set_ylim(-3, 103)
    ax.set_xlabel("recall of the runs' searches vs exact search, same view (%, mean)")
    ax.set_ylabel("accuracy (%), 95% Wilson interval")
    ax.set_title("Retrieval recall and accuracy")
    ax.grid(True, alpha=0.3)
    _legend(ax)
    fig.tight_layout()
    return fig
