"""`python -m judge.run stage=NAME [judge=local|deepseek|...]` — what `make judge` calls.

Judges every record of runs/<stage>/<label>/ with LongMemEval's answer-check logic
(judge/prompts.py) and appends one durable JSON line per judgement to
runs/<stage>/<label>/judgements/<judge name>.jsonl; the latest line per
(run_id, kind) wins.

* Cost: every judge call goes through a metering proxy into the stage's own
  ledger.jsonl with role "judge" and tag "judge:<run_id>", so judging shows up in
  the cost table apart from the agents; each line also carries its tokens and cost
  at the judge model's prices.
* Never twice: replies are cached by (judge identity, prompt sha256) in
  <cache_dir>/judge_cache.sqlite, shared across stages; a rerun that finds every
  judgement done (or cached) starts no model and sends no request.
* Never dropped: a reply with neither yes nor no is recorded as `unparsable` (its
  label still follows the official rule), a call that fails after retries as
  `failed` (label null, not cached, retried on the next run), a failed agent run as
  `failed_run` (label false, no call). The summary lists the first two.
* Crash-safe like runs: each judging attempt of a run is logged before its calls;
  after a crash the next start marks unfinished attempts `interrupted` in the
  ledger and judges what is missing under the next attempt number.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path

import hydra
import openai
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from harness.endpoints.client import Agent, Meter, ModelCallFailed
from harness.endpoints.proxy import MeteringProxy
from harness.endpoints.registry import identity as endpoint_identity
from harness.endpoints.registry import open_endpoint
from harness.failures import EnvironmentFailure
from harness.records import RunDir, atomic_write
from harness.records.ledger import Ledger, mark_interrupted, read_ledger
from harness.records.schema import SCHEMA_VERSION, Judgement, RecordError
from judge import prompts as P
from judge.cache import JudgeCache

JUDGE_PARAMS = {"temperature": 0, "max_tokens": 10}  # official: one user message, temperature 0, 10 tokens
DONE = ("ok", "unparsable")
ROLE = "judge"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


# ------------------------------------------------------------------------------ judge identity

def judge_model_config(judge_cfg) -> dict:
    """The judge's model config calling with the official parameters only (temperature 0, at
    most 10 tokens), whatever its model config passes to agents (e.g. reasoning_effort), plus
    what the user adds under `judge_params`."""
    jc = OmegaConf.to_container(judge_cfg, resolve=True) if isinstance(judge_cfg, DictConfig) else dict(judge_cfg)
    jc["params"] = {**JUDGE_PARAMS, **(jc.get("judge_params") or {})}
    return jc


def identity(jc: dict) -> str:
    """What a cached reply is keyed by besides the prompt: the endpoint (provider, model, base
    URL) and the call parameters, so two servers serving one model name never share labels."""
    params = json.dumps(jc.get("params") or {}, sort_keys=True)
    return f"{endpoint_identity(jc)}:{hashlib.sha256(params.encode()).hexdigest()[:12]}"


# ------------------------------------------------------------------------------ judgements files

def judgements_dir(run_dir) -> Path:
    return (run_dir.root if isinstance(run_dir, RunDir) else Path(run_dir)) / "judgements"


def judgements_path(run_dir, judge_name: str) -> Path:
    return judgements_dir(run_dir) / f"{judge_name}.jsonl"


def load_judgements(run_dir, judge_name: str) -> dict[tuple[str, str], dict]:
    """(run_id, kind) -> the latest judgement line of that judge, validated (RunDir.judgements)."""
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    return {k: j.model_dump(mode="json") for k, j in rd.judgements(judge_name).items()}


def _attempts(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in read_ledger(path):
        out[e["run"]] = max(out.get(e["run"], 0), int(e["attempt"]))
    return out


def _mark_interrupted(ledger: Ledger, attempts_path: Path, lines_path: Path, tag_prefix: str) -> int:
    """Judging attempts that started but wrote no judgement line stay in the ledger, marked."""
    tag = f"{tag_prefix}:{{}}".format
    finished = {(tag(e["run_id"]), e.get("attempt")) for e in read_ledger(lines_path) if "run_id" in e}
    started = {(tag(e["run"]), int(e["attempt"])) for e in read_ledger(attempts_path)}
    return mark_interrupted(ledger, started, finished, "no judgement line", role=ROLE)


def _end_torn_line(path: Path) -> None:
    """A line torn by a crash is ended, so the next appended line stays whole (and readable)."""
    if path.exists() and path.stat().st_size:
        with open(path, "rb+") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")
                f.flush()
                os.fsync(f.fileno())


# ------------------------------------------------------------------------------ judging

class _Judging:
    def __init__(self, rd: RunDir, jc: dict, name: str, prompts: P.PromptSet, cache: JudgeCache,
                 tag_prefix: str):
        self.rd, self.jc, self.name, self.prompts, self.cache = rd, jc, name, prompts, cache
        self.ident = identity(jc)
        self.tag_prefix = tag_prefix
        jdir = judgements_dir(rd)
        jdir.mkdir(parents=True, exist_ok=True)
        self.lines_path = judgements_path(rd, name)
        self.attempts_path = jdir / f"{name}.attempts.jsonl"
        _end_torn_line(self.lines_path)
        _end_torn_line(self.attempts_path)
        self.out = Ledger(self.lines_path)
        self.attempt_log = Ledger(self.attempts_path)
        self.counts: Counter = Counter()
        self.problems: list[dict] = []
        self.cost = {"list": 0.0, "paid": 0.0, "calls": 0}
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}
        self.budget = None  # harness.run.budget.Budget of the stage, when it has a spending cap
        self.over_budget = 0

    def close(self) -> None:
        self.out.close()
        self.attempt_log.close()

    def base(self, record: dict, item: P.Item | None, kind: str) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "run_id": record["run_id"], "kind": kind, "condition": record.get("condition"),
            "variant": record.get("variant") or "", "qid": record.get("qid"), "qtype": record.get("qtype"),
            "run_status": record.get("status"),
            "judge": {"name": self.name, "model": self.jc.get("model"), "provider": self.jc.get("provider"),
                      "base_url": self.jc.get("base_url"), "identity": self.ident, "params": self.jc.get("params")},
            "prompt_source": self.prompts.source, "prompt_source_sha256": self.prompts.source_sha256,
            "template": item.template if item else None, "answer_slot": item.answer_slot if item else None,
        }

    def write(self, line: dict) -> None:
        line["ts"] = _now()
        self.out.append(Judgement.model_validate(line).model_dump(mode="json"))
        with self._lock:
            self.counts[(line["kind"], line["status"])] += 1
            if line["status"] in ("failed", "unparsable"):
                self.problems.append(line)

    def offline(self, record: dict, item: P.Item) -> bool:
        """Write the judgement without a model call if possible (failed run, cached reply)."""
        if record.get("status") != "ok":
            self.write({**self.base(record, item, item.kind), "prompt_sha256": None, "prompt": None,
                        "reply": None, "label": False, "status": "failed_run", "cached": False, "attempt": 0,
                        "usage": None, "cost_list": 0.0, "cost_paid": 0.0, "error": f"the agent run failed: {str(record.get('error') or '')[:300]}"})
            return True
        reply = self.cache.get(self.ident, item.prompt_sha256)
        if reply is None:
            return False
        self._write_reply(record, item, reply, cached=True, attempt=0, meter=None)
        return True

    def _write_reply(self, record, item, reply: str, cached: bool, attempt: int, meter: Meter | None) -> None:
        label, status = P.parse_reply(reply)
        usage = {k: sum(c[k] for c in meter.calls) for k in ("prompt", "hit", "miss", "output")} if meter else None
        cost_list = sum(c["cost_list"] for c in meter.calls) if meter else 0.0
        cost_paid = sum(c["cost_paid"] for c in meter.calls) if meter else 0.0
        self.write({**self.base(record, item, item.kind), "prompt_sha256": item.prompt_sha256, "prompt": item.prompt,
                    "reply": reply, "label": label, "status": status, "cached": cached, "attempt": attempt,
                    "usage": usage, "cost_list": cost_list, "cost_paid": cost_paid, "error": None})

    def _key_lock(self, key: str) -> threading.Lock:
        with self._lock:
            return self._key_locks.setdefault(key, threading.Lock())

    def judge_run(self, record: dict, items: list[P.Item], proxy_url: str, attempt: int, bar) -> None:
        """All model judgements of one run under one attempt number (one tag)."""
        self.attempt_log.append({"run": record["run_id"], "attempt": attempt, "ts": _now()})
        for item in items:
            with self._key_lock(item.prompt_sha256):  # identical prompts in flight are asked once
                reply = self.cache.get(self.ident, item.prompt_sha256)
                if reply is not None:
                    self._write_reply(record, item, reply, cached=True, attempt=attempt, meter=None)
                elif self.budget is not None and self.budget.exhausted:
                    with self._lock:
                        self.over_budget += 1  # not judged: judged on the next run with a higher cap
                else:
                    self._call(record, item, proxy_url, attempt)
            bar.update(1)

    def _call(self, record: dict, item: P.Item, proxy_url: str, attempt: int) -> None:
        meter = Meter(self.jc["prices"], self.jc.get("offpeak"))
        agent = Agent(proxy_url, self.jc, f"{self.tag_prefix}:{record['run_id']}", attempt, meter, role=ROLE,
                      max_retries=int(self.jc.get("max_retries", 6)), backoff_s=float(self.jc.get("backoff_s", 1.0)))
        try:
            msg = agent.complete([{"role": "user", "content": item.prompt}])
        except EnvironmentFailure:
            raise  # a refused key or a missing model is not this judgement's failure: judging stops
        except (ModelCallFailed, openai.OpenAIError) as exc:
            with self._lock:
                self.cost["calls"] += len(meter.calls)
            self.write({**self.base(record, item, item.kind), "prompt_sha256": item.prompt_sha256,
                        "prompt": item.prompt, "reply": None, "label": None, "status": "failed", "cached": False,
                        "attempt": attempt, "usage": None, "cost_list": 0.0, "cost_paid": 0.0,
                        "error": f"{type(exc).__name__}: {exc}"[:1000]})
            return
        reply = (msg.content or "").strip()
        self.cache.put(self.ident, item.prompt_sha256, reply, str(self.jc.get("model")))
        with self._lock:
            self.cost["calls"] += len(meter.calls)
            self.cost["list"] += sum(c["cost_list"] for c in meter.calls)
            self.cost["paid"] += sum(c["cost_paid"] for c in meter.calls)
        self._write_reply(record, item, reply, cached=False, attempt=attempt, meter=meter)


def _concurrency(cfg, jc: dict) -> int:
    n = int(cfg.get("concurrency") or 1)
    if jc.get("max_concurrency"):
        n = min(n, int(jc["max_concurrency"]))
    if jc.get("provider") == "local":
        n = min(n, int(jc.get("parallel", 1)))
    return max(1, n)


def judge_stage(cfg, run_dir, endpoint=None, judge_cfg=None, only: set[str] | None = None,
                name: str | None = None, prompts: P.PromptSet | str | None = None, tag_prefix: str = "judge",
                progress: bool = True, budget=None) -> dict:
    """Judge every record of `run_dir` (or the run ids in `only`); returns a summary.

    endpoint: an already open harness.endpoints.registry.Endpoint of the same model, e.g. the
      local model that answered; otherwise the judge's endpoint is opened only if some
      judgement needs a model call.
    judge_cfg: the judge config (default cfg.judge); name: the judgements file stem
      (default the judge config's name); prompts: a PromptSet or a `judge.prompts` value.
    """
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    judge_cfg = cfg.judge if judge_cfg is None else judge_cfg
    if not isinstance(judge_cfg, DictConfig):
        judge_cfg = OmegaConf.create(dict(judge_cfg))
    jc = judge_model_config(judge_cfg)
    name = name or str(jc["name"])
    if not isinstance(prompts, P.PromptSet):
        prompts = P.load(prompts if prompts is not None else jc.get("prompts", "builtin"))
    records = [r.model_dump(mode="json") for r in rd.records() if only is None or r.run_id in only]
    existing = load_judgements(rd, name)
    cache = JudgeCache(Path(str(cfg.cache_dir)) / "judge_cache.sqlite")
    job = _Judging(rd, jc, name, prompts, cache, tag_prefix)
    job.budget = budget
    pending: list[tuple[dict, list[P.Item]]] = []
    skipped = 0
    try:
        for rec in sorted(records, key=lambda r: r["run_id"]):
            todo = []
            for item in P.items_for(rec, prompts):
                old = existing.get((rec["run_id"], item.kind))
                if old and (old["status"] == "failed_run" and rec.get("status") != "ok"
                            or old["status"] in DONE and old.get("prompt_sha256") == item.prompt_sha256
                            and (old.get("judge") or {}).get("identity") == job.ident):
                    skipped += 1
                    continue
                if not job.offline(rec, item):
                    todo.append(item)
            if todo:
                pending.append((rec, todo))
        n_calls = sum(len(items) for _, items in pending)
        ledger = Ledger(rd.ledger_path)
        if budget is not None:
            ledger.listeners.append(budget.add)
        try:
            interrupted = _mark_interrupted(ledger, job.attempts_path, job.lines_path, tag_prefix)
            if n_calls:
                attempts = _attempts(job.attempts_path)
                with ExitStack() as stack:
                    if endpoint is None:
                        endpoint = stack.enter_context(open_endpoint(judge_cfg))
                    proxy = stack.enter_context(MeteringProxy(endpoint.base_url, ledger, endpoint.key,
                                                              float(jc.get("timeout_s", 600)), str(jc.get("model"))))
                    from harness.run import preflight as pf  # the judge's request shape, before any judgement

                    pf.judge_preflight(proxy.base_url, judge_cfg, budget)
                    bar = tqdm(total=n_calls, unit="judgement", dynamic_ncols=True, file=sys.stderr,
                               disable=not progress, desc=f"judge {name}")
                    try:
                        with ThreadPoolExecutor(max_workers=_concurrency(cfg, jc), thread_name_prefix="judge") as pool:
                            futures = [pool.submit(job.judge_run, rec, items, proxy.base_url,
                                                   attempts.get(rec["run_id"], 0) + 1, bar)
                                       for rec, items in pending]
                            for f in futures:
                                f.result()  # a storage error or a bug stops judging loudly
                    finally:
                        bar.close()
        finally:
            ledger.close()
    finally:
        job.close()
        cache.close()
    summary = _summary(rd, job, name, records, skipped, n_calls, interrupted, only)
    atomic_write(judgements_dir(rd) / f"{name}.info.json", json.dumps(
        {"judge": {k: v for k, v in jc.items() if k != "prompts"}, "identity": job.ident,
         "prompts": prompts.describe(), "org_private_explanation": P.ORG_PRIVATE_EXPLANATION,
         "last_summary": {k: v for k, v in summary.items() if k != "problems"}, "updated": _now()},
        indent=1, sort_keys=True, default=str))
    report(summary)
    if job.over_budget:
        from harness.run.budget import BudgetReached

        raise BudgetReached(f"stopped at budget: ${budget.spent:.4f} of ${budget.cap:.4f}; "
                            f"{job.over_budget} judgements not made")
    return summary


def _summary(rd: RunDir, job: _Judging, name: str, records: list[dict], skipped: int, n_calls: int,
             interrupted: int, only) -> dict:
    latest = load_judgements(rd, name)
    ids = {r["run_id"] for r in records}
    mine = {k: v for k, v in latest.items() if k[0] in ids}
    status = Counter(v["status"] for v in mine.values())
    correct = [v for (_, kind), v in mine.items() if kind == "correct"]
    leaks = [v for (_, kind), v in mine.items() if kind == "leak"]
    planned = None
    if only is None and rd.stage_path.exists():
        planned = len(rd.stage().plan["runs"])
    return {
        "run_dir": str(rd.root), "judge": name, "identity": job.ident, "prompt_source": job.prompts.source,
        "records": len(records), "planned_runs": planned, "judgements": len(mine),
        "status": dict(sorted(status.items())), "failed": status.get("failed", 0),
        "unparsable": status.get("unparsable", 0),
        "accuracy": (sum(v["label"] is True for v in correct) / len(correct)) if correct else None,
        "leaks": sum(v["label"] is True for v in leaks), "leak_judgements": len(leaks),
        "this_session": {"already_done": skipped, "model_judgements": n_calls,
                         "written": dict((f"{k}/{s}", n) for (k, s), n in sorted(job.counts.items())),
                         "calls": job.cost["calls"], "cost_list": job.cost["list"], "cost_paid": job.cost["paid"],
                         "interrupted_marked": interrupted},
        "problems": [{k: v[k] for k in ("run_id", "kind", "status", "reply", "error")}
                     for v in mine.values() if v["status"] in ("failed", "unparsable")],
    }


def report(s: dict) -> None:
    t = s["this_session"]
    planned = f" of {s['planned_runs']} planned" if s["planned_runs"] is not None else ""
    acc = f"{s['accuracy']:.3f}" if s["accuracy"] is not None else "-"
    print(f"{s['run_dir']}: judge {s['judge']} ({s['identity']}, prompts {s['prompt_source']}): "
          f"{s['records']} records{planned}, {s['judgements']} judgements {s['status']}; "
          f"accuracy {acc}, leaks {s['leaks']}/{s['leak_judgements']}", file=sys.stderr)
    print(f"  this session: {t['already_done']} already judged, {t['model_judgements']} needed the model, "
          f"{t['calls']} calls, ${t['cost_list']:.4f} at list price", file=sys.stderr)
    if s["planned_runs"] is not None and s["records"] < s["planned_runs"]:
        print(f"  note: {s['planned_runs'] - s['records']} planned runs have no record yet (not judged)",
              file=sys.stderr)
    for p in s["problems"]:
        what = p["error"] if p["status"] == "failed" else f"reply {p['reply']!r}"
        print(f"  {p['status']}: {p['run_id']} [{p['kind']}] {what}", file=sys.stderr)
    if s["failed"]:
        print(f"  {s['failed']} judgements failed: run the same command again to retry them", file=sys.stderr)


def main_entry(cfg) -> int:
    rd = RunDir.for_stage(cfg)
    if not rd.records_dir.exists():
        print(f"error: {rd.root} has no records; run the stage first (make run STAGE={cfg.stage.name})",
              file=sys.stderr)
        return 2
    if cfg.stage.kind == "personal":  # the second seed paper's rubric, not LongMemEval's answer check
        from judge.rubric import judge_personal

        summary = judge_personal(cfg, rd)
        return 3 if summary["written"].get("failed") else 0
    from harness.run.budget import Budget, BudgetReached

    budget = None
    if cfg.get("budget_usd") is not None:  # the stage's cap covers the judge's calls too
        budget = Budget(cfg.budget_usd, OmegaConf.to_container(cfg.model, resolve=True).get("prices"),
                        judge_model_config(cfg.judge).get("prices"), rd.ledger_paths())
    try:
        summary = judge_stage(cfg, rd, budget=budget)
    except (P.PromptFileError, RecordError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except EnvironmentFailure as exc:
        print(f"stopped: {exc}", file=sys.stderr)
        return 3
    except BudgetReached as exc:
        print(f"{exc}; raise budget_usd and run the same command to go on", file=sys.stderr)
        return 4
    return 3 if summary["failed"] else 0


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from harness.cli.run import sweep_label

    sweep_label(cfg)  # in a sweep (-m), judge each job's folder
    code = main_entry(cfg)
    if code:
        sys.exit(code)


if __name__ == "__main__":
    from harness.cli.run import multirun_flag_first

    sys.argv = multirun_flag_first(sys.argv)
    main()
