"""Extending never fights the paper: one extension of each kind, added exactly as the README's
"Extending" table says (here from a package outside the tree, its names in its namespace, its yaml
through hydra.searchpath), is found and runs in a stage of its own, and the paper's stages resolve
and are checked by `preset=paper` exactly as without it (the same fidelity manifest, nothing refused).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

FILES = {
    "mine/__init__.py": "",
    "mine/recent.py": '''
        from dataclasses import dataclass

        import conditions
        from conditions import Access


        @dataclass
        class Settings:
            last: int = 2


        def build(cfg: Settings, ctx):
            return Access(text="Recent sessions are inlined below.")


        conditions.register("mine/recent")
    ''',
    "mine/table.py": '''
        import pandas as pd
        from analysis.tables import Table, register

        register(Table("mine/runs_per_folder", "mine_runs.csv", lambda res: pd.DataFrame()))
    ''',
    "mine/flat.py": '''
        from harness.memory.backends.base import register
        from harness.memory.backends.exact import ExactBackend


        @register("mine/flat")
        class Flat(ExactBackend):
            """A new in-process backend."""
    ''',
    "mine/brief.py": '''
        from judge.kinds import Kind, register
        from judge.prompts import Item

        register(Kind("mine/brief", lambda record, prompts: [Item("mine/brief", "toy", "answer", "Short? yes or no")]))
    ''',
    "mine/survey.py": '''
        from harness.studies import Study, register

        register(Study("mine/survey", run="mine.survey:run", judge=None, analysis="mine.survey:analyse"))


        def run(cfg, sweep=None):
            pass


        def analyse(argv):
            return 0
    ''',
    # the README's rows, verbatim in shape: a condition and a backend each in a stage of its own
    "conf/condition/recent.yaml": "module: mine/recent\n",
    "conf/stage/recent.yaml": ("# @package _global_\ndefaults: [smoke, /condition@stage.conditions.recent: recent, _self_]\n"
                               "stage: {name: recent, label: recent}\n"),
    "conf/index/flat.yaml": "name: mine/flat\n",
    "conf/stage/backends_flat.yaml": ("# @package _global_\ndefaults: [backends, _self_]\n"
                                      "stage: {name: backends_flat, label: backends_flat, configs: "
                                      "[{id: exact, backend: exact}, {id: flat, backend: mine/flat}]}\n"),
    "conf/stage/survey.yaml": "# @package _global_\nstage: {kind: mine/survey, name: survey, label: survey}\n",
    "conf/model/mine.yaml": "defaults:\n  - vllm\n  - _self_\nname: mine\nmodel: my-model\n",
}
PLUGINS = "mine.recent,mine.table,mine.flat,mine.brief,mine.survey"

PROBE = '''
import json, os, sys
from hydra import compose, initialize_config_dir
from harness.run import fidelity
from harness.run.plan import build
from harness.run.settings import stage_node

conf, plug = sys.argv[1], sys.argv[2]
HERE = ["encoder", "judge_prompts", "runtime", "data"]
SHORT = {"main": ["samples.main", "samples.full"], "org": ["samples.main", "samples.org_public", "samples.org_private"]}
out = {}
for stage in ("main", "org"):
    allow = "allow_deviation=[" + ",".join(HERE + SHORT[stage]) + "]"
    rows = {}
    for extended in (False, True):
        extra = [f"hydra.searchpath=[file://{plug}]"] if extended else []
        with initialize_config_dir(config_dir=conf, version_base="1.3"):
            cfg = compose("config", overrides=[f"stage={stage}", "preset=paper", "data=synth_tiny", allow, *extra])
        plan = build(stage_node(cfg), cfg)
        rows[extended] = [r.line() for r in fidelity.manifest(cfg, plan)]
        out[f"{stage}_refused_{extended}"] = [r.key for r in fidelity.refusals(cfg, fidelity.manifest(cfg, plan))]
    out[f"{stage}_same_manifest"] = rows[False] == rows[True]
with initialize_config_dir(config_dir=conf, version_base="1.3"):
    cfg = compose("config", overrides=["stage=backends_flat", f"hydra.searchpath=[file://{plug}]"])
    out["backend_configs"] = [c["backend"] for c in cfg.stage.configs]
    cfg = compose("config", overrides=["stage=smoke", "model=mine", f"hydra.searchpath=[file://{plug}]"])
    out["model"] = cfg.model.model
import conditions, harness.studies as S
from analysis import tables
from harness.memory.backends.base import BACKENDS
from judge.kinds import KINDS
out["found"] = ["mine/recent" in conditions.CONDITIONS, "mine/runs_per_folder" in tables.TABLES, "mine/flat" in BACKENDS,
                "mine/brief" in KINDS, "mine/survey" in S.STUDIES]
print(json.dumps(out))
'''


def test_one_extension_of_each_kind_as_the_readme_says_leaves_the_papers_stages_as_they_are(tmp_path):
    for rel, text in FILES.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(textwrap.dedent(text))
    env = {**os.environ, "MEMSPACE_PLUGINS": PLUGINS, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    p = subprocess.run([sys.executable, "-c", PROBE, str(REPO / "conf"), str(tmp_path / "conf")], env=env, cwd=REPO,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["found"] == [True] * 5
    for stage in ("main", "org"):  # the paper's stages: nothing refused, the manifest unchanged by the extensions
        assert got[f"{stage}_refused_True"] == got[f"{stage}_refused_False"] == [], got
        assert got[f"{stage}_same_manifest"], stage
    assert got["backend_configs"] == ["exact", "mine/flat"] and got["model"] == "my-model"

    # the condition's own stage runs it beside the smoke stage's (a dry run: nothing sent, nothing written)
    search = f"hydra.searchpath=[file://{tmp_path / 'conf'}]"
    dry = subprocess.run([sys.executable, "-m", "harness.run", "stage=recent", "dry_run=true", search,
                          f"runs_dir={tmp_path / 'runs'}"], env=env, cwd=REPO, capture_output=True, text=True,
                         timeout=600)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "recent.lme." in dry.stdout and "conditions.recent differs" in dry.stdout, dry.stdout[-3000:]
    assert not (tmp_path / "runs").exists()
    # and the override route, on the smoke stage
    over = subprocess.run([sys.executable, "-m", "harness.run", "stage=smoke", "dry_run=true", search,
                           "+condition@stage.conditions.recent=recent", f"runs_dir={tmp_path / 'runs'}"], env=env,
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert over.returncode == 0 and "recent.lme." in over.stdout, over.stderr[-3000:]
