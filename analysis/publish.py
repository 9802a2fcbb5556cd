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

Private by default, by allowlist: every object of every file goes through the publish policy the
record schema declares field by field (harness.records.schema.POLICY, FILE_POLICY, applied by
harness.records.privacy.Publisher); a field or a file without a policy stays home, a configuration
string goes out only under a key the typed config declares a name (harness.run.settings.publish_names), any
other as `<withheld>`, and the text of a run whose context
held a private agent's unit (answer, gold, error, tool arguments, queries, transcript, judge prompt and
reply, the system prompts only it used) stays home unless `private_transcripts=True`. Shape
redaction and a last scan of every cell, the card and the pre-registration file (`leaks`) are the
second line. The data file goes only when it is the generator's own output. `plan` lists what would
leave the machine before anything is written, and the card says what was left out, counted by field.

A published dataset is untrusted input (`rebuild`): every path stays inside its folder, every file
of the folder is one the card names, the card is re-derived from the tables, sizes are bounded, all
checked before anything is written (docs/publishing.md).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import shutil
import tempfile
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit

import yaml

from harness import studies
from harness.records import privacy
from harness.records.ledger import parse_lines
from harness.run.replay import RECEIVED
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
NESTED = {"calls": "model_calls", "tools": "tool_calls", "transcript": "transcripts"}
# a published dataset is untrusted input: what reading one may take (refused beyond, by name)
MAX_CARD_BYTES = 8 << 20
MAX_TABLE_BYTES = 2 << 30
MAX_DATA_BYTES = 1 << 30
MAX_FILES = 200_000
MAX_REBUILT_BYTES = 1 << 30  # what a dataset may decode to in all; the analyst raises it (MEMSPACE_DATASET_MAX_BYTES)
MAX_RATIO = 100  # and at most this many bytes per byte of its parquet files (a 23 KB table is no 300 MiB of text)
RATIO_FLOOR = 64 << 20  # below which the ratio is not applied (a small dataset of long prompts)
MAX_PATH_PARTS = 8


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
    """Every file of a stage folder a reader may open, relative and sorted (no hidden temporaries, no
    symlinks: a folder rebuilt from a dataset links its data file, which `_add_data` handles)."""
    out = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if any(part.startswith(".") for part in rel.parts) or any(
                (root / Path(*rel.parts[:i])).is_symlink() for i in range(1, len(rel.parts) + 1)):
            continue  # a symlink is no file of the stage: what it points at is never published
        if p.is_file():
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
    pids: bool = False  # the driver lock or sessions name process ids
    generated: set[tuple[str, str]] = field(default_factory=set)  # data files regenerated here: nothing of ours
    private_transcripts: int = 0
    unknown_runs: int = 0  # judgement lines whose run no record of the folder holds: withheld as private
    unreferenced_prompts: int = 0  # system prompts no published transcript names: withheld
    verbatim: list[str] = field(default_factory=list)  # table files whose text could not be rebuilt from rows
    publisher: privacy.Publisher | None = None  # the schema's publish policy, applied to every object
    withheld_files: list[str] = field(default_factory=list)  # files no policy names: they stay home
    private_runs: int = 0  # runs whose context held a private agent's unit: their text stays home
    included_private: int = 0  # such runs published whole, the publisher having asked (private_transcripts=true)


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
            # the stage's own names (stage.json), never the folders around it: `/home/Jo Doe/smoke` is a place
            info = read_json("stage", d / "stage.json").model_dump(mode="json")
            parts = [str(info.get("stage")), str(info.get("label"))]
            if any(not re.fullmatch(r"[A-Za-z0-9][\w.+-]*", x) or ".." in x for x in parts):
                raise PublishError(f"{d}: stage.json names stage {parts[0]!r} and label {parts[1]!r}; a stage "
                                   f"folder is published under those names, which must be plain names")
            name = "/".join(parts)
            if name in out and out[name].resolve() != d.resolve():
                raise PublishError(f"{d} and {out[name]}: two stage folders of one stage and label ({name}); "
                                   f"publish them one at a time")
            out[name] = d
    return dict(sorted(out.items()))


def collect(paths: Iterable[str | Path], private_transcripts: bool = False) -> Export:
    """Read the stage folders into rows; refuse a study kind this cannot publish, naming it."""
    folders = _stage_folders(paths)
    for name, root in folders.items():
        info = read_json("stage", root / "stage.json").model_dump(mode="json")
        try:
            study = studies.get(info.get("kind"))
        except studies.StudyError as exc:
            raise PublishError(f"{root}: {exc}") from exc
        if not study.publishable:  # the study registry says which studies' folders this writes as tables
            mine = [k for k, s in studies.STUDIES.items().items() if s.publishable]
            raise PublishError(f"{root}: a {study.kind!r} stage; only {', '.join(mine)} stages can be published "
                               f"as tables so far (harness/studies/: `publishable`)")
    ex = Export(folders, {})
    texts: dict[tuple[str, str], str] = {}
    for name, root in folders.items():
        for rel in stage_files(root):
            raw = (root / rel).read_bytes()
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise PublishError(f"{root / rel}: not UTF-8 text; a stage folder holds only text files") from None
            texts[(name, rel)] = text
            if rel.endswith((".json", ".jsonl")):
                for obj in _objects(text, rel):
                    ex.private.scan_object(obj)
            elif rel.endswith(".yaml"):
                try:
                    ex.private.scan_object(yaml.safe_load(text))
                except yaml.YAMLError:
                    pass  # its text is still scanned for paths and keys below
    for text in texts.values():
        ex.private.scan_text(text)
    # first the configuration: what it withholds (a DSN, a host, a token under any key) is then replaced wherever
    # a run's text repeats it
    from harness.records.schema import file_policy

    import conditions
    from harness.run.settings import publish_names_here

    registered, names = conditions.CONDITIONS.names(), publish_names_here()
    runs = {name: _runs(texts, name, private_transcripts) for name in folders}
    warm = privacy.Publisher(ex.private, warm=True, registered=registered, names=names)
    for (name, rel), text in texts.items():
        kind = file_policy(rel)
        if kind is None or kind == "prompt":
            continue
        try:
            objs = [yaml.safe_load(text)] if rel.endswith(".yaml") else \
                _objects(text, rel) if rel.endswith(".jsonl") else [_parsed(text)]
        except yaml.YAMLError:
            objs = []
        for obj in objs:
            if isinstance(obj, dict):  # a private run's values name nothing of the stage (no identifier)
                warm.publish(kind, obj, private=runs[name].private(kind, obj))
    # the stage's own identifiers (its files' names, the run ids, labels and conditions the warm pass saw published):
    # a withheld value that is part of one goes out as that identifier anyway, so it is not replaced in text
    files = {part for (name, rel) in texts if file_policy(rel) is not None  # a file no policy names is no identifier
             for part in [*name.split("/"), *rel.split("/"), *(Path(p).stem for p in rel.split("/"))]}
    files |= {part for (name, rel), text in texts.items() if rel == "stage.json" for part in _data_names(text)}
    identifiers = warm.settle(files)
    # the users and machines the stage names (a home folder's user, a session's host, this machine's own names):
    # private wherever a text writes them, as whole words, not only inside the path or field that showed them, and
    # inside an identifier too (a model id `jdoe/qwen-ft` is then withheld; a label holding one is refused)
    hosts = {h for (name, rel), text in texts.items() for h in _who_ran(rel, text)[0]}
    ex.private.words |= privacy.path_users(ex.private.paths) | privacy.machine_names() | \
        {n for h in hosts for n in (h, h.split(".")[0]) if privacy.person_word(n)} | \
        privacy.host_words(_host(u) for u in ex.private.urls)  # an endpoint's machine by its short name
    # a short withheld configuration value's words the stage's data never writes (a name in `+operator=...`)
    from harness.data.org import AGENTS, VARIANTS

    vocabulary, data_ids = _data_words(folders, texts)
    data_ids |= {*AGENTS, *VARIANTS}  # LongMemEval-Org's agents and variants: names of every Org stage's data
    ex.private.words |= {w for w in privacy.withheld_words(warm.withheld_texts, vocabulary) |
                         privacy.path_words(ex.private.paths, vocabulary) if not warm._inside_identifier(w)}
    ex.publisher = privacy.Publisher(ex.private, registered=registered, names=names, identifiers=identifiers,
                                     data_ids=data_ids)
    for name, root in folders.items():
        # as read: the policy works on parsed values (a JSON escape hides nothing from it); text files are redacted
        _add_folder(ex, name, root, {rel: t for (n, rel), t in texts.items() if n == name}, runs[name])
        # what the card says of a stage is read from its published stage.json, as the dataset holds it
        published = next(f["content"] for f in ex.rows["files"] if f["folder"] == name and f["path"] == "stage.json")
        ex.infos[name] = json.loads(published)
        _add_data(ex, name, root, private_transcripts)
    for f in ex.rows["files"]:  # who ran it, as the published files show it (host names are withheld)
        hosts, pids = _who_ran(f["path"], f["content"] or "")
        ex.hosts |= hosts
        ex.pids |= pids
    return ex


def _data_words(folders: dict[str, Path], texts: dict[tuple[str, str], str]) -> tuple[set[str], set[str]]:
    """The words the stages' data wrote (their data files where this machine has them, and the questions and gold
    answers their records hold) and the ids it holds (data_ids)."""
    parts: list[str] = []
    ids: set[str] = set()
    for name, root in folders.items():
        try:
            path = Path(str(((json.loads(texts.get((name, "stage.json"), "{}")) or {}).get("data") or {}).get("path")
                            or ""))
            if path.name and path.is_file() and path.stat().st_size <= 512 << 20:
                parts.append(path.read_text(encoding="utf-8", errors="replace"))
                ids |= data_ids(parts[-1])
        except (ValueError, OSError, AttributeError):
            pass
    for (name, rel), text in texts.items():
        if rel.startswith("records/") and rel.endswith(".json"):
            try:
                rec = json.loads(text)
            except ValueError:
                continue
            parts += [str(rec.get("question") or ""), str(rec.get("gold") or "")] if isinstance(rec, dict) else []
    return privacy.vocabulary(parts), ids


def data_ids(text: str) -> set[str]:
    """The ids a LongMemEval-shaped data file holds: its question ids and types, its sessions' ids (as written and
    as the harness's opaque ids) and its dates; what a private run's record may name (Publisher.computed). Any
    other file: none."""
    from harness.data.longmemeval import opaque_session_id

    try:
        rows = json.loads(text)
    except ValueError:
        return set()
    out: set[str] = set()
    for q in rows if isinstance(rows, list) else []:
        if not isinstance(q, dict):
            continue
        sids = [s for s in [*(q.get("haystack_session_ids") or []), *(q.get("answer_session_ids") or [])]
                if isinstance(s, str)]
        out |= {str(q.get(k)) for k in ("question_id", "question_type", "question_date") if isinstance(q.get(k), str)}
        out |= {*sids, *map(opaque_session_id, sids)}
        out |= {d for d in q.get("haystack_dates") or [] if isinstance(d, str)}
    return out


def _host(url: str) -> str:
    try:
        return urlsplit(url).hostname or ""
    except ValueError:
        return ""


def _who_ran(rel: str, text: str) -> tuple[set[str], bool]:
    """The host names and whether process ids are named, in a folder's driver lock or sessions file (one JSON
    object per line): what the card's `kept` says goes along, read from the originals and from a rebuilt folder."""
    if not rel.endswith(("lock", "sessions.jsonl")):
        return set(), False
    objs = _objects(text, "lines.jsonl")
    return ({str(o["host"]) for o in objs if o.get("host") and o.get("host") != privacy.WITHHELD},
            any(o.get("pid") is not None for o in objs))


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


@dataclass
class Runs:
    """Which runs of one stage folder are private (their context held a private agent's unit, shows_private), and
    which runs its records hold: every line of a file that names a run (its judgement, its ledger lines) is
    published as that run's; a run no record holds is private (provenance unknown is provenance private)."""

    private_runs: set[str]
    recorded: set[str] | None  # None: the publisher asked for private data (private_transcripts)
    transcripts: int = 0  # the private runs' transcripts (withheld)
    included: int = 0  # private_transcripts: the runs whose context held a private unit, published whole

    def private(self, kind: str, obj: dict) -> bool:
        if kind == "record":
            return str(obj.get("run_id")) in self.private_runs
        if kind == "judgement":
            rid = str(obj.get("run_id"))
        elif kind == "ledger":  # a run's call, or a judge's of it (`judge:<run>`); the preflight is no run's
            tag = str(obj.get("tag") or "")
            if tag == "preflight":
                return False
            rid = tag.rsplit(":", 1)[-1]
        else:
            return False
        return rid in self.private_runs or (self.recorded is not None and rid not in self.recorded)


def _runs(texts: dict[tuple[str, str], str], name: str, private_transcripts: bool) -> Runs:
    from harness.records.schema import file_policy

    runs = Runs(set(), None if private_transcripts else set())
    for (n, rel), text in texts.items():
        if n != name or file_policy(rel) != "record":
            continue
        rec = _parsed(text)
        if not isinstance(rec, dict):
            continue
        if runs.recorded is not None:
            runs.recorded.add(str(rec.get("run_id")))
        if shows_private(rec):
            if private_transcripts:
                runs.included += 1
                continue
            runs.private_runs.add(str(rec.get("run_id")))
            runs.transcripts += rec.get("transcript") is not None
    return runs


def _add_folder(ex: Export, name: str, root: Path, texts: dict[str, str], runs: Runs) -> None:
    """Every file of one stage folder as the schema's publish policy lets it go (harness.records.schema.POLICY,
    FILE_POLICY): each object rebuilt field by field, a file no policy names withheld; a run whose context held a
    private agent's unit (`runs`) published as only what the harness computed (privacy.Publisher.computed)."""
    from harness.records.schema import file_policy

    rows, pub = ex.rows, ex.publisher
    records: dict[str, Any] = {}
    for rel, text in texts.items():
        if file_policy(rel) == "record":
            records[rel] = _parsed(text)
    used_prompts: set[str] = set()
    for rel, rec in records.items():
        if isinstance(rec, dict) and str(rec.get("run_id")) not in runs.private_runs:
            used_prompts |= _prompt_shas(rec.get("transcript"))
    ex.private_runs += len(runs.private_runs)
    ex.private_transcripts += runs.transcripts
    ex.included_private += runs.included
    for rel, text in texts.items():
        kind, table = file_policy(rel), _classify(rel)
        if kind is None or (kind == "record" and not isinstance(records.get(rel), dict)):
            ex.withheld_files.append(f"{name}/{rel}")
            continue
        if kind == "prompt" and Path(rel).stem not in used_prompts:
            ex.unreferenced_prompts += 1
            continue  # no published transcript names it: used only by transcripts left out, or by none recorded
        fmt, content, published = None, None, text
        if kind == "prompt":
            published = text = ex.private.redact_free(text)  # what a model read: the second line too
            rows["prompts"].append({"folder": name, "sha256": Path(rel).stem, "text": text})
            if rel != f"prompts/{sha256(text)}.txt":
                content = text  # a prompt file whose name is not its hash: kept as written
        elif rel.endswith(".yaml"):
            try:
                obj = yaml.safe_load(text)
            except yaml.YAMLError:
                obj = None
            if not isinstance(obj, dict):
                ex.withheld_files.append(f"{name}/{rel}")
                continue
            content = published = yaml.safe_dump(pub.publish(kind, obj), sort_keys=False, allow_unicode=True)
        elif table in ("ledger", "attempts", "judgements") or rel.endswith(".jsonl"):
            published = _published_lines(ex, kind, text, runs)
            lines, problems = parse_lines(published.encode("utf-8"), rel)
            objs = [o for _, o in lines]
            if table is not None:
                fmt = lines_style(published, objs) if not problems else None
                for i, obj in lines:
                    rows[table].append(to_row(BY_NAME[table], obj, folder=name, file=rel, line=i))
            if fmt is None:
                content = published
        else:  # one JSON object: a record, stage.json, a judge's info file, a driver lock
            obj = _parsed(text)
            if not isinstance(obj, dict):
                ex.withheld_files.append(f"{name}/{rel}")
                continue
            fmt = json_style(text, obj) or _JSON_STYLES[0]
            obj = pub.publish(kind, obj, private=runs.private(kind, obj))
            published = _dump_json(obj, fmt)
            if kind == "record":
                _add_record(ex, name, rel, obj)
            else:
                fmt, content = None, published
        if content is not None and table is not None:
            ex.verbatim.append(f"{name}/{rel}")
        rows["files"].append({"folder": name, "path": rel, "sha256": sha256(published),
                              "bytes": len(published.encode("utf-8")), "table": table,
                              "format": json.dumps(fmt, sort_keys=True) if fmt else None, "content": content})


NOT_JSON = '{"withheld": "a line that is not a JSON object"'  # unclosed: read back as torn or corrupted, as it was


def _published_lines(ex: Export, kind: str, text: str, runs: Runs) -> str:
    """A JSON-lines file as published: each object by its policy (a private run's line as only what the harness
    computed), a line that is no JSON object replaced (its text may be anything), blank lines and the final newline
    (or a torn last line) as they were."""
    trailing = text.endswith("\n")
    lines = text.split("\n")[:-1] if trailing else text.split("\n")
    ascii_only = False
    out = []
    for line in lines:
        if not line.strip():
            out.append("")
            continue
        obj = _parsed(line)
        if not isinstance(obj, dict):
            out.append(NOT_JSON)
            continue
        ascii_only = ascii_only or (line == json.dumps(obj) and line != json.dumps(obj, ensure_ascii=False))
        ex.unknown_runs += kind == "judgement" and runs.recorded is not None and \
            str(obj.get("run_id")) not in runs.recorded
        out.append(json.dumps(ex.publisher.publish(kind, obj, private=runs.private(kind, obj)),
                              ensure_ascii=ascii_only))
    return "\n".join(out) + ("\n" if trailing else "")


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


def shows_private(record: dict) -> bool:
    """Whether a run's text may show what is private, by allowlist: an Org run is public only when every memory
    call it made (prefetch, tool, asked agent, fan-out store) says what it read and all of it was a public agent's.
    An Org private run (its system prompt), a run whose prompt itself held memory (`history_in_prompt`: no call
    says whose it was) or whose record has no condition notes, a call that read a private agent's unit or store,
    and a call whose log does not say what it read (a tool without a log, a plugin's own log) make it private; a
    LongMemEval run (no variant, its org its question id) holds no agent's private unit; any other variant than
    `public` is private."""
    from harness.data.org import VISIBILITY

    variant, org = record.get("variant"), str(record.get("org") or "")
    if not variant and "@" not in org and isinstance(record.get("qid"), str) and org == record["qid"]:
        return False  # a LongMemEval run: no variant, its org the question itself
    if variant != "public":  # `private`, and anything else (missing, `Private`, a typo): private by allowlist
        return True
    notes = record.get("condition_notes")
    if not isinstance(notes, dict) or notes.get("history_in_prompt"):
        return True  # memory in the prompt itself (full context), or no notes to say: no call says whose it was
    calls = [*(record.get("prefetch") or []), *[t.get("log") if isinstance(t, dict) else None
                                                for t in record.get("tools") or []]]
    for log in calls:
        owners = read_owners(log)
        if owners is None or any(VISIBILITY.get(o) != "public" for o in owners):
            return True
    return False


def read_owners(log: Any) -> list[str] | None:
    """The agents whose units or stores one memory call's log says it read (nested calls of an asked agent
    included); None when the log says nothing of what it read."""
    from harness.run.replay import MEMORY_KINDS

    owners: list[str] = []
    said = False

    def walk(x: Any) -> None:
        nonlocal said
        if isinstance(x, dict):
            if x.get("kind") in MEMORY_KINDS and isinstance(x.get("view"), dict) and "units" in x:
                said = True  # the units it returned, and those whose dates an empty search showed (`shown`)
                owners.extend(str(u[1]) if isinstance(u, (list, tuple)) and len(u) > 1 else ""
                              for u in [*(x["units"] or []), *(x.get("shown") or [])])
                return
            if "store" in x:  # a fan-out call names the agent whose store it read
                said = True
                owners.append(str(x["store"]))
            for k in sorted(x, key=str):
                walk(x[k])
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(log)
    return owners if said else None


def _data_names(stage_json: str) -> list[str]:
    """The name the stage's data file goes out under (data/NAME, in the files table or the card's note): an
    identifier of the stage, as its other files' names are."""
    try:
        path = str(((json.loads(stage_json) or {}).get("data") or {}).get("path") or "")
    except (ValueError, AttributeError):
        return []
    name = Path(path).name if path else ""
    return [name, f"data/{name}", Path(name).stem] if name else []


def _add_data(ex: Export, name: str, root: Path, private_transcripts: bool) -> None:
    """The stage's data file goes along only when it is the generator's own output, regenerated here and
    compared byte for byte, and, for an Org stage (whose data holds the private agents' units), only with
    private_transcripts=true; other data is named by hash."""
    data = (read_json("stage", root / "stage.json").model_dump(mode="json").get("data")) or {}
    path = Path(str(data.get("path") or ""))
    if any(f["folder"] == name and f["path"] == f"data/{path.name}" for f in ex.rows["files"]):
        return  # a folder rebuilt from a dataset carries it already
    org = any(r["folder"] == name and r.get("variant") for r in ex.rows["runs"]) or _org_config(root)
    why = _not_generated(root, data, path)
    if why is None and org and not private_transcripts:
        why = "an Org stage's data holds the private agents' units: publish with private_transcripts=true to include it"
    if why is None:
        text = path.read_text(encoding="utf-8")
        ex.generated.add((name, f"data/{path.name}"))
        ex.rows["files"].append({"folder": name, "path": f"data/{path.name}", "sha256": sha256(text),
                                 "bytes": len(text.encode("utf-8")), "table": None, "format": None, "content": text})
    else:
        ex.left_out.append(f"{name}: the data file ({data.get('kind') or 'unknown kind'}, sha256 "
                           f"{data.get('sha256')}; {why}); for the exposure replay put it at data/{path.name} of this "
                           f"dataset's folder")


def _org_config(root: Path) -> bool:
    """Whether the stage's config.yaml plans Org variants (harness.run.fidelity's rule): a stage whose runs are
    not recorded yet is an Org stage all the same; one whose config cannot be read counts as one."""
    from omegaconf import OmegaConf

    from harness.run.fidelity import _is_org

    try:
        cfg = yaml.safe_load((root / "config.yaml").read_text(encoding="utf-8"))
        return bool(_is_org(OmegaConf.create(cfg))) if isinstance(cfg, dict) and "stage" in cfg else False
    except (OSError, yaml.YAMLError, ValueError, TypeError, AttributeError, KeyError):
        return True
    except Exception as exc:  # omegaconf's own errors on a config it cannot take
        if type(exc).__module__.startswith("omegaconf"):
            return True
        raise


def _not_generated(root: Path, data: dict, path: Path) -> str | None:
    """Why the data file is not the synthetic generator's own output (None: it is, byte for byte)."""
    if data.get("kind") != "synth":
        return "not generated by this harness"
    if not path.is_file() or path.stat().st_size > MAX_DATA_BYTES:
        return "not on this machine" if not path.is_file() else "too large to publish"
    try:
        spec = (yaml.safe_load((root / "config.yaml").read_text(encoding="utf-8")) or {}).get("data") or {}
        from harness.data.synth import generate

        made = json.dumps(generate(int(spec["seed"]), str(spec["size"])), ensure_ascii=False).encode("utf-8")
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError, AttributeError):
        return "its generator settings (config.yaml data.seed, data.size) are not readable"
    if path.read_bytes() != made:
        return "it differs from what the generator writes for its seed and size (edited after generation?)"
    return None


# ------------------------------------------------------------------------------ what leaves


def plan(ex: Export) -> str:
    """What publishing would write, said before anything is written."""
    lines = ["what leaves this machine (tables of the dataset):"]
    for t in TABLES:
        lines.append(f"  {t.name:12s} {len(ex.rows[t.name]):6d} rows  {t.about}")
    found = ex.private.summary()
    lines.append("replaced in every file: " + ", ".join(f"{n} {k}" for k, n in found.items())
                 + f" (by {privacy.URL}, {privacy.HOST}, {privacy.KEY}, {privacy.LOCAL})")
    for item in card_kept(ex):
        lines.append("kept: " + item)
    for item in card_left_out(ex):
        lines.append("left out: " + item)
    if ex.verbatim:
        lines.append(f"kept as text in `files` (not rebuilt from rows): {len(ex.verbatim)} file(s)")
    return "\n".join(lines)


def card_left_out(ex: Export) -> list[str]:
    out = [f"{privacy.URL}: every model endpoint's URL", f"{privacy.HOST}: the host of every other URL (its user "
           f"info, query and fragment removed)", f"{privacy.KEY}: every key", f"{privacy.LOCAL}: local paths (no "
           f"folder's name; a file's name kept)", f"{privacy.WITHHELD}: every configuration string under a key the "
           f"typed config does not declare a name (DSNs, hosts, addresses, passwords, notes, prompts, paths, "
           f"interpolations), and every field without a publish policy"]
    if ex.private_runs:
        out.append(f"the text of {ex.private_runs} run(s) whose context held a private agent's memory unit "
                   f"(LongMemEval-Org private runs, and any run that retrieved such a unit): answers, golds, errors, "
                   f"tool arguments and queries, judge prompts and replies, {ex.private_transcripts} transcript(s) "
                   f"and the system prompts only they used (publish with private_transcripts=true to include them)")
    if ex.unknown_runs:
        out.append(f"the text of {ex.unknown_runs} judgement(s) of runs no record holds (provenance unknown is "
                   f"private)")
    if ex.unreferenced_prompts:
        out.append(f"{ex.unreferenced_prompts} system prompt(s) no published transcript names")
    withheld = ex.publisher.withheld if ex.publisher else {}
    if withheld:
        out.append("withheld, by field: " + ", ".join(f"{k} {n}" for k, n in sorted(withheld.items())))
    if ex.withheld_files:  # counted, not named: a file's name is anyone's (notes_for_jdoe.txt, slurm-acme-44.out)
        out.append(f"{len(ex.withheld_files)} file(s) no publish policy names (their names stay home too)")
    return out + ex.left_out


def card_kept(ex: Export) -> list[str]:
    """What identifies who ran the stage, and private text the publisher asked for, that still goes along (the
    card says so)."""
    out = _kept(ex.hosts, ex.pids)
    if ex.included_private:
        out.append(f"PRIVATE: the text of {ex.included_private} run(s) whose context held a private agent's memory "
                   f"unit (answers, golds, tool arguments, transcripts, judge prompts), published because "
                   f"private_transcripts=true was asked")
    return out


def _kept(hosts: set[str], pids: bool) -> list[str]:
    out = []
    if hosts:
        out.append("the host names that ran the stage (driver lock, sessions): " + ", ".join(sorted(hosts)))
    if pids:
        out.append("the process ids of the stage's drivers (driver lock, sessions)")
    return out


def json_texts(value: Any, depth: int = 4) -> Iterator[str]:
    """The strings a cell holds, JSON decoded: a cell of JSON text (a transcript's messages, a tool's JSON
    arguments inside them) is scanned string by string, as it reads once decoded. Scanning the encoded text
    would read its escapes as text: `?\\n\\nsibling` is a UNC path by shape, a newline once decoded."""
    if isinstance(value, str):
        t = value.strip()
        if depth and t[:1] in ('{', '[', '"'):
            try:
                decoded = json.loads(t)
            except ValueError:
                decoded = value
            if decoded != value:
                yield from json_texts(decoded, depth - 1)
                return
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from json_texts(k, depth)
            yield from json_texts(v, depth)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from json_texts(v, depth)


def leaks(ex: Export, card_text: str) -> None:
    """The last check before anything is written: every cell of every table, the card and the
    pre-registration files, scanned for what still looks like a credential, a URL with its host or a
    local path; one is refused, named by table, column and row."""
    found = []
    env = privacy.env_secrets()

    def check(where: str, text: Any, words: bool = True) -> None:
        if isinstance(text, str) and text:
            found.extend(f"{where}: {x}" for x in privacy.leaks(text, ex.private, env, words))

    for t in TABLES:
        for row in ex.rows[t.name]:
            place = ", ".join(f"{k}={row.get(k)}" for k in t.keys)
            for col, value in row.items():
                if col == "content" and (row.get("folder"), row.get("path")) in ex.generated:
                    continue  # the generator's own bytes, made again here from its seed: nothing of this machine
                for text in json_texts(value):
                    check(f"table {t.name!r} ({place}) column {col!r}", text)
    # the card's own counts name the withheld fields by their key paths (stage_config.cache_dir): the harness's
    # structure, which a withheld value (`.cache`) may be a part of; that line is scanned for shapes and this
    # machine's keys only, never refused for holding a withheld value's text
    by_field = "withheld, by field: "
    # the card and the pre-registration are the harness's own words around the stage's identifiers: a configured
    # name that is also a word of theirs (`files`, `app`) is no leak there (identifiers are never replaced)
    check(CARD, "\n".join(x for x in card_text.splitlines() if by_field not in x), words=False)
    for x in card_text.splitlines():
        if by_field in x:
            found.extend(f"{CARD}: {y}" for y in privacy.leaks(x, None, env))
    for e in prereg_texts(ex).values():
        check(str(e.get("file")), e.get("text"), words=False)
    if found:
        more = f" (and {len(found) - 10} more)" if len(found) > 10 else ""
        raise PublishError("refused to publish what looks private after redaction: " + "; ".join(found[:10]) + more)


# ------------------------------------------------------------------------------ writing


def _number(x: Any, default: float = 0.0) -> float:
    """A count of the card's totals: a number as it is; anything else (a field withheld as `<withheld>`) counts as
    `default`."""
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else default


def _totals(rows: list[dict]) -> dict:
    per: dict[str, dict] = {}
    for r in rows:
        t = per.setdefault(r["folder"], {"runs": 0, "failed": 0, "model_calls": 0, "tokens": 0, "cost_list_usd": 0.0})
        tok = json.loads(r["tokens"]) if r.get("tokens") else {}
        prices = json.loads(r["prices"]) if r.get("prices") else {}
        usd = prices.get("usd_per_currency", 1.0) if isinstance(prices, dict) else 1.0
        t["runs"] += 1
        t["failed"] += r.get("status") == "failed"
        t["model_calls"] += int(_number(r.get("model_calls")))
        t["tokens"] += int(_number(tok.get("prompt"))) + int(_number(tok.get("output"))) if isinstance(tok, dict) else 0
        t["cost_list_usd"] += _number(r.get("cost_list")) * _number(usd, 1.0)
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


def stage_meta(info: dict) -> dict:
    """What the card says of one stage, from its stage.json (and checked against it when read)."""
    model = info.get("model") or {}
    return {
        "kind": studies.get(info.get("kind")).kind, "stage": info.get("stage"), "label": info.get("label"),
        "seed": info.get("seed"), "config_hash": info.get("config_hash"), "created": info.get("created"),
        "code": info.get("code"), "data": {k: v for k, v in (info.get("data") or {}).items() if k != "path"},
        "model": {k: model.get(k) for k in ("name", "model", "provider")}, "prices": model.get("prices"),
        "offpeak": model.get("offpeak"), "fidelity": info.get("fidelity"), "sweep": info.get("sweep"),
    }


def metadata(ex: Export, hashes: dict[str, str]) -> dict:
    from harness.records.provenance import code_revision

    pre = prereg_texts(ex)
    return {"format": FORMAT_VERSION, "stages": {n: stage_meta(i) for n, i in ex.infos.items()}, "tables": hashes,
            "files": sorted({e["file"]: sha256(e["text"]) for e in pre.values() if e.get("file")}.items()),
            "totals": _totals(ex.rows["runs"]),
            "prereg": {n: {k: v for k, v in e.items() if k != "text"} for n, e in pre.items()},
            "published_with": ex.publisher.publish("code", code_revision(analysis_repo())),  # as a record's code
            "left_out": card_left_out(ex), "kept": card_kept(ex), "replaced": ex.private.summary()}


def _md(value: Any) -> str:
    """A value in the card's Markdown: its HTML escaped, so a label or model name is shown, never rendered."""
    import html

    return html.escape(str(value), quote=False)


def card_text(meta: dict, counts: dict[str, int]) -> str:
    """The dataset card, a function of its `memspace` block and the tables' row counts alone, so a
    reader re-derives it and any edit of its body is found."""
    hashes = meta["tables"]
    configs = [{"config_name": t, "data_files": [{"split": "train", "path": f"{t}/train.parquet"}]} for t in hashes]
    header = {"license": LICENSE, "pretty_name": "memspace-harness stage results: " + ", ".join(meta["stages"]),
              "tags": ["agent-memory", "evaluation", "longmemeval"], "configs": configs, CARD_KEY: meta}
    body = ["# " + _md(header["pretty_name"]), "",
            ("Written by `make publish` of memspace-harness. Load a table with "
            "`datasets.load_dataset(DIR, NAME)`; re-analyse with `make analyze RUNS=DIR`, which rebuilds the stage "
            "folders from these tables, checks every table against the sha256 in this card's header, every "
            "file against the `files` table and this card against them, and writes the same results as the "
            "original folders."), "", "## Tables", ""]
    for t in TABLES:
        if t.name in hashes:
            body.append(f"- `{t.name}`: {t.about} ({counts.get(t.name, 0)} rows)")
        else:
            body.append(f"- `{t.name}`: no rows in these stages (no config)")
    body += ["", "## Left out", ""] + [f"- {_md(x)}" for x in meta.get("left_out") or []]
    if meta.get("kept"):
        body += ["", "## Kept", ""] + [f"- {_md(x)}" for x in meta["kept"]]
    for name, st in meta["stages"].items():
        pre = meta["prereg"].get(name) or {}
        body += ["", f"## {_md(name)}", "", (f"- study kind: `{_md(st['kind'])}`; seed {_md(st['seed'])}; config "
                 f"sha256 `{_md(st['config_hash'])}`"), (f"- code revision: `{_md((st['code'] or {}).get('commit'))}` "
                 f"(uncommitted changes: {_md((st['code'] or {}).get('dirty'))})"),
                 f"- data: {_md(st['data'].get('kind'))}, sha256 `{_md(st['data'].get('sha256'))}`",
                 f"- reader: {_md(st['model'].get('name'))} ({_md(st['model'].get('model'))}); prices "
                 f"{_md(st['prices'])}",
                 f"- pre-registration: `{_md(pre.get('path'))}` sha256 `{_md(pre.get('sha256'))}`"
                 + (f" ([{pre['file']}]({pre['file']}))" if pre.get("file")
                    else " (this tree does not hold that file: not included)"),
                 f"- totals: {_md((meta.get('totals') or {}).get(name))}", "",
                 "Fidelity manifest (the stage beside the paper):", "",
                 "| setting | paper | stage | status |", "| --- | --- | --- | --- |"]
        for r in (st.get("fidelity") or {}).get("rows") or []:
            cells = [_md(r.get(k, "")).replace("|", "\\|").replace("\n", " ") for k in ("setting", "paper", "stage",
                                                                                         "status")]
            body.append("| " + " | ".join(cells) + " |")
    return "---\n" + yaml.safe_dump(header, sort_keys=False, allow_unicode=True, width=10**6) + "---\n" + \
        "\n".join(body) + "\n"


def card(ex: Export, hashes: dict[str, str]) -> str:
    return card_text(metadata(ex, hashes), {t.name: len(ex.rows[t.name]) for t in TABLES})


def _written_by(meta: dict) -> list[str]:
    """The files a dataset card says this harness wrote (README, tables, pre-registration files)."""
    return [CARD] + [f"{t}/train.parquet" for t in meta.get("tables") or {}] + \
        [str(f) for f, _ in meta.get("files") or []]


def _earlier_files(out: Path, old: dict) -> list[str]:
    """The files of `out` an earlier publish wrote, by the card there: only paths of the shapes publish
    writes, inside `out`, regular files, each holding the sha256 that card gives it (the card in a folder
    may be anyone's: it must not name a file outside, or one its user put there, for deletion)."""
    want = {CARD: None} | {f"{t}/train.parquet": h for t, h in (old.get("tables") or {}).items() if t in BY_NAME}
    want |= {str(f): h for f, h in old.get("files") or [] if str(f).startswith("prereg/") and str(f).count("/") == 1}
    out_real, found = out.resolve(), []
    for rel, h in want.items():
        p = out / rel
        try:
            inside = "\\" not in rel and ".." not in rel.split("/") and p.resolve().parent == (out_real / rel).parent
        except (OSError, ValueError):
            continue
        if inside and p.is_file() and not p.is_symlink() and (h is None or sha256(p.read_bytes()) == h):
            found.append(rel)
    return found


def write(ex: Export, out: str | Path) -> Path:
    """Write the dataset into `out` (a new or empty folder, or one this wrote). Files of an earlier
    publish are replaced; nothing else in the folder is touched (a data file its user put there)."""
    import datasets

    datasets.disable_progress_bars()
    out = Path(out)
    old = None
    if out.exists() and any(out.iterdir()) and not (out / CARD).exists():
        raise PublishError(f"{out} exists and holds no dataset card: choose an empty or new folder")
    if out.exists() and (out / CARD).exists():
        old = read_card(out)
        if old is None:
            raise PublishError(f"{out} holds a README.md that is not a dataset this harness wrote: choose another "
                               f"folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.publish-", dir=out.parent))
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
        text = card(ex, hashes)
        leaks(ex, text)
        (tmp / CARD).write_text(text, encoding="utf-8")
        new = _written_by(read_card(tmp))
        out.mkdir(exist_ok=True)
        earlier = _earlier_files(out, old or {})
        for rel in earlier:  # what the earlier publish wrote and this one does not
            if rel not in new:
                (out / rel).unlink()
        for rel in new:
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).replace(out / rel)
        for d in sorted({(out / rel).parent for rel in earlier}, reverse=True):
            if d != out and d.is_dir() and not any(d.iterdir()):
                d.rmdir()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def publish(paths: Iterable[str | Path], out: str | Path, private_transcripts: bool = False,
            dry_run: bool = False, say=print) -> Export:
    ex = collect(paths, private_transcripts)
    say(plan(ex))
    if dry_run:
        leaks(ex, card(ex, {t.name: "" for t in TABLES if ex.rows[t.name]}))
    else:
        write(ex, out)
        say(f"wrote {out}/ ({sum(1 for t in TABLES if ex.rows[t.name])} tables and {CARD})")
    return ex


class PushFailed(RuntimeError):
    """The Hub refused or could not be reached; what happened and what the repository holds now."""

    exit_code = 3  # harness.failures.STOPPED: fix the cause (token, network, Hub), run the same command


def push(folder: str | Path, repo_id: str, token: str | None = None, endpoint: str | None = None,
         public: bool = False, say=print) -> str:
    """Upload a written dataset folder to the Hub as a dataset repository, private unless `public`.

    The repository's visibility is read first (an existing public repository is refused unless `public`),
    and read again after it is created; the upload is one commit, so a failed push leaves the repository
    as it was. `endpoint` defaults to the Hub (huggingface_hub reads HF_ENDPOINT); a test points it at a
    loopback server."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RepositoryNotFoundError

    folder = Path(folder)
    meta = read_card(folder)
    if meta is None:
        raise PublishError(f"{folder}: not a dataset written by make publish")
    with tempfile.TemporaryDirectory(prefix="memspace-push-check-") as tmp:
        rebuild(folder, tmp)  # what is pushed reads back: every table, file and the card checked
    api = HfApi(endpoint=endpoint, token=token)
    want = "public" if public else "private"
    step, created = "reading the repository's visibility", False
    try:
        try:
            info = api.repo_info(repo_id, repo_type="dataset")
        except RepositoryNotFoundError:
            step = "creating the repository"
            api.create_repo(repo_id, repo_type="dataset", private=not public, exist_ok=False)
            created = True
            step = "reading the new repository's visibility"
            info = api.repo_info(repo_id, repo_type="dataset")
        private = bool(getattr(info, "private", False))
        if not private and not public:
            raise PublishError(f"{repo_id} is a public dataset repository: refused to push to it (make it private "
                               f"on the Hub, choose another name, or push with public=true)"
                               + ("; it was created now, as private, and the Hub made it public: it holds nothing"
                                  if created else "; nothing was sent"))
        say(f"uploading {folder} to the dataset repository {repo_id} ({'private' if private else 'public'}"
            f"{', created now' if created else ', existing'})")
        step = "committing the dataset's files"
        result = api.upload_folder(repo_id=repo_id, repo_type="dataset", folder_path=str(folder),
                                   allow_patterns=_written_by(meta),  # never a data file its user put there
                                   commit_message="memspace-harness: publish stage results")
    except PublishError:
        raise
    except Exception as exc:  # the client's errors (HTTP, connection, refused commit): said, never a traceback
        libs = {(c.__module__ or "").split(".")[0] for c in type(exc).__mro__}
        # an answer the client cannot read (a proxy's or a sign-in portal's HTML page, a body without its fields)
        unread = isinstance(exc, (ValueError, KeyError, TypeError)) and not libs & {"huggingface_hub"}
        if not (libs & {"huggingface_hub", "httpx", "httpcore", "requests", "urllib3"} or isinstance(exc, OSError)
                or unread):
            raise
        committing = step == "committing the dataset's files"
        left = (f"the Hub's answer could not be read: whether {repo_id} holds this commit is unknown (look at it on "
                f"the Hub{'; it was created now' if created else ''})" if unread and committing
                else f"the repository {repo_id} was created ({want}) and holds no commit of this dataset" if created
                else f"the repository {repo_id} is as it was (the upload is one commit, never made; files sent for "
                     f"it, if any, belong to no commit)"
                if committing else f"nothing was changed on the Hub")
        raise PushFailed(f"push to {repo_id} failed while {step}: {type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''}; {left}") from None
    return str(getattr(result, "commit_url", result))


# ------------------------------------------------------------------------------ reading a published dataset


class _NoAliases(yaml.SafeLoader):
    """A card's YAML without anchors and aliases (a crafted card could nest them to any size)."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            raise yaml.YAMLError("the card's YAML uses an alias; a card this harness writes has none")
        return super().compose_node(parent, index)


def _card_parts(folder: Path) -> tuple[str, dict] | None:
    p = Path(folder) / CARD
    if not p.is_file() or p.is_symlink() or p.stat().st_size > MAX_CARD_BYTES:
        return None
    text = p.read_text(encoding="utf-8", errors="replace")
    if not text.startswith("---\n"):
        return None
    head, sep, _ = text[4:].partition("\n---\n")
    if not sep:
        return None
    try:
        meta = (yaml.load(head, Loader=_NoAliases) or {}).get(CARD_KEY)
    except (yaml.YAMLError, AttributeError, RecursionError):  # a crafted card may nest past the stack
        return None
    return (text, meta) if isinstance(meta, dict) and "tables" in meta else None


def read_card(folder: Path) -> dict | None:
    """The card's `memspace` block, or None when `folder` is no dataset this harness wrote."""
    parts = _card_parts(folder)
    return parts[1] if parts else None


def is_published(folder: str | Path) -> bool:
    return read_card(Path(folder)) is not None


IGNORED = (".gitattributes", ".git/", ".cache/huggingface/")  # what a Hub download or clone adds beside the card
IGNORED_DIRS = tuple(i for i in IGNORED if i.endswith("/"))  # a folder's files; the others: that very file


def _inside(folder: Path, rel: str, what: str) -> Path:
    """`folder / rel` when `rel` is a plain relative path that stays inside `folder` (no `..`, no absolute
    path, no drive, no symlink out); refused by name otherwise."""
    if not isinstance(rel, str) or not rel or "\\" in rel or "\x00" in rel:
        raise PublishError(f"{folder}: {what} {rel!r} is not a relative path: refused")
    parts = rel.split("/")
    if rel.startswith("/") or len(parts) > MAX_PATH_PARTS or any(
            p in ("", ".", "..") or _name_bytes(p) > 255 for p in parts) or ":" in parts[0]:
        raise PublishError(f"{folder}: {what} {rel!r} leaves its folder or is no plain relative path: refused")
    if not _resolves_inside(folder / rel, folder):
        raise PublishError(f"{folder}: {what} {rel!r} resolves outside its folder (a symlink?): refused")
    return folder / rel


def _resolves_inside(path: Path, folder: Path) -> bool:
    """Whether `path`, its symlinks followed, stays inside `folder`; a symlink loop (RuntimeError) does not."""
    try:
        return path.resolve().is_relative_to(folder.resolve())
    except (OSError, RuntimeError):
        return False


def _name_bytes(part: str) -> int:
    """A path part's length as the file system counts it (NAME_MAX is 255 bytes, not characters); one the
    file system cannot encode (a lone surrogate) counts as too long."""
    try:
        return len(os.fsencode(part))
    except UnicodeError:
        return 1 << 30


def check_folder(folder: Path, meta: dict) -> None:
    """Every file of a dataset folder is one the card names (or the data file put beside it), a regular
    file inside the folder; anything else is refused, named."""
    allowed = set(_written_by(meta))
    extra, links = [], []
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        if p.is_symlink():
            if not _resolves_inside(p, folder):
                links.append(rel)
            continue
        if p.is_dir() or rel in allowed or rel in IGNORED or rel.startswith(IGNORED_DIRS):
            continue
        if rel.startswith("data/") and rel.count("/") == 1:
            continue  # a data file its user put beside the card: the replay checks its sha256 against stage.json
        extra.append(rel)
    if links:
        raise PublishError(f"{folder}: symlink(s) out of the dataset's folder: {', '.join(links[:5])}: refused")
    if extra:
        raise PublishError(f"{folder}: file(s) the card does not name: {', '.join(extra[:5])}"
                           f"{' ...' if len(extra) > 5 else ''}: refused (a dataset holds only what publish wrote, "
                           f"and data/<file> for the replay)")
    for rel, want in meta.get("files") or []:
        p = _inside(folder, str(rel), "the card's file")
        if not p.is_file() or sha256(p.read_bytes()) != want:
            raise PublishError(f"{folder}: {rel} is missing or does not match the card's sha256: refused")


def decoded_limit(folder: Path, meta: dict, max_bytes: int | None = None) -> int:
    """What the dataset may decode to: MAX_RATIO times its tables' size on disk (at least RATIO_FLOOR), and no more
    than the total the analyst allows (`max_bytes`, else MEMSPACE_DATASET_MAX_BYTES, else MAX_REBUILT_BYTES)."""
    total = max_bytes or int(os.environ.get("MEMSPACE_DATASET_MAX_BYTES") or 0) or MAX_REBUILT_BYTES
    compressed = 0
    for name in meta.get("tables") or {}:
        p = folder / str(name) / "train.parquet"
        compressed += p.stat().st_size if p.is_file() and not p.is_symlink() else 0
    return min(total, max(RATIO_FLOOR, MAX_RATIO * compressed))


def _too_large(folder: Path, limit: int, what: str) -> PublishError:
    return PublishError(f"{folder}: {what} more than {limit >> 20} MiB ({MAX_RATIO} times its tables' size, at least "
                        f"{RATIO_FLOOR >> 20} MiB, and at most MEMSPACE_DATASET_MAX_BYTES, default "
                        f"{MAX_REBUILT_BYTES >> 20} MiB): refused")


def read_tables(folder: Path, max_bytes: int | None = None) -> dict[str, list[dict]]:
    """Every table, checked against the card's sha256 first; a table that differs is refused, named."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    meta = read_card(folder)
    if meta is None:
        raise PublishError(f"{folder}: no dataset card of this harness ({CARD} with a `{CARD_KEY}` block)")
    if meta.get("format") != FORMAT_VERSION:
        raise PublishError(f"{folder}: dataset format {meta.get('format')!r}; this harness reads {FORMAT_VERSION}")
    if not isinstance(meta.get("tables"), dict) or not isinstance(meta.get("stages"), dict) \
            or not isinstance(meta.get("prereg"), dict) or not isinstance(meta.get("files") or [], list):
        raise PublishError(f"{folder}: the card's `{CARD_KEY}` block is not what this harness writes: refused")
    for name in meta["tables"]:
        if name not in BY_NAME:
            raise PublishError(f"{folder}: the card names a table {name!r} this harness does not know")
    check_folder(folder, meta)
    out: dict[str, list[dict]] = {t.name: [] for t in TABLES}
    decoded, limit = 0, decoded_limit(folder, meta, max_bytes)
    for name, want in meta["tables"].items():
        path = _inside(folder, f"{name}/train.parquet", "table")
        if not path.is_file():
            raise PublishError(f"{folder}: table {name!r} is missing ({path.relative_to(folder)})")
        if path.stat().st_size > MAX_TABLE_BYTES:
            raise PublishError(f"{folder}: table {name!r} is larger than {MAX_TABLE_BYTES >> 20} MiB: refused")
        got = sha256(path.read_bytes())
        if got != want:
            raise PublishError(f"{folder}: table {name!r} does not match the card's sha256 (card {str(want)[:16]}, "
                               f"file {got[:16]}): the dataset was changed after it was published; refused")
        try:
            pf = pq.ParquetFile(path, read_dictionary=[c for c, k in columns(BY_NAME[name]).items()
                                                       if k in ("string", "json")])
            want_cols = set(columns(BY_NAME[name]))
            if set(pf.schema_arrow.names) != want_cols:
                raise PublishError(f"{folder}: table {name!r} has other columns than this harness writes: refused")
            if pf.metadata.num_rows > MAX_FILES * 100:
                raise PublishError(f"{folder}: table {name!r} has {pf.metadata.num_rows} rows: more than a dataset "
                                   f"may hold")
            declared = _declared_bytes(path, pf)  # from the page headers, before a page is decompressed
            if decoded + declared > limit:
                raise _too_large(folder, limit, f"its tables declare (table {name!r}: {declared} bytes) pages of")
            rows: list[dict] = []
            for batch in pf.iter_batches(batch_size=1024):
                decoded += sum(_decoded_bytes(col) for col in batch.columns)
                if decoded > limit:  # a value repeated by its dictionary: sized before it is decoded
                    raise _too_large(folder, limit, f"its tables decode (table {name!r} at row {len(rows)}) to")
                rows += batch.to_pylist()  # to_pylist keeps null apart from NaN
        except (pa.ArrowException, OSError) as exc:
            raise PublishError(f"{folder}: table {name!r} is not a readable parquet file ({exc}): refused") from None
        out[name] = rows
        seen: set[tuple] = set()
        for row in out[name]:  # a row is placed by its keys: a second row there is no row this harness wrote
            key = tuple(str(row.get(k)) for k in BY_NAME[name].keys)
            if key in seen:
                raise PublishError(f"{folder}: table {name!r} holds {dict(zip(BY_NAME[name].keys, key))} twice: "
                                   f"refused")
            seen.add(key)
    if len(out["files"]) > MAX_FILES:
        raise PublishError(f"{folder}: {len(out['files'])} files in table 'files': more than {MAX_FILES}: refused")
    return out


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise ValueError("a page header ends inside a number")
        b = buf[i]
        out |= (b & 0x7F) << shift
        i, shift = i + 1, shift + 7
        if not b & 0x80:
            return out, i


def _skip(buf: bytes, i: int, t: int, depth: int = 0) -> int:
    """Past one compact-thrift value of type t (what a parquet page header is written in)."""
    if depth > 16:
        raise ValueError("a page header nested too deep")
    if t in (1, 2):
        return i
    if t == 3:
        return i + 1
    if t in (4, 5, 6):
        return _varint(buf, i)[1]
    if t == 7:
        return i + 8
    if t == 8:
        n, i = _varint(buf, i)
        return i + n
    if t in (9, 10):
        head = buf[i]
        i += 1
        n, et = head >> 4, head & 0x0F
        if n == 15:
            n, i = _varint(buf, i)
        for _ in range(n):
            i = _skip(buf, i, et, depth + 1)
        return i
    if t == 11:
        n, i = _varint(buf, i)
        if n:
            kv = buf[i]
            i += 1
            for _ in range(n):
                i = _skip(buf, _skip(buf, i, kv >> 4, depth + 1), kv & 0x0F, depth + 1)
        return i
    if t == 12:
        return _struct(buf, i, depth + 1)[1]
    raise ValueError(f"a page header holds a thrift type {t}")


def _struct(buf: bytes, i: int, depth: int = 0) -> tuple[dict[int, int], int]:
    """A compact-thrift struct: its integer fields by id (the rest skipped), and where it ends."""
    fields: dict[int, int] = {}
    fid = 0
    while True:
        if i >= len(buf):
            raise ValueError("a page header is cut short")
        head = buf[i]
        i += 1
        if head == 0:
            return fields, i
        t, delta = head & 0x0F, head >> 4
        if delta:
            fid += delta
        else:
            z, i = _varint(buf, i)
            fid = (z >> 1) ^ -(z & 1)
        if t in (5, 6) and depth == 0:
            z, i = _varint(buf, i)
            fields[fid] = (z >> 1) ^ -(z & 1)
        else:
            i = _skip(buf, i, t, depth)


def _declared_bytes(path: Path, pf) -> int:
    """What a parquet file's pages say they decompress to (each page header's uncompressed_page_size), read from
    the headers before any page is decompressed: a 21 KB table holding one 512 MiB zstd value is refused at this
    figure, not after decoding it (the column chunks' own totals are the writer's word, the headers are what the
    reader allocates)."""
    total = 0
    with open(path, "rb") as fh:
        md = pf.metadata
        for g in range(md.num_row_groups):
            for c in range(md.num_columns):
                col = md.row_group(g).column(c)
                start = col.dictionary_page_offset if col.has_dictionary_page and col.dictionary_page_offset \
                    else col.data_page_offset
                end = start + col.total_compressed_size
                pos = start
                while pos < end:
                    fh.seek(pos)
                    head = fh.read(4096)
                    try:
                        fields, n = _struct(head, 0)
                    except (ValueError, IndexError):
                        raise PublishError(f"{path}: a page header of column {c} is not one parquet writes: "
                                           f"refused") from None
                    size, compressed = fields.get(2, -1), fields.get(3, -1)
                    if size < 0 or compressed < 0:
                        raise PublishError(f"{path}: a page header of column {c} names no sizes: refused")
                    total += size
                    pos += n + compressed
    return total


def _decoded_bytes(col) -> int:
    """What a column of a batch takes once decoded to values (a dictionary column: each row its value's size;
    a 2 GiB table may hold one long value a billion times)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_dictionary(col.type):
        values = col.dictionary
        sizes = pc.binary_length(values) if pa.types.is_string(values.type) or pa.types.is_binary(values.type) \
            else pa.array([values.nbytes // max(len(values), 1)] * len(values), pa.int64())
        return int(pc.sum(pc.take(sizes, col.indices)).as_py() or 0) + col.indices.nbytes
    return col.nbytes


def rebuild(folder: str | Path, into: str | Path, max_bytes: int | None = None) -> list[Path]:
    """Write the stage folders of a published dataset under `into` (<stage>/<label>/), each file checked
    against its sha256 in `files` and the card against them all, before anything is written; returns the
    stage folders. A dataset is untrusted input: a path that leaves its folder, a card that says other
    than the tables, a file the card does not name or more than the bounds (MAX_*) is refused, named."""
    folder, into = Path(folder), Path(into)
    try:
        tables = read_tables(folder, max_bytes)
        texts = _rebuilt_texts(folder, tables, decoded_limit(folder, read_card(folder) or {}, max_bytes))
        _check_card(folder, tables, texts)
        _check_data_files(folder, texts)
    except PublishError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError) as exc:  # JSON nested deep
        raise PublishError(f"{folder}: its tables are not what this harness writes ({type(exc).__name__}: {exc}): "
                           f"refused") from None
    roots = []
    for (stage_folder, rel), text in texts.items():  # every path checked above; now written
        stage, _, label = stage_folder.partition("/")
        root = into / stage / label
        if root not in roots:
            roots.append(root)
        dest = root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(dest, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
    for root in roots:  # a folder rebuilt from a dataset: the replay takes no file of this machine from it
        (root / RECEIVED).write_text("rebuilt from a published dataset: data, never configuration\n", encoding="utf-8")
    for root in roots:  # data that did not go along, put beside the card by its user (the replay checks its sha256)
        name = _data_name(json.loads((root / "stage.json").read_text(encoding="utf-8")))
        src = folder / "data" / name if name else None
        if src and not (root / "data" / name).exists() and src.is_file() and not src.is_symlink():
            (root / "data").mkdir(exist_ok=True)
            (root / "data" / name).symlink_to(src.resolve())
    return roots


def _check_data_files(folder: Path, texts: dict[tuple[str, str], str]) -> None:
    """Beside the card, data/ holds only the data files the stages name (check_folder let any data/<file> by,
    as only the rebuilt stage.json files say which)."""
    names = {_data_name(_parsed(t)) for (_, rel), t in texts.items() if rel == "stage.json"}
    found = sorted(q for q in (folder / "data").iterdir() if not q.is_dir() or q.is_symlink()) \
        if (folder / "data").is_dir() and not (folder / "data").is_symlink() else []
    extra = [f"data/{q.name}" for q in found if q.name not in names]
    if extra:
        raise PublishError(f"{folder}: file(s) the card does not name: {', '.join(extra[:5])}"
                           f"{' ...' if len(extra) > 5 else ''}: refused (data/ holds only the data file a stage's "
                           f"stage.json names: {', '.join(sorted(n for n in names if n)) or 'none'})")


def _data_name(info: Any) -> str | None:
    """The data file's name in a stage.json (its path's last part), when it is a plain file name."""
    raw = str(((info or {}).get("data") or {}).get("path") or "") if isinstance(info, dict) else ""
    name = raw.replace("\\", "/").rsplit("/", 1)[-1]
    return name if name and name not in (".", "..") and "<" not in name and "\x00" not in name and len(name) <= 255 else None


def _rebuilt_texts(folder: Path, tables: dict[str, list[dict]], limit: int = MAX_REBUILT_BYTES
                   ) -> dict[tuple[str, str], str]:
    """Every file of every stage folder, (stage/label, path) -> text, each path checked to stay inside its
    folder and each text against its sha256; nothing is written here."""
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
    out: dict[tuple[str, str], str] = {}
    total = 0
    dirs: set[tuple[str, str]] = set()
    for f in tables["files"]:
        stage_folder = f["folder"]
        if not isinstance(stage_folder, str) or stage_folder.count("/") != 1:
            raise PublishError(f"{folder}: a stage folder named {stage_folder!r} in table 'files' (not <stage>/<label>)"
                               f": refused")
        _inside(Path("/nonexistent-root"), stage_folder, "stage folder")
        _inside(Path("/nonexistent-root") / stage_folder, f["path"], f"file of {stage_folder}")
        key = (stage_folder, f["path"])
        if key in out:
            raise PublishError(f"{folder}: {stage_folder}/{f['path']} is twice in table 'files': refused")
        parts = f["path"].split("/")
        if any(p.startswith(".") for p in parts):  # publish writes no hidden file; the rebuilt folder's marker is one
            raise PublishError(f"{folder}: {stage_folder}/{f['path']}: a hidden file in table 'files': refused")
        dirs |= {(stage_folder, "/".join(parts[:i])) for i in range(1, len(parts))}
        fmt = json.loads(f["format"]) if f["format"] else None
        where = f"{folder}: {stage_folder}/{f['path']}"
        if fmt is not None and fmt not in _JSON_STYLES + [{"ensure_ascii": a, "lines": True} for a in (False, True)]:
            raise PublishError(f"{where}: a file format {f['format']!r} this harness does not write: refused")
        objs: Any = None  # what the file's rows say, for a file kept as text: they must agree with it
        if f["table"] == "runs" and key in runs:
            r = runs[key]
            objs = from_row(BY_NAME["runs"], r, nested.get((stage_folder, r["run_id"]),
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
        total += len(text)
        if total > limit:
            raise _too_large(folder, limit, "its files come to")
        out[key] = text
    clash = sorted(f"{s}/{p}" for s, p in dirs if (s, p) in out)
    if clash:
        raise PublishError(f"{folder}: {clash[0]} is both a file and a folder in table 'files': refused")
    named_data = sorted(s for s, p in out if p == "data")  # rebuild links the user's data file under data/
    if named_data:
        raise PublishError(f"{folder}: {named_data[0]}: a file named 'data' where the data folder goes, in table "
                           f"'files': refused")
    if any((s, "stage.json") not in out for s, _ in out):
        raise PublishError(f"{folder}: a stage folder without stage.json in table 'files': refused")
    return out


def _check_card(folder: Path, tables: dict[str, list[dict]], texts: dict[tuple[str, str], str]) -> None:
    """The card says what the tables say: each stage's block is what its rebuilt stage.json gives, its
    totals are the runs table's, its pre-registration is stage.json's, and its text (body included) is
    the one this harness writes from them; otherwise refused, naming what differs."""
    text, meta = _card_parts(folder)
    stages = sorted({s for s, _ in texts})
    if sorted(meta["stages"]) != stages:
        raise PublishError(f"{folder}: the card names stages {sorted(meta['stages'])}, the tables hold {stages}: "
                           f"refused")
    for name in stages:
        info = json.loads(texts[(name, "stage.json")])
        if meta["stages"][name] != json.loads(json.dumps(stage_meta(info))):
            diff = [k for k, v in stage_meta(info).items() if json.loads(json.dumps(v)) != meta["stages"][name].get(k)]
            raise PublishError(f"{folder}: the card's block of {name} differs from its stage.json in {diff}: the card "
                               f"was edited; refused")
        pre, said = info.get("prereg") or {}, meta["prereg"].get(name) or {}
        if (said.get("path"), said.get("sha256")) != (pre.get("path"), pre.get("sha256")) or (
                said.get("file") and said["file"] not in [f for f, _ in meta.get("files") or []]):
            raise PublishError(f"{folder}: the card's pre-registration of {name} differs from its stage.json: refused")
        if said.get("file"):
            p = _inside(folder, str(said["file"]), "pre-registration file")
            if not p.is_file() or sha256(p.read_bytes()) != pre.get("sha256"):
                raise PublishError(f"{folder}: {said['file']} is not the pre-registration file stage.json names "
                                   f"(sha256 {pre.get('sha256')}): refused")
    _check_kept_and_replaced(folder, meta, texts)
    if json.loads(json.dumps(_totals(tables["runs"]))) != meta.get("totals"):
        raise PublishError(f"{folder}: the card's totals differ from the runs table: the card was edited; refused")
    want = card_text(meta, {t: len(rows) for t, rows in tables.items()})
    if want != text:
        line = next(i for i, (a, b) in enumerate(zip(want.splitlines() + [""], text.splitlines() + [""]), 1) if a != b)
        raise PublishError(f"{folder}: {CARD} is not the card this harness writes for these tables (line {line} "
                           f"differs: {text.splitlines()[line - 1][:80] if line <= len(text.splitlines()) else ''!r})"
                           f": the card was edited; refused")


# which counts of the card's `replaced` may account for a placeholder in the tables (a URL that is no endpoint
# becomes <host>, a file URL's path <local path>/NAME, a secret in its path <key>: privacy._sanitize_url)
PLACEHOLDERS = {privacy.URL: ("endpoint urls",), privacy.HOST: ("other urls",),
                privacy.KEY: ("keys", "other urls"), privacy.LOCAL: ("local paths", "other urls")}


def _check_kept_and_replaced(folder: Path, meta: dict, texts: dict[tuple[str, str], str]) -> None:
    """The card's `kept` is what the rebuilt folders' driver locks and sessions show (host names, pids), and its
    `replaced` counts a kind of private string wherever the tables hold its placeholder; else refused."""
    hosts, pids = set(), False
    for (_, rel), text in texts.items():
        h, p = _who_ran(rel, text)
        hosts, pids = hosts | h, pids or p
    said = [k for k in meta.get("kept") or [] if not str(k).startswith("PRIVATE: ")]  # what the tables can show
    if said != _kept(hosts, pids):
        raise PublishError(f"{folder}: the card's kept block says {meta.get('kept') or []}, the tables show "
                           f"{_kept(hosts, pids)}: the card was edited; refused")
    replaced = meta.get("replaced") if isinstance(meta.get("replaced"), dict) else {}
    bad = {k: v for k, v in replaced.items() if type(v) is not int or v < 0}  # a bool is an int to isinstance
    if bad:
        raise PublishError(f"{folder}: the card's replaced block says {bad}, no count of what was replaced: "
                           f"the card was edited; refused")
    for mark, counts in PLACEHOLDERS.items():
        if not any(replaced.get(c, 0) > 0 for c in counts) and any(
                mark in t for t in texts.values()):
            raise PublishError(f"{folder}: the card's replaced block says no {' or '.join(counts)} were replaced, "
                               f"yet the tables hold {mark}: the card was edited; refused")


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
