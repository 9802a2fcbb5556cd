"""Proposition 2 measured: what pgvector's post-filter keeps, against an independent numpy computation;
and the visibility change in place that lets the study build each graph once for both splits."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.memory_corpus import clustered_corpus, unit_vectors

K_PRIME = 40


def numpy_top(vecs: np.ndarray, uids: list[str], q: np.ndarray, k: int) -> list[str]:
    x = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    return [uids[i] for i in np.argsort(-(x @ (q / np.linalg.norm(q))), kind="stable")[:k]]


@pytest.mark.services
def test_post_filter_survivors_are_the_admitted_candidates_and_the_local_prediction_when_the_scan_is_exact(
        unique_name):
    """Guaranteed: with iterative scan off the HNSW scan hands the same ef_search candidates to the filter
    whatever the WHERE clause, so the survivors are exactly the admitted members of the unfiltered scan's
    K' list, and candidates = K'. Only where that list equals the exact K' nearest (numpy) must the
    survivors equal Proposition 2's local prediction."""
    from harness.memory.backends.base import Query, make_backend
    from bench.backends.measure import local_prediction
    from harness.memory.views import View

    units, vecs, _ = clustered_corpus(8, 30, public_share=0.25, seed=3)
    uids = [u.uid for u in units]
    by_uid = {u.uid: u for u in units}
    pg = make_backend("pgvector", table=unique_name("surv"), ef_search=K_PRIME, iterative_scan="off")
    try:
        pg.add(units, vecs)
        with pg._conn() as c:  # 240 rows: the planner would sort a seq scan; we measure the HNSW plan
            c.execute("SET enable_seqscan = off")
            c.commit()
        queries = unit_vectors(12, seed=9)
        views = [View("bench", "ag002", "own"), View("bench", "ag005", "shared"), View("bench", None, "all")]
        exact_scans = 0
        for q in queries:
            scan = [h.uid for h in pg.search(Query(vector=q), None, K_PRIME)]  # the unfiltered candidate list
            assert len(scan) == K_PRIME
            exact = numpy_top(vecs, uids, q, K_PRIME)
            exact_scans += set(scan) == set(exact)
            for view in views:
                got = pg.post_filter_survivors(Query(vector=q), view, K_PRIME)
                assert got["plan"].endswith("_hnsw")
                assert got["candidates"] == K_PRIME
                assert got["survivors"] == sum(view.admits(by_uid[u]) for u in scan)
                # the filtered search returns the first k of the survivors: never more than survive
                assert len(pg.search(Query(vector=q), view, 10)) == min(10, got["survivors"])
                if set(scan) == set(exact):
                    assert got["survivors"] == local_prediction(exact, view, by_uid, K_PRIME)
        assert exact_scans >= 1  # otherwise the comparison with the local prediction never ran
    finally:
        pg.close()


def test_local_prediction_counts_admitted_among_the_first_k_prime():
    from bench.backends.measure import local_prediction
    from harness.memory.units import Unit
    from harness.memory.views import View

    us = [Unit("bench", f"a{i % 3}", "public" if i % 5 == 0 else "private", 0.0, f"s{i}", 1, 0, "x") for i in range(30)]
    by = {u.uid: u for u in us}
    order = [u.uid for u in reversed(us)]
    v = View("bench", "a1", "shared")
    for kp in (1, 7, 30):
        assert local_prediction(order, v, by, kp) == sum(1 for u in list(reversed(us))[:kp]
                                                         if u.owner == "a1" or u.visibility == "public")
    assert local_prediction(order, None, by, 12) == 12


@pytest.mark.services
def test_visibility_changed_in_place_keeps_the_pgvector_graph_and_changes_the_results(unique_name):
    """fillfactor 50 leaves room on each heap page: the UPDATE is HOT (the HNSW index gets no new entry);
    on full pages it is not. Either way a flipped unit is then found through another agent's view."""
    from harness.memory.backends.base import Query, make_backend
    from harness.memory.views import View

    units, vecs, _ = clustered_corpus(6, 40, public_share=0.0, seed=4)
    flip = {u.uid: "public" for u in units if u.owner == "ag001"}
    target = next(i for i, u in enumerate(units) if u.owner == "ag001")
    other = View("bench", "ag004", "shared")
    for fillfactor, all_hot in ((50, True), (None, False)):
        pg = make_backend("pgvector", table=unique_name("vis"), iterative_scan="strict_order", fillfactor=fillfactor)
        try:
            pg.add(units, vecs)
            q = Query(vector=vecs[target])
            assert units[target].uid not in {h.uid for h in pg.search(q, other, 10)}
            upd = pg.set_visibility(flip)
            assert upd["updated"] == len(flip)
            assert (upd["hot"] == upd["updated"]) is all_hot
            got = pg.search(q, other, 10)
            assert got[0].uid == units[target].uid
            owner = {u.uid: u.owner for u in units}
            assert all(h.uid in flip or owner[h.uid] == "ag004" for h in got)  # admitted under the new visibility
        finally:
            pg.close()


@pytest.mark.services
def test_visibility_changed_in_place_in_vector_sets_and_exact(unique_name):
    from harness.memory.backends.base import Query, make_backend
    from harness.memory.views import View

    units, vecs, _ = clustered_corpus(5, 30, public_share=0.0, seed=5)
    flip = {u.uid: "public" for u in units if u.owner == "ag002"}
    target = next(i for i, u in enumerate(units) if u.owner == "ag002")
    other = View("bench", "ag000", "shared")
    fresh = make_backend("exact")
    fresh.add([dataclasses.replace(u, visibility=flip.get(u.uid, u.visibility)) for u in units], vecs)
    for b in (make_backend("vectorset", prefix=unique_name("vis")), make_backend("exact")):
        try:
            b.add(units, vecs)
            q = Query(vector=vecs[target])
            assert units[target].uid not in {h.uid for h in b.search(q, other, 10)}
            assert b.set_visibility(flip)["updated"] == len(flip)
            got = b.search(q, other, 10)
            assert got[0].uid == units[target].uid
            if b.name == "exact":  # in place = built with the new visibility
                for v in (other, View("bench", "ag002", "own"), View("bench", None, "all")):
                    assert b.search(q, v, 10) == fresh.search(q, v, 10)
        finally:
            b.close()
