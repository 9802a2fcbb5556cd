"""The judge-free literal check on generated golds (analysis.literal)."""

import pytest

from analysis.literal import literal


@pytest.mark.parametrize("gold, answer, expected", [
    ("civil engineering", "I graduated with a degree in civil engineering from Riverton State.", True),
    ("Jonah Ellery", "I recommended 'Tidewater Hours' by Jonah Ellery.", True),
    ("the riverside night market", "Try the Riverside Night-Market!", True),
    ("3", "You have visited three countries.", True),
    ("3", "You own 13 instruments.", False),            # digits match whole words only
    ("22 days", "There were 22 days between them.", True),
    ("22 days", "22 hours, or about a day", False),
    ("Atlas Foods", "I work at Northpine Logistics.", False),
    ("Ellery Jonah", "Jonah Ellery", False),            # the gold's words in order
])
def test_the_answer_contains_the_gold(gold, answer, expected):
    assert literal(gold, answer, "single-session-user", False) is expected


def test_it_does_not_apply_to_descriptions_abstentions_or_long_golds():
    assert literal("The user would prefer tea", "tea", "single-session-preference", False) is None
    assert literal("Tofu", "I don't know", "single-session-user", True) is None
    assert literal("a gold answer of six words", "a gold answer of six words", "multi-session", False) is None
    assert literal("Tofu", None, "single-session-user", False) is False  # a failed run has no answer
