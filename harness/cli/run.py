"""`python -m harness.run stage=NAME [overrides]` — what `make run STAGE=NAME` calls.

Hands the stage to its study's run step (harness/studies/<kind>.py: `Study.run`), which goes
through the one driver (harness.run.driver.drive): plan, preflight, the runs, and (when the
stage says `judge_after_run`) the judge, reusing the model's endpoint when the judge is the
same model. `dry_run=true` validates the data, prints the plan and the checks that cost
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
from contextlib import nullcontext
from pathlib import Path

import hydra
from omegaconf import DictConfig

from harness.failures import exits_with_code
from harness import studies
from harness.run.sweep import multirun_flag_first, sweep_label  # noqa: F401  (kept importable here)

CONF = Path(__file__).resolve().parents[2] / "conf"


@hydra.main(config_path=str(CONF), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from harness.run.offline import offline

    # 2 bad input, 3 stopped, 4 budget (harness.failures); a dry run reaches nothing beyond this machine
    with exits_with_code(), (offline() if cfg.get("dry_run") else nullcontext()):
        from harness.run import settings
        from harness.run.driver import scheduler_ending

        scheduler_ending()  # before the preflight: a job told to end during it starts no run

        nodes = settings.check(cfg)  # an added option nobody reads, or two presets of one name: exit 2 before anything
        from judge import kinds

        kinds.chosen(nodes.judge, cfg.get("stage"))  # an unregistered judgement kind: exit 2 now, not after the runs
        from harness.run import fidelity

        fidelity.check_sweep(settings.later_jobs())  # a sweep's other jobs under the paper's lock, before job 0 runs
        study = studies.get(cfg.stage.get("kind"))
        if fidelity.preset(cfg) is not None and not study.locked:
            raise studies.StudyError(
                f"preset={fidelity.preset(cfg)}: stage.kind {study.kind!r} is no study the preset locks (its run "
                "step does not check the stage against the paper: Study.locked, harness/studies/); run it without it")
        sweep = sweep_label(cfg)
        try:
            study.step("run")(cfg, sweep)  # the stage's study (harness/studies/)
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


def command() -> None:
    """The command line: -m first, a key that does not exist refused naming the nearest (`concurency=2`: exit 2,
    before Hydra's own refusal), then the stage."""
    from harness.run.settings import refuse_unknown_keys

    from harness.run.sweep import dry_sweep_here

    sys.argv = dry_sweep_here(multirun_flag_first(sys.argv))  # a dry run's sweep is planned here, never submitted
    with exits_with_code():
        refuse_unknown_keys(sys.argv, CONF)
    main()


if __name__ == "__main__":
    command()
