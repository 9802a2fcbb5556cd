"""Evidence-hit rates: runs whose first (or any) search returned an evidence session."""

from __future__ import annotations

import math
from typing import Sequence

import pandas as pd

from analysis.load import Folder
from analysis.markdown import integer, link, share, simple_section, text
from analysis.tables import Table, register
from analysis.tables.common import each_condition
from analysis.tables.status import status_line as _status_line


def evidence_table(runs: pd.DataFrame, folders: Sequence[Folder]) -> pd.DataFrame:
    """Share of runs whose first search / any search returned an evidence session (None = not applicable)."""
    rows = []
    for f, variant, c, d in each_condition(runs, folders):
        row = {"folder": f.name, "variant": variant, "condition": c, "n": len(d), "repeat": 0}
        for k, col in (("first", "ev_first"), ("any", "ev_any")):
            a = d[col].notna()
            row[f"n_{k}_applicable"] = int(a.sum())
            row[f"{k}_hits"] = int(d.loc[a, col].sum())
            row[f"{k}_rate"] = float(d.loc[a, col].mean()) if a.any() else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def evidence_section(res) -> str:
    """Evidence-hit rates."""
    t = res.tables
    parts: list[str] = []
    parts.append("\n## Evidence-hit rates\n\n")
    parts.append(f"{link('evidence.csv')}; status: {_status_line(res, 'evidence_hit')}. Share of runs whose first "
                 "search (or any tool result) contained an evidence session; runs where it does not apply are "
                 "left out.\n\n")
    parts.append(simple_section(t["evidence"], [
        ("folder", "folder", text), ("variant", "variant", text), ("condition", "condition", text),
        ("first: hits / applicable", "first_hits", integer), ("", "n_first_applicable", integer),
        ("first rate", "first_rate", share), ("any: hits / applicable", "any_hits", integer),
        ("", "n_any_applicable", integer), ("any rate", "any_rate", share)]))
    return "".join(parts)


register(Table("evidence", "evidence.csv", lambda res: evidence_table(res.runs, res.folders), evidence_section,
               prereg=("evidence_hit",), order=100))
