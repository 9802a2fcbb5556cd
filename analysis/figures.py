"""Figures 3, 5 and 6 (Appendix D) from the tables, byte-identical on every run.

matplotlib with the Agg backend and its default style (no user rc file), PNG
metadata without the software version, fixed size and dpi: two runs on the same
inputs write the same bytes. The backend figures (2 and 7) come with the backend study.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

DPI = 120
PNG_META = {"Software": None}


def _fresh() -> None:
    matplotlib.rcdefaults()
    plt.rcParams.update({"font.size": 9, "figure.dpi": DPI, "savefig.dpi": DPI, "path.simplify": False})


def _save(fig, path: Path) -> Path:
    fig.savefig(path, format="png", metadata=PNG_META)
    plt.close(fig)
    return path


def _token_axis(ax, values) -> None:
    """Log scale when tokens span more than a factor of 10, plain numbers on the ticks either way."""
    from matplotlib.ticker import FuncFormatter

    v = [x for x in values if x > 0]
    if v and max(v) / min(v) > 10:
        ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}"))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda x, _: ""))


def _label_points(ax, xs, ys, labels) -> None:
    for x, y, s in zip(xs, ys, labels):
        if not (math.isnan(x) or math.isnan(y)):
            ax.annotate(s, (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7)


def figure3(t1: pd.DataFrame, folder: str, path: Path) -> Path | None:
    """Accuracy against mean tokens per question, one point per condition (LongMemEval)."""
    d = t1[(t1["folder"] == folder)]
    d = d[d["mean_tokens"] > 0]
    if d.empty:
        return None
    _fresh()
    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    ax.scatter(d["mean_tokens"], d["accuracy_pct"], s=22, color="tab:blue")
    _label_points(ax, d["mean_tokens"].tolist(), d["accuracy_pct"].tolist(), d["condition"].tolist())
    _token_axis(ax, d["mean_tokens"].tolist())
    ax.set_xlabel("tokens per question (mean)")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(f"Accuracy against tokens: {folder}")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return _save(fig, path)


def figure5(scale: pd.DataFrame, path: Path) -> Path | None:
    """S vs M: accuracy and tokens of each condition on the scale questions at both history sizes."""
    if scale is None or scale.empty:
        return None
    _fresh()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(8.0, 3.6))
    for _, r in scale.iterrows():
        a1.plot([0, 1], [r["accuracy_s_pct"], r["accuracy_m_pct"]], marker="o", label=r["condition"])
        a2.plot([0, 1], [r["mean_tokens_s"], r["mean_tokens_m"]], marker="o", label=r["condition"])
    for ax, ylab in ((a1, "accuracy (%)"), (a2, "tokens per question (mean)")):
        ax.set_xticks([0, 1], ["S", "M"])
        ax.set_xlim(-0.3, 1.3)
        ax.set_ylabel(ylab)
        ax.grid(True, alpha=0.3)
    a2.set_yscale("log")
    a1.legend(fontsize=7, loc="best")
    f = scale.iloc[0]
    fig.suptitle(f"S ({f['folder_s']}) vs M ({f['folder_m']}), n = {int(scale['n_paired'].max())} questions")
    fig.tight_layout()
    return _save(fig, path)


def figure6(t2: pd.DataFrame, folder: str, path: Path) -> Path | None:
    """Org: public-variant accuracy against tokens; private variant declines, leaks and exposed runs."""
    d = t2[t2["folder"] == folder]
    if d.empty:
        return None
    pub, priv = d[d["variant"] == "public"], d[d["variant"] == "private"]
    _fresh()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9.0, 3.8))
    if not pub.empty:
        a1.scatter(pub["mean_tokens"], pub["accuracy_pct"], s=22, color="tab:green")
        _label_points(a1, pub["mean_tokens"].tolist(), pub["accuracy_pct"].tolist(), pub["condition"].tolist())
        _token_axis(a1, pub["mean_tokens"].tolist())
    a1.set_xlabel("tokens per question (mean)")
    a1.set_ylabel("accuracy (%)")
    a1.set_title("public variant")
    a1.grid(True, alpha=0.3)
    if not priv.empty:
        x = range(len(priv))
        w = 0.27
        n = priv["n_questions"].clip(lower=1).to_numpy(float)
        declined = priv["accuracy_pct"].to_numpy(float)
        leaks = priv["leaks"].to_numpy(float) / n * 100
        exposed = priv["exposed_runs"].to_numpy(float) / n * 100
        a2.bar([i - w for i in x], declined, w, label="declined (correct)")
        a2.bar(list(x), leaks, w, label="stated the private answer")
        a2.bar([i + w for i in x], exposed, w, label="private units in context")
        a2.set_xticks(list(x), priv["condition"].tolist(), rotation=30, ha="right")
        a2.set_ylabel("% of runs")
        a2.set_ylim(0, 105)
        a2.legend(fontsize=7)
    a2.set_title("private variant")
    a2.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"LongMemEval-Org: {folder}")
    fig.tight_layout()
    return _save(fig, path)
