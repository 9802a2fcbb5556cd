"""The memory space: one result per round, hybrid = RRF, the write path (delta), read, threads, replay."""

from __future__ import annotations

import os
import threading
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from omegaconf import OmegaConf

from harness.data.longmemeval import Session, Turn
from harness.data.org import VISIBILITY
from harness.memory.backends.base import Query, make_backend
from harness.memory.backends.fts5 import FTS5PerView
from harness.memory.backends.hybrid import rrf
from harness.memory.encoder import HashEncoder
from harness.memory.space import MemorySpace, space_from_config
from harness.memory.units import Round, epoch
from harness.memory.views import View
from tests.test_memory_backends import organisations

REPO = Path(__file__).resolve().parents[1]
TOPICS = ["violin lessons", "coffee beans", "garden tomatoes", "trip to lisbon", "my dog biscuit", "new job at atlas",
          "salsa dancing", "car service", "pottery class", "allergy to peanuts"]


def session(sid: str, day: int, rounds: list[tuple[str, str]]) -> Session:
    turns = []
    for u, a in rounds:
        turns += [Turn("user", u), Turn("assistant", a)]
    return Session(sid, datetime(2023, 5, day, 9, 0), tuple(turns))


def org_sessions(n_per_agent: int = 3) -> tuple[list[Session], dict[str, str]]:
    """Sessions of a0..a5 (LongMemEval-Org visibility); some rounds are long (several chunks)."""
    sessions, owner = [], {}
    i = 0
    for agent in VISIBILITY:
        for j in range(n_per_agent):
            topic = TOPICS[(i + j) % len(TOPICS)]
            rounds = [(f"Tell me about {topic}, {agent}.", f"Sure, notes on {topic}. " + "More detail. " * (90 if j == 0 else 3)),
                      (f"And what else about {topic}?", "Nothing else."),
                      ("Unrelated: what time is it?", "Noon.")]
            sid = f"s{agent}{j}"
            sessions.append(session(sid, 1 + i % 27, rounds))
            owner[sid] = agent
            i += 1
    return sessions, owner


def make_space(dense=None) -> MemorySpace:
    return MemorySpace(HashEncoder(), dense if dense is not None else make_backend("exact"), FTS5PerView())


@pytest.fixture
def space():
    sp = make_space()
    sessions, owner = org_sessions()
    sp.add_sessions(sessions, "org1", owner.__getitem__, VISIBILITY.__getitem__)
    yield sp
    sp.close()


@pytest.mark.parametrize("scoring", ["bm25", "dense", "hybrid"])
def test_one_result_per_round_within_the_view(space, scoring):
    long_rounds = {(u.session, u.round) for u in space.units() if u.chunk > 0}
    assert long_rounds, "the corpus must have multi-chunk rounds for this test to mean anything"
    for agent in VISIBILITY:
        for scope in ("shared", "own", "all"):
            view = View("org1", agent, scope)
            res = space.search("violin lessons coffee tomatoes detail", view, k=8, scoring=scoring)
            rounds = [(r.unit.session, r.unit.round) for r in res]
            assert len(rounds) == len(set(rounds)), "two chunks of one round"
            assert [r.rank for r in res] == list(range(1, len(res) + 1))
            assert all(view.admits(r.unit) for r in res)
            admitted_rounds = {(u.session, u.round) for u in space.units(view)}
            if scoring == "dense":  # dense ranks every unit: k distinct rounds whenever the view has them
                assert len(res) == min(8, len(admitted_rounds))
            scores = [r.score for r in res]
            assert scores == sorted(scores, reverse=True)


def test_best_chunk_of_a_round_is_returned(space):
    """The result of a round is its best-matching chunk, not always chunk 0."""
    view = View("org1", "a0", "own")
    long_units = [u for u in space.units(view) if u.chunk > 0]
    target = long_units[-1]
    qv = space.encoder.embed([target.text])[0]
    hits = space.dense.search(Query(vector=qv), view, 5)
    assert hits[0].uid == target.uid
    res = space._per_round(hits, 3)
    assert res[0].unit.uid == target.uid and res[0].unit.chunk > 0


def test_hybrid_is_rrf_of_top_50_each(space):
    view = View("org1", "a1", "shared")
    q = "garden tomatoes and coffee"
    lex = space.lexical.search(Query(text=q), view, 50)
    den = space.dense.search(Query(text=q, vector=space.query_vector(q)), view, 50)
    fused = rrf([lex, den], 60)
    expect, seen = [], set()
    for h in fused:
        u = space._units[h.uid]
        if (u.session, u.round) not in seen:
            seen.add((u.session, u.round))
            expect.append((h.uid, pytest.approx(h.score)))
    got = space.search(q, view, k=8, scoring="hybrid")
    assert [(r.unit.uid, r.score) for r in got] == expect[:8]
    # RRF by hand for the first result: 1/(60+rank) summed over the lists it appears in
    top = got[0].unit.uid
    by_hand = sum(1 / (60 + i + 1) for lst in (lex, den) for i, h in enumerate(lst) if h.uid == top)
    assert got[0].score == pytest.approx(by_hand)


def test_date_filters_restrict_further(space):
    view = View("org1", "a0", "shared")
    all_units = space.units(view)
    times = sorted({u.time for u in all_units})
    lo, hi = times[len(times) // 4], times[3 * len(times) // 4]
    dated = View("org1", "a0", "shared", lo, hi)
    for scoring in ("bm25", "dense", "hybrid"):
        res = space.search("violin coffee garden dog detail noon", dated, k=20, scoring=scoring)
        assert res and all(lo <= r.unit.time <= hi for r in res)


def test_commit_write_path_updates_every_view_containing_the_round(space):
    org = "org1"
    # build the lexical indexes of a few views first (lazily, by searching)
    for agent in ("a0", "a1", "a4"):
        space.search("anything", View(org, agent, "shared"), scoring="bm25")
    space.search("anything", View(org, "a4", "own"), scoring="bm25")
    n_views = len(space.lexical.view_keys())
    t = epoch(datetime(2023, 6, 1, 12, 0))
    pub = space.commit(Round("snew1", 1, "I adopted a ferret named Quokka", "Congratulations on Quokka!", t),
                       org, "a2", "public")
    assert pub.units == 1 and pub.delta > 0 and pub.probes >= 1
    assert pub.delta >= pub.chunk_s + pub.embed_s + pub.insert_dense_s + pub.insert_lexical_s - 1e-9
    assert pub.lexical_views == 3  # the three shared views admit a public unit; a4's own view does not
    for agent in ("a0", "a1", "a4"):
        got = space.search("ferret Quokka", View(org, agent, "shared"), k=3, scoring="bm25")
        assert got and got[0].unit.session == "snew1"
    priv = space.commit(Round("snew2", 1, "My bank PIN hint is zebra", "Noted.", t + 60), org, "a4", "private")
    assert priv.lexical_views == 2  # a4's shared and own views only
    assert not space.search("zebra PIN", View(org, "a0", "shared"), k=3, scoring="bm25")
    assert space.search("zebra PIN", View(org, "a4", "own"), k=3, scoring="bm25")[0].unit.session == "snew2"
    assert space.search("zebra PIN", View(org, "a4", "own"), k=3, scoring="dense")[0].unit.session == "snew2"
    assert len(space.lexical.view_keys()) == n_views
    # a view built after the commit contains it too (built from all units)
    assert space.search("ferret", View(org, "a3", "shared"), k=1, scoring="bm25")[0].unit.session == "snew1"


def test_read_whole_rounds_under_the_view(space):
    view = View("org1", "a0", "shared")
    rounds = space.read(view, "sa00", 2, window=1)
    assert [r.round for r in rounds] == [1, 2, 3]
    assert rounds[0].assistant.startswith("Sure, notes on") and len(rounds[0].assistant) > 1000
    assert space.read(view, "sa10", 1, window=0)[0].owner == "a1"  # a1 is public
    assert space.read(view, "sa40", 1) == []  # a4 is private: as if the session did not exist
    assert space.read(View("org1", "a4", "own"), "sa40", 1)[0].owner == "a4"
    assert space.read(View("org2", "a0", "all"), "sa00", 1) == []  # another org
    # date filters do not hide neighbouring rounds from a read
    assert len(space.read(View("org1", "a0", "own", since=0.0, until=1.0), "sa00", 2)) == 3


def test_add_units_is_idempotent(space):
    n = len(space)
    sessions, owner = org_sessions()
    assert space.add_sessions(sessions, "org1", owner.__getitem__, VISIBILITY.__getitem__) == 0
    assert len(space) == n and space.dense.footprint()["units"] == n


def test_threads_search_while_one_commits(space):
    errors: list[BaseException] = []
    stop = threading.Event()

    def searcher(agent):
        try:
            while not stop.is_set():
                for scoring in ("bm25", "dense", "hybrid"):
                    view = View("org1", agent, "shared")
                    for r in space.search("ferret notes detail", view, k=8, scoring=scoring):
                        assert view.admits(r.unit)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=searcher, args=(a,)) for a in ("a0", "a1", "a2", "a3", "a4", "a5", "a0")]
    for th in threads:
        th.start()
    try:
        for i in range(20):
            space.commit(Round(f"sthr{i}", 1, f"ferret {i}", "ok", 1.7e9 + i), "org1", f"a{i % 6}",
                         VISIBILITY[f"a{i % 6}"])
    finally:
        stop.set()
        for th in threads:
            th.join()
    assert not errors, errors[0]


def test_replay_is_deterministic(space):
    view = View("org1", "a2", "shared")
    first = [(r.unit.uid, r.score) for r in space.search("dog biscuit pottery", view, scoring="hybrid")]
    assert first == [(r.unit.uid, r.score) for r in space.search("dog biscuit pottery", view, scoring="hybrid")]
    # a space rebuilt from the same data returns the same results
    other = make_space()
    sessions, owner = org_sessions()
    other.add_sessions(sessions, "org1", owner.__getitem__, VISIBILITY.__getitem__)
    assert first == [(r.unit.uid, r.score) for r in other.search("dog biscuit pottery", view, scoring="hybrid")]


def test_search_requires_a_view(space):
    with pytest.raises(TypeError):
        space.search("x", None)
    with pytest.raises(ValueError):
        space.search("x", View("org1", "a0"), scoring="tfidf")


@pytest.mark.services
@pytest.mark.parametrize("index", ["exact", "redis_qe", "vectorset", "pgvector", "hybrid", "fts5"])
def test_every_index_config_builds_a_space(index, unique_name):
    cfg = OmegaConf.load(REPO / "conf" / "index" / f"{index}.yaml")
    name = unique_name("cfg")
    if index in ("redis_qe",):
        cfg.index = name
    if index == "hybrid":
        cfg.dense.index = name
    if index == "vectorset":
        cfg.prefix = name
    if index == "pgvector":
        cfg.table = name
    sp = space_from_config(cfg, encoder=HashEncoder())
    try:
        sessions, owner = org_sessions(1)
        sp.add_sessions(sessions, "org1", owner.__getitem__, VISIBILITY.__getitem__)
        view = View("org1", "a0", "shared")
        scorings = ["bm25"] if index == "fts5" else ["bm25", "dense", "hybrid"]
        for scoring in scorings:
            res = sp.search("violin coffee", view, k=4, scoring=scoring)
            assert res and all(view.admits(r.unit) for r in res)
        if index == "fts5":
            with pytest.raises(ValueError):
                sp.search("violin", view, scoring="dense")
        else:
            d = sp.describe()["dense"]
            expect = "redis_qe" if index == "hybrid" else index
            assert d["backend"] == expect
            rep = sp.commit(Round("sc", 1, "ferret", "ok", 1.7e9), "org1", "a0", "public")
            assert rep.delta > 0
        assert sp.footprint()["units"] == len(sp)
    finally:
        if sp.dense is not None and hasattr(sp.dense, "drop"):
            sp.dense.drop()
        sp.close()


def test_space_from_the_runs_hydra_config():
    """A space is built from the run's index node, as the config edge checked it (harness.run.settings.index_node)."""
    from hydra import compose, initialize_config_dir

    from harness.memory.space import space_from_config
    from harness.run.settings import index_node

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        cfg = compose(config_name="config", overrides=["index=exact", "encoder=minilm"])
    sp = space_from_config(index_node(cfg.index), encoder_cfg=cfg.encoder, cache_dir=cfg.get("cache_dir"))
    try:
        assert sp.describe()["dense"]["backend"] == "exact"
        assert sp.describe()["encoder"]["encoder_id"].startswith("minilm:")
    finally:
        sp.close()


def test_dense_search_finds_the_right_round_with_the_real_encoder(minilm_encoder):
    sp = MemorySpace(minilm_encoder, make_backend("exact"), FTS5PerView())
    sessions = [session("sdog", 1, [("My beagle is called Biscuit.", "Lovely name for a beagle!")]),
                session("scar", 2, [("I booked a service for my Honda Civic.", "Good, cars need care.")]),
                session("scook", 3, [("How do I roast potatoes?", "Hot oven, dry surfaces.")])]
    sp.add_sessions(sessions, "o", lambda s: "a0", lambda a: "private")
    res = sp.search("what is the name of my dog", View("o", "a0", "own"), k=3, scoring="dense")
    assert res[0].unit.session == "sdog"
    assert sp.search("vehicle maintenance appointment", View("o", "a0", "own"), k=1, scoring="dense")[0].unit.session == "scar"


DENSE = [pytest.param(("exact", {}), id="exact"),
         pytest.param(("redis_qe", {}), id="redis_qe", marks=pytest.mark.services),
         pytest.param(("vectorset", {}), id="vectorset", marks=pytest.mark.services),
         pytest.param(("pgvector", {"iterative_scan": "off"}), id="pgvector", marks=pytest.mark.services)]


@pytest.fixture(scope="module", params=DENSE)
def any_space(request):
    name, params = request.param
    p = dict(params)
    tag = f"spc_{name}_{os.getpid()}"
    if name != "exact":
        request.getfixturevalue("services")
        p.update({"redis_qe": {"index": tag}, "vectorset": {"prefix": tag}, "pgvector": {"table": tag}}[name])
        p.update(drop_existing=True, drop_on_close=True)
    sp = MemorySpace(HashEncoder(), make_backend(name, **p), FTS5PerView())
    yield sp
    sp.close()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                     HealthCheck.too_slow])
@given(case=organisations())
def test_space_never_returns_a_unit_outside_the_view(any_space, case):
    units, view, query, k = case
    any_space.add_units(units)
    for scoring in ("bm25", "dense", "hybrid"):
        res = any_space.search(query, view, k=k, scoring=scoring)
        assert len(res) <= k
        for r in res:
            assert r.unit.org == view.org and view.admits(r.unit), (scoring, r.unit, view)


@pytest.mark.services
def test_redis_rebuild_replays_identically():
    """The exposure audit replays logged searches in a later process, against a rebuilt index: with
    the same units in the same order, the Redis HNSW graph (and so every result) is the same."""
    from tests.memory_corpus import clustered_corpus, unit_vectors

    units, vecs, _ = clustered_corpus(30, 60, public_share=0.3, seed=2)
    outs = []
    for _ in range(2):
        b = make_backend("redis_qe")  # a fresh private index each time
        try:
            b.add(units, vecs)
            outs.append([[(h.uid, h.score) for h in b.search(Query(vector=unit_vectors(1, seed=s)[0]), v, 10)]
                         for s in range(30) for v in (View("bench", "ag001"), View("bench", None, "all"))])
        finally:
            b.close()
    assert outs[0] == outs[1]
