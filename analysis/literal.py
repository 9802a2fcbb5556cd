"""A judge-free cross-check: does the answer contain the gold answer literally?

The generated benchmark's golds are short literals (a name, a place, "22 days", "3"), so on it a
small local judge can be checked without another model. The check applies only where that holds:
golds of at most four words, never preference or abstention questions (their golds describe an
answer rather than state it). Number words count as their digits ("three" = "3").
"""

from __future__ import annotations

import re

MAX_WORDS = 4
NUMBER_WORDS = {w: str(i) for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())}


def _words(text: str) -> list[str]:
    words = re.findall(r"[a-z0-9]+", str(text).lower().replace("'", ""))
    return [NUMBER_WORDS.get(w, w) for w in words if w not in ("the", "a", "an")]


def applies(gold: str, qtype: str, abstention: bool) -> bool:
    return (not abstention and qtype != "single-session-preference"
            and 0 < len(str(gold).split()) <= MAX_WORDS and bool(_words(gold)))


def contains_gold(gold: str, answer: str) -> bool:
    """The gold's words appear in the answer consecutively (case, articles and punctuation aside)."""
    g, a = _words(gold), _words(answer)
    return any(a[i:i + len(g)] == g for i in range(len(a) - len(g) + 1))


def literal(gold: str, answer: str | None, qtype: str, abstention: bool) -> bool | None:
    """None where the check does not apply; a failed run (no answer) does not contain the gold."""
    if not applies(gold, qtype, abstention):
        return None
    return contains_gold(gold, answer or "")
