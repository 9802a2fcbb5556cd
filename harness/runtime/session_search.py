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

Counting swallowed errors: the runtime catches FTS5 syntax errors inside
`SessionDB.search_messages` (a query with `?`, an apostrophe, a comma or a
trailing full stop survives its sanitiser and breaks FTS5's query grammar) and
reports "No matching sessions found.". After an empty discovery we re-run the
runtime's own sanitiser and the MATCH on a separate connection to see whether
it raised; `ToolResult.error` is then true and the log keeps the message. The
probe is not timed as retrieval.

Fan-out (LongMemEval-Org): the tool is given the stores of a0-a3, a0's being
its own; the model names another agent's store with the runtime's `profile`
argument. In 0.19.0 the runtime opens a named profile with
`SessionDB(read_only=True)`, which never enables FTS, so a discovery query on
another profile returns "No matching sessions found." (checked at run time by
`profile_search_supported()`). When that is so, the tool opens the named
agent's store itself with `SessionDB(db_path=...)` and calls the runtime on it
without `profile`; every result's log says `fanout_mode: "direct"`. If a later
runtime can search a profile by name, the stores are exposed as profiles under
HERMES_HOME and the runtime opens them itself (`fanout_mode: "profile"`).
"""

from __future__ import annotations

import copy
import json
import shutil
import sqlite3
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Mapping

from harness.run.tools import ToolResult

from .hermes import load, runtime_label
from .store import StoreInfo, open_session_db

TOOL_NAME = "session_search"
COMPACT_CHARS = 1000


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


# ---------------------------------------------------------------- compact output

def _cut(text: Any) -> Any:
    if isinstance(text, str) and len(text) > COMPACT_CHARS:
        return text[: COMPACT_CHARS - 1] + "…"
    return text


def _neighbours(messages: list[dict], anchor_id: Any) -> tuple[list[dict], int, int]:
    idx = next((i for i, m in enumerate(messages) if m.get("anchor") or m.get("id") == anchor_id), None)
    if idx is None:
        return [], 0, 0
    lo, hi = max(0, idx - 1), min(len(messages), idx + 2)
    kept = [{**m, "content": _cut(m.get("content"))} for m in messages[lo:hi]]
    return kept, idx - lo, hi - idx - 1


def compact_result(raw: str) -> str:
    """Cut a runtime result to match ± one neighbour, ≤ 1,000 characters each, no bookends."""
    try:
        obj = json.loads(raw)
    except ValueError:
        return raw
    if not isinstance(obj, dict):
        return raw
    mode = obj.get("mode")
    if mode == "discover" and isinstance(obj.get("results"), list):
        out = []
        for r in obj["results"]:
            r = dict(r)
            kept, before, after = _neighbours(r.get("messages") or [], r.get("match_message_id"))
            r.pop("bookend_start", None)
            r.pop("bookend_end", None)
            r["messages"], r["messages_before"], r["messages_after"] = kept, before, after
            out.append(r)
        obj["results"] = out
    elif mode == "scroll" and isinstance(obj.get("messages"), list):
        kept, before, after = _neighbours(obj["messages"], obj.get("around_message_id"))
        obj["messages"], obj["messages_before"], obj["messages_after"] = kept, before, after
    elif mode == "read" and isinstance(obj.get("messages"), list):
        obj["messages"] = [{**m, "content": _cut(m.get("content"))} for m in obj["messages"]]
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
        if not q:
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
        self._schema = runtime_schema()
        self._dbs: dict[str, Any] = {}
        self._probes: dict[str, _FtsProbe] = {}
        self._lock = threading.Lock()
        self._profile_dirs: dict[str, str] = {}
        if not self.fanout:
            self.fanout_mode = None
        else:
            self.fanout_mode = fanout_mode or ("profile" if profile_search_supported() else "direct")
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
                               "runtime": self.runtime, "arguments": dict(arguments)}
        routed_error = None
        if self.fanout:
            target, store, args, routed_error = self._route(args)
            log["fanout_mode"] = self.fanout_mode
            if self.fanout_mode == "direct":
                log["fanout_note"] = ("runtime cannot search another profile's store by name "
                                      "(read_only SessionDB leaves FTS off); store opened directly with SessionDB(db_path=...)")
        log["store"] = store
        t0 = time.perf_counter()
        if routed_error is not None:
            raw = routed_error
        else:
            db = self._db(target)
            raw = self._rt.registry.dispatch(TOOL_NAME, args, db=db)
        retrieval_s = time.perf_counter() - t0
        if not isinstance(raw, str):  # the registry's multimodal envelope; never produced by this tool
            raw = json.dumps(raw, ensure_ascii=False)
        text = compact_result(raw) if self.compact else raw

        sessions: list[str] = []
        empty = error = False
        try:
            obj = json.loads(text)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            error = True
        elif "error" in obj:
            error = empty = True
            log["runtime_error"] = obj.get("error")
        else:
            mode = obj.get("mode")
            log["mode"] = mode
            if mode in ("discover", "browse"):
                for r in obj.get("results") or []:
                    for key in ("session_id", "parent_session_id"):
                        if r.get(key) and r[key] not in sessions:
                            sessions.append(r[key])
                log["count"] = obj.get("count", len(obj.get("results") or []))
                empty = not obj.get("results")
            elif mode in ("scroll", "read"):
                if obj.get("session_id"):
                    sessions.append(obj["session_id"])
                empty = not obj.get("messages")
            if mode == "discover" and empty:
                fts_err = self._probe(store).error(str(args.get("query") or ""))
                if fts_err:
                    error = True
                    log["fts5_error"] = fts_err
        log.update(raw_chars=len(raw), chars=len(text), sessions=sessions)
        return ToolResult(text=text, sessions=sessions, retrieval_s=retrieval_s, empty=empty, error=error, log=log)
