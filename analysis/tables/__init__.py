"""Every output of `make analyze`, one module per table, found by registration.

A table module calls `register(Table(...))` at import: its name (the key other tables ask
for), its CSV file, how to build its frame from the results, its report section, the
names under which the pre-registration file lists it, and its figures. `analysis.run`
builds every registered table, writes every CSV and figure, and renders the report in
`order`; the report's Files list, the pre-registration status of each section and the
check that nothing was left out are all read from here. No other file names a table.

The tree's tables are the modules of this package; tables from outside come in through
harness.plugins (an entry point of group `memspace_harness`, or $MEMSPACE_PLUGINS).

A build function receives the Results object and asks it for the tables it reads
(`res.table("table4")`): each is built once, on first request, so dependencies need no
declared order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from harness.plugins import Registry, RegistryError, caller


@dataclass(frozen=True)
class Table:
    name: str
    csv: str | None  # file in results/; None: a report section only
    build: Callable[[Any], pd.DataFrame] | None = None
    section: Callable[[Any], str] | None = None  # Markdown (with its heading), or None: listed under Files only
    prereg: tuple[str, ...] = ()  # names under `analyses:` in the pre-registration file; the first decides status
    order: int = 500  # place in the report (and in the Files list's build)
    draw: Callable[[Any, Path], dict[str, str]] | None = None  # figures: writes PNGs into the folder, -> {file: caption}
    columns: tuple[str, ...] = ()  # the columns an empty frame still has in its CSV
    module: str = field(default="", compare=False)


TABLES: Registry[Table] = Registry("table", __name__, skip=("common",))


def register(table: Table) -> Table:
    """Add a table; a second table of the same name or CSV file is an error, never a silent replacement."""
    module = caller()
    table = Table(**{**table.__dict__, "module": module})
    clash = [t for t in TABLES._entries.values() if table.csv and t[0].csv == table.csv and t[0].name != table.name]
    if clash:
        raise RegistryError(f"{module}: table {table.name!r} writes {table.csv}, as {clash[0][0].name!r} "
                            f"({clash[0][1]}) does")
    return TABLES.register(table.name, table, module)


def tables() -> list[Table]:
    return sorted(TABLES.items().values(), key=lambda t: (t.order, t.name))


def get(name: str) -> Table:
    return TABLES.get(name)


def csv_files() -> dict[str, str]:
    """table name -> CSV file, for every table that writes one."""
    return {t.name: t.csv for t in tables() if t.csv}


def analyses_present(res: Any) -> list[str]:
    """Pre-registration names whose table has rows (every table listing the name counts)."""
    out: list[str] = []
    for t in tables():
        if t.csv and t.prereg and not res.table(t.name).empty:
            out += [n for n in t.prereg if n not in out]
    return out


def table_of(prereg_name: str) -> str | None:
    """The table whose folders decide a pre-registered analysis's status: the first that lists it."""
    for t in tables():
        if prereg_name in t.prereg:
            return t.name
    return None


def written(frame) -> bool:
    """A table's CSV is written when it has columns: a frame with neither rows nor columns would be an empty file."""
    return len(frame.columns) > 0


def empty_reason(table: Table, frame=None) -> str:
    """Why a table's CSV holds its header only, or was not written (no columns either): none of the analysed
    stages gives it a row. Said with what the table is (its module's first docstring line), so a reader sees
    which stage or option would fill it."""
    import sys

    doc = " ".join((getattr(sys.modules.get(table.module), "__doc__", None) or "").strip().split("\n\n")[0].split())
    what = doc.split(". ")[0].rstrip(".")
    said = "header only" if frame is None or written(frame) else "not written"
    return f"{said}: no row for the analysed stages" + (f" ({what})" if what else "")
