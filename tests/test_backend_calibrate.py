"""The realistic range's calibration on real text (bench/backends/calibrate.py)."""

from __future__ import annotations

import numpy as np
import pytest


def test_chat_corpus_is_chitchat_text_cut_by_the_study_chunker_with_held_out_questions():
    from harness.data.synth import chat_conversations
    from bench.backends.calibrate import chat_corpus
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
    from bench.backends.calibrate import MARGINS, thresholds

    real = {"nn_cosine_median": 0.653, "nn_cosine_above_095": 0.0023, "distinct_queries": 180, "queries": 180,
            "unfiltered_recall": {"redis_ef10": 0.78, "redis_ef100": 0.9878}}
    t = thresholds(real)
    assert t["nn_cosine_median_max"] == round(0.653 + MARGINS["nn_cosine_median"], 2)
    assert t["nn_cosine_above_095_max"] == round(0.0023 + MARGINS["nn_cosine_above_095"], 2)
    assert t["distinct_queries_min"] == round(1.0 - MARGINS["distinct_queries"], 2)
    assert t["unfiltered_recall"] == {"config": "redis_ef100", "min": round(0.9878 - MARGINS["unfiltered_recall"], 2)}


def minilm_recorded() -> dict:
    from bench.backends.cases import default_stage

    (entry,) = [r for r in default_stage()["realism"]["recorded"] if r["encoder_id"].startswith("minilm:")]
    return entry


def test_minilm_keeps_its_recorded_thresholds_for_its_encoder_id(tmp_path):
    """MiniLM's issue-11 numbers, unchanged, recorded under the id of the encoder the stage loads."""
    from bench.backends.calibrate import for_encoder
    from harness.memory.encoder import Encoder
    from bench.backends.cases import default_stage
    from bench.backends.calibrate import stage_realism

    entry = minilm_recorded()
    enc = Encoder("minilm", cache_dir=tmp_path / "emb")
    assert entry["encoder_id"] == enc.id
    assert {k: v for k, v in entry.items() if k != "encoder_id"} == {
        "nn_cosine_median_max": 0.70, "nn_cosine_above_095_max": 0.05, "distinct_queries_min": 0.90,
        "unfiltered_recall": {"config": "redis_ef100", "min": 0.94}}
    got = stage_realism(default_stage(), enc)
    assert got["source"] == "recorded" and got["encoder_id"] == enc.id
    assert got["thresholds"] == {k: v for k, v in entry.items() if k != "encoder_id"}
    assert enc.stats.embedded == 0 and enc._model is None  # nothing calibrated, no model loaded
    # a recorded entry for another id is not used
    other = for_encoder(enc, {"chunks": 20, "queries": 5, "pool": 20}, [{**entry, "encoder_id": "bge:x"}],
                        cache_dir=tmp_path / "cal", recall=False)
    assert other["source"] == "calibrated"


def test_the_stage_thresholds_pass_real_text_and_fail_near_duplicates():
    """The thresholds in conf/stage/backends.yaml against the measurement they came from and a templated corpus."""
    from bench.backends.diagnostics import corpus_diagnostics, realism_checks

    real = minilm_recorded()
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
    from bench.backends.calibrate import unfiltered_recall
    from tests.memory_corpus import clustered_corpus, unit_vectors

    units, vecs, _ = clustered_corpus(6, 50, seed=2)
    got = unfiltered_recall(units, vecs, unit_vectors(10, seed=8), efs=(10, 400))
    assert got["redis_ef400"] == 1.0 and 0 < got["redis_ef10"] <= 1.0


CAL = {"chunks": 200, "queries": 30, "seed": 0, "pool": 200}


def test_the_realistic_range_follows_the_encoder_and_is_cached_by_encoder_id(tmp_path):
    """Two encoders on the same real text: MiniLM (a text encoder) and HashEncoder (pseudo-random unit
    vectors). Their nearest-neighbour cosines differ, so do their thresholds; each is cached under its id."""
    from bench.backends.calibrate import MARGINS, cache_path, for_encoder
    from harness.memory.encoder import Encoder, HashEncoder
    from bench.backends.diagnostics import realism_checks

    minilm, hashed = Encoder("minilm", cache_dir=tmp_path / "emb"), HashEncoder()
    a = for_encoder(minilm, CAL, cache_dir=tmp_path / "cal", recall=False)
    b = for_encoder(hashed, CAL, cache_dir=tmp_path / "cal", recall=False)
    assert a["source"] == b["source"] == "calibrated"
    assert (a["encoder_id"], b["encoder_id"]) == (minilm.id, hashed.id) and a["cache"] != b["cache"]
    ma, mb = a["measurement"], b["measurement"]
    assert ma["chunks"] == mb["chunks"] == 200 and ma["conversations"] == mb["conversations"]  # the same text
    # MiniLM on real chat: neighbours are related text (issue 11 measured a median of 0.653 in a 3,000 pool)
    assert 0.45 < ma["nn_cosine_median"] < 0.8
    # random unit vectors in 384-d: cosines ~ N(0, 1/384); the max of 199 is ~2.7 sd, about 0.14
    assert 0.08 < mb["nn_cosine_median"] < 0.22
    for r in (a, b):
        m = r["measurement"]
        assert r["thresholds"]["nn_cosine_median_max"] == round(m["nn_cosine_median"] + MARGINS["nn_cosine_median"], 2)
        assert "unfiltered_recall" not in r["thresholds"]  # not measured here (no server)
    assert a["thresholds"]["nn_cosine_median_max"] - b["thresholds"]["nn_cosine_median_max"] > 0.25
    # each range fits its own encoder's real text; MiniLM's real text fails hash's range (what one shared range does)
    assert all(realism_checks(ma, a["thresholds"]).values()) and all(realism_checks(mb, b["thresholds"]).values())
    assert realism_checks(ma, b["thresholds"])["nn_cosine_median"] is False
    # cached by encoder id: a new MiniLM encoder with an empty embedding cache reads the file, embeds nothing
    again = Encoder("minilm", cache_dir=tmp_path / "emb2")
    c = for_encoder(again, CAL, cache_dir=tmp_path / "cal", recall=False)
    assert c["source"] == "cache" and c["thresholds"] == a["thresholds"] and again.stats.embedded == 0
    assert for_encoder(HashEncoder(salt="other"), CAL, cache_dir=tmp_path / "cal", recall=False)["cache"] != b["cache"]
    assert cache_path(minilm.id, {**a["params"], "chunks": 100}, tmp_path / "cal") != cache_path(
        minilm.id, a["params"], tmp_path / "cal")  # other parameters, another calibration


@pytest.mark.services
def test_a_stage_calibration_includes_the_recall_threshold(tmp_path):
    from bench.backends.calibrate import MARGINS, for_encoder
    from harness.memory.encoder import HashEncoder

    r = for_encoder(HashEncoder(), CAL, cache_dir=tmp_path, recall=True)
    got = r["measurement"]["unfiltered_recall"]
    assert 0 < got["redis_ef10"] <= got["redis_ef100"] + 0.05 and 0 < got["redis_ef100"] <= 1.0
    assert r["thresholds"]["unfiltered_recall"] == {
        "config": "redis_ef100", "min": round(got["redis_ef100"] - MARGINS["unfiltered_recall"], 2)}


def backends_folder(tmp_path, name, diag):
    import json
    from types import SimpleNamespace

    d = tmp_path / name
    d.mkdir()
    (d / "diagnostics.json").write_text(json.dumps(diag))
    return SimpleNamespace(path=str(d), name=name, info={"kind": "backends"})


def test_realistic_uses_the_thresholds_of_the_folders_own_encoder(tmp_path):
    from analysis.backends import realistic

    measures = {"nn_cosine_median": 0.80, "nn_cosine_above_095": 0.01, "distinct_queries": 180, "queries": 180,
                "unfiltered_recall": {"redis_ef100": 0.97}}
    bge_range = {"nn_cosine_median_max": 0.86, "nn_cosine_above_095_max": 0.06, "distinct_queries_min": 0.9,
                 "unfiltered_recall": {"config": "redis_ef100", "min": 0.93}}
    bge = {"encoder_id": "bge:BAAI/bge-small-en-v1.5:cls:seq512:fp32:norm:0123456789abcdef"}
    ok, why = realistic(backends_folder(tmp_path, "a", {**measures, "encoder": bge, "thresholds": bge_range,
                                                        "thresholds_encoder": bge["encoder_id"], "realistic": True}))
    assert ok and "bge:" in why
    # the same corpus against MiniLM's range (median 0.80 > 0.70) would have suppressed the figures
    ok, why = realistic(backends_folder(tmp_path, "b", {**measures, "encoder": bge, "thresholds": minilm_recorded(),
                                                        "thresholds_encoder": bge["encoder_id"]}))
    assert not ok and "nn_cosine_median" in why
    # a range calibrated with another encoder never counts
    ok, why = realistic(backends_folder(tmp_path, "c", {**measures, "encoder": bge, "thresholds": bge_range,
                                                        "thresholds_encoder": "minilm:x"}))
    assert not ok and "not this folder's encoder" in why
    # folders from before per-encoder ranges were checked against MiniLM's: fine for MiniLM, not for bge
    ok, why = realistic(backends_folder(tmp_path, "d", {**measures, "encoder": bge, "thresholds": bge_range}))
    assert not ok and "rerun the stage" in why
    old = {**measures, "nn_cosine_median": 0.62, "encoder": {"encoder_id": "minilm:abc"},
           "thresholds": {k: v for k, v in minilm_recorded().items() if k != "encoder_id"}}
    assert realistic(backends_folder(tmp_path, "e", old))[0] is True
