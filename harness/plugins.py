"""The one `Registry` of every extension point, and the plugins from outside the tree.

WHY: a condition, table, personal table, study, index backend, judgement kind or endpoint
provider is one module, found without a list naming it. Every registry finds its entries the
same way before any read: it imports every module of its own package (the tree's), then every
plugin module (`load()`); a module registers what it defines at import. So what a registry
holds never depends on which modules happened to be imported first, and a second entry under a
name is refused with both origins named, never a silent replacement.

A plugin's names live in its namespace: a module outside the tree registers `<its top-level
package>/<name>` (`mypkg/recent`), the tree's own modules bare names (`recent`), so a plugin, the
test suite's toys included, never takes a name a user of the tree would choose (namespace_refusal).

Plugins come in two ways, both imported once: the entry points of group `memspace_harness` of
any installed distribution (`[project.entry-points.memspace_harness] mine = "mypkg.tables"`),
and the modules named in $MEMSPACE_PLUGINS (comma-separated; for a package not installed).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from importlib.metadata import entry_points
from typing import Any, Callable, Generic, Iterator, TypeVar

GROUP = "memspace_harness"
_loaded: set[str] = set()
_entry_points: dict[tuple[str, ...], list[str]] = {}  # sys.path -> the group's modules (a scan costs ~50 ms)
REGISTRIES: list["Registry"] = []  # every extension point, in the order created

T = TypeVar("T")


class PluginError(ImportError):
    exit_code = 2  # bad input (harness.failures): name a module that imports


class RegistryError(ValueError):
    exit_code = 2  # bad input (harness.failures): two entries under one name, or a name nobody registered


class UnknownName(RegistryError, KeyError):
    """A name nobody registered (a KeyError too, for callers that fall back on one)."""

    def __str__(self) -> str:
        return str(self.args[0])


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


TREE = ("harness", "conditions", "judge", "analysis", "bench")  # the project's own packages: bare names are theirs


def namespace(origin: str) -> str | None:
    """The namespace a registering module's names live in: None for the tree's modules (bare names), else
    the module's top-level package (`mypkg.tables` -> `mypkg`). A file path (a preset yaml) has none."""
    if not origin or "/" in origin or os.sep in origin or origin == "?":
        return None
    top = origin.split(".")[0]
    return None if top in TREE else top


def namespace_refusal(kind: str, name: str, origin: str) -> str | None:
    """Why `origin` may not register `name`, or None. The allowlist: the tree's modules register bare names;
    a module outside the tree registers only `<its top-level package>/<name>` (as inspect_ai's
    `package/name`), so no plugin, the tests' toys included, takes a name a user of the tree would choose."""
    ns = namespace(origin)
    if ns is None:
        if "/" in name and not ("/" in origin or os.sep in origin):
            return f"{kind} {name!r} from {origin}: a name with '/' is a plugin's; the tree's modules use bare names"
        return None
    if not name.startswith(ns + "/") or len(name) == len(ns) + 1:
        return (f"{kind} {name!r} from {origin}: a plugin's names live in its namespace: register "
                f"'{ns}/{name.rpartition('/')[2]}'")
    return None


def loaded() -> set[str]:
    """The plugin modules imported so far (recorded in every stage; refused under preset=paper)."""
    return set(_loaded)


def caller(depth: int = 2) -> str:
    """The module that called the caller (the frame, not inspect.stack(): that reads every frame's source)."""
    return sys._getframe(depth).f_globals.get("__name__", "?")


class Registry(Generic[T]):
    """Entries of one kind by name: `register` at import, `get`/`items`/`names` after discovery.

    package: the dotted package whose modules are imported before a read (its own entries);
    skip: module names of that package that hold no entries (helpers). An entry's origin is the
    module that registered it; the same origin registering a name again (a reload) replaces it.
    is_entry: the package's modules are the entries themselves (conditions): each module of the
    package and its subpackages for which is_entry(module) holds is registered under its dotted
    name below the package (`memory_tool`, `personal.naive_concat`).
    """

    def __init__(self, kind: str, package: str | None, skip: tuple[str, ...] = (),
                 is_entry: Callable[[Any], bool] | None = None):
        self.kind = kind
        self.package = package
        self.skip = set(skip)
        self.is_entry = is_entry
        self._entries: dict[str, tuple[T, str]] = {}
        self._discovered = False
        REGISTRIES.append(self)

    def register(self, name: str, entry: T, origin: str | None = None) -> T:
        origin = origin or caller()
        refused = namespace_refusal(self.kind, name, origin)
        if refused:
            raise RegistryError(refused)
        old = self._entries.get(name)
        if old is not None and old[1] != origin:
            raise RegistryError(f"{self.kind} {name!r} is registered twice: by {old[1]} and by {origin}")
        self._entries[name] = (entry, origin)
        return entry

    def discover(self) -> None:
        """Import the package's modules (once) and the plugins (every time: $MEMSPACE_PLUGINS may grow)."""
        if not self._discovered and self.package:
            pkg = importlib.import_module(self.package)
            walk = pkgutil.walk_packages if self.is_entry else pkgutil.iter_modules
            for info in walk(pkg.__path__, f"{self.package}."):
                name = info.name[len(self.package) + 1:]
                if name in self.skip or any(p.startswith("_") for p in name.split(".")):
                    continue
                mod = importlib.import_module(info.name)
                if self.is_entry and not info.ispkg and self.is_entry(mod):
                    self.register(name, mod, mod.__name__)
            self._discovered = True
        load()

    def get(self, name: str) -> T:
        self.discover()
        if name not in self._entries:
            raise UnknownName(f"no {self.kind} {name!r} is registered (known: {', '.join(self.names())})")
        return self._entries[name][0]

    def origin(self, name: str) -> str:
        self.discover()
        return self._entries[name][1]

    def names(self) -> list[str]:
        self.discover()
        return sorted(self._entries)

    def items(self) -> dict[str, T]:
        self.discover()
        return {k: v for k, (v, _) in self._entries.items()}

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __contains__(self, name: str) -> bool:
        self.discover()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())  # like a dict: the names

    def decorator(self, name: str) -> Callable[[T], T]:
        """@REG.decorator("name") above a class or function registers it under that name."""
        origin = caller()
        return lambda entry: self.register(name, entry, origin)
