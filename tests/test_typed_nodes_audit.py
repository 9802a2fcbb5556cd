"""Audit of the endpoint and stage typed nodes (issue 31 item 3, branch i31c): what an outside user hits
with a stage key of the wrong type, a preset of their own, and the presets' dry runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def dry(tmp_path, *overrides):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run([sys.executable, "-m", "harness.run", "model=vllm", "model.base_url=http://127.0.0.1:9/v1",
                          "dry_run=true", f"runs_dir={tmp_path}/runs", f"cache_dir={tmp_path}/cache", *overrides],
                         capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    return res, res.stdout + res.stderr


@pytest.mark.parametrize("stage, override, key", [
    ("personal_smoke", "stage.trials.n=many", "stage.trials.n"),      # was ValueError: int('many') in the planner
    ("personal_smoke", "stage.trials=5", "stage.trials"),              # was AttributeError: 'int' has no .get
    ("backends", "stage.delta_rounds=many", "stage.delta_rounds"),     # was accepted: the dry run passed it
])
def test_a_stage_key_its_yaml_gives_keeps_its_type(tmp_path, stage, override, key):
    """stage_node typed a yaml's key by its composed value, the override included, so only StageSettings'
    declared fields (stage.builds) were ever refused; the rest crashed the planner or passed the dry run."""
    res, out = dry(tmp_path, f"stage={stage}", override)
    assert res.returncode == 2, out[-2000:]
    assert key in out and "Traceback" not in out and "dry run: nothing started" not in out, out[-2000:]
