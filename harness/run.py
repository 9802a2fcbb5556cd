"""`python -m harness.run stage=NAME [overrides]` — what `make run STAGE=NAME` calls.

`dry_run=true` validates the data and prints the plan (conditions x questions x
repeats in the seeded interleaved order) without calling any model; `--cfg job`
prints the resolved configuration.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from harness.data.longmemeval import DataError
from harness.data.samples import SampleError
from harness.plan import PlanError, build
from harness.records import StageMismatch


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    try:
        if cfg.stage.kind == "backends":
            from harness.memory.study import run_study

            run_study(cfg)
            return
        if cfg.stage.kind == "personal":  # the second seed paper's own study
            from harness.personal.runner import run_personal

            run_personal(cfg)
            return
        plan = build(cfg)
        if cfg.dry_run:
            try:
                print(plan.render())
            except BrokenPipeError:  # `| head`: the reader has what it wanted
                sys.stderr.close()
            return
        from harness.driver import EndpointError, run_stage

        try:
            run_stage(cfg, plan)
        except EndpointError as exc:
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(2)
    except (DataError, SampleError, PlanError, StageMismatch) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
