"""The judge probe (judge/probe.py): planted right and wrong answers measure a judge's error. Its planted answers
against a hand-labelled set: LongMemEval-shaped golds written for this purpose, each planted answer read and
labelled by hand; a planted answer labelled right must be right whatever the gold's commas, "and"s and sentences
mean, and one whose truth depends on reading them is not planted. Then its transformations, the false-positive
rate it measures of a scripted judge, and its rates clustered by question."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst

from judge import probe as PR
from tests.analysis_fixtures import JUDGE, Stage, run_id, sha256_file
from tests.test_analysis import csv, prereg_file, row
from tests.trust_fixtures import LME, TYPES, analyse, lme_questions

RIGHT, WRONG = True, False

GOLDS = [  # (qid, type, question, gold): commas and "and"s that are not list separators, "respectively",
    # a second sentence with "also", numbers (plain, money, time, percentage, with alternatives), dates
    ("h01", "single-session-user", "Where did I move to last year?", "Portland, Oregon"),
    ("h02", "multi-session", "Which Jane Austen novels did I read this summer?", "Pride and Prejudice, Emma and Persuasion"),
    ("h03", "single-session-user", "What name is on the reservation?", "Smith, John"),
    ("h04", "multi-session", "How many books and how many magazines did I buy, respectively?", "3 and 5"),
    ("h05", "multi-session", "What did I give my dad and my mom for their birthdays, respectively?", "A watch and a scarf"),
    ("h06", "multi-session", "What gifts did I buy for my parents?", "A watch for my dad. I also gave my mom a scarf."),
    ("h07", "single-session-user", "How many days did my trip to Japan last?", "12 days"),
    ("h08", "temporal-reasoning", "How many weeks had passed since I recovered from the flu when I went on my 10th "
     "outdoor jog?", "11 weeks (81 days, from 2023-01-19 to 2023-04-10; 12 weeks if rounded up)"),
    ("h09", "temporal-reasoning", "When did I start my new job?", "March 2023"),
    ("h10", "multi-session", "How much did I spend on the bike and the helmet in total?", "$2,500"),
    ("h11", "knowledge-update", "How many bikes do I own now?", "3"),
    ("h12", "temporal-reasoning", "How many days did it take me to finish the book?",
     "21 days. 22 days (including the last day) is also acceptable."),
    ("h13", "single-session-user", "What time is my dentist appointment?", "3:30 pm"),
    ("h14", "temporal-reasoning", "When is my dentist appointment?", "May 3"),
    ("h15", "multi-session", "Which friends came to my birthday dinner?", "Alice, Bob and Carol"),
    ("h16", "multi-session", "What is the order of the three trips I took, from earliest to latest?", "Japan, Italy and Peru"),
    ("h17", "single-session-user", "How long is my commute?", "45 minutes by bus, 30 by bike"),
    ("h18", "single-session-assistant", "What percentage discount did the store give me?", "15%"),
    ("h19", "multi-session", "How many plants did I buy, and which was the first one?", "4 plants; the first was a fern"),
    ("h20", "single-session-user", "What is my cat's name?", "Tom and Jerry's cousin, Max"),
    # numbers that are names or codes, not counts: never written in words (a leading zero, a capitalised or
    # possessive word before it, a word that makes it a label, three digits with no counted noun after)
    ("h21", "single-session-user", "What was the code name of the agent in the book I read?", "Agent 007"),
    ("h22", "single-session-user", "What is my locker combination?", "0412"),
    ("h23", "single-session-user", "Which flight did I take to Boston?", "Flight 093"),
    ("h24", "single-session-user", "Which plane model did I fly on?", "Boeing 747"),
    ("h25", "single-session-user", "Which car did my brother buy?", "Porsche 911"),
    ("h26", "single-session-user", "Which jeans did I buy?", "Levi's 501"),
    ("h27", "single-session-user", "Which band did I see last week?", "Blink 182"),
    ("h28", "single-session-user", "What is the area code of my new office?", "area code 415"),
]

# every planted answer but another question's gold (drawn at random), read and labelled by hand
HAND = {
    'h01': {
        ("It was not Portland, Oregon; I can't recall what it was.", WRONG),
        ('From what you told me earlier, the answer is: Portland, Oregon.', RIGHT),
        ('Let me check our past conversations. Portland, Oregon. I hope that helps!', RIGHT),
    },
    'h02': {
        ("It was not Pride and Prejudice, Emma and Persuasion; I can't recall what it was.", WRONG),
        ('From what you told me earlier, the answer is: Pride and Prejudice, Emma and Persuasion.', RIGHT),
        ('Let me check our past conversations. Pride and Prejudice, Emma and Persuasion. I hope that helps!', RIGHT),
    },
    'h03': {
        ("It was not Smith, John; I can't recall what it was.", WRONG),
        ('From what you told me earlier, the answer is: Smith, John.', RIGHT),
        ('Let me check our past conversations. Smith, John. I hope that helps!', RIGHT),
    },
    'h04': {
        ("It was not 3 and 5; I can't recall what it was.", WRONG),
        ('From what you told me earlier, the answer is: 3 and 5.', RIGHT),
        ('Let me check our past conversations. 3 and 5. I hope that helps!', RIGHT),
        ('From what you told me earlier: three and five.', RIGHT),
    },
    'h05': {
        ("It was not A watch and a scarf; I can't recall what it was.", WRONG),
        ('From what you told me earlier, the answer is: A watch and a scarf.', RIGHT),
        ('Let me check our past conversations. A watch and a scarf. I hope that helps!', RIGHT),
    },
    'h06': {
        ("It was not A watch for my dad; I can't recall what it was.", WRONG),
        ('From what you told me earlier, the answer is: A watch for my dad. I also gave my mom a scarf.', RIGHT),
        ('Let me check our past conversations. A watch for my dad. I also gave my mom a scarf. I hope that helps!', RIGHT),
    },
    'h07': {
        ('15 days', WRONG),
        ("It was not 12 days; I can't recall what it was.", WRONG),
        ('From what you told me earlier, the answer is: 12 days.', RIGHT),
        ('Let me check our past conversations. 12 days. I hope that helps!', RIGHT),
        ('From what you told me earlier: twelve days.', RIGHT),
    },
    'h08': {
        ('14 weeks', WRONG),
        ("It was not 11 weeks; I can't recall what it was.", WRONG),
        ('From what you told me earlier, the answer is: 11 weeks (81 days, from 2023-01-19 to 2023-04-10; 12 weeks if rounded up).', RIGHT),
        ('Let me check our past conversations. 11 weeks (81 days, from 2023-01-19 to 2023-04-10; 12 weeks if rounded up). I hope that helps!', RIGHT),
    },
    'h09': {
        ('June 2023', WRONG),
        ("It was not March 2023; I can't recall what it was.", WRONG),
        ('From what you told me earlier, the answer is: March 2023.', RIGHT),
        ('Let me check our past conversations. March 2023. I hope that helps!', RIGHT),
    },
    'h10': {
        ('$2,503', WRONG),
        ("It was not $2,500; I can't recall what it was.", WRONG),
        ('From what you told me earlier, the answer is: $2,500.', RIGHT),
        ('Let me check our past conversations. $2,500. I hope that helps!', RIGHT),
    },
    'h11': {
        ('6', WRONG),
        ("It was not 3; I can't recall what it was.", WRONG),
        ('From what you told me earlier, the answer is: 3.', RIGHT),
        ('Let me check our past conversations. 3. I hope that helps!', RIGHT),
        ('From what you told me earlier: three.', RIGHT),
    },
    'h12': {
        ('24 days', WRONG),
        ("It was not 21 days; I can't recall what it was.", WRONG),
        ('From what you told me earlier, the answer is: 21 days. 22 days (including the last day) is also acceptable.', RIGHT),
        ('Let me check our past conversations. 21 days. 22 days (including the last day) is also acceptable. I hope that helps!', RIGHT),
        ('From what you told me earlier: twenty-one days. twenty-two days (including the last day) is also acceptable.', RIGHT),
    },
    'h13': {
        ("It was not 3:30 pm; I can't recall what it was.", WRONG),
        ('From what you told me earlier, the answer is: 3:30 pm.', RIGHT),
        ('Let me check our past conversations. 3:30 pm. I hope that helps!', RIGHT),
    },
    'h14': {
        ('August 3', WRONG),
        ("It was not May 3; I can't recall what it was.", WRONG),
        ('From what you told me earlier, the answer is: May 3.', RIGHT),
        ('Let me check our past conversations. May 3. I hope that helps!', RIGHT),
    },
    'h15': {
        ("It was not Alice, Bob and Carol; I can't recall what it was.", WRONG),
        ('From what you told me earlier, the answer is: Alice, Bob and Carol.', RIGHT),
        ('Let me check our past conversations. Alice, Bob and Carol. I hope that helps!', RIGHT),
    },
    'h16': {
        ("It was not Japan, Italy and Peru; I can't recall what it was.", WRONG),
        ('From what you told me earlier, the answer is: Japan, Italy and Peru.', RIGHT),
        ('Let me check our past conversations. Japan, Italy and Peru. I hope that helps!', RIGHT),
    },
    'h17': {
        ("It was not 45 minutes by bus, 30 by bike; I can't recall what it was.", WRONG),
        ('From what you told me earlier, the answer is: 45 minutes by bus, 30 by bike.', RIGHT),
        ('Let me check our past conversations. 45 minutes by bus, 30 by bike. I hope that helps!', RIGHT),
        ('From what you told me earlier: forty-five minutes by bus, thirty by bike.', RIGHT),
    },
    'h18': {
        ('18%', WRONG),
        ("It was not 15%; I can't recall what it was.", WRONG),
        ('From what you told me earlier, the answer is: 15%.', RIGHT),
        ('Let me check our past conversations. 15%. I hope that helps!', RIGHT),
    },
    'h19': {
        ('7 plants; the first was a fern', WRONG),
        ("It was not 4 plants; the first was a fern; I can't recall what it was.", WRONG),
        ('From what you told me earlier, the answer is: 4 plants; the first was a fern.', RIGHT),
        ('Let me check our past conversations. 4 plants; the first was a fern. I hope that helps!', RIGHT),
        ('From what you told me earlier: four plants; the first was a fern.', RIGHT),
    },
    'h20': {
        ("It was not Tom and Jerry's cousin, Max; I can't recall what it was.", WRONG),
        ("From what you told me earlier, the answer is: Tom and Jerry's cousin, Max.", RIGHT),
        ("Let me check our past conversations. Tom and Jerry's cousin, Max. I hope that helps!", RIGHT),
    },
    'h21': {
        ("It was not Agent 007; I can't recall what it was.", WRONG),
        ("From what you told me earlier, the answer is: Agent 007.", RIGHT),
        ("Let me check our past conversations. Agent 007. I hope that helps!", RIGHT),
    },
    'h22': {
        ("It was not 0412; I can't recall what it was.", WRONG),
        ("From what you told me earlier, the answer is: 0412.", RIGHT),
        ("Let me check our past conversations. 0412. I hope that helps!", RIGHT),
    },
    'h23': {
        ("It was not Flight 093; I can't recall what it was.", WRONG),
        ("From what you told me earlier, the answer is: Flight 093.", RIGHT),
        ("Let me check our past conversations. Flight 093. I hope that helps!", RIGHT),
    },
    'h24': {
        ("It was not Boeing 747; I can't recall what it was.", WRONG),
        ("From what you told me earlier, the answer is: Boeing 747.", RIGHT),
        ("Let me check our past conversations. Boeing 747. I hope that helps!", RIGHT),
    },
    'h25': {
        ("It was not Porsche 911; I can't recall what it was.", WRONG),
        ("From what you told me earlier, the answer is: Porsche 911.", RIGHT),
        ("Let me check our past conversations. Porsche 911. I hope that helps!", RIGHT),
    },
    'h26': {
        ("It was not Levi's 501; I can't recall what it was.", WRONG),
        ("From what you told me earlier, the answer is: Levi's 501.", RIGHT),
        ("Let me check our past conversations. Levi's 501. I hope that helps!", RIGHT),
    },
    'h27': {
        ("It was not Blink 182; I can't recall what it was.", WRONG),
        ("From what you told me earlier, the answer is: Blink 182.", RIGHT),
        ("Let me check our past conversations. Blink 182. I hope that helps!", RIGHT),
    },
    'h28': {
        ("It was not area code 415; I can't recall what it was.", WRONG),
        ("From what you told me earlier, the answer is: area code 415.", RIGHT),
        ("Let me check our past conversations. area code 415. I hope that helps!", RIGHT),
    },
}

# what the old planter labelled right, each read and labelled wrong (or uncertain) by hand: the second rule must
# refuse every one of them as a right answer
NOT_RIGHT = [
    ("h01", "reordered", "Oregon and Portland"),
    ("h02", "reordered", "Persuasion, Emma, Prejudice and Pride"),
    ("h03", "reordered", "John and Smith"),
    ("h04", "reordered", "5 and 3"),
    ("h05", "reordered", "A scarf and a watch"),
    ("h20", "reordered", "Max, Jerry's cousin and Tom"),
    ("h06", "paraphrase", "From what you told me earlier, the answer is A watch for my dad."),
    ("h06", "extra_words", "Let me check our past conversations. A watch for my dad. I hope that helps!"),
    ("h12", "number_words", "It was twenty-one days."),  # the alternative dropped: not the whole gold
    # identifiers turned into words (the planter of issue 44's first round planted these as right)
    ("h21", "number_words", "From what you told me earlier: Agent seven."),
    ("h22", "number_words", "From what you told me earlier: four hundred and twelve."),
    ("h23", "number_words", "From what you told me earlier: Flight ninety-three."),
    ("h24", "number_words", "From what you told me earlier: Boeing seven hundred and forty-seven."),
    ("h25", "number_words", "From what you told me earlier: Porsche nine hundred and eleven."),
    ("h26", "number_words", "From what you told me earlier: Levi's five hundred and one."),
    ("h27", "number_words", "From what you told me earlier: Blink one hundred and eighty-two."),
    ("h28", "number_words", "From what you told me earlier: area code four hundred and fifteen."),
]


def questions() -> list[dict]:
    return [{"qid": q, "qtype": t, "question": x, "gold": g, "abstention": False} for q, t, x, g in GOLDS]


def test_every_planted_answer_is_labelled_as_the_hand_labels_say():
    """The planter's answers are exactly the hand-labelled ones (a new transformation needs new hand labels),
    each with the hand's truth; another question's gold is always a wrong answer to this one."""
    kept = PR.plant(questions(), seed=0)
    got: dict[str, set] = {}
    for p in kept:
        if p["kind"] == "other_gold":
            gold = dict((q, g) for q, _, _, g in GOLDS)[p["qid"]]
            assert p["truth"] is False and p["answer"] != gold and p["answer"] in {PR.main_part(g) for *_, g in GOLDS}
            continue
        got.setdefault(p["qid"], set()).add((p["answer"], p["truth"]))
    assert got == {q: set(v) for q, v in HAND.items()}


def test_nothing_whose_truth_depends_on_reading_the_gold_is_planted_as_right():
    kept = PR.plant(questions(), seed=0)
    assert not any(p["kind"] == "reordered" for p in kept)
    gold = dict((q, g) for q, _, _, g in GOLDS)
    for p in kept:
        if p["truth"] and p["kind"] in ("paraphrase", "extra_words"):
            assert gold[p["qid"]].rstrip(".") in p["answer"]  # the whole gold, nothing dropped or moved
    for qid, kind, answer in NOT_RIGHT:
        q = next(x for x in questions() if x["qid"] == qid)
        assert PR.check({**q, "kind": kind, "truth": True, "answer": answer}), (qid, kind, answer)


WORD = hst.sampled_from(["Portland", "Oregon", "Pride", "Prejudice", "Emma", "a", "watch", "for", "my", "dad",
                         "also", "gave", "mom", "scarf", "Smith", "John", "the", "first", "fern", "days", "weeks"])
PIECE = hst.one_of(WORD, hst.integers(0, 999).map(str), hst.sampled_from([",", " and", ".", ";", " I also"]))


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(pieces=hst.lists(PIECE, min_size=1, max_size=12),
       question=hst.sampled_from(["How many did I buy?", "What did I buy, respectively?", "Where do I live?",
                                  "When did I start?", "Which ones came first?"]))
def test_a_planted_right_answer_keeps_every_word_of_any_gold(pieces, question):
    """Golds nobody listed, built of words, numbers, commas, "and"s and "also" sentences: every answer planted as
    right states every word of the gold in order (numbers in words where it says so), and passes the second rule."""
    gold = re.sub(r"\s+([,.;])", r"\1", " ".join(pieces)).strip(" ,;")
    if not re.search(r"\w", gold):
        return
    q = {"qid": "g", "qtype": "multi-session", "question": question, "gold": gold, "abstention": False}
    other = {"qid": "o", "qtype": "multi-session", "question": "What is it?", "gold": "zzz unrelated", "abstention": False}
    words = PR._norm(gold).split()
    for p in PR.plant([q, other], seed=1):
        if p["qid"] != "g" or not p["truth"]:
            continue
        assert p["kind"] in ("paraphrase", "extra_words", "number_words"), p
        said = PR._norm(p["answer"]).split()
        if p["kind"] == "number_words":
            words_wo = [w for w in words if not w.isdigit()]
            said = PR._without_number_words(p["answer"])
            assert {float(x) for x in PR.from_words(p["answer"])} >= PR.numbers(gold)
            assert not re.search(r"\d", p["answer"])
        else:
            words_wo = words
        assert not words_wo or f" {' '.join(words_wo)} " in f" {' '.join(said)} ", (gold, p["answer"])
        assert PR.check(p) == ""


# pairs of golds that say the same (numbers in words, currency, "times"/"twice", name order, punctuation)
EQUIVALENT = [("3", "three"), ("2 times", "twice"), ("$50", "fifty dollars"), ("10", "ten times"),
              ("John Smith", "Smith, John"), ("105", "one hundred and five"), ("$2,500", "2500 dollars"),
              ("once", "1 time"), ("3", "3 bikes"), ("Smith", "John Smith")]


def test_another_questions_gold_that_says_the_same_is_never_planted_as_wrong():
    """Two questions whose golds are equivalent: neither is planted as the other's wrong answer (the planter draws
    from the others that are not), and the second rule refuses it as a wrong answer."""
    for a, b in EQUIVALENT:
        qs = [{"qid": "a", "qtype": "multi-session", "question": "How many?", "gold": a, "abstention": False},
              {"qid": "b", "qtype": "multi-session", "question": "How many?", "gold": b, "abstention": False}]
        assert not [p for p in PR.plant_all(qs, seed=0) if p["kind"] == "other_gold"], (a, b)
        for gold, ans in ((a, b), (b, a)):
            assert PR.check({"kind": "other_gold", "truth": False, "answer": ans, "gold": gold,
                             "question": "How many?"}), (gold, ans)


def _forms(n: int) -> list[str]:
    w = PR.in_words(n)
    return [str(n), w, f"${n}", f"{w} dollars", f"{n} dollars", f"{n} times", f"{w} times"]


@settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(n=hst.integers(0, 999), i=hst.integers(0, 6), j=hst.integers(0, 6),
       first=hst.sampled_from(["John", "Mary", "Ana"]), last=hst.sampled_from(["Smith", "Lee", "O'Brien"]),
       names=hst.booleans())
def test_no_form_of_the_same_answer_is_planted_as_wrong(n, i, j, first, last, names):
    """Generated pairs of one answer in two forms (digits, words, currency, "times"; "First Last" and "Last,
    First"): another question's gold in the other form is never planted as wrong."""
    a, b = (f"{first} {last}", f"{last}, {first}") if names else (_forms(n)[i], _forms(n)[j])
    qs = [{"qid": "a", "qtype": "multi-session", "question": "Who or how many?", "gold": a, "abstention": False},
          {"qid": "b", "qtype": "multi-session", "question": "Who or how many?", "gold": b, "abstention": False}]
    if a != b:
        assert not [p for p in PR.plant(qs, seed=0) if p["kind"] == "other_gold"], (a, b)


@settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(word=hst.sampled_from(["Agent", "Flight", "Boeing", "Porsche", "Levi's", "Blink", "room", "code", "No.",
                               "gate", "Apt."]),
       n=hst.integers(0, 999), zero=hst.booleans(), tail=hst.sampled_from(["", " today", ", I think"]))
def test_a_number_that_names_or_codes_something_is_never_planted_in_words(word, n, zero, tail):
    """Golds nobody listed where a number is a name or a code (after a capitalised, possessive or label word, or
    with a leading zero): no `number_words` answer is planted, and the second rule refuses one written by hand
    where its own reading sees a code (a leading zero, a capitalised word before the number)."""
    num = f"0{n}" if zero else str(n)
    for gold in (f"{word} {num}{tail}", f"{num}" if zero else f"the {word} {num}{tail}"):
        if not (zero or word[0].isupper() or word in ("room", "code", "gate")):
            continue
        q = {"qid": "g", "qtype": "single-session-user", "question": "Which one?", "gold": gold, "abstention": False}
        assert not [p for p in PR.plant_all([q], seed=0) if p["kind"] == "number_words"], gold
        written = gold.replace(num, PR.in_words(n) or "")
        if zero or word[0].isupper():
            assert PR.check({**q, "kind": "number_words", "truth": True, "answer": written}), (gold, written)


def _q(qid: str, question: str, gold: str) -> dict:
    return {"qid": qid, "qtype": "multi-session", "question": question, "gold": gold, "abstention": False}


def _planted(*qs: dict) -> dict[tuple[str, str], str]:
    return {(p["qid"], p["kind"]): p["answer"] for p in PR.plant(list(qs), seed=0)}


def test_no_reordering_for_order_questions_without_the_word_order():
    """'From most to least favourite', 'chronologically', 'ranked': the reversed list is a wrong answer. Since
    issue 44 no list is reordered at all (whether a comma or "and" separates items is a reading of the gold),
    and the second rule refuses a reordered answer as a right one."""
    qs = [_q("o1", "What are my three favorite movies, from most to least favorite?", "Inception, Interstellar and Memento"),
          _q("o2", "List the cities I visited chronologically.", "Paris, Rome and Berlin"),
          _q("o3", "Can you give me the gyms I tried, ranked by how much I liked them?", "Equinox, Crunch and Planet Fitness"),
          _q("u1", "Which friends came to my birthday dinner?", "Alice, Bob and Carol")]
    by = _planted(*qs)
    assert not [k for k in by if k[1] == "reordered"], by
    for q in qs:
        parts = [x.strip() for x in q["gold"].replace(" and ", ", ").split(", ")]
        reversed_ = {**q, "kind": "reordered", "truth": True, "answer": ", ".join(parts[::-1][:-1]) + " and " + parts[0]}
        assert PR.check(reversed_), reversed_


def test_a_name_or_title_joined_by_and_is_not_a_list_to_reorder():
    """'Pride and Prejudice', 'Bread and Butter', 'Tom and Jerry' are one name each: 'Prejudice and Pride' is not
    the gold, so it must not be planted as a right answer, and the second rule must refuse it."""
    qs = [_q("t1", "Which book did I recommend to my sister?", "Pride and Prejudice"),
          _q("t2", "Which restaurant did we go to for our anniversary?", "Bread and Butter"),
          _q("t3", "Which cartoon did my son watch all weekend?", "Tom and Jerry")]
    by = _planted(*qs)
    assert not [k for k in by if k[1] == "reordered"], by
    for q in qs:
        a, b = q["gold"].split(" and ")
        assert PR.check({**q, "kind": "reordered", "truth": True, "answer": f"{b} and {a}"})


def test_a_changed_number_keeps_no_accepted_alternative_written_in_words():
    """'11 weeks, or twelve if rounded up': changing 11 to 14 leaves 'twelve if rounded up', an accepted answer,
    in a planted wrong answer. The second rule must see numbers in words too."""
    q = _q("n1", "How many weeks did the course take?", "11 weeks, or twelve if rounded up")
    by = _planted(q)
    assert ("n1", "changed_number") not in by, by
    assert PR.check({**q, "kind": "changed_number", "truth": False, "answer": "14 weeks, or twelve if rounded up"})
    assert PR.check({**q, "kind": "changed_number", "truth": False, "answer": "eleven weeks"})  # the gold in words
    # a number changed where nothing of the gold survives is kept
    assert _planted(_q("n2", "How many days did it take?", "21 days. 22 days (including the last day) is also "
                                                          "acceptable."))[("n2", "changed_number")] == "24 days"


def test_a_date_is_changed_only_when_the_question_asks_when_not_for_a_when_clause():
    """'What was I doing when I met Emma?' asks what, not when: 'a conference in August' still names the
    conference, so it is no planted wrong answer; the second rule reads the question too."""
    q = _q("d1", "What was I doing when I met Emma?", "I was at a conference in May")
    by = _planted(q)
    assert ("d1", "changed_date") not in by, by
    assert PR.check({**q, "kind": "changed_date", "truth": False, "answer": "I was at a conference in August"})
    for text in ("When did I start my new job?", "What date is my dentist appointment?",
                 "On which day did I adopt my dog?"):
        assert _planted(_q("d2", text, "March 2023"))[("d2", "changed_date")] == "June 2023", text


def test_the_probe_measures_a_scripted_judges_known_false_positive_rate(tmp_path):
    """A judge that accepts any number in place of the gold's and any answer containing the gold: its false
    positives are exactly the planted changed number and the denials, its false negative the gold's number in
    words (no list is reordered: issue 44); graded through the stage's ledger and cache."""
    import re

    from hydra import compose, initialize_config_dir
    from statsmodels.stats.proportion import proportion_confint

    from harness.records import RunDir
    from harness.records.ledger import read_ledger
    from judge.probe import run_probe
    from tests.fake_model import FakeModel

    pre = prereg_file(tmp_path)
    st = Stage(tmp_path / "runs", "main", prereg_sha=sha256_file(pre))
    for qid, gold, ok, question in (("q0", "12 apples", True, "How many apples did I buy?"),
                                    ("q1", "May 3", True, "When is my dentist appointment?"),
                                    ("q2", "Alice, Bob and Carol", False, "Who came to the party?"),
                                    ("q3_abs", "The user never said.", True, "What is my hamster's name?")):
        st.add("tool_hybrid", qid, gold=gold, correct=ok, abstention=qid.endswith("_abs"))["question"] = question
    st.write()

    def lenient(req):
        p = req["messages"][0]["content"]
        response = re.search(r"Model response: (.*?)\n\n", p, re.S).group(1)
        if "Explanation: " in p:
            return {"role": "assistant", "content": "yes" if "don't have" in response else "no"}
        gold = re.search(r"Correct answer: (.*?)\n\nModel response", p, re.S).group(1)
        digits = lambda x: re.sub(r"\d+", "#", x.lower())  # noqa: E731
        return {"role": "assistant", "content": "yes" if digits(gold) in digits(response) else "no"}

    conf = str(Path(__file__).resolve().parents[1] / "conf")
    with FakeModel(script=lenient) as fake:
        with initialize_config_dir(config_dir=conf, version_base="1.3"):
            cfg = compose(config_name="config", overrides=[
                "stage=main", "judge=vllm", "judge.name=testjudge", f"judge.base_url={fake.base_url}",
                "judge.backoff_s=0.01", f"runs_dir={tmp_path}/runs", f"cache_dir={tmp_path}/cache"])
        rd = RunDir.for_stage(cfg)
        s = run_probe(cfg, rd)
        assert s["failed"] == 0 and s["judgements"] == 17  # 9 planted wrong + 8 planted right
        sent = len(fake.run_requests)
        run_probe(cfg, rd)
        assert len(fake.run_requests) == sent  # cached: a second probe sends nothing
    tags = {e["tag"] for e in read_ledger(rd.ledger_path) if e.get("role") == "judge"}
    assert "judge-probe:probe.changed_number.q0.r0" in tags
    out = analyse(tmp_path, pre)
    t = csv(out, "judge_error.csv")
    ssu = row(t, qtype="single-session-user", judge="testjudge")
    assert (ssu["planted_wrong"], ssu["false_positives"], ssu["planted_right"], ssu["false_negatives"]) == (8, 4, 7, 1)
    # errors clustered by question (q0: 2 of 3 wrong answers accepted, q1: 1 of 3, q2: 1 of 2): Wilson on n / deff,
    # the design effect computed here as the between-question variance of the error share over the binomial one
    k, n = np.array([2, 1, 1]), np.array([3, 3, 2])
    r = k.sum() / n.sum()
    deff = max(1.0, (len(n) / (len(n) - 1) * np.sum((k - r * n) ** 2) / n.sum() ** 2) / (r * (1 - r) / n.sum()))
    lo, hi = proportion_confint(r * 8 / deff, 8 / deff, alpha=0.05, method="wilson")
    assert ssu["fp_rate"] == pytest.approx(4 / 8) and (ssu["fp_lo"], ssu["fp_hi"]) == pytest.approx((lo, hi))
    assert ssu["main_judge"] in (True, "True") and ssu["accuracy"] == pytest.approx(2 / 3)
    corr = csv(out, "judge_corrected.csv")
    hy = row(corr, kind="condition", what="tool_hybrid")
    fp, fn = 4 / 9, 1 / 8  # every planted answer, abstention included
    assert hy["reported"] == pytest.approx(3 / 4) and hy["corrected"] == pytest.approx((3 / 4 - fp) / (1 - fp - fn))
    assert hy["corrected_lo"] < hy["corrected"] < hy["corrected_hi"]
    control = row(t, qtype="all", judge="substring (control)")  # the substring matcher fails the probe
    assert control["false_positives"] == 3 and control["false_negatives"] == 1
    ab = row(t, qtype="abstention", judge="testjudge")
    assert (ab["planted_wrong"], ab["false_positives"], ab["planted_right"], ab["false_negatives"]) == (1, 0, 1, 0)
    # the probe's judgements are not a judge of the stage's answers: no second judge appears
    assert csv(out, "judge_robustness.csv").empty
    t6 = csv(out, "table6.csv")
    assert "judge-probe" in set(t6["party"])  # its calls are in the stage's costs
    assert "## Judge error (the probe)" in (out / "report.md").read_text()


def test_each_transformation_is_applied_only_where_it_keeps_or_changes_the_answer():
    from judge import probe as PR

    kept, dropped = PR.plant_checked(lme_questions(), seed=0)
    by = {(p["qid"], p["kind"]): p["answer"] for p in kept}
    assert not dropped
    # no list is reordered (issue 44: whether a comma or "and" separates items is a reading of the gold)
    assert not any(k == "reordered" for (q, k) in by)
    # a number changed only where it is the asked value, and no accepted alternative survives
    assert ("a7", "changed_number") not in by and ("a9", "changed_number") not in by
    for q in ("a1", "a2", "a3", "a8"):
        changed = by[(q, "changed_number")]
        assert not (PR.numbers(changed) & PR.numbers(dict((x[0], x[3]) for x in LME)[q]))
    assert by[("a1", "changed_number")] == "$2,503"  # "$2,500" is one number
    assert by[("a9", "changed_date")] == "June 2023"
    # every kept answer passes the second rule, and that rule refuses what the old probe planted
    assert all(PR.check(p) == "" for p in kept)
    a2 = next(p for p in kept if p["qid"] == "a2")
    bad = [
        {**a2, "kind": "changed_number", "answer": "15 weeks (81 days; 12 weeks if rounded up)"},  # alternative kept
        {**a2, "kind": "reordered", "qid": "a1", "gold": "$2,500", "answer": "500 and $2",
         "question": LME[0][2]},  # money split
        {**a2, "kind": "reordered", "gold": "Japan, Italy and Peru", "answer": "Peru, Italy and Japan",
         "question": LME[9][2]},  # an order reversed
        {**a2, "kind": "number_words", "answer": "It was twelve weeks."},  # not the gold's number
        {**a2, "kind": "changed_number", "question": "Which pair of shoes did I clean last month?",
         "gold": "2 pairs of white Adidas sneakers", "answer": "5 pairs of white Adidas sneakers"},  # not asked
    ]
    assert all(PR.check(p) for p in bad), [PR.check(p) for p in bad]


def test_a_substring_matcher_fails_the_probe_on_longmemeval_answers():
    """Right answers that share no surface form with the gold (its numbers in words) and wrong ones that do (the
    gold named and denied): the substring control judge errs both ways."""
    from judge import probe as PR

    kept = PR.plant(lme_questions(), seed=0)
    said = [(p["truth"], PR.substring_judge(p["gold"], p["answer"], p["abstention"])) for p in kept]
    fp = sum(1 for truth, yes in said if not truth and yes)
    fn = sum(1 for truth, yes in said if truth and not yes)
    wrong, right = sum(1 for t, _ in said if not t), sum(1 for t, _ in said if t)
    assert fp >= len([q for q in LME]) and fn >= 3  # every denial accepted; the numbers in words refused
    assert fp / wrong > 0.2 and fn / right > 0.1


def test_probe_rates_are_clustered_by_question_and_the_correction_is_per_condition_and_per_difference(tmp_path):
    """A perfect judge's probe on the LongMemEval-style stage (judgements written as `make probe` would): its
    rates are 0, the control's are not; the corrected accuracy of each condition and the corrected paired
    difference carry the accuracy's own sampling error (the old range had none from the accuracy)."""
    from judge.probe import judgements_name, probe_records

    pre = prereg_file(tmp_path)
    st = Stage(tmp_path / "runs", "main", prereg_sha=sha256_file(pre))
    for i, (q, t, text, g) in enumerate(LME * 3):
        qid = f"{q}x{i // len(LME)}"
        for cond, ok in (("session_search", i % 3 != 0), ("tool_hybrid", i % 4 != 0)):
            st.add(cond, qid, qtype=t, gold=g, correct=ok)["question"] = text
    st.write()
    planted = probe_records(st.records, 0)
    template = st.judgements[0]
    lines = [{**template, "run_id": p["run_id"], "qid": p["qid"], "qtype": p["qtype"], "condition": "probe",
              "label": bool(p["condition_notes"]["probe_truth"]), "reply": "yes"} for p in planted]
    (st.path / "judgements" / f"{judgements_name(JUDGE)}.jsonl").write_text(
        "".join(json.dumps(x, sort_keys=True) + "\n" for x in lines))
    out = analyse(tmp_path, pre)
    t = csv(out, "judge_error.csv")
    perfect = row(t, qtype="all", judge=JUDGE)
    assert perfect["false_positives"] == 0 and perfect["false_negatives"] == 0 and perfect["fp_hi"] > 0
    ctl = row(t, qtype="all", judge="substring (control)")
    assert ctl["fp_rate"] > 0.2 and ctl["fn_rate"] > 0.05
    # clustered: the control's errors sit in few questions' answers -> wider than plain Wilson on the answers
    from statsmodels.stats.proportion import proportion_confint

    lo, hi = proportion_confint(ctl["false_positives"], ctl["planted_wrong"], alpha=0.05, method="wilson")
    assert ctl["fp_hi"] - ctl["fp_lo"] >= hi - lo - 1e-12
    c = csv(out, "judge_corrected.csv")
    for cond in ("session_search", "tool_hybrid"):
        r = row(c, kind="condition", what=cond)
        p, n = r["reported"], r["n"]
        assert r["corrected"] == pytest.approx(p)  # no judge error measured: nothing to correct
        half = 1.96 * math.sqrt(p * (1 - p) / n)  # the accuracy's own error, closed form
        assert (r["corrected_hi"] - r["corrected_lo"]) / 2 == pytest.approx(half, rel=0.25)
    d = row(c, kind="difference", what="tool_hybrid − session_search (points)")
    assert d["n"] == 33 and d["corrected"] == pytest.approx(d["reported"]) and d["corrected_lo"] < d["corrected_hi"]
