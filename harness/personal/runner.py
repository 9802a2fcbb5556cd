"""Run a personalization stage: every trial under every method, concurrently, resumable, metered.

`make run STAGE=personal` (150 trials x 4 methods for the configured model) or
`STAGE=personal_smoke` (the local model, offline, minutes). Runs go in a seeded
interleaved order on `concurrency` threads, so one user's writers run while other
users' assistants read: identity resolution and the write barrier are exercised by
the workload itself. Every model call (writers, Mem0's own, the assistant) passes the
metering proxy; each finished run is one atomically written JSON record
(harness/personal/record.py) in runs/<stage>/<label>/records/, so a killed stage
resumes where it stopped (an unfinished attempt is marked interrupted in the ledger).
"""

from __future__ import annotations

import random
import secrets
import sys
import threading
import time
import traceback
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from datetime import datetime, timezone
from pathlib import Path

from omegaconf import OmegaConf
from tqdm import tqdm

import conditions
from harness.data import personal as trials_data
from harness.data.longmemeval import sha256_file
from harness.endpoints.registry import open_endpoint
from harness.run.driver import mark_interrupted
from harness.endpoints.client import Agent, Meter, ModelCallFailed
from harness.records.provenance import code_revision, versions
from harness.endpoints.proxy import MeteringProxy
from harness.records.ledger import Ledger
from harness.records.schema import SCHEMA_VERSION
from harness.records import RunDir, StageMismatch
from harness.run import fidelity

from . import assistant, record
from harness.kernel.identity import IdentityResolver
from .method import RunCtx, Shared

def index_services(index_cfg) -> set[str]:
    """The services the stage's index reads, as its backend declares them (`service`)."""
    from omegaconf import DictConfig, OmegaConf

    from harness.memory.backends.base import backend_class

    cfg = OmegaConf.to_container(index_cfg, resolve=True) if isinstance(index_cfg, DictConfig) else dict(index_cfg)
    return {service for service, _ in backend_class(str(cfg["name"])).service_configs(cfg)}


def _services(cfg) -> None:
    """Start (and leave running, like `make services-up`) only what this stage reads: Mem0 uses PostgreSQL."""
    from harness import services

    needed = index_services(cfg.index)
    if any(str(cfg.stage.conditions[c].module) == "mem0_default" for c in cfg.stage.methods):
        needed.add("postgres")
    s = services.settings()
    if "postgres" in needed:
        services.pg_up(s)
    if "redis" in needed:
        services.redis_up(s)


def trials_path(cfg) -> Path:
    p = cfg.stage.trials
    path = Path(str(p.path)) if p.get("path") else trials_data.default_path(Path(str(cfg.cache_dir)) / "data",
                                                                          int(p.n), int(cfg.seed))
    return trials_data.ensure(path, int(p.n), int(cfg.seed))


def plan(cfg, trials: list[dict]) -> list[tuple[dict, str]]:
    """Every (trial, condition) once, in a seeded shuffle so methods and users interleave."""
    pairs = [(t, str(c)) for t in trials for c in cfg.stage.methods]
    random.Random(int(cfg.seed)).shuffle(pairs)
    return pairs


def _versions() -> dict:
    v = versions()
    from importlib import metadata

    try:
        v["mem0ai"] = metadata.version("mem0ai")
    except metadata.PackageNotFoundError:
        v["mem0ai"] = None
    return v


def stage_info(cfg, path: Path, runs: list[tuple[dict, str]]) -> dict:
    return {"schema_version": SCHEMA_VERSION, "prereg": None,
            "stage": str(cfg.stage.name), "label": str(cfg.stage.label), "kind": "personal", "seed": int(cfg.seed),
            "data": {"path": str(path), "sha256": sha256_file(path), "n": int(cfg.stage.trials.n)},
            "plan": {"runs": [f"{t['trial_id']}__{c}" for t, c in runs]},
            "versions": _versions(), "code": code_revision(Path(__file__).parent),
            "model": OmegaConf.to_container(cfg.model, resolve=True),
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "fidelity": fidelity.record(cfg, rows=fidelity.personal_manifest(cfg))}  # against the second paper


class PersonalRunner:
    def __init__(self, cfg, rd: RunDir, info: dict, shared: Shared):
        self.cfg, self.rd, self.info, self.shared = cfg, rd, info, shared
        self.model_cfg = shared.model_cfg
        self.totals = {"failed": 0, "tokens": 0}
        self._lock = threading.Lock()
        self.provenance = {
            "stage": info["stage"], "label": info["label"], "seed": info["seed"], "kind": "personal",
            "config_hash": info["config_hash"], "data_path": info["data"]["path"],
            "data_sha256": info["data"]["sha256"], "versions": info["versions"], "code": info["code"],
            "model": {k: self.model_cfg.get(k) for k in ("name", "provider", "model", "params")},
            "prices": self.model_cfg.get("prices"), "offpeak": self.model_cfg.get("offpeak"),
            "encoder": OmegaConf.to_container(cfg.encoder, resolve=True),
            "index": OmegaConf.to_container(cfg.index, resolve=True)}

    def execute(self, trial: dict, condition: str, attempt: int) -> dict:
        cond_cfg = self.cfg.stage.conditions[condition]
        meter = Meter(self.model_cfg["prices"], self.model_cfg.get("offpeak"))
        run_id = f"{trial['trial_id']}__{condition}"
        mc = self.model_cfg

        def agent(role: str, json: bool = False) -> Agent:
            cfg = dict(mc)
            if json:
                from .writers import JSON_PARAMS

                cfg["params"] = {**(mc.get("params") or {}), **JSON_PARAMS}
            return Agent(self.shared.proxy_url, cfg, run_id, attempt, meter, role=role,
                         max_retries=int(mc.get("max_retries", 6)), backoff_s=float(mc.get("backoff_s", 1.0)))

        ctx = RunCtx(trial, condition, self.shared, agent, meter, run_id, attempt)
        status, error, injected, answer, answer_s, finish, method = "ok", None, None, "", 0.0, {}, None
        self.shared.resolver.register_session(trial["session_id"], trial["user_id"])
        t0 = time.perf_counter()
        try:
            method = conditions.load(str(cond_cfg.module)).build(cond_cfg, ctx)
            t0 = time.perf_counter()  # building a method (loading Mem0) is setup, not the user's wait
            method.write()
            injected = method.inject()
            answer, answer_s, _ = assistant.answer(agent("assistant"), injected.block, trial["query"])
        except ModelCallFailed as exc:
            status, error = "failed", f"model: {exc}"
        except Exception as exc:  # recorded with its traceback, never skipped
            status, error = "failed", "".join(traceback.format_exception(exc))[-4000:]
        wall = time.perf_counter() - t0
        if method is not None:
            try:
                finish = method.finish()
            finally:
                method.close()
        return record.build(provenance=self.provenance, trial=trial, condition=condition,
                            cond_cfg=OmegaConf.to_container(cond_cfg, resolve=True), attempt=attempt, status=status,
                            error=error, injected=injected, answer=answer, answer_s=answer_s,
                            retrieval_s=injected.retrieval_s if injected else 0.0, wall_s=wall, finish=finish,
                            calls=list(meter.calls))

    def run_one(self, trial: dict, condition: str, attempt: int) -> dict:
        run_id = f"{trial['trial_id']}__{condition}"
        self.rd.start_attempt(run_id, attempt, datetime.now(timezone.utc).isoformat(timespec="milliseconds"))
        rec = self.execute(trial, condition, attempt)
        self.rd.write_record(rec)
        with self._lock:
            self.totals["failed"] += rec["status"] != "ok"
            self.totals["tokens"] += rec["tokens"]["prompt"] + rec["tokens"]["output"]
        return rec


def run_personal(cfg, sweep: dict | None = None) -> RunDir | None:
    path = trials_path(cfg)
    trials = trials_data.load(path)["trials"]
    runs = plan(cfg, trials)
    if cfg.get("dry_run"):  # the plan only: no folder, no service, no model call
        print("fidelity manifest (the second paper's study; stage.json):\n"
              + fidelity.render(fidelity.personal_manifest(cfg)))
        by = Counter(c for _, c in runs)
        print(f"stage {cfg.stage.name}  label {cfg.stage.label}  trials {path} ({len(trials)})\n"
              + "\n".join(f"  {c:<24}{n:>6} runs" for c, n in sorted(by.items()))
              + f"\ntotal runs {len(runs)} (dry run: nothing started)")
        return None
    rd = RunDir.for_stage(cfg)
    info = rd.open(cfg, stage_info(cfg, path, runs)).model_dump(mode="json")
    if info["data"]["sha256"] != sha256_file(path):
        raise StageMismatch(f"{rd.root}: the trials file changed since this stage started; use a new stage.label")
    done = {p.stem for p in rd.record_paths()}
    pending = [(t, c) for t, c in runs if f"{t['trial_id']}__{c}" not in done]
    print(f"{rd.root}: {len(runs)} runs planned, {len(done)} recorded, {len(pending)} to run", file=sys.stderr)
    if not pending:
        return rd
    _services(cfg)
    from harness.memory.encoder import load_encoder

    encoder = load_encoder(str(cfg.encoder.name), cache_dir=str(Path(str(cfg.cache_dir)) / "embeddings"))
    encoder.embed_query("warm-up")  # loading the encoder is setup, never part of a run's latency
    concurrency = max(1, int(cfg.stage.get("concurrency") or cfg.concurrency))
    attempts = rd.attempts()
    ledger = Ledger(rd.ledger_path)
    mark_interrupted(rd, ledger)
    model_cfg = OmegaConf.to_container(cfg.model, resolve=True)
    try:
        with open_endpoint(cfg.model) as endpoint, \
                MeteringProxy(endpoint.base_url, ledger, endpoint.key, float(cfg.model.get("timeout_s", 600)),
                              str(cfg.model.model)) as proxy, \
                ThreadPoolExecutor(max_workers=4 * concurrency, thread_name_prefix="writer") as writers_pool:
            shared = Shared(cfg, proxy.base_url, model_cfg, IdentityResolver(), writers_pool, encoder,
                            secrets.token_hex(4))
            runner = PersonalRunner(cfg, rd, info, shared)
            try:
                _pool(runner, pending, attempts, concurrency, len(runs), len(done))
            finally:
                shared.close()
            t = runner.totals
            print(f"runs done: {t['failed']} failed in this session, {t['tokens']:,} tokens", file=sys.stderr)
    finally:
        ledger.close()
    print(summary(rd), file=sys.stderr)
    return rd


def _pool(runner: PersonalRunner, pending, attempts: dict, concurrency: int, total: int, done: int) -> None:
    bar = tqdm(total=total, initial=done, unit="run", dynamic_ncols=True, file=sys.stderr)
    try:
        with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="trial") as pool:
            running = set()
            for t, c in pending:
                rid = f"{t['trial_id']}__{c}"
                running.add(pool.submit(runner.run_one, t, c, attempts.get(rid, 0) + 1))
                if len(running) >= concurrency:
                    finished, running = wait(running, return_when=FIRST_COMPLETED)
                    _collect(finished, bar)
            while running:
                finished, running = wait(running, return_when=FIRST_COMPLETED)
                _collect(finished, bar)
    finally:
        bar.close()


def _collect(finished, bar) -> None:
    for f in finished:
        f.result()  # a storage error stops the stage loudly
        bar.update(1)


def summary(rd: RunDir) -> str:
    """Per method: runs, failures, injected items, short reads (the index returned fewer of the user's visible
    items than it should), missed writes, timeouts, foreign items, exposure."""
    rows: dict[str, list[dict]] = {}
    for r in (x.model_dump(mode="json") for x in rd.records()):
        rows.setdefault(r["condition"], []).append(r)
    lines = [f"{'method':<22}{'runs':>5}{'failed':>7}{'injected':>9}{'short':>6}{'missed':>7}{'timeouts':>9}"
             f"{'foreign':>8}{'exposed':>8}{'words':>7}{'wall s':>8}"]
    for cond, rs in sorted(rows.items()):
        n = len(rs)
        lines.append(f"{cond:<22}{n:>5}{sum(r['status'] != 'ok' for r in rs):>7}"
                     f"{sum(r['n_injected'] for r in rs) / n:>9.1f}{sum(bool(r.get('short_read')) for r in rs):>6}"
                     f"{sum(r['missed_writes'] or 0 for r in rs):>7}"
                     f"{sum(bool((r['barrier'] or {}).get('timed_out')) for r in rs):>9}"
                     f"{sum(r['foreign_items'] for r in rs):>8}{sum(r['exposure_private'] for r in rs):>8}"
                     f"{sum(r['answer_words'] for r in rs) / n:>7.0f}{sum(r['wall_s'] for r in rs) / n:>8.1f}")
    short = sum(bool(r.get("short_read")) for rs in rows.values() for r in rs)
    if short:
        lines.append(f"WARNING: {short} short reads: the index returned fewer of a user's visible memories than "
                     "min(cap, visible) (method_log.read in the records; bench/kernel_scale.py)")
    return "\n".join(lines)
