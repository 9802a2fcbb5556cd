"""The second paper's personalization study: its run step (harness.personal.step) through the one driver,
the rubric judge (refused before anything when `paper_judge=true` and the judge is not the paper's),
its own tables."""

from harness.studies import Study, register


def run(cfg, sweep: dict | None = None):
    """`make run` for a personalization stage; judged with `make judge` (the rubric)."""
    from harness.personal.step import PersonalStep
    from harness.run.driver import drive

    return drive(PersonalStep(cfg), cfg, sweep)


register(Study("personal", run="harness.studies.personal:run", judge="judge.rubric:judge_command",
               judge_refusal="judge.rubric:paper_judge_refusal", analysis="analysis.personal.report:main",
               record="personal_record", inspect="analysis.inspect_personal:eval_logs", locked=True,
               about="kernel-managed injection (second paper)",
               judge_checks="the rubric's human validation (Section 4.3): `python -m analysis.personal.validation "
                            "sample runs=<folder>`, then `... agree ratings=<folder>/validation/ratings.csv`"))
