"""Exposure replay (Section 5.3, Appendix C): every logged memory-tool call, issued again.

For each run the memory tool logged every retrieval: `search` (query, k, scoring and
the view with its date filters, plus the returned [uid, owner] pairs) and `read`
(session, round, window and the view). Prefetch logs its pre-loop search the same
way, and ask-agent runs carry the asked agents' calls (each log names its agent and
view). The replay rebuilds the memory space from the stage's saved config.yaml and
its data file, loads the units of every organisation the logs touch, re-issues each
call against the same view and checks that it returns what the run saw (same units,
same order). The audit then counts the returned units by owner; a private unit of
another agent under a `shared` or `own` view would break Proposition 1.

Fan-out runs search the runtime's stores, not the memory space; they log no memory
call and are not replayed (as in the paper).

The space is rebuilt under its own index name (`<name>_replay`) so that a replay never
drops or overwrites the index of a stage that is running.
"""

from __future__ import annotations

import copy
import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterable

from harness.data.org import VISIBILITY
from harness.data.longmemeval import sha256_file

MEMORY_KINDS = ("search", "read")


class ReplayUnavailable(RuntimeError):
    """The space cannot be rebuilt (data file missing or changed, services down, ...)."""


# ------------------------------------------------------------------------------ logs


def memory_logs(record: dict) -> list[dict]:
    """Every logged memory call of a run in order: prefetch first, then tool calls (nested ones included)."""
    out: list[dict] = []

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            if x.get("kind") in MEMORY_KINDS and isinstance(x.get("view"), dict) and "units" in x:
                out.append(x)
                return
            for k in sorted(x):
                walk(x[k])
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(record.get("prefetch") or [])
    for t in record.get("tools") or []:
        walk(t.get("log"))
    return out


def _module(record: dict):
    import conditions

    try:
        return conditions.load(str(record.get("module") or record.get("condition")))
    except (ImportError, TypeError):  # a folder written by a condition this tree no longer has
        return None


def _any_replay(kind: str):
    import conditions

    return next((m.REPLAY[kind] for m in conditions.modules() if kind in (getattr(m, "REPLAY", None) or {})), None)


def not_replayed(record: dict) -> str | None:
    """Why a run's memory calls are not replayed (its condition's NOT_REPLAYED), or None."""
    return getattr(_module(record), "NOT_REPLAYED", None)


def visibility_of(owner: str, org_run: bool) -> str:
    """Owner -> visibility as the stage defined it (LongMemEval: the one agent's own, private, units)."""
    return VISIBILITY.get(owner, "private") if org_run else "private"


# ------------------------------------------------------------------------------ results


@dataclass
class CallReplay:
    folder: str
    run_id: str
    condition: str
    variant: str
    index: int  # position among the run's memory calls
    kind: str
    agent: str
    scope: str
    query: str
    logged: list[list[str]]  # [uid, owner] as the run saw them
    replayed: list[list[str]] | None  # None when not replayed
    visibility: dict[str, str] = field(default_factory=dict)  # uid -> visibility (replayed units)
    error: str | None = None

    @property
    def match(self) -> bool | None:
        return None if self.replayed is None else self.replayed == self.logged

    def private_units(self, which: str = "replayed") -> int:
        """Units owned by a private agent other than the one whose view this is."""
        units = self.replayed if which == "replayed" else self.logged
        if units is None:
            return 0
        n = 0
        for uid, owner in units:
            vis = self.visibility.get(uid) or visibility_of(owner, bool(self.variant))
            if vis == "private" and owner != self.agent:
                n += 1
        return n


@dataclass
class FolderReplay:
    folder: str
    status: str  # replayed | not replayed: <why>
    calls: list[CallReplay] = field(default_factory=list)
    runs: dict[str, dict] = field(default_factory=dict)  # run_id -> {condition, variant, not_replayed, n_calls}


# ------------------------------------------------------------------------------ space


def replay_index_config(index_cfg: dict) -> dict:
    """The stage's index config under replay-only names, so the stage's own index is never touched.

    Each backend names the config keys that isolate its private index (`isolation_keys`); a part of a
    composite index (a nested config with a `name`, e.g. hybrid's `dense`) is renamed the same way."""
    from harness.memory.backends.base import backend_class

    cfg = copy.deepcopy(index_cfg)

    def rename(d: dict) -> None:
        try:
            keys = backend_class(str(d.get("name"))).isolation_keys
        except KeyError:
            raise ReplayUnavailable(f"the stage's index backend {d.get('name')!r} is not registered here") from None
        for k in keys:
            if isinstance(d.get(k), str) and d[k]:
                d[k] = f"{d[k]}_replay"
        for v in d.values():
            if isinstance(v, dict) and v.get("name"):
                rename(v)

    rename(cfg)
    return cfg


def exact_index_config(index_cfg: dict) -> dict:
    """The stage's index with its dense part replaced by exact search (the ground truth), same dimensions;
    a lexical index is already exact."""
    from harness.memory.backends.base import backend_class

    cfg = copy.deepcopy(index_cfg)
    cls = backend_class(str(cfg.get("name")))
    if cls.kind == "lexical":
        return cfg
    if cls.kind == "hybrid":
        dense = cfg.get("dense") or {}
        cfg["dense"] = {"name": "exact", "dim": int(dense.get("dim") or cfg.get("dim") or 384)}
        return cfg
    return {"name": "exact", "dim": int(cfg.get("dim") or 384),
            **{k: cfg[k] for k in ("depth", "rrf_k") if k in cfg}}


RECEIVED = ".received"  # written by analysis.publish.rebuild into every stage folder it rebuilds from a dataset
REPO = Path(__file__).resolve().parents[2]
LOCAL_CACHE = ".cache"  # conf/config.yaml's cache_dir: where this machine keeps embeddings


def _record_index(node: Any, where: str = "index") -> dict:
    """What the replay takes of a stage's index settings: the backend's name and the numbers, flags and named
    choices that make its results (dim, m, ef_runtime, iterative_scan...), never a place (a DSN, a URL, a table or
    index name, a path): those are this machine's defaults (harness.services), whoever wrote the config."""
    from dataclasses import fields

    from harness.memory.backends.base import backend_class
    from harness.records.privacy import _PLACE_KEY, is_name
    from harness.run.settings import index_schema

    if not isinstance(node, dict):
        raise ReplayUnavailable(f"the stage's {where} settings are not a mapping")
    name = node.get("name") or node.get("backend")
    if not isinstance(name, str) or not is_name(name):
        raise ReplayUnavailable(f"the stage's {where} names no backend")
    try:
        backend_class(name)
        schema = {f.name: f.default for f in fields(index_schema(name))}
    except Exception:
        raise ReplayUnavailable(f"the stage's index backend {name!r} is not registered here") from None
    out: dict[str, Any] = {"name": name}
    for key, value in node.items():
        if key in ("name", "backend") or key not in schema or _PLACE_KEY.match(str(key)):
            continue
        if key in ("dense", "lexical"):
            if isinstance(value, dict):
                out[key] = _record_index(value, f"{where}.{key}")
            elif isinstance(value, str) and is_name(value):
                _record_index({"name": value}, f"{where}.{key}")  # a registered backend's name
                out[key] = value
        elif isinstance(value, (bool, int, float)):
            out[key] = value
        elif isinstance(value, str) and "${" not in value and is_name(value) and (
                isinstance(schema[key], str) or key == "hybrid_policy"):
            out[key] = value  # a named choice among the backend's own (iterative_scan, quant, hybrid_policy)
    return out


def _record_encoder(node: Any) -> dict:
    """The stage's encoder by name, its settings this tree's own (conf/encoder/<name>.yaml): its path and device are
    this machine's decisions."""
    import yaml

    from harness.memory.encoder import SPECS
    from harness.records.privacy import is_name, local_preset

    name = node.get("name") if isinstance(node, dict) else None
    if not isinstance(name, str) or not is_name(name) or (name not in SPECS and name != "hash"):
        raise ReplayUnavailable(f"the stage's encoder {name!r} is not one this tree knows")
    p = local_preset("encoder", name)
    return (yaml.safe_load(p.read_text(encoding="utf-8")) or {}) if p is not None else {"name": name}


def replay_config(folder_path: Path) -> dict:
    """The configuration the replay builds its space from. The stage's config.yaml is read as the record of what
    was run, parsed without interpolation (a `${oc.env:...}` in it is text, never resolved): the index backend and
    its settings, the encoder's name. Every place (cache folder, services' hosts and ports, DSNs, paths) is this
    machine's default: a received dataset is data, never configuration."""
    import yaml

    cfg_path = folder_path / "config.yaml"
    if not cfg_path.exists():
        raise ReplayUnavailable(f"{cfg_path} is missing")
    try:
        raw = yaml.safe_load(cfg_path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ReplayUnavailable(f"{cfg_path} is not YAML ({type(exc).__name__})") from None
    if not isinstance(raw, dict):
        raise ReplayUnavailable(f"{cfg_path} is not a mapping")
    return {"cache_dir": LOCAL_CACHE, "index": _record_index(raw.get("index")),
            "encoder": _record_encoder(raw.get("encoder") or {"name": "minilm"})}


def _open_environment(folder_path: Path, stage_info: dict, records: list[dict], index: dict | None = None):
    from omegaconf import OmegaConf

    from harness.run.context import Environment
    from harness.run.plan import RunSpec

    stage_index = replay_config(folder_path)
    data = stage_info.get("data") or {}
    name = str(data.get("path") or "").replace("\\", "/").rsplit("/", 1)[-1]
    beside = folder_path / "data" / name if name and name not in (".", "..") else None
    if (folder_path / RECEIVED).exists():  # rebuilt from a dataset: only the data file its user put beside the card
        data_path = beside
    else:
        data_path = Path(str(data.get("path") or ""))
        if not data_path.is_file() and beside is not None and beside.is_file():
            data_path = beside
    if data_path is None or not data_path.is_file():
        raise ReplayUnavailable(f"the stage's data file {name or data_path} is not here")
    want = data.get("sha256")
    if want and sha256_file(data_path) != want:
        raise ReplayUnavailable(f"the data file {data_path} changed since the stage ran (sha256 differs)")
    # OmegaConf.create on values already free of interpolation: a "${...}" left in a name was refused above
    cfg = OmegaConf.create({"cache_dir": stage_index["cache_dir"], "encoder": stage_index["encoder"]})
    idx = stage_index["index"]
    cfg.index = OmegaConf.create(replay_index_config(index(idx) if index else idx))
    specs = sorted({RunSpec(r["condition"], str(r["qid"]), r.get("variant") or "", int(r.get("repeat") or 0))
                    for r in records})
    plan = SimpleNamespace(runs=specs, data={"path": str(data_path), "sha256": want}, stage=stage_info.get("stage"))
    return Environment(cfg, plan)


def _spec(record: dict):
    from harness.run.plan import RunSpec

    return RunSpec(record["condition"], str(record["qid"]), record.get("variant") or "", int(record.get("repeat") or 0))


def _view(v: dict):
    from harness.memory.views import View

    return View(v["org"], v.get("agent"), v.get("scope", "shared"), v.get("since"), v.get("until"))


def _replay_call(env, record: dict, log: dict) -> tuple[list[list[str]], dict[str, str]]:
    from harness.run.context import RunContext

    spec = _spec(record)
    space = env.space_for(spec)
    view = _view(log["view"])
    if log["kind"] == "search":  # the memory space's own retrieval
        results = space.search(str(log["query"]), view, k=int(log["k"]), scoring=str(log["scoring"]))
        return ([[r.unit.uid, r.unit.owner] for r in results], {r.unit.uid: r.unit.visibility for r in results})
    # any other kind is re-executed the way the run's condition says (its REPLAY, e.g. memory_read)
    mod = _module(record)  # a module this tree cannot load: any tree condition that replays the kind
    replay = (getattr(mod, "REPLAY", None) or {}).get(log["kind"]) if mod else _any_replay(log["kind"])
    if replay is None:
        raise ReplayUnavailable(f"condition module {record.get('module')!r} has no replay for {log['kind']!r} calls")
    ctx = RunContext(spec, env)
    units = replay(ctx, view, log)
    return units, {uid: visibility_of(owner, ctx.is_org) for uid, owner in units}


# ------------------------------------------------------------------------------ entry


def replay_folder(folder_name: str, folder_path: Path, stage_info: dict, records: Iterable[dict],
                  enabled: bool = True, progress: bool = True) -> FolderReplay:
    """Replay every memory call of the folder's runs; never raises for a missing service or file."""
    records = sorted(records, key=lambda r: r["run_id"])
    out = FolderReplay(folder_name, "replayed")
    todo: list[tuple[dict, int, dict]] = []
    for r in records:
        why = not_replayed(r)
        logs = [] if why else memory_logs(r)
        out.runs[r["run_id"]] = {"condition": r["condition"], "variant": r.get("variant") or "",
                                 "not_replayed": why, "n_calls": len(logs)}
        for i, log in enumerate(logs):
            todo.append((r, i, log))
            v = log.get("view") or {}
            out.calls.append(CallReplay(folder_name, r["run_id"], r["condition"], r.get("variant") or "", i,
                                        str(log["kind"]), str(log.get("agent") or v.get("agent") or ""),
                                        str(v.get("scope") or ""),
                                        str(log.get("query") if log["kind"] == "search" else
                                            f"read {log.get('session')}#{log.get('round')}±{log.get('window')}"),
                                        [list(u) for u in log.get("units") or []], None))
    if not todo:
        out.status = "not replayed: no memory-tool calls"
        return out
    if not enabled:
        out.status = "not replayed: replay switched off"
        return out
    env = None
    try:
        env = _open_environment(folder_path, stage_info, [r for r, _, _ in todo])
        # load organisations in a fixed order (a deterministic index)
        for org_spec in sorted({_spec(r).org: _spec(r) for r, _, _ in todo}.items()):
            env.space_for(org_spec[1])
        for n, (call, (r, i, log)) in enumerate(zip(out.calls, todo)):
            try:
                call.replayed, call.visibility = _replay_call(env, r, log)
            except Exception as exc:  # one bad log must not hide the others; it is reported
                call.error = f"{type(exc).__name__}: {exc}"
            if progress and n and n % 500 == 0:
                print(f"  replay {folder_name}: {n}/{len(todo)} calls", file=sys.stderr)
    except ReplayUnavailable as exc:
        out.status = f"not replayed: {exc}"
    except Exception as exc:  # services down, backend errors: reported, never fatal
        out.status = f"not replayed: {type(exc).__name__}: {exc}"
    finally:
        if env is not None:
            try:
                env.close()
            except Exception:
                pass
    if out.status != "replayed":
        for c in out.calls:
            c.replayed, c.visibility = None, {}
    return out


def recall_folder(folder_name: str, folder_path: Path, stage_info: dict, records: Iterable[dict],
                  enabled: bool = True, progress: bool = True) -> tuple[str, list[dict]]:
    """Each logged search of the folder's runs against exact search under the same view, query, k and
    scoring (the stage's space rebuilt with exact dense search): (status, one row per search call with
    the units the run got, the exact top-k and how many of those it got). Never raises for a missing
    service or file; the status says why nothing was compared."""
    records = sorted(records, key=lambda r: r["run_id"])
    todo = [(r, i, log) for r in records if not not_replayed(r)
            for i, log in enumerate(memory_logs(r)) if log.get("kind") == "search"]
    if not todo:
        return "not compared: no memory searches", []
    if not enabled:
        return "not compared: replay switched off", []
    index = _stage_index(folder_path)
    if index is None:
        return "not compared: the stage's config.yaml names no index", []
    if _is_exact(index):  # the stage searched exactly: each search is its own ground truth
        return "compared: the stage's index is exact (recall 1 by construction)", [
            {"folder": folder_name, "run_id": r["run_id"], "condition": r["condition"],
             "variant": r.get("variant") or "", "call": i, "k": int(log["k"]), "scoring": str(log["scoring"]),
             "returned": len(log.get("units") or []), "exact": len(log.get("units") or []),
             "found": len(log.get("units") or []), "error": ""} for r, i, log in todo]
    rows: list[dict] = []
    env = None
    try:
        env = _open_environment(folder_path, stage_info, [r for r, _, _ in todo], index=exact_index_config)
        for org_spec in sorted({_spec(r).org: _spec(r) for r, _, _ in todo}.items()):
            env.space_for(org_spec[1])
        for n, (r, i, log) in enumerate(todo):
            got = [u[0] for u in log.get("units") or []]
            row = {"folder": folder_name, "run_id": r["run_id"], "condition": r["condition"],
                   "variant": r.get("variant") or "", "call": i, "k": int(log["k"]), "scoring": str(log["scoring"]),
                   "returned": len(got), "exact": None, "found": None, "error": ""}
            try:
                exact = env.space_for(_spec(r)).search(str(log["query"]), _view(log["view"]), k=int(log["k"]),
                                                       scoring=str(log["scoring"]))
                ids = [x.unit.uid for x in exact]
                row.update(exact=len(ids), found=len(set(ids) & set(got)))
            except Exception as exc:  # one bad log must not hide the others; it is reported
                row["error"] = f"{type(exc).__name__}: {exc}"
            rows.append(row)
            if progress and n and n % 500 == 0:
                print(f"  exact search {folder_name}: {n}/{len(todo)} calls", file=sys.stderr)
    except ReplayUnavailable as exc:
        return f"not compared: {exc}", []
    except Exception as exc:  # services down, backend errors: reported, never fatal
        return f"not compared: {type(exc).__name__}: {exc}", []
    finally:
        if env is not None:
            try:
                env.close()
            except Exception:
                pass
    return "compared", rows


def _stage_index(folder_path: Path) -> dict | None:
    import yaml

    p = folder_path / "config.yaml"
    cfg = (yaml.safe_load(p.read_text(encoding="utf-8")) or {}) if p.exists() else {}
    return cfg.get("index") if isinstance(cfg.get("index"), dict) else None


def _is_exact(index: dict) -> bool:
    """An index whose backend declares itself exact, alone or as a composite's dense part (a lexical-only
    index is compared: cheap)."""
    from harness.memory.backends.base import backend_class

    cls = backend_class(str(index.get("name")))
    if cls.exact:
        return True
    dense = index.get("dense") if "dense" in getattr(cls, "parts", ()) else None
    return isinstance(dense, dict) and backend_class(str(dense.get("name"))).exact


def owner_counts(units: Iterable[list[str]]) -> Counter:
    return Counter(owner for _, owner in units)


def mismatch_rows(rep: FolderReplay) -> list[dict]:
    rows = []
    for c in rep.calls:
        if c.replayed is not None and not c.match or c.error:
            rows.append({"folder": c.folder, "run_id": c.run_id, "call": c.index, "kind": c.kind, "agent": c.agent,
                         "scope": c.scope, "query": c.query, "error": c.error or "",
                         "logged": json.dumps(c.logged), "replayed": json.dumps(c.replayed)})
    return rows
