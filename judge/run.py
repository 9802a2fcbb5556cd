"""`python -m judge.run stage=NAME [judge=local|deepseek|...]` — what `make judge` calls.

Judges a stage's records with the judge its study names (harness/studies/): LongMemEval's
answer check for the agent stages (judge/answer_check.py), the rubric for the
personalization study (judge/rubric.py). Both are peers over judge/common.py; this module
only asks the study which.

Exit codes: 0 done; 2 no records, bad prompts or records; 3 stopped on an environment
failure, or some judgements failed (run the same command again); 4 the budget is reached.
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from harness.failures import BAD_INPUT, returns_exit_code
from harness.records import RunDir
from harness.run import sweep as _sweep  # noqa: F401  (hydra.sweep.dir's resolver: a dry run writes no sweep file)
from judge.answer_check import identity, judge_model_config, judge_stage, judgements_path, load_judgements  # noqa: F401  (the old judge.run names)
from judge.common import judgements_dir  # noqa: F401


@returns_exit_code  # 2 bad input, 3 stopped, 4 budget (harness.failures)
def main_entry(cfg) -> int:
    from harness.run import settings

    settings.check(cfg)  # an added option nobody reads (+judge.kind=...), or two presets of one name: exit 2
    rd = RunDir.for_stage(cfg)
    if not rd.records_dir.exists() and cfg.get("dry_run"):  # after the stage's own dry run (make personal-paper)
        from judge.rubric import paper_judge_refusal

        refused = paper_judge_refusal(cfg)
        if refused:
            print(f"error: {refused}", file=sys.stderr)
            return BAD_INPUT
        j = cfg.get("judge") or {}
        print(f"dry run: {rd.root} has no records yet: judge {j.get('name')} (model {j.get('model')}) would score "
              "each of its runs once the stage has run; nothing sent, nothing written (dry_run=true)")
        return 0
    if not rd.records_dir.exists():
        print(f"error: {rd.root} has no records; run the stage first (make run STAGE={cfg.stage.name})",
              file=sys.stderr)
        return BAD_INPUT
    from harness import studies

    return studies.get(rd.stage().kind if rd.stage_path.exists() else cfg.stage.get("kind")).step("judge")(cfg, rd)


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from harness.run.sweep import sweep_label

    sweep_label(cfg)  # in a sweep (-m), judge each job's folder
    code = main_entry(cfg)
    if code:
        sys.exit(code)


if __name__ == "__main__":
    from harness.failures import exits_with_code
    from harness.run.settings import refuse_unknown_keys
    from harness.run.sweep import multirun_flag_first

    sys.argv = multirun_flag_first(sys.argv)
    with exits_with_code():  # `judge.temprature=0`: exit 2 naming the nearest key
        refuse_unknown_keys(sys.argv, Path(__file__).resolve().parents[1] / "conf")
    main()
