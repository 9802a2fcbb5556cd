"""Options by name (harness/run/settings.py): a misspelt or unknown added option is an error naming the nearest
key, and a stage file's own keys win over the defaults, the command line over both. Their values and types, each
module's typed node: tests/test_typed_settings.py."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from harness.run.settings import SettingsError, check_additions

REPO = Path(__file__).resolve().parents[1]


def composed(*overrides):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def test_a_misspelt_condition_option_names_the_nearest_key():
    ov = ["stage=smoke", "+stage.conditions.tool_dense.kk=5"]
    with pytest.raises(SettingsError, match=r"stage\.conditions\.tool_dense\.kk.*did you mean stage\.conditions\.tool_dense\.k\?"):
        check_additions(composed(*ov), ov)


def test_declared_options_and_open_dictionaries_pass():
    ov = ["stage=smoke", "+judge.kinds=[answer_check]", "+stage.judge_kinds=[answer_check]",
          "+judge.params.reasoning_effort=low", "+model.params.top_p=0.5", "+results_dir=/tmp/r",
          "+condition@stage.conditions.shell=shell"]
    check_additions(composed(*ov), ov)  # nothing raised


@pytest.mark.parametrize("override, nearest", [("+stage.judge_kind=[brief]", "stage.judge_kinds"),
                                               ("+judge.kind=[brief]", "judge.kinds"),
                                               ("+index.dimm=8", "index.dim")])
def test_an_unknown_option_of_each_typed_node_is_refused(override, nearest):
    ov = ["stage=smoke", override]
    with pytest.raises(SettingsError, match=rf"did you mean {nearest}\?"):
        check_additions(composed(*ov), ov)


def test_the_command_stops_with_exit_2_before_anything_runs(tmp_path):
    res = subprocess.run([sys.executable, "-m", "harness.run", "stage=smoke", "dry_run=true", f"runs_dir={tmp_path}",
                          "+stage.conditions.prefetch.kk=3"], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "did you mean stage.conditions.prefetch.k?" in res.stderr and "plan" not in res.stdout


def test_a_misspelt_judgement_kind_stops_the_run_command_before_anything_runs(tmp_path):
    """`+judge.kinds=[answer_check,breif]` on a stage that judges after its runs passed the dry run and
    would have failed only at judging, after every run had been made."""
    res = subprocess.run([sys.executable, "-m", "harness.run", "stage=smoke", "dry_run=true", f"runs_dir={tmp_path}",
                          "+judge.kinds=[answer_check,breif]"], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert res.returncode == 2, (res.stdout[-1000:], res.stderr[-2000:])
    assert "judgement kind 'breif'" in res.stderr and "runs planned" not in res.stdout


@pytest.mark.parametrize("override, nearest", [
    ("+model.temprature=0", "model.params.temperature"),  # was "did you mean model.parallel?"
    ("+stage.conditions.prefetch.nn=5", "stage.conditions.prefetch.k"),  # was "...prefetch.scoring?"
])
def test_a_misspelt_option_names_the_nearest_key_also_inside_an_open_dictionary(override, nearest):
    from harness.run.settings import SettingsError, check_additions

    ov = ["stage=smoke", "model=vllm", override]
    with pytest.raises(SettingsError, match=rf"did you mean {re.escape(nearest)}\?"):
        check_additions(composed(*ov), ov)


def test_a_stage_files_top_level_keys_win_over_the_defaults_and_the_command_line_over_both(tmp_path):
    """conf/config.yaml's own keys are the defaults every stage file may set (its `_self_` comes first): a stage
    file's `concurrency`, `paper_judge` or sweep were silently overridden by them while `_self_` came last."""
    (tmp_path / "stage").mkdir()
    (tmp_path / "stage" / "toy_keys.yaml").write_text(
        "# @package _global_\ndefaults: [smoke, _self_]\nconcurrency: 3\npaper_judge: true\nseed: 5\n")
    search = f"hydra.searchpath=[file://{tmp_path}]"
    cfg = composed("stage=toy_keys", search)
    assert (cfg.concurrency, cfg.paper_judge, cfg.seed) == (3, True, 5)
    assert composed("stage=toy_keys", search, "seed=7").seed == 7
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        paper = compose("config", overrides=["stage=personal_paper"], return_hydra_config=True)
    assert paper.paper_judge is True and paper.judge.model == "gpt-5.4" and str(paper.hydra.mode) == "RunMode.MULTIRUN"
    assert paper.hydra.sweeper.params.model == "gpt4o,llama31_8b,qwen25_7b"
