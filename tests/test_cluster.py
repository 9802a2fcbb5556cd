"""A stage on a real SLURM cluster (issue 36): the test cluster (harness.cluster) runs the smoke stage's
shards as an array job through Hydra's submitit launcher, one shard preempted by a job of the high
partition and the other requeued with `scontrol requeue` mid-run; the records and ledgers are then
compared run by run with a local run of the same stage. And the scheduler's failures, named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import cluster as slurm
from harness.records.ledger import read_ledger
from harness.records.shards import Shard
from tests import cli
from tests.fake_model import FakeModel
from tests.test_shards import analyse, deterministic_answer, folder_of, records_of, stage_cmd

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.cluster
# two CPUs a shard: two shards fill the test node (4 CPUs), so a 2-CPU job of the high partition
# preempts exactly one of them
ON_SLURM = ("hydra/launcher=slurm", "hydra.launcher.cpus_per_task=2", "hydra.launcher.mem_gb=1",
            "hydra.launcher.timeout_min=60")


def sh(*cmd: str) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"{' '.join(cmd)}: {r.stderr}"
    return r.stdout


def queue() -> dict[str, str]:
    """Job id -> state of every job in the queue."""
    return dict(line.split() for line in sh("squeue", "-h", "-o", "%i %T").splitlines() if line.strip())


def history(job: str) -> list[str]:
    """Every state the job went through, one per start (sacct -D lists the requeued starts too)."""
    return sh("sacct", "-D", "-X", "-n", "-P", "-o", "State", "-j", job).split()


def attempts(runs: Path, i: int) -> int:
    found = list((runs / "smoke").glob(f"*/shards/{i}of2/attempts.jsonl"))
    return len(read_ledger(found[0])) if found else 0


def wait_for(what: str, ok, timeout: float = 90) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if ok():
            return
        time.sleep(0.3)  # most checks start squeue or read ledgers: fewer of them leave the 2 cores to the jobs
    raise AssertionError(f"timed out waiting for {what}; queue: {queue()}")


def test_a_sharded_stage_preempted_and_requeued_on_slurm_equals_a_local_run(tmp_path, cluster):
    sharded, plain = tmp_path / "sharded" / "runs", tmp_path / "plain" / "runs"
    t0 = time.time()
    with FakeModel(delay_s=0.25, script=deterministic_answer) as fake:
        launch = subprocess.Popen(stage_cmd(fake, sharded, "-m", "shard=0/2,1/2", "concurrency=1", *ON_SLURM),
                                  cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        local = subprocess.Popen(stage_cmd(fake, plain, "concurrency=2"), cwd=REPO, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)  # the same stage, unsharded, meanwhile
        try:
            wait_for("both shards running", lambda: min(attempts(sharded, 0), attempts(sharded, 1)) >= 3)
            print(f"both running at {time.time() - t0:.1f} s", file=sys.stderr)
            shards = {k: v for k, v in queue().items() if "_" in k}
            assert sorted(shards.values()) == ["RUNNING", "RUNNING"], shards
            array = next(iter(shards)).split("_")[0]
            # a job of the high partition needs one shard's CPUs: the scheduler preempts (requeues) one
            sh("sbatch", "-p", "high", "-c", "2", "--mem=100", "-o", "/dev/null", "--wrap", "sleep 2")
            # the shard is named from the same look at the queue that saw it preempted (a second look may find
            # the queue between two states), and only a shard the queue lists counts
            seen: dict[str, str] = {}

            def one_preempted() -> bool:
                seen.clear()
                seen.update(queue())
                return any(seen.get(f"{array}_{i}", "RUNNING") != "RUNNING" for i in (0, 1))

            wait_for("a shard preempted", one_preempted)
            preempted = next(i for i in (0, 1) if seen.get(f"{array}_{i}", "RUNNING") != "RUNNING")
            other = 1 - preempted
            print(f"shard {preempted} preempted at {time.time() - t0:.1f} s", file=sys.stderr)
            assert attempts(sharded, other) < 18, "the other shard finished before it could be requeued"
            sh("scontrol", "requeue", f"{array}_{other}")  # the user requeues the other one mid-run
            out, err = launch.communicate(timeout=240)
            local_err = local.communicate(timeout=240)[1]
        finally:
            for p in (launch, local):
                if p.poll() is None:
                    p.kill()
        assert launch.returncode == 0, err[-4000:]
        print(f"stage done at {time.time() - t0:.1f} s", file=sys.stderr)
        for i in (0, 1):  # each shard ran twice: ended by the scheduler once, then finished
            # (the accounting database learns of a job's end a moment after the job has ended)
            wait_for("the accounting", lambda: history(f"{array}_{i}")[-1] == "COMPLETED", 30)
            states = history(f"{array}_{i}")
            assert len(states) >= 2 and states[-1] == "COMPLETED" and "REQUEUED" in states[:-1], (i, states)
        assert local.returncode == 0, local_err[-3000:]
        print(sh("sacct", "-D", "-X", "-n", "-o", "JobID,Partition,State,Start,End"), file=sys.stderr)

    folder = folder_of(sharded)
    stage = json.loads((folder / "stage.json").read_text())
    plan = stage["plan"]["runs"]
    recs = records_of(folder)
    assert sorted(recs) == sorted(plan) and len(plan) == 36  # every run recorded once
    for i in (0, 1):
        sdir = folder / "shards" / f"{i}of2"
        lock = json.loads((sdir / "lock").read_text())
        assert lock["previous"] and lock["previous"]["pid"] != lock["pid"], "the shard's second job resumed it"
        started = read_ledger(sdir / "attempts.jsonl")
        assert {e["run"] for e in started} == set(Shard(i, 2).select(plan))  # each shard kept to its slice
        # a run started again only when its attempt was in flight when the job ended, and that attempt is
        # marked interrupted in the ledger; concurrency=1, so at most one per ending
        again = {e["run"] for e in started if e["attempt"] > 1}
        marked = {e["tag"] for e in read_ledger(sdir / "ledger.jsonl") if e.get("event") == "interrupted"}
        assert again == marked and len(again) <= 1, (i, again, marked)
        for rid in again:
            assert recs[rid]["attempt"] == 2
    # the requeued shard was told (SIGTERM) and started no run after it; the runs in flight finished, or
    # (killed first) stay marked interrupted
    odir = folder / "shards" / f"{other}of2"
    told = [json.loads(line)["stopped"] or "" for line in (odir / "sessions.jsonl").read_text().splitlines()]
    assert any("the scheduler is ending this job" in x for x in told) or \
        any(e.get("event") == "interrupted" for e in read_ledger(odir / "ledger.jsonl")), told

    # the ledger: every record's calls once, and the only extra paid calls are the interrupted attempts'
    f, led, cov = analyse(folder)
    assert {k: v["status"] for k, v in cov.items()} == {"0/2": "complete", "1/2": "complete"}
    assert not f.problems
    ok = led[(led["event"] == "response") & (led["status"] == 200) & (led["party"] == "agents")]
    for run_id, r in recs.items():
        mine = ok[(ok["run_id"] == run_id) & (ok["attempt"] == r["attempt"])]
        assert len(mine) == r["model_calls"] and mine["prompt"].sum() == r["tokens"]["prompt"], run_id
    recorded = {(rid, r["attempt"]) for rid, r in recs.items()}
    extra = ok[[(rid, a) not in recorded for rid, a in zip(ok["run_id"], ok["attempt"])]]
    assert set(extra["run_id"]) <= {e["tag"] for p in folder.glob("shards/*/ledger.jsonl") for e in read_ledger(p)
                                    if e.get("event") == "interrupted"}

    # run by run, the same as the local run of the same stage
    base = records_of(folder_of(plain))
    assert sorted(base) == sorted(recs)
    for run_id, r in recs.items():
        b = base[run_id]
        assert (r["status"], r["answer"], r["tokens"], r["tool_calls"], r["model_calls"]) == \
            (b["status"], b["answer"], b["tokens"], b["tool_calls"], b["model_calls"]), run_id
    assert len({r["answer"] for r in recs.values()}) > 1

    # `make analyze` on the result, unchanged
    res = cli.run([sys.executable, "-m", "analysis.run", f"runs={folder}", f"out={tmp_path}/results",
                   "resamples=20"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "INCOMPLETE" not in res.stdout, res.stdout[-2000:] + res.stderr[-2000:]


def test_the_cluster_is_on_loopback_under_the_services_folder(cluster):
    st = slurm.status(cluster)
    assert all(st["daemons"].values()), st["daemons"]
    assert cluster.conf.is_relative_to(cluster.root) and "low*" in st["partitions"] and "high" in st["partitions"]
    listening = Path("/proc/net/tcp").read_text().splitlines()[1:]
    ports = {int(line.split()[1].split(":")[1], 16): line.split()[1].split(":")[0]
             for line in listening if line.split()[3] == "0A"}  # LISTEN
    for port in (cluster.ctld_port, cluster.slurmd_port, cluster.db_port):
        assert ports.get(port) == "0100007F", (port, ports.get(port))  # 127.0.0.1, not 0.0.0.0
    # slurmdbd 22.05 binds the address the host name resolves to (NoInAddrAny), asked where that is loopback
    # (docs/cluster.md); elsewhere every interface, taking munge-signed requests only
    assert ports.get(cluster.dbd_port) == ("0100007F" if slurm._dbd_loopback() else "00000000"), ports.get(cluster.dbd_port)
    assert slurm.up(cluster) == []  # idempotent: nothing started twice


def test_the_scheduler_refuses_what_it_cannot_run_and_the_submission_stops_with_its_message(tmp_path, cluster):
    runs = tmp_path / "runs"
    nowhere = type("Nowhere", (), {"base_url": "http://127.0.0.1:9/v1"})()  # no job starts, nothing is called
    for ask, said in (("hydra.launcher.partition=nosuch", "invalid partition specified: nosuch"),
                      ("hydra.launcher.cpus_per_task=64", "More processors requested than permitted")):
        res = cli.run(stage_cmd(nowhere, runs, "-m", "shard=0/2,1/2", *ON_SLURM, ask), cwd=REPO,
                      capture_output=True, text=True, timeout=120)
        assert res.returncode == 2, res.stderr[-2000:]
        assert "the scheduler refused the jobs" in res.stderr and said in res.stderr, res.stderr[-2000:]
        assert "Traceback" not in res.stderr
    # a time limit within the warning before it (signal_delay_s, 120 s): every job would be told "out of
    # time" at the scheduler's first look, before it recorded a run, however often the command is run again
    res = cli.run(stage_cmd(nowhere, runs, "-m", "shard=0/2,1/2", *ON_SLURM, "hydra.launcher.timeout_min=1"),
                  cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "timeout_min=1 is not longer than" in res.stderr, res.stderr[-2000:]
    assert "Traceback" not in res.stderr and "submitted" not in res.stderr
    assert not queue(), "nothing left in the queue"
    assert not (runs / "smoke").exists()  # no stage folder: no job ever started


def test_an_endpoint_failure_inside_a_shard_stops_it_with_exit_3_and_the_same_command_finishes(tmp_path, cluster):
    runs = tmp_path / "runs"
    with FakeModel(script=deterministic_answer, schedule=["ok"] * 14, always="401") as fake:
        cmd = stage_cmd(fake, runs, "-m", "shard=0/2,1/2", "concurrency=1", *ON_SLURM)
        res = cli.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=240)
        assert res.returncode == 3, res.stderr[-3000:]
        named = [line for line in res.stderr.splitlines() if line.startswith("error: job ")]
        assert len(named) == 2 and all("exit code 3" in x and "HTTP 401" in x for x in named), named
        assert {"(shard=0/2)", "(shard=1/2)"} == {x.split(" ended")[0].split(" ", 3)[3] for x in named}
        folder = folder_of(runs)
        before = records_of(folder)
        assert 0 < len(before) < 36
        fake.always = None  # the key is fixed: the same command finishes the stage
        again = cli.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=240)
        assert again.returncode == 0, again.stderr[-3000:]
        # `make judge` on the sharded folder, unchanged: the same -m overrides without the shard find it
        with FakeModel() as judge:
            judged = cli.run([sys.executable, "-m", "judge.run", *[a for a in cmd[3:] if not a.startswith(
                ("shard=", "hydra"))], "judge=vllm", f"judge.base_url={judge.base_url}", "judge.backoff_s=0.01"],
                cwd=REPO, capture_output=True, text=True, timeout=240)
        assert judged.returncode == 0, judged.stderr[-3000:]
    recs = records_of(folder)
    plan = json.loads((folder / "stage.json").read_text())["plan"]["runs"]
    assert sorted(recs) == sorted(plan)
    assert all(recs[k] == v for k, v in before.items())  # what was recorded stays as it was
    assert all(r["status"] == "ok" for r in recs.values())
    judged_runs = [e["run_id"] for e in read_ledger(folder / "judgements" / "vllm.jsonl")]
    assert sorted(judged_runs) == sorted(plan), "every run judged, once"


def test_a_job_out_of_time_says_so_and_stops_as_a_stage_the_same_command_resumes():
    from submitit.core.utils import UncompletedJobError

    from harness.cli.run import _time_limit

    # what submitit's USR2 handler raises inside the driver when the job nears its limit and may not be requeued
    stop = _time_limit(UncompletedJobError("Job not requeued because: timed-out too many times."))
    assert stop is not None and stop.exit_code == 3
    assert "time limit" in str(stop) and "same command" in str(stop) and "timeout_min" in str(stop)
    assert _time_limit(UncompletedJobError("Job 3_0 has not produced any output (state: FAILED)")) is None
    assert _time_limit(ValueError("timed-out")) is None


def test_a_shard_cancelled_mid_run_is_named_and_the_same_command_resubmits_it_losing_nothing(tmp_path, cluster):
    runs = tmp_path / "runs"
    with FakeModel(delay_s=0.2, script=deterministic_answer) as fake:
        cmd = stage_cmd(fake, runs, "-m", "shard=0/2,1/2", "concurrency=1", *ON_SLURM)
        launch = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            wait_for("shard 1 running", lambda: attempts(runs, 1) >= 3)
            (job,) = [k for k in queue() if k.endswith("_1")]
            sh("scancel", job)
            err = launch.communicate(timeout=240)[1]
        finally:
            if launch.poll() is None:
                launch.kill()
        assert launch.returncode != 0
        named = [line for line in err.splitlines() if line.startswith(f"error: job {job} ")]
        assert len(named) == 1 and "(shard=1/2)" in named[0] and "CANCELLED" in named[0], err[-2000:]
        folder = folder_of(runs)
        assert len(records_of(folder)) < 36
        again = cli.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=240)
        assert again.returncode == 0, again.stderr[-3000:]
    recs = records_of(folder)
    plan = json.loads((folder / "stage.json").read_text())["plan"]["runs"]
    assert sorted(recs) == sorted(plan)
    started = read_ledger(folder / "shards" / "1of2" / "attempts.jsonl")
    twice = {e["run"] for e in started if e["attempt"] > 1}
    marked = {e["tag"] for e in read_ledger(folder / "shards" / "1of2" / "ledger.jsonl") if e.get("event") == "interrupted"}
    assert twice == marked and len(twice) <= 1  # only a run in flight at the kill runs again, and says so
    assert not any(e["attempt"] > 1 for e in read_ledger(folder / "shards" / "0of2" / "attempts.jsonl"))


def test_a_job_requeued_during_its_preflight_starts_no_run_and_the_requeued_job_does_them(tmp_path, cluster):
    """SIGTERM while the driver is still in its preflight (the request is held until the job has been told):
    the ending job starts no run after it, so the next request the endpoint sees is the requeued job's
    preflight, and no run is paid twice."""
    import threading

    from bench.fake_upstream import is_preflight

    runs = tmp_path / "runs"
    told, held = threading.Event(), []

    def hold_the_first_preflight(req):  # the FakeModel's refuse hook: None lets the request through
        if is_preflight(req) and not held:
            held.append(req)
            told.wait(120)

    def logs() -> str:
        return "".join(p.read_text(errors="replace") for p in runs.glob(".sweeps/smoke/*/.submitit/*/*_log.err"))

    with FakeModel(delay_s=0.1, script=deterministic_answer, refuse=hold_the_first_preflight) as fake:
        cmd = stage_cmd(fake, runs, "-m", "concurrency=1", *ON_SLURM)  # one job: the whole stage
        launch = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            wait_for("the preflight call", lambda: held)
            (job,) = queue()
            sh("scontrol", "requeue", job)
            wait_for("the job told it is ending", lambda: "Bypassing signal SIGTERM" in logs())  # submitit's log
            told.set()  # the preflight answers while the job is ending
            err = launch.communicate(timeout=240)[1]
        finally:
            told.set()
            if launch.poll() is None:
                launch.kill()
        assert launch.returncode == 0, err[-3000:]
        kinds = [is_preflight(r["body"]) for r in fake.requests]
    # every preflight call (the ending job's, then the requeued job's) came before the first run's call
    assert kinds.count(True) >= 2 and kinds.index(False) == kinds.count(True), \
        "a run started after the scheduler had told the job it is ending"
    folder = folder_of(runs)
    recs = records_of(folder)
    plan = json.loads((folder / "stage.json").read_text())["plan"]["runs"]
    assert sorted(recs) == sorted(plan)
    assert all(e["attempt"] == 1 for e in read_ledger(folder / "attempts.jsonl"))  # none run twice
    told_why = [json.loads(x)["stopped"] or "" for x in (folder / "sessions.jsonl").read_text().splitlines()]
    assert any("the scheduler is ending this job" in x for x in told_why), told_why


def test_the_submission_stops_with_a_message_when_the_scheduler_stops_answering(tmp_path, cluster):
    """The controller lost while a job runs (slurmctld stopped by its PID; `make cluster-down` stops it too):
    the submitting command says so and stops (exit 3) once squeue has failed for MEMSPACE_SLURM_PATIENCE_S
    (0 here: at the first failure) instead of waiting for ever."""
    import os
    import signal
    import threading

    runs = tmp_path / "runs"
    # once the job runs, its model calls are held until the end: the job is still running when the controller
    # is back, so the cancel ends it at once (a job that ended while the controller was away is only seen ended
    # when its step's completion message is retried, a minute later)
    holding, release = threading.Event(), threading.Event()

    def hold(req):  # the FakeModel's refuse hook: None lets the request through
        if holding.is_set():
            release.wait(120)

    with FakeModel(delay_s=0.2, script=deterministic_answer, refuse=hold) as fake:
        launch = subprocess.Popen(stage_cmd(fake, runs, "-m", "concurrency=1", *ON_SLURM), cwd=REPO,
                                  env={**os.environ, "MEMSPACE_SLURM_PATIENCE_S": "0"},
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            wait_for("the job running", lambda: any(len(read_ledger(p)) >= 2
                                                    for p in (runs / "smoke").glob("*/attempts.jsonl")))
            (job,) = queue()
            holding.set()
            os.kill(slurm.running(cluster)["slurmctld"], signal.SIGTERM)
            wait_for("slurmctld stopped", lambda: slurm.running(cluster)["slurmctld"] is None)
            err = launch.communicate(timeout=150)[1]
        finally:
            if launch.poll() is None:
                launch.kill()
            try:
                slurm.up(cluster)  # the controller back: it finds the job where it left it, still running
                slurm.cancel_all(cluster)
            finally:
                release.set()
    assert launch.returncode == 3 and "Traceback" not in err, err[-3000:]
    (said,) = [x for x in err.splitlines() if x.startswith("error: ")]
    assert "the scheduler has not answered" in said and job in said and "same command" in said, said


def test_a_job_the_accounting_still_shows_running_is_asked_again_until_it_names_its_end(tmp_path, monkeypatch):
    """The queue drops a job before the accounting (slurmdbd) records its end: a shard that stopped with exit 3 was
    read as `RUNNING with exit code 0` and the command exited 1. A scripted `sacct` first on PATH says RUNNING
    twice, then FAILED with 3: the launcher asks until it names the end; one that never does within the patience
    gives no exit code."""
    from hydra_plugins.memspace_slurm.slurm_launcher import _ended

    asked = tmp_path / "asked"
    sacct = tmp_path / "bin" / "sacct"
    sacct.parent.mkdir()
    sacct.write_text(f'#!/bin/sh\nn=$(cat {asked} 2>/dev/null || echo 0); echo $((n+1)) > {asked}\n'
                     'if [ "$n" -lt 2 ]; then echo "RUNNING|0:0"; else echo "FAILED|3:0"; fi\n')
    sacct.chmod(0o755)
    monkeypatch.setenv("PATH", f"{sacct.parent}{os.pathsep}{os.environ['PATH']}")
    assert _ended("7_0") == ("FAILED", 3) and asked.read_text().strip() == "3"
    asked.write_text("-1000000")
    assert _ended("7_0", patience_s=0.3) == ("RUNNING", None)
