"""LongMemEval records: validation, normalisation and opaque session ids.

Files are JSON arrays of question records. They are read record by record with
ijson, so the 2.7 GB M file never sits in memory whole, and a bad record is
reported by its index and question id before any model call is made.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator

import ijson

QUESTION_TYPES = (
    "single-session-user",
    "single-session-assistant",
    "single-session-preference",
    "multi-session",
    "temporal-reasoning",
    "knowledge-update",
)
DATE_FORMAT = "%Y/%m/%d (%a) %H:%M"
ROLES = ("user", "assistant")


class DataError(ValueError):
    """A record breaks the LongMemEval format; names the record and the field."""

    exit_code = 2  # harness.failures.BAD_INPUT

    def __init__(self, index: int, qid: str | None, field_name: str, problem: str):
        self.index, self.qid, self.field, self.problem = index, qid, field_name, problem
        if index < 0:  # a problem with the file, not with one record
            super().__init__(f"{field_name}: {problem}")
            return
        who = f"record #{index}" + (f" (question_id {qid!r})" if qid else "")
        super().__init__(f"{who}: field {field_name!r}: {problem}")


def parse_date(text: str) -> datetime:
    """'2023/05/30 (Tue) 23:40' -> naive datetime (the benchmark has no time zone)."""
    return datetime.strptime(text, DATE_FORMAT)


def opaque_session_id(raw_id: str) -> str:
    """A stable id that hides the raw one (evidence ids start with 'answer_', Appendix F(i))."""
    return "s" + hashlib.sha256(f"lme-session:{raw_id}".encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Turn:
    role: str
    content: str
    has_answer: bool = False


@dataclass(frozen=True)
class Session:
    sid: str  # opaque id; the only id any store, tool or prompt may show
    date: datetime
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Question:
    qid: str
    qtype: str
    question: str
    answer: str
    date: datetime
    sessions: tuple[Session, ...]  # in file order (time-sorted in S and M)
    evidence: frozenset[str] = field(default_factory=frozenset)  # opaque ids
    # the evidence in the sorted order of the benchmark's own answer_session_ids (Appendix C assigns
    # them "in sorted order"), as opaque ids; empty for a Question built by hand: sorted opaque ids then
    evidence_order: tuple[str, ...] = ()

    @property
    def abstention(self) -> bool:
        return self.qid.endswith("_abs")

    def sessions_by_time(self) -> list[Session]:
        return sorted(self.sessions, key=lambda s: (s.date, s.sid))


def _require(rec: dict, index: int, qid: str | None, name: str, kinds: tuple[type, ...]) -> Any:
    if name not in rec:
        raise DataError(index, qid, name, "missing")
    value = rec[name]
    if isinstance(value, bool) or not isinstance(value, kinds):
        expected = " or ".join(k.__name__ for k in kinds)
        raise DataError(index, qid, name, f"expected {expected}, got {type(value).__name__}")
    return value


def _date(value: str, index: int, qid: str | None, name: str) -> datetime:
    try:
        return parse_date(value)
    except ValueError:
        raise DataError(index, qid, name, f"unparsable date {value!r} (want {DATE_FORMAT!r})") from None


def parse_record(rec: Any, index: int) -> Question:
    """Validate one raw record and return it normalised; raise DataError on the first problem."""
    if not isinstance(rec, dict):
        raise DataError(index, None, "<record>", f"expected an object, got {type(rec).__name__}")
    qid = rec.get("question_id") if isinstance(rec.get("question_id"), str) else None
    _require(rec, index, qid, "question_id", (str,))
    qtype = _require(rec, index, qid, "question_type", (str,))
    if qtype not in QUESTION_TYPES:
        raise DataError(index, qid, "question_type", f"unknown type {qtype!r}")
    question = _require(rec, index, qid, "question", (str,))
    answer = _require(rec, index, qid, "answer", (str, int, float))
    qdate = _date(_require(rec, index, qid, "question_date", (str,)), index, qid, "question_date")
    ids = _require(rec, index, qid, "haystack_session_ids", (list,))
    dates = _require(rec, index, qid, "haystack_dates", (list,))
    sessions = _require(rec, index, qid, "haystack_sessions", (list,))
    evidence = _require(rec, index, qid, "answer_session_ids", (list,))
    if not (len(ids) == len(dates) == len(sessions)):
        raise DataError(
            index, qid, "haystack_sessions",
            f"parallel lists differ in length: ids {len(ids)}, dates {len(dates)}, sessions {len(sessions)}",
        )
    out: list[Session] = []
    for j, (sid, sdate, turns) in enumerate(zip(ids, dates, sessions)):
        if not isinstance(sid, str):
            raise DataError(index, qid, f"haystack_session_ids[{j}]", "expected str")
        if not isinstance(sdate, str):
            raise DataError(index, qid, f"haystack_dates[{j}]", "expected str")
        when = _date(sdate, index, qid, f"haystack_dates[{j}]")
        if not isinstance(turns, list):
            raise DataError(index, qid, f"haystack_sessions[{j}]", "expected a list of turns")
        parsed = []
        for t, turn in enumerate(turns):
            where = f"haystack_sessions[{j}][{t}]"
            if not isinstance(turn, dict):
                raise DataError(index, qid, where, "expected a turn object")
            role, content = turn.get("role"), turn.get("content")
            if role not in ROLES:
                raise DataError(index, qid, where + ".role", f"expected user/assistant, got {role!r}")
            if not isinstance(content, str):
                raise DataError(index, qid, where + ".content", "missing or not a string")
            has = turn.get("has_answer", False)
            if not isinstance(has, bool):
                raise DataError(index, qid, where + ".has_answer", "expected a boolean")
            parsed.append(Turn(role, content, has))
        out.append(Session(opaque_session_id(sid), when, tuple(parsed)))
    raw_ids = set(ids)
    for e in evidence:
        if not isinstance(e, str):
            raise DataError(index, qid, "answer_session_ids", "expected a list of str")
        if e not in raw_ids and not qid.endswith("_abs"):
            raise DataError(index, qid, "answer_session_ids", f"evidence session {e!r} not in the haystack")
    return Question(
        qid=qid,
        qtype=qtype,
        question=question,
        answer=str(answer) if not isinstance(answer, float) or not answer.is_integer() else str(int(answer)),
        date=qdate,
        sessions=tuple(out),
        evidence=frozenset(opaque_session_id(e) for e in evidence if e in raw_ids),
        evidence_order=tuple(opaque_session_id(e) for e in sorted(set(evidence)) if e in raw_ids),
    )


def iter_raw(path) -> Iterator[tuple[int, Any]]:
    """Yield (index, raw record) from a JSON array, streaming; raise DataError on broken JSON. `path` is a
    path, or anything that opens like one (a dry run's generated file in memory, harness.data.source.Unwritten)."""
    index = -1
    with (path.open("rb") if hasattr(path, "open") else open(path, "rb")) as f:
        try:
            for index, rec in enumerate(ijson.items(f, "item", use_float=True), start=0):
                yield index, rec
        except ijson.JSONError as exc:
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            before = f"the last complete record is #{index}" if index >= 0 else "no record before it is complete"
            raise DataError(index + 1, None, "<json>", f"broken or truncated JSON ({before}): {first_line}") from None
    if index < 0:
        raise DataError(0, None, "<json>", "no records: expected a non-empty JSON array of question objects")


def iter_questions(path: str | Path) -> Iterator[Question]:
    for index, rec in iter_raw(path):
        yield parse_record(rec, index)


def load(path: str | Path, only: set[str] | None = None) -> dict[str, Question]:
    """Validate every record and keep the ones named in `only` (all when None).

    The whole file is validated even when only a few questions are kept, so a
    broken file stops a stage before anything runs.
    """
    out: dict[str, Question] = {}
    seen: set[str] = set()
    for index, rec in iter_raw(path):
        q = parse_record(rec, index)
        if q.qid in seen:
            raise DataError(index, q.qid, "question_id", "duplicate question id")
        seen.add(q.qid)
        if only is None or q.qid in only:
            out[q.qid] = q
    return out


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
