"""Durable, self-describing run records under runs/<stage>/<label>/.

    config.yaml       the resolved config of the stage (written once)
    stage.json        StageInfo: config hash, seed, plan, versions, data sha256, prices, pre-registration hash
    attempts.jsonl    one Attempt line each time a run starts
    records/<id>.json one RunRecord per finished run, written atomically: a run is recorded once
    prompts/<sha256>.txt  each distinct system prompt once; transcripts name it by its sha256
    ledger.jsonl      every model call, from the metering proxy (LedgerEvent lines)
    judgements/<judge>.jsonl  Judgement lines
    shards/<I>of<N>/  a shard's own ledger.jsonl, attempts.jsonl and lock (harness.records.shards)

A kill -9 at any moment leaves at worst a started attempt without a record; the
next start of the same command runs it again under a higher attempt number and
marks the earlier attempt as interrupted in the ledger, so what was spent stays
in the accounts while per-run figures come from the finished attempt. Everything
is written and read through harness.records.schema.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
import threading
from pathlib import Path
from typing import Iterable

from omegaconf import OmegaConf
from pydantic import BaseModel

from harness.records.ledger import read_ledger
from harness.records.schema import Judgement, StageInfo, dump, parse, read_json
from harness.records.shards import Shard, layouts, shard_dir


# settings that do not change what a stage's runs measure: speed, where caches live, what to
# retry, the judge (each judgement records its own judge and prompt hash), and which shard
# of the stage a driver runs (every shard shares the stage's stage.json)
VOLATILE = ("concurrency", "dry_run", "cache_dir", "judge", "retry_failed", "shard", "budget_usd", "memory_first",
            "allow_deviation")
# the same inside the model config: how patiently calls are retried
VOLATILE_MODEL = ("max_retries", "backoff_s", "timeout_s", "max_wait_s", "breaker_runs", "retry_budget_s")


def without_hydra(cfg):
    """A config composed with its hydra node (compose(..., return_hydra_config=True)) without it."""
    return OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]) if "hydra" in cfg else cfg


def config_hash(cfg, runtime: str | None = None) -> str:
    """The stage's identity: its config without VOLATILE settings, plus `runtime` (the runtime's
    distribution==version) when its conditions use the runtime: a stage resumed under another
    runtime would mix two runtimes' results (and read stores that runtime did not write)."""
    from harness.records.provenance import command_preset

    preset = command_preset(cfg)
    data = OmegaConf.to_container(without_hydra(cfg), resolve=True)
    # the preset was a config value (fidelity.preset) until issue 40: stages written before keep their hash
    data.setdefault("fidelity", {"preset": preset})
    for k in VOLATILE:
        data.pop(k, None)
    model, encoder = data.get("model"), data.get("encoder")
    for k in VOLATILE_MODEL:
        if isinstance(model, dict):
            model.pop(k, None)
    if isinstance(encoder, dict) and encoder.get("device") == "cpu":  # the default, as before the key
        encoder.pop("device")                                        # existed: earlier stages keep their hash
    if runtime is not None:
        data["runtime_code"] = runtime
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


class StageMismatch(RuntimeError):
    exit_code = 2  # harness.failures.BAD_INPUT


def atomic_write(path: Path, text: str) -> None:
    # unique per host, process and thread: shards on a shared filesystem, threads writing one prompt
    tmp = path.with_name(f".{path.name}.{socket.gethostname()}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(tmp, "w", encoding="utf-8", newline="") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


class RunDir:
    """One stage folder, as seen by one driver: `shard` (None = unsharded) picks where this
    driver's ledger and attempt log go; records, stage.json and judgements are shared."""

    def __init__(self, root: str | Path, shard: Shard | None = None):
        self.root = Path(root)
        self.shard = shard
        self.records_dir = self.root / "records"
        own = shard_dir(self.root, shard) if shard else self.root
        self.ledger_path = own / "ledger.jsonl"
        self.attempts_path = own / "attempts.jsonl"
        self.sessions_path = own / "sessions.jsonl"
        self.stage_path = self.root / "stage.json"

    @classmethod
    def for_stage(cls, cfg) -> "RunDir":
        return cls(Path(str(cfg.runs_dir)) / str(cfg.stage.name) / str(cfg.stage.label),
                   Shard.parse(cfg.get("shard")))

    def open(self, cfg, stage_info: dict, runtime: str | None = None) -> StageInfo:
        """Create the folder, or check that an existing one was started with the same config
        (and runtime: config_hash's `runtime`).

        Shards starting at once serialise here (a flock), so stage.json is written once."""
        self.records_dir.mkdir(parents=True, exist_ok=True)
        self.attempts_path.parent.mkdir(parents=True, exist_ok=True)
        h = config_hash(cfg, runtime)
        with open(self.root / ".open.lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if self.stage_path.exists():
                known = self.stage()
                if known.config_hash != h:
                    raise StageMismatch(
                        f"{self.root} was started with another configuration (hash {known.config_hash[:12]}, "
                        f"now {h[:12]}); resume with the same overrides, or start anew with stage.label=NEW_LABEL")
                return known
            info = StageInfo.model_validate({"config_hash": h, **stage_info})
            atomic_write(self.root / "config.yaml", OmegaConf.to_yaml(without_hydra(cfg), resolve=True))
            atomic_write(self.stage_path, dump(info))
            return info

    def attempt_paths(self) -> list[Path]:
        """Every attempt log of the stage: the unsharded one and each shard's."""
        return [(shard_dir(self.root, s) if s else self.root) / "attempts.jsonl" for s in layouts(self.root)]

    def ledger_paths(self) -> list[Path]:
        """Every metering ledger of the stage (each shard's and the top one, which the judge uses).

        HOOK: a spending cap or cost forecast for the whole stage sums the calls of these files,
        not only this driver's ledger."""
        top = [self.root / "ledger.jsonl"]
        return top + [shard_dir(self.root, s) / "ledger.jsonl" for s in layouts(self.root) if s]

    def stage(self) -> StageInfo:
        return read_json("stage", self.stage_path)

    # --- attempts -----------------------------------------------------------------
    def attempts(self) -> dict[str, int]:
        """Highest attempt number started per run id, over every attempt log of the stage, so
        attempt numbers keep growing when a stage is resumed with another shard layout."""
        out: dict[str, int] = {}
        for path in self.attempt_paths():
            for e in read_ledger(path):
                a = parse("attempt", e, path)
                out[a.run] = max(out.get(a.run, 0), a.attempt)
        return out

    def start_attempt(self, run_id: str, attempt: int, ts: str) -> None:
        line = json.dumps({"run": run_id, "attempt": attempt, "ts": ts}) + "\n"
        with open(self.attempts_path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def end_session(self, session: BaseModel) -> None:
        """One line per driver session that ended (harness.records.schema.DriverSession)."""
        with open(self.sessions_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(session.model_dump(), sort_keys=True) + "\n")

    def sessions(self) -> list[BaseModel]:
        return [parse("session", e, self.sessions_path) for e in read_ledger(self.sessions_path)]

    # --- records ------------------------------------------------------------------
    def record_path(self, run_id: str) -> Path:
        return self.records_dir / f"{run_id}.json"

    def record_paths(self) -> list[Path]:
        return sorted(self.records_dir.glob("*.json")) if self.records_dir.exists() else []

    @property
    def record_kind(self) -> str:
        return self.stage().record if self.stage_path.exists() else "record"  # stage.json names its records' schema

    def write_record(self, record: BaseModel | dict) -> None:
        """Validated before it is written: a writer's mistake fails here, not in a table later."""
        if not isinstance(record, BaseModel):
            record = parse(self.record_kind, record, self.records_dir)
        atomic_write(self.record_path(record.run_id), dump(record))

    def records(self) -> Iterable[BaseModel]:
        """Every record, validated; a file that does not validate raises RecordError naming it."""
        kind = self.record_kind
        for p in self.record_paths():
            yield read_json(kind, p)

    # --- system prompts -----------------------------------------------------------
    def prompt_path(self, sha256: str) -> Path:
        return self.root / "prompts" / f"{sha256}.txt"

    def write_prompt(self, text: str) -> str:
        """Store a system prompt once (content-addressed, atomically); returns its sha256."""
        sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
        path = self.prompt_path(sha)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, text)
        return sha

    def prompt(self, sha256: str) -> str | None:
        """A stored system prompt, or None when the folder does not hold it."""
        path = self.prompt_path(sha256)
        if not path.exists():
            return None
        with open(path, encoding="utf-8", newline="") as f:  # byte for byte: the sha256 must match
            return f.read()

    # --- judgements ---------------------------------------------------------------
    def judgements_path(self, judge_name: str) -> Path:
        return self.root / "judgements" / f"{judge_name}.jsonl"

    def judgements(self, judge_name: str) -> dict[tuple[str, str], Judgement]:
        """(run_id, kind) -> the latest judgement of that judge (a torn last line is ignored)."""
        out: dict[tuple[str, str], Judgement] = {}
        path = self.judgements_path(judge_name)
        for e in read_ledger(path):
            j = parse("judgement", e, path)
            out[(j.run_id, j.kind)] = j
        return out
