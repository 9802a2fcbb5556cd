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

Which runtime is installed is a setup choice (`make setup HERMES_VERSION=X`),
and releases differ in what `session_search` returns, so `runtime_facts()`
names the installed version and the shape of its results; every run records
them (SPEC 3, "Versions differ"). The shape is read from the installed tool's
code (its arguments), never assumed from the version number:

  sessions_expanded      0.15-0.19: up to `limit` (default 3) sessions, each
                         with +-5 messages around its match and up to 3+3
                         bookend messages, no character cap
  sessions_window_capped upstream code between 0.19 and the `detail` argument:
                         every session hydrated as above, each window message
                         cut at 4,000 characters and each bookend at 1,200
  top_session_window     0.21.5 (the study's runtime): `detail="adaptive"` by
                         default; only the top session carries the +-5 window
                         (each message cut at 4,000) and bookends (1,200);
                         lower-ranked sessions carry only their matching message
  llm_summaries          0.13-0.14: an auxiliary model summarises the matches;
                         the harness refuses it (it would call a model outside
                         the metering proxy)
"""

from __future__ import annotations

import copy
import importlib.metadata
import inspect
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
TOOL_NAME = "session_search"

# What the paper ran (Section 3.3, 5.1): the manifest compares runtime_facts() against these.
PAPER_RUNTIME_VERSION = "0.21.5"
SHAPE_EXPANDED = "sessions_expanded"
SHAPE_CAPPED = "sessions_window_capped"
SHAPE_TOP_WINDOW = "top_session_window"
SHAPE_SUMMARIES = "llm_summaries"
PAPER_SESSION_SEARCH_SHAPE = SHAPE_TOP_WINDOW
WINDOW_MESSAGE_CHARS = 4000  # the newer runtimes' cut of each window message (plus "…")
BOOKEND_MESSAGE_CHARS = 1200  # and of each bookend message
SHAPES = {
    SHAPE_EXPANDED: "discovery returns up to 3 sessions (limit, at most 10), each fully expanded: "
                    "±5 messages around the match plus up to 3+3 bookend messages, no character cap",
    SHAPE_CAPPED: "discovery hydrates every returned session with ±5 messages around the match, each cut at "
                  "4,000 characters, plus bookends cut at 1,200",
    SHAPE_TOP_WINDOW: "discovery hydrates only the top session: a window of ±5 messages around the match, "
                      "each cut at 4,000 characters, plus bookends cut at 1,200; lower-ranked sessions carry "
                      "only their matching message",
    SHAPE_SUMMARIES: "an auxiliary model summarises the matching sessions (not usable: it calls a model "
                     "outside the metering proxy)",
}


class RuntimeSetupError(RuntimeError):
    """The runtime cannot be loaded the way the study needs (wrong home, wrong time zone)."""


def runtime_version() -> str:
    """The installed runtime's version, e.g. '0.19.0' (recorded in every run)."""
    return importlib.metadata.version(PACKAGE)


def runtime_label() -> str:
    return f"{PACKAGE}=={runtime_version()}"


def _params(fn: Any) -> dict[str, inspect.Parameter]:
    try:
        return dict(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return {}


def session_search_shape(search_module: ModuleType | None = None) -> str:
    """The shape of the installed runtime's session_search results, read from its code.

    WHY from the code: the shape decides how many characters a search returns
    and which sessions a result holds; a version table could be wrong for a
    release nobody checked. The markers are the tool's own arguments: the
    discovery function (absent where an auxiliary model summarises instead),
    the `detail` argument and its default, and the per-message character cap.
    """
    mod = search_module if search_module is not None else load().search_module
    if not hasattr(mod, "_discover"):
        return SHAPE_SUMMARIES
    detail = _params(getattr(mod, "session_search", None)).get("detail")
    schema_props = ((getattr(mod, "SESSION_SEARCH_SCHEMA", None) or {}).get("parameters") or {}).get("properties") or {}
    if detail is not None or "detail" in schema_props:
        default = detail.default if detail is not None and detail.default is not inspect.Parameter.empty \
            else (schema_props.get("detail") or {}).get("default", "adaptive")
        return SHAPE_CAPPED if str(default).lower() == "full" else SHAPE_TOP_WINDOW
    if "max_content_len" in _params(getattr(mod, "_shape_message", None)):
        return SHAPE_CAPPED
    return SHAPE_EXPANDED


def expected_shape(version: str) -> str | None:
    """The shape a release is known to have (checked in its public source), or None if unchecked."""
    try:
        major, minor, patch = (int(x) for x in version.split(".")[:3])
    except ValueError:
        return None
    if (major, minor) in ((0, 13), (0, 14)):
        return SHAPE_SUMMARIES
    if major == 0 and 15 <= minor <= 19:
        return SHAPE_EXPANDED
    if (major, minor, patch) == (0, 21, 5):
        return SHAPE_TOP_WINDOW
    return None


def runtime_facts() -> dict:
    """What the installed runtime is, for every run's manifest: version and session_search shape.

    Keys: package, version, label, session_search_shape (an id of SHAPES),
    shape_description (one line), expected_shape (for the version, None if
    unchecked), paper ({version, session_search_shape}) and matches_paper.
    """
    rt = load()
    shape = rt.shape
    return {
        "package": PACKAGE, "version": rt.version, "label": f"{PACKAGE}=={rt.version}",
        "session_search_shape": shape, "shape_description": SHAPES[shape],
        "expected_shape": expected_shape(rt.version),
        "paper": {"version": PAPER_RUNTIME_VERSION, "session_search_shape": PAPER_SESSION_SEARCH_SHAPE},
        "matches_paper": rt.version == PAPER_RUNTIME_VERSION and shape == PAPER_SESSION_SEARCH_SHAPE,
    }


@dataclass(frozen=True)
class Runtime:
    version: str
    home: Path
    SessionDB: type
    session_search: Callable[..., str]  # tools.session_search_tool.session_search, unmodified
    registry: Any  # tools.registry.registry
    tool_error: Callable[..., str]
    # SessionDB._sanitize_fts5_query / _contains_cjk (private: None if a release moved them; the
    # swallowed-FTS5-error probe is then skipped and every log says so)
    sanitize_fts5_query: Callable[[str], str] | None
    contains_cjk: Callable[[str], bool] | None
    state_module: ModuleType
    search_module: ModuleType
    early_home: Path | None = None  # HERMES_HOME of an import that happened before load()
    shape: str = ""  # session_search_shape(search_module): what its discovery results look like


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
            state = sys.modules["hermes_state"]
            default_db = getattr(state, "DEFAULT_DB_PATH", None)
            if default_db is None and callable(getattr(state, "_default_db_path", None)):
                default_db = state._default_db_path()  # later releases resolve it per call
            current = Path(default_db).parent.resolve() if default_db is not None else home
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
            sanitize_fts5_query=getattr(hermes_state.SessionDB, "_sanitize_fts5_query", None),
            contains_cjk=getattr(hermes_state.SessionDB, "_contains_cjk", None),
            state_module=hermes_state,
            search_module=search_module,
            early_home=early_home,
            shape=session_search_shape(search_module),
        )
        return _loaded


def runtime_schema() -> dict:
    """The OpenAI tool definition exactly as the installed runtime's registry hands it out."""
    rt = load()
    defs = [] if rt.early_home else rt.registry.get_definitions({TOOL_NAME}, quiet=True)
    if defs:
        return copy.deepcopy(defs[0])
    # The registry withholds a tool whose check_fn fails; session_search's only checks that
    # the directory of the runtime's default store exists, which is false when hermes_state
    # was first imported without our HERMES_HOME. The definition is then built the way
    # get_definitions builds it (this tool has no dynamic overrides).
    entry = rt.registry.get_entry(TOOL_NAME)
    if entry is None or entry.dynamic_schema_overrides is not None:
        raise RuntimeError("cannot read session_search's definition from the runtime's registry")
    return {"type": "function", "function": copy.deepcopy({**entry.schema, "name": entry.name})}
