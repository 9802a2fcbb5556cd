"""The second paper's personalization study: its run step (harness.personal.step) through the one driver,
the rubric judge, its own tables."""

from harness.studies import Study, register

register(Study("personal", run="harness.cli.run:run_personal", judge="judge.rubric:judge_command",
               analysis="analysis.personal", record="personal_record", about="kernel-managed injection (second paper)",
               judge_checks="the rubric's human validation (Section 4.3): `python -m analysis.personal.validation "
                            "sample runs=<folder>`, then `... agree ratings=<folder>/validation/ratings.csv`"))
