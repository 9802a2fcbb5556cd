"""Judge replies cached by (judge identity, prompt sha256), shared by every stage.

A SQLite file (WAL, one short transaction per write) so two judging processes can
share it. Only real replies are cached; a failed call is never cached, so the
next run asks again.
"""

from __future__ import annotations

import sqlite3
import threading
from datetime import datetime, timezone
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS replies (
    identity TEXT NOT NULL,
    prompt_sha256 TEXT NOT NULL,
    reply TEXT NOT NULL,
    model TEXT,
    ts TEXT NOT NULL,
    PRIMARY KEY (identity, prompt_sha256)
)"""


class JudgeCache:
    def __init__(self, path: str | Path, read_only: bool = False):
        """`read_only` (a dry run's plan): an existing file is read as it is and nothing is created, so a plan
        writes no file; no file reads as an empty cache, and `put` is refused."""
        self.path = Path(path)
        self.read_only = read_only
        self._lock = threading.Lock()
        if read_only:
            uri = f"{self.path.resolve().as_uri()}?mode=ro&immutable=1"  # immutable: no -wal/-shm files made
            self._db = sqlite3.connect(uri if self.path.exists() else ":memory:", uri=self.path.exists(),
                                       check_same_thread=False, isolation_level=None)
            if not self.path.exists():
                self._db.execute(_SCHEMA)
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path), timeout=60, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(_SCHEMA)

    def get(self, identity: str, prompt_sha256: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT reply FROM replies WHERE identity=? AND prompt_sha256=?",
                                   (identity, prompt_sha256)).fetchone()
        return row[0] if row else None

    def put(self, identity: str, prompt_sha256: str, reply: str, model: str | None = None) -> None:
        if self.read_only:
            raise RuntimeError(f"{self.path}: the judge cache is open read-only (dry run): nothing is written")
        ts = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO replies VALUES (?, ?, ?, ?, ?)",
                             (identity, prompt_sha256, reply, model, ts))

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM replies").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()
