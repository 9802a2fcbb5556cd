"""The config files Hydra composes from, each parsed once per process (hydra_plugins/memspace_config_cache): a
composition through the kept parses is the composition Hydra's own sources make, for the shipped configs and for
generated ones, and a file whose bytes change is read anew whatever its size and time stamps say."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.file_config_source import FileConfigSource as HydraFile
from hydra._internal.core_plugins.importlib_resources_config_source import ImportlibResourcesConfigSource as HydraPkg
from hydra._internal.core_plugins.structured_config_source import StructuredConfigSource as HydraStructured
from hydra._internal.sources_registry import SourcesRegistry
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[1]
STAGES = sorted(p.stem for p in (REPO / "conf" / "stage").glob("*.yaml"))


@contextlib.contextmanager
def hydras_own_composition():
    """Compose as Hydra alone does for the block: its own file, pkg and structured sources (the registry as Hydra
    alone fills it) and its own interpolation map."""
    from hydra._internal import defaults_list

    from hydra.core.plugins import Plugins
    from hydra_plugins.memspace_config_cache import HYDRAS_INTERPOLATION_MAP, interpolation_map

    Plugins.instance()  # Hydra's sources registered (once a process) before the registry is saved and restored
    types = SourcesRegistry.instance().types
    saved = dict(types)
    types.update(file=HydraFile, pkg=HydraPkg, structured=HydraStructured)
    defaults_list._create_interpolation_map = HYDRAS_INTERPOLATION_MAP
    try:
        yield
    finally:
        types.clear()
        types.update(saved)
        defaults_list._create_interpolation_map = interpolation_map


def composed(config_dir: Path, overrides: list[str], name: str = "config") -> dict:
    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
        cfg = compose(config_name=name, overrides=overrides, return_hydra_config=True)
    return OmegaConf.to_container(cfg, resolve=False)


def test_the_cached_sources_serve_hydras_schemes_in_every_process_that_composes(tmp_path):
    import importlib.util
    import sys

    from hydra._internal import defaults_list

    composed(REPO / "conf", [])
    for _ in range(3):  # the module run again in its own module object, as Hydra's plugin scan runs it, after
        installed = defaults_list._create_interpolation_map  # someone wrapped what was installed
        defaults_list._create_interpolation_map = lambda *a, _f=installed: _f(*a)
        spec = importlib.util.find_spec("hydra_plugins.memspace_config_cache")
        spec.loader.exec_module(sys.modules["hydra_plugins.memspace_config_cache"])
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    ours = defaults_list._create_interpolation_map
    assert ours.__module__ == "hydra_plugins.memspace_config_cache"
    assert ours.__wrapped__.__module__ == "hydra._internal.defaults_list"  # Hydra's own, never a wrapper of ours
    stage = tmp_path / "conf"
    for group in ("db", "x"):
        (stage / group).mkdir(parents=True)
        (stage / group / "a.yaml").write_text(f"{group}_of: a\n")
    (stage / "config.yaml").write_text("defaults:\n  - db: a\n  - x: ${db}\n  - _self_\n")
    assert composed(stage, [])["x"] == {"x_of": "a"}  # an interpolated default composes, no endless recursion
    types = SourcesRegistry.instance().types
    assert {types[s].__module__ for s in ("file", "pkg", "structured")} == {"hydra_plugins.memspace_config_cache"}


def test_every_shipped_stage_composes_the_same_through_the_kept_parses_as_through_hydras_own():
    for stage in STAGES:
        for extra in ([], ["preset=paper"]) if stage in ("main", "org") else ([],):
            with hydras_own_composition():
                want = composed(REPO / "conf", [f"stage={stage}", *extra])
            first = composed(REPO / "conf", [f"stage={stage}", *extra])
            again = composed(REPO / "conf", [f"stage={stage}", *extra])  # from the kept parses
            assert first == want and again == want, (stage, extra)


def test_what_a_caller_does_to_its_config_reaches_no_later_composition(tmp_path):
    (tmp_path / "config.yaml").write_text("a: {b: 1}\nc: [1, 2]\n")
    with initialize_config_dir(config_dir=str(tmp_path), version_base="1.3"):
        cfg = compose(config_name="config")
        OmegaConf.set_struct(cfg, False)
        cfg.a.b = 2
        cfg.c.append(3)
        cfg.d = "new"
        assert OmegaConf.to_container(compose(config_name="config")) == {"a": {"b": 1}, "c": [1, 2]}


SCALARS = st.one_of(st.integers(-10**6, 10**6), st.booleans(), st.none(),
                    st.floats(allow_nan=False, allow_infinity=False, width=32),
                    st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=12))
KEYS = st.text("abcdefgh_", min_size=1, max_size=6)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(KEYS, inner, max_size=3)), max_leaves=8)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.dictionaries(KEYS, VALUES, min_size=1, max_size=4), other=st.dictionaries(KEYS, VALUES, max_size=4),
       crlf=st.booleans(), package=st.sampled_from(["", "# @package _global_\n", "# @package sub\n"]))
def test_a_generated_config_group_composes_as_hydras_own_and_a_change_in_place_is_seen(tmp_path_factory, body, other,
                                                                                        crlf, package):
    root = tmp_path_factory.mktemp("conf")
    (root / "group").mkdir()
    nl = "\r\n" if crlf else "\n"
    text = lambda value: (package + OmegaConf.to_yaml(OmegaConf.create(value))).replace("\n", nl)  # noqa: E731
    (root / "config.yaml").write_text(f"defaults:{nl}  - group: one{nl}  - _self_{nl}top: 1{nl}", newline="")
    one = root / "group" / "one.yaml"
    one.write_text(text(body), newline="")
    with hydras_own_composition():
        want = composed(root, [])
    assert composed(root, []) == want and composed(root, []) == want
    # the file rewritten in place with other content, its time stamps put back: the new bytes are read
    before = one.stat()
    one.write_text(text(other or {"z": 0}), newline="")
    os.utime(one, ns=(before.st_atime_ns, before.st_mtime_ns))
    with hydras_own_composition():
        want_now = composed(root, [])
    assert composed(root, []) == want_now


def test_a_file_changed_to_the_same_size_and_time_stamps_is_read_anew(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("k: 1\n")
    assert composed(tmp_path, [])["k"] == 1
    before = cfg.stat()
    cfg.write_text("k: 2\n")
    os.utime(cfg, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert cfg.stat().st_size == before.st_size and cfg.stat().st_mtime_ns == before.st_mtime_ns
    assert composed(tmp_path, [])["k"] == 2


def test_a_broken_yaml_is_refused_with_the_error_hydras_own_composition_give_naming_the_file(tmp_path):
    for i, text in enumerate(["broken: [1, 2\nx: 1\n", "a: 1\na: 2\n", "k: v\n  bad indent: 1\n"]):
        root = tmp_path / f"c{i}"
        root.mkdir()
        (root / "config.yaml").write_text(text)
        errors = []
        for own in (True, False):
            try:
                with hydras_own_composition() if own else contextlib.nullcontext():
                    composed(root, [])
                errors.append(None)
            except Exception as exc:  # noqa: BLE001 - the errors are what is compared
                errors.append((type(exc), str(exc)))
        assert errors[0] == errors[1], (text, errors)
        assert errors[0] is None or str(root / "config.yaml") in errors[0][1], errors[0]


def test_a_structured_config_composes_as_hydras_own_and_what_a_caller_does_to_it_stays_out_of_the_store(tmp_path):
    """The structured source's copies read Hydra's one ConfigStore (never a snapshot of it): a config stored as a
    dataclass composes as through Hydra's own source, one stored after an earlier composition is found, and a
    caller that edits what it composed changes neither the store nor a later composition."""
    from dataclasses import dataclass, field

    from hydra.core.config_store import ConfigStore

    @dataclass
    class Knob:
        depth: int = 3
        names: list = field(default_factory=lambda: ["a", "b"])

    cs = ConfigStore.instance()
    cs.store(group="knob", name="cache_test_first", node=Knob)
    (tmp_path / "config.yaml").write_text("defaults:\n  - knob: cache_test_first\n  - _self_\nx: 1\n")
    try:
        with hydras_own_composition():
            want = composed(tmp_path, [])
        assert composed(tmp_path, []) == want and want["knob"] == {"depth": 3, "names": ["a", "b"]}
        cs.store(group="knob", name="cache_test_later", node=Knob(depth=7))
        assert composed(tmp_path, ["knob=cache_test_later"])["knob"]["depth"] == 7
        with initialize_config_dir(config_dir=str(tmp_path), version_base="1.3"):
            cfg = compose(config_name="config")
            cfg.knob.depth = 99
            cfg.knob.names.append("c")
            assert OmegaConf.to_container(compose(config_name="config").knob) == {"depth": 3, "names": ["a", "b"]}
        assert composed(tmp_path, []) == want
    finally:
        cs.repo["knob"].pop("cache_test_first.yaml", None)
        cs.repo["knob"].pop("cache_test_later.yaml", None)
        if not cs.repo["knob"]:
            cs.repo.pop("knob")


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.sampled_from(["a", "b"]), second=st.sampled_from(["a", "b", None]),
       where=st.sampled_from(["root", "nested", "both"]), self_first=st.booleans())
def test_defaults_that_interpolate_a_choice_compose_as_hydras_own_at_any_depth(tmp_path_factory, first, second, where,
                                                                             self_first):
    """A defaults list that interpolates a choice (`- extra: ${db}`), in the primary config, in a config of a group,
    or both, with the choice overridden or not: the composition (or its error) is the one Hydra alone makes. The
    interpolation map is built only for such a list; every other list is composed without it."""
    root = tmp_path_factory.mktemp("conf")
    for group in ("db", "extra", "deep", "mid"):
        (root / group).mkdir()
    for name in ("a", "b"):
        (root / "db" / f"{name}.yaml").write_text(f"db_name: {name}\n")
        (root / "extra" / f"{name}.yaml").write_text(f"extra_of: {name}\n")
        (root / "deep" / f"{name}.yaml").write_text(f"deep_of: {name}\n")
    mid_defaults = ["/deep: ${db}" if where in ("nested", "both") else "/deep: a"]
    (root / "mid" / "m.yaml").write_text("defaults:\n" + "".join(f"  - {d}\n" for d in mid_defaults) + "mid: 1\n")
    # Hydra expands a list from its end, so a nested list can interpolate `db` when `mid` comes before it
    top = ["mid: m", "db: a", "extra: ${db}" if where in ("root", "both") else "extra: b"]
    top = (["_self_"] + top) if self_first else (top + ["_self_"])
    (root / "config.yaml").write_text("defaults:\n" + "".join(f"  - {d}\n" for d in top) + "top: 1\n")
    overrides = [f"db={first}"] + ([] if second is None else [f"extra={second}"])
    results = []
    for own in (True, False):
        try:
            with hydras_own_composition() if own else contextlib.nullcontext():
                results.append(composed(root, overrides))
        except Exception as exc:  # noqa: BLE001 - the errors are what is compared
            results.append((type(exc), str(exc)))
    assert results[0] == results[1], (where, overrides, results)
    got = results[1]
    assert isinstance(got, dict), got
    if where in ("root", "both") and second is None:
        assert got["extra"]["extra_of"] == first
    if where in ("nested", "both"):
        assert got["mid"]["deep"]["deep_of"] == first
