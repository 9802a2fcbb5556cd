"""The report opens with what each folder measured against the second paper (harness.run.fidelity)."""

from __future__ import annotations

import pandas as pd

from analysis.markdown import md_table, text
from analysis.personal import Table, register

COLUMNS = ("folder", "purpose", "setting", "paper", "stage", "status")


def build(st) -> pd.DataFrame:
    from analysis.tables.fidelity import manifest_rows

    from .load import purpose

    return pd.DataFrame([{"purpose": purpose(f), **{k: r.get(k) for k in COLUMNS if k != "purpose"}}
                         for f in st.folders for r in manifest_rows(f, None)], columns=list(COLUMNS))


def section(st) -> str:
    t = st.table("fidelity")
    parts = [("## Fidelity to the paper\n\n[`fidelity.csv`](fidelity.csv): each folder's manifest (stage.json), "
              "the paper's value beside the stage's.\n")]
    for folder, d in t.groupby("folder", sort=True):
        parts.append(f"\n### {folder} ({d['purpose'].iloc[0]})\n\n" + md_table(
            ["setting", "paper", "this stage", "same / differs"],
            [[r.setting, text(r.paper), text(r.stage), (f"**{r.status}**" if r.status == "differs" else r.status)]
             for r in d.itertuples()]) + "\n")
    return "".join(parts)


register(Table("fidelity", "fidelity.csv", build, section, order=5, columns=COLUMNS))
