"""Extending never fights the paper: one extension of each kind, added exactly as the README's "Extending"
table says, both ways it names, is found and runs in a stage of its own, and the paper's stages (main, org,
scale) resolve and are checked by `preset=paper` exactly as without them: the same fidelity manifest, nothing
refused.

In a git clone of the tree as it is (HEAD plus the edits of tracked files): first the README's in-tree route,
bare names in the tree's own folders, which the preset refuses until they are committed (it names each file)
and accepts after; then, beside them, a package outside the tree, its names in its namespace and its yaml
through hydra.searchpath. Nothing is sent and nothing is written: dry runs and the in-process manifest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# the README's rows, in the tree (bare names, the tree's folders; a stage of its own for the condition and
# the backend, the study's stage naming its kind). Named toytree_*, a prefix no user takes: a user's own `recent`,
# `brief` or `survey` committed in the tree is left alone (the clone holds it; these files are added beside it)
TREE_FILES = {
    "conditions/toytree_recent.py": '''
        """The last sessions inlined: a newcomer's condition."""

        from dataclasses import dataclass

        from conditions import Access


        @dataclass
        class Settings:
            last: int = 2


        def build(cfg: Settings, ctx) -> Access:
            return Access(text="Recent sessions are inlined below.")
    ''',
    "conf/condition/toytree_recent.yaml": "module: toytree_recent\n",
    "conf/stage/toytree_recent.yaml": ("# @package _global_\ndefaults: [smoke, /condition@stage.conditions.toytree_recent: "
                                       "toytree_recent, _self_]\nstage: {name: toytree_recent, label: toytree_recent}\n"),
    "analysis/tables/toytree_runs_per_folder.py": '''
        import pandas as pd

        from analysis.tables import Table, register

        register(Table("toytree_runs_per_folder", "toytree_runs_per_folder.csv", lambda res: pd.DataFrame()))
    ''',
    "harness/memory/backends/toytree_flat.py": '''
        from harness.memory.backends.base import register
        from harness.memory.backends.exact import ExactBackend


        @register("toytree_flat")
        class Flat(ExactBackend):
            """A new in-process backend."""
    ''',
    "conf/index/toytree_flat.yaml": "name: toytree_flat\n",
    "conf/stage/toytree_backends.yaml": ("# @package _global_\ndefaults: [backends, _self_]\n"
                                         "stage: {name: toytree_backends, label: toytree_backends, configs: "
                                         "[{id: exact, backend: exact}, {id: flat, backend: toytree_flat}]}\n"),
    "judge/kinds/toytree_brief.py": '''
        from judge.kinds import Kind, register
        from judge.prompts import Item

        register(Kind("toytree_brief", lambda record, prompts: [Item("toytree_brief", "toy", "answer", "Short? yes or no")]))
    ''',
    "harness/studies/toytree_survey.py": '''
        from harness.studies import Study, register

        register(Study("toytree_survey", run="harness.studies.toytree_survey:run", judge=None,
                       analysis="harness.studies.toytree_survey:analyse"))


        def run(cfg, sweep=None):
            pass


        def analyse(argv):
            return 0
    ''',
    "conf/stage/toytree_survey.yaml": ("# @package _global_\nstage: {kind: toytree_survey, name: toytree_survey, "
                                       "label: toytree_survey}\n"),
    "conf/model/toytree_mine.yaml": "defaults:\n  - vllm\n  - _self_\nname: toytree_mine\nmodel: my-model\n",
}

# the same kinds from a package outside the tree, beside those: names in its namespace, yaml on the search path
FILES = {
    "toyext/__init__.py": "",
    "toyext/recent.py": '''
        from dataclasses import dataclass

        import conditions
        from conditions import Access


        @dataclass
        class Settings:
            last: int = 2


        def build(cfg: Settings, ctx):
            return Access(text="Recent sessions are inlined below.")


        conditions.register("toyext/recent")
    ''',
    "toyext/table.py": '''
        import pandas as pd
        from analysis.tables import Table, register

        register(Table("toyext/runs_per_folder", "toyext_runs.csv", lambda res: pd.DataFrame()))
    ''',
    "toyext/flat.py": '''
        from harness.memory.backends.base import register
        from harness.memory.backends.exact import ExactBackend


        @register("toyext/flat")
        class Flat(ExactBackend):
            """A new in-process backend."""
    ''',
    "toyext/brief.py": '''
        from judge.kinds import Kind, register
        from judge.prompts import Item

        register(Kind("toyext/brief", lambda record, prompts: [Item("toyext/brief", "toy", "answer", "Short? yes or no")]))
    ''',
    "toyext/survey.py": '''
        from harness.studies import Study, register

        register(Study("toyext/survey", run="toyext.survey:run", judge=None, analysis="toyext.survey:analyse"))


        def run(cfg, sweep=None):
            pass


        def analyse(argv):
            return 0
    ''',
    # the README's rows, verbatim in shape: a condition and a backend each in a stage of its own
    "conf/condition/toy_recent.yaml": "module: toyext/recent\n",
    "conf/stage/toy_recent.yaml": ("# @package _global_\ndefaults: [smoke, /condition@stage.conditions.toy_recent: toy_recent, _self_]\n"
                                   "stage: {name: toy_recent, label: toy_recent}\n"),
    "conf/index/toy_flat.yaml": "name: toyext/flat\n",
    "conf/stage/toy_backends.yaml": ("# @package _global_\ndefaults: [backends, _self_]\n"
                                    "stage: {name: toy_backends, label: toy_backends, configs: "
                                    "[{id: exact, backend: exact}, {id: flat, backend: toyext/flat}]}\n"),
    "conf/stage/toy_survey.yaml": "# @package _global_\nstage: {kind: toyext/survey, name: toy_survey, label: toy_survey}\n",
    "conf/model/toy_model.yaml": "defaults:\n  - vllm\n  - _self_\nname: toy_model\nmodel: my-model\n",
}
PLUGINS = "toyext.recent,toyext.table,toyext.flat,toyext.brief,toyext.survey"

PAPER_STAGES = ("main", "org", "scale")  # the PROBE's SHORT keys

PROBE = '''
import json, sys
from hydra import compose, initialize_config_dir
from harness.run import fidelity
from harness.run.plan import build
from harness.run.settings import stage_node

conf, extra = sys.argv[1], sys.argv[2:]
HERE = ["encoder", "judge_prompts", "runtime", "data"]
SHORT = {"main": ["samples.main", "samples.full"], "org": ["samples.main", "samples.org_public", "samples.org_private"],
         "scale": ["samples.main", "samples.scale"]}
out = {}
for stage, short in SHORT.items():
    allow = "allow_deviation=[" + ",".join(HERE + short) + "]"
    with initialize_config_dir(config_dir=conf, version_base="1.3"):
        cfg = compose("config", overrides=[f"stage={stage}", "preset=paper", "data=synth_tiny", allow, *extra],
                      return_hydra_config=True)  # the preset chosen is read from Hydra's choices
    assert fidelity.preset(cfg) == "paper"
    rows = fidelity.manifest(cfg, build(stage_node(cfg), cfg))
    out[stage] = {"rows": [r.line() for r in rows if r.key != "code"],
                  "code": next(r.status for r in rows if r.key == "code"),
                  "refused": sorted(r.key for r in fidelity.refusals(cfg, rows))}
if extra:  # what the extensions added: found by their registries, their stages and presets composed
    import conditions, harness.studies as S
    from analysis import tables
    from harness.memory.backends.base import BACKENDS
    from judge.kinds import KINDS

    out["found"] = {ns: [f"{p}recent" in conditions.CONDITIONS, f"{p}runs_per_folder" in tables.TABLES,
                         f"{p}flat" in BACKENDS, f"{p}brief" in KINDS, f"{p}survey" in S.STUDIES]
                    for ns, p in (("", "toytree_"), ("toyext/", "toyext/"))}
    with initialize_config_dir(config_dir=conf, version_base="1.3"):
        out["backends"] = {s: [c["backend"] for c in compose("config", overrides=[f"stage={s}", *extra]).stage.configs]
                           for s in ("toytree_backends", "toy_backends")}
        out["models"] = {m: compose("config", overrides=["stage=smoke", f"model={m}", *extra]).model.model
                         for m in ("toytree_mine", "toy_model")}
print(json.dumps(out))
'''



def git(clone: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=newcomer", "-c", "user.email=newcomer@example.org", *args],
                          cwd=clone, capture_output=True, text=True, check=True).stdout


def snapshot(repo: Path) -> str:
    """A commit of the tree as it is (HEAD plus the edits of its tracked files), built through an index of its own:
    `git stash create` takes the tree's index lock, which another process's `git status` may hold at that moment."""
    with tempfile.TemporaryDirectory() as d:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(d) / "index")}

        def g(*args: str) -> str:
            return subprocess.run(["git", "-c", "user.name=newcomer", "-c", "user.email=newcomer@example.org", *args],
                                  cwd=repo, env=env, capture_output=True, text=True, check=True).stdout.strip()

        g("read-tree", "HEAD")
        g("add", "-u")
        return g("commit-tree", g("write-tree"), "-p", "HEAD", "-m", "the tree as it is")


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))


@pytest.mark.services  # the preset's dry run checks the servers too
def test_one_extension_of_each_kind_both_ways_the_readme_says_leaves_the_papers_stages_as_they_are(tmp_path):
    # the tree as it is, read through the shared object store; the clone's modules come first on its own path
    # (cwd), the tree's are not loaded
    snap = snapshot(REPO)
    clone = tmp_path / "tree"
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(REPO), str(clone)], check=True)
    git(clone, "checkout", "-q", "--detach", snap)

    def py(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *args], cwd=clone, env=env or dict(os.environ), capture_output=True,
                              text=True, timeout=600)

    def probe(*extra: str, env: dict | None = None) -> dict:
        p = py("-c", PROBE, str(clone / "conf"), *extra, env=env)
        assert p.returncode == 0, p.stderr[-3000:]
        return json.loads(p.stdout.strip().splitlines()[-1])

    before = probe()
    assert all(before[s]["refused"] == [] and before[s]["code"] == "same" for s in PAPER_STAGES), before

    # the README's in-tree route: refused by the preset while the files are not committed, each named
    write(clone, TREE_FILES)
    paper = ["-m", "harness.run", "stage=main", "preset=paper", "dry_run=true", "data=synth_tiny",
             "allow_deviation=[encoder,judge_prompts,runtime,data,samples.main,samples.full]",
             f"runs_dir={tmp_path / 'runs'}"]
    keyed = {**os.environ, "DEEPSEEK_API_KEY": "a dry run sends nothing"}  # the paper's model's key is checked set
    dirty = py(*paper, env=keyed)
    refused = [x for x in dirty.stdout.splitlines() if x.strip().startswith("preflight") and "FAILED" in x]
    assert dirty.returncode == 3 and len(refused) == 1, dirty.stdout[-3000:] + dirty.stderr[-2000:]
    assert "preflight fidelity" in refused[0] and "untracked: " in refused[0], refused
    assert all(rel in refused[0] for rel in TREE_FILES), refused  # each file named, its yaml too
    git(clone, "add", "-A")
    git(clone, "commit", "-q", "-m", "six extensions, as the README says")
    clean = py(*paper, env=keyed)
    assert clean.returncode == 0, clean.stdout[-3000:] + clean.stderr[-2000:]

    # the paper's stages beside them: the same manifest, nothing refused, the extensions' yaml on the search path
    search = f"hydra.searchpath=[file://{tmp_path / 'plug' / 'conf'}]"
    write(tmp_path / "plug", FILES)
    after = probe(search)
    for stage in PAPER_STAGES:
        assert after[stage] == before[stage], stage
    assert after["found"] == {"": [True] * 5, "toyext/": [False] * 5}, after["found"]  # the tree's, found
    # a package outside the tree is code the paper did not run: while $MEMSPACE_PLUGINS loads it the preset refuses
    # exactly the plugins and the code they are (docs/paper-preset.md), nothing else
    env = {**os.environ, "MEMSPACE_PLUGINS": PLUGINS,
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "plug"), str(clone)])}
    loaded = probe(search, env=env)
    for stage in PAPER_STAGES:
        assert loaded[stage]["refused"] == ["code", "plugins"], (stage, loaded[stage]["refused"])
    assert loaded["found"] == {"": [True] * 5, "toyext/": [True] * 5}, loaded["found"]
    assert loaded["backends"] == {"toytree_backends": ["exact", "toytree_flat"], "toy_backends": ["exact", "toyext/flat"]}
    assert loaded["models"] == {"toytree_mine": "my-model", "toy_model": "my-model"}

    # the in-tree condition's own stage runs it beside the smoke stage's, and the override route adds either
    # condition to the smoke stage (dry runs: nothing sent, nothing written)
    for args, names in ((["stage=toytree_recent"], ["toytree_recent"]),
                        (["stage=smoke", "+condition@stage.conditions.toytree_recent=toytree_recent",
                          "+condition@stage.conditions.toy_recent=toy_recent"], ["toytree_recent", "toy_recent"])):
        dry = py("-m", "harness.run", *args, "dry_run=true", search, f"runs_dir={tmp_path / 'runs'}", env=env)
        assert dry.returncode == 0, dry.stderr[-3000:]
        for name in names:
            assert f" {name}.lme." in dry.stdout or f"\n{name}.lme." in dry.stdout, (args, dry.stdout[-3000:])
        if args[0] == "stage=toytree_recent":
            assert "conditions.toytree_recent differs" in dry.stdout, dry.stdout[-3000:]
    assert not (tmp_path / "runs").exists()
