"""Table 6 (Appendix A.5): the ablation pilot, Phase 2 (shared) - Phase 1 (private) score deltas.

The paper's rows are successive refinements: (1) raw JSON injection, LLM-only judge; (2)
natural-language formatting; (3) an explicit system-prompt instruction; (4) the hybrid
keyword + LLM judge (Eq. 4). Here Phase 1 is the method whose role is `phase1` (the kernel with every memory
private to its writer), Phase 2 the method under test and those whose role is `phase2`, with
`format` json or statement; the LLM-only score and the keyword score are both in every rubric judgement, so
row 4 is (keyword + LLM) / 2 of the same replies whatever `stage.judge.hybrid` said.
Row 3 has no input here: AssistantAgent's system prompt always carries its instruction
(harness/personal/assistant.py), so no stage runs without it and the row says so.
Read from the `ablation` folders (conf/stage/personal_ablation.yaml), else from any study
folder that ran Phase 1 beside the method under test.
"""

from __future__ import annotations

import pandas as pd

from analysis.markdown import md_table
from analysis.personal import Table, register

from .common import DIMENSION_NAMES, DIMENSIONS

ROWS = (  # (row, what the paper changed, Phase 2 format, score)
    (1, "raw JSON injection, LLM-only judge", "json", "llm"),
    (2, "natural-language formatting", "statement", "llm"),
    (3, "explicit system-prompt instruction", None, "llm"),
    (4, "hybrid keyword + LLM judge", "statement", "hybrid"),
)
NO_INSTRUCTION_VARIANT = ("not produced by this harness: AssistantAgent's system prompt always carries the "
                          "instruction (harness/personal/assistant.py), so row 2 already includes it")
COLUMNS = ("model", "row", "refinement", "phase2_format", "score", "n_phase1", "n_phase2",
           *(f"delta_{d}" for d in DIMENSIONS), *(f"phase1_{d}" for d in DIMENSIONS),
           *(f"phase2_{d}" for d in DIMENSIONS), "note")


def _score(frame: pd.DataFrame, d: str, score: str) -> pd.Series:
    llm = pd.to_numeric(frame[f"llm_{d}"], errors="coerce")
    if score == "llm":
        return llm.dropna()
    return ((llm + pd.to_numeric(frame[f"kw_{d}"], errors="coerce")) / 2).dropna()


def source(st) -> tuple[pd.DataFrame, str]:
    if not st.ablation.empty:
        return st.ablation, "ablation folders"
    s, who = st.study, st.roles
    models = set(s.loc[s.condition == who.phase1, "model"]) & set(s.loc[s.condition == who.under_test, "model"])
    return s[s.model.isin(models)], f"study folders that ran {who.phase1} (no ablation folder)"


def build(st) -> pd.DataFrame:
    runs, _ = source(st)
    runs, who = runs[runs.status == "ok"], st.roles
    rows = []
    for model, g in runs.groupby("model", sort=True):
        p1_all = g[g.condition == who.phase1]
        if p1_all.empty:
            continue
        shared = g[g.condition.isin(who.phase2)]
        for row, what, fmt, score in ROWS:
            base = {"model": model, "row": row, "refinement": what, "phase2_format": fmt, "score": score,
                    "n_phase1": len(p1_all)}
            if fmt is None:
                rows.append({**base, "n_phase2": 0, "note": NO_INSTRUCTION_VARIANT})
                continue
            p2 = shared[shared.format == fmt]
            p1 = p1_all[p1_all.format == fmt]
            note = ""
            if p1.empty and int(p1_all.n_injected.sum()) == 0:
                p1, note = p1_all, f"Phase 1 ran as {', '.join(sorted(set(p1_all.format.dropna())))}: it injected nothing, so its format is immaterial"
            if p2.empty or p1.empty:
                rows.append({**base, "n_phase2": len(p2), "note": f"not run: no {'Phase 2' if p2.empty else 'Phase 1'} "
                             f"with format {fmt} (make run STAGE=personal_ablation)"})
                continue
            r = {**base, "n_phase1": len(p1), "n_phase2": len(p2), "note": note}
            for d in DIMENSIONS:
                a, b = _score(p2, d, score), _score(p1, d, score)
                r[f"phase1_{d}"], r[f"phase2_{d}"] = b.mean(), a.mean()
                r[f"delta_{d}"] = a.mean() - b.mean()
            rows.append(r)
    return pd.DataFrame(rows, columns=list(COLUMNS))


def section(st) -> str:
    t = st.table("table6")
    _, where = source(st)
    head = ["model", "row", "refinement", *(f"Δ {v}" for v in DIMENSION_NAMES.values()), "n (P1 / P2)", "note"]
    body = [[r.model, r.row, r.refinement, *("–" if pd.isna(getattr(r, f"delta_{d}")) else
                                            f"{getattr(r, f'delta_{d}'):+.2f}" for d in DIMENSIONS),
             f"{r.n_phase1} / {r.n_phase2}", r.note or ""] for r in t.itertuples()]
    return ("## Table 6: ablation pilot, Phase 2 (shared) - Phase 1 (private)\n\n[`table6_ablation.csv`]"
            f"(table6_ablation.csv), from the {where}. The paper's pilot: Qwen-2.5:7B, 30 trials, no evidentiary "
            "weight (Appendix A.5).\n\n" + (md_table(head, body) if body else
                                           f"(no {st.roles.phase1} beside {st.roles.under_test}: `make run STAGE=personal_ablation` "
                                           "then `make judge STAGE=personal_ablation`)") + "\n")


register(Table("table6", "table6_ablation.csv", build, section, order=80, columns=COLUMNS))
