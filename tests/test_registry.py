"""Every extension point is one harness.plugins.Registry: a plugin added the way the README says is
found, and a second entry under a name already taken is refused naming both origins.

One subprocess (a clean interpreter: no registry has been read, nothing imported by hand) writes
nothing into the tree: the plugin package lives in tmp_path and comes in through $MEMSPACE_PLUGINS,
the duplicates through a second plugin module added to it afterwards (the registries re-read it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

PLUGIN = {
    "condition": '''
        import conditions
        from conditions import Access

        def build(cfg, ctx):
            return Access(text="Recent sessions are inlined below.")

        conditions.register("toyplug/recent")
    ''',
    "table": '''
        import pandas as pd
        from analysis.tables import Table, register

        register(Table("toyplug/toy", "toy.csv", lambda res: pd.DataFrame()))
    ''',
    "personal_table": '''
        import pandas as pd
        from analysis.personal import Table, register

        register(Table("toyplug/toy_personal", "toy_personal.csv", lambda st: pd.DataFrame()))
    ''',
    "study": '''
        from harness.studies import Study, register

        register(Study("toyplug/survey", run="toyplug.study:run", judge=None, analysis="analysis.run:main"))
    ''',
    "backend": '''
        from harness.memory.backends.base import register
        from harness.memory.backends.exact import ExactBackend

        @register("toyplug/toy_exact")
        class ToyExact(ExactBackend):
            """Exact search under another name: the replay must treat it as exact."""
    ''',
    "kind": '''
        from judge.kinds import Kind, register
        from judge.prompts import Item

        register(Kind("toyplug/brief", lambda record, prompts: [Item("toyplug/brief", "toy", "answer", "Short? yes or no")]))
    ''',
    "provider": '''
        from harness.endpoints.registry import PROVIDERS

        PROVIDERS.register("toyplug/toy_provider", lambda cfg: None)
    ''',
}
# a second entry under a name the tree already uses, one module per kind
DUPLICATE = {
    "condition": 'import conditions\n\ndef build(cfg, ctx):\n    return None\n\nconditions.register("memory_tool")\n',
    "table": 'from analysis.tables import Table, register\n\nregister(Table("coverage", None))\n',
    "personal_table": 'from analysis.personal import Table, register\n\nregister(Table("latency", None))\n',
    "study": ('from harness.studies import Study, register\n\n'
              'register(Study("agents", run="x:y", judge=None, analysis="analysis.run:main"))\n'),
    "backend": ('from harness.memory.backends.base import register\nfrom harness.memory.backends.exact import '
                'ExactBackend\n\n@register("exact")\nclass Mine(ExactBackend):\n    pass\n'),
    "kind": 'from judge.kinds import Kind, register\n\nregister(Kind("answer_check", lambda r, p: []))\n',
    "provider": 'from harness.endpoints.registry import PROVIDERS\n\nPROVIDERS.register("local", lambda cfg: None)\n',
}
# the same namespaced name as the plugin's own, from a second module of the plugin: refused naming both
TWICE = dict(PLUGIN)
TREE_ORIGIN = {"condition": "conditions.memory_tool", "table": "analysis.tables.quality",
               "personal_table": "analysis.personal.latency", "study": "harness.studies.agents",
               "backend": "harness.memory.backends.exact", "kind": "judge.kinds.answer_check",
               "provider": "harness.endpoints.registry"}

PROBE = '''
import json, os, sys

def registry(kind):
    if kind == "condition":
        import conditions; return conditions.CONDITIONS, "toyplug/recent"
    if kind == "table":
        from analysis import tables; return tables.TABLES, "toyplug/toy"
    if kind == "personal_table":
        from analysis import personal; return personal.TABLES, "toyplug/toy_personal"
    if kind == "study":
        from harness import studies; return studies.STUDIES, "toyplug/survey"
    if kind == "backend":
        from harness.memory.backends.base import BACKENDS; return BACKENDS, "toyplug/toy_exact"
    if kind == "kind":
        from judge.kinds import KINDS; return KINDS, "toyplug/brief"
    if kind == "provider":
        from harness.endpoints.registry import PROVIDERS; return PROVIDERS, "toyplug/toy_provider"

out = {}
kinds = sys.argv[1].split(",")
for kind in kinds:
    reg, name = registry(kind)
    out[kind] = {"found": name in reg, "origin": reg.origin(name) if name in reg else None, "names": reg.names()}
from judge import kinds as K
from harness.run.replay import _is_exact
out["chosen_default"] = [k.name for k in K.chosen()]
out["chosen_judge"] = [k.name for k in K.chosen({"kinds": ["answer_check", "toyplug/brief"]})]
out["chosen_stage"] = [k.name for k in K.chosen(None, {"judge_kinds": ["toyplug/brief"]})]
out["exact"] = [_is_exact({"name": "toyplug/toy_exact"}), _is_exact({"name": "hybrid", "dense": {"name": "toyplug/toy_exact"}}),
                _is_exact({"name": "redis_qe"})]
from harness.plugins import RegistryError
base = os.environ["MEMSPACE_PLUGINS"]
for kind in kinds:
    for what in ("dup", "twice"):
        os.environ["MEMSPACE_PLUGINS"] = base + f",toyplug.{what}_{kind}"  # only this kind's one module
        reg, _ = registry(kind)
        try:
            reg.names()
            out[kind][what] = None
        except RegistryError as exc:
            out[kind][what] = str(exc)
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("plug")
    pkg = root / "toyplug"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for kind, src in PLUGIN.items():
        (pkg / f"{kind}.py").write_text(textwrap.dedent(src))
        (pkg / f"dup_{kind}.py").write_text(DUPLICATE[kind])
        (pkg / f"twice_{kind}.py").write_text(textwrap.dedent(TWICE[kind]))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(REPO)]),
           "MEMSPACE_PLUGINS": ",".join(f"toyplug.{k}" for k in PLUGIN)}
    p = subprocess.run([sys.executable, "-c", PROBE, ",".join(PLUGIN)], cwd=root, env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kind", list(PLUGIN))
def test_a_plugin_is_found_and_a_second_of_its_name_is_refused_naming_both(probe, kind):
    got = probe[kind]
    assert got["found"] and got["origin"] == f"toyplug.{kind}", got
    assert len(got["names"]) >= 2  # the tree's own entries were discovered beside it
    twice = got["twice"] or ""
    assert "registered twice" in twice and f"toyplug.{kind}" in twice and f"toyplug.twice_{kind}" in twice, twice


@pytest.mark.parametrize("kind", list(PLUGIN))
def test_a_plugin_cannot_take_a_bare_name_the_tree_or_a_user_would_choose(probe, kind):
    """A plugin's names live in its namespace (`toyplug/...`): one registering a bare name, here the tree's own
    (e.g. `memory_tool`), is refused naming the namespaced name it may use, never a silent replacement."""
    dup = probe[kind]["dup"] or ""
    assert "a plugin's names live in its namespace" in dup and f"toyplug.dup_{kind}" in dup and "'toyplug/" in dup, dup
    assert TREE_ORIGIN[kind] and "registered twice" not in dup


def test_a_judgement_kind_applies_only_where_chosen(probe):
    assert probe["chosen_default"] == ["answer_check"]  # a registered plugin kind is not global
    assert probe["chosen_judge"] == ["answer_check", "toyplug/brief"] and probe["chosen_stage"] == ["toyplug/brief"]


def test_the_replay_reads_exact_from_the_backend_not_its_name(probe):
    assert probe["exact"] == [True, True, False]


def test_an_endpoint_preset_in_another_config_source_is_found_and_a_shadowing_one_refused(tmp_path):
    from harness.endpoints import presets
    from harness.plugins import Registry, RegistryError

    tree = REPO / "conf"
    mine = tmp_path / "conf"
    (mine / "model").mkdir(parents=True)
    (mine / "model" / "toy_model.yaml").write_text("defaults:\n  - vllm\n  - _self_\nname: toy_model\nmodel: my-model\n")
    fresh = Registry("endpoint preset", None)
    old, presets.PRESETS = presets.PRESETS, fresh
    try:
        found = presets.discover([tree, mine])
        assert found.get("model/toy_model") == (mine / "model" / "toy_model.yaml").resolve()
        assert "model/vllm" in found and "judge/vllm" in found
        (mine / "model" / "vllm.yaml").write_text("name: vllm\n")
        with pytest.raises(RegistryError, match="endpoint preset 'model/vllm' is registered twice") as err:
            presets.discover([tree, mine])
        assert str(tree / "model" / "vllm.yaml") in str(err.value) and str(mine / "model" / "vllm.yaml") in str(err.value)
    finally:
        presets.PRESETS = old


def test_the_backend_study_starts_only_the_servers_its_backends_declare():
    from bench.backends.cases import default_stage, parse_configs
    from bench.backends.study import services_needed

    cfgs = parse_configs(default_stage()["configs"])
    in_process = [c for c in cfgs if c.backend in ("exact", "fts5")]
    assert services_needed(in_process, {"fanout": False}) == set()
    assert services_needed([c for c in cfgs if c.backend == "pgvector"][:1], {"fanout": False}) == {"postgres"}
    assert services_needed(in_process, {"fanout": True}) == {"redis"}  # the fan-out side's dense index


from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from harness.plugins import TREE  # noqa: E402

IDENT = st.text("abcxyz_019", min_size=1, max_size=6).filter(lambda t: not t[0].isdigit())


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(top=st.one_of(st.sampled_from(TREE), IDENT), rest=st.lists(IDENT, max_size=2), own=st.booleans(),
       name=st.text("abx_/.1", max_size=8))
def test_only_a_name_in_the_registering_modules_namespace_is_allowed(top, rest, own, name):
    """The allowlist, over module and entry names nobody listed: the tree's modules register bare names
    only; any other module registers exactly `<its top-level package>/<a non-empty name>`."""
    from harness.plugins import namespace_refusal

    origin = ".".join([top, *rest])
    name = f"{top}/{name}" if own else name
    refused = namespace_refusal("thing", name, origin)
    if top in TREE:
        assert (refused is None) == ("/" not in name)
    else:
        assert (refused is None) == (name.startswith(top + "/") and len(name) > len(top) + 1), (origin, name)


def test_a_chosen_judgement_kind_shows_in_the_dry_runs_judge_request(tmp_path):
    """A kind added the README's way was found, but the dry run's judge line still read 'answer check' only:
    nothing showed that the chosen kind would be judged."""
    import os

    (tmp_path / "auditkind.py").write_text(
        "from judge.kinds import Kind, register\nfrom judge.prompts import Item\n\n"
        "register(Kind('auditkind/brief', lambda record, prompts: [Item('auditkind/brief', 'toy', 'answer', 'Short? yes or no')]))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)]), "MEMSPACE_PLUGINS": "auditkind"}
    res = subprocess.run([sys.executable, "-m", "harness.run", "stage=smoke", "dry_run=true", f"runs_dir={tmp_path}",
                          "+judge.kinds=[answer_check,auditkind/brief]"], capture_output=True, text=True, cwd=REPO, timeout=300,
                         env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    judge_lines = [ln for ln in (res.stdout + res.stderr).splitlines() if ln.strip().startswith("judge: judge")]
    assert judge_lines and all("answer_check" in ln and "brief" in ln for ln in judge_lines), judge_lines
