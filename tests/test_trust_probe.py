"""The probe's planted answers against a hand-labelled set (issue 44): LongMemEval-shaped golds written for
this purpose, each planted answer read and labelled by hand. A planted answer labelled right must be right
whatever the gold's commas, "and"s and sentences mean; one whose truth depends on reading them is not planted."""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst

from judge import probe as PR

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
