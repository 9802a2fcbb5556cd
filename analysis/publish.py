"""A stage folder as a dataset in the Hugging Face Hub's layout, and back.

Publishing (`make publish RUNS=... OUT=DIR`, harness/cli/publish.py) writes, with the
`datasets` library, one parquet table per kind of line the stage holds, each a config of the
dataset, typed by the record schema (harness.records.schema):

    runs         one row per run record, without the three parts below
    model_calls  one row per model call of a run (RunRecord.calls)
    tool_calls   one row per tool call, with its memory log (RunRecord.tools)
    transcripts  one row per run's transcript (its messages as JSON)
    judgements   one row per judgement line (judgements/<judge>.jsonl)
    ledger       one row per metering-ledger line (ledger.jsonl and each shard's)
    attempts     one row per attempt line (the driver's and the judge's)
    prompts      one row per system prompt (prompts/<sha256>.txt)
    files        one row per file of the folder: path, sha256, which table rebuilds it
                 (or its text, for stage.json, config.yaml, the judge's info file...)

and a dataset card (README.md) whose YAML header names the configs and holds, under
`memspace:`, the study kind, each table's sha256, the fidelity manifest, the pre-registration
file and hash, the code revision, the data hashes, prices and totals.

WHY tables from which every file is rebuilt: the analysis and the Inspect export read stage
folders, and a re-analysis must be the same bytes. `rebuild` writes the folder back from the
tables, file by file, and checks each file's sha256 against the `files` table; the tables
are checked against the card first. Nothing else reads a published dataset: analysis.load's
find_folders rebuilds it and analyses the rebuilt folder. A JSON object is one row: its
fields in typed columns (nested parts as JSON text), `_keys` its keys in the order written,
`_extra` (JSON) what does not fit a column, so absent and null, 1 and 1.0 stay apart.

Private by default (harness.records.privacy): endpoint URLs, keys and local paths are
replaced in every file; transcripts of LongMemEval-Org private runs (and the system prompts
only they use) are left out unless `private_transcripts=True`; `plan` lists what would leave
the machine before anything is written, and the card says what was left out.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import shutil
import tempfile
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.records import privacy
from harness.records.ledger import parse_lines
from harness.records.schema import (
    Attempt,
    Judgement,
    LedgerEvent,
    ModelCall,
    RunRecord,
    ToolCall,
    Transcript,
    read_json,
)

CARD = "README.md"
CARD_KEY = "memspace"  # the card's YAML block this harness writes and reads
FORMAT_VERSION = 1
LICENSE = "mit"  # the harness's licence (pyproject.toml), given to the tables it writes
PUBLISHABLE = ("agents",)  # study kinds whose folders this module knows how to write as tables
NESTED = {"calls": "model_calls", "tools": "tool_calls", "transcript": "transcripts"}


class PublishError(RuntimeError):
    """Bad input: not a stage folder, a study kind this cannot publish, a tampered dataset."""

    exit_code = 2  # harness.failures.BAD_INPUT


# ------------------------------------------------------------------------------ tables


@dataclass(frozen=True)
class Table:
    name: str
    about: str
    model: type | None  # the schema model of one row's object; None: a table with its own columns
    keys: tuple[str, ...]  # the columns that place a row (folder, file, line / run_id, index)
    skip: tuple[str, ...] = ()  # fields of the model kept in other tables


TABLES = [
    Table("runs", "one row per run record (records/<run_id>.json) without its calls, tool calls and transcript",
          RunRecord, ("folder", "file"), tuple(NESTED)),
    Table("model_calls", "one row per model call of a run, as its meter saw it", ModelCall,
          ("folder", "run_id", "index")),
    Table("tool_calls", "one row per tool call of a run, with its memory log (`log`, JSON)", ToolCall,
          ("folder", "run_id", "index")),
    Table("transcripts", "one row per run's transcript: what its model read and wrote (`messages`, JSON)",
          Transcript, ("folder", "run_id")),
    Table("judgements", "one row per judgement line (judgements/<judge>.jsonl)", Judgement, ("folder", "file", "line")),
    Table("ledger", "one row per metering-ledger line: every model request, response and interrupted attempt",
          LedgerEvent, ("folder", "file", "line")),
    Table("attempts", "one row per attempt line (attempts.jsonl, judgements/<judge>.attempts.jsonl)", Attempt,
          ("folder", "file", "line")),
    Table("prompts", "one row per system prompt; transcripts name it by its sha256", None, ("folder", "sha256")),
    Table("files", "one row per file of the stage folder: its sha256, the table that rebuilds it, or its text",
          None, ("folder", "path")),
]
BY_NAME = {t.name: t for t in TABLES}
OWN_COLUMNS = {"prompts": {"folder": "string", "sha256": "string", "text": "string"},
               "files": {"folder": "string", "path": "string", "sha256": "string", "bytes": "int64",
                         "table": "string", "format": "string", "content": "string"}}
KEY_TYPES = {"folder": "string", "file": "string", "line": "int64", "run_id": "string", "index": "int64"}


def _scalar(annotation: Any) -> str | None:
    """The parquet type of a schema field that is one scalar (None: stored as JSON text)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return _scalar(args[0]) if len(args) == 1 else None
    if typing.get_origin(annotation) is typing.Literal:
        kinds = {type(a) for a in typing.get_args(annotation)}
        return {str: "string", int: "int64", bool: "bool"}.get(kinds.pop()) if len(kinds) == 1 else None
    return {str: "string", int: "int64", float: "float64", bool: "bool"}.get(annotation)


_PY = {"string": str, "int64": int, "float64": float, "bool": bool}


def columns(table: Table) -> dict[str, str]:
    """Column name -> parquet type ("json": JSON text in a string column)."""
    if table.model is None:
        return dict(OWN_COLUMNS[table.name])
    out = {k: KEY_TYPES[k] for k in table.keys}
    out.update({"_keys": "keys", "_extra": "string"})
    for name, f in table.model.model_fields.items():
        if name not in table.skip:
            out[name] = _scalar(f.annotation) or "json"
    return out


def features(table: Table):
    import datasets

    def one(kind: str):
        if kind == "keys":
            return datasets.Sequence(datasets.Value("string"))
        return datasets.Value("string" if kind == "json" else kind)

    return datasets.Features({c: one(k) for c, k in columns(table).items()})


def to_row(table: Table, obj: dict, **place) -> dict:
    """One JSON object as one row: typed columns, `_keys` in written order, `_extra` for what does not fit."""
    cols = columns(table)
    row: dict[str, Any] = {c: None for c in cols}
    row.update(place)
    extra = {}
    for k, v in obj.items():
        kind = cols.get(k) if k not in table.keys and not k.startswith("_") else None
        if k in table.skip:
            continue
        if kind == "json":
            row[k] = json.dumps(v, ensure_ascii=False)
        elif kind in _PY and (v is None or type(v) is _PY[kind]):
            row[k] = v
        else:
            extra[k] = v
    row["_keys"] = list(obj)
    row["_extra"] = json.dumps(extra, ensure_ascii=False) if extra else None
    return row


def from_row(table: Table, row: dict, nested: dict[str, Any] | None = None) -> dict:
    cols = columns(table)
    extra = json.loads(row["_extra"]) if row.get("_extra") else {}
    out = {}
    for k in row["_keys"]:
        if k in extra:
            out[k] = extra[k]
        elif nested is not None and k in NESTED:
            out[k] = nested[k]
        elif cols.get(k) == "json":
            out[k] = json.loads(row[k])
        else:
            out[k] = row[k]
    return out


# ------------------------------------------------------------------------------ file formats


_JSON_STYLES = [{"indent": i, "ensure_ascii": a, "newline": n}
                for i in (1, None, 2) for a in (False, True) for n in (False, True)]


def _dump_json(obj: Any, fmt: dict) -> str:
    return json.dumps(obj, indent=fmt["indent"], ensure_ascii=fmt["ensure_ascii"]) + ("\n" if fmt["newline"] else "")


def _dump_lines(objs: list[dict], fmt: dict) -> str:
    return "".join(json.dumps(o, ensure_ascii=fmt["ensure_ascii"]) + "\n" for o in objs)


def json_style(text: str, obj: Any) -> dict | None:
    """The json.dumps settings that write `obj` as exactly `text`, or None."""
    return next((f for f in _JSON_STYLES if _dump_json(obj, f) == text), None)


def lines_style(text: str, objs: list[dict]) -> dict | None:
    for a in (False, True):
        if _dump_lines(objs, {"ensure_ascii": a}) == text:
            return {"ensure_ascii": a, "lines": True}
    return None


def sha256(data: bytes | str) -> str:
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


# ------------------------------------------------------------------------------ reading a folder


def _classify(rel: str) -> str | None:
    """The table a file of a stage folder is rebuilt from (None: kept as text in `files`)."""
    p = Path(rel)
    if p.parts[0] == "records" and p.suffix == ".json" and len(p.parts) == 2:
        return "runs"
    if p.parts[0] == "prompts" and p.suffix == ".txt":
        return "prompts"
    if p.name == "ledger.jsonl":
        return "ledger"
    if p.name == "attempts.jsonl" or p.name.endswith(".attempts.jsonl"):
        return "attempts"
    if p.parts[0] == "judgements" and p.suffix == ".jsonl":
        return "judgements"
    return None


def stage_files(root: Path) -> list[str]:
    """Every file of a stage folder a reader may open, relative and sorted (no hidden temporaries)."""
    out = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if p.is_file() and not any(part.startswith(".") for part in rel.parts):
            out.append(rel.as_posix())
    return out


@dataclass
class Export:
    """What publishing some stage folders would write: the tables' rows, what leaves, what is left out."""

    folders: dict[str, Path]  # "stage/label" -> path
    infos: dict[str, dict]
    rows: dict[str, list[dict]] = field(default_factory=lambda: {t.name: [] for t in TABLES})
    private: privacy.Private = field(default_factory=privacy.Private)
    left_out: list[str] = field(default_factory=list)
    hosts: set[str] = field(default_factory=set)
    private_transcripts: int = 0
    verbatim: list[str] = field(default_factory=list)  # table files whose text could not be rebuilt from rows


def _stage_folders(paths: Iterable[str | Path]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise PublishError(f"{p}: no such folder")
        found = [p] if (p / "stage.json").exists() else sorted(
            {q.parent for q in p.glob("*/stage.json")} | {q.parent for q in p.glob("*/*/stage.json")})
        if not found:
            raise PublishError(f"{p}: not a stage folder (no stage.json) and none below it")
        for d in found:
            out.setdefault(f"{d.parent.name}/{d.name}", d)
    return dict(sorted(out.items()))


def collect(paths: Iterable[str | Path], private_transcripts: bool = False) -> Export:
    """Read the stage folders into rows; refuse a study kind this cannot publish, naming it."""
    folders = _stage_folders(paths)
    infos = {}
    for name, root in folders.items():
        info = read_json("stage", root / "stage.json").model_dump(mode="json")
        kind = info.get("kind") or "agents"
        if kind not in PUBLISHABLE:
            raise PublishError(f"{root}: a {kind!r} stage; only {', '.join(PUBLISHABLE)} stages can be published "
                               f"as tables so far (the personalization and backend studies write other files)")
        infos[name] = info
    ex = Export(folders, infos)
    texts: dict[tuple[str, str], str] = {}
    for name, root in folders.items():
        for rel in stage_files(root):
            raw = (root / rel).read_bytes()
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise PublishError(f"{root / rel}: not UTF-8 text; a stage folder holds only text files") from None
            texts[(name, rel)] = text
            ex.private.scan_text(text)
            if rel.endswith((".json", ".jsonl")):
                for obj in _objects(text, rel):
                    ex.private.scan_object(obj)
            elif rel.endswith(".yaml"):
                try:
                    ex.private.scan_object(yaml.safe_load(text))
                except yaml.YAMLError:
                    pass  # its text is still scanned for paths and keys above
            if rel.endswith(("lock", "sessions.jsonl")):  # one JSON object per line: who ran the stage
                ex.hosts |= {str(o["host"]) for o in _objects(text, "lines.jsonl") if o.get("host")}
    for name, root in folders.items():
        _add_folder(ex, name, root, {rel: ex.private.redact(t) for (n, rel), t in texts.items() if n == name},
                    private_transcripts)
        _add_data(ex, name)
    return ex


def _objects(text: str, rel: str) -> list[dict]:
    if rel.endswith(".jsonl"):
        out = []
        for line in text.splitlines():
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
        return out
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        return []
    return [obj] if isinstance(obj, dict) else []


def _add_folder(ex: Export, name: str, root: Path, texts: dict[str, str], private_transcripts: bool) -> None:
    rows = ex.rows
    records = {}
    for rel, text in texts.items():
        if _classify(rel) == "runs":
            try:
                records[rel] = json.loads(text)
            except json.JSONDecodeError:
                records[rel] = None
    used_prompts: set[str] = set()
    dropped_prompts: set[str] = set()
    for rel, rec in records.items():
        if not isinstance(rec, dict):
            continue
        shas = _prompt_shas(rec.get("transcript"))
        if rec.get("variant") == "private" and rec.get("transcript") is not None and not private_transcripts:
            ex.private_transcripts += 1
            dropped_prompts |= shas
            rec = dict(rec, transcript=None)
            records[rel] = rec
        else:
            used_prompts |= shas
    dropped_prompts -= used_prompts
    for rel, text in texts.items():
        table = _classify(rel)
        if table == "prompts" and Path(rel).stem in dropped_prompts:
            continue  # used only by transcripts left out
        fmt, content, published = None, None, text
        if table == "runs":
            rec = records[rel]
            fmt = json_style(text, json.loads(text)) if isinstance(rec, dict) else None
            if isinstance(rec, dict):
                if fmt or rec != json.loads(text):  # written anew only when rebuilt from rows or changed
                    published = _dump_json(rec, fmt or _JSON_STYLES[0])
                _add_record(ex, name, rel, rec)
            if fmt is None:
                content = published
        elif table == "prompts":
            rows["prompts"].append({"folder": name, "sha256": Path(rel).stem, "text": text})
            if rel != f"prompts/{sha256(text)}.txt":
                content = text  # a prompt file whose name is not its hash: kept as written
        elif table in ("ledger", "attempts", "judgements"):
            lines, problems = parse_lines(text.encode("utf-8"), rel)
            objs = [o for _, o in lines]
            fmt = lines_style(text, objs) if not problems else None
            for i, obj in lines:
                rows[table].append(to_row(BY_NAME[table], obj, folder=name, file=rel, line=i))
            if fmt is None:
                content = text
        else:
            content = text
        if content is not None and table is not None:
            ex.verbatim.append(f"{name}/{rel}")
        rows["files"].append({"folder": name, "path": rel, "sha256": sha256(published),
                              "bytes": len(published.encode("utf-8")), "table": table,
                              "format": json.dumps(fmt, sort_keys=True) if fmt else None, "content": content})


def _prompt_shas(transcript: Any) -> set[str]:
    out: set[str] = set()
    if isinstance(transcript, dict):
        if transcript.get("system_sha256"):
            out.add(str(transcript["system_sha256"]))
        for m in transcript.get("messages") or []:
            for sub in (m or {}).get("asked") or []:
                out |= _prompt_shas(sub)
    return out


def _add_record(ex: Export, name: str, rel: str, rec: dict) -> None:
    rows, rid = ex.rows, rec.get("run_id")
    rows["runs"].append(to_row(BY_NAME["runs"], rec, folder=name, file=rel))
    for i, c in enumerate(rec.get("calls") or []):
        rows["model_calls"].append(to_row(BY_NAME["model_calls"], c, folder=name, run_id=rid, index=i))
    for i, t in enumerate(rec.get("tools") or []):
        rows["tool_calls"].append(to_row(BY_NAME["tool_calls"], t, folder=name, run_id=rid, index=i))
    if isinstance(rec.get("transcript"), dict):
        rows["transcripts"].append(to_row(BY_NAME["transcripts"], rec["transcript"], folder=name, run_id=rid))


def _add_data(ex: Export, name: str) -> None:
    """The stage's data file goes along when the harness generated it (ours to give); other data is named by hash."""
    data = ex.infos[name].get("data") or {}
    path = Path(str(data.get("path") or ""))
    if any(f["folder"] == name and f["path"] == f"data/{path.name}" for f in ex.rows["files"]):
        return  # a folder rebuilt from a dataset carries it already
    if data.get("kind") == "synth" and path.is_file() and sha256(path.read_bytes()) == data.get("sha256"):
        text = path.read_text(encoding="utf-8")
        ex.rows["files"].append({"folder": name, "path": f"data/{path.name}", "sha256": sha256(text),
                                 "bytes": len(text.encode("utf-8")), "table": None, "format": None, "content": text})
    else:
        ex.left_out.append(f"{name}: the data file ({data.get('kind') or 'unknown kind'}, sha256 "
                           f"{data.get('sha256')}); for the exposure replay put it at data/{path.name} of this "
                           f"dataset's folder")


# ------------------------------------------------------------------------------ what leaves


def plan(ex: Export) -> str:
    """What publishing would write, said before anything is written."""
    lines = ["what leaves this machine (tables of the dataset):"]
    for t in TABLES:
        lines.append(f"  {t.name:12s} {len(ex.rows[t.name]):6d} rows  {t.about}")
    found = ex.private.summary()
    lines.append("replaced in every file: " + ", ".join(f"{n} {k}" for k, n in found.items())
                 + f" (by {privacy.URL}, {privacy.KEY}, {privacy.LOCAL}/NAME)")
    if ex.hosts:
        lines.append("kept: the host names that ran the stage (locks, sessions): " + ", ".join(sorted(ex.hosts)))
    for item in card_left_out(ex):
        lines.append("left out: " + item)
    if ex.verbatim:
        lines.append(f"kept as text in `files` (not rebuilt from rows): {len(ex.verbatim)} file(s)")
    return "\n".join(lines)


def card_left_out(ex: Export) -> list[str]:
    out = [f"{privacy.URL}: every model endpoint's URL", f"{privacy.KEY}: every key", f"{privacy.LOCAL}: local paths"]
    if ex.private_transcripts:
        out.append(f"the transcripts of {ex.private_transcripts} LongMemEval-Org private run(s) and the system prompts "
                   f"only they used (publish with private_transcripts=true to include them)")
    return out + ex.left_out


# ------------------------------------------------------------------------------ writing


def _totals(ex: Export) -> dict:
    runs = ex.rows["runs"]
    per: dict[str, dict] = {}
    for r in runs:
        t = per.setdefault(r["folder"], {"runs": 0, "failed": 0, "model_calls": 0, "tokens": 0, "cost_list_usd": 0.0})
        tok = json.loads(r["tokens"]) if r.get("tokens") else {}
        usd = (json.loads(r["prices"]) or {}).get("usd_per_currency", 1.0) if r.get("prices") else 1.0
        t["runs"] += 1
        t["failed"] += r.get("status") == "failed"
        t["model_calls"] += int(r.get("model_calls") or 0)
        t["tokens"] += int(tok.get("prompt", 0)) + int(tok.get("output", 0))
        t["cost_list_usd"] += float(r.get("cost_list") or 0.0) * float(usd)
    for t in per.values():
        t["cost_list_usd"] = round(t["cost_list_usd"], 6)
    return per


def prereg_texts(ex: Export) -> dict[str, dict]:
    """Per folder: the pre-registration file's path and sha256 as stage.json has them, and its text
    when this tree holds that file unchanged (then written beside the card, prereg/<name>)."""
    out = {}
    for name, info in ex.infos.items():
        pre = info.get("prereg") or {}
        p = analysis_repo() / str(pre.get("path") or "")
        entry = {"path": pre.get("path"), "sha256": pre.get("sha256"), "file": None}
        if pre.get("path") and p.is_file() and sha256(p.read_bytes()) == pre.get("sha256"):
            entry["file"] = f"prereg/{pre['sha256'][:12]}-{p.name}"
            entry["text"] = p.read_text(encoding="utf-8")
        out[name] = entry
    return out


def analysis_repo() -> Path:
    return Path(__file__).resolve().parents[1]


def metadata(ex: Export, hashes: dict[str, str]) -> dict:
    stages = {}
    for name, info in ex.infos.items():
        model = info.get("model") or {}
        stages[name] = {
            "kind": info.get("kind") or "agents", "stage": info.get("stage"), "label": info.get("label"),
            "seed": info.get("seed"), "config_hash": info.get("config_hash"), "created": info.get("created"),
            "code": info.get("code"), "data": {k: v for k, v in (info.get("data") or {}).items() if k != "path"},
            "model": {k: model.get(k) for k in ("name", "model", "provider")}, "prices": model.get("prices"),
            "offpeak": model.get("offpeak"), "fidelity": info.get("fidelity"), "sweep": info.get("sweep"),
        }
    from harness.records.provenance import code_revision

    return {"format": FORMAT_VERSION, "stages": stages, "tables": hashes, "totals": _totals(ex),
            "prereg": {n: {k: v for k, v in e.items() if k != "text"} for n, e in prereg_texts(ex).items()},
            "published_with": code_revision(analysis_repo()),
            "left_out": card_left_out(ex), "replaced": ex.private.summary()}


def card(ex: Export, hashes: dict[str, str]) -> str:
    meta = metadata(ex, hashes)
    configs = [{"config_name": t, "data_files": [{"split": "train", "path": f"{t}/train.parquet"}]} for t in hashes]
    header = {"license": LICENSE, "pretty_name": "memspace-harness stage results: " + ", ".join(ex.folders),
              "tags": ["agent-memory", "evaluation", "longmemeval"], "configs": configs, CARD_KEY: meta}
    body = ["# " + header["pretty_name"], "",
            ("Written by `make publish` of memspace-harness. Load a table with "
            "`datasets.load_dataset(DIR, NAME)`; re-analyse with `make analyze RUNS=DIR`, which rebuilds the stage "
            "folders from these tables, checks every table against the sha256 in this card's header and every "
            "file against the `files` table, and writes the same results as the original folders."), "",
            "## Tables", ""]
    for t in TABLES:
        if t.name in hashes:
            body.append(f"- `{t.name}`: {t.about} ({len(ex.rows[t.name])} rows)")
        else:
            body.append(f"- `{t.name}`: no rows in these stages (no config)")
    body += ["", "## Left out", ""] + [f"- {x}" for x in card_left_out(ex)]
    for name, st in meta["stages"].items():
        body += ["", f"## {name}", "", (f"- study kind: `{st['kind']}`; seed {st['seed']}; config sha256 "
                 f"`{st['config_hash']}`"), (f"- code revision: `{(st['code'] or {}).get('commit')}` "
                 f"(uncommitted changes: {(st['code'] or {}).get('dirty')})"),
                 f"- data: {st['data'].get('kind')}, sha256 `{st['data'].get('sha256')}`",
                 f"- reader: {st['model'].get('name')} ({st['model'].get('model')}); prices {st['prices']}",
                 f"- pre-registration: `{meta['prereg'][name].get('path')}` sha256 "
                 f"`{meta['prereg'][name].get('sha256')}`"
                 + (f" ([{meta['prereg'][name]['file']}]({meta['prereg'][name]['file']}))"
                    if meta["prereg"][name].get("file") else " (this tree does not hold that file: not included)"),
                 f"- totals: {meta['totals'].get(name)}", "", "Fidelity manifest (the stage beside the paper):", "",
                 "| setting | paper | stage | status |", "| --- | --- | --- | --- |"]
        for r in (st.get("fidelity") or {}).get("rows") or []:
            cells = [str(r.get(k, "")).replace("|", "\\|").replace("\n", " ") for k in ("setting", "paper", "stage",
                                                                                          "status")]
            body.append("| " + " | ".join(cells) + " |")
    return "---\n" + yaml.safe_dump(header, sort_keys=False, allow_unicode=True, width=10**6) + "---\n" + \
        "\n".join(body) + "\n"


def write(ex: Export, out: str | Path) -> Path:
    """Write the dataset into `out` (a new or empty folder, or one this wrote), atomically."""
    import datasets

    datasets.disable_progress_bars()
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (out / CARD).exists():
        raise PublishError(f"{out} exists and holds no dataset card: choose an empty or new folder")
    if out.exists() and (out / CARD).exists() and read_card(out) is None:
        raise PublishError(f"{out} holds a README.md that is not a dataset this harness wrote: choose another folder")
    tmp = out.parent / f".{out.name}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        hashes = {}
        for t in TABLES:
            rows = ex.rows[t.name]
            if not rows:
                continue  # an empty split does not load (datasets): the card says the table has no rows
            cols = columns(t)
            ds = datasets.Dataset.from_dict({c: [r.get(c) for r in rows] for c in cols}, features=features(t))
            (tmp / t.name).mkdir()
            ds.to_parquet(str(tmp / t.name / "train.parquet"))
            hashes[t.name] = sha256((tmp / t.name / "train.parquet").read_bytes())
        for e in prereg_texts(ex).values():
            if e.get("file"):
                (tmp / e["file"]).parent.mkdir(exist_ok=True)
                (tmp / e["file"]).write_text(e["text"], encoding="utf-8")
        (tmp / CARD).write_text(card(ex, hashes), encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return out


def publish(paths: Iterable[str | Path], out: str | Path, private_transcripts: bool = False,
            dry_run: bool = False, say=print) -> Export:
    ex = collect(paths, private_transcripts)
    say(plan(ex))
    if not dry_run:
        write(ex, out)
        say(f"wrote {out}/ ({sum(1 for t in TABLES if ex.rows[t.name])} tables and {CARD})")
    return ex


def push(folder: str | Path, repo_id: str, token: str | None = None, endpoint: str | None = None,
         private: bool = True) -> str:
    """Upload a written dataset folder to the Hub as a dataset repository (private unless said otherwise).

    `endpoint` defaults to the Hub (huggingface_hub reads HF_ENDPOINT); a test points it at a loopback server."""
    from huggingface_hub import HfApi

    if read_card(Path(folder)) is None:
        raise PublishError(f"{folder}: not a dataset written by make publish")
    api = HfApi(endpoint=endpoint, token=token)
    api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
    info = api.upload_folder(repo_id=repo_id, repo_type="dataset", folder_path=str(folder),
                             commit_message="memspace-harness: publish stage results")
    return str(getattr(info, "commit_url", info))


# ------------------------------------------------------------------------------ reading a published dataset


def read_card(folder: Path) -> dict | None:
    """The card's `memspace` block, or None when `folder` is no dataset this harness wrote."""
    p = Path(folder) / CARD
    if not p.is_file():
        return None
    text = p.read_text(encoding="utf-8")
    if not text.startswith("---\n"):
        return None
    head, sep, _ = text[4:].partition("\n---\n")
    if not sep:
        return None
    try:
        meta = (yaml.safe_load(head) or {}).get(CARD_KEY)
    except yaml.YAMLError:
        return None
    return meta if isinstance(meta, dict) and "tables" in meta else None


def is_published(folder: str | Path) -> bool:
    return read_card(Path(folder)) is not None


def read_tables(folder: Path) -> dict[str, list[dict]]:
    """Every table, checked against the card's sha256 first; a table that differs is refused, named."""
    import pyarrow.parquet as pq

    meta = read_card(folder)
    if meta is None:
        raise PublishError(f"{folder}: no dataset card of this harness ({CARD} with a `{CARD_KEY}` block)")
    if meta.get("format") != FORMAT_VERSION:
        raise PublishError(f"{folder}: dataset format {meta.get('format')!r}; this harness reads {FORMAT_VERSION}")
    out: dict[str, list[dict]] = {t.name: [] for t in TABLES}
    for name, want in (meta.get("tables") or {}).items():
        if name not in BY_NAME:
            raise PublishError(f"{folder}: the card names a table {name!r} this harness does not know")
        path = folder / name / "train.parquet"
        if not path.is_file():
            raise PublishError(f"{folder}: table {name!r} is missing ({path.relative_to(folder)})")
        got = sha256(path.read_bytes())
        if got != want:
            raise PublishError(f"{folder}: table {name!r} does not match the card's sha256 (card {want[:16]}, file "
                               f"{got[:16]}): the dataset was changed after it was published; refused")
        out[name] = pq.read_table(path).to_pylist()  # to_pylist keeps null apart from NaN
    return out


def rebuild(folder: str | Path, into: str | Path) -> list[Path]:
    """Write the stage folders of a published dataset under `into` (<stage>/<label>/), each file checked
    against its sha256 in `files`; returns the stage folders."""
    folder, into = Path(folder), Path(into)
    tables = read_tables(folder)
    by_file: dict[tuple[str, str], dict[str, list[dict]]] = {}
    for name in ("ledger", "attempts", "judgements"):
        for r in tables[name]:
            by_file.setdefault((r["folder"], r["file"]), {}).setdefault(name, []).append(r)
    nested: dict[tuple[str, str], dict[str, Any]] = {}
    for name, field_name in (("model_calls", "calls"), ("tool_calls", "tools")):
        for r in sorted(tables[name], key=lambda r: r["index"]):
            nested.setdefault((r["folder"], r["run_id"]), {"calls": [], "tools": [], "transcript": None})
            nested[(r["folder"], r["run_id"])][field_name].append(from_row(BY_NAME[name], r))
    for r in tables["transcripts"]:
        nested.setdefault((r["folder"], r["run_id"]), {"calls": [], "tools": [], "transcript": None})
        nested[(r["folder"], r["run_id"])]["transcript"] = from_row(BY_NAME["transcripts"], r)
    runs = {(r["folder"], r["file"]): r for r in tables["runs"]}
    prompts = {(r["folder"], f"prompts/{r['sha256']}.txt"): r["text"] for r in tables["prompts"]}
    roots = []
    for f in tables["files"]:
        stage, _, label = f["folder"].partition("/")
        root = into / stage / label
        if root not in roots:
            roots.append(root)
        key = (f["folder"], f["path"])
        fmt = json.loads(f["format"]) if f["format"] else None
        where = f"{folder}: {f['folder']}/{f['path']}"
        objs: Any = None  # what the file's rows say, for a file kept as text: they must agree with it
        if f["table"] == "runs" and key in runs:
            r = runs[key]
            objs = from_row(BY_NAME["runs"], r, nested.get((f["folder"], r["run_id"]),
                                                           {"calls": [], "tools": [], "transcript": None}))
        elif f["table"] in ("ledger", "attempts", "judgements"):
            rows = sorted(by_file.get(key, {}).get(f["table"], []), key=lambda r: r["line"])
            objs = [from_row(BY_NAME[f["table"]], r) for r in rows]
        if f["content"] is not None:
            text = f["content"]
            if f["table"] == "runs" and objs is not None and _parsed(text) != objs or \
                    f["table"] in ("ledger", "attempts", "judgements") and \
                    [o for _, o in parse_lines(text.encode("utf-8"), f["path"])[0]] != objs:
                raise PublishError(f"{where}: table {f['table']!r} does not match the file's text kept in `files`: "
                                   f"the table was changed; refused")
        elif f["table"] == "prompts":
            text = prompts.get(key)
            if text is None:
                raise PublishError(f"{where}: table 'prompts' has no row for it")
        elif objs is None:
            raise PublishError(f"{where}: table {f['table']!r} has no row for it")
        else:
            text = _dump_json(objs, fmt) if f["table"] == "runs" else _dump_lines(objs, fmt)
        if sha256(text) != f["sha256"]:
            raise PublishError(f"{where}: rebuilt from table {f['table'] or 'files'!r}, it does not match its sha256 "
                               f"in `files`: the table was changed; refused")
        dest = root / f["path"]
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(dest, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
    for root in roots:  # data that did not go along, put beside the card by its user (the replay checks its sha256)
        name = Path(str((json.loads((root / "stage.json").read_text(encoding="utf-8")).get("data") or {}).get("path")
                        or "")).name
        if name and not (root / "data" / name).exists() and (folder / "data" / name).is_file():
            (root / "data").mkdir(exist_ok=True)
            (root / "data" / name).symlink_to((folder / "data" / name).resolve())
    return roots


def _parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


_REBUILT: dict[Path, list[Path]] = {}


def stage_dirs(folder: str | Path) -> list[Path]:
    """The stage folders of a published dataset, rebuilt once per process into a temporary folder."""
    key = Path(folder).resolve()
    if key not in _REBUILT:
        tmp = Path(tempfile.mkdtemp(prefix="memspace-published-"))
        atexit.register(shutil.rmtree, tmp, True)
        _REBUILT[key] = rebuild(key, tmp)
    return _REBUILT[key]
