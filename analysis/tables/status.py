"""Whether a report section shows a pre-specified or an exploratory analysis."""

from __future__ import annotations

from typing import Any


def status_line(res: Any, name: str) -> str:
    """Pre-specified or exploratory, judged on the folders whose data the table shows."""
    from analysis.prereg import analysis_status
    from analysis.tables import table_of

    df = res.tables.get(table_of(name) or name)
    names: set = set()
    if df is not None and not df.empty:
        for col in ("folder", "folder_s", "folder_m"):
            if col in df.columns:
                names |= set(df[col].dropna())
    folders = [f for f in res.folders if f.name in names]
    if not folders:
        return "*no data*"
    status, why = analysis_status(name, res.prereg, folders, res.first_calls)
    return f"*{status}*" + (f" ({why})" if why else "")
