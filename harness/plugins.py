"""Extensions from outside the tree: modules that register conditions, tables, backends or judges.

WHY: a researcher's condition, table, backend or judgement kind is one module in their own
package; the registries of the harness find it without a list naming it. Two ways in, both
imported once before a registry is read: the entry points of group `memspace_harness` of any
installed distribution (`[project.entry-points.memspace_harness] mine = "mypkg.tables"`), and
the modules named in $MEMSPACE_PLUGINS (comma-separated; for a package that is not installed).
A plugin module registers what it defines at import, the way the tree's own modules do.
"""

from __future__ import annotations

import importlib
import os
import sys
from importlib.metadata import entry_points

GROUP = "memspace_harness"
_loaded: set[str] = set()
_entry_points: dict[tuple[str, ...], list[str]] = {}  # sys.path -> the group's modules (a scan costs ~50 ms)


class PluginError(ImportError):
    exit_code = 2  # bad input (harness.failures): name a module that imports


def load() -> list[str]:
    """Import every plugin module not imported yet; returns the names imported now."""
    key = tuple(sys.path)  # the installed distributions are scanned once per search path, not per registry read
    if key not in _entry_points:
        _entry_points.clear()
        _entry_points[key] = [ep.value.split(":")[0] for ep in entry_points(group=GROUP)]
    names = list(_entry_points[key])
    names += [n.strip() for n in os.environ.get("MEMSPACE_PLUGINS", "").split(",") if n.strip()]
    new = []
    for name in names:
        if name in _loaded:
            continue
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise PluginError(f"plugin {name!r} (from ${{MEMSPACE_PLUGINS}} or entry point group {GROUP}) "
                              f"does not import: {exc}") from exc
        _loaded.add(name)
        new.append(name)
    return new
