"""Durable, self-describing run records under runs/<stage>/<label>/.

    config.yaml      the resolved config of the stage (written once)
    stage.json       config hash, seed, plan, versions, data sha256, prices, pre-registration hash
    attempts.jsonl   one line each time a run starts (its attempt number)
    records/<id>.json one file per finished run, written atomically: a run is recorded once
    ledger.jsonl     every model call, from the metering proxy

A kill -9 at any moment leaves at worst a started attempt without a record; the
next start of the same command runs it again under a higher attempt number and
marks the earlier attempt as interrupted in the ledger, so what was spent stays
in the accounts while per-run figures come from the finished attempt.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Iterable

from omegaconf import OmegaConf

# settings that do not change what a stage's runs measure: speed, where caches live, and the
# judge (each judgement records its own judge and prompt hash)
VOLATILE = ("concurrency", "dry_run", "cache_dir", "judge")


def config_hash(cfg) -> str:
    data = OmegaConf.to_container(cfg, resolve=True)
    for k in VOLATILE:
        data.pop(k, None)
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


class StageMismatch(RuntimeError):
    pass


def atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
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
    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.records_dir = self.root / "records"
        self.ledger_path = self.root / "ledger.jsonl"
        self.attempts_path = self.root / "attempts.jsonl"
        self.stage_path = self.root / "stage.json"

    @classmethod
    def for_stage(cls, cfg) -> "RunDir":
        return cls(Path(str(cfg.runs_dir)) / str(cfg.stage.name) / str(cfg.stage.label))

    def open(self, cfg, stage_info: dict) -> dict:
        """Create the folder, or check that an existing one was started with the same config."""
        self.records_dir.mkdir(parents=True, exist_ok=True)
        h = config_hash(cfg)
        if self.stage_path.exists():
            known = json.loads(self.stage_path.read_text())
            if known["config_hash"] != h:
                raise StageMismatch(
                    f"{self.root} was started with another configuration (hash {known['config_hash'][:12]}, "
                    f"now {h[:12]}); resume with the same overrides, or start anew with stage.label=NEW_LABEL")
            return known
        info = {"config_hash": h, **stage_info}
        atomic_write(self.root / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
        atomic_write(self.stage_path, json.dumps(info, indent=1, sort_keys=True, default=str))
        return info

    # --- attempts -----------------------------------------------------------------
    def attempts(self) -> dict[str, int]:
        """Highest attempt number started per run id."""
        out: dict[str, int] = {}
        if self.attempts_path.exists():
            for line in self.attempts_path.read_text().splitlines():
                try:
                    e = json.loads(line)
                except json.JSONDecodeError:
                    continue
                out[e["run"]] = max(out.get(e["run"], 0), e["attempt"])
        return out

    def start_attempt(self, run_id: str, attempt: int, ts: str) -> None:
        line = json.dumps({"run": run_id, "attempt": attempt, "ts": ts}) + "\n"
        with open(self.attempts_path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    # --- records ------------------------------------------------------------------
    def record_path(self, run_id: str) -> Path:
        return self.records_dir / f"{run_id}.json"

    def done(self) -> set[str]:
        return {p.stem for p in self.records_dir.glob("*.json")}

    def write_record(self, record: dict) -> None:
        atomic_write(self.record_path(record["run_id"]), json.dumps(record, indent=1, ensure_ascii=False,
                                                                      sort_keys=True, default=str))

    def records(self) -> Iterable[dict]:
        for p in sorted(self.records_dir.glob("*.json")):
            yield json.loads(p.read_text(encoding="utf-8"))
