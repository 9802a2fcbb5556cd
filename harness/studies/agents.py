"""The first paper's agent stages (LongMemEval and LongMemEval-Org): its run step (harness.run.agents)
through the one driver, LongMemEval's answer check, the paper's tables."""

from harness.studies import Study, register


def run(cfg, sweep: dict | None = None):
    """`make run` for an agent stage; judged right after its runs when the stage says `judge_after_run`."""
    from harness.run.agents import AgentStep
    from harness.run.driver import drive

    return drive(AgentStep(cfg), cfg, sweep, judge_after=_answer_check)


def _answer_check(cfg, rd, endpoint, budget):
    from judge.answer_check import judge_stage

    judge_stage(cfg, rd, endpoint=endpoint, budget=budget)
    return {rid: j.label for (rid, kind), j in rd.judgements(str(cfg.judge.name)).items() if kind == "correct"}


register(Study("agents", run="harness.studies.agents:run", judge="judge.answer_check:judge_command",
               analysis="analysis.run:main", record="record", power="analysis.power:stage_lines", publishable=True,
               sweep_check="harness.run.fidelity:check_job", locked=True,
               about="agent runs (Sections 5.1-5.3)",
               judge_checks="`make agreement` (a second judge, Appendix E) and `make probe` (planted answers)"))
