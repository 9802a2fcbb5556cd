"""Typed settings at the config-loading edge: what a stage, a condition, an index, an endpoint and a
judge may be given, and a check that refuses an option nobody reads.

WHY: Hydra refuses an override of a key that does not exist, but `+key=value` adds one, and a
misspelt addition (`+stage.conditions.recent.nn=5` for `n`) ran silently with the default. The
settings each node accepts are the keys its yaml gives plus the optional fields declared here
(dataclasses, stored in Hydra's ConfigStore as `schema/<node>`); a condition module may declare
more in a `Settings` dataclass of its own. `check(cfg)` runs before any command does anything: an
added key none of these declares is an error naming the nearest one (exit 2), and two endpoint
presets of one name in two config sources are refused (harness.endpoints.presets).

Open dictionaries (an endpoint's `params`, `judge_params`, `accepts`, `prices`) take any key: what
a provider accepts is the provider's business (harness.endpoints.fit checks it against the server).
"""

from __future__ import annotations

import difflib
import functools
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Optional

from hydra.core.config_store import ConfigStore

from harness.endpoints.settings import EndpointSettings, JudgeSettings  # noqa: F401 - the typed endpoint nodes
from harness.plugins import RegistryError


class SettingsError(RegistryError):
    """An option no setting declares (exit 2, bad input)."""


PURPOSES = frozenset({"study", "ablation", "smoke"})  # a stage's purpose: which personal-study tables it feeds


@dataclass
class StageSettings:
    """Optional stage keys the code reads besides those of conf/stage/<name>.yaml. A stage's typed node
    (stage_node) is an instance of a subclass whose other fields are its yaml's keys."""

    judge_after_run: bool = False
    judge_kinds: Optional[list] = None  # judgement kinds (judge/kinds/) for this stage's judge; default the answer check
    purpose: Optional[str] = None  # one of PURPOSES (analysis/personal reads it); published only as one of them
    tool_guidance: Optional[str] = None
    only: Optional[list] = None  # backend study: the configurations (or backends) to run
    fanout: bool = True
    lexical: bool = True
    builds: int = 3
    concurrency: Optional[int] = None

    def get(self, key: str, default: Any = None) -> Any:
        """A mapping's read, for the helpers that take a stage's node or a record's plain copy alike."""
        value = getattr(self, key, None)
        return default if value is None else value


@dataclass
class ConditionSettings:
    """Keys every condition may carry (harness.run, the analysis), besides its yaml's and its module's `Settings`."""

    module: str = "???"
    access: Optional[str] = None
    reference: bool = False  # the condition every other one of a table is compared with
    compare_with: list = field(default_factory=list)
    roles: list = field(default_factory=list)  # personalization methods' roles (analysis/personal/common.py)
    hide_in: list = field(default_factory=list)
    forecast: dict = field(default_factory=dict)
    max_rounds: Optional[int] = None


@dataclass
class IndexSettings:
    name: str = "???"
    dim: Optional[int] = None


OPEN = {"params", "judge_params", "accepts", "prices", "offpeak", "forecast", "trials", "realism", "rates"}
SCHEMAS = {"stage": StageSettings, "condition": ConditionSettings, "index": IndexSettings,
           "model": EndpointSettings, "judge": JudgeSettings}

_cs = ConfigStore.instance()
for _name, _node in SCHEMAS.items():
    _cs.store(group="schema", name=_name, node=_node)


# how providers spell the reasoning effort in a request's parameters (OpenAI / DeepSeek / vLLM, the
# Responses API and OpenRouter, a body passed through, Ollama's think level)
REASONING_SPELLINGS = (("reasoning_effort",), ("reasoning", "effort"), ("extra_body", "reasoning_effort"),
                       ("extra_body", "reasoning", "effort"), ("think",))


def _is_effort_key(k: str) -> bool:
    """A flat name `accepts` may rename the effort to (`reasoning.effort`, `reasoningEffort`)."""
    k = str(k).lower()
    return k == "reasoning_effort" or ("reason" in k and "effort" in k)


def efforts(params) -> list[tuple[str, str]]:
    """(spelling, value in lower case) of every reasoning effort a parameter mapping sets."""
    params = params or {}
    found = [(str(k), str(v).lower()) for k, v in params.items()
             if _is_effort_key(k) and v is not None and not hasattr(v, "get")]
    for path in REASONING_SPELLINGS[1:]:
        node: Any = params
        for p in path:
            node = node.get(p) if hasattr(node, "get") else None
        if node is not None and not hasattr(node, "get"):
            found.append((".".join(path), str(node).lower()))
    return found


def reasoning_effort(model_cfg, strict: bool = True, sent: str = "params") -> Optional[str]:
    """The one reasoning setting of an endpoint config (a preset, a typed node, or a record's plain copy),
    whatever the provider calls it: `reasoning_effort:` beside the params, or any spelling inside them,
    also after `accepts` renamed it. None: not set. Two values: an error (strict, the config edge) or
    `conflicting: a, b` (the fidelity manifest of what was sent). sent: the parameters the calls send
    (`judge_params` for a judge: judge.common.model_config sends those, never its model preset's params).

    WHY: the request and the fidelity manifest read this one function; a preset that writes
    `params: {reasoning: {effort: low}}` must not read as "not set"."""
    get = (lambda k: getattr(model_cfg, k, None)) if not hasattr(model_cfg, "get") else model_cfg.get
    found = [(f"{sent}.{k}", v) for k, v in efforts(get(sent))]
    if get("reasoning_effort") is not None:
        found.append(("reasoning_effort", str(get("reasoning_effort")).lower()))
    values = sorted({v for _, v in found})
    if len(values) > 1:
        if not strict:
            return "conflicting: " + ", ".join(values)
        raise SettingsError(f"model {get('name')}: the reasoning effort is set twice, differently: "
                            + ", ".join(f"{k}={v}" for k, v in found))
    return values[0] if values else None


SENT = {"model": "params", "judge": "judge_params"}  # what an endpoint node's calls send (judge.common.model_config)


def effort_into_params(model_cfg, kind: str = "model") -> None:
    """`+model.reasoning_effort=low` (the typed field) reaches the request: written into `params` (a judge's
    `judge_params`) under its usual name (`accepts` renames it for the endpoint) unless a spelling there
    already says the same."""
    from omegaconf import open_dict

    sent = SENT[kind]
    value = reasoning_effort(model_cfg, sent=sent)  # an error if the field and a spelling disagree
    if value is None or efforts(model_cfg.get(sent)):
        return
    with open_dict(model_cfg):
        if model_cfg.get(sent) is None:
            model_cfg[sent] = {}
        model_cfg[sent].reasoning_effort = value


def own_settings(kind: str, node: Any = None, where: str = "condition"):
    """A condition module's own `Settings` dataclass (None: it declares none). A condition naming no module,
    or one that does not load, is refused naming its key (it was passed as a plugin without Settings and
    failed later with a traceback)."""
    if kind != "condition" or node is None:
        return None
    import conditions

    module = node.get("module")
    if module is None or str(module) in ("", "???"):
        raise SettingsError(f"{where}.module: a condition names its module (known: {', '.join(conditions.CONDITIONS.names())})")
    try:
        return getattr(conditions.load(str(module)), "Settings", None)
    except ImportError as exc:
        raise SettingsError(f"{where}.module: {exc}") from None


def declared(kind: str, node: Any = None, where: str = "condition") -> set[str]:
    """The optional keys a node of this kind accepts; a condition's also its module's `Settings` fields, an
    index's its backend's settings (index_schema)."""
    if kind == "index" and node is not None and (node.get("name") or node.get("backend")):
        return {f.name for f in fields(index_schema(str(node.get("name") or node.get("backend"))))}
    own = own_settings(kind, node, where)
    return {f.name for f in fields(SCHEMAS[kind])} | ({f.name for f in fields(own)} if own else set())


def kind_of(path: list[str]) -> str | None:
    """Which schema a node at `path` (keys from the root) follows, or None (not checked)."""
    if path == ["stage"]:
        return "stage"
    if len(path) == 3 and path[:2] == ["stage", "conditions"]:
        return "condition"
    if len(path) == 1 and path[0] in ("index", "model", "judge"):
        return path[0]
    return None


def _edits(a: str, b: str) -> int:
    """Levenshtein distance: difflib's ratio alone called `model.parallel` nearer `temprature` than `temperature`."""
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def nearest(key: str, keys) -> str | None:
    """The key (dotted below an open dictionary: `params.temperature`) whose last part is fewest edits away."""
    ranked = sorted(keys, key=lambda k: (_edits(key, k.rsplit(".", 1)[-1]),
                                         -difflib.SequenceMatcher(None, key, k.rsplit(".", 1)[-1]).ratio(), k))
    return ranked[0] if ranked else None


def _select(cfg, path: list[str]):
    node = cfg
    for p in path:
        node = node.get(p) if hasattr(node, "get") else None
        if node is None:
            return None
    return node


def check_additions(cfg, overrides: list[str], groups: set[str] = frozenset()) -> None:
    """Refuse every `+a.b.c=v` / `++a.b.c=v` whose key `c` the node `a.b` neither had nor declares."""
    for ov in overrides:
        if not ov.startswith("+"):
            continue
        key = ov.lstrip("+").partition("=")[0]
        if "@" in key or key.replace(".", "/") in groups:  # a config group added (+condition@..., +preset=)
            continue
        *parent, leaf = key.split(".")
        if any(p in OPEN for p in parent):
            continue
        kind = kind_of(parent)
        node = _select(cfg, parent)
        if kind is None or node is None:
            continue
        allowed = declared(kind, node, ".".join(parent))
        if leaf in allowed:
            continue
        have = (set(node.keys()) - {leaf}) | allowed
        inside = {f"{k}.{sub}" for k in OPEN & set(node.keys()) if hasattr(node.get(k), "keys") for sub in node.get(k)}
        near = nearest(leaf, have | inside)
        raise SettingsError(f"unknown option {key}: no {kind} setting {leaf!r}"
                            + (f" (did you mean {'.'.join([*parent, near])}?)" if near else "")
                            + f"; a {kind} takes: {', '.join(sorted(have))}")


GATES = ("paper_judge",)  # switches a command line may turn on, never off


def check_gates(overrides: list[str]) -> None:
    """A gate (`paper_judge`: stage=personal_paper's file asks for the paper's judge) is only ever turned on from the
    command line: an override of it is accepted when its value is `true` and refused otherwise (`false`, null,
    deleted with `~`, a sweep). WHY: `paper_judge=false` ran the second paper's study under another judge with no
    deviation declared; a judge other than the paper's is declared with allow_deviation=[judge_model] (stage.json,
    the report)."""
    for ov in overrides:
        key, eq, value = ov.lstrip("+~").partition("=")
        if key.strip() in GATES and (ov.startswith("~") or not eq or value.strip().lower() != "true"):
            raise SettingsError(f"{ov}: {key.strip()} is set by the stage's file and only turned on from the command "
                                "line; to judge with another judge, declare it: allow_deviation=[judge_model]")


def nodes(cfg) -> list[tuple[str, str, Any]]:
    """(path, kind, node) of every typed node of a composed config."""
    out = [(k, k, cfg.get(k)) for k in ("stage", "index", "model", "judge") if cfg.get(k) is not None]
    for name, node in ((cfg.get("stage") or {}).get("conditions") or {}).items():
        out.append((f"stage.conditions.{name}", "condition", node))
    return out


def typed(kind: str, node: Any, where: str = "condition"):
    """The node's declared settings as a typed (structured) config: a value of the wrong type is an error
    naming the key. A condition's module `Settings` types its own keys too. A module that wants its
    settings typed reads them through this."""
    from omegaconf import OmegaConf

    def fit(schema):
        given = {f.name: node.get(f.name) for f in fields(schema) if f.name in node and node.get(f.name) is not None}
        return OmegaConf.merge(schema_node(schema), given)

    out = fit(SCHEMAS[kind])
    own = own_settings(kind, node, where)
    if own is not None:
        fit(own)  # its keys checked against their declared types
    return out


def check_types(cfg) -> None:
    from omegaconf.errors import ValidationError

    for path, kind, node in nodes(cfg):
        try:
            typed(kind, node, path)
        except ValidationError as exc:
            key = getattr(exc, "key", None) or getattr(exc, "full_key", "?")
            raise SettingsError(f"{path}.{key}: {exc.msg if hasattr(exc, 'msg') else exc}".splitlines()[0]) from None


def check_yaml_types(cfg, choices, sources: list[Path] | None = None) -> None:
    """A number or flag a condition's yaml gives keeps its type: `stage.conditions.prefetch.k=eight` is refused
    naming the key, not a crash in every run. choices: Hydra's runtime choices (which yaml each condition is);
    sources: the config folders, so that a plugin's yaml under hydra.searchpath is found too."""
    from omegaconf import OmegaConf

    def own_yaml(choice: str) -> dict:
        """A yaml Hydra's compose cannot find as a primary config (a plugin's, under hydra.searchpath): its own keys."""
        for src in sources or []:
            path = Path(src) / "condition" / f"{choice}.yaml"
            if path.is_file():
                return {k: v for k, v in (OmegaConf.to_container(OmegaConf.load(path)) or {}).items() if k != "defaults"}
        return {}

    for name, node in ((cfg.get("stage") or {}).get("conditions") or {}).items():
        choice = (choices or {}).get(f"condition@stage.conditions.{name}")
        if not choice:
            continue
        try:
            given = composed_once(f"condition/{choice}").get("condition") or {}
        except Exception:  # noqa: BLE001 - a yaml Hydra cannot compose alone: its own keys
            given = own_yaml(str(choice))
        for key, was in given.items():
            if not isinstance(was, (bool, int, float)) or key not in node or node.get(key) is None:
                continue
            now = node.get(key)
            if not _same_kind(was, now):
                raise SettingsError(f"stage.conditions.{name}.{key}: {now!r} is not of type {type(was).__name__} "
                                    f"(condition/{choice}.yaml gives {was!r})")


_COMPOSED: dict = {}  # (config name, overrides, what the search path holds) -> the composition, or its error


def composed_once(config_name: str, overrides: list[str] = ()) -> dict:
    """Hydra's compose (no resolution, as a plain dict the caller only reads) under the search path Hydra holds now,
    kept in this process while that path holds the same bytes. WHY: every command's checks composed each
    condition's yaml and the stage's again, about ten compositions a command and most of a dry run's time; a
    yaml edited between two commands is a different key, so nothing stale is ever compared."""
    import copy

    from hydra import compose
    from omegaconf import OmegaConf

    key = (config_name, tuple(overrides), _search_path_digest())
    if key not in _COMPOSED:
        if len(_COMPOSED) > 512:
            _COMPOSED.clear()
        try:
            _COMPOSED[key] = OmegaConf.to_container(compose(config_name=config_name, overrides=list(overrides)),
                                                    resolve=False)
        except Exception as exc:  # noqa: BLE001 - kept as what composing gave, raised to every caller alike
            _COMPOSED[key] = exc
    kept = _COMPOSED[key]
    if isinstance(kept, Exception):
        raise copy.copy(kept)
    return kept


def _search_path_digest() -> str:
    """What Hydra's search path holds now: each source's place and the bytes of its yaml files, and the structured
    configs stored in this process (a store after import is a new node)."""
    import hashlib
    from importlib import resources

    from hydra.core.config_store import ConfigStore
    from hydra.core.global_hydra import GlobalHydra

    h = hashlib.sha256()
    for src in GlobalHydra.instance().config_loader().get_sources():
        h.update(f"{src.scheme()}://{src.path}\0".encode())
        if src.scheme() == "file":
            root = Path(src.path)
        elif src.scheme() == "pkg":
            try:
                root = Path(str(resources.files(src.path.replace("/", "."))))
            except (ModuleNotFoundError, TypeError, ValueError):
                root = None
            h.update(repr(root).encode())
        else:
            continue
        if root is not None and root.is_dir():
            for f in sorted(root.rglob("*.yaml")):
                h.update(f"{f.relative_to(root)}\0".encode() + f.read_bytes() + b"\0")

    def stored(repo, where=""):
        for name, node in sorted(repo.items()):
            if isinstance(node, dict):
                stored(node, f"{where}{name}/")
            else:
                h.update(f"{where}{name}:{id(node.node)}\0".encode())

    stored(ConfigStore.instance().repo)
    return h.hexdigest()


def _same_kind(was, now) -> bool:
    """`now` may stand where a yaml gives the number or flag `was` (an int where a float is given, not a str)."""
    if isinstance(was, bool):
        return isinstance(now, bool)
    return isinstance(now, (int, float)) and not isinstance(now, bool) and (isinstance(was, float) or isinstance(now, int))


def check_stage_yaml_types(cfg, overrides: list[str], groups: set[str], sources: list[Path] | None = None) -> None:
    """A number, flag or mapping the stage's yaml gives keeps its kind under a value override: `stage.trials.n=many`
    or `stage.delta_rounds=many` is refused naming the key. WHY: stage_node types a key by its composed value,
    the override included, so only StageSettings' declared fields were checked; the planner then crashed or a
    dry run passed. The yaml's values are those of the config composed with the same groups and no value override."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    def is_group(ov: str) -> bool:
        key = ov.lstrip("+~").partition("=")[0]
        return key.startswith("hydra.") or "@" in key or key.replace(".", "/") in groups

    from hydra.core.hydra_config import HydraConfig
    from hydra.errors import HydraException

    same_groups = [o for o in overrides if is_group(o)]
    if HydraConfig.initialized():  # the command's own hydra.searchpath (not among the task's overrides)
        same_groups += [o for o in HydraConfig.get().overrides.hydra if o.startswith("hydra.searchpath")]
    try:
        if GlobalHydra.instance().is_initialized():
            given = composed_once("config", same_groups).get("stage")
        elif sources:  # a config composed earlier (a test's, the bench's): compose from its first folder
            with initialize_config_dir(config_dir=str(Path(sources[0]).resolve()), version_base="1.3"):
                given = composed_once("config", same_groups).get("stage")
        else:
            return
    except HydraException:  # the stage as its yaml gives it does not compose alone: nothing to compare with
        return
    if given is None or cfg.get("stage") is None:
        return

    def walk(was, now, where: str) -> None:
        if now is None or was is None or where == "stage.conditions":  # the conditions: check_yaml_types
            return
        if isinstance(was, dict):
            if not isinstance(now, dict):
                raise SettingsError(f"{where}: {now!r} is not a mapping (the stage's yaml gives {was!r})")
            for k, v in was.items():
                if k in now:
                    walk(v, now[k], f"{where}.{k}")
        elif isinstance(was, (bool, int, float)) and not _same_kind(was, now):
            raise SettingsError(f"{where}: {now!r} is not of type {type(was).__name__} (the stage's yaml gives {was!r})")

    walk(given, OmegaConf.to_container(cfg.stage, resolve=True), "stage")


def config_sources() -> list[Path]:
    """The file folders Hydra composed from (the tree's conf/ and each hydra.searchpath entry), in order."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    out = []
    for s in HydraConfig.get().runtime.config_sources:
        if s.schema == "file" and s.path and Path(s.path).is_dir():
            out.append(Path(s.path))
    return out


def check(cfg, overrides: list[str] | None = None, sources: list[Path] | None = None) -> "Nodes":
    """The config-loading edge: presets of one name once, no added option nobody reads, and every module's
    typed node built (returned)."""
    from hydra.core.hydra_config import HydraConfig

    from harness.endpoints import presets

    if sources is None:
        sources = config_sources()
    if overrides is None:
        overrides = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
    presets.discover(sources)
    groups = {str(p.relative_to(src)) for src in sources for p in src.rglob("*") if p.is_dir()}
    choices = (cfg.hydra.runtime.choices if cfg.get("hydra") is not None  # compose(..., return_hydra_config=True)
               else HydraConfig.get().runtime.choices if HydraConfig.initialized() else None)
    nodes = _check_one(cfg, overrides, groups, choices, sources)
    for job in later_jobs():  # a sweep: every job's config checked before the first one runs
        with _interpolations():
            composed = compose_job(job)
        _check_one(composed, job, groups, composed.hydra.runtime.choices, sources)
    return nodes


def _check_one(cfg, overrides, groups, choices, sources) -> "Nodes":
    with _interpolations():
        for _, _, node in nodes(cfg):  # resolved whole first: the error then names the key
            _resolved(node)
        check_top(cfg)  # every top-level key, and the nodes no module types (encoder, data, samples)
        check_gates(overrides)
        check_additions(cfg, overrides, groups)
        check_types(cfg)
        if choices is not None:
            check_yaml_types(cfg, choices, sources)
            check_stage_yaml_types(cfg, overrides, groups, sources)
        for kind in ("model", "judge"):  # `+model.reasoning_effort=low` reaches the requests through params
            if cfg.get(kind) is not None:
                effort_into_params(cfg.get(kind), kind)
        built = typed_nodes(cfg)  # every module's own node builds: an unknown key or a wrong type stops here
        check_indexes(cfg)
    return built


class _interpolations:
    """An interpolation that does not resolve (`k=${nope.x}`) is bad input naming its key, not a traceback."""

    def __enter__(self):
        return self

    def __exit__(self, typ, exc, tb):
        from omegaconf.errors import InterpolationResolutionError

        if isinstance(exc, InterpolationResolutionError):
            msg = str(exc).splitlines()[0]
            raise SettingsError(f"{exc.full_key or exc.key or '?'}: {msg}") from None
        return False


def later_jobs() -> list[list[str]]:
    """In job 0 of a multirun with the in-process launcher, the overrides of every other job of the sweep.
    WHY: `-m stage.conditions.prefetch.k=3,eight` ran job 0's whole stage before job 1 was refused."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return []
    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN or int(hc.job.num or 0) != 0 or hc.sweeper.get("_target_") != \
            "hydra._internal.core_plugins.basic_sweeper.BasicSweeper" or hc.launcher.get("_target_") != \
            "hydra._internal.core_plugins.basic_launcher.BasicLauncher":
        return []  # another launcher's job runs apart from the command line (submitit, SLURM): Hydra composed every job

    import sys

    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from hydra._internal.utils import get_args_parser

    args = get_args_parser().parse_known_args(sys.argv[1:])[0].overrides  # Hydra's own reading of the command
    parsed = OverridesParser.create().parse_overrides(args)
    params = hc.sweeper.get("params") or {}
    parsed += OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in params.items()])
    jobs = [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]
    return [list(j) for j in jobs[1:]]


def compose_job(overrides: list[str]):
    """One job's config as the sweep will compose it (its hydra node kept for its runtime choices)."""
    from hydra import compose

    return compose(config_name="config", overrides=list(overrides), return_hydra_config=True)


# ------------------------------------------------------------------ the typed nodes modules receive


@functools.lru_cache(maxsize=256)
def schema_node(schema):
    """A dataclass's structured config, built once per class in a process, for OmegaConf.merge to start from: merge
    copies its first config and changes none of its inputs, so every caller gets its own result. WHY: OmegaConf
    builds a structured config field by field, and every command types each condition's, endpoint's and
    stage's node several times (32 s of CPU across the test suite). A schema's defaults are therefore read once
    per process: a `default_factory` that reads the environment sees it as it was at first use."""
    from omegaconf import OmegaConf

    return OmegaConf.structured(schema)


def _closed(schema, value: dict, where: str):
    """`value` on the schema (a dataclass) as a structured config: a key the schema does not declare is an
    error naming the nearest one, a value of the wrong type one naming its key (SettingsError, exit 2)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigKeyError, ValidationError

    pre = f"{where}." if where else ""
    try:
        return OmegaConf.merge(schema_node(schema), value)
    except ConfigKeyError as exc:
        key = str(exc.key or exc.full_key).rsplit(".", 1)[-1]
        have = [f.name for f in fields(schema)]
        near = nearest(key, have)
        raise SettingsError(f"{pre}{key}: no such setting" + (f" (did you mean {pre}{near}?)" if near else "")
                            + f"; {where or 'the config'} takes: {', '.join(sorted(have))}") from None
    except ValidationError as exc:
        msg = str(getattr(exc, "msg", exc)).splitlines()[0]
        raise SettingsError(f"{pre}{exc.full_key or exc.key}: {msg}") from None


def _resolved(node) -> dict:
    from omegaconf import DictConfig, OmegaConf

    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node or {})


_SCHEMAS: dict[type, type] = {}


def condition_schema(module: str):
    """The schema of a condition whose module declares `Settings`: its fields and every condition's
    (ConditionSettings), one dataclass whose instances are the module's `Settings` (None: it declares none)."""
    from dataclasses import make_dataclass

    own = own_settings("condition", {"module": module})
    if own is None or issubclass(own, ConditionSettings):
        return own
    if own not in _SCHEMAS:
        _SCHEMAS[own] = make_dataclass(own.__name__, [], bases=(own, ConditionSettings))
    return _SCHEMAS[own]


def condition_node(node, where: str = "condition"):
    """What a condition's build(), tool_texts() and forecast() receive: an instance of its module's
    `Settings` (with ConditionSettings' keys), from its yaml and the overrides, interpolations resolved;
    a key neither declares is an error naming the nearest. A module that declares no `Settings` (a plugin
    written before them) still gets its config node, its common keys type-checked."""
    from omegaconf import OmegaConf

    value = _resolved(node)
    own_settings("condition", value, where)  # no module, or one that does not load: refused naming the key
    schema = condition_schema(str(value.get("module")))
    if schema is None:
        typed("condition", node, where)
        return node
    try:
        return OmegaConf.to_object(_closed(schema, value, where))
    except ValueError as exc:  # a module's own check of its values (Settings.__post_init__), e.g. a choice
        raise SettingsError(f"{where}.{exc}" if str(exc).split(":")[0].isidentifier() else f"{where}: {exc}") from None


def endpoint_node(node, kind: str = "model"):
    """The typed model (EndpointSettings) or judge (JudgeSettings) preset: every key a preset may give, a key
    none declares refused naming the nearest, and `reasoning_effort` the one reasoning setting, read from
    whichever spelling the params use."""
    from omegaconf import OmegaConf

    from harness.endpoints.pricing import check_prices

    value = _resolved(node)
    value["reasoning_effort"] = reasoning_effort(value, sent=SENT[kind])  # raises when two spellings disagree
    out = OmegaConf.to_object(_closed(SCHEMAS[kind], value, kind))
    try:
        check_prices(out.prices, out.offpeak)
    except ValueError as exc:
        raise SettingsError(f"{kind}.{exc}") from None
    return out


@dataclass
class Nodes:
    """The typed nodes of a composed config, built once at the config edge (check) and by each study step."""

    conditions: dict = field(default_factory=dict)  # key -> the condition's Settings instance (or its node)
    model: Optional[EndpointSettings] = None
    judge: Optional[JudgeSettings] = None
    stage: Optional[StageSettings] = None


def condition_nodes(cfg) -> dict:
    """key -> what that condition's module receives (condition_node), for every condition of the stage."""
    stage = cfg.get("stage") or {}
    return {str(k): condition_node(v, f"stage.conditions.{k}") for k, v in (stage.get("conditions") or {}).items()}


def typed_nodes(cfg) -> Nodes:
    return Nodes(condition_nodes(cfg), endpoint_node(cfg.model, "model") if cfg.get("model") is not None else None,
                 endpoint_node(cfg.judge, "judge") if cfg.get("judge") is not None else None,
                 stage_node(cfg) if cfg.get("stage") is not None else None)


def stage_schema(value: dict):
    """A stage's settings: its yaml's keys (a number or flag typed by its value; the yaml and the overrides
    are composed already, so every key present is one the stage gives) and StageSettings' optional fields."""
    from dataclasses import make_dataclass

    have = {f.name for f in fields(StageSettings)}
    bad = [k for k in value if not str(k).isidentifier()]
    if bad:
        raise SettingsError(f"stage: {', '.join(map(str, bad))}: a stage key must be a name")
    own = [(str(k), Optional[_kind(v)] if _kind(v) is not Any else Any, field(default=None))
           for k, v in value.items() if k not in have]
    name = "".join(p.title() for p in str(value.get("name") or "stage").replace("-", "_").split("_"))
    return make_dataclass(f"{name}StageSettings", own, bases=(StageSettings,))


def stage_node(cfg) -> StageSettings:
    """What a stage's planner and driver read (cfg.stage as its typed node): the composed stage, interpolations
    resolved, as an instance of stage_schema; a declared field of the wrong type is refused naming its key.
    The conditions stay their plain nodes here (condition_nodes types each for its module)."""
    value = _resolved(cfg.stage)
    schema = stage_schema(value)
    _closed(schema, value, "stage")  # types checked, e.g. stage.builds=three
    return schema(**value)


# keys an index node carries for the memory space rather than for its backend (harness.memory.space)
SPACE_KEYS = {"name": str, "backend": str, "depth": int, "rrf_k": int, "dense": Any, "lexical": Any}


def _kind(default):
    """The type a constructor's default says (an option without a scalar default takes anything)."""
    return type(default) if isinstance(default, (bool, int, float, str)) else Any


def index_schema(name: str):
    """An index backend's settings: its constructor's keyword parameters (their defaults typing them) and the
    space's keys, as one dataclass. WHY: the backends took `**_ignored`, so a misspelt option was dropped."""
    import inspect
    from dataclasses import make_dataclass

    from harness.memory.backends.base import backend_class

    cls = backend_class(name)
    params = [p for p in inspect.signature(cls.__init__).parameters.values()
              if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    own = [(p.name, _kind(p.default), field(default=None if p.default is p.empty or not isinstance(
        p.default, (bool, int, float, str, type(None))) else p.default)) for p in params]
    taken = {p.name for p in params}
    space = [(k, t if t is Any else Optional[t], field(default=None)) for k, t in SPACE_KEYS.items() if k not in taken]
    return make_dataclass(f"{cls.__name__}Settings", [(n, Optional[t] if t is not Any else t, f) for n, t, f in own]
                          + space)


def index_node(node, where: str = "index") -> dict:
    """What an index backend is built from (make_backend / space_from_config): the node's keys checked against
    its backend's settings (index_schema), a hybrid's `dense` / `lexical` each against its own; a key none
    declares is an error naming the nearest, a number or flag of the wrong type is refused naming its key."""
    value = _resolved(node)
    name = value.get("name") or value.get("backend")
    if not name:
        raise SettingsError(f"{where}: no backend name (name: exact | fts5 | hybrid | redis_qe | ...)")
    _closed(index_schema(str(name)), value, where)
    for side in ("dense", "lexical"):
        if isinstance(value.get(side), dict):
            value[side] = index_node(value[side], f"{where}.{side}")
    return value


@dataclass
class StudyConfigSettings:
    """One configuration of the backend study (bench.backends.cases.Config reads these keys)."""

    id: str = "???"
    backend: str = "???"
    build: dict = field(default_factory=dict)
    query: dict = field(default_factory=dict)
    cases: Optional[list] = None


def check_indexes(cfg) -> None:
    """The stage's index and every configuration of the backend study (its build and query options)."""
    if cfg.get("index") is not None:
        index_node(cfg.index, "index")
    stage = cfg.get("stage") or {}
    for i, c in enumerate(stage.get("configs") or []):
        c = _resolved(c)
        _closed(StudyConfigSettings, c, f"stage.configs[{i}] ({c.get('id')})")  # `buld:` was dropped silently
        index_node({"name": c.get("backend"), **(c.get("build") or {}), **(c.get("query") or {})},
                   f"stage.configs[{i}] ({c.get('id')})")


# ------------------------------------------------------------------ the top of the config


@dataclass
class TopSettings:
    """Every top-level key of conf/config.yaml. WHY: `+concurency=2` ran with the default and `seed=abc` ended in a
    traceback; the nodes typed by their modules (model, judge, judge2, index, stage) are checked there."""

    model: Any = None
    judge: Any = None
    judge2: Any = None
    index: Any = None
    stage: Any = None
    encoder: Any = None
    data: Any = None
    samples: Any = None
    seed: int = 0
    dry_run: bool = False
    concurrency: int = 8
    budget_usd: Optional[float] = None
    retry_failed: bool = False
    memory_first: bool = False
    shard: Optional[str] = None
    runs_dir: str = "runs"
    cache_dir: str = ".cache"
    allow_deviation: list[str] = field(default_factory=list)
    paper_judge: bool = False


@dataclass
class EncoderNode:
    name: str = "???"
    path: Optional[str] = None
    batch_size: int = 32
    device: Any = "cpu"  # cpu, cuda, cuda:N or a list of them


@dataclass
class DataNode:
    kind: str = "???"  # longmemeval | synth
    path: str = "???"
    split: Optional[str] = None
    revision: Optional[str] = None
    size: Optional[str] = None
    seed: Optional[int] = None


# a sample's keys (harness.data.samples) and their types; `from` is no Python name, so not a dataclass
SAMPLE_KEYS = {"per_type": (int,), "limit": (int, type(None)), "from": (str,), "exclude": (list, type(None)),
               "abstention": (bool,)}


def _strings(schema, value: dict, where: str) -> None:
    """A text setting given a number or a flag (`encoder.path=1`): OmegaConf would convert it on a copy, while the
    module reads the config's own value; refused naming the key (quote it to mean the text)."""
    for f in fields(schema):
        if f.default == "???" and value.get(f.name) is None:  # a required key removed (`~encoder.name`) or null
            raise SettingsError(f"{where + '.' if where else ''}{f.name}: required ({where or 'the config'} names it)")
        if f.type in ("str", "Optional[str]", str, Optional[str]) and isinstance(value.get(f.name), (bool, int, float)):
            key = f"{where}.{f.name}" if where else f.name
            raise SettingsError(f"{key}: {value[f.name]!r} is not a text (write {key}='{value[f.name]}' to mean one)")


def _choices(where: str, value, choices) -> None:
    if str(value) not in choices:
        near = nearest(str(value), list(choices))
        raise SettingsError(f"{where}: {value!r} is not one of {', '.join(choices)}"
                            + (f" (did you mean {near}?)" if near else ""))


def check_top(cfg) -> None:
    """The whole composed config against its schema: an unknown top-level key, or one of the encoder, data
    or samples, is refused naming the nearest; a value of the wrong type naming its key (SettingsError, exit 2)."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    def value(v):
        return OmegaConf.to_container(v, resolve=True) if isinstance(v, (DictConfig, ListConfig)) else v

    top = {str(k): None if k in ("model", "judge", "judge2", "index", "stage") else value(cfg.get(k))
           for k in cfg if k != "hydra"}
    scalars = {k: v for k, v in top.items() if k not in ("encoder", "data", "samples")}
    _closed(TopSettings, scalars, "")
    _strings(TopSettings, scalars, "")
    c = scalars.get("concurrency")
    if isinstance(c, int) and not isinstance(c, bool) and c < 1:
        raise SettingsError(f"concurrency: {c} is not a number of agents at once (at least 1)")
    for key, schema in (("encoder", EncoderNode), ("data", DataNode)):
        if isinstance(top.get(key), dict):
            _closed(schema, top[key], key)
            _strings(schema, top[key], key)
    enc = top.get("encoder") or {}
    if enc.get("name") is not None:
        from harness.memory.encoder import SPECS

        _choices("encoder.name", enc["name"], (*SPECS, "hash"))
    for name, spec in (top.get("samples") or {}).items():
        if not isinstance(spec, dict):
            raise SettingsError(f"samples.{name}: {spec!r} is not a mapping (per_type, limit, from, exclude, abstention)")
        for k, v in spec.items():
            if k not in SAMPLE_KEYS:
                raise SettingsError(f"samples.{name}.{k}: no such setting (did you mean samples.{name}."
                                    f"{nearest(str(k), list(SAMPLE_KEYS))}?); a sample takes: {', '.join(SAMPLE_KEYS)}")
            if not isinstance(v, SAMPLE_KEYS[k]) or (isinstance(v, bool) and bool not in SAMPLE_KEYS[k]):
                raise SettingsError(f"samples.{name}.{k}: {v!r} is not of type "
                                    + " or ".join(t.__name__ for t in SAMPLE_KEYS[k]))
    if cfg.get("judge2") is not None:
        endpoint_node(cfg.judge2, "judge")


# keys a value override may not set: the config group's choice decides them
FIXED_BY_CHOICE = {"stage.kind": "a stage's kind is its file's; choose the stage with stage=NAME (conf/stage/)"}


def refuse_unknown_keys(argv: list[str], conf_dir: Path) -> None:
    """Before Hydra runs the command: a value override of a key that does not exist is refused naming the nearest,
    then the whole command must compose (_composes); either failure is a SettingsError (exit 2)."""
    from hydra._internal.utils import get_args_parser

    args = get_args_parser().parse_known_args(argv[1:])[0]
    for ov in args.overrides:
        key = ov.partition("=")[0].lstrip("+~")
        if key in FIXED_BY_CHOICE:
            raise SettingsError(f"{key}: {FIXED_BY_CHOICE[key]}")
    if args.multirun or args.config_dir or args.config_path or args.config_name:
        return _refuse_value_keys(argv, conf_dir)
    try:  # a command that composes whole sets no key that does not exist: one composition, not two
        _composes(args.overrides, conf_dir)
    except SettingsError:
        _refuse_value_keys(argv, conf_dir)  # names the nearest key when a value override's key does not exist
        raise


def _refuse_value_keys(argv: list[str], conf_dir: Path) -> None:
    """Before Hydra composes the command: a value override of a key that does not exist (`concurency=2`,
    `fidelity.preset=null`) is refused naming the nearest key (SettingsError, exit 2). WHY: Hydra's own refusal
    ("Key 'concurency' is not in struct") exits 1 and names nothing. Sweeps and `+`/`~` forms are left to Hydra
    and to check()."""
    from hydra import compose, initialize_config_dir
    from hydra._internal.utils import get_args_parser
    from hydra.errors import HydraException

    args = get_args_parser().parse_known_args(argv[1:])[0]
    if args.multirun or args.config_dir or args.config_path or args.config_name:
        return
    groups = {str(p.relative_to(conf_dir)).replace("/", ".") for p in conf_dir.rglob("*") if p.is_dir()}
    values, chosen = [], []
    for ov in args.overrides:
        key = ov.partition("=")[0]
        if key.lstrip("+~") in FIXED_BY_CHOICE:
            raise SettingsError(f"{key.lstrip('+~')}: {FIXED_BY_CHOICE[key.lstrip('+~')]}")
        if ov.startswith(("+", "~")) or "=" not in ov or key.startswith("hydra.") or "@" in key or "," in ov:
            chosen.append(ov)
        elif key in groups:
            chosen.append(ov)
        else:
            values.append(key)
    if not values:
        return
    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
            cfg = compose(config_name="config", overrides=chosen)
    except (HydraException, ValueError):
        return  # what is wrong with the groups: _composes names it
    for key in values:
        node, where = cfg, []
        for part in key.split("."):
            keys = list(node.keys()) if hasattr(node, "keys") else None
            if keys is None:
                break
            if part not in keys:
                inside = [f"{k}.{sub}" for k in keys if str(k) in OPEN and hasattr(node.get(k), "keys")
                          for sub in node.get(k)]  # `model.temprature` for model.params.temperature
                near = nearest(part, [str(k) for k in keys] + inside)
                pre = ".".join(where) + "." if where else ""
                raise SettingsError(f"{key}: no such setting" + (f" (did you mean {pre}{near}?)" if near else "")
                                    + (f"; add one with +{key}=..." if set(where) & OPEN else ""))
            node, where = node.get(part), [*where, part]


def _composes(overrides: list[str], conf_dir: Path) -> None:
    """The whole command composes, or it is refused naming the key (SettingsError, exit 2). WHY: Hydra's own
    errors (`~fidelity.preset`, `stage.groups.0.repeats=1`, `encoder=hash`) exited 1 with its message only."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
            compose(config_name="config", overrides=list(overrides), return_hydra_config=True)
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        msg = " ".join(str(exc).split())
        keys = [ov.lstrip("+~").partition("=")[0] for ov in overrides]
        hits = sorted((k for k in keys if k and k in msg), key=len, reverse=True)
        key = hits[0] if hits else (keys[-1] if keys else "")
        if isinstance(exc, ValueError) and not hits:  # `preset=null`: a group given no choice
            key = next((ov.partition("=")[0] for ov in overrides if ov.endswith("=null")), key)
        raise SettingsError(f"{key}: {msg}" + _near_hint(key, conf_dir)) from None


def _near_hint(key: str, conf_dir: Path) -> str:
    """' (did you mean X?)' for a dotted key's first part that the composed default config lacks."""
    from hydra import compose, initialize_config_dir

    group = conf_dir / key.replace(".", "/")
    if key and group.is_dir():  # a config group: its choices are its files
        return f" ({key} takes: {', '.join(sorted(p.stem for p in group.glob('*.yaml')))})"
    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
            cfg = compose(config_name="config")
    except Exception:  # noqa: BLE001 -- a hint only
        return ""
    groups = sorted({str(p.relative_to(conf_dir)).replace("/", ".") for p in conf_dir.rglob("*") if p.is_dir()})
    node, where = cfg, []
    for part in key.split("."):
        keys = [str(k) for k in node.keys()] if hasattr(node, "keys") else None
        if keys is None:
            return ""
        if part not in keys:
            near = nearest(part, keys + ([g for g in groups if "." not in g] if not where else []))
            return f" (did you mean {'.'.join([*where, near])}?)" if near else ""
        node, where = node.get(part), [*where, part]
    return f" (the key is {key}; see conf/ for what it takes)"


# ------------------------------------------------------------------ what of the config may be published


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")  # a choice's, a tool's, a parameter's name
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,63}")  # the NAME of an environment variable (api_key_env), never its value
_hex = re.compile(r"[0-9a-f]{64}").fullmatch  # a sha256


# the string values a request's reasoning effort and tool choice take (OpenAI, DeepSeek, vLLM, Ollama's think
# level): any other string under those keys is withheld like a string under no declared key
EFFORT_CHOICES = frozenset({"none", "minimal", "low", "medium", "high", "xhigh", "max"})
TOOL_CHOICES = frozenset({"auto", "none", "required", "any"})


def _ident(value: str) -> bool:
    from harness.records.privacy import looks_like_place

    return bool(_IDENTIFIER.fullmatch(value)) and not looks_like_place(value)


def _choices_of(schema) -> dict[str, Any]:
    """A settings dataclass's keys that carry names: its fields typed Literal[...] (their choices) and its own
    `NAMES` (key -> the choices), e.g. memory_tool.Settings' scoring, scope and guidance."""
    import typing

    out: dict[str, Any] = {}
    try:
        hints = typing.get_type_hints(schema)
    except Exception:  # noqa: BLE001 - a plugin's annotation this process cannot resolve: no Literal read
        hints = {}
    for name, t in hints.items():
        args = [a for a in typing.get_args(t) if a is not type(None)] if typing.get_origin(t) is not typing.Literal \
            else [t]
        for a in args:
            if typing.get_origin(a) is typing.Literal:
                out[name] = frozenset(str(x) for x in typing.get_args(a))
    for cls in reversed(getattr(schema, "__mro__", ())):
        out.update({k: frozenset(map(str, v)) for k, v in (vars(cls).get("NAMES") or {}).items()})
    return out


def publish_names(kind: str, node: Any, top: dict, known: dict | None = None) -> dict:
    """The publish allowlist of the configuration (harness.records.privacy.Publisher reads it): for a node of `kind`
    (the composed config's root `top`, a condition, an endpoint, an index...), which of its keys carry names that
    may leave the machine, each with its check: a closed set where the types give one (a registered condition
    module, index backend, endpoint provider, encoder; a Settings field's Literal or NAMES choices; a sample or
    condition the same config defines), else an open name's shape (a model id, a preset's name), or a node of
    another kind. A key not named here carries no name: its strings are withheld, whatever they look like, and so
    is every string of a plugin's condition that declares no Settings (its module's name aside).

    WHY declared with the types: the shape of a value never told a host (sqlhost7.zqcorp.example), an address
    (fe80::1) or a password (hunter2) from a name; the key it sits under, typed here, does."""
    from harness.records.privacy import CLOSED, ENDPOINT, FILE, Node, open_name, tree_tool_names

    known = {} if known is None else known  # the registries' names, read once per publish (publish_names_here)
    backends = _once(known, "backends", _backends)
    node = node if isinstance(node, dict) else {}
    top = top if isinstance(top, dict) else {}
    stage = top.get("stage") if isinstance(top.get("stage"), dict) else {}
    samples = frozenset(map(str, top.get("samples") or {})) if isinstance(top.get("samples"), dict) else frozenset()
    conds = frozenset(map(str, stage.get("conditions") or {})) if isinstance(stage.get("conditions"), dict) else None
    # a condition's name: one the same config defines, or a condition preset of this tree (conf/condition/); a
    # record's condition_config has no config beside it: an open name
    condition_name = conds | _once(known, "presets", _condition_presets) if conds is not None else open_name
    if kind == "top":
        return {"model": Node("endpoint"), "judge": Node("endpoint"), "judge2": Node("endpoint"),
                "index": Node("index", backends), "encoder": Node("encoder"), "data": Node("data"),
                "stage": Node("stage"), "samples": Node("samples"), "fidelity": Node("fidelity"),
                "runtime": Node("runtime"), "allow_deviation": _ident,
                "shard": re.compile(r"\d{1,6}/\d{1,6}").fullmatch}
    if kind in ("endpoint", "judge"):
        from harness.endpoints.settings import JudgeSettings

        return {**_choices_of(JudgeSettings), "name": open_name, "model": open_name,
                "provider": _once(known, "providers", _providers),
                "base_url": ENDPOINT, "api_key_env": _ENV_NAME.fullmatch, "reasoning_effort": EFFORT_CHOICES,
                "first_tool_choice": TOOL_CHOICES, "tokenizer": FILE, "prompts": FILE, "kinds": _ident,
                "params": Node("params"), "judge_params": Node("params"), "accepts": Node("params"),
                "prices": Node("prices"), "offpeak": Node("offpeak"), "speed": Node("numbers"),
                "judge": Node("endpoint")}
    if kind == "params":  # what a request sends: open keys, so only the request parameters named here go out
        return {CLOSED: None, **{k: None for k in REQUEST_PARAMS},
                "reasoning_effort": EFFORT_CHOICES, "effort": EFFORT_CHOICES, "think": EFFORT_CHOICES,
                "tool_choice": TOOL_CHOICES, "tools": tree_tool_names(), "reasoning": Node("params"),
                "extra_body": Node("params"), "model": open_name}
    if kind == "prices":
        return {"currency": re.compile(r"[A-Z]{3}").fullmatch}
    if kind == "offpeak":
        return {k: re.compile(r"\d{1,2}:\d{2}").fullmatch for k in ("start_utc", "end_utc")}
    if kind == "index":
        name = node.get("name") or node.get("backend")
        out: dict[str, Any] = {"name": backends, "backend": backends,
                               "dense": Node("index", backends), "lexical": Node("index", backends)}
        if isinstance(name, str) and name in backends:
            out.update({k: _ident for k in _index_choices(name)})
            out.update({k: Node("index", backends) for k in ("dense", "lexical")})
        return out
    if kind == "encoder":
        from harness.memory.encoder import SPECS

        return {"name": frozenset([*SPECS, "hash"]), "path": FILE,
                "device": re.compile(r"(?:cpu|mps|cuda(?::\d{1,2})?)").fullmatch}
    if kind == "data":
        from harness.data.hub import FILES

        return {"kind": frozenset({"longmemeval", "synth"}), "size": _ident, "split": frozenset(FILES),
                "revision": _ident,
                "path": FILE, "sha256": _hex}
    if kind == "file":  # a field that is one file (a record's data_path)
        return {"": FILE}
    if kind in ("model_id", "preset_name"):
        return {"": open_name}
    if kind == "provider":
        return {"": _once(known, "providers", _providers)}
    if kind == "endpoint_url":
        return {"": ENDPOINT}
    if kind == "stage":
        from conditions.memory_tool import GUIDANCE

        return {"name": open_name, "label": open_name, "kind": _ident, "tool_guidance": frozenset(GUIDANCE),
                "purpose": PURPOSES, "judge_kinds": _ident, "only": _ident, "sample": samples or open_name,
                "conditions": Node("conditions"), "groups": Node("group"), "configs": Node("study_config")}
    if kind == "conditions":
        return {str(k): Node("condition") for k in node}
    if kind == "condition":
        return condition_names(node, condition_name, known)
    if kind == "group":
        return {"sample": samples or open_name, "variant": frozenset({"", "public", "private"}),
                "conditions": condition_name, "exclude": condition_name}
    if kind == "samples":
        return {str(k): Node("sample") for k in node}
    if kind == "sample":
        return {"from": samples or open_name, "exclude": samples or open_name}
    if kind == "fidelity":
        return {"preset": _ident}
    if kind == "runtime":
        from harness.runtime import SHAPES

        return {"session_search": frozenset(SHAPES)}
    if kind == "study_config":
        return {"id": _ident, "backend": backends, "cases": _ident, "build": Node("index"), "query": Node("index")}
    if kind == "judge_prompts":  # judge.prompts.PromptSet.describe()
        return {"source": FILE, "source_sha256": _hex, "templates": Node("hashes"), "by_type": Node("names")}
    if kind == "hashes":
        return {str(k): _hex for k in node}
    if kind == "names":
        return {str(k): _ident for k in node}
    if kind == "adapter":  # what the local model's tool adapter did (harness.endpoints.tool_adapter)
        return {"name": _ident, "version": _ident, "constraint": _ident, "salvaged": _ident, "mode": _ident}
    return {}


def condition_names(node: dict, condition_name: Any, known: dict | None = None) -> dict:
    """A condition's keys that carry names: its module (a registered one), every condition's comparisons (the
    stage's condition names), and its module's own Settings choices (Literal fields, NAMES). A plugin's
    condition that declares no Settings publishes its module's name and its numbers and flags, nothing else."""
    import conditions

    from harness.records.privacy import CLOSED

    known = {} if known is None else known
    out: dict[str, Any] = {"module": _once(known, "modules", lambda: frozenset(conditions.CONDITIONS.names())),
                           "compare_with": condition_name,
                           "hide_in": condition_name, "roles": _ident}
    module = node.get("module") if isinstance(node, dict) else None
    if isinstance(module, str) and module in out["module"]:
        try:
            own = _once(known, f"settings:{module}", lambda: getattr(conditions.load(module), "Settings", None))
        except Exception:  # noqa: BLE001 - a module that does not load here declares nothing
            own = None
        if own is not None:
            if own not in _CHOICES:
                _CHOICES[own] = _choices_of(own)
            out.update(_CHOICES[own])
            # a typed condition is closed: a key neither its Settings nor every condition's declare (one a run
            # would have refused, written into the file later) is withheld, key and value
            schema = _once(known, f"schema:{module}", lambda: condition_schema(module))
            out.update({CLOSED: None, **{f.name: None for f in fields(schema) if f.name not in out}})
    return out


# the request parameters of the OpenAI-compatible APIs and local servers (vLLM, llama.cpp, Ollama) a params node
# may publish (numbers and flags; their strings are withheld): any other key of an open params node is withheld
REQUEST_PARAMS = frozenset("""temperature top_p top_k min_p max_tokens max_completion_tokens max_output_tokens seed n
presence_penalty frequency_penalty repetition_penalty repeat_penalty stop logprobs top_logprobs parallel_tool_calls
stream response_format num_ctx num_predict keep_alive mirostat typical_p length_penalty chat_template_kwargs
enable_thinking budget_tokens thinking include_reasoning verbosity service_tier store cache_prompt summary
skip_special_tokens spaces_between_special_tokens ignore_eos min_tokens use_beam_search best_of""".split())


def publish_names_here():
    """publish_names with this process's registered names (conditions, backends, providers, presets) read once:
    what a publish passes to harness.records.privacy.Publisher (it reads thousands of nodes)."""
    known: dict = {}
    return lambda kind, node, top: publish_names(kind, node, top, known)


def _once(known: dict, key: str, make):
    if key not in known:
        known[key] = make()
    return known[key]


_CHOICES: dict[type, dict] = {}  # a Settings class -> its declared choices (read once per process)
_INDEX_CHOICES: dict[type, frozenset] = {}


def _index_choices(name: str) -> frozenset:
    """An index backend's keys that its constructor types as a named choice (a str default), hybrid_policy."""
    from harness.memory.backends.base import backend_class

    try:
        cls = backend_class(name)
        if cls not in _INDEX_CHOICES:
            _INDEX_CHOICES[cls] = frozenset(f.name for f in fields(index_schema(name))
                                            if isinstance(f.default, str) or f.name == "hybrid_policy")
        return _INDEX_CHOICES[cls]
    except Exception:  # noqa: BLE001 - a backend that does not load here: its name alone
        return frozenset()


def _condition_presets() -> frozenset:
    from harness.records.privacy import CONF

    return frozenset(p.stem for p in (CONF / "condition").glob("*.yaml"))


def _backends() -> frozenset:
    from harness.memory.backends.base import BACKENDS

    return frozenset(BACKENDS.names())


def _providers() -> frozenset:
    from harness.endpoints.registry import PROVIDERS

    return frozenset(PROVIDERS.names())

