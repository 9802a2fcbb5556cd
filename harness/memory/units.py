"""Memory units: user-assistant rounds cut into chunks (SPEC 2).

A round is a user turn with the assistant turns that follow it. Its text is
chunked to at most 1,000 characters with 200 characters of overlap; every
continuation chunk starts by repeating the start of the user turn, so a chunk
deep inside a long answer still says what was asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterable, Iterator

from harness.data.longmemeval import Session

MAX_CHARS = 1000
OVERLAP = 200
HEAD_CHARS = 150  # how much of the user turn a continuation chunk repeats
ROUND_SECONDS = 60  # rounds of a session are committed one minute apart


@dataclass(frozen=True)
class Round:
    session: str  # opaque session id
    number: int  # 1-based within the session
    user: str
    assistant: str
    time: float  # commit time, epoch seconds (UTC)

    @property
    def text(self) -> str:
        return f"User: {self.user}\nAssistant: {self.assistant}"


@dataclass(frozen=True)
class Unit:
    """(owner, visibility, commit time, session, text) plus where it sits: org, round, chunk."""

    org: str  # the organisation (one question's world); views never cross it
    owner: str
    visibility: str  # "private" | "public"
    time: float
    session: str
    round: int
    chunk: int
    text: str

    @property
    def uid(self) -> str:
        return f"{self.org}|{self.session}|{self.round}|{self.chunk}"


def epoch(when: datetime) -> float:
    """Benchmark dates carry no zone; the study reads them as UTC (Appendix F(ii))."""
    return when.replace(tzinfo=timezone.utc).timestamp()


def rounds_of(session: Session) -> list[Round]:
    """Group turns into rounds; assistant turns before any user turn form a round with an empty user turn."""
    groups: list[list[str]] = []
    for turn in session.turns:
        if turn.role == "user" or not groups:
            groups.append(["", ""])
            if turn.role == "user":
                groups[-1][0] = turn.content
                continue
        groups[-1][1] = (groups[-1][1] + "\n" + turn.content) if groups[-1][1] else turn.content
    start = epoch(session.date)
    return [Round(session.sid, i + 1, u, a, start + i * ROUND_SECONDS) for i, (u, a) in enumerate(groups)]


def chunk_text(user: str, text: str, max_chars: int = MAX_CHARS, overlap: int = OVERLAP) -> list[str]:
    """Cut a round's text into chunks of <= max_chars; continuations repeat the start of the user turn."""
    if len(text) <= max_chars:
        return [text]
    chunks = [text[:max_chars]]
    head = user[:HEAD_CHARS].rstrip()
    prefix = f"User: {head}{'…' if len(user) > HEAD_CHARS else ''}\n[…] "
    width = max_chars - len(prefix)
    if width <= overlap:
        raise ValueError("prefix leaves no room for new text")
    pos = max_chars - overlap
    while True:
        piece = text[pos:pos + width]
        chunks.append(prefix + piece)
        if pos + width >= len(text):
            return chunks
        pos += width - overlap


def units_of(session: Session, org: str, owner: str, visibility: str) -> Iterator[Unit]:
    for r in rounds_of(session):
        for c, text in enumerate(chunk_text(r.user, r.text)):
            yield Unit(org, owner, visibility, r.time, r.session, r.number, c, text)


def units_of_sessions(sessions: Iterable[Session], org: str, owner_of, visibility_of) -> list[Unit]:
    """Units of many sessions; owner_of(session id) -> agent, visibility_of(agent) -> visibility."""
    out: list[Unit] = []
    for s in sessions:
        owner = owner_of(s.sid)
        out.extend(units_of(s, org, owner, visibility_of(owner)))
    return out
