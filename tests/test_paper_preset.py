"""preset=paper cannot be bypassed: every override that changes what a condition or stage measures,
data that is not the published file whatever its name, and judging a preset stage without the
preset are each refused by name (conf/paper.yaml, harness/run/fidelity.py).

The manifest is computed in process on the resolved config (Hydra's compose, the real plan);
a few dry runs and one short stage against the scripted upstream show the same through the
command line. Dry runs send nothing and write nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from hydra import compose, initialize_config_dir

from harness.run import fidelity
from harness.run.plan import build
from harness.run.settings import stage_node
from tests import cli
from tests.fake_model import FakeModel

REPO = Path(__file__).resolve().parents[1]
# what differs on this machine whatever the override (no bge weights, no official prompt file, hermes 0.19,
# 14 generated questions, a tree being edited): accepted, so a test sees only what its override changes
HERE = ["encoder", "judge_prompts", "runtime", "data", "code"]
SHORT = {"main": ["samples.main", "samples.full"], "org": ["samples.main", "samples.org_public", "samples.org_private"]}


def resolved(stage: str, *overrides: str, allow: list[str] | None = None):
    allow = HERE + SHORT[stage] if allow is None else allow
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("config", overrides=[f"stage={stage}", "preset=paper", "data=synth_tiny",
                                            f"allow_deviation=[{','.join(allow)}]", *overrides], return_hydra_config=True)


def refused(stage: str, *overrides: str, allow: list[str] | None = None) -> dict[str, fidelity.Row]:
    cfg = resolved(stage, *overrides, allow=allow)
    rows = fidelity.manifest(cfg, build(stage_node(cfg), cfg))
    return {r.key: r for r in fidelity.refusals(cfg, rows)}


def harness(*args: str, module: str = "harness.run", env: dict | None = None) -> subprocess.CompletedProcess:
    return cli.run([sys.executable, "-m", module, *args], cwd=REPO,  # in this process (tests/cli.py)
                   env={**os.environ, "DEEPSEEK_API_KEY": "sk-test", **(env or {})})


def test_the_paper_stages_as_configured_are_the_reference():
    """Nothing is refused but what this machine lacks: the stage files are the paper's study."""
    assert refused("main") == {}
    assert refused("org") == {}


OVERRIDES = [
    ("org", ["stage.conditions.shared.scope=all"], "conditions.shared", "scope all (paper shared)"),
    ("main", ["stage.conditions.tool_hybrid.scoring=bm25"], "conditions.tool_hybrid", "scoring bm25 (paper hybrid)"),
    ("main", ["+index.rrf_k=1"], "fusion.rrf_k", "1"),
    ("main", ["+index.depth=5"], "fusion.depth", "5"),
    ("main", ["stage.conditions.tool_bm25.access=Search your memory."], "conditions.tool_bm25", "access sha256"),
    ("org", ["stage.conditions.no_view_policy.access=Be discreet."], "conditions.no_view_policy", "access sha256"),
    ("main", ["stage.conditions.prefetch.k=2"], "conditions.prefetch", "k 2 (paper 8)"),
    ("org", ["stage.conditions.fanout.agents=[a0,a4,a5]"], "conditions.fanout", '"a4"'),
    ("main", ["+model.first_tool_choice=required"], "model.first_tool_choice", "required"),
    ("main", ["+judge.judge_params.temperature=1"], "judge.judge_params", '{"temperature": 1}'),
    ("main", ["model.base_url=http://127.0.0.1:9/v1"], "model.base_url", "another endpoint"),  # no URL printed
    ("main", ["stage.groups=[{sample:main,conditions:[tool_hybrid]},{sample:full,conditions:[none]}]"], "stage.groups",
     "tool_hybrid"),
]


@pytest.mark.parametrize("stage,overrides,key,said", OVERRIDES, ids=[o[2] + ":" + o[1][0] for o in OVERRIDES])
def test_each_override_that_changes_the_study_is_refused_by_name(stage, overrides, key, said):
    got = refused(stage, *overrides)
    assert set(got) == {key}, {k: r.line() for k, r in got.items()}
    assert said in got[key].stage
    assert refused(stage, *overrides, allow=HERE + SHORT[stage] + [key]) == {}  # accepted by name, nothing else


def test_a_key_no_condition_declares_is_refused_before_the_manifest_naming_the_nearest():
    """An option the memory tool's Settings do not declare is not a deviation to accept: it is refused."""
    from harness.run.settings import SettingsError

    with pytest.raises(SettingsError, match=r"stage\.conditions\.tool_hybrid\.kk: no such setting \(did you mean "
                                            r"stage\.conditions\.tool_hybrid\.k\?\)"):
        refused("main", "+stage.conditions.tool_hybrid.kk=1")


def test_ask_agent_reaching_a_private_agent_changes_its_condition_and_its_tool():
    got = refused("org", "stage.conditions.ask_agent.agents=[a1,a4]")
    assert set(got) == {"conditions.ask_agent", "tool_texts"}  # the ask_agent schema lists the agents it reaches
    assert 'agents ["a1", "a4"] (paper ["a1", "a2", "a3"])' in got["conditions.ask_agent"].stage


def test_another_spelling_of_the_reasoning_effort_is_the_paper_setting_and_another_effort_is_not():
    cfg = resolved("main", "~model.params.reasoning_effort", "+model.params.reasoning={effort:low}")
    row = fidelity.reader_row(cfg)
    assert row.status == "same" and "reasoning effort low" in row.stage
    assert set(refused("main", "model.params.reasoning_effort=high")) == {"reader_model"}
    # configured but never sent (model.accepts drops it): the row says what the calls send
    got = refused("main", "+model.accepts={reasoning_effort:false}")
    assert set(got) == {"reader_model"} and "reasoning effort not set" in got["reader_model"].stage


def test_a_short_sample_is_refused_with_its_size():
    got = refused("main", allow=HERE)
    assert set(got) == {"samples.main", "samples.full"}
    assert "14 questions where the paper has 180" in got["samples.main"].detail
    assert "SHORT by" in got["samples.main"].stage


def as_reference(ref: dict, tmp_path: Path, monkeypatch, pin: bool = True) -> Path:
    """`ref` as the reference conf/paper.yaml, and (pin) its sha256 as the one harness/run/lock.py pins."""
    import hashlib

    from harness.run import lock

    p = tmp_path / "paper.yaml"
    p.write_text(yaml.safe_dump(ref))
    monkeypatch.setattr(fidelity, "REFERENCE_PATH", p)
    if pin:
        monkeypatch.setattr(lock, "PAPER_YAML_SHA256", hashlib.sha256(p.read_bytes()).hexdigest())
    return p


def test_a_setting_is_one_line_of_the_reference_and_its_pin(tmp_path, monkeypatch):
    """What another setting needs (here: memory_first, as if it were a paper's setting): one line of conf/paper.yaml, and its sha256 in
    harness/run/lock.py; without the new pin every stage is refused on the reference, which nothing accepts."""
    ref = yaml.safe_load(fidelity.REFERENCE_PATH.read_text())
    ref["settings"]["memory_first"] = {"paper": False, "needs": "runtime"}
    as_reference(ref, tmp_path, monkeypatch, pin=False)
    assert set(refused("main")) == {"reference"}
    assert set(refused("main", allow=HERE + SHORT["main"] + ["reference"])) == {"reference"}
    as_reference(ref, tmp_path, monkeypatch)
    got = refused("main", "memory_first=true")
    assert set(got) == {"memory_first"} and got["memory_first"].stage == "True"
    assert refused("main", "memory_first=false") == {}
    c = resolved("main", "stage.groups=[{sample:main,conditions:[none]}]", "~stage.conditions.session_search",
                 "~stage.conditions.session_search_compact", "~stage.conditions.shell", "memory_first=true")
    rows = {r.key: r for r in fidelity.manifest(c, build(stage_node(c), c))}
    assert rows["memory_first"].status == "not used"  # no condition of the stage uses the runtime


# ------------------------------------------------------------------------------ data by content


def generated_copy(tmp_path: Path, name: str) -> Path:
    cfg = resolved("main")
    src = Path(build(stage_node(cfg), cfg).data["path"])
    dst = tmp_path / name
    shutil.copyfile(src, dst)
    return dst


@pytest.mark.parametrize("stage,name", [("main", "longmemeval_s_cleaned.json"), ("scale", "longmemeval_m_cleaned.json"),
                                        ("main", "my_longmemeval.json")])
def test_a_longmemeval_format_file_that_is_not_the_published_one_is_refused_whatever_its_name(tmp_path, stage, name):
    path = generated_copy(tmp_path, name)
    allow = ["encoder", "judge_prompts", "runtime", "code"] + {"main": SHORT["main"], "scale": ["samples.main", "samples.scale"]}[stage]
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[f"stage={stage}", "preset=paper", f"data.path={path}",
                                           f"allow_deviation=[{','.join(allow)}]"], return_hydra_config=True)
    got = {r.key: r for r in fidelity.refusals(cfg, fidelity.manifest(cfg, build(stage_node(cfg), cfg)))}
    assert set(got) == {"data"} and "not a published LongMemEval file" in got["data"].detail
    assert cfg.data.kind == "longmemeval"  # read as the real benchmark, refused by its content


def test_the_published_file_is_recognised_by_its_content_whatever_its_name(tmp_path, monkeypatch):
    path = generated_copy(tmp_path, "renamed.json")
    from harness.data.longmemeval import sha256_file

    ref = yaml.safe_load(fidelity.REFERENCE_PATH.read_text())
    ref["data"]["s"]["sha256"] = sha256_file(path)  # as if this file were the published S
    as_reference(ref, tmp_path, monkeypatch)
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        main = compose("config", overrides=["stage=main", "preset=paper", f"data.path={path}"])
        scale = compose("config", overrides=["stage=scale", "preset=paper", f"data=s", f"data.path={path}"])
    row = fidelity.data_row(build(stage_node(main), main), "main")
    assert row.status == "same" and "= the published longmemeval_s_cleaned.json" in row.stage
    row = fidelity.data_row(build(stage_node(scale), scale), "scale")  # S where the scale stage needs M
    assert row.status == "differs" and "the published S file where the paper's scale stage used M" in row.detail


# ------------------------------------------------------------------------------ the command line


def test_a_dry_run_refuses_by_name_writes_nothing_and_accepts_by_name(tmp_path):
    allow = ",".join(HERE + SHORT["org"])
    args = ["stage=org", "preset=paper", "data=synth_tiny", "dry_run=true", f"runs_dir={tmp_path}/runs",
            "stage.conditions.shared.scope=all"]
    res = harness(*args, f"allow_deviation=[{allow}]")
    assert res.returncode == 3, res.stdout[-2000:] + res.stderr[-2000:]
    failed = [x for x in res.stdout.splitlines() if "preflight fidelity" in x and "FAILED" in x]
    assert len(failed) == 1 and "conditions.shared: condition shared: scope all (paper shared)" in failed[0]
    assert not (tmp_path / "runs").exists()
    ok = harness(*args, f"allow_deviation=[{allow},conditions.shared]")
    assert "preflight fidelity FAILED" not in ok.stdout and "accepted deviations" in ok.stdout
    assert "conditions.shared" in next(x for x in ok.stdout.splitlines() if "preflight fidelity" in x)


@pytest.mark.services
def test_judging_or_agreement_on_a_preset_stage_without_the_preset(services, tmp_path):
    """A short preset stage on the scripted upstream, then its judge and a second judge without the preset:
    another judge model is refused (the stage ran under the preset), the accepted builtin wording is
    judged and reported as what it was, from the judgements."""
    runs = tmp_path / "runs"
    env = {"MEMSPACE_EVALUATE_QA": str(tmp_path / "absent.py")}
    stage = ["stage=main", f"runs_dir={runs}", "data=synth_tiny", "encoder=minilm"]
    with FakeModel() as fake:
        env["DEEPSEEK_BASE_URL"] = fake.base_url
        res = harness(*stage, "preset=paper", "stage.groups=[{sample:smoke,conditions:[none,tool_hybrid]}]",
                      "samples.smoke.limit=2", "judge.prompts=builtin", "concurrency=2",
                      "allow_deviation=[encoder,judge_prompts,runtime,data,model.base_url,judge.base_url,stage.groups,"
                      "samples.smoke,code]", env=env)
        assert res.returncode == 0, res.stderr[-3000:]
        folder = runs / "main" / "main"
        later = [*stage, "stage.groups=[{sample:smoke,conditions:[none,tool_hybrid]}]", "samples.smoke.limit=2"]

        other = harness(*later, "judge=vllm", f"judge.base_url={fake.base_url}", module="judge.run", env=env)
        assert other.returncode == 3, other.stderr[-2000:]
        assert "preflight fidelity failed (the stage ran under preset=paper; judge it with preset=paper)" in other.stderr
        assert "judge_model: judge model (configured)" in other.stderr
        assert not (folder / "judgements" / "vllm.jsonl").exists()  # refused before any judgement

        # the command: judge=deepseek without the preset, builtin wording (which the stage accepted)
        same = harness(*later, "judge=deepseek", module="judge.run", env=env)
        assert same.returncode == 0, same.stderr[-2000:]

        second = harness(*later, "judge=deepseek", "+judge@judge2=vllm", f"judge2.base_url={fake.base_url}", module="judge.agreement",
                         env=env)
        assert second.returncode == 3 and "judge2_model: second judge model (configured)" in second.stderr

        probe = harness(*later, "judge=vllm", f"judge.base_url={fake.base_url}", module="judge.probe", env=env)
        assert probe.returncode == 3 and "judge_model: judge model (configured)" in probe.stderr
        assert not (folder / "judgements" / "vllm.probe.jsonl").exists()

    from analysis import run as A

    out = tmp_path / "results"
    assert A.main([f"runs={folder}", f"out={out}", "resamples=50", "lenient=true"]) in (0, 1)
    fcsv = pd.read_csv(out / "fidelity.csv", keep_default_na=False).set_index("key")
    assert fcsv.loc["judge_prompts", "setting"] == "judge prompts (from the judgements)"
    assert fcsv.loc["judge_prompts", "stage"].startswith("builtin") and fcsv.loc["judge_prompts", "status"] == "differs"
    assert fcsv.loc["judge_model", "setting"] == "judge (from the judgements)"
    judged = [json.loads(x) for x in (folder / "judgements" / "deepseek.jsonl").read_text().splitlines()]
    assert {j["prompt_source"] for j in judged} == {"builtin"}
    # the judge's calls as sent: the official parameters, the model it asked for
    assert fcsv.loc["judge_sent", "stage"].startswith("deepseek-flash (endpoint replied deepseek-flash)")
    assert '"max_tokens": 10' in fcsv.loc["judge_sent", "stage"] and '"temperature": 0' in fcsv.loc["judge_sent", "stage"]


def test_services_up_sets_the_papers_redis_limit_and_the_manifest_reads_it_from_the_server(tmp_path):
    """make services-up REDIS_MAXMEMORY=2gb: a Redis started with the paper's 2 GB limit (Appendix A (vi)),
    which status and the backend study's services row read back from the server itself."""
    import socket
    from dataclasses import replace

    from harness import services as svc

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    st = replace(svc.settings(), redis_port=port, root=tmp_path / "services", redis_maxmemory="2gb")
    assert svc.redis_up(st)
    try:
        assert svc.redis_status(st)["maxmemory"] == 2 * 2**30
        facts = fidelity._redis_facts({"url": f"redis://127.0.0.1:{port}"})
        assert facts["redis_maxmemory"] == "2.0 GiB" and facts["redis"] == svc.redis_status(st)["redis"]
    finally:
        svc.redis_down(st)
    make = (REPO / "Makefile").read_text()
    assert "--redis-maxmemory $(REDIS_MAXMEMORY)" in make


def test_the_sent_rows_trust_what_was_asked_for_not_the_model_id_an_endpoint_echoes():
    def call(model, echoed, sent, role="agent", tag="tool_hybrid.lme.q1.r0"):
        return [{"event": "request", "role": role, "tag": tag, "model": model, "sent": sent},
                {"event": "response", "role": role, "tag": tag, "model": model, "status": 200, "response_model": echoed}]

    paper = call("deepseek-flash", "deepseek-flash", {"reasoning": {"effort": "low"}, "tool_choice": "none"})
    judge = call("deepseek-flash", "deepseek-flash", {"temperature": 0, "max_tokens": 10}, "judge", "judge:x")
    rows = {r.key: r for r in fidelity.sent_rows(paper + judge)}
    assert rows["reader_sent"].status == "same" and "reasoning effort low" in rows["reader_sent"].stage
    assert rows["judge_sent"].status == "same"
    # another model asked for, the paper's echoed back: differs, and says both
    rows = {r.key: r for r in fidelity.sent_rows(call("deepseek-chat", "deepseek-flash", {"reasoning_effort": "low"})
                                                 + call("deepseek-flash", "deepseek-flash",
                                                        {"temperature": 1, "max_tokens": 10}, "judge", "judge:x"))}
    assert rows["reader_sent"].status == "differs" and rows["reader_sent"].stage.startswith(
        "deepseek-chat (endpoint replied deepseek-flash)")
    assert rows["judge_sent"].status == "differs" and '"temperature": 1' in rows["judge_sent"].stage
    # the paper's model asked for, another echoed: differs too
    assert fidelity.sent_rows(call("deepseek-flash", "other", {"reasoning_effort": "low"}))[0].status == "differs"
    # tool_choice required on the first call: not the paper's loop
    assert fidelity.sent_rows(call("deepseek-flash", "deepseek-flash",
                                   {"reasoning_effort": "low", "tool_choice": "required"}))[0].status == "differs"


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


def test_a_dry_backend_study_refuses_the_papers_preset_on_generated_data_whether_or_not_it_is_cached(tmp_path):
    """`stage=backends preset=paper data=synth_tiny dry_run=true`: the real run refuses the generated data (it is not
    the paper's), so the dry run says so too, on a fresh cache as on one that holds the file, writing nothing."""
    import sys

    def dry():
        return cli.run([sys.executable, "-m", "harness.run", "stage=backends", "preset=paper", "data=synth_tiny",
                               "dry_run=true", f"runs_dir={tmp_path}/runs", f"cache_dir={tmp_path}/cache"],
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)

    fresh = dry()
    assert fresh.returncode == 3, fresh.stdout[-1500:] + fresh.stderr[-1500:]
    assert "generated data; allow_deviation=[data] accepts it" in fresh.stdout + fresh.stderr
    assert not (tmp_path / "cache" / "data").exists() and not (tmp_path / "runs").exists()
