"""preset=paper cannot be bypassed: every override that changes what a condition or stage measures,
data that is not the published file whatever its name, and judging a preset stage without the
preset are each refused by name (conf/paper.yaml, harness/run/fidelity.py).

The manifest is computed in process on the resolved config (Hydra's compose, the real plan);
a few dry runs and one short stage against the scripted upstream show the same through the
command line. Dry runs send nothing and write nothing.

It is a lock with one allowlist (harness/run/lock.py, harness/run/fidelity.py): a stage may differ from the
paper only in an operational leaf or in what allow_deviation names; every other leaf, file, plugin and text
the model reads is refused by name, and no config value switches the lock off (issue 40). The explicit cases
are the bypasses found by the issue's review; the property test generates overrides of every leaf of the
resolved preset config nobody listed (in process on the resolved config; the plugin and sweep cases as dry
runs).
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
from hydra.errors import HydraException
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from harness.records.provenance import code_revision
from harness.run import fidelity, lock, settings
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


DRY = ["stage=main", "preset=paper", "data=synth_tiny", "dry_run=true"]
ALLOW_HERE = f"allow_deviation=[{','.join(HERE + SHORT['main'])}]"


def failed_keys(stdout: str) -> dict[str, str]:
    lines = [" ".join(x.split()) for x in stdout.splitlines() if "preflight fidelity" in x and "FAILED" in x]
    return {x.split("FAILED", 1)[1].split(":", 1)[0].strip(): x for x in lines}


# ------------------------------------------------------------------------------ the preset's identity


@pytest.mark.parametrize("override", ["fidelity.preset=null", "fidelity.preset=none", "~fidelity.preset",
                                      "+fidelity.preset=null", "+hydra.runtime.choices.preset=null"])
def test_no_config_value_switches_the_lock_off(override):
    """`preset=paper fidelity.preset=null` (or none, or ~) once switched every refusal off while the paper's config
    stayed: the preset is Hydra's choice of the command, and `fidelity` no key any more."""
    try:
        cfg = resolved("main", override, "index.ef_runtime=100")
    except HydraException:  # no such key to override or delete: Hydra refuses the command
        return
    assert fidelity.preset(cfg) == "paper"
    assert "index" in refused("main", override, "index.ef_runtime=100")
    if "fidelity" in override:
        with pytest.raises(settings.SettingsError, match="^fidelity: no such setting"):
            settings.check(cfg, [override], [REPO / "conf"])


def test_without_the_command_choosing_it_there_is_no_preset():
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["stage=main", "data=synth_tiny"], return_hydra_config=True)
    assert fidelity.preset(cfg) is None and fidelity.refusals(cfg, fidelity.manifest(cfg, build(stage_node(cfg), cfg))) == []


# ------------------------------------------------------------------------------ every leaf


def test_operational_leaves_pass_and_a_renamed_effort_is_refused():
    """Where things live, output, budget, shards, patience: the allowlist. `accepts` renaming the reasoning effort
    to a key nobody reads sent no effort while the reader row said `low, same`: a leaf no row refuses is its
    section's row."""
    assert refused("main", "stage.label=mine", "index.url=redis://127.0.0.1:1", "budget_usd=5", "shard=0/2",
                   "runs_dir=/tmp/x", "model.timeout_s=5", "+model.max_concurrency=3", "encoder.batch_size=4",
                   "retry_failed=true", "seed=3") == {}
    got = refused("main", "+model.accepts={reasoning_effort: reasoning_effort_ignored}")
    assert set(got) == {"config.model"} and "model.accepts.reasoning_effort reasoning_effort_ignored" in got["config.model"].stage
    assert fidelity.reader_row(resolved("main", "+model.accepts={reasoning_effort: reasoning_effort_ignored}")).status \
        == "same"  # what the row alone says: the leaf comparison is what refuses it


def test_an_environment_variable_a_yaml_reads_is_a_leaf_that_differs(monkeypatch):
    """`model: ${oc.env:DEEPSEEK_MODEL,deepseek-flash}`: the reference takes the files' default, so a variable set
    for the run is compared, not read into the reference too."""
    monkeypatch.setenv("DEEPSEEK_MODEL", "deepseek-chat")
    got = refused("main")
    assert {"reader_model", "judge_model"} <= set(got), {k: r.line() for k, r in got.items()}
    assert fidelity.reference_config("main")["model"]["model"] == "deepseek-flash"


def test_an_unused_sample_and_a_conditions_table_pair_are_leaves_too():
    got = refused("main", "samples.smoke.limit=5")
    assert set(got) == {"config.samples"} and "samples.smoke.limit 5 (paper 3)" in got["config.samples"].stage
    got = refused("main", "+stage.conditions.tool_bm25.reference=true")
    assert set(got) == {"config.stage"} and "stage.conditions.tool_bm25.reference True (paper <not set>)" in got["config.stage"].stage


# ------------------------------------------------------------------------------ the reference, texts, tree, plugins


def test_the_pinned_reference_is_conf_paper_yaml_and_its_texts_are_what_the_code_sends():
    assert lock.reference_sha256(fidelity.REFERENCE_PATH) == lock.PAPER_YAML_SHA256
    pins = fidelity.reference()["texts"]
    got = {k: lock.sha256_text(v) for org in (False, True)
           for k, v in lock.model_texts({"shell", "fanout", "ask_agent"}, org).items()}
    assert got == pins
    for stage, names in (("main", {"system.lme", "cut", "shell.paragraph", "shell.terminal"}),
                         ("org", {"system.org", "cut", "fanout.paragraph", "ask_agent.asked_system"})):
        row = fidelity.texts_row(resolved(stage))
        assert row.status == "same" and {p.split("|")[0] for p in row.pool.split(",")} == names


def test_an_edited_reference_is_refused_whatever_allow_deviation_says(tmp_path, monkeypatch):
    """conf/paper.yaml edited together with a condition yaml passed: the reference's sha256 is pinned in code."""
    ref = yaml.safe_load(fidelity.REFERENCE_PATH.read_text())
    ref["conditions"]["shared"]["scope"] = "all"
    (tmp_path / "paper.yaml").write_text(yaml.safe_dump(ref))
    monkeypatch.setattr(fidelity, "REFERENCE_PATH", tmp_path / "paper.yaml")
    got = refused("org", "stage.conditions.shared.scope=all", allow=HERE + SHORT["org"] + ["reference"])
    assert "reference" in got and "no allow_deviation accepts another reference" in got["reference"].detail


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t"})


def test_the_tree_names_untracked_and_modified_files_of_the_packages(tmp_path):
    """An untracked module under conditions/ is imported by its registry like a tracked one; it left code.dirty false."""
    (tmp_path / "conditions").mkdir()
    (tmp_path / "docs").mkdir()
    (tmp_path / "conditions" / "memory_tool.py").write_text("x = 1\n")
    (tmp_path / ".gitignore").write_text("__pycache__/\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "c")
    clean = code_revision(tmp_path)
    assert clean["dirty"] is False and fidelity.code_row(clean).status == "same"
    (tmp_path / "conditions" / "rewrite.py").write_text("import harness\n")
    (tmp_path / "conditions" / "__pycache__").mkdir()
    (tmp_path / "conditions" / "__pycache__" / "x.pyc").write_bytes(b"\0")  # ignored: not code of the tree
    (tmp_path / "docs" / "notes.md").write_text("not code\n")
    state = code_revision(tmp_path)
    assert state["dirty"] is True and state["untracked"] == ["conditions/rewrite.py"] and state["modified"] == []
    (tmp_path / "conditions" / "memory_tool.py").write_text("x = 2\n")
    state = code_revision(tmp_path)
    assert state["modified"] == ["conditions/memory_tool.py"]
    row = fidelity.code_row(state)
    assert row.status == "differs" and "untracked: conditions/rewrite.py" in row.stage
    assert "modified: conditions/memory_tool.py" in row.stage
    assert fidelity.code_row({"commit": None, "dirty": None}).status == "differs"  # not a git checkout


PLUGIN = '''
"""A plugin that rewrites what the model reads: the system prompt's wording and the 30,000-character cut."""
from harness.run import loop, prompts

prompts.SYSTEM = prompts.SYSTEM.replace("say that you don't know", "make your best guess")
loop.MAX_RESULT_CHARS = 300
'''


def test_a_plugin_that_rewrites_the_system_prompt_or_the_cut_is_refused_by_name(tmp_path, monkeypatch):
    (tmp_path / "rewrite_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))  # the command runs in this process: PYTHONPATH is sys.path here
    env = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "MEMSPACE_PLUGINS": "rewrite_plugin"}
    def fresh(*args: str) -> subprocess.CompletedProcess:  # a process of its own: PYTHONPATH must reach its sys.path
        return subprocess.run([sys.executable, "-m", "harness.run", *args], cwd=REPO, capture_output=True, text=True,
                              timeout=600, env={**os.environ, "DEEPSEEK_API_KEY": "sk-test", **env})

    res = fresh(*DRY, f"runs_dir={tmp_path}/runs", ALLOW_HERE)
    got = failed_keys(res.stdout)
    assert res.returncode == 3 and set(got) == {"plugins", "texts"}, res.stdout[-3000:] + res.stderr[-2000:]
    assert "rewrite_plugin" in got["plugins"] and "differ from the pinned texts: cut, system.lme" in got["texts"]
    # accepting the plugin does not accept what it changed
    res = fresh(*DRY, f"runs_dir={tmp_path}/runs", ALLOW_HERE[:-1] + ",plugins]")
    assert res.returncode == 3 and set(failed_keys(res.stdout)) == {"texts"}, res.stdout[-3000:]
    assert not (tmp_path / "runs").exists()


def test_a_sweep_job_that_differs_is_refused_before_the_first_job_runs(tmp_path):
    res = harness("-m", *DRY, f"runs_dir={tmp_path}/runs", "stage.conditions.prefetch.k=8,2", ALLOW_HERE)
    assert res.returncode == 3, res.stdout[-2000:] + res.stderr[-2000:]
    assert "preflight fidelity failed for the sweep's job" in res.stderr and "conditions.prefetch" in res.stderr
    assert "dry run: nothing started" not in res.stdout  # job 0 did not start either


# ------------------------------------------------------------------------------ generated overrides

BASE = resolved("main")
LEAVES = sorted(fidelity._leaves(fidelity.tree(BASE)))
ALLOWED = set(HERE + SHORT["main"])

scalars = st.one_of(st.integers(-3, 400), st.booleans(), st.none(), st.floats(0, 2, allow_nan=False).map(lambda f: round(f, 3)),
                    st.text("abcxyz_", min_size=1, max_size=6))


def _value(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f"'{v}'"
    return str(v)


@st.composite
def overrides(draw) -> str:
    path = draw(st.sampled_from(LEAVES))
    form = draw(st.sampled_from(["set", "plus", "plusplus", "delete", "new", "newplus"]))
    v = _value(draw(scalars))
    new = draw(st.text("abcdefghij_", min_size=1, max_size=5))
    parent = path.rsplit(".", 1)[0] if "." in path else ""
    return {"set": f"{path}={v}", "plus": f"+{path}={v}", "plusplus": f"++{path}={v}", "delete": f"~{path}",
            "new": f"+{parent + '.' if parent else ''}{new}={v}",
            "newplus": f"++{parent + '.' if parent else ''}{new}={v}"}[form]


def _refused_or_allowed(override: str) -> None:
    """The property: the override is bad input refused at the edge (a Hydra or settings error naming it), or every
    non-operational leaf it changes is a row that differs and is refused unless allow_deviation names that row."""
    try:  # a dry run: an override of data.path writes no generated data where it points
        cfg = resolved("main", override, "dry_run=true")
        settings.check(cfg, [override, "dry_run=true"], [REPO / "conf"])
        plan = build(stage_node(cfg), cfg)
    except (HydraException, OmegaConfBaseException, settings.SettingsError):
        return  # refused at the edge, exit 2 naming the key
    except Exception as exc:  # noqa: BLE001 - only the harness's own bad-input errors (exit 2) are a refusal
        assert getattr(exc, "exit_code", None) == 2, f"{override}: {type(exc).__name__}: {exc}"
        return
    rows = fidelity.manifest(cfg, plan)
    differ = {r.key for r in rows if r.status == "differs"}
    refused_keys = {r.key for r in fidelity.refusals(cfg, rows)}
    diffs = fidelity.leaf_diffs(fidelity.tree(cfg), fidelity.tree(BASE))
    for path in diffs:
        names = {fidelity.covering(path), f"config.{path.split('.')[0]}"} & differ
        assert names, f"{override}: leaf {path} changed and no row differs"
        assert names & (refused_keys | ALLOWED), f"{override}: {path} neither refused nor allowed ({names})"
        assert names & refused_keys or names <= ALLOWED | {fidelity.covering(path)}


@hsettings(max_examples=int(os.environ.get("LOCK_EXAMPLES", 25)), deadline=None, database=None,
           suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(overrides())
def test_any_override_of_any_leaf_is_refused_by_name_or_on_the_allowlist(override):
    _refused_or_allowed(override)


@pytest.mark.parametrize("override", ["+model.accepts={reasoning_effort: x}", "~judge.judge_params",
                                      "++index.hybrid_policy=BATCHES", "+stage.conditions.prefetch.scope=all",
                                      "samples.main.per_type=3", "+nested_new={a: 1}", "~stage.conditions.shell.module",
                                      "runtime.session_search=installed", "++model.params.temperature=1",
                                      "stage.conditions.tool_hybrid.guidance=0", "~stage.groups", "encoder.name=0",
                                      "encoder.path=1", "~encoder.name"])
def test_the_property_holds_for_the_known_spellings(override):
    _refused_or_allowed(override)


# ------------------------------------------------------------------------------ the code that is loaded


def _module(name: str, path: Path):
    import importlib.util

    return importlib.util.module_from_spec(importlib.util.spec_from_file_location(name, path))


def _repo(tmp: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_text(text)
    (tmp / ".gitignore").write_text("__pycache__/\n")
    _git(tmp, "init", "-q")
    _git(tmp, "add", "-A")
    _git(tmp, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "c")
    return tmp


def test_loaded_code_outside_the_tracked_tree_is_refused_by_name(tmp_path):
    """Code the tree-state check did not see ran and switched the lock off: an untracked hydra_plugins/ module, a
    shadow module at the repo root, a module from PYTHONPATH (sitecustomize). Every loaded file is on the allowlist
    (tracked and unmodified, an installed distribution's, stdlib) or named."""
    import json as stdlib_mod

    import yaml as site_mod

    root = _repo(tmp_path / "repo", {"pkg/ok.py": "x = 1\n", "pkg/edited.py": "y = 1\n"})
    (root / "pkg" / "edited.py").write_text("y = 2\n")
    (root / "hydra_plugins").mkdir()
    (root / "hydra_plugins" / "evil.py").write_text("z = 1\n")
    (root / "hermes_state_search.py").write_text("shadow = 1\n")
    (tmp_path / "pp").mkdir()
    (tmp_path / "pp" / "sitecustomize.py").write_text("s = 1\n")
    mods = {"pkg.ok": _module("pkg.ok", root / "pkg/ok.py"), "pkg.edited": _module("pkg.edited", root / "pkg/edited.py"),
            "hydra_plugins.evil": _module("hydra_plugins.evil", root / "hydra_plugins/evil.py"),
            "hermes_state_search": _module("hermes_state_search", root / "hermes_state_search.py"),
            "sitecustomize": _module("sitecustomize", tmp_path / "pp/sitecustomize.py"),
            "json": stdlib_mod, "yaml": site_mod, "sys": __import__("sys")}
    bad = lock.loaded_code(mods, root=root)
    named = {b.split(" ", 1)[0]: b for b in bad}
    assert set(named) == {"pkg.edited", "hydra_plugins.evil", "hermes_state_search", "sitecustomize"}, bad
    assert "modified" in named["pkg.edited"] and "not a tracked file" in named["hydra_plugins.evil"]
    assert "outside the tree" in named["sitecustomize"]
    state = {"commit": "0" * 40, "modified": [], "untracked": [], "loaded": bad}
    row = fidelity.code_row(state)
    assert row.status == "differs" and "hermes_state_search" in row.stage


def test_a_module_inside_the_runtimes_packages_that_its_record_does_not_name_is_refused(tmp_path):
    """A file dropped into a folder of the runtime's packages (any depth) is no file of its distribution, though
    it sits in site-packages; a file of another installed distribution, or beside the runtime's packages, is."""
    rec = lock._record(lock.RUNTIME_DIST)
    assert rec is not None, "the runtime is installed by make setup"
    site, files = rec
    package = min(q.parent for q in files if q.name == "__init__.py")  # a top folder of the runtime
    planted = {"zq.top": package / "zq_planted.py", "zq.deep": package / "zq_sub" / "zq_deeper" / "x.py"}
    elsewhere = {"zq.other": site / "zq_other_dist" / "x.py", "zq.beside": site / "zq_beside.py"}
    mods = {name: _module(name, path) for name, path in {**planted, **elsewhere}.items()}
    bad = lock.loaded_code(mods, root=tmp_path)
    named = {b.split(" ", 1)[0]: b for b in bad}
    assert set(named) == set(planted), bad
    assert all("inside the runtime's packages but not in its RECORD" in b for b in bad)


def test_a_stale_pyc_of_a_tracked_module_is_refused(tmp_path):
    """A .pyc compiled from other source, with the tracked source's size and mtime, is imported instead of it."""
    import importlib.util
    import py_compile

    root = _repo(tmp_path / "repo", {"pkg/mod.py": "def f():\n    return 1\n"})
    src = root / "pkg" / "mod.py"
    mods = {"pkg.mod": _module("pkg.mod", src)}
    py_compile.compile(str(src), cfile=importlib.util.cache_from_source(str(src)), doraise=True)
    assert lock.loaded_code(mods, root=root) == []  # a pyc compiled from the tracked source is that source
    st = src.stat()
    other = tmp_path / "other.py"
    other.write_text("def f():\n    return 7\n")  # same size
    py_compile.compile(str(other), cfile=importlib.util.cache_from_source(str(src)), doraise=True)
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    bad = lock.loaded_code(mods, root=root)
    assert len(bad) == 1 and bad[0].startswith("pkg.mod ") and ".pyc" in bad[0]


def test_a_stale_pyc_is_named_for_every_loader_but_pytests_rewriter_which_compiles_the_source_itself(tmp_path):
    """The standard .pyc beside a module is what ran unless pytest's assertion rewriter loaded it (it compiles the
    source and keeps its own cache): beside such a module a stale one is not named; beside the same file loaded by
    the source importer, by the standard library's SourcelessFileLoader (which runs that very .pyc) or by any
    other loader, it is."""
    import importlib.abc
    import importlib.machinery
    import importlib.util
    import sys

    class FromSource(importlib.abc.Loader):  # says it compiles the source; nothing here can tell
        def create_module(self, spec):
            return None

        def exec_module(self, module):
            exec(compile(Path(module.__file__).read_bytes(), module.__file__, "exec"), module.__dict__)

    root = _repo(tmp_path / "repo", {"pkg/mod.py": "def f():\n    return 1\n"})
    src = root / "pkg" / "mod.py"
    _pyc_of("def f():\n    return 7\n", src, tmp_path, 0)  # stale: other code, the source's size and mtime
    pyc = importlib.util.cache_from_source(str(src))

    def loaded_by(loader):
        return importlib.util.module_from_spec(importlib.util.spec_from_file_location("pkg.mod", src, loader=loader))

    rewriter = next(f for f in sys.meta_path if type(f).__name__ == "AssertionRewritingHook")
    lock._compiled.clear()
    assert lock.loaded_code({"pkg.mod": loaded_by(rewriter)}, root=root) == []
    for loader in (None, importlib.machinery.SourcelessFileLoader("pkg.mod", pyc), FromSource()):
        module = _module("pkg.mod", src) if loader is None else loaded_by(loader)
        bad = lock.loaded_code({"pkg.mod": module}, root=root)
        assert "pkg.mod (pkg/mod.py): its cached .pyc is not compiled from the tracked source" in bad, (loader, bad)
    assert not lock._reads_pycs(sys.modules[__name__])  # this module: loaded by pytest's assertion rewriter
    assert lock._reads_pycs(sys.modules["harness.run.lock"])


def test_a_tracked_link_is_checked_by_the_pyc_of_its_own_name_and_a_changed_qualname_is_other_code(tmp_path):
    """The importer reads the .pyc named after the file it imported: a tracked link `pkg/a.py -> mod.py` runs
    `a.cpython-*.pyc`, which is compared, not its target's. And code that differs only in a function's qualified
    name (which code equality leaves out) is not the source's."""
    import importlib.util

    root = _repo(tmp_path / "repo", {"pkg/mod.py": "def f():\n    return 1\n"})
    (root / "pkg" / "a.py").symlink_to("mod.py")
    _git(root, "add", "-A")
    _git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "link")
    src, link = root / "pkg" / "mod.py", root / "pkg" / "a.py"
    import py_compile

    py_compile.compile(str(src), cfile=importlib.util.cache_from_source(str(src)), doraise=True)  # the target's: good
    forged = tmp_path / "forged.py"
    forged.write_text("def f():\n    return 9\n")
    py_compile.compile(str(forged), cfile=importlib.util.cache_from_source(str(link)), doraise=True)
    mods = {"pkg.a": _module("pkg.a", link)}
    lock._compiled.clear()
    bad = lock.loaded_code(mods, root=root)
    assert len(bad) == 1 and bad[0].startswith("pkg.a ") and ".pyc" in bad[0], bad
    py_compile.compile(str(link), cfile=importlib.util.cache_from_source(str(link)), doraise=True)
    lock._compiled.clear()
    assert lock.loaded_code(mods, root=root) == []
    renamed = compile("def f():\n    return 1\n", str(src), "exec")
    fn = next(c for c in renamed.co_consts if hasattr(c, "co_qualname"))
    evil = renamed.replace(co_consts=tuple(c.replace(co_qualname="evil") if c is fn else c for c in renamed.co_consts))
    assert evil == compile(src.read_bytes(), str(src), "exec")  # what code equality alone said
    assert not lock._same_code(evil, compile(src.read_bytes(), str(src), "exec"))


def test_a_cache_folder_that_cannot_be_searched_never_refuses_a_good_pyc(tmp_path, monkeypatch):
    """The kept verdicts are an aid: a cache path the file system refuses (here a name too long for it, as a
    folder of another user refuses its search) is no verdict, and the good .pyc is compared and allowed."""
    import importlib.util
    import py_compile

    monkeypatch.setenv("MEMSPACE_CACHE", str(tmp_path / ("x" * 300)))
    root = _repo(tmp_path / "repo", {"pkg/mod.py": "def f():\n    return 1\n"})
    src = root / "pkg" / "mod.py"
    py_compile.compile(str(src), cfile=importlib.util.cache_from_source(str(src)), doraise=True)
    lock._compiled.clear()
    assert lock.loaded_code({"pkg.mod": _module("pkg.mod", src)}, root=root) == []


def test_a_pyc_is_the_sources_only_in_every_part_that_runs_a_specialized_opcode_a_stack_size_a_cell(tmp_path):
    """Code equality reads a specialized opcode as its base one and leaves out the stack size, which locals are
    cells and a nested function's file name: a .pyc that differs from its source in any of these runs other code
    (here x - 1 for x + 1) and is named, its verdict never kept; its source's own .pyc is allowed."""
    import dis
    import importlib.util
    import marshal
    import py_compile

    source = "def f(x):\n    return x + 1\n"
    root = _repo(tmp_path / "repo", {"pkg/mod.py": source})
    src = root / "pkg" / "mod.py"
    pyc = Path(importlib.util.cache_from_source(str(src)))
    py_compile.compile(str(src), cfile=str(pyc), doraise=True)
    good = pyc.read_bytes()
    top = marshal.loads(good[16:])
    f = next(c for c in top.co_consts if hasattr(c, "co_code"))
    raw = f._co_code_adaptive
    at = raw.index(bytes([dis.opmap["BINARY_OP"], 0]))  # x + 1
    subtract = raw[:at] + bytes([dis._all_opmap["BINARY_OP_SUBTRACT_INT"], 0]) + raw[at + 2:]
    forged = {"specialized opcode": good.replace(raw, subtract),
              "stack size": good[:16] + marshal.dumps(top.replace(co_consts=tuple(
                  c.replace(co_stacksize=c.co_stacksize + 5) if c is f else c for c in top.co_consts))),
              "nested file name": good[:16] + marshal.dumps(top.replace(co_consts=tuple(
                  c.replace(co_filename="/elsewhere.py") if c is f else c for c in top.co_consts)))}
    mods = {"pkg.mod": _module("pkg.mod", src)}
    st = src.stat()
    for what, data in forged.items():
        assert data != good, what
        pyc.write_bytes(data)
        os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
        lock._compiled.clear()
        bad = lock.loaded_code(mods, root=root)
        assert len(bad) == 1 and "its cached .pyc is not compiled from the tracked source" in bad[0], (what, bad)
        assert not lock._kept(lock._compared_equal(pyc, src.read_bytes(), data)), what
    spec = importlib.util.spec_from_file_location("pkg.mod", src)
    ran = importlib.util.module_from_spec(spec)
    pyc.write_bytes(forged["specialized opcode"])
    spec.loader.exec_module(ran)
    assert ran.f(10) == 9  # what that .pyc runs, while its source says 11
    pyc.write_bytes(good)
    lock._compiled.clear()
    assert lock.loaded_code(mods, root=root) == []


def test_the_file_a_loader_reads_is_checked_beside_the_one_the_spec_names_and_a_rewrite_in_place_is_seen(tmp_path):
    """A loader given another file than the spec's origin runs that file: it is checked too (an untracked file
    is named though `__file__` is tracked). And a .pyc rewritten in place with its size and mtime put back is
    compared anew within the process (its ctime moved)."""
    import importlib.machinery
    import importlib.util

    root = _repo(tmp_path / "repo", {"pkg/mod.py": "def f():\n    return 1\n"})
    src = root / "pkg" / "mod.py"
    evil = tmp_path / "evil.py"
    evil.write_text("def f():\n    return 7\n")
    spec = importlib.util.spec_from_file_location("pkg.mod", src,
                                                  loader=importlib.machinery.SourceFileLoader("pkg.mod", str(evil)))
    bad = lock.loaded_code({"pkg.mod": importlib.util.module_from_spec(spec)}, root=root)
    assert len(bad) == 1 and str(evil) in bad[0] and "outside the tree" in bad[0], bad
    mods = {"pkg.mod": _module("pkg.mod", src)}
    _pyc_of(src.read_text(), src, tmp_path, 0)
    lock._compiled.clear()
    assert lock.loaded_code(mods, root=root) == []
    pyc = Path(importlib.util.cache_from_source(str(src)))
    good, before = pyc.read_bytes(), pyc.stat()
    _pyc_of("def f():\n    return 7\n", src, tmp_path, 1)
    forged = pyc.read_bytes()
    pyc.unlink()
    pyc.write_bytes(good)
    lock._compiled.clear()
    assert lock.loaded_code(mods, root=root) == []
    before = pyc.stat()
    with open(pyc, "r+b") as fh:  # in place: the same inode and size, and its mtime put back
        fh.write(forged)
    os.utime(pyc, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (pyc.stat().st_ino, pyc.stat().st_size, pyc.stat().st_mtime_ns) == \
        (before.st_ino, before.st_size, before.st_mtime_ns) and len(forged) == len(good)
    bad = lock.loaded_code(mods, root=root)  # no clearing: the process's own memo must see the change
    assert len(bad) == 1 and ".pyc" in bad[0], bad


def test_a_source_whose_pyc_path_the_file_system_refuses_is_looked_at_without_a_crash(tmp_path):
    """A module file whose .pyc name is too long for the file system imports (the importer ignores the .pyc);
    the lock gives its verdict on the source and does not raise."""
    root = _repo(tmp_path / "repo", {f"pkg/{'a' * 245}.py": "x = 1\n"})
    src = root / "pkg" / f"{'a' * 245}.py"
    (root / "pkg" / "__pycache__").mkdir()  # its folder there (other modules' .pyc): only the name is refused
    lock._compiled.clear()
    assert lock.loaded_code({"pkg.long": _module("pkg.long", src)}, root=root) == []


def _pyc_of(text: str, src: Path, tmp: Path, n: int) -> None:
    """The .pyc beside `src` compiled from `text`, the source's size and mtime kept (what the importer trusts)."""
    import importlib.util
    import py_compile

    st = src.stat()
    other = tmp / f"other{n}.py"
    other.write_text(text)
    py_compile.compile(str(other), cfile=importlib.util.cache_from_source(str(src)), doraise=True)
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_pyc_compiled_from_its_source_is_remembered_by_its_bytes_and_a_stale_one_is_refused_beside_it(
        tmp_path, monkeypatch):
    """The verdict "this .pyc is compiled from this source" is kept on disk under the sha256 of both files' bytes,
    so a new process does not compile the runtime again; a stale .pyc is other bytes, refused even while the
    verdict of the good one is kept, and it leaves no verdict of its own."""
    import importlib.util

    monkeypatch.setenv("MEMSPACE_CACHE", str(tmp_path / "cache"))
    kept = tmp_path / "cache" / "lock" / "compiled"
    root = _repo(tmp_path / "repo", {"pkg/mod.py": "def f():\n    return 1\n"})
    src = root / "pkg" / "mod.py"
    mods = {"pkg.mod": _module("pkg.mod", src)}
    _pyc_of(src.read_text(), src, tmp_path, 0)
    lock._compiled.clear()
    assert lock.loaded_code(mods, root=root) == []
    good = sorted(p.name for p in kept.iterdir())
    pyc = Path(importlib.util.cache_from_source(str(src)))
    assert len(good) == 1 and pyc.is_file()
    good_bytes = pyc.read_bytes()
    _pyc_of("def f():\n    return 7\n", src, tmp_path, 1)  # same size, other code
    lock._compiled.clear()
    bad = lock.loaded_code(mods, root=root)
    assert len(bad) == 1 and "its cached .pyc is not compiled from the tracked source" in bad[0], bad
    assert sorted(p.name for p in kept.iterdir()) == good  # no verdict for the stale pair
    pyc.write_bytes(good_bytes)  # the good one back, byte for byte: its kept verdict is the one read
    lock._compiled.clear()
    assert lock.loaded_code(mods, root=root) == [] and sorted(p.name for p in kept.iterdir()) == good


@hsettings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.integers(0, 9), min_size=2, max_size=5), names=st.lists(st.sampled_from("fgh"), min_size=2,
                                                                                   max_size=5))
def test_property_a_pyc_is_allowed_exactly_when_its_code_is_its_sources_whatever_was_remembered_before(
        tmp_path_factory, monkeypatch, values, names):
    """A sequence of .pyc files beside one source, each compiled from a generated text (the source's own or another
    of the same size), each checked by a fresh process's look with the verdicts of every earlier one on disk: each
    is allowed exactly when its code is the source's."""
    tmp = tmp_path_factory.mktemp("p")
    monkeypatch.setenv("MEMSPACE_CACHE", str(tmp / "cache"))
    text = lambda name, v: f"def {name}():\n    return {v}\n"  # noqa: E731 - one size for every pair
    root = _repo(tmp / "repo", {"pkg/mod.py": text(names[0], values[0])})
    src = root / "pkg" / "mod.py"
    mods = {"pkg.mod": _module("pkg.mod", src)}
    for n, (name, v) in enumerate(zip(names, values)):
        _pyc_of(text(name, v), src, tmp, n)
        lock._compiled.clear()
        allowed = lock.loaded_code(mods, root=root) == []
        assert allowed == (text(name, v) == src.read_text()), (name, v)


@hsettings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(committed=st.lists(st.text("abcdefgh=1 \n", min_size=1, max_size=20), min_size=1, max_size=4),
       edits=st.lists(st.one_of(st.none(), st.text("abcdefgh=1 \n", max_size=20)), min_size=4, max_size=4),
       extra=st.integers(0, 2))
def test_property_a_loaded_file_is_allowed_exactly_when_it_is_the_commits(tmp_path_factory, committed, edits, extra):
    """Whatever the files and edits: a loaded module is named iff its content is not HEAD's or it is untracked."""
    root = _repo(tmp_path_factory.mktemp("r"), {f"m{i}.py": t for i, t in enumerate(committed)})
    want = set()
    for i, text in enumerate(committed):
        if edits[i] is not None:
            (root / f"m{i}.py").write_text(edits[i])
            if edits[i] != text:
                want.add(f"m{i}")
    for j in range(extra):
        (root / f"u{j}.py").write_text("u = 1\n")
        want.add(f"u{j}")
    mods = {p.stem: _module(p.stem, p) for p in root.glob("*.py")}
    assert {b.split(" ", 1)[0] for b in lock.loaded_code(mods, root=root)} == want


PARTS = st.sampled_from(["a", "b", "la", "lb", "lf", "lx", "f.py", ".", "..", "", "nope"])


@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(paths=st.lists(st.tuples(st.booleans(), st.lists(PARTS, min_size=1, max_size=6)), min_size=1, max_size=8))
def test_property_the_loaded_codes_real_paths_are_os_realpaths_whatever_the_links(tmp_path_factory, paths):
    """The lock resolves each folder once per look (lock._Realpaths): for any path through folders, links to
    folders and files (one pointing up with ..), '.', '..', '//' and missing names, absolute or relative, one
    instance gives what os.path.realpath (Path.resolve) gives, asked in any order."""
    root = tmp_path_factory.mktemp("links")
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f.py").write_text("x = 1\n")
    (root / "a" / "f.py").write_text("y = 2\n")
    for name, target in {"la": "a", "lb": "a/b", "lf": "a/b/f.py", "lx": "a/b/.."}.items():
        (root / name).symlink_to(root / target)
        (root / "a" / name).symlink_to(root / target)
    real = lock._Realpaths()
    here = os.getcwd()
    os.chdir(root)
    try:
        for absolute, parts in paths:
            path = (str(root) + "/" if absolute else "") + "/".join(parts)
            assert real(path) == os.path.realpath(path), path
    finally:
        os.chdir(here)


def test_a_patched_refusals_function_does_not_decide(monkeypatch):
    """A module that sets `fidelity.refusals = lambda *a, **k: []` once made the preset pass whatever differed:
    the lock decides through the functions captured at import and names the replacement."""
    cfg = resolved("main", "index.ef_runtime=100")
    rows = fidelity.manifest(cfg, build(stage_node(cfg), cfg))
    monkeypatch.setattr(fidelity, "refusals", lambda *a, **k: [])
    got = {r.key: r for r in fidelity.decide(cfg, rows)}
    assert "index" in got and "harness.run.fidelity.refusals" in got["lock"].stage
    assert "no allow_deviation accepts it" in fidelity.refusal_text([got["lock"]])


def test_the_reference_refusal_does_not_say_allow_deviation_accepts_it():
    row = fidelity.Row("reference", "r", "p", "s", "differs", "", "")
    assert "no allow_deviation accepts it" in fidelity.refusal_text([row]) and "[reference]" not in fidelity.refusal_text([row])


def test_a_plugin_module_outside_the_tree_is_loaded_code_the_code_row_names(tmp_path, monkeypatch):
    """The plugin's module is code the paper did not run: without allow_deviation=[code] the code row refuses it."""
    # loaded in this process: a module that changes nothing (one that rewrote the prompt would leave it rewritten)
    (tmp_path / "inert_plugin.py").write_text('"""Registers nothing, changes nothing: still code the paper did not run."""\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("MEMSPACE_PLUGINS", "inert_plugin")
    rows = {r.key: r for r in fidelity.lock_rows()}
    assert rows["code"].status == "differs" and "inert_plugin" in rows["code"].stage


# ------------------------------------------------------------------------------ the backend study under the lock


def _backend_refusals(*overrides: str) -> dict[str, fidelity.Row]:
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["stage=backends", "preset=paper", "data=synth_tiny",
                                            "allow_deviation=[encoder,data]", *overrides], return_hydra_config=True)
    data = {"path": "generated", "sha256": "0" * 64, "kind": "synth"}
    return {r.key: r for r in fidelity.refusals(cfg, fidelity.backend_manifest(cfg, data, []))}


def _stage_leaves() -> dict[str, object]:
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        stage = OmegaConf.to_container(compose("config", overrides=["stage=backends"]).stage, resolve=True)
    return {k: v for k, v in fidelity._leaves(stage, "stage").items() if isinstance(v, (bool, int, float, str))
            and not isinstance(v, bool) and "." in k}


STAGE_LEAVES = _stage_leaves()


def test_the_backend_studys_stage_as_the_tree_has_it_is_the_papers_and_a_users_stage_is_not():
    assert _backend_refusals() == {}  # data and encoder accepted by name; nothing else differs
    got = _backend_refusals("stage.name=backends_mine")
    assert set(got) == {"stage"} and "backends_mine" in got["stage"].stage
    got = _backend_refusals("stage.only=[exact]", "stage.histories=4")  # the auditor's cut-down study
    assert set(got) == {"config.stage"} and 'stage.only ["exact"]' in got["config.stage"].stage


@hsettings(max_examples=30, deadline=None)
@given(key=st.sampled_from(sorted(STAGE_LEAVES)), bump=st.integers(min_value=1, max_value=7))
def test_any_changed_leaf_of_the_backend_studys_stage_is_refused_by_name(key, bump):
    """Whatever leaf of the backend study's stage a command line changes (configurations' ids, histories, builds,
    rounds, pools, calibration), preset=paper refuses it as config.stage, naming the leaf."""
    was = STAGE_LEAVES[key]
    new = was + bump if isinstance(was, (int, float)) else f"{was}_x{bump}"
    if key == "stage.name" or key in lock.OPERATIONAL:
        return  # the stage row's (above), or an operational leaf (the output folder's label): never refused
    got = _backend_refusals(f"{key}={new}")
    assert "config.stage" in got and key in got["config.stage"].stage, (key, new, {k: r.line() for k, r in got.items()})
