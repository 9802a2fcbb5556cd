"""The answer-check judge: LongMemEval's yes/no labels of an agent stage (`python -m judge.run`).

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

import functools
import json
import sys
import threading
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Callable

import openai
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from harness.endpoints.client import Meter, ModelCallFailed
from harness.records import RunDir, atomic_write
from harness.records.ledger import Ledger
from harness.records.schema import SCHEMA_VERSION, Judgement
from judge import common as C
from judge import kinds, prompts as P
from judge.cache import JudgeCache
from judge.common import end_torn_line, identity, judgements_dir, now  # noqa: F401  (identity: judge.answer_check.identity stays importable)

JUDGE_PARAMS = C.JUDGE_PARAMS
DONE = ("ok", "unparsable")
ROLE = C.ROLE


# ------------------------------------------------------------------------------ judge identity

judge_model_config = C.judge_model_config  # the answer check's request shape (judge.common: the preflight reads it too)


# ------------------------------------------------------------------------------ judgements files

def judgements_path(run_dir, judge_name: str) -> Path:
    return judgements_dir(run_dir) / f"{judge_name}.jsonl"


def load_judgements(run_dir, judge_name: str) -> dict[tuple[str, str], dict]:
    """(run_id, kind) -> the latest judgement line of that judge, validated (RunDir.judgements)."""
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    return {k: j.model_dump(mode="json") for k, j in rd.judgements(judge_name).items()}


# ------------------------------------------------------------------------------ judging

class _Judging:
    def __init__(self, rd: RunDir, jc: dict, name: str, prompts: P.PromptSet, cache: JudgeCache,
                 tag_prefix: str):
        self.rd, self.jc, self.name, self.prompts, self.cache = rd, jc, name, prompts, cache
        self.ident = identity(jc)
        self.readers: dict[str, Callable] = {}  # item kind -> how its replies are read (its Kind's `read`)
        self.tag_prefix = tag_prefix
        jdir = judgements_dir(rd)
        jdir.mkdir(parents=True, exist_ok=True)
        self.lines_path = judgements_path(rd, name)
        self.attempts_path = jdir / f"{name}.attempts.jsonl"
        end_torn_line(self.lines_path)
        end_torn_line(self.attempts_path)
        self.out = Ledger(self.lines_path)
        self.attempt_log = Ledger(self.attempts_path)
        self.counts: Counter = Counter()
        self.problems: list[dict] = []
        self.cost = {"list": 0.0, "paid": 0.0, "calls": 0, "estimated": 0}
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}
        self.budget = None  # harness.run.budget.Budget of the stage, when it has a spending cap
        self.over_budget = 0
        self.breaker = None  # harness.endpoints.liveness.Breaker of the judge's server, once its proxy is open
        self.abort = threading.Event()  # judging stops: the calls in flight send nothing more

    def close(self) -> None:
        self.out.close()
        self.attempt_log.close()

    def base(self, record: dict, item: P.Item | None, kind: str) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "run_id": record["run_id"], "kind": kind, "condition": record.get("condition"),
            "variant": record.get("variant") or "", "qid": record.get("qid"), "qtype": record.get("qtype"),
            "run_status": record.get("status"),
            "judge": C.judge_block(self.name, self.jc, self.ident),
            "prompt_source": self.prompts.source, "prompt_source_sha256": self.prompts.source_sha256,
            "template": item.template if item else None, "answer_slot": item.answer_slot if item else None,
        }

    def write(self, line: dict) -> None:
        line["ts"] = now()
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

    def _write_reply(self, record, item, reply: str, cached: bool, attempt: int, meter: Meter | None,
                     answered: bool = False) -> None:
        label, status, scores = self.readers.get(item.kind, kinds.yes_no)(reply)
        usage = {k: sum(c[k] for c in meter.calls) for k in ("prompt", "hit", "miss", "output")} if meter else None
        cost_list = sum(c["cost_list"] for c in meter.calls) if meter else 0.0
        cost_paid = sum(c["cost_paid"] for c in meter.calls) if meter else 0.0
        line = {**self.base(record, item, item.kind), "prompt_sha256": item.prompt_sha256, "prompt": item.prompt,
                "reply": reply, "label": label, "status": status, "cached": cached, "attempt": attempt,
                "usage": usage, "cost_list": cost_list, "cost_paid": cost_paid, "error": None,
                **({"scores": scores} if scores else {})}
        # an answered call releases the judgements the breaker held (harness.endpoints.liveness)
        for held in (self.breaker.admit(line, True) if answered and self.breaker is not None else [line]):
            self.write(held)

    def _key_lock(self, key: str) -> threading.Lock:
        with self._lock:
            return self._key_locks.setdefault(key, threading.Lock())

    def judge_run(self, record: dict, items: list[P.Item], proxy_url: str, attempt: int, bar) -> None:
        """All model judgements of one run under one attempt number (one tag)."""
        self.attempt_log.append({"run": record["run_id"], "attempt": attempt, "ts": now()})
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
        meter = C.meter(self.jc)
        try:  # credit gone, a refused key or the cap raise here: judging stops, nothing written (C.ask)
            msg = C.ask(proxy_url, self.jc, f"{self.tag_prefix}:{record['run_id']}", attempt, item.prompt, meter,
                        self.abort)
        except (ModelCallFailed, openai.OpenAIError) as exc:
            with self._lock:
                self.cost["calls"] += len(meter.calls)
            line = {**self.base(record, item, item.kind), "prompt_sha256": item.prompt_sha256,
                    "prompt": item.prompt, "reply": None, "label": None, "status": "failed", "cached": False,
                    "attempt": attempt, "usage": None, "cost_list": 0.0, "cost_paid": 0.0,
                    "error": f"{type(exc).__name__}: {exc}"[:1000]}
            reason, signature = C.failure(exc)
            for held in self.breaker.admit(line, False, reason, signature, record["run_id"], str(exc)[:1000]):
                self.write(held)  # written failed once a later judgement succeeded (the server kept answering)
            return
        reply = (msg.content or "").strip()
        self.cache.put(self.ident, item.prompt_sha256, reply, str(self.jc.get("model")))
        with self._lock:
            self.cost["calls"] += len(meter.calls)
            self.cost["list"] += sum(c["cost_list"] for c in meter.calls)
            self.cost["paid"] += sum(c["cost_paid"] for c in meter.calls)
            self.cost["estimated"] += C.estimated(meter.calls)
        self._write_reply(record, item, reply, cached=False, attempt=attempt, meter=meter, answered=True)


def judge_stage(cfg, run_dir, endpoint=None, judge_cfg=None, only: set[str] | None = None,
                name: str | None = None, prompts: P.PromptSet | str | None = None, tag_prefix: str = "judge",
                progress: bool = True, budget=None, gold: dict[str, str] | None = None,
                records: list[dict] | None = None) -> dict:
    """Judge every record of `run_dir` (or the run ids in `only`); returns a summary.

    endpoint: an already open harness.endpoints.registry.Endpoint of the same model, e.g. the
      local model that answered; otherwise the judge's endpoint is opened only if some
      judgement needs a model call.
    judge_cfg: the judge config (default cfg.judge); name: the judgements file stem
      (default the judge config's name); prompts: a PromptSet or a `judge.prompts` value.
    gold: question id -> the gold to judge against instead of the record's (corrected gold, errata).
    records: judge these (record-shaped dicts, e.g. the probe's planted answers) instead of the stage's.
    """
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    judge_cfg = cfg.judge if judge_cfg is None else judge_cfg
    if not isinstance(judge_cfg, DictConfig):
        judge_cfg = OmegaConf.create(dict(judge_cfg))
    jc = judge_model_config(judge_cfg)
    name = name or str(jc["name"])
    if not isinstance(prompts, P.PromptSet):
        prompts = P.load(prompts if prompts is not None else jc.get("prompts", "builtin"))
    from harness.run import fidelity  # judge, agreement and probe pass here: the preset's judge rows, first

    fidelity.gate_judging(cfg, rd, judge_cfg, prompts, second=tag_prefix == "judge2")
    if records is not None:
        only = {r["run_id"] for r in records} if only is None else only
        records = [dict(r) for r in records if r["run_id"] in only]
    else:
        records = [r.model_dump(mode="json") for r in rd.records() if only is None or r.run_id in only]
    for r in records:
        if gold and r["qid"] in gold:
            r["gold"] = gold[r["qid"]]
    existing = load_judgements(rd, name)
    cache = C.open_cache(cfg)
    chosen = kinds.chosen(judge_cfg, cfg.get("stage") if hasattr(cfg, "get") else None)
    if C.dry_run(cfg):
        try:
            return _plan(rd, jc, name, prompts, cache, records, existing, only, chosen)
        finally:
            cache.close()
    job = _Judging(rd, jc, name, prompts, cache, tag_prefix)
    job.budget = budget
    pending: list[tuple[dict, list[P.Item]]] = []
    skipped = 0
    try:
        for rec in sorted(records, key=lambda r: r["run_id"]):
            todo = []
            for item, kind in kinds.items_for(rec, prompts, chosen):  # the chosen judgement kinds (judge/kinds/)
                job.readers[item.kind] = kind.read
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
        try:
            interrupted = C.mark_unfinished(ledger, job.attempts_path, job.lines_path, tag_prefix)
            if n_calls:
                attempts = C.attempts(job.attempts_path)
                with ExitStack() as stack:
                    proxy = C.open_proxy(stack, endpoint, judge_cfg, jc, ledger, budget)
                    from harness.run import preflight as pf  # the judge's request shape, before any judgement

                    pf.judge_preflight(proxy.base_url, judge_cfg, budget)
                    job.breaker = C.breaker(proxy.base_url, jc, pf.model_call)
                    bar = tqdm(total=n_calls, unit="judgement", dynamic_ncols=True, file=sys.stderr,
                               disable=not progress, desc=f"judge {name}")
                    try:
                        C.judge_all(C.concurrency(cfg, jc), [
                            functools.partial(job.judge_run, rec, items, proxy.base_url,
                                              attempts.get(rec["run_id"], 0) + 1, bar) for rec, items in pending],
                            job.abort)
                        job.breaker.release()  # judgements still held had no success after them: the server's
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
         "last_summary": {k: v for k, v in summary.items() if k != "problems"}, "updated": now()},
        indent=1, sort_keys=True, default=str))
    report(summary)
    if job.over_budget:
        from harness.run.budget import BudgetReached

        raise BudgetReached(f"stopped at budget: ${budget.spent:.4f} of ${budget.cap:.4f}; "
                            f"{job.over_budget} judgements not made")
    return summary


def _plan(rd: RunDir, jc: dict, name: str, prompts: P.PromptSet, cache: JudgeCache, records: list[dict],
          existing: dict, only, chosen) -> dict:
    """dry_run=true: what judging would do, printed; no call, no line, no file."""
    ident = identity(jc)
    current = failed = cached = 0
    todo = []
    for rec in records:
        for item, _ in kinds.items_for(rec, prompts, chosen):  # the kinds judging would ask
            old = existing.get((rec["run_id"], item.kind))
            if old and (old["status"] == "failed_run" and rec.get("status") != "ok"
                        or old["status"] in DONE and old.get("prompt_sha256") == item.prompt_sha256
                        and (old.get("judge") or {}).get("identity") == ident):
                current += 1
            elif rec.get("status") != "ok":
                failed += 1
            elif cache.get(ident, item.prompt_sha256) is not None:
                cached += 1
            else:
                todo.append(item.prompt)
    print("\n".join(C.plan_lines(f"answer check of {rd.root}" + (f" ({len(only)} runs)" if only else ""), jc, ident,
                                  len(records), current, failed, cached, todo)))
    return {"run_dir": str(rd.root), "judge": name, "identity": ident, "records": len(records), "model_calls": 0,
            "would_call": len(todo), "failed": 0, "dry_run": True}


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
                         "usage_estimated_calls": job.cost["estimated"],
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
          + C.cost_line(t["calls"], t["cost_list"], t["usage_estimated_calls"]), file=sys.stderr)
    if s["planned_runs"] is not None and s["records"] < s["planned_runs"]:
        print(f"  note: {s['planned_runs'] - s['records']} planned runs have no record yet (not judged)",
              file=sys.stderr)
    for p in s["problems"]:
        what = p["error"] if p["status"] == "failed" else f"reply {p['reply']!r}"
        print(f"  {p['status']}: {p['run_id']} [{p['kind']}] {what}", file=sys.stderr)
    if s["failed"]:
        print(f"  {s['failed']} judgements failed: run the same command again to retry them", file=sys.stderr)


def judge_command(cfg, rd) -> int:
    """`make judge` for an agent stage: every record judged, under the stage's spending cap (exit 3 if some failed)."""
    from harness.failures import STOPPED

    budget = C.stage_budget(cfg, rd, judge_model_config(cfg.judge).get("prices"))  # the judge's calls count too
    er = None
    if cfg.get("errata"):  # checked before anything is judged: a refused file costs nothing
        from harness.data import errata as E

        er = E.load(str(cfg.errata), cfg.get("errata_sha256"))
        er.require({r.data_sha256: r.data_path for r in rd.records()}, f"stage {rd.root}")
    summary = judge_stage(cfg, rd, budget=budget)
    failed = summary["failed"]
    if er is not None:  # the runs of corrected questions, judged again against the corrected gold
        answers = er.answers()
        only = {r.run_id for r in rd.records() if r.qid in answers}
        if only:
            name = er.judgements_name(str(cfg.judge.name))
            failed += judge_stage(cfg, rd, budget=budget, only=only, name=name, gold=answers,
                                  tag_prefix=f"judge-{er.tag}")["failed"]
        else:
            print(f"errata {er.path}: no run of this stage answers a corrected question", file=sys.stderr)
    return STOPPED if failed else 0
