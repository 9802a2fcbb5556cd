"""Audit of the typed settings (issue 31 item 3): what an outside user hits with misspelt, null or
unresolvable values, index settings added with +, the backend study's configurations, the judge's
reasoning effort and a sweep whose later job is bad."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from harness.run import settings
from harness.run.settings import SettingsError

REPO = Path(__file__).resolve().parents[1]


def composed(*overrides):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def checked(*overrides):
    cfg = composed(*overrides)
    return cfg, settings.check(cfg, overrides=list(overrides), sources=[REPO / "conf"])


@pytest.mark.parametrize("value", ["null", "prefetc"])
def test_a_null_or_misspelt_condition_module_is_refused_naming_its_key(value):
    """Was a ModuleNotFoundError traceback (exit 1) after the check had passed it as a plugin without Settings."""
    with pytest.raises(SettingsError, match=r"stage\.conditions\.prefetch\.module"):
        checked("stage=smoke", f"stage.conditions.prefetch.module={value}")


def test_an_interpolation_that_does_not_resolve_is_refused_naming_its_key():
    """Was an InterpolationKeyError traceback (exit 1)."""
    with pytest.raises(SettingsError, match=r"stage\.conditions\.prefetch\.k.*nope\.x"):
        checked("stage=smoke", "stage.conditions.prefetch.k=${nope.x}")


@pytest.mark.parametrize("over", [["index=pgvector", "+index.overfetch=2"], ["index=exact", "+index.depth=3"],
                                  ["index=redis_qe", "+index.batch_size=2"]])
def test_an_index_setting_its_backend_declares_may_be_added_with_plus(over):
    """index_schema says these are the backend's (or the space's) settings; `+` refused them as unknown."""
    cfg, _ = checked(*over)
    key, value = over[1].lstrip("+").split("=")
    assert OmegaConf.select(cfg, key) == int(value)


def test_a_misspelt_index_setting_added_with_plus_names_the_backends_nearest():
    with pytest.raises(SettingsError, match=r"did you mean index\.overfetch\?"):
        checked("index=pgvector", "+index.overfetc=2")


@pytest.mark.parametrize("config, near", [("{id: r, backend: redis_qe, buld: {m: 10}}", "build"),
                                          ("{id: r, backend: redis_qe, querry: {ef_runtime: 10}}", "query"),
                                          ("{id: r, backend: pgvector, case: [one]}", "cases")])
def test_a_misspelt_key_of_a_backend_study_configuration_is_refused(config, near):
    """`buld:` was dropped silently (bench.backends.cases reads build/query/cases only)."""
    with pytest.raises(SettingsError, match=rf"did you mean stage\.configs\[0\] \(r\)\.{near}\?"):
        checked("stage=backends", f"stage.configs=[{config}]")


def test_the_judges_reasoning_effort_is_the_one_its_calls_send():
    """The judge sends its judge_params (judge.common.model_config), never its model preset's params: the
    typed field read params, so it said `low` while the judge sent `high`, and `+judge.reasoning_effort=`
    was written where the judge never sends it."""
    from judge.common import judge_model_config

    _, n = checked("stage=smoke", "judge=gpt54", "judge.judge_params.reasoning_effort=high")
    assert n.judge.reasoning_effort == "high"
    _, n = checked("stage=smoke", "judge=vllm", "+judge.judge_params.reasoning_effort=high")
    assert n.judge.reasoning_effort == "high"
    cfg, n = checked("stage=smoke", "judge=vllm", "+judge.reasoning_effort=medium")
    assert n.judge.reasoning_effort == "medium"
    assert judge_model_config(cfg.judge)["params"].get("reasoning_effort") == "medium"  # the request carries it
    # gpt54's model preset says low in params, which the judge does not send: no disagreement there ...
    _, n = checked("stage=smoke", "judge=gpt54", "~judge.judge_params.reasoning_effort", "+judge.reasoning_effort=high")
    assert n.judge.reasoning_effort == "high"
    with pytest.raises(SettingsError, match="set twice, differently"):  # ... but with its judge_params there is
        checked("stage=smoke", "judge=gpt54", "+judge.reasoning_effort=high")


def test_a_sweep_whose_later_job_is_bad_runs_no_job(tmp_path):
    """`-m stage.conditions.prefetch.k=3,eight`: job 0 ran its whole stage before job 1 was refused."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run([sys.executable, "-m", "harness.run", "-m", "stage=smoke", "model=vllm",
                          "model.base_url=http://127.0.0.1:9/v1", "dry_run=true", f"runs_dir={tmp_path}/runs",
                          f"cache_dir={tmp_path}/cache", f"hydra.sweep.dir={tmp_path}/sweep",
                          "stage.conditions.prefetch.k=3,eight"],
                         capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode == 2, out[-2000:]
    assert "stage.conditions.prefetch.k" in out and "dry run: nothing started" not in out, out[-2000:]


def test_the_study_configurations_schema_is_the_keys_the_backend_study_reads():
    from dataclasses import fields

    from bench.backends.cases import Config

    assert {f.name for f in fields(settings.StudyConfigSettings)} == {f.name for f in fields(Config)}


def test_a_forecast_with_a_keyword_only_option_is_not_handed_the_question(tmp_path, monkeypatch):
    """forecast(settings, *, detail=False) was called forecast(settings, question): a TypeError in the dry run."""
    from harness.run.forecast import reads_question, shape

    (tmp_path / "auditkw").mkdir()
    (tmp_path / "auditkw" / "__init__.py").write_text("")
    (tmp_path / "auditkw" / "toy.py").write_text(
        "def forecast(cfg, *, detail=False):\n    return {'calls': 5}\n\ndef build(cfg, ctx):\n    return None\n"
        "import conditions\nconditions.register('auditkw/toy')\n")
    (tmp_path / "auditkw" / "toyq.py").write_text(
        "def forecast(cfg, question=None):\n    return {'calls': 7 if question is None else 2}\n\n"
        "def build(cfg, ctx):\n    return None\nimport conditions\nconditions.register('auditkw/toyq')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("MEMSPACE_PLUGINS", "auditkw.toy,auditkw.toyq")  # a condition loads by its registered name
    import importlib

    kw, q = importlib.import_module("auditkw.toy"), importlib.import_module("auditkw.toyq")
    assert not reads_question(kw.forecast) and reads_question(q.forecast)
    question = object()
    assert shape(OmegaConf.create({"module": "auditkw/toy", "access": "x"}), question)["calls"] == 5
    assert shape(OmegaConf.create({"module": "auditkw/toyq", "access": "x"}), question)["calls"] == 2
    assert shape(OmegaConf.create({"module": "auditkw/toyq", "access": "x"}))["calls"] == 7


def test_full_is_forecast_from_its_questions_histories_and_says_so():
    """docs/extending.md: `full` puts the whole history in the prompt and the source column says
    `data (its questions' histories)` for it; the row said `typical conversation shape`."""
    from harness.run.forecast import _from_data
    from tests.test_typed_settings import _question

    cfg = composed("stage=smoke").stage.conditions["full"]
    short, long = (_from_data("full", cfg, ["q"], {"q": _question(n, 20)}, 500) for n in (100, 900))
    assert long.miss > short.miss
    assert short.source == "data (its questions' histories)"


def test_a_number_a_plugin_conditions_yaml_gives_keeps_its_type(tmp_path, monkeypatch):
    """A plugin condition without Settings, its yaml under hydra.searchpath: `depth: 3` overridden with `abc`
    passed (its yaml was looked up on the tree's search path only, not found, and skipped)."""
    (tmp_path / "auditnost").mkdir()
    (tmp_path / "auditnost" / "__init__.py").write_text("")
    (tmp_path / "auditnost" / "toy.py").write_text("import conditions\ndef build(cfg, ctx):\n    return None\n"
                                                   "conditions.register('auditnost/toy')\n")
    (tmp_path / "conf" / "condition").mkdir(parents=True)
    (tmp_path / "conf" / "condition" / "auditnost.yaml").write_text("module: auditnost/toy\ndepth: 3\naccess: x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("MEMSPACE_PLUGINS", "auditnost.toy")  # a condition is loaded by its registered name only
    base = ["stage=smoke", f"hydra.searchpath=[file://{tmp_path}/conf]", "+condition@stage.conditions.nost=auditnost"]
    sources = [REPO / "conf", tmp_path / "conf"]
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        good = compose("config", overrides=[*base, "stage.conditions.nost.depth=4"], return_hydra_config=True)
        bad = compose("config", overrides=[*base, "stage.conditions.nost.depth=abc"], return_hydra_config=True)
    settings.check(good, overrides=[*base, "stage.conditions.nost.depth=4"], sources=sources)
    with pytest.raises(SettingsError, match=r"stage\.conditions\.nost\.depth: 'abc' is not of type int"):
        settings.check(bad, overrides=[*base, "stage.conditions.nost.depth=abc"], sources=sources)
