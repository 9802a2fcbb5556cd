"""The first paper's agent stages (LongMemEval and LongMemEval-Org): runs through the driver,
LongMemEval's answer check, the paper's tables."""

from harness.studies import Study, register

register(Study("agents", run="harness.cli.run:run_agents", judge="judge.answer_check:judge_command",
               analysis="analysis.run", record="record", power="analysis.power:stage_lines", about="agent runs (Sections 5.1-5.3)",
               judge_checks="`make agreement` (a second judge, Appendix E) and `make probe` (planted answers)"))
