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

import importlib
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pandas as pd


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


_REGISTRY: dict[str, Table] = {}


def register(table: Table) -> Table:
    """Add a table; a second table of the same name or CSV file is an error, never a silent replacement."""
    import sys

    # the caller's module by its frame (inspect.stack() reads every frame's source: seconds in a long process)
    module = sys._getframe(1).f_globals.get("__name__", "")
    table = Table(**{**table.__dict__, "module": module})
    old = _REGISTRY.get(table.name)
    if old is not None and old.module != table.module:
        raise ValueError(f"table {table.name!r} is registered twice ({old.module} and {table.module})")
    clash = [t for t in _REGISTRY.values() if table.csv and t.csv == table.csv and t.name != table.name]
    if clash:
        raise ValueError(f"{table.module}: table {table.name!r} writes {table.csv}, as {clash[0].name!r} does")
    _REGISTRY[table.name] = table
    return table


def discover() -> None:
    """Import this package's table modules, then the plugins."""
    from harness import plugins

    for info in pkgutil.iter_modules(__path__):
        if info.name != "common":
            importlib.import_module(f"{__name__}.{info.name}")
    plugins.load()


def tables() -> list[Table]:
    discover()
    return sorted(_REGISTRY.values(), key=lambda t: (t.order, t.name))


def get(name: str) -> Table:
    discover()
    if name not in _REGISTRY:
        raise KeyError(f"no table {name!r} is registered (known: {', '.join(sorted(_REGISTRY))})")
    return _REGISTRY[name]


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
