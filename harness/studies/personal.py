"""The second paper's personalization study: its trial runner, the rubric judge, its own tables."""

from harness.studies import Study, register

register(Study("personal", run="harness.personal.runner:run_personal", judge="judge.rubric:judge_command",
               analysis="analysis.personal", record="personal_record", about="kernel-managed injection (second paper)"))
