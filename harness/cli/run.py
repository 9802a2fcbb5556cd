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
from harness.records.shards import DriverLock, Shard
from harness.run.budget import Budget, BudgetReached
from harness.run.plan import build
from harness.run.sweep import multirun_flag_first, sweep_label  # noqa: F401  (kept importable here)

CONF = Path(__file__).resolve().parents[2] / "conf"


def _same_endpoint(a, b) -> bool:
    from harness.endpoints.registry import identity

    return identity(a) == identity(b)


def run_agents(cfg, sweep: dict | None = None) -> None:
    from harness.endpoints.proxy import MeteringProxy
    from harness.endpoints.registry import open_endpoint
    from harness.records.ledger import Ledger
    from harness.run import preflight as pf
    from harness.run.driver import open_stage, pending_runs, run_stage, summary

    plan = build(cfg)
    shard = Shard.parse(cfg.get("shard"))
    judge_after = bool(cfg.stage.get("judge_after_run", False)) and shard is None
    checks = pf.static_checks(cfg, plan, judge_after)
    if cfg.dry_run:
        try:
            from harness.run.forecast import render as forecast

            from harness.run import fidelity

            print(plan.render())
            print("fidelity manifest (stage.json; the report opens with it):")
            print(fidelity.render(fidelity.manifest(cfg, plan)))
            print("\n".join(c.line() for c in checks))
            print("\n".join(pf.dry_run_lines(cfg, judge_after, {r.condition for r in plan.runs})))
            print(forecast(cfg, plan))
        except BrokenPipeError:  # `| head`: the reader has what it wanted
            sys.stderr.close()
        failed = [c for c in checks if c.ok is False]
        if failed:
            sys.exit(STOPPED)
        return
    for c in checks:
        print(c.line(), file=sys.stderr)
    pf.raise_first_failure(checks)
    rd, info = open_stage(cfg, plan, sweep)
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
                        OmegaConf.to_container(cfg.judge, resolve=True).get("prices"), rd.ledger_paths())
        if budget.cap is not None:
            print(f"  budget: ${budget.spent:.4f} of ${budget.cap:.4f} spent so far (list price, agents and judge)",
                  file=sys.stderr)
        if pending and budget.exhausted:
            raise BudgetReached(budget.stopped(settled, settled + len(pending)))
        if pending:
            endpoint = stack.enter_context(open_endpoint(cfg.model))
            ledger = Ledger(rd.ledger_path)
            ledger.listeners.append(budget.add)
            stack.callback(ledger.close)
            proxy = stack.enter_context(MeteringProxy(endpoint.base_url, ledger, endpoint.key,
                                                      float(cfg.model.get("timeout_s", 600)), str(cfg.model.model)))
            calls = pf.stage_calls(proxy.base_url, cfg, judge_after, ledger, {r.condition for r in plan.runs})  # one per request shape
            print("\n".join(c.line() for c in calls), file=sys.stderr)
            pf.raise_first_failure(calls)
            run_stage(cfg, plan, rd, info, endpoint, ledger, proxy.base_url, pending, budget)
            ledger.close()  # the judge appends to the same ledger through its own proxy
            shared = endpoint if _same_endpoint(cfg.judge, cfg.model) else None
        labels = None
        if judge_after:
            from judge.answer_check import judge_stage

            judge_stage(cfg, rd, endpoint=shared, budget=budget)
            labels = {rid: j.label for (rid, kind), j in rd.judgements(str(cfg.judge.name)).items() if kind == "correct"}
    print(summary(rd, labels, str(cfg.judge.name) if judge_after else None), file=sys.stderr)


@hydra.main(config_path=str(CONF), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with exits_with_code():  # 2 bad input, 3 stopped, 4 budget (harness.failures)
        from harness import studies

        sweep = sweep_label(cfg)
        studies.get(cfg.stage.get("kind")).step("run")(cfg, sweep)  # the stage's study (harness/studies/)


if __name__ == "__main__":
    sys.argv = multirun_flag_first(sys.argv)
    main()
