"""Audit of issue 30: overrides that changed what a stage measures while the manifest said `same`.

Each case composes the stage with preset=paper and one override (Hydra's compose, the real plan, in
process) and asserts the row that must refuse it; the config is compared with what preset=paper
resolves to for the stage without the override, so a whole class (any leaf, `+` added keys, another
provider, `accepts`) is caught, not one key.
"""

from __future__ import annotations

import pytest

from harness.run import fidelity
from tests.test_paper_preset import as_reference, refused, resolved

# the rest of the config: no row compared these, the manifest said `same`
CONFIG = [
    ("main", "index.hybrid_policy=ADHOC_BF", "config.index"),
    ("main", "+index.ef_search=5", "config.index"),
    ("main", "+encoder.pooling=mean", "config.encoder"),
    ("main", "model.provider=anthropic", "config.model"),
    ("main", "+model.max_tokens=50", "config.model"),
    ("main", "+judge.accepts={temperature:false}", "config.judge"),
    ("main", "+judge.accepts={max_tokens:false}", "config.judge"),
    ("main", "judge.provider=other", "config.judge"),
    ("main", "+stage.max_rounds=2", "config.stage"),
    ("org", "+stage.tool_result_chars=100", "config.stage"),
    ("main", "+memory_read_window=1", "config.memory_read_window"),
]


def config_rows(cfg) -> list:
    """The manifest's `config.<section>` rows (leaves no named row refuses) of the stage's resolved config."""
    from harness.run.plan import build
    from harness.run.settings import stage_node

    return [r for r in fidelity.manifest(cfg, build(stage_node(cfg), cfg)) if r.key.startswith("config.")
            and r.key not in ("config.judge", "config.judge2")]


@pytest.mark.parametrize("stage,override,key", CONFIG, ids=[c[1] for c in CONFIG])
def test_an_override_no_named_row_compared_is_refused(stage, override, key):
    got = refused(stage, override)
    assert key in got, {k: r.line() for k, r in got.items()}
    assert override.split("=")[0].lstrip("+").split(".")[-1] in got[key].stage


def test_the_rest_of_the_config_is_same_without_an_override_and_operational_keys_pass():
    for stage in ("main", "org"):
        assert config_rows(resolved(stage)) == []
    assert refused("main", "concurrency=2", "encoder.batch_size=4", "model.timeout_s=5") == {}


def test_a_judge_accepts_override_is_refused_by_the_judging_gate_row():
    cfg = resolved("main", "+judge.accepts={temperature:false}")
    rows = {r.key: r for r in fidelity.judge_rows(cfg)}
    assert rows["config.judge"].status == "differs" and "temperature" in rows["config.judge"].stage
    assert fidelity.judge_rows(resolved("main"))[-1].status == "same"


# the reasoning effort spelled twice: the endpoint gets both, the manifest read only the first
EFFORT = ["+model.params.reasoning={effort:high}", "+model.params.reasoning={effort:low,summary:auto}"]


@pytest.mark.parametrize("override", EFFORT)
def test_a_second_spelling_of_the_reasoning_effort_is_refused(override):
    got = refused("main", override)
    assert set(got) & {"reader_model", "model.other_params"}, {k: r.line() for k, r in got.items()}


def test_the_sent_rows_see_a_second_effort_and_any_other_parameter_the_reader_sent():
    def call(sent):
        tag = "tool_hybrid.lme.q1.r0"
        return [{"event": "request", "role": "agent", "tag": tag, "model": "deepseek-flash", "sent": sent},
                {"event": "response", "role": "agent", "tag": tag, "status": 200, "response_model": "deepseek-flash"}]

    assert fidelity.sent_rows(call({"reasoning_effort": "low", "tools": ["memory_search"]}))[0].status == "same"
    two = fidelity.sent_rows(call({"reasoning_effort": "low", "reasoning": {"effort": "high"}}))[0]
    assert two.status == "differs" and "conflicting: high, low" in two.stage
    hot = fidelity.sent_rows(call({"reasoning_effort": "low", "temperature": 1}))[0]
    assert hot.status == "differs" and '"temperature": 1' in hot.stage


def test_a_published_file_with_one_byte_changed_in_place_is_not_the_published_file(tmp_path, monkeypatch):
    """The sha256 cache is keyed by the file's identity: an in-place edit that keeps the size and puts the
    modification time back (cp -p, rsync -t, os.utime) must be hashed again, not recognised as S."""
    import os
    import shutil
    from pathlib import Path

    import yaml
    from hydra import compose, initialize_config_dir

    from harness.data.longmemeval import sha256_file
    from harness.run.plan import build
    from harness.run.settings import stage_node
    from tests.test_paper_preset import REPO

    src = Path(build(stage_node(resolved("main")), resolved("main")).data["path"])
    path = tmp_path / "longmemeval_s_cleaned.json"
    shutil.copyfile(src, path)
    ref = yaml.safe_load(fidelity.REFERENCE_PATH.read_text())
    ref["data"]["s"]["sha256"] = sha256_file(path)  # as if this file were the published S
    as_reference(ref, tmp_path, monkeypatch)
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["stage=main", "preset=paper", f"data.path={path}",
                                           f"cache_dir={tmp_path / 'cache'}"])
    assert fidelity.data_row(build(stage_node(cfg), cfg), "main").status == "same"
    st = path.stat()
    raw = bytearray(path.read_bytes())
    i = raw.index(b'"question": "') + len(b'"question": "')
    raw[i] = ord(b"X") if raw[i] != ord(b"X") else ord(b"Y")  # one byte of a question, same size
    path.write_bytes(bytes(raw))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    row = fidelity.data_row(build(stage_node(cfg), cfg), "main")
    assert row.status == "differs" and "not a published LongMemEval file" in row.detail


@pytest.mark.parametrize("override", [[], ["+fidelity.preset=none"]])
def test_judging_a_preset_stage_without_the_preset_is_refused(tmp_path, override):
    """A stage that ran under preset=paper keeps the paper's judge whatever the judge command says: no preset,
    or a config value that once named the preset (now an unknown key, refused at the edge)."""
    from hydra import compose, initialize_config_dir

    from harness.failures import EnvironmentFailure
    from harness.records.rundir import RunDir
    from harness.run import settings
    from harness.run.driver import stage_info
    from harness.run.plan import build
    from omegaconf import OmegaConf

    from harness.run.settings import stage_node
    from judge import prompts as P
    from tests.test_paper_preset import REPO

    cfg = resolved("main")
    plan = build(stage_node(cfg), cfg)
    rd = RunDir(tmp_path / "main")
    rd.open(cfg, stage_info(stage_node(cfg), OmegaConf.to_container(cfg.model, resolve=True), plan,
                            fidelity.record(cfg, plan)))
    assert rd.stage().fidelity["preset"] == "paper"
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        later = compose("config", overrides=["stage=main", "data=synth_tiny", "judge=vllm", *override],
                        return_hydra_config=True)
    assert fidelity.preset(later) is None
    if override and override[0].startswith("+fidelity"):
        with pytest.raises(settings.SettingsError, match=r"^fidelity: no such setting"):
            settings.check(later, override)
    with pytest.raises(EnvironmentFailure, match="judge_model"):
        fidelity.gate_judging(later, rd, later.judge, P.load(str(later.judge.prompts)))


def test_the_judgements_record_the_parameters_the_judge_sent_not_the_official_ones_it_dropped():
    from judge.answer_check import judge_model_config
    from judge.common import judge_block

    def line(*overrides):
        jc = judge_model_config(resolved("main", *overrides).judge)
        return {"judge": judge_block("deepseek", jc, "id"), "prompt_source": "evaluate_qa.py",
                "prompt_source_sha256": fidelity.reference()["judge_prompts"]["sha256"]}

    assert fidelity.judged_rows([line()])[0].status == "same"
    row = fidelity.judged_rows([line("+judge.accepts={temperature:false}")])[0]
    assert row.status == "differs" and '"temperature"' not in row.stage and '"max_tokens": 10' in row.stage


def test_the_second_judge_is_compared_at_agreement_not_in_the_stage():
    """+judge@judge2 on a run is the agreement's (gate_judging, second=True): not a stage row; there its
    config is compared with conf/judge/deepseek_pro.yaml."""
    cfg = resolved("main", "+judge@judge2=deepseek_pro")
    assert config_rows(cfg) == []
    assert fidelity.judge_config_row(cfg.judge2, second=True).status == "same"
    other = resolved("main", "+judge@judge2=deepseek_pro", "+judge2.accepts={temperature:false}")
    row = fidelity.judge_config_row(other.judge2, second=True)
    assert row.key == "config.judge2" and row.status == "differs" and "temperature" in row.stage
