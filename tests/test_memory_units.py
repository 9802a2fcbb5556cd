"""Units (SPEC 2): rounds chunked to <= 1,000 characters, 200 overlap, continuations repeat the user turn."""

from __future__ import annotations

from datetime import datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.data.longmemeval import Session, Turn
from harness.memory.units import (HEAD_CHARS, MAX_CHARS, OVERLAP, ROUND_SECONDS, Round, chunk_text, epoch,
                                  rounds_of, units_of)


def bodies(user: str, text: str) -> list[tuple[int, str]]:
    """Chunks with their continuation prefix removed, as (start offset in text, body)."""
    chunks = chunk_text(user, text)
    prefix = f"User: {user[:HEAD_CHARS].rstrip()}{'…' if len(user) > HEAD_CHARS else ''}\n[…] "
    out = [(0, chunks[0])]
    pos = MAX_CHARS - OVERLAP
    for c in chunks[1:]:
        assert c.startswith(prefix)
        body = c[len(prefix):]
        out.append((pos, body))
        pos += len(body) - OVERLAP
    return out


def check_chunks(user: str, assistant: str) -> list[str]:
    r = Round("s1", 1, user, assistant, 0.0)
    text = r.text
    chunks = chunk_text(user, text)
    assert all(len(c) <= MAX_CHARS for c in chunks)
    if len(text) <= MAX_CHARS:
        assert chunks == [text]
        return chunks
    head = user[:HEAD_CHARS].rstrip()
    for c in chunks[1:]:
        assert c.startswith(f"User: {head}"), "a continuation chunk repeats the start of the user turn"
    parts = bodies(user, text)
    # every body is the text at its offset, consecutive bodies overlap by exactly 200 characters
    for (start, body) in parts:
        assert text[start:start + len(body)] == body
    for (s1, b1), (s2, _b2) in zip(parts, parts[1:]):
        assert s1 + len(b1) - s2 == OVERLAP
    # together they cover the whole text
    assert parts[-1][0] + len(parts[-1][1]) == len(text)
    return chunks


def test_short_round_is_one_chunk():
    assert check_chunks("What's my dog's name?", "Biscuit.") == ["User: What's my dog's name?\nAssistant: Biscuit."]


def test_empty_assistant_turn():
    chunks = check_chunks("Remember that I parked on level 3.", "")
    assert chunks == ["User: Remember that I parked on level 3.\nAssistant: "]
    s = Session("sx", datetime(2023, 5, 1, 10, 0), (Turn("user", "hello"),))
    [r] = rounds_of(s)
    assert (r.user, r.assistant) == ("hello", "")


def test_ten_thousand_character_turn():
    user = "Please summarise this document for me: " + "x" * 200
    assistant = "".join(f"Sentence {i} of the answer goes here. " for i in range(300))[:10_000]
    chunks = check_chunks(user, assistant)
    assert len(chunks) >= 12
    assert all(len(c) <= MAX_CHARS for c in chunks)
    assert chunks[1].startswith("User: " + user[:HEAD_CHARS].rstrip() + "…\n[…] ")


def test_long_user_turn_itself():
    user = "word " * 2000  # the user turn alone is 10,000 characters
    chunks = check_chunks(user, "ok")
    assert len(chunks) > 10


def test_unicode_counts_characters_not_bytes():
    user = "我的狗叫什么名字？🐶"
    assistant = ("Ça dépend — 你好世界 🐕‍🦺 " * 120)
    chunks = check_chunks(user, assistant)
    assert len(chunks) > 1
    assert max(len(c) for c in chunks) == MAX_CHARS  # full chunks are 1,000 characters, not bytes
    assert any(len(c.encode()) > MAX_CHARS for c in chunks)


@settings(max_examples=150, deadline=None)
@given(user=st.text(max_size=1500), assistant=st.text(max_size=6000))
def test_chunking_properties(user, assistant):
    check_chunks(user, assistant)


def test_rounds_and_units_carry_owner_visibility_time_session():
    date = datetime(2023, 5, 1, 10, 0)
    s = Session("sabc", date, (Turn("assistant", "Welcome back."), Turn("user", "hi"), Turn("assistant", "hello"),
                               Turn("assistant", "anything else?"), Turn("user", "x" * 1500), Turn("assistant", "ok")))
    rounds = rounds_of(s)
    assert [(r.number, r.user) for r in rounds] == [(1, ""), (2, "hi"), (3, "x" * 1500)]
    assert rounds[1].assistant == "hello\nanything else?"
    assert [r.time for r in rounds] == [epoch(date) + i * ROUND_SECONDS for i in range(3)]
    units = list(units_of(s, "org1", "a3", "public"))
    assert {(u.org, u.owner, u.visibility, u.session) for u in units} == {("org1", "a3", "public", "sabc")}
    assert len({u.uid for u in units}) == len(units)
    assert [u.chunk for u in units if u.round == 3] == list(range(len([u for u in units if u.round == 3])))
    assert len([u for u in units if u.round == 3]) == 2
    assert epoch(date) == 1682935200.0  # benchmark dates are read as UTC
