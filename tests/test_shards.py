"""Shards and sweeps (issue 16): the partition, the shard lock, and a two-shard stage under Hydra's
submitit launcher (local executor) with one shard killed -9 and relaunched, against an unsharded run."""

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from analysis.load import find_folders, ledger_frame, load_folder, shard_coverage
from harness.records.ledger import read_ledger
from harness.records.shards import DriverLock, Shard, ShardBusy, ShardError
from tests import cli
from tests.fake_model import FakeModel
from tests.test_driver import GROUPS

REPO = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------ the partition


def test_shards_partition_the_plan_in_its_seeded_order():
    runs = [f"r{k}" for k in range(11)]
    parts = [Shard(i, 3).select(runs) for i in range(3)]
    assert sorted(sum(parts, [])) == sorted(runs)  # every run once
    assert [len(p) for p in parts] == [4, 4, 3]  # balanced
    assert parts[1] == ["r1", "r4", "r7", "r10"]  # every N-th run of the order, starting at I
    assert Shard.parse("1/3") == Shard(1, 3) and Shard.parse(" 0 / 1 ") == Shard(0, 1)
    assert Shard.parse(None) is None and Shard.parse("") is None
    for bad in ("3/3", "-1/2", "1/0", "1", "a/b", "1/2/3"):
        with pytest.raises(ShardError):
            Shard.parse(bad)


# ------------------------------------------------------------------------------ the lock

HOLD = textwrap.dedent("""
    import sys, time
    from harness.records.shards import DriverLock, Shard
    lock = DriverLock(sys.argv[1], Shard.parse(sys.argv[2])).acquire()
    print("held", flush=True)
    time.sleep(300)
""")


def _hold(root, shard):
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(root), shard], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def test_a_shard_lock_refuses_a_second_driver_and_is_taken_over_after_kill_9(tmp_path):
    holder = _hold(tmp_path, "1/2")
    try:
        with pytest.raises(ShardBusy, match=f"pid {holder.pid}"):
            DriverLock(tmp_path, Shard(1, 2)).acquire()
        # another layout's runs overlap: refused too; the other shard of the same layout is free
        for other in (Shard(0, 4), None):
            with pytest.raises(ShardBusy, match="overlap"):
                DriverLock(tmp_path, other).acquire()
        with DriverLock(tmp_path, Shard(0, 2)):
            pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    lock_file = tmp_path / "shards" / "1of2" / "lock"
    assert json.loads(lock_file.read_text())["pid"] == holder.pid  # the file survives the crash
    with DriverLock(tmp_path, Shard(1, 2)):  # and the shard is taken over at once
        info = json.loads(lock_file.read_text())
        assert info["pid"] == os.getpid() and info["previous"]["pid"] == holder.pid
    with DriverLock(tmp_path, None):  # nothing holds any lock now
        pass


# ------------------------------------------------------------------------------ a sharded stage


def deterministic_answer(req: dict) -> dict:
    """Search first (when a tool is offered); then answer from the question and what memory returned."""
    msgs = req["messages"]
    tools = req.get("tools") or []
    question = next(m["content"] for m in msgs if m["role"] == "user")
    if tools and req.get("tool_choice") != "none" and not any(m["role"] == "tool" for m in msgs):
        fn = tools[0]["function"]
        props = fn.get("parameters", {}).get("properties", {})
        args = {"query": question} if "query" in props else {k: "x" for k in fn["parameters"].get("required", [])}
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_0", "type": "function", "function": {"name": fn["name"], "arguments": json.dumps(args)}}]}
    seen = question + "".join(str(m.get("content")) for m in msgs if m["role"] == "tool")
    return {"role": "assistant", "content": "answer " + hashlib.sha256(seen.encode()).hexdigest()[:12]}


def stage_cmd(fake, runs_dir, *extra):
    return [sys.executable, "-m", "harness.run", "stage=smoke", "model=vllm", f"model.base_url={fake.base_url}",
            "model.backoff_s=0.01", "samples.smoke.limit=null", GROUPS, "stage.judge_after_run=false",
            f"runs_dir={runs_dir}",
            f"cache_dir={runs_dir.parent}/cache", "concurrency=2", *extra]


def folder_of(runs_dir: Path) -> Path:
    found = [p.parent for p in (runs_dir / "smoke").glob("*/stage.json")]
    assert len(found) == 1, found
    return found[0]


def records_of(folder: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (folder / "records").glob("*.json")}


def analyse(folder: Path):
    f = load_folder(find_folders([folder])[0])
    return f, ledger_frame(f), {r["shard"]: r for r in shard_coverage(f)}


def test_a_sweep_gives_each_combination_its_own_folder(tmp_path):
    runs_dir = tmp_path / "runs"
    one = "stage.groups=[{sample:smoke,conditions:[none],repeats:1}]"
    with FakeModel(script=deterministic_answer) as fake:
        cmd = [a for a in stage_cmd(fake, runs_dir, "-m", "seed=0,1") if a != GROUPS] + [one]
        res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    folders = sorted(p.parent for p in (runs_dir / "smoke").glob("*/stage.json"))
    assert len(folders) == 2 and "+seed-0+" in folders[0].name and "+seed-1+" in folders[1].name
    infos = [json.loads((p / "stage.json").read_text()) for p in folders]
    assert [i["seed"] for i in infos] == [0, 1] and {i["sweep"]["base_label"] for i in infos} == {"smoke"}
    assert all("model.base_url" not in i["label"] for i in infos)  # where the model lives is no axis
    assert all(len(records_of(p)) == 6 for p in folders)


def test_two_shards_under_submitit_one_killed_then_relaunched_equal_an_unsharded_run(tmp_path, request):
    sharded, plain = tmp_path / "sharded" / "runs", tmp_path / "plain" / "runs"
    with FakeModel(delay_s=0.15, script=deterministic_answer) as fake:
        launch = stage_cmd(fake, sharded, "-m", "shard=0/2,1/2", "hydra/launcher=submitit_local")
        parent = subprocess.Popen(launch, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  start_new_session=True)
        # the same stage unsharded, meanwhile (as tests/test_cluster.py does): its records are compared at the end
        plain_run = subprocess.Popen(stage_cmd(fake, plain), cwd=REPO, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        request.addfinalizer(lambda: plain_run.poll() is None and plain_run.kill())
        # kill shard 1 (the job Hydra collects last) once it has started a few runs
        deadline = time.time() + 180
        victim = None
        while time.time() < deadline and victim is None:
            time.sleep(0.05)
            stage = list((sharded / "smoke").glob("*/shards/1of2"))
            if stage and len(read_ledger(stage[0] / "attempts.jsonl")) >= 4:
                victim = json.loads((stage[0] / "lock").read_text())["pid"]
        assert victim, "shard 1 never started"
        os.kill(victim, signal.SIGKILL)
        err = parent.communicate(timeout=300)[1]
        assert parent.returncode != 0, f"Hydra reports the killed job: {err[-500:]}"
        folder = folder_of(sharded)
        assert (folder / "shards" / "0of2" / "ledger.jsonl").exists()

        # before the relaunch the analysis says shard 1 is incomplete and shard 0 complete
        f, _, cov = analyse(folder)
        assert cov["0/2"]["status"] == "complete" and cov["0/2"]["records"] == 18
        assert cov["1/2"]["status"] == "incomplete" and cov["1/2"]["records"] < 18 and not cov["1/2"]["running"]
        said = cli.run([sys.executable, "-m", "analysis.run", f"runs={folder}", f"out={tmp_path}/partial",
                        "resamples=20", "lenient=true"], cwd=REPO, capture_output=True, text=True, timeout=300)
        assert said.returncode == 0, said.stderr[-2000:]
        assert "shard 1/2" in said.stdout and "INCOMPLETE" in said.stdout and "shard 0/2" not in said.stdout
        # and a shard that never started is missing
        (folder / "shards" / "3of4").mkdir()
        quarters = {k: v["status"] for k, v in analyse(folder)[2].items() if k.endswith("/4")}
        assert [quarters[f"{i}/4"] for i in range(3)] == ["missing"] * 3 and quarters["3/4"] != "missing"
        (folder / "shards" / "3of4").rmdir()

        again = cli.run(stage_cmd(fake, sharded, "-m", "shard=1/2", "hydra/launcher=submitit_local"),
                        cwd=REPO, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr[-3000:]
        assert folder_of(sharded) == folder  # the relaunch found the same folder (same label)

        plain_err = plain_run.communicate(timeout=300)[1]
        assert plain_run.returncode == 0, plain_err[-3000:]

    # every run exactly once, each by the shard that owns it
    stage = json.loads((folder / "stage.json").read_text())
    plan = stage["plan"]["runs"]
    assert stage["label"].startswith("smoke+model-vllm")
    assert {"shard=0/2", "shard=1/2"} & set(stage["sweep"]["overrides"])
    recs = records_of(folder)
    assert sorted(recs) == sorted(plan) and len(plan) == 36
    for i in (0, 1):
        started = {e["run"] for e in read_ledger(folder / "shards" / f"{i}of2" / "attempts.jsonl")}
        assert started == set(Shard(i, 2).select(plan))
    interrupted = [e for e in read_ledger(folder / "shards" / "1of2" / "ledger.jsonl") if e.get("event") == "interrupted"]
    assert interrupted, "the killed shard's unfinished attempts are marked on relaunch"
    for e in interrupted:
        assert recs[e["tag"]]["attempt"] > e["attempt"]

    # the analysis reads both ledgers, sees every run once and every record agrees with its ledger
    f, led, cov = analyse(folder)
    assert set(led["ledger"]) == {"shards/0of2/ledger.jsonl", "shards/1of2/ledger.jsonl"}
    assert {k: v["status"] for k, v in cov.items()} == {"0/2": "complete", "1/2": "complete"}
    ok = led[(led["event"] == "response") & (led["status"] == 200) & (led["party"] == "agents")]
    for run_id, r in recs.items():
        mine = ok[(ok["run_id"] == run_id) & (ok["attempt"] == r["attempt"])]
        assert len(mine) == r["model_calls"] and mine["prompt"].sum() == r["tokens"]["prompt"], run_id
    assert not f.problems

    # what `make analyze` prints and writes: both shards complete, every run once
    out = tmp_path / "results"
    res = cli.run([sys.executable, "-m", "analysis.run", f"runs={folder}", f"out={out}", "resamples=50"],
                  cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "INCOMPLETE" not in res.stdout and "MISSING" not in res.stdout
    import pandas as pd

    shards = pd.read_csv(out / "shards.csv")
    assert list(shards["shard"]) == ["0/2", "1/2"] and list(shards["records"]) == [18, 18]
    runs = pd.read_csv(out / "runs.csv")
    assert sorted(runs["run_id"]) == sorted(plan)

    # the same stage unsharded: same run ids, answers and tokens
    base = records_of(folder_of(plain))
    assert sorted(base) == sorted(recs)
    for run_id, r in recs.items():
        assert r["answer"] == base[run_id]["answer"] and r["answer"].startswith("answer "), run_id
        assert r["tokens"] == base[run_id]["tokens"] and r["tool_calls"] == base[run_id]["tool_calls"]
        assert r["config_hash"] == stage["config_hash"]
    assert len({r["answer"] for r in recs.values()}) > 1


def test_shard_and_default_device_leave_the_stage_identity_alone():
    from omegaconf import OmegaConf

    from harness.records.rundir import config_hash

    before = OmegaConf.create({"seed": 0, "encoder": {"name": "minilm", "batch_size": 32}, "stage": {"name": "s"}})
    now = OmegaConf.merge(before, {"encoder": {"device": "cpu"}, "shard": None})
    assert config_hash(now) == config_hash(before)  # folders begun before these keys existed still resume
    assert config_hash(OmegaConf.merge(now, {"shard": "1/4"})) == config_hash(before)
    assert config_hash(OmegaConf.merge(now, {"encoder": {"device": "cuda"}})) != config_hash(before)
    assert config_hash(OmegaConf.merge(now, {"seed": 1})) != config_hash(before)


def test_the_slurm_launcher_file_composes():
    import yaml

    res = subprocess.run([sys.executable, "-m", "harness.run", "hydra/launcher=slurm", "hydra.launcher.partition=gpu",
                          "hydra.launcher.gpus_per_node=2", "--cfg", "hydra"], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    launcher = yaml.safe_load(res.stdout)["hydra"]["launcher"]
    assert launcher["_target_"] == "hydra_plugins.memspace_slurm.slurm_launcher.SlurmLauncher"  # the plugin's, failures named
    assert (launcher["partition"], launcher["gpus_per_node"], launcher["timeout_min"], launcher["cpus_per_task"]) == \
        ("gpu", 2, 720, 8)
    assert launcher["submitit_folder"].startswith("${hydra.sweep.dir}")


@given(key=st.sampled_from(["+notes", "index.dsn", "data.path", "index.table", "model", "seed", "encoder"]),
       value=st.from_regex(r"zq[A-Za-z0-9@:/._=-]{3,30}", fullmatch=True))
@hsettings(max_examples=200, deadline=None)
def test_a_swept_string_is_named_in_the_label_by_its_hash_never_its_text(key, value):
    """A sweep's label goes out with the stage (its folder, every table's `folder`): a swept DSN, note, host or path
    is named there by its hash, never a piece of its text; `seed-1` and `model-deepseek` stay readable."""
    from harness.run.sweep import label_part

    part = label_part(key, value)
    assert re.fullmatch(r"[A-Za-z0-9._+-]+-h[0-9a-f]{8}", part), part
    assert "zq" not in part.lower()
    assert label_part("seed", "1") == "seed-1" and label_part("model", "deepseek") == "model-deepseek"
    assert label_part("+stage.trials.n", "3") == "_stage.trials.n-3"


@given(key=st.from_regex(r"\+?zq[a-z]{2,8}(\.[a-z]{2,8})?", fullmatch=True), value=st.integers(0, 10**9).map(str))
@hsettings(max_examples=100, deadline=None)
def test_a_key_the_harness_does_not_declare_is_named_in_the_label_by_its_hash_with_its_value(key, value):
    """`-m +zqacme.account=55512345,...`: a user's key and the number they typed under it are named by their hashes
    (a label goes out with the stage); so is any value under a credential's name, even of a key of the harness."""
    from harness.run.sweep import label_part

    part = label_part(key, value)
    assert re.fullmatch(r"k[0-9a-f]{8}-h[0-9a-f]{8}", part), part
    assert re.fullmatch(r"k[0-9a-f]{8}-h[0-9a-f]{8}", label_part("+password", value))
