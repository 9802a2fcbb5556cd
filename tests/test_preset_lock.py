"""preset=paper is a lock with one allowlist (harness/run/lock.py, harness/run/fidelity.py): a stage may differ
from the paper only in an operational leaf or in what allow_deviation names; every other leaf, file, plugin
and text the model reads is refused by name, and no config value switches the lock off (issue 40).

The explicit cases are the bypasses found by the issue's review; the property test generates overrides of
every leaf of the resolved preset config nobody listed. In process on the resolved config (Hydra's compose,
the real plan, generated data); the plugin and sweep cases as dry runs (no model call, nothing written).
"""

from __future__ import annotations

import os
import sys
import subprocess
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st
from omegaconf.errors import OmegaConfBaseException

from harness.records.provenance import code_revision
from harness.run import fidelity, lock
from harness.run import settings
from harness.run.plan import build
from harness.run.settings import stage_node
from tests.test_paper_preset import HERE, REPO, SHORT, harness, refused, resolved

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
