"""Figure 3: the (method under test) - (reference baseline) differences (model x dimension) with their 95% bootstrap CIs."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from analysis.personal import Table, register

from .common import DIMENSION_NAMES

FILE = "figure3.png"


def draw(st, out: Path) -> dict[str, str]:
    who, t4 = st.roles, st.table("table4")
    t4 = t4[t4.baseline == who.reference]
    if t4.empty:
        return {}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{m} / {DIMENSION_NAMES[d]}" for m, d in zip(t4.model, t4.dimension)]
    y = np.arange(len(t4))[::-1]
    fig, ax = plt.subplots(figsize=(6, 0.45 * len(t4) + 1.2))
    ax.errorbar(t4["diff"], y, xerr=[t4["diff"] - t4.ci_low, t4.ci_high - t4["diff"]], fmt="o", capsize=3)
    ax.axvline(0, ls="--", c="grey")
    ax.set_yticks(y, labels)
    ax.set_xlabel(f"{who.under_test} - {who.reference} (mean score, 95% bootstrap CI)")
    fig.tight_layout()
    fig.savefig(out / FILE, dpi=120, metadata={"Software": None})
    plt.close(fig)
    return {FILE: f"{who.under_test} - {who.reference} per model x dimension, 95% bootstrap CI"}


def section(st) -> str:
    if FILE not in st.figures:
        return f"## Figure 3\n\n(no {st.roles.under_test} beside {st.roles.reference}: not drawn)\n"
    t4 = st.table("table4")
    t4 = t4[t4.baseline == st.roles.reference]
    cross = int(((t4.ci_low <= 0) & (t4.ci_high >= 0)).sum())
    return (f"## Figure 3\n\n![Figure 3]({FILE})\n\n{cross} of {len(t4)} intervals cross zero "
            "(the paper: six of nine).\n")


register(Table("figure3", None, None, section, order=45, draw=draw))
