"""`dry_run=true` writes nothing: no stage folder, no generated data file, no Hydra sweep file (multirun.yaml), in
any stage's command or any judging command. Each case runs the real command line in a fresh folder that holds the
runs and the cache, and compares every file there before and after."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests import cli
from tests.fake_model import FakeModel
from tests.personal_helpers import Script, stage_cfg

REPO = Path(__file__).resolve().parents[1]
DEAD = "http://127.0.0.1:9/v1"  # nothing may be sent: a dry run that reached for it would fail
TINY = ["data=synth_tiny", "samples.main.per_type=1", "samples.full.per_type=1", "samples.org_public.per_type=1",
        "samples.org_private.per_type=1"]  # the main and Org stages' plans on the generated tiny set, in seconds

CASES = {
    "smoke": ("harness.run", ["stage=smoke"]),
    "main": ("harness.run", ["stage=main", *TINY]),
    "org": ("harness.run", ["stage=org", *TINY]),
    "personal": ("harness.run", ["stage=personal"]),
    "personal-sweep": ("harness.run", ["-m", "stage=personal", "model=vllm,local"]),  # stage=personal_paper's sweep, by hand
    "backends": ("harness.run", ["stage=backends"]),
    "judge-personal-sweep": ("judge.run", ["-m", "stage=personal", "model=vllm,local"]),  # ...and its judging
    "judge-smoke": ("judge.run", ["stage=smoke", "judge=vllm", f"judge.base_url={DEAD}", "judge.model=j"]),
    "probe-smoke": ("judge.probe", ["stage=smoke", "judge=vllm", f"judge.base_url={DEAD}", "judge.model=j"]),
    "agreement-smoke": ("judge.agreement", ["stage=smoke", "judge=vllm", f"judge.base_url={DEAD}", "judge.model=j",
                                            "+judge@judge2=vllm", f"judge2.base_url={DEAD}", "judge2.model=k"]),
}


def files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): (p.is_dir() or p.stat().st_size) for p in root.rglob("*")}


def smoke_folder(runs: Path) -> None:
    """A judged-nowhere smoke folder of three answered runs, for the judging commands to plan over."""
    from tests.analysis_fixtures import Stage

    s = Stage(runs, "smoke")
    for i, qtype in enumerate(("single-session-user", "multi-session", "temporal-reasoning")):
        s.add("none", f"q{i}", qtype=qtype, judged=False, gold="42", answer="It is 42")
    s.write()


@pytest.mark.parametrize("case", list(CASES))
def test_a_dry_run_writes_no_file(case, tmp_path):
    module, args = CASES[case]
    if module != "harness.run":
        smoke_folder(tmp_path / "runs")
    before = files(tmp_path)
    res = cli.run([sys.executable, "-m", module, *args, "dry_run=true", f"runs_dir={tmp_path}/runs",
                   f"cache_dir={tmp_path}/cache", f"model.base_url={DEAD}"], cwd=tmp_path)  # in-process
    assert res.returncode == 0, (case, res.stderr[-2000:])
    written = {k for k, v in files(tmp_path).items() if before.get(k) != v}
    # the one file a dry run may leave: the data files' sha256 cache (keyed by inode and times; no run, no data)
    assert written - {"cache", "cache/sha256.json"} == set(), (case, sorted(written))


def _files(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_judge_dry_run_writes_no_file_anywhere(tmp_path, capsys):
    """Claim 4: `judge.run dry_run=true` sends and writes nothing: no request, no judgement, and no file in the
    stage folder or the cache folder (the judge's reply cache is read if it exists, never created)."""
    from judge.run import main_entry
    from tests.personal_helpers import fake_folder, scores

    with FakeModel(script=Script()) as fake:
        judge = ["judge=vllm", f"judge.base_url={fake.base_url}", "judge.model=judge-x", "dry_run=true"]
        cfg = stage_cfg(tmp_path, fake.base_url, ["naive_concat"], n=2, extra=judge)
        fake_folder(tmp_path / "runs", str(cfg.stage.name), str(cfg.stage.label), {"name": "vllm", "model": "m"},
                    [{"condition": "naive_concat", "trial_id": t} for t in ("t0000", "t0001")])
        before = _files(tmp_path)
        assert main_entry(cfg) == 0
        assert fake.requests == []
        assert "2 would need a model call" in capsys.readouterr().out
        assert _files(tmp_path) == before
        from judge.cache import JudgeCache  # an existing cache is read, and no -wal/-shm appears beside it

        JudgeCache(tmp_path / "cache" / "judge_cache.sqlite").close()
        before = _files(tmp_path)
        assert main_entry(cfg) == 0
        assert fake.requests == [] and _files(tmp_path) == before
    assert "2 would need a model call" in capsys.readouterr().out


def test_personal_paper_dry_run_plans_the_judge_of_a_stage_not_run_yet(tmp_path, capsys):
    """Claim 4: `make run` and `make judge STAGE=personal_paper ARGS="dry_run=true"` print both plans and send
    nothing. The second, meets the folder the dry run did not write: a plan saying so (exit 0), not "run the stage first"
    (exit 2, which fails the make)."""
    from judge.run import main_entry

    with FakeModel(script=Script()) as fake:
        judge = ["judge=vllm", f"judge.base_url={fake.base_url}", "judge.model=judge-x"]
        cfg = stage_cfg(tmp_path, fake.base_url, ["naive_concat"], n=2, extra=[*judge, "dry_run=true"])
        assert main_entry(cfg) == 0
        assert fake.requests == []
    assert "dry run" in capsys.readouterr().out
    assert list(tmp_path.rglob("*")) == []
    # the paper's judge is still enforced in the plan, and without dry_run a stage never run is still refused
    assert main_entry(stage_cfg(tmp_path, "http://127.0.0.1:9/v1", ["naive_concat"], n=2,
                                extra=[*judge, "dry_run=true", "paper_judge=true"])) == 2
    assert main_entry(stage_cfg(tmp_path, "http://127.0.0.1:9/v1", ["naive_concat"], n=2, extra=judge)) == 2


def test_a_dry_sweep_spelt_dry_run_yes_writes_no_sweep_file_under_runs(tmp_path):
    """The stage reads `dry_run=yes` as a dry run (any true value); hydra.sweep.dir must read it the same way, or
    the dry sweep leaves multirun.yaml and its job folders under runs/.sweeps."""
    import sys

    res = cli.run([sys.executable, "-m", "harness.run", "-m", "stage=smoke", "seed=0,1", "dry_run=yes",
                          f"runs_dir={tmp_path}/runs", f"cache_dir={tmp_path}/cache",
                          "model.base_url=http://127.0.0.1:9/v1"], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.count("dry run: nothing started") == 2  # both jobs took it for a dry run
    assert not (tmp_path / "runs").exists() or list((tmp_path / "runs").rglob("*")) == []
