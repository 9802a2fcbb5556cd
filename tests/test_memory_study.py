"""The backend study and the benchmark run end to end on a small generated corpus."""

from __future__ import annotations

import csv
import json

import pytest


def rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.services
def test_study_runs_on_a_tiny_generated_corpus(tmp_path):
    from harness.data.synth import write
    from harness.memory.study import CASES, configs, run

    data = write(tmp_path / "data", 0, "tiny")
    out = tmp_path / "study"
    res = run(data, out, histories=8, encoder_name="hash", seed=1, delta_rounds=0)
    for name in ("recall.csv", "per_query.csv", "pgvector_plans.csv", "footprint.csv", "lexical.csv", "fanout.csv",
                 "meta.json"):
        assert (out / name).exists(), name
    summary = rows(out / "recall.csv")
    ids = {c.id for c in configs("x")}
    assert {(r["config"], r["case"]) for r in summary} == {(c, k) for c in ids for k in CASES}
    for r in summary:
        assert r["queries"] == "8"
        if r["config"] == "exact":
            assert float(r["recall_at_10"]) == 1.0 and r["short_lists"] == "0"
        assert 0.0 <= float(r["recall_at_10"]) <= 1.0
        assert float(r["local_pred"]) <= 10
    one = {r["config"]: r for r in summary if r["case"] == "one"}
    assert float(one["exact"]["selectivity"]) == pytest.approx(1 / 8, rel=0.5)
    assert float(one["exact"]["global_pred"]) == pytest.approx(40 * float(one["exact"]["selectivity"]), abs=0.01)
    plans = rows(out / "pgvector_plans.csv")
    assert len(plans) == 4 * 8 and all(p["plan"] for p in plans)
    fan = rows(out / "fanout.csv")
    assert [int(r["agents"]) for r in fan] == [1, 4, 8]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["encoder"]["study_encoder"] is False and meta["histories"] == 8
    assert meta["versions"]["pgvector"].startswith("0.8")
    assert res["footprint"][0]["backend"] == "exact"


@pytest.mark.services
def test_write_path_delta_is_measured(tmp_path):
    from harness.memory.bench import bench_delta

    d = bench_delta("minilm", 3, "redis_qe")
    assert d["rounds"] == 3
    assert 0 < d["insert_dense_p50_ms"] < d["delta_p50_ms"]
    assert d["embed_p50_ms"] > 0 and d["lexical_views_per_round"] == 3
