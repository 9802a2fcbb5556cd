"""Shared data for the runtime tests (tests/test_runtime_*.py): generated questions and hand-made ones."""

from __future__ import annotations

import atexit
import hashlib
import shutil
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

from harness.data.longmemeval import Question, Session, Turn, load, opaque_session_id, sha256_file
from harness.data.synth import write


_SHARED: Path | None = None


def shared_dir() -> Path:
    """One temporary directory per test process for data and stores the tests only read.

    Stores are built by the runtime (a few hundred ms each, mostly its schema set-up),
    so the three runtime test files share them instead of building the same ones thrice.
    Tests about building and reuse use their own fresh directories.
    """
    global _SHARED
    if _SHARED is None:
        _SHARED = Path(tempfile.mkdtemp(prefix="memspace-runtime-tests-"))
        atexit.register(shutil.rmtree, _SHARED, True)
    return _SHARED


def tiny_questions(tmp: Path | None = None) -> tuple[dict[str, Question], str]:
    path = write(tmp or shared_dir() / "synth", seed=0, size="tiny")
    return load(path), sha256_file(path)


def shared_stores() -> Path:
    return shared_dir() / "stores"


def evidence_word(q: Question) -> str:
    """A word from an evidence user turn that the search should find (a long, alphabetic one)."""
    for s in q.sessions_by_time():
        if s.sid in q.evidence:
            for t in s.turns:
                if t.has_answer or t.role == "user":
                    words = [w.strip(".,!?;:'\"()") for w in t.content.split()]
                    words = [w for w in words if w.isalpha() and len(w) >= 7]
                    if words:
                        return max(words, key=len)
    raise AssertionError(f"{q.qid}: no evidence word")


def long_question(n_sessions: int = 3, n_turns: int = 12, chars: int = 2500) -> Question:
    """Sessions with long messages and one unique marker word per message ('mk<session>x<turn>')."""
    base = datetime(2023, 3, 1, 9, 30)
    sessions = []
    for i in range(n_sessions):
        turns = []
        for k in range(n_turns):
            filler = hashlib.sha256(f"{i}:{k}".encode()).hexdigest()
            body = f"mk{i}x{k} " + " ".join(filler[j:j + 8] for j in range(0, 64, 8))
            text = (body + " ") * (chars // (len(body) + 1) + 1)
            turns.append(Turn("user" if k % 2 == 0 else "assistant", text[:chars]))
        sessions.append(Session(opaque_session_id(f"answer_long_{i}" if i == 0 else f"long_{i}"),
                                base + timedelta(days=3 * i, minutes=7 * i), tuple(turns)))
    return Question(qid="glong", qtype="single-session-user", question="What was said?", answer="x",
                    date=base + timedelta(days=30), sessions=tuple(sessions),
                    evidence=frozenset({sessions[0].sid}))


def imported_store(name: str, sessions: list[dict]) -> Path:
    """A store written once per test session by the runtime's own import_sessions (shared_dir()/<name>)."""
    import harness.runtime as R

    path = shared_dir() / name / "state.db"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        db = R.load_runtime().SessionDB(db_path=path)
        try:
            res = db.import_sessions(sessions)
            assert res.get("ok") and res.get("detached", 0) == 0, res
        finally:
            db.close()
    return path


def message_ids(store: Path) -> dict[str, list[int]]:
    """Each session's message ids in the store, read with plain SQL (not through the code under test)."""
    import sqlite3

    con = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        out: dict[str, list[int]] = {}
        for sid, mid in con.execute("SELECT session_id, id FROM messages ORDER BY id"):
            out.setdefault(sid, []).append(mid)
        return out
    finally:
        con.close()
