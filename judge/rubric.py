"""The personalization rubric judge (second seed paper, Section 4.2 and Appendix A.10).

Each reply is scored 1-5 on Profile Usage, Task Usage and Integration by a judge model
that sees the trial's ground truth (profile and task), the query and the reply. With
`hybrid`, each dimension is (keyword score + LLM score) / 2, the keyword score being
1 + 4 x the share of the trial's keywords the reply names (integration: the smaller of
the two shares), as in the paper's Eq. 4.

Like the LongMemEval answer check (judge/answer_check.py), over the same judge/common.py: the model is swappable (`judge=...`), replies
are cached by (judge identity, prompt sha256) in the shared cache, every call goes
through the metering proxy into the stage's ledger with role "judge" and tag
"judge:<run_id>", and nothing is dropped: a reply without three scores is recorded as
`unparsable`, a call that fails as `failed` (retried next time), a failed run as
`failed_run`: not judged and given no scores (an empty answer is no answer to score; the
tables count failed runs apart), and the summary counts them. A dead server is not a judgement's
failure: the answer check's rule and pool (judge.common.ask/judge_all) stop judging with exit 3,
nothing written failed, and the same command scores the rest. The call's parameters are the
judge model config's, fitted to its `accepts` (harness.endpoints.fit) like the answer
check's: a reasoning model's judge sends no temperature and `max_completion_tokens`.
Lines go to runs/<stage>/<label>/judgements/<judge>.rubric.jsonl; the latest per run wins.

The human validation of this judge (Section 4.3, Appendix A.1: a blinded sample, then
agreement by method) is analysis/personal/validation.py.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import sys
import threading
from contextlib import ExitStack
from pathlib import Path

import openai
from omegaconf import OmegaConf

from harness.data import personal as trials_data
from harness.endpoints.client import Meter, ModelCallFailed
from harness.endpoints.presets import PAPER_JUDGE_MODEL, is_paper_judge  # noqa: F401  (judge.rubric's names too)
from harness.records import RunDir
from harness.records.ledger import Ledger, read_ledger
from harness.records.schema import parse as parse_record
from judge import common as C
from judge.cache import JudgeCache
from judge.common import identity, judgements_dir, now

DIMENSIONS = ("profile_usage", "task_usage", "integration")
RUBRIC_PARAMS = {"temperature": 0, "max_tokens": 60, "response_format": {"type": "json_object"}}
ROLE = C.ROLE
TEMPLATE = """You are grading how well an assistant personalised its reply to a user.

What the system knew about the user:
Profile: {profile}
Current task: {task}

The user asked: "{query}"

The assistant replied:
\"\"\"
{answer}
\"\"\"

Score the reply from 1 (not at all) to 5 (fully) on three dimensions:
- profile_usage: does it use the user's profile (preferences, tools, language, response style)?
- task_usage: does it address the user's current task (project, goals, blockers, next steps)?
- integration: does it combine profile and task into one coherent, specific recommendation?
A generic reply that could be given to anyone scores 1 on all three.
Reply with only a JSON object: {{"profile_usage": <1-5>, "task_usage": <1-5>, "integration": <1-5>}}"""


def describe_profile(p: dict) -> str:
    return (f"{p['name']}; writes {p['language']}; tools {', '.join(p['tools'])}; "
            f"{'; '.join(p['preferences'])}; wants answers {p['response_style']}")


def describe_task(t: dict) -> str:
    return (f"{t['project']}; goals: {'; '.join(t['goals'])}; blockers: {'; '.join(t['blockers'])}; "
            f"next steps: {'; '.join(t['next_steps'])}")


def prompt_for(record: dict, trial: dict) -> str:
    return TEMPLATE.format(profile=describe_profile(trial["profile"]), task=describe_task(trial["task"]),
                           query=trial["query"], answer=record.get("answer") or "")


def parse(reply: str) -> dict | None:
    """The three integer scores 1-5, or None."""
    m = re.search(r"\{.*\}", reply or "", re.S)
    try:
        data = json.loads(m.group(0)) if m else None
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    out = {}
    for d in DIMENSIONS:
        v = data.get(d)
        if isinstance(v, str) and v.strip().isdigit():
            v = int(v.strip())
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not 1 <= v <= 5 or v != int(v):
            return None
        out[d] = int(v)
    return out


def keyword_scores(answer: str, trial: dict) -> dict:
    text = (answer or "").lower()

    def share(words) -> float:
        return sum(w.lower() in text for w in words) / len(words) if words else 0.0

    p, t = share(trial["keywords"]["profile"]), share(trial["keywords"]["task"])
    return {"profile_usage": 1 + 4 * p, "task_usage": 1 + 4 * t, "integration": 1 + 4 * min(p, t)}


def combine(llm: dict, kw: dict, hybrid: bool) -> dict:
    return {d: (llm[d] + kw[d]) / 2 if hybrid else float(llm[d]) for d in DIMENSIONS}


def rubric_config(judge_cfg) -> dict:
    return C.model_config(judge_cfg, RUBRIC_PARAMS)  # official-style: not the agents' params


def lines_path(rd: RunDir, name: str) -> Path:
    return judgements_dir(rd) / f"{name}.rubric.jsonl"


def load_rubric(rd: RunDir, name: str) -> dict[str, dict]:
    """run_id -> the latest rubric line, each validated as a RubricJudgement (harness.records.schema)."""
    path = lines_path(rd, name)
    return {e["run_id"]: parse_record("rubric_judgement", e, path).model_dump(mode="json")
            for e in read_ledger(path) if "run_id" in e}


class _Rubric:
    def __init__(self, rd: RunDir, jc: dict, name: str, hybrid: bool, cache: JudgeCache):
        self.rd, self.jc, self.name, self.hybrid, self.cache = rd, jc, name, hybrid, cache
        self.ident = identity(jc)
        judgements_dir(rd).mkdir(parents=True, exist_ok=True)
        self.out = Ledger(lines_path(rd, name))
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.cost = {"calls": 0, "list": 0.0, "estimated": 0}  # this session's judge calls (C.cost_line)
        self.breaker = None  # the judge server's (judge.common.breaker), once its proxy is open
        self.abort = threading.Event()  # judging stops: the calls queued or in flight send nothing more
        self.budget = None  # harness.run.budget.Budget of the stage, when it has a spending cap
        self.over_budget = 0  # records not scored because the cap was reached (scored next time, higher cap)

    def write(self, line: dict) -> None:
        line["ts"] = now()
        parse_record("rubric_judgement", line, lines_path(self.rd, self.name))  # a writer's mistake fails here
        self.out.append(line)
        with self.lock:
            self.counts[line["status"]] = self.counts.get(line["status"], 0) + 1

    def base(self, rec: dict, prompt: str | None) -> dict:
        return {"run_id": rec["run_id"], "kind": "rubric", "condition": rec.get("condition"),
                "trial_id": rec.get("trial_id"), "model": (rec.get("model") or {}).get("name"),
                "judge": C.judge_block(self.name, self.jc, self.ident, with_base_url=False),
                "hybrid": self.hybrid, "prompt": prompt,
                "prompt_sha256": hashlib.sha256(prompt.encode()).hexdigest() if prompt else None}

    def scored(self, rec: dict, trial: dict, prompt: str, reply: str, cached: bool, meter: Meter | None,
               answered: bool = False) -> None:
        llm = parse(reply)
        kw = keyword_scores(rec.get("answer") or "", trial)
        line = ({**self.base(rec, prompt), "reply": reply, "cached": cached,
                    "status": "ok" if llm else "unparsable", "llm": llm, "keyword": kw,
                    "scores": combine(llm, kw, self.hybrid) if llm else None, "error": None,
                    "usage": {k: sum(c[k] for c in meter.calls) for k in ("prompt", "output")} if meter else None,
                    "cost_list": sum(c["cost_list"] for c in meter.calls) if meter else 0.0})
        # an answered call releases the scores the breaker held (harness.endpoints.liveness)
        for held in (self.breaker.admit(line, True) if answered and self.breaker is not None else [line]):
            self.write(held)

    def offline(self, rec: dict, trial: dict) -> bool:
        if rec.get("status") != "ok":  # never scored as if it were an answer
            self.write({**self.base(rec, None), "status": "failed_run", "llm": None, "keyword": None,
                        "scores": None, "cached": False,
                        "error": f"the run failed, not judged: {str(rec.get('error') or '')[:300]}"})
            return True
        prompt = prompt_for(rec, trial)
        reply = self.cache.get(self.ident, hashlib.sha256(prompt.encode()).hexdigest())
        if reply is None:
            return False
        self.scored(rec, trial, prompt, reply, True, None)
        return True

    def call(self, rec: dict, trial: dict, proxy_url: str) -> None:
        if self.budget is not None and self.budget.exhausted:
            with self.lock:
                self.over_budget += 1  # not scored, not written: scored on the next run with a higher cap
            return
        prompt = prompt_for(rec, trial)
        meter = C.meter(self.jc)
        try:  # a dead server, credit gone or a refused key raise here: judging stops, nothing written (C.ask)
            msg = C.ask(proxy_url, self.jc, f"judge:{rec['run_id']}", 1, prompt, meter, self.abort)
        except (ModelCallFailed, openai.OpenAIError) as exc:
            line = {**self.base(rec, prompt), "status": "failed", "llm": None, "keyword": None, "scores": None,
                    "cached": False, "reply": None, "error": f"{type(exc).__name__}: {exc}"[:1000]}
            reason, signature = C.failure(exc)
            for held in self.breaker.admit(line, False, reason, signature, rec["run_id"], str(exc)[:1000]):
                self.write(held)  # written failed once a later score came back (the server kept answering)
            return
        reply = (msg.content or "").strip()
        with self.lock:
            self.cost["calls"] += len(meter.calls)
            self.cost["list"] += sum(c["cost_list"] for c in meter.calls)
            self.cost["estimated"] += C.estimated(meter.calls)
        self.cache.put(self.ident, hashlib.sha256(prompt.encode()).hexdigest(), reply, str(self.jc.get("model")))
        self.scored(rec, trial, prompt, reply, False, meter, answered=True)


def judge_personal(cfg, run_dir, endpoint: tuple | None = None, judge_cfg=None, hybrid: bool | None = None,
                   budget=None) -> dict:
    """Score every record of a personalization stage that has no current rubric line; returns counts. With the
    stage's spending cap (`budget`, harness.run.budget.Budget over every ledger of the folder, read live) the proxy
    refuses a call that could pass it and judging stops with BudgetReached (exit 4), the rest unscored."""
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    jc = rubric_config(cfg.judge if judge_cfg is None else judge_cfg)
    name = str(jc["name"])
    if hybrid is None:
        hybrid = bool(OmegaConf.select(cfg, "stage.judge.hybrid", default=False))
    records = sorted((r.model_dump(mode="json") for r in rd.records()), key=lambda r: r["run_id"])
    trials: dict[str, dict] = {}
    for path in {r["data_path"] for r in records}:
        trials.update({t["trial_id"]: t for t in trials_data.load(path)["trials"]})
    existing = load_rubric(rd, name)
    cache = C.open_cache(cfg)
    if C.dry_run(cfg):
        try:
            return _plan(rd, jc, name, hybrid, cache, records, trials, existing)
        finally:
            cache.close()
    job = _Rubric(rd, jc, name, hybrid, cache)
    job.budget = budget
    try:
        todo = []
        for rec in records:
            old = existing.get(rec["run_id"])
            if old and _current(old, rec, trials[rec["trial_id"]], hybrid, job.ident):
                continue
            if not job.offline(rec, trials[rec["trial_id"]]):
                todo.append(rec)
        if todo:
            ledger = Ledger(rd.ledger_path)
            try:
                with ExitStack() as stack:
                    proxy = C.open_proxy(stack, endpoint, OmegaConf.create(jc), jc, ledger, budget)
                    from harness.run import preflight as pf  # the rubric's request shape, before any score

                    pf.judge_preflight(proxy.base_url, None, budget, config=jc)
                    job.breaker = C.breaker(proxy.base_url, jc, pf.model_call)
                    C.judge_all(C.concurrency(cfg, jc), [functools.partial(job.call, rec, trials[rec["trial_id"]],
                                                                           proxy.base_url) for rec in todo], job.abort)
                    job.breaker.release()  # scores still held had no success after them: the server's
            finally:
                ledger.close()
    finally:
        job.out.close()
        cache.close()
    failed_runs = sum(r["status"] != "ok" for r in records)
    summary = {"run_dir": str(rd.root), "judge": name, "identity": job.ident, "hybrid": hybrid,
               "records": len(records), "failed_runs": failed_runs, "model_calls": len(todo),
               "written": dict(job.counts), "calls": job.cost["calls"], "cost_list": job.cost["list"],
               "usage_estimated_calls": job.cost["estimated"]}
    print(f"{rd.root}: rubric judge {name} ({job.ident}, hybrid={hybrid}): {len(records)} records, "
          f"{failed_runs} failed runs not judged, {len(todo)} needed the model, written {job.counts}; "
          + C.cost_line(job.cost["calls"], job.cost["list"], job.cost["estimated"]), file=sys.stderr)
    if job.over_budget:
        from harness.run.budget import BudgetReached

        raise BudgetReached(f"stopped at budget: ${budget.spent:.4f} of ${budget.cap:.4f}; "
                            f"{job.over_budget} records not scored")
    return summary


def _plan(rd: RunDir, jc: dict, name: str, hybrid: bool, cache: JudgeCache, records, trials, existing) -> dict:
    """dry_run=true: what judging would do, printed; no call, no line, no file."""
    ident = identity(jc)
    current = failed = cached = 0
    prompts = []
    for rec in records:
        old, trial = existing.get(rec["run_id"]), trials[rec["trial_id"]]
        if old and _current(old, rec, trial, hybrid, ident):
            current += 1
        elif rec.get("status") != "ok":
            failed += 1
        elif cache.get(ident, hashlib.sha256(prompt_for(rec, trial).encode()).hexdigest()) is not None:
            cached += 1
        else:
            prompts.append(prompt_for(rec, trial))
    print("\n".join(C.plan_lines(f"rubric judge of {rd.root}", jc, ident, len(records), current, failed, cached,
                                  prompts)))
    return {"run_dir": str(rd.root), "judge": name, "identity": ident, "hybrid": hybrid, "records": len(records),
            "failed_runs": failed, "model_calls": 0, "would_call": len(prompts), "written": {}, "dry_run": True}


def _current(old: dict, rec: dict, trial: dict, hybrid: bool, ident: str) -> bool:
    """Is the latest line still this record's judgement? (A failed run retried and now answered is not.)"""
    if rec.get("status") != "ok":
        return old["status"] == "failed_run"
    sha = hashlib.sha256(prompt_for(rec, trial).encode()).hexdigest()
    return old["status"] in ("ok", "unparsable") and old.get("hybrid") == hybrid \
        and (old.get("judge") or {}).get("identity") == ident and old.get("prompt_sha256") == sha


def paper_judge_refusal(cfg) -> str | None:
    """With `paper_judge=true` (stage=personal_paper): why this judge is refused, or None. Any judge model but the
    paper's is refused unless declared (allow_deviation=[judge_model])."""
    if not cfg.get("paper_judge"):
        return None
    model = str(cfg.judge.get("model"))
    if is_paper_judge(model) or "judge_model" in [str(k) for k in cfg.get("allow_deviation") or []]:
        return None
    return (f"judge {cfg.judge.get('name')} ({model}) is not the paper's judge ({PAPER_JUDGE_MODEL}, judge=gpt54); "
            "declare the fallback with allow_deviation=[judge_model]")


def judge_command(cfg, rd) -> int:
    """`make judge` for a personalization stage: the rubric on every record (exit 3 if some failed)."""
    from harness.failures import BAD_INPUT, STOPPED

    refused = paper_judge_refusal(cfg)
    if refused:
        print(f"error: {refused}", file=sys.stderr)
        return BAD_INPUT
    budget = C.stage_budget(cfg, rd, rubric_config(cfg.judge).get("prices"))  # the judge's calls count too
    summary = judge_personal(cfg, rd, budget=budget)
    return STOPPED if summary["written"].get("failed") else 0
