"""The backend study end to end on a small S-shaped corpus with real-text filler: one stage folder
that the analysis reads, cases that test what they claim, and a dry run that does nothing."""

from __future__ import annotations

import csv
import json
import sys
import subprocess
from pathlib import Path

import pytest

from bench.backends.fanout import fanout_steps
from tests import cli


def rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


SMALL = ["exact", "redis_ef10", "redis_ef100", "redis_ef10_batches", "redis_adhoc_bf", "vset_q8", "vset_q8_fef",
         "pgvector_off", "pgvector_relaxed_btree", "pgvector_relaxed_overfetch40"]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    from harness.data.synth import write
    from bench.backends.cases import default_stage
    from bench.backends.study import run

    tmp = tmp_path_factory.mktemp("study")
    data = write(tmp / "data", 0, "xs")
    stage = {**default_stage(), "only": SMALL, "builds": 2, "delta_rounds": 0}
    out = tmp / "runs" / "backends" / "small"
    res = run(data, out, histories=6, encoder_name="hash", seed=1, stage=stage)
    return out, res


@pytest.mark.services
def test_stage_folder_validates_and_names_server_versions(study):
    import psycopg
    import redis

    from harness import services
    from bench.backends.cases import build_seed
    from harness.records import RunDir

    out, _ = study
    info = RunDir(out).stage()  # through the record schema
    assert info.kind == "backends" and info.plan["builds"] == 2
    assert info.plan["build_seeds"] == [build_seed(1, 0), build_seed(1, 1)]
    s = services.settings()
    r = redis.Redis.from_url(s.redis_url)
    assert info.versions["redis_server"] == r.info("server")["redis_version"]  # the server's, not redis-py's
    r.close()
    with psycopg.connect(s.pg_dsn) as c:
        assert info.versions["pgvector"] == c.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()[0]
        assert info.versions["postgresql"] == c.execute("SHOW server_version").fetchone()[0]
    assert info.versions["redisearch"] and info.versions["sqlite"] and info.versions["encoder"] == "hash:384:nosalt"
    for name in ("recall.csv", "per_query.csv", "footprint.csv", "lexical.csv"):
        assert all(r_["engine"] for r_ in rows(out / name)), name
    fan = rows(out / "fanout.csv")
    assert fan and all(r_["engine_dense"] and r_["engine_lexical"] for r_ in fan)


@pytest.mark.services
def test_cases_test_what_they_claim(study):
    from bench.backends.cases import default_stage, parse_configs

    out, res = study
    cfgs = {c.id: c for c in parse_configs(default_stage()["configs"]) if c.id in SMALL}
    summary = rows(out / "recall.csv")
    assert {(r["config"], r["case"]) for r in summary} == {(c.id, k) for c in cfgs.values() for k in c.cases}
    by = {(r["config"], r["case"]): r for r in summary}
    for r in summary:
        lo, mean, hi = float(r["recall_min"]), float(r["recall_at_10"]), float(r["recall_max"])
        assert 0 <= lo <= mean <= hi <= 1
        assert r["builds"] == ("1" if r["config"] == "exact" else "2")
        if r["config"] == "exact":
            assert mean == 1.0 and r["short_lists"] == "0"
    # the unfiltered case has no predicate at all: it admits every unit, the org case too
    assert float(by[("exact", "unfiltered")]["selectivity"]) == 1.0
    assert float(by[("exact", "one")]["selectivity"]) == pytest.approx(1 / 6, rel=0.6)
    # Redis: the policy the engine ran, read from FT.PROFILE per query
    assert by[("redis_ef10", "unfiltered")]["plans"] == "HNSW x12"
    assert by[("redis_ef10_batches", "one")]["plans"] == "BATCHES x12"
    assert by[("redis_adhoc_bf", "public50")]["plans"] == "ADHOC_BF x12"
    assert all(r["case"] != "unfiltered" for r in summary if r["config"] in ("redis_ef10_batches", "redis_adhoc_bf"))
    # brute force under a filter is exact; a higher search width cannot lose recall on the same graph
    for case in ("one", "public10", "public50", "all"):
        assert float(by[("redis_adhoc_bf", case)]["recall_at_10"]) == 1.0
    # server-side time beside the client's: pgvector per statement, Redis from commandstats
    for cfg in ("pgvector_off", "redis_ef10"):
        assert 0 < float(by[(cfg, "one")]["server_p50_ms"]) < float(by[(cfg, "one")]["p95_ms"]) * 5
    pq = [r for r in rows(out / "per_query.csv") if r["config"] == "pgvector_relaxed_btree"]
    assert pq and all(r["plan"] and float(r["server_ms"]) > 0 for r in pq)
    assert {r["build"] for r in pq} == {"0", "1"}


@pytest.mark.services
def test_footprint_lexical_side_fanout_and_diagnostics(study):
    out, res = study
    fp = {r["backend"]: r for r in rows(out / "footprint.csv")}
    assert int(fp["pgvector"]["owner_btree_bytes"]) > 0  # taken after every index exists
    assert int(fp["pgvector"]["hnsw_index_bytes"]) > 0 and fp["pgvector"]["storage"] == "disk"
    assert fp["pgvector"]["fillfactor"] == "50"  # the heap's room for in-place visibility changes, said
    lex = {r["case"]: r for r in rows(out / "lexical.csv")}
    assert set(lex) == {"unfiltered", "one", "public10", "public50", "all"}
    assert lex["one"]["views_built"] == "6" and lex["all"]["views_built"] == "1"
    # agents whose views admit the same units share one per-view index
    assert int(lex["public50"]["views_built"]) == 6 - 3 + 1
    fan = rows(out / "fanout.csv")
    assert [int(r["agents"]) for r in fan] == fanout_steps(6) == [1, 6]  # 1, 10, 50, all: capped at 6 agents
    assert all(float(r["redis_per_agent_p50_ms"]) > 0 and float(r["fts5_owner_in_p50_ms"]) > 0 for r in fan)
    d = res["diagnostics"]
    assert d["queries"] == 6 and 0 < d["nn_pool"] <= 3000 and set(d["checks"]) >= {"nn_cosine_median"}
    assert d["wall_s"]["total"] > 0 and "unfiltered" not in d["unfiltered_recall"]


@pytest.mark.services
def test_survivors_against_proposition_2(study):
    """survivors.csv: pgvector with iterative scan off post-filters K' = ef_search candidates; the other
    engines say how they filter instead of reporting survivors they do not have."""
    out, res = study
    sv = {(r["config"], r["case"]): r for r in rows(out / "survivors.csv")}
    rec = {(r["config"], r["case"]): r for r in rows(out / "recall.csv")}
    assert set(sv) == set(rec) and all(r["engine"] for r in sv.values())
    pq = [r for r in rows(out / "per_query.csv") if r["config"] == "pgvector_off"]
    for r in pq:  # post-filter exactly when the plan is the HNSW scan; survivors only then
        post = r["case"] != "unfiltered" and "hnsw" in r["plan"]
        assert (r["filter"] == "post-filter") is post and (r["survivors"] != "") is post
        if post:
            assert r["candidates"] == "40" and 0 <= int(r["survivors"]) <= 40
            assert int(r["results"]) == min(10, int(r["survivors"]))
    # at 587 rows PostgreSQL sorts a sequential scan (exact): reported as a pre-filter, no survivors
    assert {r["filter"] for r in pq if r["case"] == "one"} == {"pre-filter"}
    for case in ("one", "public10", "public50", "all"):
        r = sv[("pgvector_off", case)]
        assert r["k_prime"] == "40" and r["rows"] == "12"  # 6 queries x 2 builds
        assert float(r["global_pred"]) == pytest.approx(40 * float(r["selectivity"]), abs=1e-3)
        assert 0 <= float(r["local_pred"]) <= 40
    assert sv[("pgvector_off", "unfiltered")]["filter"] == "no filter x12"
    assert float(sv[("exact", "unfiltered")]["local_pred"]) == 40.0  # every unit admitted
    assert sv[("redis_adhoc_bf", "one")]["filter"] == "pre-filter x12" and sv[("redis_adhoc_bf", "one")]["survivors"] == ""
    assert sv[("vset_q8", "one")]["filter"].startswith("in-search filter")
    from bench.backends.cases import Config
    from harness.memory.views import View
    from bench.backends.engines import filter_mode

    one = View("bench", "h000", "own")
    hnsw = "Index Scan using study1_pgvector_7_hnsw on study1_pgvector_7"
    assert filter_mode(Config("a", "pgvector", query={"iterative_scan": "off"}), one, hnsw) == "post-filter"
    assert filter_mode(Config("b", "pgvector", query={"iterative_scan": "relaxed_order", "overfetch": 40}), one, hnsw) == "iterative scan"
    assert filter_mode(Config("c", "pgvector", query={"iterative_scan": "relaxed_order"}), one, hnsw) == "iterative scan"
    assert filter_mode(Config("d", "pgvector"), one, "Bitmap Heap Scan on study1_pgvector_7") == "pre-filter"
    # the 50% split is the 10% split's graph with visibility changed in place, except Redis (rebuilt)
    how = {(b["family"], b["build"], b["split"]): b["how"] for b in res["diagnostics"]["builds"]}
    assert how[("pgvector", 1, "p50")] == "visibility updated in place"
    assert how[('vectorset:{"quant": "Q8"}', 0, "p50")] == "visibility updated in place"
    assert how[("redis_qe", 0, "p50")] == "built"
    assert all(b["hot"] == b["updated"] > 0 for b in res["diagnostics"]["builds"] if "hot" in b)


@pytest.mark.services
def test_make_analyze_draws_figures_2_and_7_from_the_stage_folder(study, tmp_path):
    out, res = study
    assert res["diagnostics"]["realistic"] is True  # hash vectors are spread; the check itself is tested below
    # the range is the stage encoder's own, calibrated on real text with it, and the folder says so
    diag = res["diagnostics"]
    assert diag["thresholds_encoder"] == diag["encoder"]["encoder_id"] == "hash:384:nosalt"
    assert diag["thresholds_source"] in ("calibrated", "cache")
    cal = json.loads((out / "calibration.json").read_text())
    assert cal["encoder_id"] == "hash:384:nosalt" and cal["thresholds"] == diag["thresholds"]
    assert cal["measurement"]["source"] == "chitchat-dataset" and cal["params"]["chunks"] == 3000
    assert diag["thresholds"]["nn_cosine_median_max"] < 0.4  # random vectors' range, not MiniLM's 0.70
    proc = cli.run([sys.executable, "-m", "analysis.run", f"runs={out}", f"out={tmp_path / 'r'}",
                           "resamples=50"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    key = f"{out.parent.name}_{out.name}"
    assert (tmp_path / "r" / f"figure2_{key}.png").stat().st_size > 10_000
    assert (tmp_path / "r" / f"figure7_{key}.png").stat().st_size > 10_000
    paper = rows(tmp_path / "r" / "backends_paper.csv")
    assert any(p["quantity"].startswith("pgvector default, one agent: recall") and p["paper (Section 5.4)"] == "0.291"
               for p in paper)
    assert "the paper's values are the paper's" in (tmp_path / "r" / "report.md").read_text()
    sv = {(r["config"], r["case"]): r for r in rows(tmp_path / "r" / "backends_survivors.csv")}
    assert sv[("redis_adhoc_bf", "one")]["survivors"] == "pre-filter"  # said, not a number it does not have
    assert set(sv) == {(r["config"], r["case"]) for r in rows(out / "survivors.csv")}
    assert "Survivors of the filter against Proposition 2" in (tmp_path / "r" / "report.md").read_text()


def test_diagnostics_flag_a_templated_corpus():
    """Near-duplicate chunks (the old templated filler) fail the realistic-range check."""
    import numpy as np

    from bench.backends.diagnostics import diagnostics, nn_cosines

    rng = np.random.default_rng(0)
    base = rng.standard_normal((20, 384)).astype(np.float32)
    dup = np.repeat(base, 10, axis=0) + 0.01 * rng.standard_normal((200, 384)).astype(np.float32)
    nn = nn_cosines(dup, 200, 0)
    x = dup / np.linalg.norm(dup, axis=1, keepdims=True)
    sims = x @ x.T
    np.fill_diagonal(sims, -np.inf)
    assert np.allclose(np.sort(nn), np.sort(sims.max(axis=1)), atol=1e-5)

    class Q:
        def __init__(self, t):
            self.question = t

    stage = {"nn_pool": 200, "realism": {"nn_cosine_median_max": 0.9, "nn_cosine_above_095_max": 0.2,
                                           "distinct_queries_min": 0.5}}
    d = diagnostics(dup, [Q("a"), Q("a"), Q("b")], [], stage, 0)
    assert d["realistic"] is False and d["checks"]["nn_cosine_median"] is False
    d = diagnostics(rng.standard_normal((200, 384)).astype(np.float32), [Q("a"), Q("b")], [], stage, 0)
    assert d["realistic"] is True


def test_dry_run_prints_the_plan_and_expected_time_and_does_nothing(tmp_path):
    proc = cli.run([sys.executable, "-m", "harness.run", "stage=backends", "dry_run=true",
                           f"runs_dir={tmp_path / 'runs'}", f"cache_dir={tmp_path / 'cache'}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "expected time" in proc.stdout and "pgvector_relaxed_overfetch40" in proc.stdout
    assert "180 histories" in proc.stdout
    assert not (tmp_path / "runs").exists() and not (tmp_path / "cache").exists()


@pytest.mark.services
def test_write_path_delta_on_a_loaded_index(minilm_encoder):
    from harness.memory.backends.base import make_backend
    from bench.backends.measure import delta_on_index

    b = make_backend("exact")
    d = delta_on_index(b, minilm_encoder, "h000", 3, "test")
    assert d["rounds"] == 3 and len(b) == 0  # the probe units are removed again
    assert 0 < d["insert_p50_ms"] < d["delta_p50_ms"] and d["embed_p50_ms"] > 0


def test_fanout_steps_are_the_papers_store_counts():
    assert fanout_steps(180) == [1, 10, 50, 180]  # Figure 7
    assert fanout_steps(30) == [1, 10, 30] and fanout_steps(1) == [1]


ONLY_IN_PROCESS = '''
import json, sys
from pathlib import Path
from harness.data.synth import write
from bench.backends.cases import default_stage
from bench.backends.study import run

tmp = Path(sys.argv[1])
stage = {**default_stage(), "configs": [{"id": "exact", "backend": "exact"}, {"id": "mine", "backend": "toyplug/exact"}],
         "builds": 1, "delta_rounds": 0, "fanout": False,
         "realism": {"nn_cosine_median_max": 0.99, "nn_cosine_above_095_max": 1.0, "distinct_queries_min": 0.0,
                     "unfiltered_recall": {"config": "redis_ef100", "min": 0.94}}}
res = run(write(tmp / "data", 0, "xs"), tmp / "runs" / "backends" / "mine", histories=4, encoder_name="hash", seed=1,
          stage=stage)
print(json.dumps({"versions": sorted(json.loads((tmp / "runs" / "backends" / "mine" / "stage.json").read_text())["versions"]),
                  "realistic": res["diagnostics"]["realistic"]}))
'''
TOY_EXACT = '''
from harness.memory.backends.base import register
from harness.memory.backends.exact import ExactBackend


@register("toyplug/exact")
class Mine(ExactBackend):
    """Exact search under a plugin's name: a new in-process backend."""
'''


def test_a_study_of_in_process_backends_runs_with_no_database_listening_and_draws_figure_2(tmp_path):
    """Only the chosen backends are asked for their engine's version: with PostgreSQL and Redis pointed at a
    port nobody listens on, exact search and a new in-process backend run the study (no traceback), and
    Figure 2 is drawn for them without a Redis configuration beside them (the corpus check that needs one
    says it was not checked)."""
    import os

    plug = tmp_path / "plug" / "toyplug"
    plug.mkdir(parents=True)
    (plug / "__init__.py").write_text("")
    (plug / "backend.py").write_text(TOY_EXACT)
    env = {**os.environ, "MEMSPACE_PG_PORT": "9", "MEMSPACE_REDIS_PORT": "9", "MEMSPACE_PLUGINS": "toyplug.backend",
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "plug"), str(Path(__file__).resolve().parents[1])])}
    p = subprocess.run([sys.executable, "-c", ONLY_IN_PROCESS, str(tmp_path)], env=env, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert "postgresql" not in got["versions"] and "redis_server" not in got["versions"], got
    assert "sqlite" in got["versions"] and got["realistic"] is True  # the lexical side's engine, asked: it ran
    out = tmp_path / "r"
    ana = subprocess.run([sys.executable, "-m", "harness.cli.analyze", f"runs={tmp_path / 'runs'}", f"out={out}",
                          "resamples=50"], env=env, capture_output=True, text=True, timeout=600)
    assert ana.returncode == 0, ana.stderr[-3000:] + ana.stdout[-2000:]
    assert (out / "figure2_backends_mine.png").stat().st_size > 10_000
    assert "not checked: unfiltered recall of redis_ef100 (not run in this stage)" in (out / "report.md").read_text() \
        + ana.stdout + ana.stderr


def test_the_backend_studys_services_row_names_the_fan_out_sides_server():
    """The fan-out side runs on the Redis query engine whatever configurations are chosen: with only the
    in-process exact backend chosen, the manifest's services row still names Redis while that side runs,
    and says 'in process, no server' only when it does not (stage.fanout=false)."""
    from omegaconf import OmegaConf

    from bench.backends.cases import parse_configs
    from bench.backends.study import service_parts
    from harness.run import fidelity

    exact = parse_configs([{"id": "exact", "backend": "exact"}])
    assert [svc for svc, _ in service_parts(exact, {"fanout": True})] == ["redis"]
    assert service_parts(exact, {"fanout": False}) == []
    cfg = OmegaConf.create({"index": {"name": "exact"}})
    row = next(r for r in fidelity.services_rows(cfg, {"memory_space"}, study="backends", needed=[])
               if r.key == "services")
    assert row.stage == "in process, no server" and row.status == "not used"
    row = next(r for r in fidelity.services_rows(cfg, {"memory_space"}, study="backends",
                                                 needed=service_parts(exact, {"fanout": True}))
               if r.key == "services")
    assert "redis" in row.stage and row.status != "not used"
    # the Redis memory cap is compared because the backend study's paper envelope names one, not by its name
    assert "redis_maxmemory" in row.paper
    row = next(r for r in fidelity.services_rows(cfg, {"memory_space"}, study="agents",
                                                 needed=service_parts(exact, {"fanout": True}))
               if r.key == "services")
    assert "redis" in row.stage and "redis_maxmemory" not in row.paper and "REDIS_MAXMEMORY" not in row.detail


def test_a_chosen_backend_whose_server_does_not_answer_stops_with_its_name_not_a_traceback():
    """engine_versions asks the chosen backends' servers; one that does not answer is an environment failure
    naming the backend and the fix (exit 3 through harness.failures), never a redis-py traceback."""
    import os

    code = ("from bench.backends.engines import engine_versions\n"
            "from harness.failures import EnvironmentFailure\n"
            "try:\n    engine_versions(['exact', 'redis_qe'])\n"
            "except EnvironmentFailure as e:\n    print('ENV', e.what)\n")
    env = {**os.environ, "MEMSPACE_REDIS_PORT": "9"}
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                       cwd=Path(__file__).resolve().parents[1])
    assert p.returncode == 0 and p.stdout.startswith("ENV backend redis_qe's server does not answer"), \
        p.stdout + p.stderr[-2000:]


def test_the_stage_json_services_row_is_asked_of_the_servers_the_study_started(tmp_path):
    """`make run STAGE=backends` with no server running: the study starts the Redis its fan-out side needs
    before its manifest asks the servers their versions, so stage.json's services row names that server's
    version (it said 'unreachable' beside a recorded redis_server version), and the study stops it after."""
    import os
    import socket

    from harness import services as svc

    def free_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    redis_port, pg_port = free_port(), free_port()
    env = {**os.environ, "MEMSPACE_REDIS_PORT": str(redis_port), "MEMSPACE_PG_PORT": str(pg_port),
           "MEMSPACE_SERVICES_DIR": str(tmp_path / "svc")}
    p = subprocess.run([sys.executable, "-m", "harness.run", "stage=backends", "stage.only=[exact]", "stage.builds=1",
                        "stage.delta_rounds=0", "stage.histories=4", "stage.lexical=false", "data=synth_tiny",
                        f"runs_dir={tmp_path / 'runs'}"], env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    info = json.loads((tmp_path / "runs" / "backends" / "backends" / "stage.json").read_text())
    row = next(r for r in info["fidelity"]["rows"] if r["key"] == "services")
    assert "unreachable" not in row["stage"] and info["versions"]["redis_server"] in row["stage"], row
    assert svc.redis_status(svc.Settings(redis_port=redis_port, pg_port=pg_port, root=tmp_path / "svc", pg_osuser="nobody")) == \
        {"running": False, "port": redis_port}  # what the study started, it stopped
