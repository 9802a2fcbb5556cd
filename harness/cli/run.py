"""`python -m harness.run stage=NAME [overrides]` — what `make run STAGE=NAME` calls.

Composes the steps of a stage: plan, preflight, the runs, and (when the stage says
`judge_after_run`) the judge, reusing the model's endpoint when the judge is the same
model. `dry_run=true` validates the data, prints the plan and the checks that cost
nothing, and stops. `--cfg job` prints the resolved configuration.

Sweeps: `-m model=a,b seed=0,1` runs one stage per combination (in sequence, or on a
cluster with `hydra/launcher=slurm`); each job's label is the stage label plus its
overrides (harness.run.sweep.sweep_label), so each combination has its own run folder. `shard=I/N` makes
this driver own every N-th run of the plan (harness.records.shards); `-m shard=0/4,1/4,2/4,3/4`
runs one stage as four jobs sharing one folder. A sharded driver does not judge: judge once
every shard is done (`make judge`).

Exit codes: 0 done; 2 bad configuration or data; 3 the stage stopped on an environment
failure (preflight or mid-stage), or its shard is held by a live driver (fix the cause and
run the same command again).
"""

from __future__ import annotations

import sys
from contextlib import ExitStack
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from harness.failures import STOPPED, exits_with_code
from harness import studies
from harness.records.shards import DriverLock, Shard
from harness.run.budget import Budget, BudgetReached
from harness.run.sweep import multirun_flag_first, sweep_label  # noqa: F401  (kept importable here)

CONF = Path(__file__).resolve().parents[2] / "conf"


def _same_endpoint(a, b) -> bool:
    from harness.endpoints.registry import identity

    return identity(a) == identity(b)


def run_agents(cfg, sweep: dict | None = None):
    """The agent stages (harness.run.agents), judged after their runs when the stage says so."""
    from harness.run.agents import AgentStep

    return drive(AgentStep(cfg), cfg, sweep, judge_after=_answer_check)


def run_personal(cfg, sweep: dict | None = None):
    """The personalization study (harness.personal.step); judged with `make judge` (the rubric)."""
    from harness.personal.step import PersonalStep

    return drive(PersonalStep(cfg), cfg, sweep)


def _answer_check(cfg, rd, endpoint, budget):
    from judge.answer_check import judge_stage

    judge_stage(cfg, rd, endpoint=endpoint, budget=budget)
    return {rid: j.label for (rid, kind), j in rd.judgements(str(cfg.judge.name)).items() if kind == "correct"}


def drive(step, cfg, sweep: dict | None = None, judge_after=None):
    """One stage of any study through the one driver: plan, preflight, the runs, (the judge).

    `step` is the study's run step (harness.run.driver.RunStep); `judge_after(cfg, rd,
    endpoint, budget) -> labels` judges after the runs when the stage asks for it
    (`stage.judge_after_run`). Returns the stage's RunDir (None for a dry run)."""
    from harness.endpoints.client import retry_line, timeout_s
    from harness.endpoints.proxy import MeteringProxy
    from harness.endpoints.registry import open_endpoint, served_context
    from harness.endpoints.usage import context_tokens, counter
    from harness.records.ledger import Ledger
    from harness.run import fidelity
    from harness.run import preflight as pf
    from harness.run.driver import open_stage, pending_runs, run_stage

    plan = step.plan
    shard = Shard.parse(cfg.get("shard"))
    judge_after = judge_after if bool(cfg.stage.get("judge_after_run", False)) and shard is None else None
    judging = judge_after is not None
    checks = step.static_checks(judging)
    shapes = step.request_shapes(judging)
    if cfg.dry_run:  # the plan, the checks that cost nothing, the requests it would send, the forecast
        try:
            print(step.render_plan())
            print("fidelity manifest (stage.json; the report opens with it):")
            print(fidelity.render(step.fidelity_rows()))
            print("\n".join(c.line() for c in checks))
            print(retry_line(step.model_cfg))
            print("\n".join(pf.dry_run_lines(shapes)))
            print(step.forecast())
            study = studies.get(cfg.stage.get("kind"))
            if study.power:  # the analysis's power of each comparison, priced with the forecast
                print(study.step("power")(cfg, plan, getattr(step, "forecast_rows", [])))
            print(f"dry run: nothing started ({len(plan.runs)} runs planned)")
        except BrokenPipeError:  # `| head`: the reader has what it wanted
            sys.stderr.close()
        if [c for c in checks if c.ok is False]:
            sys.exit(STOPPED)
        return None
    for c in checks:
        print(c.line(), file=sys.stderr)
    pf.raise_first_failure(checks)
    rd, info = open_stage(cfg, plan, step.stage_info(), sweep)
    model_cfg = OmegaConf.to_container(cfg.model, resolve=True)
    shared = None
    with ExitStack() as stack:
        stack.enter_context(DriverLock(rd.root, shard))  # held until this driver ends, however it ends
        pending, settled = pending_runs(rd, plan, bool(cfg.get("retry_failed", False)))
        whose = f" (shard {shard}: {settled + len(pending)} of them)" if shard else ""
        print(f"{rd.root}: {len(plan.runs)} runs planned{whose}, {settled} recorded, {len(pending)} to run"
              + (" (failed runs again: retry_failed=true)" if cfg.get("retry_failed") else ""), file=sys.stderr)
        if shard and cfg.stage.get("judge_after_run", False):
            print(f"shard {shard}: not judging here; once every shard is done, judge the stage once "
                  f"(make judge STAGE={cfg.stage.name} with the same overrides, stage.label={cfg.stage.label})",
                  file=sys.stderr)
        # the spending cap covers the whole stage: every shard's ledger, the judge's calls too
        budget = Budget(cfg.get("budget_usd"), model_cfg.get("prices"),
                        OmegaConf.to_container(cfg.judge, resolve=True).get("prices"), rd.ledger_paths)
        if budget.cap is not None:
            print(f"  budget: ${budget.spent:.4f} of ${budget.cap:.4f} spent so far (list price, agents and judge)",
                  file=sys.stderr)
        if pending and budget.exhausted:
            raise BudgetReached(budget.stopped(settled, settled + len(pending)))
        if pending:
            endpoint = stack.enter_context(open_endpoint(cfg.model))
            if endpoint.info.get("context_tokens") and not context_tokens(step.model_cfg):
                step.model_cfg.context_tokens = endpoint.info["context_tokens"]  # what the server says it reads
                print(f"  context  {endpoint.info['context_tokens']:,} tokens ({endpoint.info['context_source']})",
                      file=sys.stderr)
            ledger = Ledger(rd.ledger_path)
            stack.callback(ledger.close)
            proxy = stack.enter_context(MeteringProxy(endpoint.base_url, ledger, endpoint.key,
                                                      timeout_s(step.model_cfg), str(step.model_cfg.model),
                                                      context_tokens(step.model_cfg), counter(step.model_cfg), budget))
            proxy.stopping = step.abort  # the stage stopping: the proxy forwards nothing more
            calls = pf.stage_calls(proxy.base_url, cfg, shapes, ledger)  # one per request shape
            print("\n".join(c.line() for c in calls), file=sys.stderr)
            pf.raise_first_failure(calls)
            if step.model_cfg.truncates_silently and not context_tokens(step.model_cfg):
                # Ollama lists a model's context in /api/ps only once it is loaded: the preflight loaded it
                ctx, source = served_context(endpoint.base_url, str(step.model_cfg.model), endpoint.key)
                if ctx:
                    step.model_cfg.context_tokens = proxy.context = ctx
                    print(f"  context  {ctx:,} tokens ({source}, once loaded)", file=sys.stderr)
            if budget.estimated_line():
                print(budget.estimated_line(), file=sys.stderr)
            step.start(rd, info, endpoint, proxy.base_url)
            run_stage(cfg, step, rd, ledger, pending, budget)
            ledger.close()  # the judge appends to the same ledger through its own proxy
            shared = endpoint if _same_endpoint(cfg.judge, cfg.model) else None
        labels = judge_after(cfg, rd, shared, budget) if judging else None
    print(step.summary(rd, labels, str(cfg.judge.name) if judging else None), file=sys.stderr)
    return rd


@hydra.main(config_path=str(CONF), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with exits_with_code():  # 2 bad input, 3 stopped, 4 budget (harness.failures)
        from harness.run import settings
        from harness.run.driver import scheduler_ending

        scheduler_ending()  # before the preflight: a job told to end during it starts no run

        nodes = settings.check(cfg)  # an added option nobody reads, or two presets of one name: exit 2 before anything
        from judge import kinds

        kinds.chosen(nodes.judge, cfg.get("stage"))  # an unregistered judgement kind: exit 2 now, not after the runs
        sweep = sweep_label(cfg)
        try:
            studies.get(cfg.stage.get("kind")).step("run")(cfg, sweep)  # the stage's study (harness/studies/)
        except Exception as exc:
            raise _time_limit(exc) or exc


def _time_limit(exc: Exception):
    """In a SLURM job, submitit's signal handler raises UncompletedJobError inside the driver when the job
    nears its time limit and may not be requeued: say so, as a stop the same command resumes (exit 3)."""
    if type(exc).__name__ != "UncompletedJobError" or "timed-out" not in str(exc):
        return None
    from harness.run.driver import StageStopped

    return StageStopped(f"the scheduler's time limit ended this job ({exc}); what is recorded stays: run the "
                        "same command to finish the stage, or ask for more time (hydra.launcher.timeout_min)")


if __name__ == "__main__":
    sys.argv = multirun_flag_first(sys.argv)
    main()
