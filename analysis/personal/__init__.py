"""The second paper's tables (`python -m analysis.personal`, run by `make analyze`), one module per table.

Like analysis/tables/: a table module calls `register(Table(...))` at import with its name,
its CSV file, how to build its frame from the study (`Study`, analysis/personal/report.py),
its report section and its figures. report.py builds every registered table, writes the
CSVs and figures and renders results/personal/personal.md in `order`; no other file names
a table. A build function asks the study for the tables it reads (`st.table("table4")`),
each built once.

Rows are keyed on the assistant model the endpoint reported (the ledger), falling back to
the configured model id and then the config name (load.py). Smoke folders never enter a
paper table unless `smoke=true` asks for them (load.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from harness.plugins import Registry, caller

NOT_TABLES = {"common", "load", "report", "validation", "__main__"}


@dataclass(frozen=True)
class Table:
    name: str
    csv: str | None  # file in results/personal/; None: a report section only
    build: Callable[[Any], pd.DataFrame] | None = None
    section: Callable[[Any], str] | None = None  # Markdown with its heading
    order: int = 500
    draw: Callable[[Any, Path], dict[str, str]] | None = None  # writes PNGs into the folder -> {file: caption}
    columns: tuple[str, ...] = ()  # the columns an empty frame still has in its CSV


TABLES: Registry[Table] = Registry("personal table", __name__, skip=NOT_TABLES)


def register(table: Table) -> Table:
    return TABLES.register(table.name, table, caller())


def tables() -> list[Table]:
    return sorted(TABLES.items().values(), key=lambda t: (t.order, t.name))


def get(name: str) -> Table:
    return TABLES.get(name)
