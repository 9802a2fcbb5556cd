"""Samples (SPEC 1) and the LongMemEval-Org builder (Appendix C)."""

from collections import Counter
from datetime import datetime, timedelta

import pytest
from scipy.stats import chisquare

from harness.data import QUESTION_TYPES
from harness.data.longmemeval import Question, Session, Turn
from harness.data.org import AGENTS, PRIVATE_AGENTS, PUBLIC_AGENTS, assign
from harness.data.samples import SampleError, draw

SPECS = {
    "main": {"per_type": 30},
    "full": {"from": "main", "per_type": 10},
    "scale": {"from": "main", "per_type": 7},
    "pilot": {"per_type": 2, "exclude": ["main"]},
    "org_public": {"from": "main", "per_type": 20, "abstention": False},
    "org_private": {"from": "org_public", "per_type": 7},
}


def fake_index(per_type=80, n_abs=30):
    """A LongMemEval-sized index: ids and types only, like the real 500 questions."""
    idx = [(f"q{k}_{i:03d}", t) for k, t in enumerate(QUESTION_TYPES) for i in range(per_type)]
    idx += [(f"x{i:03d}_abs", QUESTION_TYPES[i % 6]) for i in range(n_abs)]
    return idx


def by_type(ids, qtypes):
    return Counter(qtypes[q] for q in ids)


def test_sample_sizes_and_derivations():
    idx = fake_index()
    qtypes = dict(idx)
    s = draw(idx, SPECS, seed=0)
    assert len(s["main"]["ids"]) == 180 and set(by_type(s["main"]["ids"], qtypes).values()) == {30}
    assert len(s["full"]["ids"]) == 60 and set(s["full"]["ids"]) <= set(s["main"]["ids"])
    # scale = the first 7 per type of the main sample's order
    main = s["main"]["ids"]
    expect = [q for q in main if sum(qtypes[p] == qtypes[q] for p in main[: main.index(q) + 1]) <= 7]
    assert s["scale"]["ids"] == expect and len(expect) == 42
    assert len(s["pilot"]["ids"]) == 12 and not set(s["pilot"]["ids"]) & set(main)
    pub = s["org_public"]["ids"]
    assert len(pub) == 120 and not any(q.endswith("_abs") for q in pub) and set(pub) <= set(main)
    assert len(s["org_private"]["ids"]) == 42 and set(s["org_private"]["ids"]) <= set(pub)
    assert all(not v["short"] for v in s.values())


def test_main_sample_draws_abstention_where_the_shuffle_does():
    idx = fake_index()
    picks = [sum(q.endswith("_abs") for q in draw(idx, SPECS, seed=k, names=["main"])["main"]["ids"])
             for k in range(20)]
    assert max(picks) > 0, "abstention questions are eligible for the main sample"


def test_samples_are_seeded_and_independent_of_file_order():
    idx = fake_index()
    a = draw(idx, SPECS, seed=7)
    b = draw(list(reversed(idx)), SPECS, seed=7)
    c = draw(idx, SPECS, seed=8)
    assert a == b
    assert a["main"]["ids"] != c["main"]["ids"]


def test_short_samples_are_reported_or_refused():
    idx = fake_index(per_type=5, n_abs=0)
    s = draw(idx, SPECS, seed=0, names=["main"])
    assert s["main"]["short"] == {t: 25 for t in QUESTION_TYPES}
    with pytest.raises(SampleError):
        draw(idx, SPECS, seed=0, names=["main"], strict=True)


def test_unknown_and_cyclic_samples_are_errors():
    with pytest.raises(SampleError, match="unknown"):
        draw(fake_index(), SPECS, 0, names=["nope"])
    with pytest.raises(SampleError, match="cycle"):
        draw(fake_index(), {"a": {"from": "b", "per_type": 1}, "b": {"from": "a", "per_type": 1}}, 0)


def make_question(qid, n_sessions, n_evidence, seed=0):
    base = datetime(2023, 1, 1)
    sessions = tuple(Session(f"s{qid}{j:03d}", base + timedelta(days=j), (Turn("user", f"hi {j}"),))
                     for j in range(n_sessions))
    import random

    ev = frozenset(random.Random(f"{qid}:{seed}").sample([s.sid for s in sessions], n_evidence))
    return Question(qid, "multi-session", "q?", "a", base + timedelta(days=n_sessions + 1), sessions, ev)


@pytest.mark.parametrize("variant", ["public", "private"])
def test_org_invariants_over_many_questions(variant):
    targets_seen = Counter()
    for i in range(300):
        q = make_question(f"q{i}", n_sessions=30 + i % 20, n_evidence=1 + i % 4)
        a = assign(q, variant)
        assert set(a.owner) == {s.sid for s in q.sessions}, "every session has exactly one owner"
        assert set(a.owner.values()) <= set(AGENTS)
        pool = PUBLIC_AGENTS if variant == "public" else PRIVATE_AGENTS
        assert a.targets[0] != a.targets[1] and set(a.targets) <= set(pool)
        ev_sorted = sorted(q.evidence)  # a hand-built Question has no benchmark ids: its own, sorted
        for k, sid in enumerate(ev_sorted):
            assert a.owner[sid] == a.targets[k % 2], "evidence alternates over the two targets in sorted order"
            assert a.owner[sid] != "a0"
        if len(ev_sorted) >= 2:
            assert a.owner[ev_sorted[0]] != a.owner[ev_sorted[1]]
        targets_seen[a.targets] += 1
        assert assign(q, variant) == a, "same seed, same assignment"
    # the target shuffle is not stuck
    assert len(targets_seen) == (6 if variant == "public" else 2)


def test_org_other_sessions_are_uniform_over_all_six_agents():
    counts = Counter()
    for i in range(200):
        q = make_question(f"u{i}", n_sessions=40, n_evidence=2)
        a = assign(q, "public")
        counts.update(a.owner[s.sid] for s in q.sessions if s.sid not in q.evidence)
    observed = [counts[x] for x in AGENTS]
    assert chisquare(observed).pvalue > 0.001, observed
    assert min(observed) > 0


def test_org_assignment_depends_on_question_and_variant():
    q = make_question("same", 40, 2)
    other = make_question("other", 40, 2)
    a, b = assign(q, "public"), assign(q, "private")
    assert a.owner != b.owner
    assert [a.owner[s.sid] for s in q.sessions] != [assign(other, "public").owner[s.sid] for s in other.sessions]


def test_org_refuses_abstention_and_unknown_variant():
    q = make_question("z_abs", 10, 1)
    with pytest.raises(ValueError):
        assign(q, "public")
    with pytest.raises(ValueError):
        assign(make_question("z", 10, 1), "secret")


def test_org_evidence_goes_to_the_targets_in_the_sorted_order_of_the_benchmark_ids_not_in_time_order():
    """Appendix C: the evidence sessions are assigned "in sorted order" (of answer_session_ids); here the
    sorted ids run against time, so time order would give every evidence session the other target."""
    from harness.data.longmemeval import opaque_session_id, parse_record

    ids = ["s0", "answer_b", "s2", "answer_a", "s4"]  # answer_b is earlier in time, answer_a sorts first
    rec = {"question_id": "q1", "question_type": "multi-session", "question": "?", "answer": "x",
           "question_date": "2023/05/30 (Tue) 23:40", "haystack_session_ids": ids,
           "haystack_dates": [f"2023/05/{d:02d} (Mon) 10:00" for d in range(1, 6)],
           "haystack_sessions": [[{"role": "user", "content": f"hi {i}"}] for i in ids],
           "answer_session_ids": ["answer_b", "answer_a"]}
    q = parse_record(rec, 0)
    assert q.evidence_order == (opaque_session_id("answer_a"), opaque_session_id("answer_b"))
    by_time = [s.sid for s in q.sessions_by_time() if s.sid in q.evidence]
    assert by_time == list(reversed(q.evidence_order))
    for variant in ("public", "private"):
        a = assign(q, variant)
        assert a.owner[opaque_session_id("answer_a")] == a.targets[0]
        assert a.owner[opaque_session_id("answer_b")] == a.targets[1]
