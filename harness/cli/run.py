"""`python -m harness.run stage=NAME [overrides]` — what `make run STAGE=NAME` calls.

Composes the steps of a stage: plan, preflight, the runs, and (when the stage says
`judge_after_run`) the judge, reusing the model's endpoint when the judge is the same
model. `dry_run=true` validates the data, prints the plan and the checks that cost
nothing, and stops. `--cfg job` prints the resolved configuration.

Sweeps: `-m model=a,b seed=0,1` runs one stage per combination (in sequence, or on a
cluster with `hydra/launcher=slurm`); each job's label is the stage label plus its
overrides (sweep_label), so each combination has its own run folder. `shard=I/N` makes
this driver own every N-th run of the plan (harness.records.shards); `-m shard=0/4,1/4,2/4,3/4`
runs one stage as four jobs sharing one folder. A sharded driver does not judge: judge once
every shard is done (`make judge`).

Exit codes: 0 done; 2 bad configuration or data; 3 the stage stopped on an environment
failure (preflight or mid-stage), or its shard is held by a live driver (fix the cause and
run the same command again).
"""

from __future__ import annotations

import hashlib
import re
import sys
from contextlib import ExitStack
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from harness.data.longmemeval import DataError
from harness.data.samples import SampleError
from harness.failures import EnvironmentFailure
from harness.records import StageMismatch
from harness.records.schema import RecordError
from harness.records.shards import DriverLock, Shard, ShardBusy, ShardError
from harness.run.budget import Budget, BudgetReached
from harness.run.plan import PlanError, build

CONF = Path(__file__).resolve().parents[2] / "conf"


def _same_endpoint(a, b) -> bool:
    from harness.endpoints.registry import identity

    return identity(a) == identity(b)


def sweep_label(cfg) -> dict | None:
    """In a multirun job, set stage.label to `<label>+<overrides>` and return what stage.json records
    (e.g. smoke+model-deepseek+seed-0; `make judge` with the same -m arguments finds the same folders).

    The overrides are the job's, sorted, without the keys listed under
    hydra.job.config.override_dirname.exclude_keys (shard, where things live, speed): the
    shards of one combination share one folder, and a relaunch with the same command finds it.
    A long value (a path, a list) is cut and tagged with its hash.
    """
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return None
    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN:
        return None
    dirname = str(hc.job.override_dirname or "")
    base = str(cfg.stage.label)
    excluded = set(hc.job.config.override_dirname.exclude_keys)
    parts = []
    for o in sorted(str(o) for o in hc.overrides.task):
        key, _, value = o.partition("=")
        if key.lstrip("+~") in excluded:
            continue
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", value)
        if len(safe) > 24:  # a long value (a path, a list) is shortened; stage.json keeps it whole
            safe = safe[:12] + "~" + hashlib.sha256(value.encode()).hexdigest()[:8]
        value = safe
        parts.append(f"{re.sub(r'[^A-Za-z0-9._-]', '_', key)}-{value}")
    if parts:
        suffix = "+".join(parts)
        if len(suffix) > 150:
            suffix = suffix[:120] + "~" + hashlib.sha256(suffix.encode()).hexdigest()[:12]
        cfg.stage.label = f"{base}+{suffix}"
    return {"overrides": [str(o) for o in hc.overrides.task], "override_dirname": dirname, "base_label": base}


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
            sys.exit(3)
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
            from judge.run import judge_stage

            judge_stage(cfg, rd, endpoint=shared, budget=budget)
            labels = {rid: j.label for (rid, kind), j in rd.judgements(str(cfg.judge.name)).items() if kind == "correct"}
    print(summary(rd, labels, str(cfg.judge.name) if judge_after else None), file=sys.stderr)


def multirun_flag_first(argv: list[str]) -> list[str]:
    """Hydra's parser takes -m/--multirun only before the overrides; `make run STAGE=x ARGS="-m ..."`
    puts it after stage=x, so move it to the front."""
    flags = [a for a in argv[1:] if a in ("-m", "--multirun")]
    return argv[:1] + flags + [a for a in argv[1:] if a not in ("-m", "--multirun")]


@hydra.main(config_path=str(CONF), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    try:
        sweep = sweep_label(cfg)
        if cfg.stage.kind == "backends":
            if Shard.parse(cfg.get("shard")):
                raise ShardError("the backends study is not sharded (no model calls); run it without shard=")
            from harness.memory.study import run_study

            run_study(cfg)
            return
        if cfg.stage.kind == "personal":  # the second seed paper's own study
            from harness.personal.runner import run_personal

            run_personal(cfg)
            return
        run_agents(cfg, sweep)
    except (DataError, SampleError, PlanError, StageMismatch, RecordError, ShardError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except (EnvironmentFailure, ShardBusy) as exc:
        print(f"stopped: {exc}", file=sys.stderr)
        sys.exit(3)
    except BudgetReached as exc:
        print(f"{exc}; raise budget_usd and run the same command to go on", file=sys.stderr)
        sys.exit(4)
    except RuntimeError as exc:
        from harness.run.driver import StageStopped

        if isinstance(exc, StageStopped):
            print(f"stopped: {exc}", file=sys.stderr)
            sys.exit(3)
        raise


if __name__ == "__main__":
    sys.argv = multirun_flag_first(sys.argv)
    main()
