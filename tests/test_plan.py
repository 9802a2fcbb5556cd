"""`python -m harness.run ... dry_run=true`: the resolved plan, seeded and validated."""

import json
import re
import subprocess
import sys

import pytest

from harness.data.synth import write
from harness.run.plan import PlanError, group_conditions
from tests import cli


def composed(*overrides):
    from pathlib import Path

    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(Path(__file__).resolve().parents[1] / "conf"), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def expected_runs(cfg) -> dict[str, int]:
    """Runs per condition the stage's groups ask for, from its config and the plan's samples: a question
    in two groups' samples runs once per repeat (the subset's repeat 0 is the main sample's run)."""
    from harness.run.plan import build
    from harness.run.settings import stage_node

    plan = build(stage_node(cfg), cfg)
    out: dict[str, set] = {}
    for g in cfg.stage.groups:
        for c in group_conditions(cfg.stage, g):
            out.setdefault(c, set()).update((g.get("variant", ""), q, r) for q in plan.samples[g.sample]["ids"]
                                            for r in range(int(g.get("repeats", 1))))
    return {c: len(v) for c, v in out.items()}




def dry_run(*overrides, cwd=None):
    """The dry run's command line, in this process (tests/cli.py): what it prints and returns is checked here;
    `dry_run_process` runs the same command as a process where the process is the point."""
    return cli.run([sys.executable, "-m", "harness.run", "dry_run=true", *overrides], cwd=cwd)


def dry_run_process(*overrides, cwd=None):
    return subprocess.run([sys.executable, "-m", "harness.run", "dry_run=true", *overrides],
                          capture_output=True, text=True, timeout=300, cwd=cwd)


def run_lines(out):
    return [line.split()[1] for line in out.splitlines() if re.match(r"^\s*\d+ \S+\.(lme|public|private)\.", line)]


@pytest.fixture(scope="module")
def synth_s(tmp_path_factory):
    return write(tmp_path_factory.mktemp("s"), seed=0, size="s")


def test_smoke_plan_is_printed_and_reproducible(tmp_path):
    a = dry_run("stage=smoke", f"cache_dir={tmp_path}")
    assert a.returncode == 0, a.stderr
    runs = run_lines(a.stdout)
    want = expected_runs(composed("stage=smoke", f"cache_dir={tmp_path}"))
    assert len(runs) == sum(want.values()) == len(set(runs)) and len(want) >= 2
    # reproducible across processes (a fresh interpreter, its own hash seed), not only within this one
    again = dry_run_process("stage=smoke", f"cache_dir={tmp_path}")
    assert again.returncode == 0, again.stderr
    assert runs == run_lines(again.stdout)
    other = run_lines(dry_run("stage=smoke", f"cache_dir={tmp_path}", "seed=1").stdout)
    assert other != runs


def test_main_plan_on_a_longmemeval_format_file(synth_s):
    res = dry_run("stage=main", f"data.path={synth_s}")
    assert res.returncode == 0, res.stderr
    runs = run_lines(res.stdout)
    # the main sample by every condition but full, the subset by every condition twice: counted from the config
    cfg = composed("stage=main", f"data.path={synth_s}")
    stage, want = cfg.stage, expected_runs(cfg)
    conds = [r.split(".")[0] for r in runs]
    assert {c: conds.count(c) for c in set(conds)} == want
    assert want["full"] == 120 and set(want) == set(stage.conditions)  # 60 questions twice; every condition ran
    # interleaved: the first 50 runs already mix many conditions
    assert len(set(conds[:50])) >= 6
    assert "sample main: 180 questions" in res.stdout and "sample full: 60 questions" in res.stdout
    # power before paying: each pre-registered comparison of the stage at its planned 180 paired questions
    power = res.stdout[res.stdout.index("power of the planned sample"):].splitlines()
    h1c = next(x for x in power if x.startswith("H1c"))
    assert h1c.split()[-1] != "" and " 180 " in h1c and "pre-registered (power_at)" in h1c and "assumed" in h1c


def test_org_plan_uses_both_variants(synth_s):
    res = dry_run("stage=org", f"data.path={synth_s}")
    assert res.returncode == 0, res.stderr
    runs = run_lines(res.stdout)
    pub = {r for r in runs if ".public." in r}
    priv = {r for r in runs if ".private." in r}
    stage = composed("stage=org").stage
    n_pub, n_priv = (len(group_conditions(stage, g)) for g in stage.groups)
    assert len(pub) == 120 * n_pub and len(priv) == 42 * n_priv and n_priv == len(stage.conditions)
    assert not any(r.startswith("no_view_policy.public") for r in runs)  # the group's `exclude`


def test_short_samples_are_announced(tmp_path):
    path = write(tmp_path, seed=0, size="tiny")
    res = dry_run("stage=main", f"data.path={path}")
    assert res.returncode == 0
    assert "SHORT by" in res.stdout


def test_bad_data_stops_before_anything_runs(tmp_path, synth_s):
    recs = json.loads(synth_s.read_text())
    recs[7]["haystack_dates"][0] = "yesterday"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(recs))
    res = dry_run("stage=main", f"data.path={bad}")
    assert res.returncode == 2
    assert "record #7" in res.stderr and "haystack_dates[0]" in res.stderr
    missing = dry_run("stage=main", f"data.path={tmp_path}/nope.json")
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def test_cfg_job_prints_the_resolved_config():
    res = cli.run([sys.executable, "-m", "harness.run", "stage=org", "--cfg", "job"],
                  capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "no_view_policy" in res.stdout and "org_public" in res.stdout


def test_a_group_runs_every_condition_unless_it_lists_or_excludes_keys():
    stage = composed("stage=org").stage
    every = list(stage.conditions)
    assert group_conditions(stage, {}) == every
    assert group_conditions(stage, {"exclude": ["no_view_policy"]}) == [c for c in every if c != "no_view_policy"]
    assert group_conditions(stage, {"conditions": ["shared", "fanout"]}) == ["shared", "fanout"]
    with pytest.raises(PlanError, match="names condition 'shard' but does not define it.*defined: isolated"):
        group_conditions(stage, {"exclude": ["shard"]})
    with pytest.raises(PlanError, match="names condition 'toy'"):
        group_conditions(stage, {"conditions": ["toy"]})


def test_a_dry_run_with_another_data_seed_prints_that_seeds_data_not_seed_0s_cached_file(tmp_path):
    """`data.seed=1` generates seed 1's questions: with seed 0's file already in the cache (the first smoke run's),
    the dry run must print seed 1's sha256, the one its first real run writes, not reuse seed 0's file (the
    generated files' paths named seed 0 whatever data.seed said)."""
    import hashlib
    import sys

    from harness.data import synth

    data, size = "synth_tiny", "tiny"
    synth.write(tmp_path / "cache" / "data", 0, size, path=tmp_path / "cache" / "data" / synth.file_name(size, 0))
    res = cli.run([sys.executable, "-m", "harness.run", "stage=smoke", f"data={data}", "data.seed=1",
                          "dry_run=true", f"runs_dir={tmp_path}/runs", f"cache_dir={tmp_path}/cache",
                          "model.base_url=http://127.0.0.1:9/v1"], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    line = next(x for x in res.stdout.splitlines() if x.startswith("data "))
    assert f"sha256 {hashlib.sha256(synth.dumps(1, size)).hexdigest()}" in line, line
    assert synth.file_name(size, 1) in line, line
