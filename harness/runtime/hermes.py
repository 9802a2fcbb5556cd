"""The one place that loads the Hermes Agent runtime (PyPI `hermes-agent`).

WHY one place: the runtime resolves HERMES_HOME when its modules are imported
(its default store path and profile directories hang off it), and it formats
session times with the host's local time zone, so the harness must set
HERMES_HOME and TZ=UTC before the first import (Appendix F(ii)). Every module
of the harness that touches the runtime calls `load()` instead of importing
`hermes_state` or `tools.*` itself.

HERMES_HOME is the harness's own directory (default `.cache/hermes_home` in the
repository, or $MEMSPACE_HERMES_HOME), never a user's real Hermes home: the
fan-out probe writes a throw-away profile there.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[2]
DEFAULT_HOME = REPO / ".cache" / "hermes_home"
PACKAGE = "hermes-agent"


class RuntimeSetupError(RuntimeError):
    """The runtime cannot be loaded the way the study needs (wrong home, wrong time zone)."""


def runtime_version() -> str:
    """The installed runtime's version, e.g. '0.19.0' (recorded in every run)."""
    return importlib.metadata.version(PACKAGE)


def runtime_label() -> str:
    return f"{PACKAGE}=={runtime_version()}"


@dataclass(frozen=True)
class Runtime:
    version: str
    home: Path
    SessionDB: type
    session_search: Callable[..., str]  # tools.session_search_tool.session_search, unmodified
    registry: Any  # tools.registry.registry
    tool_error: Callable[..., str]
    sanitize_fts5_query: Callable[[str], str]  # SessionDB._sanitize_fts5_query
    contains_cjk: Callable[[str], bool]
    state_module: ModuleType
    search_module: ModuleType
    early_home: Path | None = None  # HERMES_HOME of an import that happened before load()


_lock = threading.Lock()
_loaded: Runtime | None = None


def _home() -> Path:
    return Path(os.environ.get("MEMSPACE_HERMES_HOME") or DEFAULT_HOME).resolve()


def load() -> Runtime:
    """Set HERMES_HOME and TZ=UTC, import the runtime once, and hand back its entry points."""
    global _loaded
    with _lock:
        if _loaded is not None:
            return _loaded
        home = _home()
        home.mkdir(parents=True, exist_ok=True)
        early_home = None
        if "hermes_state" in sys.modules:
            # Imported before us (another module read a constant from it). The runtime
            # resolves HERMES_HOME at call time everywhere the harness depends on it
            # (profiles, the session-locate scan); only its DEFAULT_DB_PATH constant,
            # used when no db is passed (never here) and by the tool's check_fn, keeps
            # the old home. We note it instead of failing; runtime_schema() copes.
            current = Path(sys.modules["hermes_state"].DEFAULT_DB_PATH).parent.resolve()
            if current != home:
                early_home = current
        os.environ["HERMES_HOME"] = str(home)
        os.environ["TZ"] = "UTC"
        time.tzset()
        if datetime.fromtimestamp(0).hour != 0:
            raise RuntimeSetupError("TZ=UTC did not take effect; the runtime would format session times in local time")

        import hermes_state  # noqa: E402  (after HERMES_HOME/TZ on purpose)
        import tools.session_search_tool as search_module  # registers the tool in the runtime's registry
        from tools.registry import registry, tool_error

        _loaded = Runtime(
            version=runtime_version(),
            home=home,
            SessionDB=hermes_state.SessionDB,
            session_search=search_module.session_search,
            registry=registry,
            tool_error=tool_error,
            sanitize_fts5_query=hermes_state.SessionDB._sanitize_fts5_query,
            contains_cjk=hermes_state.SessionDB._contains_cjk,
            state_module=hermes_state,
            search_module=search_module,
            early_home=early_home,
        )
        return _loaded
