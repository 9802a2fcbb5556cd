"""`dry_run=true` writes nothing: no stage folder, no generated data file, no Hydra sweep file (multirun.yaml), in
any stage's command or any judging command. Each case runs the real command line in a fresh folder that holds the
runs and the cache, and compares every file there before and after."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests import cli

REPO = Path(__file__).resolve().parents[1]
DEAD = "http://127.0.0.1:9/v1"  # nothing may be sent: a dry run that reached for it would fail
TINY = ["data=synth_tiny", "samples.main.per_type=1", "samples.full.per_type=1", "samples.org_public.per_type=1",
        "samples.org_private.per_type=1"]  # the main and Org stages' plans on the generated tiny set, in seconds

CASES = {
    "smoke": ("harness.run", ["stage=smoke"]),
    "main": ("harness.run", ["stage=main", *TINY]),
    "org": ("harness.run", ["stage=org", *TINY]),
    "personal": ("harness.run", ["stage=personal"]),
    "personal-sweep": ("harness.run", ["-m", "stage=personal", "model=vllm,local"]),  # make personal-paper's first
    "backends": ("harness.run", ["stage=backends"]),
    "judge-personal-sweep": ("judge.run", ["-m", "stage=personal", "model=vllm,local"]),  # ...and its second
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
