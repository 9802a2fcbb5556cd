"""Each module receives its own typed node (harness/run/settings.py): a condition its module's `Settings`,
a backend its constructor's settings, the model and the judge their presets' schema; the reasoning effort is
one field; the forecast reads the data (issue 31, item 3)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Optional

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict

from harness.run import settings
from harness.run.settings import SettingsError

REPO = Path(__file__).resolve().parents[1]


def composed(*overrides):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def test_a_condition_gets_its_modules_settings_with_the_yamls_and_the_overrides_values():
    from conditions import memory_tool, prefetch

    nodes = settings.condition_nodes(composed("stage=smoke", "stage.conditions.tool_bm25.k=3",
                                              "stage.tool_guidance=assisted"))
    bm25 = nodes["tool_bm25"]
    assert type(bm25) is not memory_tool.Settings and isinstance(bm25, memory_tool.Settings)  # with every condition's keys
    assert (bm25.k, bm25.scoring, bm25.scope, bm25.guidance) == (3, "bm25", "own", "assisted")  # override, yaml, interpolation
    assert bm25.compare_with == [] and bm25.module == "memory_tool"
    assert isinstance(nodes["prefetch"], prefetch.Settings) and nodes["prefetch"].k == 8


def test_a_plugin_condition_without_settings_still_gets_its_config_node(tmp_path, monkeypatch):
    from omegaconf import DictConfig

    (tmp_path / "toyplug").mkdir()
    (tmp_path / "toyplug" / "__init__.py").write_text("")
    (tmp_path / "toyplug" / "nosettings_toy.py").write_text(
        "import conditions\ndef build(cfg, ctx):\n    return None\nconditions.register('toyplug/nosettings_toy')\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # a module that loads (one that does not is refused)
    monkeypatch.setenv("MEMSPACE_PLUGINS", "toyplug.nosettings_toy")  # a condition loads by its registered name only
    node = OmegaConf.create({"module": "toyplug/nosettings_toy", "access": "x", "anything": 1})
    assert settings.condition_schema("toyplug/nosettings_toy") is None
    assert isinstance(settings.condition_node(node), DictConfig)


def _with_key(cfg, path: str, key: str, value):
    node = OmegaConf.select(cfg, path)
    with open_dict(node):
        node[key] = value
    return cfg


@pytest.mark.parametrize("over, path, key, near", [
    (["stage=smoke"], "stage.conditions.prefetch", "kk", "stage.conditions.prefetch.k"),
    (["stage=org"], "stage.conditions.ask_agent", "asked_max_round", "stage.conditions.ask_agent.asked_max_rounds"),
    (["index=pgvector"], "index", "ef_serch", "index.ef_search"),
    (["index=hybrid"], "index.dense", "ef_runtme", "index.dense.ef_runtime"),
    (["model=deepseek"], "model", "timout_s", "model.timeout_s"),
    (["judge=deepseek"], "judge", "promts", "judge.prompts"),
])
def test_a_key_a_yaml_gives_that_its_node_does_not_declare_is_an_error_naming_the_nearest(over, path, key, near):
    """Not only `+key=` on the command line: a misspelt key in a condition's, an index's or a preset's yaml."""
    cfg = _with_key(composed(*over), path, key, 5)
    with pytest.raises(SettingsError, match=rf"{path}\.{key}: no such setting \(did you mean {near}\?\)"):
        settings.typed_nodes(cfg)
        settings.check_indexes(cfg)


def test_a_backend_study_configuration_is_checked_against_its_backends_settings():
    cfg = composed("stage=backends", "stage.configs=[{id: r, backend: redis_qe, query: {ef_runtim: 10}}]")
    with pytest.raises(SettingsError, match=r"did you mean stage\.configs\[0\] \(r\)\.ef_runtime\?"):
        settings.check_indexes(cfg)


@pytest.mark.parametrize("over, key", [
    (["stage=smoke", "stage.conditions.prefetch.k=eight"], "stage.conditions.prefetch.k"),
    (["stage=smoke", "stage.conditions.tool_bm25.k=[1]"], "stage.conditions.tool_bm25.k"),
    (["index=pgvector", "index.m=many"], "index.m"),
    (["model=deepseek", "model.max_retries=often"], "model.max_retries"),
])
def test_a_value_of_the_wrong_type_is_refused_naming_its_key(over, key):
    cfg = composed(*over)
    with pytest.raises(SettingsError, match=key.replace(".", r"\.")):
        settings.typed_nodes(cfg)
        settings.check_indexes(cfg)


@pytest.mark.parametrize("override, key", [("stage.judge_after_run=maybe", "stage.judge_after_run"),
                                           ("index.dim=wide", "index.dim"),
                                           ("model.timeout_s=soon", "model.timeout_s")])
def test_a_value_of_the_wrong_type_is_refused_by_the_schema_check_naming_its_key(override, key):
    from harness.run.settings import check_types

    with pytest.raises(SettingsError, match=key.replace(".", r"\.")):
        check_types(composed("stage=smoke", override))


@pytest.fixture(scope="module")
def stage_cfgs():
    """Every shipped stage's default config, composed once for the tests that only read it (read-only: a test
    that wrote to one would fail here instead of changing what a later test reads)."""
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfgs = {p.stem: compose("config", overrides=[f"stage={p.stem}"])
                for p in sorted((REPO / "conf" / "stage").glob("*.yaml"))}
    for cfg in cfgs.values():
        OmegaConf.set_readonly(cfg, True)
    return cfgs


def test_every_shipped_preset_and_stage_builds_its_typed_nodes(stage_cfgs):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        for group in ("stage", "model", "judge", "index"):
            for path in sorted((REPO / "conf" / group).glob("*.yaml")):
                cfg = stage_cfgs[path.stem] if group == "stage" else compose("config", overrides=[f"{group}={path.stem}"])
                settings.check_types(cfg)  # the schema of every node, then the typed nodes themselves
                n = settings.typed_nodes(cfg)
                settings.check_indexes(cfg)
                assert isinstance(n.model, settings.EndpointSettings) and isinstance(n.judge, settings.JudgeSettings)
                assert isinstance(n.stage, settings.StageSettings) and n.stage.name == cfg.stage.name


@pytest.mark.parametrize("over", [["+model.reasoning_effort=LOW"], ["~model.params", "+model.params={reasoning_effort: low}"],
                                  ["~model.params", "+model.params={reasoning: {effort: low}}"],
                                  ["~model.params", "+model.params={extra_body: {reasoning_effort: low}}"], ["~model.params", "+model.params={think: low}"],
                                  ["model=openai_reasoning", "model.accepts.reasoning_effort=reasoning.effort"]])
def test_the_reasoning_effort_in_any_spelling_is_the_one_field_the_request_and_the_manifest_read(over):
    from harness.endpoints.fit import fit
    from harness.run import fidelity

    cfg = composed("stage=smoke", "model=vllm", *over)  # vllm's preset sets no reasoning effort
    settings.check(cfg, overrides=over, sources=[REPO / "conf"])  # the config edge
    assert settings.typed_nodes(cfg).model.reasoning_effort == "low"
    model = OmegaConf.to_container(cfg.model, resolve=True)
    sent, _ = fit(model["params"], model.get("accepts"))
    assert [v for _, v in settings.efforts(sent)] == ["low"]  # the request carries it, in the provider's spelling
    assert fidelity.reasoning_effort(fidelity.plain(cfg.model)) == "low"  # the manifest reads the same field
    assert "reasoning effort low" in fidelity.reader_row(cfg).stage


def test_the_field_and_a_spelling_that_disagree_are_refused():
    cfg = composed("stage=smoke", "model=deepseek", "+model.reasoning_effort=high")  # the preset says low
    with pytest.raises(SettingsError, match="set twice, differently"):
        settings.check(cfg, overrides=["+model.reasoning_effort=high"], sources=[REPO / "conf"])


# ------------------------------------------------------------------ the forecast reads the data

@pytest.mark.parametrize("params", [{"reasoning_effort": "low"}, {"reasoning": {"effort": "low"}},
                                    {"extra_body": {"reasoning_effort": "LOW"}}, {"think": "low"}])
def test_the_reasoning_effort_is_one_setting_whatever_the_provider_calls_it(params):
    from harness.run.fidelity import reader_row
    from harness.run.settings import reasoning_effort

    cfg = composed("stage=smoke", "model=deepseek")
    cfg.model.params = params
    assert reasoning_effort(cfg.model) == "low"
    row = reader_row(cfg)
    assert "reasoning effort low" in row.line() and row.status == "same", row.line()


def test_no_reasoning_effort_reads_not_set_and_two_different_ones_are_refused():
    from harness.run.settings import reasoning_effort

    assert reasoning_effort({"params": {"temperature": 0}}) is None
    with pytest.raises(SettingsError, match="set twice, differently: params.reasoning_effort=low, params.reasoning.effort=high"):
        reasoning_effort({"name": "m", "params": {"reasoning_effort": "low", "reasoning": {"effort": "high"}}})


def _question(round_chars: int, rounds: int):
    from harness.data.longmemeval import Question, Session, Turn

    turns = tuple(t for i in range(rounds) for t in (Turn("user", "u" * round_chars), Turn("assistant", "a")))
    s = Session("s1", datetime(2023, 1, 1), turns)
    return Question("q", "multi-session", "What did I say?", "a", datetime(2023, 1, 2), (s,))


@pytest.mark.parametrize("cond", ["tool_bm25", "prefetch"])
def test_two_data_sets_of_different_sizes_give_different_forecasts(cond):
    """The same question over short and long rounds, few and many: the memory tool's and prefetch's
    forecast follow the history, as the nominal shape could not."""
    from conditions.memory_tool import result_chars
    from harness.run.forecast import _from_data

    cfg = composed("stage=smoke").stage.conditions[cond]
    rows = {name: _from_data(cond, cfg, ["q"], {"q": q}, 500) for name, q in
            {"short": _question(100, 20), "long": _question(900, 20), "few": _question(900, 2)}.items()}
    assert rows["long"].miss > rows["short"].miss > 0 and rows["long"].miss > rows["few"].miss
    # k = 8 results of min(1000, round) + 80 characters each (what format_results shows of one)
    assert result_chars(_question(900, 20), 8) == 8 * (900 + 1 + 12 + 80)
    assert result_chars(_question(900, 2), 8) == 2 * (900 + 1 + 12 + 80)
    assert all(r.source == "data (its questions' histories)" for r in rows.values())


def test_a_dry_run_forecasts_from_its_own_data_set_and_calls_no_model(tmp_path):
    """Two generated data sets, one dry run each against an address nothing listens on: prefetch's prompt
    less the no-memory prompt of the same question is the k results, sized from each data set (the nominal
    shape gave 6,500 characters for both), and nothing started."""
    from conditions.memory_tool import result_chars
    from harness.data.longmemeval import load
    from harness.data.source import Unwritten, resolve
    from tests import cli

    extra = {}
    for data in ("synth_tiny", "synth_xs"):
        res = cli.run([sys.executable, "-m", "harness.run", "stage=smoke", f"data={data}", "model=vllm",
                       "model.base_url=http://127.0.0.1:9/v1", "dry_run=true", f"runs_dir={tmp_path}/runs",
                       f"cache_dir={tmp_path}/cache", "samples.smoke.limit=1",
                       "stage.groups=[{sample:smoke,conditions:[prefetch,none]}]"], cwd=REPO)  # in this process
        assert res.returncode == 0, res.stderr[-2000:]
        assert "dry run: nothing started" in res.stdout and not (tmp_path / "runs").exists()
        rows = {line.split()[0]: line.split() for line in res.stdout.splitlines() if "data (" in line}
        extra[data] = int(rows["prefetch"][3].replace(",", "")) - int(rows["none"][3].replace(",", ""))
        qid = next(w for line in res.stdout.splitlines() for w in line.split() if w.startswith("prefetch.lme."))
        # the dry run wrote no data file: the same generated set, held in memory as the dry run held it
        held = resolve(composed(f"data={data}", f"cache_dir={tmp_path}/cache").data, write=False)
        assert isinstance(held, Unwritten), held
        q = load(held)[qid.split(".")[2]]  # run ids are condition.variant.qid.repeat
        assert abs(extra[data] - result_chars(q, 8) / 4) <= 1, (data, extra[data], result_chars(q, 8) / 4)
    assert extra["synth_tiny"] != extra["synth_xs"], extra


def test_a_stage_runs_end_to_end_with_each_condition_built_from_its_typed_node(tmp_path):
    """The smoke stage against the scripted upstream: the memory tool built from its Settings sends the
    overridden default k in its schema, and every run is recorded."""
    from harness.studies.agents import run as run_agents
    from harness.records import RunDir
    from tests.fake_model import FakeModel
    from tests.test_failures_midstage import _CACHE, agents_cfg

    _CACHE.setdefault("dir", tmp_path / "cache")
    with FakeModel() as fake:
        cfg = agents_cfg(tmp_path, fake, "stage.conditions.tool_bm25.k=3", conds="none,tool_bm25")
        rd = run_agents(cfg)
        tools = [t for r in fake.requests for t in (r["body"].get("tools") or [])
                 if t["function"]["name"] == "memory_search"]
    recs = list(RunDir(rd.root).records())
    assert len(recs) == 4 and all(r.status == "ok" for r in recs)
    assert tools and {t["function"]["parameters"]["properties"]["k"]["default"] for t in tools} == {3}


def test_the_judge_kinds_are_read_from_the_judges_typed_node():
    from judge import kinds

    cfg = composed("stage=smoke", "+judge.kinds=[answer_check]")
    nodes = settings.check(cfg, overrides=["+judge.kinds=[answer_check]"], sources=[REPO / "conf"])
    assert isinstance(nodes.judge, settings.JudgeSettings) and nodes.judge.kinds == ["answer_check"]
    assert [k.name for k in kinds.chosen(nodes.judge, cfg.stage)] == ["answer_check"]
    bad = composed("stage=smoke", "+judge.kinds=[no_such_kind]")
    with pytest.raises(Exception, match="no_such_kind"):
        kinds.chosen(settings.typed_nodes(bad).judge, bad.stage)


def test_a_client_built_from_a_preset_with_overrides_sends_the_overrides_values():
    """The client reads its typed node: the overrides' timeout and temperature reach the request, not the preset's."""
    from harness.endpoints.client import Agent, Meter
    from harness.endpoints.proxy import DEADLINE
    from tests.fake_model import FakeModel

    over = ["model=vllm", "model.timeout_s=7", "model.params.temperature=0.25", "+model.params.seed=11"]
    cfg = composed("stage=smoke", *over)  # vllm's preset: timeout_s 300, temperature 0
    node = settings.check(cfg, overrides=over, sources=[REPO / "conf"]).model
    assert isinstance(node, settings.EndpointSettings)
    with FakeModel() as fake:
        node.model = "fake"
        agent = Agent(fake.base_url, node, "run", 1, Meter(node.prices), max_retries=0)
        assert agent.model_cfg is node  # the typed node itself, not a copy of a mapping
        agent.complete([{"role": "user", "content": "hi"}])
        sent = fake.requests[-1]
    assert sent["body"]["temperature"] == 0.25 and sent["body"]["seed"] == 11
    assert float(sent["headers"][DEADLINE]) == 7.0  # the attempt's deadline is the override's timeout_s


def test_the_judges_client_is_built_from_its_typed_node():
    from judge.common import agent, judge_model_config, meter

    cfg = composed("stage=smoke", "judge.max_retries=1", "judge.backoff_s=0.5")
    a = agent("http://127.0.0.1:9/v1", judge_model_config(cfg.judge), "t", 1, meter(judge_model_config(cfg.judge)))
    assert isinstance(a.model_cfg, settings.JudgeSettings) and (a.max_retries, a.backoff_s) == (1, 0.5)
    assert a.params == {"temperature": 0, "max_tokens": 10, **(cfg.judge.get("judge_params") or {})}


def test_the_stages_planner_reads_its_typed_stage_node_with_the_overrides_values(tmp_path):
    from harness.run.agents import AgentStep

    base = AgentStep(composed("stage=smoke", f"cache_dir={tmp_path}", "dry_run=true"))
    twice = AgentStep(composed("stage=smoke", f"cache_dir={tmp_path}", "dry_run=true", "+stage.groups.0.repeats=2"))
    assert isinstance(twice.stage, settings.StageSettings) and type(twice.stage).__name__ == "SmokeStageSettings"
    assert twice.stage.groups[0]["repeats"] == 2 and twice.stage.judge_after_run is True  # the yaml's keys
    assert twice.stage.builds == 3 and twice.stage.only is None  # the declared fields' defaults
    assert len(twice.plan.runs) == 2 * len(base.plan.runs)  # the planner read the override from the typed node
    assert twice.stage_info()["kind"] == "agents"


def test_the_planner_reads_the_stage_node_it_is_given_not_the_config():
    from dataclasses import replace

    from harness.run.plan import build

    cfg = composed("stage=smoke", "dry_run=true")
    stage = settings.stage_node(cfg)
    other = replace(stage, groups=[{**stage.groups[0], "repeats": 3}], name="renamed")
    plan = build(other, cfg)  # cfg.stage still says one repeat and `smoke`
    assert len(plan.runs) == 3 * len(build(stage, cfg).runs) and plan.stage == "renamed"


def test_a_stage_value_of_the_wrong_type_is_refused_naming_its_key():
    with pytest.raises(SettingsError, match="stage.builds"):
        settings.stage_node(composed("stage=backends", "stage.builds=three"))


# ------------------------------------------------------------------ the whole config (issue 40, item 4)

TOP = [
    ("+concurency=2", r"^concurency: no such setting \(did you mean concurrency\?\)"),
    ("concurrency=abc", r"^concurrency: Value 'abc' of type 'str' could not be converted to Integer"),
    ("seed=abc", r"^seed: Value 'abc' of type 'str' could not be converted to Integer"),
    ("+runtime.session_search=adaptive", r"^runtime: no such setting"),  # the emulation's setting is gone (0.21.5 itself runs)
    ("+encoder.pooling=mean", r"^encoder\.pooling: no such setting"),
    ("encoder.batch_size=big", r"^encoder\.batch_size: Value 'big'"),
    ("+data.revsion=main", r"^data\.revsion: no such setting \(did you mean data\.revision\?\)"),
    ("+samples.main.per_typ=3", r"^samples\.main\.per_typ: no such setting \(did you mean samples\.main\.per_type\?\)"),
    ("samples.main.per_type=many", r"^samples\.main\.per_type: 'many' is not of type int"),
    ("budget_usd=lots", r"^budget_usd: Value 'lots'"),
    ("dry_run=maybe", r"^dry_run: Value 'maybe' is not a valid bool"),
    ("allow_deviation=encoder", r"^allow_deviation: "),
    ("+fidelity.preset=null", r"^fidelity: no such setting"),
    ("encoder.path=1", r"^encoder\.path: 1 is not a text"),
    ("~encoder.name", r"^encoder\.name: required"),
    ("encoder.name=bgee", r"^encoder\.name: .bgee. is not one of .*\(did you mean bge\?\)"),
]


@pytest.mark.parametrize("override, said", TOP, ids=[t[0] for t in TOP])
def test_every_top_level_option_is_typed_and_a_misspelt_one_names_the_nearest(override, said):
    """Outside the typed nodes `+concurency=2` and `concurrency=abc` ran, `seed=abc` ended in a traceback."""
    cfg = composed("stage=smoke", override)
    with pytest.raises(SettingsError, match=said):
        settings.check(cfg, [override], [REPO / "conf"])


def test_the_default_config_of_every_stage_passes_the_top_level_schema(stage_cfgs):
    for stage in sorted(p.stem for p in (REPO / "conf" / "stage").glob("*.yaml")):
        settings.check_top(stage_cfgs[stage])
    settings.check_top(composed("stage=main", "preset=paper", "+judge@judge2=deepseek_pro", "shard=0/2",
                                "budget_usd=5", "allow_deviation=[encoder]"))


def test_a_mistyped_top_level_option_exits_2_naming_its_key_on_the_command_line():
    res = subprocess.run([sys.executable, "-m", "harness.run", "stage=smoke", "dry_run=true", "seed=abc"],
                         capture_output=True, text=True, cwd=REPO, timeout=300)
    assert res.returncode == 2 and "seed: Value 'abc'" in res.stderr and "Traceback" not in res.stderr, res.stderr[-2000:]


def test_a_value_override_of_a_key_that_does_not_exist_exits_2_naming_the_nearest():
    """Hydra's own refusal of `concurency=2` exited 1 naming nothing (harness.run.settings.refuse_unknown_keys)."""
    conf = REPO / "conf"
    with pytest.raises(SettingsError, match=r"^concurency: no such setting \(did you mean concurrency\?\)"):
        settings.refuse_unknown_keys(["x", "stage=main", "concurency=2"], conf)
    with pytest.raises(SettingsError, match=r"did you mean model\.params\.temperature\?"):
        settings.refuse_unknown_keys(["x", "model=local", "model.temprature=1"], conf)
    with pytest.raises(SettingsError, match=r"did you mean stage\.conditions\.prefetch\.k\?"):
        settings.refuse_unknown_keys(["x", "stage=main", "stage.conditions.prefetch.kk=3"], conf)
    settings.refuse_unknown_keys(["x", "stage=main", "preset=paper", "concurrency=2", "+new=1", "-m", "seed=0,1"], conf)
    res = subprocess.run([sys.executable, "-m", "judge.run", "stage=main", "fidelity.preset=null"],
                         capture_output=True, text=True, cwd=REPO, timeout=300)
    assert res.returncode == 2 and "fidelity.preset: no such setting" in res.stderr, res.stderr[-2000:]


def test_a_condition_option_of_the_wrong_type_is_refused_naming_its_key():
    """`stage.conditions.shared.k=eight` (a key its yaml gives, typed by its module's Settings) was a
    traceback from deep in the fidelity manifest (exit 1), not a refusal naming the key."""
    from harness.run.settings import SettingsError, check_types

    with pytest.raises(SettingsError, match=r"stage\.conditions\.shared\.k\b"):
        check_types(composed("stage=smoke_org", "stage.conditions.shared.k=eight"))
    check_types(composed("stage=smoke_org", "stage.conditions.shared.k=5"))  # the right type passes


def test_a_wrong_typed_condition_option_stops_the_command_with_exit_2(tmp_path):
    from tests import cli  # in this process: the exit-2 command line runs as a process in the test above

    res = cli.run([sys.executable, "-m", "harness.run", "stage=smoke_org", "dry_run=true",
                   f"runs_dir={tmp_path}", "stage.conditions.shared.k=eight"], cwd=REPO)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "stage.conditions.shared.k" in res.stderr and "Traceback" not in res.stderr


def test_a_number_a_conditions_yaml_gives_keeps_its_type():
    """`stage.conditions.prefetch.k=eight` passed the dry run and would have failed every prefetch run."""
    from hydra import compose, initialize_config_dir

    from harness.run.settings import SettingsError, check_yaml_types

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        bad = compose("config", overrides=["stage=smoke", "stage.conditions.prefetch.k=eight"], return_hydra_config=True)
        with pytest.raises(SettingsError, match=r"stage\.conditions\.prefetch\.k: 'eight' is not of type int"):
            check_yaml_types(bad, bad.hydra.runtime.choices)
        for stage in sorted(p.stem for p in (REPO / "conf" / "stage").glob("*.yaml")):  # no shipped stage refused
            good = compose("config", overrides=[f"stage={stage}"], return_hydra_config=True)
            check_yaml_types(good, good.hydra.runtime.choices)


def test_a_conditions_yaml_edited_between_two_checks_of_one_process_is_read_as_it_is_now(tmp_path, monkeypatch):
    """The checks keep each composition for the process (settings.composed_once): a yaml rewritten between two
    commands, same size and within the same clock tick, is a new key, never the composition kept before."""
    conf = tmp_path / "conf"
    (conf / "condition").mkdir(parents=True)
    (conf / "config.yaml").write_text("defaults:\n  - _self_\nseed: 0\n")
    yaml = conf / "condition" / "toy.yaml"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        yaml.write_text("depth: 3\n")
        assert settings.composed_once("condition/toy") == {"condition": {"depth": 3}}
        assert settings.composed_once("condition/toy") is settings.composed_once("condition/toy")  # kept
        yaml.write_text("depth: a\n")  # same size, at once
        assert settings.composed_once("condition/toy") == {"condition": {"depth": "a"}}
        yaml.unlink()
        for _ in range(2):  # what composing raised is raised to every caller alike
            with pytest.raises(Exception, match="toy"):
                settings.composed_once("condition/toy")
    other = tmp_path / "other"
    (other / "condition").mkdir(parents=True)
    (other / "config.yaml").write_text("seed: 1\n")
    (other / "condition" / "toy.yaml").write_text("depth: 3\n")
    with initialize_config_dir(config_dir=str(other), version_base="1.3"):  # another search path: its own
        assert settings.composed_once("config") == {"seed": 1}


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


def dry(tmp_path, *overrides):
    """The dry run's command line in this process (tests/cli.py): its exit code and what it prints are the point;
    the command lines below that run as processes (exit 2 on a mistyped option, a sweep) keep the real one."""
    from tests import cli

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = cli.run([sys.executable, "-m", "harness.run", "model=vllm", "model.base_url=http://127.0.0.1:9/v1",
                   "dry_run=true", f"runs_dir={tmp_path}/runs", f"cache_dir={tmp_path}/cache", *overrides],
                  cwd=REPO, env=env)
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
    (tmp_path / "model" / "toy_preset.yaml").write_text(
        "name: toy_preset\nprovider: openai_compatible\nmodel: m1\nbase_url: http://127.0.0.1:9/v1\n"
        "params: {temperature: 0, max_tokens: 50, seed: 3}\naccepts: {max_tokens: max_completion_tokens, seed: false}\n"
        "prices: {currency: USD, hit: 1.0, miss: 2.0, output: 4.0, usd_per_currency: 1.0}\n"
        "offpeak: {start_utc: '10:00', end_utc: '11:00', factor: 0.5}\n")
    over = [f"hydra.searchpath=[file://{tmp_path}]", "model=toy_preset", "model.params.temperature=0.5"]
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
    (tmp_path / "conf" / "condition" / "toy_plugin.yaml").write_text("module: prefetch\nk: 3\n")
    plug = [f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "+condition@stage.conditions.toy=toy_plugin"]
    res, out = dry(tmp_path, "stage=personal_smoke", *plug, "stage.trials.n=many")
    assert res.returncode == 2 and "stage.trials.n" in out and "Traceback" not in out, out[-2000:]
    res, out = dry(tmp_path, "stage=personal_smoke", *plug, "stage.trials.n=3")
    assert "stage.trials" not in out and "Traceback" not in out, out[-2000:]


# ------------------------------------------------------------------------------ the command's edge

from hypothesis import given, settings as hsettings, strategies as st  # noqa: E402

from tests import cli  # noqa: E402
from tests.test_paper_preset import HERE, REPO as _REPO, SHORT  # noqa: E402

_DRY = ["stage=main", "preset=paper", "data=synth_tiny", "dry_run=true",
        f"allow_deviation=[{','.join(HERE + SHORT['main'])}]"]


def _command(*overrides: str):
    return cli.run([sys.executable, "-m", "harness.run", *_DRY, *overrides], cwd=_REPO,
                   env={**os.environ, "DEEPSEEK_API_KEY": "sk-test"})


@pytest.mark.parametrize("override,named", [
    ("+model.offpeak.factr=1", "did you mean offpeak.factor"),
    ("+judge.offpeak.factorr=2", "did you mean offpeak.factor"),
    ("+model.prices.hitt=1", "did you mean prices.hit"),
    ("concurrency=-3", "concurrency"), ("concurrency=0", "concurrency"),
    ("stage.kind=backends", "stage.kind"), ("preset=null", "preset takes: paper"),
    ("~fidelity.preset", "fidelity.preset"), ("stage.groups.0.repeats=1", "stage.groups.0.repeats"),
    ("encoder=hash", "encoder takes: bge, minilm"), ("judge.judge_params={temperature:1.0}", "judge.judge_params"),
])
def test_a_bad_option_exits_2_naming_its_key(override, named):
    """Each of these passed under the preset, ended in a traceback, or exited 1 with Hydra's message only."""
    res = _command(override)
    assert res.returncode == 2 and named in res.stdout + res.stderr, res.stdout[-1500:] + res.stderr[-1500:]
    assert "Traceback" not in res.stderr


@hsettings(max_examples=15, deadline=None)
@given(key=st.sampled_from(["start_utc", "end_utc", "factor"]), typo=st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1,
                                                                                max_size=3), pos=st.integers(0, 12))
def test_property_any_unknown_offpeak_or_price_key_is_refused_naming_a_real_one(key, typo, pos):
    from harness.endpoints.pricing import OFFPEAK_KEYS, PRICE_KEYS, check_prices

    bad = key[:pos] + typo + key[pos:]
    window = {"start_utc": "16:30", "end_utc": "00:30", "factor": 0.5}
    if bad in OFFPEAK_KEYS:
        return
    with pytest.raises(ValueError, match=r"did you mean offpeak\.(start_utc|end_utc|factor)\?"):
        check_prices({}, {**window, bad: 1})
    if bad not in PRICE_KEYS:
        with pytest.raises(ValueError, match=r"did you mean prices\."):
            check_prices({"hit": 1, bad: 1}, None)


@dataclass
class _Knobs:
    k: int = 8
    names: list = field(default_factory=lambda: ["a"])
    extra: dict = field(default_factory=dict)
    note: Optional[str] = None


@hsettings(max_examples=30, deadline=None)
@given(values=st.lists(st.fixed_dictionaries({}, optional={
    "k": st.integers(-5, 5), "names": st.lists(st.sampled_from("abc"), max_size=3),
    "extra": st.dictionaries(st.sampled_from("xyz"), st.integers(0, 3), max_size=2),
    "note": st.one_of(st.none(), st.text("ab", max_size=3))}), min_size=1, max_size=4))
def test_property_a_schema_built_once_types_every_node_as_one_built_each_time(values):
    """The typed node of each value is the one OmegaConf builds from the dataclass afresh, whatever was typed
    before it, and what a caller does to its node reaches no later one (settings.schema_node)."""
    for value in values:
        want = OmegaConf.to_container(OmegaConf.merge(OmegaConf.structured(_Knobs), value))
        got = settings._closed(_Knobs, value, "stage.conditions.x")
        assert OmegaConf.to_container(got) == want
        got.names.append("zz")
        got.extra["w"] = 9
        got.k = 99
    assert OmegaConf.to_container(settings.schema_node(_Knobs)) == {"k": 8, "names": ["a"], "extra": {}, "note": None}
