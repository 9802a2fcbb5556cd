"""Markdown for the report: formatting helpers every table module's section uses.

Nothing here computes a statistic; a section formats the frame its module built, so a
number in the report can always be found, at full precision, in the CSV named above it.
"""

from __future__ import annotations

import math
import re
from typing import Any, Iterable, Sequence

import pandas as pd

DASH = "–"
# a row's model calls whose usage the server did not report as counts (harness.endpoints.usage): its tokens and
# costs are estimates, marked "~" with a line under the table (`estimated`, `estimated_note`); every table showing
# tokens, costs or their ratios carries it (tests/test_estimated_usage.py)
ESTIMATED = "usage_estimated_calls"
USAGE = re.compile(r"(^|_)(tokens?|cost|usd|cny|paid)(_|$)")  # a column of tokens, costs or their ratios


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


def estimated(cell: str, n: Any) -> str:
    """A token or cost cell of a row with `n` calls of estimated usage: marked ~."""
    return "~" + cell if not is_missing(n) and n and cell != DASH else cell


def estimated_note(n: Any) -> str:
    """The line under a table whose tokens or costs rest on `n` calls of estimated usage ("" when none)."""
    n = 0 if is_missing(n) else int(n)
    return (f"\n~ usage estimated in {n:,} model calls of these runs (the server's counts were missing or not "
            "counts): those tokens and costs are estimates.\n" if n else "")


def estimated_caption(n: Any) -> str:
    """What a figure's caption adds when the tokens or costs it plots rest on `n` calls of estimated usage."""
    n = 0 if is_missing(n) else int(n)
    return f" (~ usage estimated in {n:,} model calls: their tokens and costs are estimates)" if n else ""


def estimated_calls(df: pd.DataFrame | None, column: str = ESTIMATED) -> int:
    return int(df[column].fillna(0).sum()) if df is not None and column in df else 0


def simple_section(df: pd.DataFrame, columns: Sequence[tuple[str, str, Any]], estimated_in: str = ESTIMATED,
                   usage: Sequence[str] | None = None, total: pd.Series | None = None) -> str:
    """columns: (header, column, formatter). When the frame counts calls of estimated usage (`estimated_in`), the
    cells of `usage` (default: the columns named for tokens or costs, USAGE) are marked ~ in rows that have any.
    The note under the table counts the rows' calls, or only `total`'s when the rows hold their own totals
    (a table with subtotal and total rows would count each call once per row that sums it)."""
    if df is None or df.empty:
        return "Nothing to show.\n"
    marked = set(usage if usage is not None else [c for _, c, _ in columns if USAGE.search(c)])
    has = estimated_in in df
    rows = [[estimated(fmt(r[col]), r[estimated_in]) if has and col in marked else fmt(r[col])
             for _, col, fmt in columns] for _, r in df.iterrows()]
    n = estimated_calls(df, estimated_in) if total is None else (total.get(estimated_in) if has else 0)
    return md_table([h for h, _, _ in columns], rows) + "\n" + estimated_note(n)


def text(x: Any) -> str:
    return DASH if is_missing(x) or x == "" else str(x)


def share(x: Any) -> str:
    return DASH if is_missing(x) else f"{float(x) * 100:.1f}%"
