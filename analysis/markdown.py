"""Markdown for the report: formatting helpers every table module's section uses.

Nothing here computes a statistic; a section formats the frame its module built, so a
number in the report can always be found, at full precision, in the CSV named above it.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

import pandas as pd

DASH = "–"


def is_missing(x: Any) -> bool:
    try:
        return x is None or (isinstance(x, float) and math.isnan(x)) or pd.isna(x)
    except (TypeError, ValueError):
        return False


def num(x: Any, nd: int = 2) -> str:
    if is_missing(x):
        return DASH
    x = float(x)
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:,.{nd}f}"


def integer(x: Any) -> str:
    return DASH if is_missing(x) else f"{int(round(float(x))):,}"


def pval(x: Any) -> str:
    if is_missing(x):
        return DASH
    x = float(x)
    return "<0.001" if x < 0.001 else f"{x:.3f}"


def ci(est: Any, lo: Any, hi: Any, nd: int = 2, sign: bool = False) -> str:
    if is_missing(est):
        return DASH
    e = f"{float(est):+.{nd}f}" if sign else num(est, nd)
    if is_missing(lo) or is_missing(hi):
        return e
    lo_s = f"{float(lo):+.{nd}f}" if sign else num(lo, nd)
    hi_s = f"{float(hi):+.{nd}f}" if sign else num(hi, nd)
    return f"{e} [{lo_s}, {hi_s}]"


def money(x: Any) -> str:
    if is_missing(x):
        return DASH
    return f"{float(x):,.4f}" if abs(float(x)) < 100 else f"{float(x):,.2f}"


def md_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(cell(v) for v in r) + " |")
    return "\n".join(lines)


def link(name: str) -> str:
    return f"[`{name}`]({name})"


def simple_section(df: pd.DataFrame, columns: Sequence[tuple[str, str, Any]]) -> str:
    """columns: (header, column, formatter)."""
    if df is None or df.empty:
        return "Nothing to show.\n"
    rows = [[fmt(r[col]) for _, col, fmt in columns] for _, r in df.iterrows()]
    return md_table([h for h, _, _ in columns], rows) + "\n"


def text(x: Any) -> str:
    return DASH if is_missing(x) or x == "" else str(x)


def share(x: Any) -> str:
    return DASH if is_missing(x) else f"{float(x) * 100:.1f}%"
