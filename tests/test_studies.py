"""The study registry end to end (harness/studies/): `make run`, `make judge` and `make analyze` reach a
study kind's own run step, judge and analysis through it, for a study plugged in from outside the tree
as for the tree's own; `make analyze` runs the analysis of each study that has a folder, so either study
alone analyses with exit 0; and the Makefile names no study.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

STUDY = '''
"""A toy study kind: its run step writes a stage folder, its judge a judgements file, its analysis a table."""
import json
import sys
from pathlib import Path

from harness.records import RunDir
from harness.studies import Study, register

register(Study("toyplug/survey", run="toyplug.study:run", judge="toyplug.study:judge",
               analysis="toyplug.study:analyse", inspect="toyplug.study:inspect"))


def run(cfg, sweep=None):
    rd = RunDir.for_stage(cfg)
    rd.root.mkdir(parents=True, exist_ok=True)
    (rd.root / "stage.json").write_text(json.dumps({"schema_version": 1, "kind": "toyplug/survey",
        "config_hash": "x", "stage": str(cfg.stage.name), "label": str(cfg.stage.label), "seed": 0, "data": {},
        "plan": {"runs": ["a", "b"]}, "versions": {}, "code": {"commit": None, "dirty": None}, "model": None,
        "prereg": None, "created": "2026-01-01T00:00:00"}))
    (rd.root / "answers.json").write_text(json.dumps({"a": "yes", "b": "no"}))
    print("toy run step ran", file=sys.stderr)


def judge(cfg, rd):
    answers = json.loads((rd.root / "answers.json").read_text())
    (rd.root / "judged.json").write_text(json.dumps({k: v == "yes" for k, v in answers.items()}))
    print("toy judge ran", file=sys.stderr)
    return 0


def inspect(folder, judge):
    print(f"toy inspect ran on {Path(folder).name}", file=sys.stderr)
    return []


OPTIONS = ("runs", "runs_root", "out")


def analyse(argv):
    opts = dict(a.partition("=")[::2] for a in argv)
    folders = sorted(Path(opts.get("runs_root", "runs")).glob("*/*/judged.json"))
    share = sum(sum(json.loads(p.read_text()).values()) for p in folders) / max(1, 2 * len(folders))
    out = Path(opts.get("out", "results")) / "survey"
    out.mkdir(parents=True, exist_ok=True)
    (out / "survey.csv").write_text(f"folders,share_yes\\n{len(folders)},{share}\\n")
    return 0
'''


def _env(tmp_path: Path) -> dict:
    plug = tmp_path / "plug"
    (plug / "toyplug").mkdir(parents=True)
    (plug / "toyplug" / "__init__.py").write_text("")
    (plug / "toyplug" / "study.py").write_text(STUDY)
    (plug / "conf" / "stage").mkdir(parents=True)
    (plug / "conf" / "stage" / "toy_survey.yaml").write_text(
        "# @package _global_\nstage:\n  kind: toyplug/survey\n  name: survey\n  label: first\n")
    return {**os.environ, "MEMSPACE_PLUGINS": "toyplug.study",
            "PYTHONPATH": os.pathsep.join([str(plug), str(REPO)])}


def _run(args, env, cwd):
    return subprocess.run([sys.executable, "-m", *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def test_a_plugged_in_study_is_run_judged_and_analysed_through_the_registry(tmp_path):
    env = _env(tmp_path)
    runs = tmp_path / "runs"
    common = ["stage=toy_survey", f"runs_dir={runs}", f"hydra.searchpath=[file://{tmp_path / 'plug' / 'conf'}]"]
    ran = _run(["harness.run", *common], env, REPO)
    assert ran.returncode == 0 and "toy run step ran" in ran.stderr, ran.stderr[-3000:]
    judged = _run(["judge.run", *common], env, REPO)
    assert judged.returncode == 0 and "toy judge ran" in judged.stderr, judged.stderr[-3000:]
    assert json.loads((runs / "survey" / "first" / "judged.json").read_text()) == {"a": True, "b": False}
    out = tmp_path / "results"
    ana = _run(["harness.cli.analyze", f"runs_root={runs}", f"out={out}"], env, REPO)
    assert ana.returncode == 0, ana.stderr[-3000:]
    assert (out / "survey" / "survey.csv").read_text() == "folders,share_yes\n1,0.5\n"
    assert not (out / "report.md").exists()  # no folder of the agent studies: their analysis did not run
    refused = _run(["harness.cli.analyze", f"runs_root={runs}", f"out={out}", "errata=x.json"], env, REPO)
    assert refused.returncode == 2 and "errata=x.json" in refused.stderr, refused.stderr[-2000:]
    # `make view`: the study's own Inspect export, as its registry entry names it
    view = _run(["analysis.export_inspect", f"runs_root={runs}", f"out={tmp_path / 'logs'}"], env, REPO)
    assert view.returncode == 0 and "toy inspect ran on first" in view.stderr, view.stderr[-3000:]
    assert "for 1 stage folder(s)" in view.stdout
    # `make publish`: only a study its registry entry says is publishable
    pub = _run(["harness.cli.publish", f"runs={runs / 'survey' / 'first'}", "dry_run=true"], env, REPO)
    assert pub.returncode == 2 and "a 'toyplug/survey' stage; only agents stages" in pub.stderr, pub.stderr[-2000:]


def test_make_analyze_with_the_second_study_alone_exits_0(tmp_path):
    from tests.personal_helpers import fake_folder

    runs = tmp_path / "runs"
    fake_folder(runs, "personal", "gpt-4o", {"name": "gpt4o", "model": "gpt-4o"},
                [{"condition": c, "trial_id": f"t000{i}", "llm": {"profile": 3, "task": 4, "integration": 3}}
                 for i in range(2) for c in ("naive_concat", "kernel_shared")])
    out = tmp_path / "results"
    ana = _run(["harness.cli.analyze", f"runs_root={runs}", f"out={out}", "resamples=20"], dict(os.environ), REPO)
    assert ana.returncode == 0, ana.stderr[-3000:] + ana.stdout[-2000:]
    assert "analysis of personal" in ana.stderr and "analysis of agents" not in ana.stderr
    assert (out / "personal.md").exists()


def test_make_analyze_leaves_out_a_folder_whose_study_is_not_loaded_and_analyses_the_others(tmp_path):
    """A plugged-in study's folder with its plugin not loaded: named with why, the other study analysed,
    exit 1 (written, something left out); with no other folder, exit 2 naming it."""
    from tests.personal_helpers import fake_folder

    env = _env(tmp_path)
    runs = tmp_path / "runs"
    ran = _run(["harness.run", "stage=toy_survey", f"runs_dir={runs}",
                f"hydra.searchpath=[file://{tmp_path / 'plug' / 'conf'}]"], env, REPO)
    assert ran.returncode == 0, ran.stderr[-3000:]
    bare = dict(os.environ)  # the plugin not loaded
    bare.pop("MEMSPACE_PLUGINS", None)
    alone = _run(["harness.cli.analyze", f"runs_root={runs}", f"out={tmp_path / 'r0'}"], bare, REPO)
    assert alone.returncode == 2, alone.stderr[-3000:]
    assert f"{runs / 'survey' / 'first'}: stage.kind 'toyplug/survey' is no registered study" in alone.stderr
    fake_folder(runs, "personal", "gpt-4o", {"name": "gpt4o", "model": "gpt-4o"},
                [{"condition": c, "trial_id": f"t000{i}", "llm": {"profile": 3, "task": 4, "integration": 3}}
                 for i in range(2) for c in ("naive_concat", "kernel_shared")])
    out = tmp_path / "results"
    ana = _run(["harness.cli.analyze", f"runs_root={runs}", f"out={out}", "resamples=20"], bare, REPO)
    assert ana.returncode == 1, ana.stderr[-3000:] + ana.stdout[-2000:]
    assert f"left out: {runs / 'survey' / 'first'}: stage.kind 'toyplug/survey' is no registered study" in ana.stderr
    assert "MEMSPACE_PLUGINS" in ana.stderr and "analysis of personal" in ana.stderr
    assert (out / "personal.md").exists() and not (out / "survey").exists()
    view = _run(["analysis.export_inspect", f"runs={runs / 'survey' / 'first'}", f"out={tmp_path / 'logs'}"], bare, REPO)
    assert view.returncode == 2, view.stderr[-3000:]
    assert f"left out {runs / 'survey' / 'first'}: stage.kind 'toyplug/survey' is no registered study" in view.stderr


def test_make_analyze_with_no_stage_folder_says_what_to_run(tmp_path):
    (tmp_path / "runs").mkdir()
    ana = _run(["harness.cli.analyze", f"runs_root={tmp_path / 'runs'}"], dict(os.environ), REPO)
    assert ana.returncode == 2 and "no stage folders" in ana.stderr and "make run" in ana.stderr, ana.stderr


def test_a_study_that_names_no_judge_has_nothing_to_judge(tmp_path):
    from bench.backends.cases import default_stage  # noqa: F401  (the backend study's stage exists)

    folder = tmp_path / "runs" / "backends" / "b"
    folder.mkdir(parents=True)
    (folder / "stage.json").write_text(json.dumps({"schema_version": 1, "kind": "backends", "config_hash": "x",
        "stage": "backends", "label": "b", "seed": 0, "data": {}, "plan": {}, "versions": {},
        "code": {"commit": None, "dirty": None}, "model": None, "prereg": None, "created": "2026-01-01T00:00:00"}))
    res = _run(["judge.run", "stage=backends", "stage.label=b", f"runs_dir={tmp_path / 'runs'}"], dict(os.environ),
               REPO)
    assert res.returncode == 0 and "nothing to judge" in res.stderr, res.stderr[-2000:]


def test_no_makefile_line_and_no_command_names_a_study():
    """The commands go through the registry: the Makefile and the command modules (run, judge, analyze, view,
    publish) spell no study kind and no module a study's step names."""
    from harness import studies

    names = set()
    for kind, s in studies.STUDIES.items().items():
        names.add(kind)
        for target in (s.run, s.judge, s.analysis, s.judge_refusal, s.inspect, s.power):  # a study's own modules
            if target:
                names.add(target.partition(":")[0])
    assert {"analysis.inspect_personal", "analysis.run", "judge.rubric", "analysis.power"} <= names
    make = (REPO / "Makefile").read_text()
    commands = {p: p.read_text() for p in [REPO / "judge" / "run.py", REPO / "harness" / "cli" / "analyze.py",
                                           REPO / "harness" / "cli" / "run.py", REPO / "harness" / "cli" / "publish.py",
                                           REPO / "analysis" / "export_inspect.py", REPO / "analysis" / "publish.py"]}
    import re

    said = [(n, "Makefile") for n in names if re.search(rf"-m {re.escape(n)}\b|\b{re.escape(n)}_ARGS\b", make)]
    said += [(n, p.name) for p, text in commands.items() for n in names
             if re.search(rf"(from|import) {re.escape(n)}\b|[\"']{re.escape(n)}[\"']", text)]
    assert not said, said


def test_make_analyze_with_both_studies_writes_each_analysis_once_the_default_studys_first(tmp_path):
    """One out= for both studies: the agent analysis rewrites the folder, the personalization analysis writes
    its own folder inside it afterwards (so neither erases or overwrites the other's table2.csv)."""
    import yaml

    from tests.analysis_fixtures import Stage, sha256_file
    from tests.personal_helpers import fake_folder

    data = yaml.safe_load((REPO / "conf" / "prereg" / "hypotheses.yaml").read_text())
    data["settings"].update(resamples=20, primary_resamples=20)
    pre = tmp_path / "hypotheses.yaml"
    pre.write_text(yaml.safe_dump(data, sort_keys=False))
    runs = tmp_path / "runs"
    s = Stage(runs, "main", prereg_sha=sha256_file(pre))
    s.add("session_search", "q0")
    s.write()
    fake_folder(runs, "personal", "gpt-4o", {"name": "gpt4o", "model": "gpt-4o"},
                [{"condition": c, "trial_id": "t0000", "llm": {"profile": 3, "task": 4, "integration": 3}}
                 for c in ("naive_concat", "kernel_shared")])
    out = tmp_path / "results"
    ana = _run(["harness.cli.analyze", f"runs_root={runs}", f"out={out}", f"prereg={pre}", "resamples=20",
                "lenient=true"], dict(os.environ), REPO)
    assert ana.returncode == 0, ana.stderr[-3000:] + ana.stdout[-2000:]
    said = [ln for ln in ana.stderr.splitlines() if ln.startswith("analysis of ")]
    assert [ln.split(":")[0] for ln in said] == ["analysis of agents", "analysis of personal"], said
    assert "prereg=" not in said[1] and "lenient=" not in said[1]  # each analysis gets the options it reads
    assert (out / "report.md").exists() and (out / "personal" / "personal.md").exists()


def test_a_plugged_in_study_that_keeps_its_folder_its_own_way_is_judged_and_named_by_make_analyze(tmp_path):
    """A study's run step need not write records/ or stage.json: `make judge` hands such a folder to the study's
    judge, and `make analyze` names it on a `left out:` line (with how a run step opens its folder) instead of
    skipping it unseen."""
    env = _env(tmp_path)
    runs = tmp_path / "runs"
    common = ["stage=toy_survey", f"runs_dir={runs}", f"hydra.searchpath=[file://{tmp_path / 'plug' / 'conf'}]"]
    assert _run(["harness.run", *common], env, REPO).returncode == 0
    (runs / "survey" / "first" / "stage.json").unlink()  # a run step that wrote only its answers
    judged = _run(["judge.run", *common], env, REPO)
    assert judged.returncode == 0 and "toy judge ran" in judged.stderr, judged.stderr[-3000:]
    ana = _run(["harness.cli.analyze", f"runs_root={runs}", f"out={tmp_path / 'results'}"], env, REPO)
    said = [x for x in ana.stderr.splitlines() if "survey/first: no stage.json" in x]  # its only folder: the error
    assert ana.returncode == 2 and len(said) == 1 and "RunDir.for_stage(cfg).open" in said[0], ana.stderr[-3000:]


def test_a_study_the_preset_does_not_lock_is_refused_under_it_before_its_run_step(tmp_path):
    """preset=paper on a stage of a study whose run step does not check it against the paper (Study.locked false)
    is refused whole (exit 2): the preset never vouches for code it does not check."""
    env = _env(tmp_path)
    runs = tmp_path / "runs"
    ran = _run(["harness.run", "stage=toy_survey", "preset=paper", f"runs_dir={runs}",
                f"hydra.searchpath=[file://{tmp_path / 'plug' / 'conf'}]"], env, REPO)
    assert ran.returncode == 2 and "no study the preset locks" in ran.stderr, ran.stderr[-3000:]
    assert "toy run step ran" not in ran.stderr and not runs.exists()


@pytest.mark.parametrize("step", ["run", "judge", "analysis", "power", "judge_refusal", "inspect", "sweep_check"])
@pytest.mark.parametrize("value", ["analysis.run", "analysis.run:", ":main", "analysis run:main", "a.b:c.d", 3])
def test_a_study_step_that_is_not_module_function_is_refused_at_registration(step, value):
    """A step spelt any other way than "module:function" (a module without its function, which the layer test
    would not read as an import) is refused when the study registers, naming the step."""
    from harness.studies import STUDIES, Study, StudyError, register

    fields = {"run": "toyplug.study:run", "judge": None, "analysis": "toyplug.study:analyse", step: value}
    with pytest.raises(StudyError, match=f"its {step} step"):
        register(Study("toyplug/misspelt", **fields))
    assert "toyplug/misspelt" not in STUDIES
