"""Environment failures stop a stage instead of burning it; run failures are recorded.

Each test drives the real command line (`python -m harness.run`) against a scripted
upstream or real services, then fixes the cause and runs the same command again: every run
must end up recorded exactly once, with nothing counted wrong that was the environment's
fault.
"""

import json
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from harness import services as svc
from harness.records.ledger import read_ledger
from tests import cli
from tests.fake_model import FakeModel
from tests.test_driver import GROUPS, check_accounts, cmd, records, stage_dir


def run(fake, tmp, *extra, timeout=300):
    return cli.run(cmd(fake, tmp, *extra))  # in this process (tests/cli.py)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_missing_key_of_any_provider_stops_before_any_run(tmp_path, monkeypatch):
    monkeypatch.delenv("ACME_LLM_KEY", raising=False)
    with FakeModel() as fake:
        res = run(fake, tmp_path, "model.api_key_env=ACME_LLM_KEY", "model.name=acme")
        assert res.returncode == 3, res.stderr
        assert "ACME_LLM_KEY" in res.stderr and "preflight key" in res.stderr
        assert fake.requests == []  # nothing was sent
        assert not (stage_dir(tmp_path) / "records").exists() or records(tmp_path) == {}


def test_unknown_provider_is_refused_with_the_known_ones(tmp_path):
    with FakeModel() as fake:
        res = run(fake, tmp_path, "model.provider=acme_cloud")
        assert res.returncode == 3
        assert "acme_cloud" in res.stderr and "openai_compatible" in res.stderr


def test_unreachable_upstream_stops_at_preflight(tmp_path):
    with FakeModel() as fake:
        port = free_port()  # nothing listens there
        argv = [a if not a.startswith("model.base_url=") else f"model.base_url=http://127.0.0.1:{port}/v1"
                for a in cmd(fake, tmp_path, "model.max_retries=1")]
        res = cli.run(argv)
    assert res.returncode == 3, res.stderr
    assert "cannot reach" in res.stderr and str(port) in res.stderr
    assert records(tmp_path) == {}
    # the preflight call is in the ledger under its own role
    ledger = read_ledger(stage_dir(tmp_path) / "ledger.jsonl")
    assert ledger and all(e["role"] == "preflight" for e in ledger if e["event"] != "interrupted")


@pytest.mark.parametrize("fault", ["401", "403", "404"])
def test_auth_and_model_errors_mid_stage_stop_it_and_resume_finishes_every_run_once(tmp_path, fault):
    # the preflight and the first few runs pass, then the endpoint refuses everything
    with FakeModel(schedule=["ok"] * 9, always=fault) as fake:
        res = run(fake, tmp_path)
        assert res.returncode == 3, res.stderr
        assert "stopped:" in res.stderr and f"HTTP {fault}" in res.stderr
        first = records(tmp_path)
        assert 0 < len(first) < 36
        assert all(r["status"] == "ok" for r in first.values()), "an environment failure was recorded as a run"
        fake.always = None  # the user fixes the key / the model name
        again = run(fake, tmp_path)
        assert again.returncode == 0, again.stderr
        assert f"{len(first)} recorded, {36 - len(first)} to run" in again.stderr
    recs, ledger = check_accounts(tmp_path, 36)
    assert all(r["status"] == "ok" for r in recs.values())
    assert {k: recs[k]["finished"] for k in first} == {k: v["finished"] for k, v in first.items()}
    # the refused calls stay in the ledger; their attempts are marked interrupted, not lost
    refused = [e for e in ledger if e.get("event") == "response" and e.get("status") == int(fault)]
    marked = {(e["tag"], e["attempt"]) for e in ledger if e.get("event") == "interrupted"}
    assert refused and all((e["tag"], e["attempt"]) in marked for e in refused)


@pytest.mark.parametrize("fault", ["empty", "nonjson"])
def test_bad_200_replies_are_retried_and_a_server_sending_only_bad_ones_stops_the_stage(tmp_path, fault):
    # one bad reply per run is retried away
    with FakeModel(schedule=["ok", fault] + ["ok"] * 3 + [fault]) as fake:
        res = run(fake, tmp_path)
        assert res.returncode == 0, res.stderr
        assert all(r["status"] == "ok" for r in records(tmp_path).values())
    # a server whose every reply is bad after the preflight is the environment's (issue 33): the stage stops,
    # nothing is burnt, the message names the bad reply, and the same command finishes once it is fixed
    with FakeModel(dies_with=fault) as fake:
        t2 = tmp_path / "again"
        res = run(fake, t2, "model.max_retries=1")
        assert res.returncode == 3, res.stderr
        why = "no choices" if fault == "empty" else "not JSON"
        assert "the model server keeps failing" in res.stderr and why in res.stderr
        assert records(t2) == {}
        fake.dies_with = None
        res = run(fake, t2)
        assert res.returncode == 0, res.stderr
        assert "0 recorded, 36 to run" in res.stderr
        recs2 = records(t2)
        assert len(recs2) == 36 and all(r["status"] == "ok" for r in recs2.values())
        ledger = read_ledger(stage_dir(t2) / "ledger.jsonl")
        bad = {(e["tag"], e["attempt"]) for e in ledger if e.get("event") == "response" and e.get("error")
               and e.get("role") == "agent"}
        retried = {(e["tag"], e["attempt"]) for e in ledger if e.get("event") == "interrupted"}
        assert bad and bad <= retried  # the bad replies' attempts stay in the ledger, marked interrupted


def test_shell_without_cap_sys_admin_stops_at_preflight(tmp_path):
    setpriv = shutil.which("setpriv")
    if not setpriv:
        pytest.skip("util-linux setpriv is not installed: cannot drop CAP_SYS_ADMIN for the test")
    with FakeModel() as fake:
        argv = [a for a in cmd(fake, tmp_path) if not a.startswith("stage.groups=")]
        argv += ["+condition@stage.conditions.shell=shell", "stage.groups=[{sample:smoke,conditions:[shell,none]}]"]
        res = subprocess.run([setpriv, "--bounding-set=-sys_admin", "--inh-caps=-sys_admin", "--", *argv],
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 3, res.stderr
        assert "preflight sandbox" in res.stderr and "FAILED" in res.stderr
        assert fake.requests == [] and records(tmp_path) == {}


@pytest.mark.services
def test_services_stopped_mid_stage_stop_it_and_resume_after_restart(tmp_path):
    s = svc.Settings(redis_port=free_port(), pg_port=free_port(), root=tmp_path / "svc", pg_osuser="nobody")
    svc.redis_up(s)
    groups = "stage.groups=[{sample:smoke,conditions:[tool_dense],repeats:4}]"
    try:
        with FakeModel(delay_s=0.3) as fake:
            argv = [a for a in cmd(fake, tmp_path, "index=redis_qe", f"index.url={s.redis_url}", "concurrency=2")
                    if a != GROUPS] + [groups]
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            rec_dir = stage_dir(tmp_path) / "records"
            deadline = time.time() + 180
            while time.time() < deadline and len(list(rec_dir.glob("*.json"))) < 3:
                time.sleep(0.05)
            svc.redis_down(s)
            _, err = proc.communicate(timeout=300)
            assert proc.returncode == 3, err
            assert "Redis unreachable" in err
            first = records(tmp_path)
            assert 3 <= len(first) < 24 and all(r["status"] == "ok" for r in first.values())
            svc.redis_up(s)
            fake.delay_s = 0  # the delay only kept the first command mid-stage when Redis stopped
            again = cli.run(argv)  # the resume, in this process (tests/cli.py); the stopped stage above was a process
            assert again.returncode == 0, again.stderr
        recs = records(tmp_path)
        assert len(recs) == 24 and all(r["status"] == "ok" for r in recs.values())
        assert {k: recs[k]["attempt"] for k in first} == {k: v["attempt"] for k, v in first.items()}
    finally:
        svc.redis_down(s)


def test_dry_run_reports_the_preflight_and_runs_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("ACME_LLM_KEY", raising=False)
    with FakeModel() as fake:
        res = run(fake, tmp_path, "dry_run=true")
        assert res.returncode == 0, res.stderr
        assert "preflight data" in res.stdout and "preflight model" in res.stdout
        bad = run(fake, tmp_path, "dry_run=true", "model.api_key_env=ACME_LLM_KEY")
        assert bad.returncode == 3 and "ACME_LLM_KEY" in bad.stdout
        assert fake.requests == []
    assert not (Path(tmp_path) / "runs").exists()


def test_stage_info_and_records_carry_the_schema_version(tmp_path):
    with FakeModel() as fake:
        assert run(fake, tmp_path).returncode == 0
    info = json.loads((stage_dir(tmp_path) / "stage.json").read_text())
    assert info["schema_version"] == 1 and info["kind"] == "agents"
    assert all(r["schema_version"] == 1 for r in records(tmp_path).values())
