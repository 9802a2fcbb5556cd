"""Propositions 1 and 2 and recall of the approximate backends against exact search.

Proposition 1: a unit's BM25 score under a per-view lexical index does not change
when units outside the view are added; under one shared index it does (the side
channel through collection statistics).
Proposition 2: post-filtering a view of selectivity s after a K'-candidate index
scan keeps about K'*s units; pgvector's default plan truncates a one-agent view,
iterative scans remove the truncation, a b-tree on owner lets the planner scan
exactly. Sizes are chosen so the planner really takes the HNSW plan (it prefers
a sequential scan for a one-agent view until agents hold ~100+ units each).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.memory.backends.base import Query, make_backend
from harness.memory.units import Unit
from harness.memory.views import View
from tests.memory_corpus import clustered_corpus, unit_vectors

WORDS = ["violin", "lessons", "monday", "coffee", "beans", "garden", "tomato", "lisbon", "trip", "dog", "biscuit"]


def lexical_units(org: str, owner: str, vis: str, texts: list[str], start: int = 0) -> list[Unit]:
    return [Unit(org, owner, vis, 1.6e9 + i, f"s{owner}{i}", 1, 0, t) for i, t in enumerate(texts, start)]


def scores(backend, query: str, view: View) -> dict[str, float]:
    return {h.uid: h.score for h in backend.search(Query(text=query), view, 100)}


def test_proposition_1_per_view_scores_ignore_units_outside_the_view():
    per_view, shared = make_backend("fts5"), make_backend("fts5_shared")
    org = "o1"
    inside = (lexical_units(org, "a0", "private", ["violin lessons on monday", "coffee beans from lisbon",
                                                   "my dog biscuit hates the violin"])
              + lexical_units(org, "a1", "public", ["garden tomato harvest", "violin recital trip"], 10))
    for b in (per_view, shared):
        b.add(inside)
    view = View(org, "a0", "shared")
    before_pv, before_sh = scores(per_view, "violin lessons", view), scores(shared, "violin lessons", view)
    assert set(before_pv) == set(before_sh) == {u.uid for u in inside if "violin" in u.text or "lessons" in u.text}
    # units the view does not admit: another agent's private units, another org's public units
    outside = (lexical_units(org, "a2", "private", ["violin violin violin", "violin strings", "garden"] * 5, 100)
               + lexical_units("o2", "a0", "public", ["violin lessons"] * 5, 200))
    for b in (per_view, shared):
        b.add(outside)
    after_pv, after_sh = scores(per_view, "violin lessons", view), scores(shared, "violin lessons", view)
    assert after_pv == before_pv, "a per-view BM25 score moved when units outside the view were added"
    assert set(after_sh) == set(before_sh)  # the shared variant still filters correctly ...
    assert all(after_sh[u] != before_sh[u] for u in before_sh), "... but its scores depend on other agents' units"
    # a unit that enters the view does change the view's statistics (the index is live)
    per_view.add(lexical_units(org, "a1", "public", ["violin"], 300))
    assert scores(per_view, "violin lessons", view) != before_pv


@settings(max_examples=40, deadline=None)
@given(inside=st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=8), min_size=1, max_size=12),
       outside=st.lists(st.tuples(st.sampled_from(["a2", "a3"]), st.lists(st.sampled_from(WORDS), min_size=1,
                                                                           max_size=8)), min_size=1, max_size=12),
       query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3))
def test_proposition_1_property(inside, outside, query):
    b = make_backend("fts5")
    org = "o"
    view = View(org, "a0", "shared")
    b.add([Unit(org, "a0" if i % 2 else "a1", "private" if i % 2 else "public", float(i), f"s{i}", 1, 0,
                " ".join(ws)) for i, ws in enumerate(inside)])
    q = " ".join(query)
    before = scores(b, q, view)
    b.add([Unit(org, a, "private", float(i), f"x{i}", 1, 0, " ".join(ws)) for i, (a, ws) in enumerate(outside)])
    assert scores(b, q, view) == before


@pytest.fixture(scope="module")
def many_agents(services):
    """50 agents x 200 units; 10% of agents public. The pgvector planner takes the HNSW plan for one agent here."""
    units, vecs, centres = clustered_corpus(50, 200, public_share=0.1, seed=3)
    exact = make_backend("exact")
    exact.add(units, vecs)
    # ef_construction 64 (not 200) keeps the build to seconds; it changes recall, not the truncation
    pg = make_backend("pgvector", table="test_prop2", drop_existing=True, drop_on_close=True, ef_construction=64)
    pg.add(units, vecs)
    yield units, vecs, centres, exact, pg
    pg.close()


def run_queries(backend, exact, units, views_queries, k=10):
    by_uid = {u.uid: u for u in units}
    n, rec, local = [], [], []
    for view, q in views_queries:
        got = backend.search(Query(vector=q), view, k)
        assert all(view.admits(by_uid[h.uid]) for h in got)
        truth = exact.search(Query(vector=q), view, k)
        n.append(len(got))
        rec.append(len({h.uid for h in got} & {h.uid for h in truth}) / len(truth))
        top = exact.search(Query(vector=q), None, 40)  # the unfiltered top-K' (K' = ef_search = 40)
        local.append(min(k, sum(view.admits(by_uid[h.uid]) for h in top)))
    return np.array(n), float(np.mean(rec)), float(np.mean(local))


@pytest.mark.services
def test_proposition_2_pgvector_truncation_appears_and_disappears(many_agents):
    units, _vecs, centres, exact, pg = many_agents
    agents = sorted({u.owner for u in units})
    # queries independent of ownership (Proposition 2's assumption), one-agent views (s = 1/50)
    vq = [(View("bench", agents[(i * 7) % 50], "own"), unit_vectors(1, seed=500 + i)[0]) for i in range(30)]
    pg.iterative_scan, pg.owner_btree = "off", False
    plan = pg.explain(Query(vector=vq[0][1]), vq[0][0], 10)
    assert "Index Scan using test_prop2_hnsw" in plan, plan
    n, rec, local = run_queries(pg, exact, units, vq)
    global_pred = 40 * (1 / 50)
    assert (n < 10).mean() >= 0.8, f"only {(n < 10).sum()} of 30 lists short"
    assert n.mean() <= 3.0 and rec <= 0.4
    assert abs(n.mean() - local) <= 1.5 and abs(local - global_pred) <= 1.0
    for mode, floor in (("relaxed_order", 0.75), ("strict_order", 0.3)):
        pg.iterative_scan = mode
        n2, rec2, _ = run_queries(pg, exact, units, vq)
        assert (n2 == 10).all(), f"{mode}: {(n2 < 10).sum()} short lists"
        assert rec2 >= floor and rec2 > rec, (mode, rec2)
    # queries about the agent's own topics: the local prediction says ~10 survive, and they do
    pg.iterative_scan = "off"
    topical = [(View("bench", agents[i], "own"), centres[i] + 0.7 * unit_vectors(1, seed=900 + i)[0])
               for i in range(20)]
    n3, rec3, local3 = run_queries(pg, exact, units, topical)
    assert local3 >= 9 and n3.mean() >= 9 and rec3 >= 0.9


@pytest.mark.services
def test_owner_btree_lets_the_planner_scan_exactly(many_agents):
    units, _vecs, _c, exact, pg = many_agents
    agents = sorted({u.owner for u in units})
    pg.iterative_scan, pg.owner_btree = "off", True
    with pg._conn() as c, c.transaction():
        pg._ensure_indexes(c)
        c.execute("ANALYZE test_prop2")
    try:
        vq = [(View("bench", agents[i], "own"), unit_vectors(1, seed=700 + i)[0]) for i in range(10)]
        plan = pg.explain(Query(vector=vq[0][1]), vq[0][0], 10)
        assert "test_prop2_owner" in plan and "hnsw" not in plan, plan
        n, rec, _ = run_queries(pg, exact, units, vq)
        assert (n == 10).all() and rec == 1.0
    finally:
        pg.owner_btree = False
        with pg._conn() as c, c.transaction():
            pg._ensure_indexes(c)


@pytest.fixture(scope="module")
def recall_corpus(services):
    units, vecs, centres = clustered_corpus(40, 60, public_share=0.1, seed=11)
    exact = make_backend("exact")
    exact.add(units, vecs)
    agents = sorted({u.owner for u in units})
    rng = np.random.default_rng(4)
    queries = []
    for i in range(24):
        a = agents[int(rng.integers(len(agents)))]
        q = centres[agents.index(a)] + 0.8 * unit_vectors(1, seed=3000 + i)[0] if i % 2 else unit_vectors(1, seed=4000 + i)[0]
        queries.append((a, q))
    return units, vecs, exact, queries


RECALL_CASES = [
    # (id, backend, params, {scope: recall floor})
    ("redis_qe_ef10", "redis_qe", {"ef_runtime": 10}, {"own": 0.99, "shared": 0.9, "all": 0.6}),
    ("redis_qe_ef100", "redis_qe", {"ef_runtime": 100}, {"own": 0.99, "shared": 0.95, "all": 0.95}),
    ("vectorset_q8", "vectorset", {"quant": "Q8"}, {"own": 0.9, "shared": 0.9, "all": 0.8}),
    ("vectorset_fp32", "vectorset", {"quant": "NOQUANT"}, {"own": 0.9, "shared": 0.9, "all": 0.8}),
    ("pgvector_relaxed", "pgvector", {"iterative_scan": "relaxed_order", "ef_construction": 64},
     {"own": 0.8, "shared": 0.7, "all": 0.8}),
]


@pytest.mark.services
@pytest.mark.parametrize("case", RECALL_CASES, ids=lambda c: c[0])
def test_recall_at_10_against_exact(case, recall_corpus, unique_name):
    cid, name, params, floors = case
    units, vecs, exact, queries = recall_corpus
    p = dict(params, drop_existing=True, drop_on_close=True)
    p.update({"redis_qe": {"index": unique_name("rec")}, "vectorset": {"prefix": unique_name("rec")},
              "pgvector": {"table": unique_name("rec")}}[name])
    b = make_backend(name, **p)
    try:
        b.add(units, vecs)
        for scope, floor in floors.items():
            vq = [(View("bench", a, scope), q) for a, q in queries]
            n, rec, _ = run_queries(b, exact, units, vq)
            assert rec >= floor, f"{cid} {scope}: recall@10 {rec:.3f} < {floor}"
            if name == "redis_qe" and scope == "own":
                assert (n == 10).all()  # pre-filtering never truncates
    finally:
        b.close()


@pytest.mark.services
def test_recall_on_real_embeddings_of_a_generated_corpus(minilm_encoder, tmp_path, unique_name):
    """The study's setup in small: each generated history is one agent, its question the query."""
    from harness.data.longmemeval import load
    from harness.data.synth import write
    from harness.memory.units import units_of_sessions

    qs = list(load(write(tmp_path, 0, "tiny")).values())
    units = []
    for i, q in enumerate(qs):
        units += units_of_sessions(q.sessions, "bench", lambda sid, i=i: f"h{i:02d}", lambda a: "private")
    vecs = minilm_encoder.embed([u.text for u in units])
    exact = make_backend("exact")
    exact.add(units, vecs)
    approx = [make_backend("redis_qe", index=unique_name("real"), drop_existing=True, drop_on_close=True),
              make_backend("vectorset", prefix=unique_name("real"), drop_existing=True, drop_on_close=True),
              make_backend("pgvector", table=unique_name("real"), drop_existing=True, drop_on_close=True,
                           iterative_scan="relaxed_order")]
    try:
        for b in approx:
            b.add(units, vecs)
            for scope in ("own", "all"):
                vq = [(View("bench", f"h{i:02d}", scope), minilm_encoder.embed_query(q.question))
                      for i, q in enumerate(qs)]
                _n, rec, _ = run_queries(b, exact, units, vq)
                assert rec >= 0.9, f"{b.name} {scope}: {rec:.3f}"
    finally:
        for b in approx:
            b.close()


def test_lexical_indexes_use_the_runtimes_tokenizer(tmp_path):
    """The per-view indexes copy the tokenizer of the runtime's messages_fts (read from a store it wrote)."""
    import re
    import sqlite3

    from harness.runtime.hermes import load

    db = load().SessionDB(db_path=tmp_path / "state.db")
    db.close()
    with sqlite3.connect(tmp_path / "state.db") as c:
        sql = c.execute("SELECT sql FROM sqlite_master WHERE name = 'messages_fts'").fetchone()[0]
    m = re.search(r"tokenize\s*=\s*['\"]([^'\"]*)['\"]", sql)
    b = make_backend("fts5")
    assert b.tokenizer == (m.group(1) if m else "unicode61")
    # unicode61 behaviour: diacritics folded, '_' and apostrophes separate tokens, case folded
    b.add([Unit("o", "a0", "private", 0.0, "s1", 1, 0, "Café déjà-vu with O'Neil about foo_bar")])
    v = View("o", "a0", "own")
    for q in ("cafe", "DEJA", "neil", "bar", "what's foo?"):
        assert b.search(Query(text=q), v, 5), q
    assert not b.search(Query(text="caf"), v, 5)  # no prefix matching
