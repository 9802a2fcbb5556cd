"""Append-only JSON-lines files: the metering ledger, attempt logs, judgements.

Every line is flushed and fsynced (calls take seconds; this takes ~1 ms), so a crash loses
at most the line being written. Reading distinguishes the one line a crash can tear (the
last, with no newline) from a corrupted line in the middle, which is named by file and
line number, never skipped in silence.
"""

from __future__ import annotations

import json
import os
import threading
from datetime import datetime, timezone
from pathlib import Path

from harness.records.schema import RecordError


class Ledger:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.listeners: list = []  # called with each appended entry (e.g. the spending cap)
        self._f = open(self.path, "a", encoding="utf-8")
        if self.path.stat().st_size and not self.path.read_bytes().endswith(b"\n"):
            self._f.write("\n")  # end a line torn by a crash, so the next entry stays whole
            self._f.flush()

    def append(self, entry: dict) -> None:
        line = json.dumps(entry, ensure_ascii=False, sort_keys=True) + "\n"
        with self._lock:
            self._f.write(line)
            self._f.flush()
            os.fsync(self._f.fileno())
        for listener in self.listeners:
            listener(entry)

    def close(self) -> None:
        with self._lock:
            self._f.close()


def read_lines(path: str | Path) -> tuple[list[tuple[int, dict]], list[RecordError]]:
    """(line number, object) for every readable line, and a RecordError for every other line.

    A torn last line (no newline at the end of the file) is what a crash leaves; it is
    returned as a problem too, so readers that must account for every call can say so.
    """
    p = Path(path)
    if not p.exists():
        return [], []
    return parse_lines(p.read_bytes(), p)


def parse_lines(raw: bytes, p: str | Path) -> tuple[list[tuple[int, dict]], list[RecordError]]:
    """read_lines on a file's bytes already in memory (`p` names it in the problems)."""
    lines = raw.decode("utf-8", errors="replace").split("\n")
    torn_last = bool(raw) and not raw.endswith(b"\n")
    if not torn_last:
        lines = lines[:-1]
    out, problems = [], []
    for i, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            what = "torn last line (the writer was killed mid-line)" if torn_last and i == len(lines) else \
                f"corrupted line ({exc.msg}): {text[:80]!r}"
            problems.append(RecordError(p, what, line=i))
            continue
        if not isinstance(obj, dict):
            problems.append(RecordError(p, f"not a JSON object: {text[:80]!r}", line=i))
            continue
        out.append((i, obj))
    return out, problems


def read_ledger(path: str | Path) -> list[dict]:
    """Every readable line, for the writers' own bookkeeping (resume, interrupted marks).

    The analysis reads with `read_lines` and reports what this leaves out.
    """
    return [obj for _, obj in read_lines(path)[0]]


def mark_interrupted(ledger: Ledger, started: set[tuple[str, int]], finished: set[tuple[str, int]],
                     reason: str, role: str | None = None) -> int:
    """Attempts (tag, attempt) that started but never finished keep their ledger lines, and get
    one `interrupted` line each, so what they spent stays in the accounts and is told apart."""
    marked = {(e.get("tag"), e.get("attempt")) for e in read_ledger(ledger.path) if e.get("event") == "interrupted"}
    ts = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    n = 0
    for tag, attempt in sorted(started - finished - marked):
        entry = {"event": "interrupted", "tag": tag, "attempt": attempt, "reason": reason, "ts": ts}
        if role:
            entry["role"] = role
        ledger.append(entry)
        n += 1
    return n
