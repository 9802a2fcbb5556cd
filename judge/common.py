"""What every judge shares: its identity, the reply cache, its calls, concurrency, files and attempts.

The answer-check judge (judge/answer_check.py, LongMemEval's yes/no) and the rubric judge
(judge/rubric.py, the personalization study's 1-5 scores) are peers over this module; neither
imports the other.

* Identity: a cached reply is keyed by the endpoint (provider, model, base URL) and the call
  parameters, so two servers serving one model name never share labels.
* Cache: <cache_dir>/judge_cache.sqlite, shared across stages and judges (judge/cache.py).
* Calls: every judge call goes through a metering proxy into the stage's ledger with role
  "judge" and a tag "<prefix>:<run_id>" under an attempt number.
* A failing server (harness.endpoints.liveness.Breaker, the driver's): a judgement whose call ran out of
  retries or was rejected unexplained is held, and written `failed` only when a later judgement succeeds;
  `breaker_runs` (3) in a row, a plain probe failing too, credit gone, or judgements still held at the end
  stop judging (exit 3, the server's last answer) with those unwritten; the calls queued or in flight are
  aborted, and the same command judges the rest (`ask`, `breaker`, `judge_all`).
* Crash safety: a judge's attempts log says which run was being judged under which attempt;
  attempts that wrote no judgement line are marked interrupted in the ledger.
* Dry run: with `dry_run=true` every judging command (make judge, agreement, probe,
  personal_paper) prints its plan (`plan_lines`: the judge, what is current, cached, a failed
  run, what would need a call and its forecast cost) and sends, opens and writes nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import ExitStack
from typing import Callable
from datetime import datetime, timezone
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from harness.endpoints.client import Agent, Meter, ModelCallFailed, backoff_s, max_retries
from harness.endpoints.liveness import Breaker
from harness.endpoints.proxy import MeteringProxy
from harness.endpoints.registry import identity as endpoint_identity
from harness.endpoints.registry import open_endpoint
from harness.endpoints.settings import endpoint_settings
from harness.endpoints.usage import context_tokens
from harness.failures import EnvironmentFailure, StageStopping
from harness.records import RunDir
from harness.records.ledger import Ledger, mark_interrupted, read_ledger
from judge.cache import JudgeCache

ROLE = "judge"


class OtherStudy(ValueError):
    exit_code = 2  # harness.failures.BAD_INPUT


class NothingToJudge(ValueError):
    """A judging command's stage has no records, or no judgement or second judge to compare: fix the input."""

    exit_code = 2  # harness.failures.BAD_INPUT


def answer_check_stage(cfg, rd: RunDir, command: str) -> None:
    """`command` (judge.agreement, judge.probe) checks LongMemEval's answer check; a stage whose study has another
    judge (the personalization study's rubric) is refused before a record is read, naming what checks that judge."""
    from harness import studies

    kind = rd.stage().kind if rd.stage_path.exists() else cfg.stage.get("kind")
    study = studies.get(kind)
    if (study.judge or "").partition(":")[0] == "judge.answer_check":
        return
    name = cfg.stage.name
    judged = (f"judged by {study.judge.partition(':')[0].replace('.', '/')}.py (`make judge STAGE={name}`)"
              if study.judge else "with nothing to judge")
    raise OtherStudy(f"{command} checks LongMemEval's answer check (judge/answer_check.py); stage {name!r} is a "
                     f"{study.kind} stage, {judged}" + (f"; its judge is checked by {study.judge_checks}"
                                                         if study.judge_checks else ""))


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


# ------------------------------------------------------------------------------ judge identity

def model_config(judge_cfg, params: dict) -> dict:
    """The judge's model config calling with `params` only (a judge's official parameters), whatever
    its model config passes to agents (e.g. reasoning_effort), plus what the user adds under
    `judge_params`."""
    jc = OmegaConf.to_container(judge_cfg, resolve=True) if isinstance(judge_cfg, DictConfig) else dict(judge_cfg)
    jc["params"] = {**params, **(jc.get("judge_params") or {})}
    return jc


JUDGE_PARAMS = {"temperature": 0, "max_tokens": 10}  # the answer check's: one user message, temperature 0, 10 tokens


def judge_model_config(judge_cfg) -> dict:
    """The answer check's model config: the official parameters only (temperature 0, at most 10
    tokens), whatever its model config passes to agents (e.g. reasoning_effort), plus what the
    user adds under `judge_params`."""
    return model_config(judge_cfg, JUDGE_PARAMS)


def identity(jc: dict) -> str:
    """What a cached reply is keyed by besides the prompt: the endpoint (provider, model, base
    URL) and the call parameters, so two servers serving one model name never share labels."""
    params = json.dumps(jc.get("params") or {}, sort_keys=True)
    return f"{endpoint_identity(jc)}:{hashlib.sha256(params.encode()).hexdigest()[:12]}"


def judge_block(name: str, jc: dict, ident: str, with_base_url: bool = True) -> dict:
    """The `judge` field of a judgement line; `params` as the calls send them (fitted to the judge's
    `accepts`: a temperature the endpoint never gets is not recorded as the official temperature 0)."""
    from harness.endpoints.fit import fit

    out = {"name": name, "model": jc.get("model"), "provider": jc.get("provider")}
    if with_base_url:
        out["base_url"] = jc.get("base_url")
    return {**out, "identity": ident, "params": fit(jc.get("params") or {}, jc.get("accepts"))[0]}


# ------------------------------------------------------------------------------ cache and calls

def open_cache(cfg) -> JudgeCache:
    """The judge's reply cache; a dry run only reads it (never creates the file or its -wal/-shm)."""
    return JudgeCache(Path(str(cfg.cache_dir)) / "judge_cache.sqlite", read_only=dry_run(cfg))


def concurrency(cfg, jc: dict) -> int:
    """The stage's concurrency, capped by the judge endpoint's own limit (a local model's slots)."""
    n = int(cfg.get("concurrency") or 1)
    if jc.get("max_concurrency"):
        n = min(n, int(jc["max_concurrency"]))
    if jc.get("provider") == "local":
        n = min(n, int(jc.get("parallel", 1)))
    return max(1, n)


def meter(jc: dict) -> Meter:
    return Meter(jc["prices"], jc.get("offpeak"))


def agent(proxy_url: str, jc: dict, tag: str, attempt: int, m: Meter) -> Agent:
    """A judge's client: role "judge", built from the judge's typed node (JudgeSettings), its retries and backoff."""
    judge = endpoint_settings(jc)
    return Agent(proxy_url, judge, tag, attempt, m, role=ROLE, max_retries=max_retries(judge), backoff_s=backoff_s(judge))


def ask(proxy_url: str, jc: dict, tag: str, attempt: int, prompt: str, m: Meter, abort: threading.Event):
    """One judgement's call, metered by `m`: its message, or the call's own failure raised (ModelCallFailed, an
    OpenAI error) for the judge's breaker (`breaker`) to hold or write `failed`. The environment's failure (credit
    gone, a refused key, the spending cap) is raised with `abort` set, so the calls in flight send nothing more."""
    m.abort = abort
    try:
        return agent(proxy_url, jc, tag, attempt, m).complete([{"role": "user", "content": prompt}])
    except EnvironmentFailure:
        abort.set()
        raise


def estimated(calls: list[dict]) -> int:
    """Of a judgement's metered calls, those whose usage the server did not report as counts (estimated)."""
    return sum(bool(c.get("usage_estimated")) for c in calls)


def cost_line(calls: int, cost_list: float, estimated_calls: int) -> str:
    """A judging session's calls and cost, saying when some of it rests on estimated usage (as the run driver's
    session line does)."""
    est = (f" (usage of {estimated_calls} calls estimated: the server's counts were missing or not counts)"
           if estimated_calls else "")
    return f"{calls} calls, ${cost_list:.4f} at list price{est}"


def breaker(proxy_url: str, jc: dict, plain_call: Callable) -> Breaker:
    """The judge's breaker (the driver's rule: harness.endpoints.liveness), its probe one plain request of the
    judge's own shape, one attempt (`plain_call`: harness.run.preflight.model_call, passed in: the preflight
    imports this module)."""
    n = jc.get("breaker_runs")
    return Breaker(3 if n is None else int(n),
                   lambda: plain_call(proxy_url, {**jc, "max_retries": 0}, ROLE).ok is not False, "judgements",
                   "fix or restart the judge's server (judge.base_url), then run the same command (the judgements "
                   "made are kept and cached)", "the judge's server")


def failure(exc: BaseException) -> tuple[str, str | None]:
    """(reason, signature) of a judgement's failed call, for the breaker: `retries`, `rejected` or `other`."""
    return (getattr(exc, "reason", None) or "other", getattr(exc, "signature", None)) \
        if isinstance(exc, ModelCallFailed) else ("other", None)


def judge_all(workers: int, tasks: list[Callable[[], None]], abort: threading.Event) -> None:
    """The judging pool: every task, `workers` at a time; the first that raises (a dead server, a storage error,
    a bug) stops judging loudly: `abort` set (what is in flight sends nothing more), what is queued never starts."""
    def guarded(task: Callable[[], None]) -> None:
        # the stop is set in the worker that failed, before the pool hands that worker the next task: a queued
        # task that starts after it sends nothing (the main thread sets it only once it reads the failure)
        if abort.is_set():
            return
        try:
            task()
        except BaseException:
            abort.set()
            raise

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="judge") as pool:
        futures = [pool.submit(guarded, t) for t in tasks]
        try:
            for f in futures:
                f.result()
        except BaseException as exc:
            abort.set()
            for f in futures:
                f.cancel()
            if isinstance(exc, StageStopping):  # a judgement the stop cut short: name what stopped it
                wait(futures)
                errors = (f.exception() for f in futures if not f.cancelled())
                raise next((e for e in errors if e is not None and not isinstance(e, StageStopping)), exc)
            raise


def stage_budget(cfg, rd: RunDir, judge_prices: dict | None):
    """The stage's spending cap for a judge (None without `budget_usd`): agents and judges together, over every
    ledger of the folder read again at every call (`rd.ledger_paths`, the method, so a shard's ledger created
    after this is counted), as the driver's own."""
    if cfg.get("budget_usd") is None:
        return None
    from harness.run.budget import Budget

    return Budget(cfg.budget_usd, OmegaConf.to_container(cfg.model, resolve=True).get("prices"), judge_prices,
                  rd.ledger_paths)


def open_proxy(stack: ExitStack, endpoint, judge_cfg, jc: dict, ledger: Ledger, budget=None) -> MeteringProxy:
    """The metering proxy a judge calls through, opening the judge's endpoint if none is given; with the stage's
    spending cap (`budget`, harness.run.budget.Budget) it refuses a call that could pass it."""
    if endpoint is None:
        endpoint = stack.enter_context(open_endpoint(judge_cfg))
    return stack.enter_context(MeteringProxy(endpoint.base_url, ledger, endpoint.key,
                                             float(jc.get("timeout_s", 600)), str(jc.get("model")),
                                             context_tokens(jc) or endpoint.info.get("context_tokens"),
                                             budget=budget))


# ------------------------------------------------------------------------------ files and attempts

def judgements_dir(run_dir) -> Path:
    return (run_dir.root if isinstance(run_dir, RunDir) else Path(run_dir)) / "judgements"


def end_torn_line(path: Path) -> None:
    """A line torn by a crash is ended, so the next appended line stays whole (and readable)."""
    if path.exists() and path.stat().st_size:
        with open(path, "rb+") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")
                f.flush()
                os.fsync(f.fileno())


def attempts(path: Path) -> dict[str, int]:
    """run id -> the highest attempt number in an attempts log."""
    out: dict[str, int] = {}
    for e in read_ledger(path):
        out[e["run"]] = max(out.get(e["run"], 0), int(e["attempt"]))
    return out


def mark_unfinished(ledger: Ledger, attempts_path: Path, lines_path: Path, tag_prefix: str) -> int:
    """Judging attempts that started but wrote no judgement line stay in the ledger, marked."""
    tag = f"{tag_prefix}:{{}}".format
    finished = {(tag(e["run_id"]), e.get("attempt")) for e in read_ledger(lines_path) if "run_id" in e}
    started = {(tag(e["run"]), int(e["attempt"])) for e in read_ledger(attempts_path)}
    return mark_interrupted(ledger, started, finished, "no judgement line", role=ROLE)


# ------------------------------------------------------------------------------ dry run

def dry_run(cfg) -> bool:
    return bool(cfg.get("dry_run", False))


def plan_lines(what: str, jc: dict, ident: str, records: int, current: int, failed_runs: int, cached: int,
               prompts: list[str]) -> list[str]:
    """A judging plan (dry_run=true): who would judge, what is done, and what would need a model call."""
    from harness.run.forecast import CHARS_PER_TOKEN

    prices = jc.get("prices") or {}
    prompt_tok = sum(len(p) for p in prompts) / CHARS_PER_TOKEN
    out_tok = len(prompts) * int((jc.get("params") or {}).get("max_tokens") or 60)
    cost = (prompt_tok * float(prices.get("miss") or 0) + out_tok * float(prices.get("output") or 0)) / 1e6
    unset = [k for k in ("miss", "output") if prices.get(k) is None]  # not known: never printed as $0
    price = f"list cost unknown (no {' or '.join(unset)} price set)" if unset and prompts else f"list ${cost:.4f}"
    return [f"dry run: {what}: judge {jc.get('name')} (model {jc.get('model')}, provider {jc.get('provider')}, "
            f"base_url {jc.get('base_url')}, identity {ident}, params {jc.get('params')})",
            f"  {records} records: {current} judged already, {failed_runs} failed runs (never scored), "
            f"{cached} from the reply cache, {len(prompts)} would need a model call "
            f"(~{prompt_tok:,.0f} prompt + {out_tok:,} output tokens, {price}, plus one preflight call)",
            "  nothing sent, nothing written (dry_run=true)"]
