"""Table 2 beside the whole history: the shared view against the hybrid tool over one store holding it all.

Section 5.3: "the hybrid memory tool over one store holding the whole history answered 94.2%
of the same questions", i.e. LongMemEval-Org's shared view (public variant) against the main
stage's tool_hybrid on the Org questions both ran, paired by question. It draws on two
folders, so it is refused when their manifests differ in a pooled setting (analysis.tables.fidelity).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.markdown import ESTIMATED, integer, link, num, pval, simple_section, text
from analysis.tables import Table, register
from analysis.tables.common import merge_pairs, compare_frames, pair_columns, select
from analysis.tables.fidelity import pool

SHARED, VARIANT, WHOLE = "shared", "public", "tool_hybrid"


def _build(res: Any) -> pd.DataFrame:
    rows = []
    orgs = [f for f in res.folders if f.records and not select(res.runs, f.name, VARIANT, SHARED).empty]
    mains = [f for f in res.folders if f.records and not select(res.runs, f.name, "", WHOLE).empty]
    for o in orgs:
        for m in mains:
            da, db = select(res.runs, o.name, VARIANT, SHARED), select(res.runs, m.name, "", WHOLE)
            merged = merge_pairs(da, db)
            if merged.empty or not pool(res, "table2_whole_history", [o, m]):
                continue
            p = compare_frames(merged, o.name, VARIANT, SHARED, WHOLE, res.settings)
            j = merged[merged["correct_a"].notna() & merged["correct_b"].notna()]
            rows.append({"folder": o.name, "whole_history_folder": m.name, "variant": VARIANT,
                         "accuracy_shared_pct": float(j["correct_a"].mean() * 100) if len(j) else float("nan"),
                         "accuracy_whole_pct": float(j["correct_b"].mean() * 100) if len(j) else float("nan"),
                         **pair_columns(p), ESTIMATED: p.estimated, "seed": res.settings.seed, "n_resamples": res.settings.resamples,
                         "confidence": res.settings.confidence})
    return pd.DataFrame(rows)


def section(res: Any) -> str:
    t = res.table("table2_whole_history")
    head = (f"\n### Table 2 beside the whole history\n\n{link('table2_whole_history.csv')}. The shared view "
            "(LongMemEval-Org, public variant) against the hybrid memory tool over one store holding the whole "
            "history (the main stage's tool_hybrid), paired on the questions both ran; Δ = shared − whole, ratios "
            "shared / whole. The paper: 91.7% against 94.2% on 120 questions.\n\n")
    if t.empty:
        return head + "Needs an Org folder with `shared` and a LongMemEval folder with `tool_hybrid` on the same questions.\n"
    return head + simple_section(t, [
        ("Org folder", "folder", text), ("whole-history folder", "whole_history_folder", text),
        ("n judged", "n_paired_judged", integer), ("shared %", "accuracy_shared_pct", lambda x: num(x, 1)),
        ("whole %", "accuracy_whole_pct", lambda x: num(x, 1)),
        ("Δ pts", "acc_diff_pts", lambda x: num(x, 1)), ("lo", "acc_diff_lo", lambda x: num(x, 1)),
        ("hi", "acc_diff_hi", lambda x: num(x, 1)), ("McNemar p", "mcnemar_p", pval),
        ("tokens ratio", "ratio_tokens", num), ("lo", "ratio_tokens_lo", num), ("hi", "ratio_tokens_hi", num)])


register(Table("table2_whole_history", "table2_whole_history.csv", _build, section, prereg=("table2_whole_history",),
               order=41))

