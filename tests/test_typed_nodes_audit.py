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


def composed_checked(*overrides):
    from hydra import compose, initialize_config_dir

    from harness.run import settings

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=list(overrides))
    return settings.check(cfg, overrides=list(overrides), sources=[REPO / "conf"])


@pytest.mark.parametrize("override, key", [
    ("model.prices.hit=abc", "model.prices.hit"),
    ("++model.offpeak={start_utc: '16:30', end_utc: '00:30', factor: x}", "model.offpeak.factor"),
    ("++model.offpeak={start_utc: 'late', end_utc: '00:30', factor: 0.5}", "model.offpeak.start_utc"),
    ("model.offpeak.end_utc=null", "model.offpeak.end_utc"),
    ("judge.prices.output=dear", "judge.prices.output"),
])
def test_a_price_or_offpeak_window_that_is_not_one_is_refused_naming_its_key(override, key):
    """The open `prices` / `offpeak` nodes took any value: `model.prices.hit=abc` passed the check and the dry
    run's forecast died on float('abc') (a ValueError traceback, exit 1), a real stage at its first metered call."""
    from harness.run.settings import SettingsError

    with pytest.raises(SettingsError, match=key.replace(".", r"\.")):
        composed_checked("model=deepseek", "judge=deepseek", override)


def test_a_preset_of_ones_own_prices_offpeak_and_renames_reach_the_request_and_the_cost(tmp_path):
    """A preset under hydra.searchpath with accepts (a rename, a drop), prices and an off-peak window: the client
    built from its typed node sends the renamed parameters and the meter charges its prices in the window."""
    from datetime import datetime

    from harness.endpoints.client import Agent
    from harness.endpoints.pricing import paid_cost

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "mine_audit.yaml").write_text(
        "name: mine_audit\nprovider: openai_compatible\nmodel: m1\nbase_url: http://127.0.0.1:9/v1\n"
        "params: {temperature: 0, max_tokens: 50, seed: 3}\naccepts: {max_tokens: max_completion_tokens, seed: false}\n"
        "prices: {currency: USD, hit: 1.0, miss: 2.0, output: 4.0, usd_per_currency: 1.0}\n"
        "offpeak: {start_utc: '10:00', end_utc: '11:00', factor: 0.5}\n")
    over = [f"hydra.searchpath=[file://{tmp_path}]", "model=mine_audit", "model.params.temperature=0.5"]
    from hydra import compose, initialize_config_dir

    from harness.run import settings

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=over)
    mc = settings.check(cfg, overrides=over, sources=[REPO / "conf", tmp_path]).model
    _, sent, dropped = Agent("http://127.0.0.1:9/v1", mc, "t", 1, None).request()
    assert sent == {"temperature": 0.5, "max_completion_tokens": 50} and dropped == ["seed"]
    m = 1_000_000
    assert paid_cost(mc.prices, mc.offpeak, m, m, m, datetime(2026, 1, 1, 10, 30)) == pytest.approx(3.5)
    assert paid_cost(mc.prices, mc.offpeak, m, m, m, datetime(2026, 1, 1, 12, 0)) == pytest.approx(7.0)


def test_a_stage_key_keeps_its_type_beside_a_plugin_yaml_under_hydra_searchpath(tmp_path):
    """The stage's own yaml is composed with the command's groups, a plugin's under hydra.searchpath among them:
    the first fix composed without the command's searchpath and failed on `+condition@...=toy`."""
    (tmp_path / "conf" / "condition").mkdir(parents=True)
    (tmp_path / "conf" / "condition" / "toy_audit.yaml").write_text("module: prefetch\nk: 3\n")
    plug = [f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "+condition@stage.conditions.toy=toy_audit"]
    res, out = dry(tmp_path, "stage=personal_smoke", *plug, "stage.trials.n=many")
    assert res.returncode == 2 and "stage.trials.n" in out and "Traceback" not in out, out[-2000:]
    res, out = dry(tmp_path, "stage=personal_smoke", *plug, "stage.trials.n=3")
    assert "stage.trials" not in out and "Traceback" not in out, out[-2000:]
