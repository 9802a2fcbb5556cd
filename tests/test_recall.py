"""Retrieval recall joined to answers: each run gets the recall its own searches got against exact search,
with only the approximate dense part of the index replaced."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as hst
from scipy.stats import norm

from analysis import conclusions as C
from analysis import run as A
from tests.analysis_fixtures import JUDGE, Stage, run_id, sha256_file
from tests.test_analysis import csv, holm_by_hand, prereg_file, row
from tests.trust_fixtures import (ERRATA, LME, RULE_KINDS, TYPES, _borderline, _brute_verdicts,
                                  _exact_mcnemar_power, _tiny_hypothesis, analyse, comparison, judge_file,
                                  lme_questions, main_stage, org_stage, second_judge, stage_with_hybrid_wrong)


def test_exact_index_config_replaces_only_the_approximate_dense_part():
    from harness.run.replay import exact_index_config

    pg = {"name": "pgvector", "dim": 384, "ef_search": 40, "iterative_scan": "off", "table": None}
    assert exact_index_config(pg) == {"name": "exact", "dim": 384}
    hy = {"name": "hybrid", "depth": 50, "rrf_k": 60, "lexical": "fts5", "dense": {"name": "redis_qe", "m": 16}}
    got = exact_index_config(hy)
    assert got["dense"] == {"name": "exact", "dim": 384} and got["depth"] == 50 and hy["dense"]["name"] == "redis_qe"
    assert exact_index_config({"name": "fts5", "path": None}) == {"name": "fts5", "path": None}


def test_each_run_gets_the_recall_its_own_searches_got_against_exact_search(tmp_path):
    """Two runs whose logged searches returned the exact top-k, and two whose search missed units (as a
    post-filtering index truncates): recall per run by hand, and accuracy beside it per condition."""
    from harness.data.synth import write
    from harness.memory.space import space_from_config
    from harness.memory.views import View
    from harness.run.context import LME_AGENT
    from harness.data.longmemeval import load
    from harness.memory.units import units_of_sessions

    data = write(tmp_path / "data", seed=0, size="tiny")
    qs = load(data)
    qids = sorted(qs)[:2]
    space = space_from_config({"name": "fts5"})  # lexical: no encoder to load; bm25 scoring is its exact search
    for q in qids:
        space.add_units(units_of_sessions(qs[q].sessions, q, lambda sid: LME_AGENT, lambda agent: "private"))
    pre = prereg_file(tmp_path)
    st = Stage(tmp_path / "runs", "smoke", prereg_sha=sha256_file(pre),
               data={"path": str(data), "sha256": sha256_file(data), "kind": "synth"},
               config_extra={"index": {"name": "fts5", "path": None}, "encoder": {"name": "minilm", "path": None,
                             "batch_size": 32, "device": "cpu"}})
    expected = {}
    for cond, drop in (("tool_bm25", 0), ("tool_hybrid", 3)):  # tool_hybrid's searches lost 3 of 8 units
        for q, ok in zip(qids, (True, False)):
            view = {"org": q, "agent": LME_AGENT, "scope": "own", "since": None, "until": None}
            query = qs[q].question
            exact = [[r.unit.uid, r.unit.owner] for r in space.search(query, View(q, LME_AGENT, "own"), k=8,
                                                                      scoring="bm25")]
            assert len(exact) == 8
            log = {"agent": LME_AGENT, "k": 8, "kind": "search", "query": query, "scoring": "bm25",
                   "units": exact[: len(exact) - drop], "view": view, "since": None, "until": None,
                   "session": None, "round": None, "window": None}
            st.add(cond, q, correct=ok, tools=[{"log": log}], tool_calls=1, module="tool_bm25")
            expected[(cond, q)] = (8 - drop) / 8
    st.write()
    space.close()
    out = analyse(tmp_path, pre)  # replay=none
    assert A.main([f"runs={tmp_path / 'runs'}", f"out={tmp_path / 'r2'}", f"prereg={pre}", "replay=all"]) == 0
    per_run = csv(tmp_path / "r2", "retrieval_recall_runs.csv")
    for (cond, q), rec in expected.items():
        assert row(per_run, condition=cond, run_id=run_id(cond, q))["recall"] == pytest.approx(rec)
    s = csv(tmp_path / "r2", "retrieval_recall.csv")
    hy = row(s, condition="tool_hybrid")
    assert hy["mean_recall"] == pytest.approx(5 / 8) and hy["index"] == "fts5" and hy["accuracy_pct"] == 50
    assert hy["n_partial_recall"] == 2 and row(s, condition="tool_bm25")["n_full_recall"] == 2
    assert (tmp_path / "r2" / "figure_recall.png").exists()
    # replay=none (the default for a LongMemEval folder is org only): nothing compared, and the report says why
    assert csv(out, "retrieval_recall.csv").empty
    assert "not compared: replay=none" in (out / "report.md").read_text()
