"""Every backend against the real servers: view safety on random organisations, escaping, upserts.

The property test generates organisations (agents with awkward names, public and
private, units with random times), adds them to one long-lived index per backend
next to every earlier organisation, and asserts that no result lies outside the
view -- for own, shared and all scopes, with and without date filters, and for
agents that own nothing. Exact search must equal a brute-force reference.
"""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.memory.backends.base import Query, make_backend
from harness.memory.backends.redis_qe import compile_view as redis_filter
from harness.memory.backends.redis_qe import tag_escape
from harness.memory.backends.vectorset import compile_view as vset_filter
from harness.memory.units import Unit
from harness.memory.views import View

AWKWARD_AGENTS = ["a0", "A0", "a1", "a-1", "a.b", "ab", "x|y", "x", "y", "a:b", "o'neil", 'q"t', "ü", "a b",
                  "a,b", "{a}", "a*", "@a", "a\\b", "gpt4_2655b836_abs", "a)b", "-", "a0 | a1"]
AWKWARD_ORGS = ["q|1:x-y.z", "org 2", "ü-org", "gpt4_2655b836_abs", "o(1)", "a0"]
WORDS = ["dog", "biscuit", "beagle", "car", "parking", "level", "coffee", "python", "garden", "violin",
         "lisbon", "kyoto", "salsa", "pottery", "allergy"]

# (id, backend name, params); services-backed ones get a unique index/table name
CONFIGS = [
    ("exact", "exact", {}),
    ("fts5", "fts5", {}),
    ("fts5_shared", "fts5_shared", {}),
    ("redis_qe", "redis_qe", {}),
    ("redis_qe_adhoc", "redis_qe", {"hybrid_policy": "ADHOC_BF"}),
    ("redis_qe_batches", "redis_qe", {"hybrid_policy": "BATCHES", "batch_size": 5}),
    ("vectorset_q8", "vectorset", {"quant": "Q8"}),
    ("vectorset_fp32", "vectorset", {"quant": "NOQUANT", "filter_ef": 50}),
    ("pgvector_off", "pgvector", {"iterative_scan": "off"}),
    ("pgvector_relaxed", "pgvector", {"iterative_scan": "relaxed_order"}),
    ("pgvector_strict_btree", "pgvector", {"iterative_scan": "strict_order", "owner_btree": True}),
    ("pgvector_exact", "pgvector", {"exact_max_rows": 1000}),  # every view here is searched exactly over its rows
    ("hybrid", "hybrid", {"lexical": "fts5", "dense": "exact"}),
]
SERVICE_BACKED = {"redis_qe", "vectorset", "pgvector"}


def build(name: str, params: dict, tag: str):
    p = dict(params)
    if name == "redis_qe":
        p.update(index=f"test_{tag}", drop_existing=True, drop_on_close=True)
    elif name == "vectorset":
        p.update(prefix=f"test:{tag}", drop_existing=True, drop_on_close=True)
    elif name == "pgvector":
        p.update(table=f"test_{tag}".lower(), drop_existing=True, drop_on_close=True)
    return make_backend(name, **p)


def marks(name):
    return [pytest.mark.services] if name in SERVICE_BACKED else []


PARAMS = [pytest.param(c, id=c[0], marks=marks(c[1])) for c in CONFIGS]


@pytest.fixture(scope="module", params=PARAMS)
def backend(request):
    cid, name, params = request.param
    if name in SERVICE_BACKED:
        request.getfixturevalue("services")
    b = build(name, params, f"{cid}_{os.getpid()}")
    yield cid, b
    b.close()


_org_counter = itertools.count()


@st.composite
def organisations(draw):
    n_agents = draw(st.integers(1, 6))
    agents = draw(st.lists(st.sampled_from(AWKWARD_AGENTS), min_size=n_agents, max_size=n_agents, unique=True))
    public = {a: draw(st.booleans()) for a in agents}
    org = f"{draw(st.sampled_from(AWKWARD_ORGS))}#{next(_org_counter)}"
    units = []
    for a in agents:
        for i in range(draw(st.integers(0, 12))):
            words = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=6))
            t = float(draw(st.integers(0, 100))) * 3600 + 1.6e9
            units.append(Unit(org, a, "public" if public[a] else "private", t, f"s{a.encode().hex()[:8]}{i // 3}",
                              i % 3 + 1, i, " ".join(words)))
    asker = draw(st.sampled_from(agents + ["stranger"]))
    scope = draw(st.sampled_from(["shared", "own", "all"]))
    since = draw(st.one_of(st.none(), st.integers(0, 100).map(lambda h: 1.6e9 + h * 3600.0)))
    until = draw(st.one_of(st.none(), st.integers(0, 100).map(lambda h: 1.6e9 + h * 3600.0)))
    view = View(org, asker, scope, since, until)
    query = " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3)))
    k = draw(st.integers(1, 12))
    return units, view, query, k


def reference(units, vecs, view, q, k):
    """Brute-force ground truth: cosine over the admitted units, ties by uid."""
    pairs = [(u.uid, float(v @ q)) for u, v in zip(units, vecs) if view.admits(u)]
    return sorted(pairs, key=lambda p: (-p[1], p[0]))[:k]


def decoy_units(view: View) -> list[Unit]:
    """Units the view must never return: another org with the same agent names, all public."""
    other = view.org + "-other"
    return [Unit(other, view.agent or "a0", "public", 1.6e9 + i * 3600, "sdecoy", 1, i, " ".join(WORDS))
            for i in range(5)]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                     HealthCheck.too_slow])
@given(case=organisations(), seed=st.integers(0, 2**31 - 1))
def test_no_result_outside_the_view(backend, case, seed):
    cid, b = backend
    units, view, query, k = case
    decoys = decoy_units(view)
    everything = units + decoys
    rng = np.random.default_rng(seed)
    vecs = rng.standard_normal((len(everything), 384)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    if everything:
        b.add(everything, vecs)
    qv = rng.standard_normal(384).astype(np.float32)
    qv /= np.linalg.norm(qv)
    hits = b.search(Query(text=query, vector=qv), view, k)
    by_uid = {u.uid: u for u in everything}
    assert len(hits) <= k
    assert len({h.uid for h in hits}) == len(hits), "a unit returned twice"
    for h in hits:
        assert h.uid in by_uid, f"{cid} returned a unit of an earlier organisation: {h.uid}"
        assert view.admits(by_uid[h.uid]), f"{cid} returned {h.uid} outside {view}"
    admitted = [u for u in units if view.admits(u)]
    if cid == "exact":
        ref = reference(everything, vecs, view, qv, k)
        assert [h.uid for h in hits] == [u for u, _ in ref]
    if cid == "pgvector_exact":  # the same scores as brute force (float32 ties may swap places)
        ref = reference(everything, vecs, view, qv, k)
        assert np.allclose([h.score for h in hits], [s for _, s in ref], atol=1e-5)
        assert b.last_plan()["path"] == "exact"
    if cid in ("exact", "redis_qe", "redis_qe_adhoc", "pgvector_relaxed", "pgvector_strict_btree", "pgvector_exact"):
        # complete under the filter: brute force (the engine's choice for small filtered sets),
        # or an iterative scan over a small view. Forced BATCHES is not: with a tiny view its
        # batches can run dry (seen here: 0 of 1 admitted unit), so it is only held to safety.
        assert len(hits) == min(k, len(admitted))
    if cid in ("fts5", "fts5_shared"):
        q_words = set(query.split())
        matching = [u for u in admitted if q_words & set(u.text.split())]
        assert len(hits) == min(k, len(matching))


@pytest.mark.services
@pytest.mark.parametrize("cfg", [c for c in CONFIGS if c[1] in ("redis_qe", "vectorset", "pgvector")],
                         ids=lambda c: c[0])
def test_punctuation_in_owner_is_data_not_syntax(cfg, unique_name):
    """`x|y` must not mean "x or y", `A0` is not `a0`, `a-1` is not `a1`, `a.b` is not `ab`."""
    cid, name, params = cfg
    b = build(name, params, unique_name(cid))
    try:
        owners = ["x", "y", "x|y", "a0", "A0", "a1", "a-1", "ab", "a.b", "a0 | a1", "o'neil", 'q"t', "a\\b"]
        org = "q|1:x-y.z"
        units = [Unit(org, o, "private", 1.6e9 + i, f"s{i}", 1, j, f"text {o}") for i, o in enumerate(owners)
                 for j in range(3)]
        rng = np.random.default_rng(1)
        vecs = rng.standard_normal((len(units), 384)).astype(np.float32)
        b.add(units, vecs)
        q = Query(vector=rng.standard_normal(384).astype(np.float32))
        for o in owners:
            for scope in ("own", "shared"):
                got = {h.uid for h in b.search(q, View(org, o, scope), 10)}
                want = {u.uid for u in units if u.owner == o}
                assert got == want, (o, scope)
        assert len(b.search(q, View(org, None, "all"), 100)) == len(units)
        assert b.search(q, View("q|1:x-y", "x", "all"), 10) == []  # a prefix of the org is another org
    finally:
        b.close()


def test_tag_escaping_and_filters_compile():
    assert tag_escape("x|y") == "x\\|y"
    assert tag_escape("a-1.b:c") == "a\\-1\\.b\\:c"
    assert tag_escape("ü_ok9") == "ü_ok9"
    with pytest.raises(ValueError):
        tag_escape("")
    f = redis_filter(View("o|1", "a.b", "shared", 10.0, None))
    assert f == "(@org:{o\\|1} (@owner:{a\\.b} | @visibility:{public}) @time:[10.0 +inf])"
    assert redis_filter(None) == "*"
    assert vset_filter(View("o", "a0", "own")) == '.owner == "a0"'
    assert vset_filter(View("o", 'q"t', "shared", None, 5.0)) == "(.owner == 'q\"t' or .visibility == \"public\") and .time <= 5.0"
    assert vset_filter(View("o", None, "all")) is None


@pytest.mark.parametrize("cfg", PARAMS)
def test_upsert_and_delete(cfg, unique_name, request):
    cid, name, params = cfg
    if name in SERVICE_BACKED:
        request.getfixturevalue("services")
    b = build(name, params, unique_name(cid))
    try:
        org = "upsert"
        u1 = Unit(org, "a0", "private", 1.0, "s1", 1, 0, "violin lessons on monday")
        u2 = Unit(org, "a0", "private", 2.0, "s1", 2, 0, "coffee beans")
        e = np.eye(384, dtype=np.float32)
        b.add([u1, u2], e[:2])
        b.add([Unit(org, "a0", "private", 1.0, "s1", 1, 0, "violin lessons moved to friday")], e[2:3])
        q = Query(text="violin", vector=e[2])
        hits = b.search(q, View(org, "a0", "own"), 5)
        assert [h.uid for h in hits][0] == u1.uid
        assert len([h for h in hits if h.uid == u1.uid]) == 1
        if b.kind == "dense":
            assert hits[0].score == pytest.approx(1.0, abs=0.02)  # replaced vector, cosine 1
        # visibility change on upsert: the unit leaves the other agents' shared view
        b.add([Unit(org, "a1", "public", 3.0, "s2", 1, 0, "violin recital")], e[3:4])
        assert any(h.uid.startswith(f"{org}|s2") for h in b.search(Query("violin", e[3]), View(org, "a0"), 5))
        b.add([Unit(org, "a1", "private", 3.0, "s2", 1, 0, "violin recital")], e[3:4])
        assert not any(h.uid.startswith(f"{org}|s2") for h in b.search(Query("violin", e[3]), View(org, "a0"), 5))
        b.delete([u1.uid])
        assert u1.uid not in {h.uid for h in b.search(q, View(org, "a0", "own"), 5)}
        assert b.footprint()
    finally:
        b.close()
