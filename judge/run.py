"""`python -m judge.run stage=NAME [judge=local|deepseek|...]` — what `make judge` calls.

Judges a stage's records with the judge its study names (harness/studies/: `Study.judge`,
and `Study.judge_refusal`, asked before anything, even in a dry run); a study that names no
judge (the backend study) has nothing to judge (exit 0). The judges are peers over
judge/common.py; this module names none of them and no study.

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


@returns_exit_code  # 2 bad input, 3 stopped, 4 budget (harness.failures)
def main_entry(cfg) -> int:
    from harness.run import settings

    settings.check(cfg)  # an added option nobody reads (+judge.kind=...), or two presets of one name: exit 2
    from harness import studies

    rd = RunDir.for_stage(cfg)
    opened = rd.stage_path.exists()  # stage.json: the driver opened the folder (a study's records are its own)
    started = opened or (rd.root / "records").is_dir()  # records written by hand or an older driver: the command's study
    study = studies.get(rd.stage().kind if opened else cfg.stage.get("kind"))
    # a study other than the default keeps its folder as it likes (no stage.json, no records/): its judge reads it
    started = started or (study.kind != studies.get(None).kind and rd.root.is_dir() and any(rd.root.iterdir()))
    if study.judge is None:
        print(f"{rd.root}: a {study.kind} stage has nothing to judge (its study, harness/studies/, names no judge); "
              "make analyze reads it as it is", file=sys.stderr)
        return 0
    if opened and not cfg.get("paper_judge") and _recorded_gate(rd.root):
        from omegaconf import open_dict

        with open_dict(cfg):  # a folder made under the paper's judge gate is judged under it, whatever the command
            cfg.paper_judge = True
    refused = study.step("judge_refusal")(cfg) if study.judge_refusal else None
    if refused:
        print(f"error: {refused}", file=sys.stderr)
        return BAD_INPUT
    if not started and cfg.get("dry_run"):  # after the stage's own dry run (make run, then make judge STAGE=personal_paper)
        j = cfg.get("judge") or {}
        print(f"dry run: {rd.root} has no records yet: judge {j.get('name')} (model {j.get('model')}) would score "
              "each of its runs once the stage has run; nothing sent, nothing written (dry_run=true)")
        return 0
    if not started:
        print(f"error: {rd.root} has no records; run the stage first (make run STAGE={cfg.stage.name})",
              file=sys.stderr)
        return BAD_INPUT
    return study.step("judge")(cfg, rd)


def _recorded_gate(root) -> bool:
    """The stage folder's own config (config.yaml, written when the stage started) asked for the paper's judge."""
    from omegaconf import OmegaConf

    path = root / "config.yaml"
    return path.is_file() and bool(OmegaConf.load(path).get("paper_judge"))


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from harness.run.sweep import sweep_label

    from contextlib import nullcontext

    from harness.run.offline import offline

    sweep_label(cfg)  # in a sweep (-m), judge each job's folder
    with offline() if cfg.get("dry_run") else nullcontext():  # a dry run reaches nothing beyond this machine
        code = main_entry(cfg)
    if code:
        sys.exit(code)


if __name__ == "__main__":
    from harness.failures import exits_with_code
    from harness.run.settings import refuse_unknown_keys
    from harness.run.sweep import dry_sweep_here, multirun_flag_first

    sys.argv = dry_sweep_here(multirun_flag_first(sys.argv))  # a dry run's sweep is judged here, never submitted
    with exits_with_code():  # `judge.temprature=0`: exit 2 naming the nearest key
        refuse_unknown_keys(sys.argv, Path(__file__).resolve().parents[1] / "conf")
    main()
