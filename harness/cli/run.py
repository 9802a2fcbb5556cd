"""`python -m harness.run stage=NAME [overrides]` — what `make run STAGE=NAME` calls.

`dry_run=true` validates the data and prints the plan (conditions x questions x
repeats in the seeded interleaved order) without calling any model; `--cfg job`
prints the resolved configuration.
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from harness.data.longmemeval import DataError
from harness.data.samples import SampleError
from harness.run.plan import PlanError, build
from harness.records import StageMismatch

CONF = Path(__file__).resolve().parents[2] / "conf"


@hydra.main(config_path=str(CONF), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    try:
        if cfg.stage.kind == "backends":
            from harness.memory.study import run_study

            run_study(cfg)
            return
        plan = build(cfg)
        if cfg.dry_run:
            try:
                print(plan.render())
            except BrokenPipeError:  # `| head`: the reader has what it wanted
                sys.stderr.close()
            return
        from harness.run.driver import EndpointError, run_stage

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
