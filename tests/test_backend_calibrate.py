"""The realistic range's calibration on real text (harness.memory.calibrate)."""

from __future__ import annotations

import numpy as np
import pytest


def test_chat_corpus_is_chitchat_text_cut_by_the_study_chunker_with_held_out_questions():
    from harness.data.synth import chat_conversations
    from harness.memory.calibrate import chat_corpus
    from harness.memory.units import MAX_CHARS

    units, queries, src = chat_corpus(400, 30, seed=0)
    assert len(units) == 400 and src["conversations"] >= 2
    assert all(len(u.text) <= MAX_CHARS and u.text.startswith("User: ") for u in units)
    used = {u.session for u in units}
    assert len(used) == src["conversations"]  # whole conversations, the last one possibly cut
    corpus_text = " ".join(u.text for u in units)
    assert len(queries) == 30 and all("?" in q for q in queries)
    # held out: the questions come from conversations after the corpus's (none of them is in a chunk)
    assert sum(q in corpus_text for q in queries) <= 2  # short stock phrases may recur in real chat
    everything = {m for c in chat_conversations() for m in c}
    assert all(q in everything for q in queries)


def test_thresholds_are_the_real_text_values_with_the_margins():
    from harness.memory.calibrate import MARGINS, thresholds

    real = {"nn_cosine_median": 0.653, "nn_cosine_above_095": 0.0023, "distinct_queries": 180, "queries": 180,
            "unfiltered_recall": {"redis_ef10": 0.78, "redis_ef100": 0.9878}}
    t = thresholds(real)
    assert t["nn_cosine_median_max"] == round(0.653 + MARGINS["nn_cosine_median"], 2)
    assert t["nn_cosine_above_095_max"] == round(0.0023 + MARGINS["nn_cosine_above_095"], 2)
    assert t["distinct_queries_min"] == round(1.0 - MARGINS["distinct_queries"], 2)
    assert t["unfiltered_recall"] == {"config": "redis_ef100", "min": round(0.9878 - MARGINS["unfiltered_recall"], 2)}


def test_the_stage_thresholds_pass_real_text_and_fail_near_duplicates():
    """The thresholds in conf/stage/backends.yaml against the measurement they came from and a templated corpus."""
    from harness.memory.study import corpus_diagnostics, default_stage, realism_checks

    real = default_stage()["realism"]
    measured = {"nn_cosine_median": 0.653, "nn_cosine_above_095": 0.0023, "distinct_queries": 180, "queries": 180,
                "unfiltered_recall": {"redis_ef100": 0.9878}}
    assert all(realism_checks(measured, real).values())
    rng = np.random.default_rng(0)
    base = rng.standard_normal((30, 384)).astype(np.float32)
    dup = np.repeat(base, 10, axis=0) + 0.02 * rng.standard_normal((300, 384)).astype(np.float32)
    d = corpus_diagnostics(dup, ["q"] * 3 + ["r"], 300, 0)
    checks = realism_checks(d, real)
    assert checks["nn_cosine_median"] is False and checks["nn_cosine_above_095"] is False
    assert checks["distinct_queries"] is False


@pytest.mark.services
def test_unfiltered_recall_against_exact_search():
    """Redis HNSW recall@10 with no filter against numpy: with EF above the corpus size (300 points) the
    search keeps every point it reaches, so it returns the exact top 10; EF 10 cannot do better."""
    from harness.memory.calibrate import unfiltered_recall
    from tests.memory_corpus import clustered_corpus, unit_vectors

    units, vecs, _ = clustered_corpus(6, 50, seed=2)
    got = unfiltered_recall(units, vecs, unit_vectors(10, seed=8), efs=(10, 400))
    assert got["redis_ef400"] == 1.0 and 0 < got["redis_ef10"] <= 1.0
