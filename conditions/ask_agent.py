"""Asking another agent: the memory tool over own units plus ask_agent(agent, question).

ask_agent runs the named public agent's own loop (its memory tool over its own
units, at most `asked_max_rounds` tool rounds) and returns its answer: a
generated text, not records. The asked loop's model calls are metered under the
asking run (role `asked:<agent>`) and its retrievals are logged with the asked
agent as the viewer, so the exposure replay covers them; its dialogue is
recorded under the ask_agent call in the run's transcript.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

from conditions import Access
from conditions import memory_tool
from conditions.memory_tool import REPLAY, SEARCH_TOOLS, check_guidance, tools_for  # noqa: F401 - descriptors
from harness.data.longmemeval import DATE_FORMAT
from harness.run.loop import run_loop
from harness.run.prompts import system_prompt
from harness.runtime.tools import ToolError, ToolResult

NEEDS = ("memory_space",)  # checked before the first run (harness.run.preflight)
FORECAST = {"calls": 12, "result_chars": 4_000, "schema_chars": 1_600}  # asked agents' loops included

@dataclass
class Settings(memory_tool.Settings):
    """The memory tool's options, the agents one may ask and the asked loop's rounds (conf/condition/ask_agent.yaml)."""

    agents: list = field(default_factory=lambda: ["a1", "a2", "a3"])
    asked_max_rounds: int = 6


ASKED_ACCESS = ("Use memory_search to find relevant past exchanges (each result shows its date, session and round) "
                "and memory_read to see a whole exchange or the rounds around it.")


def ask_schema(agents: list[str]) -> dict:
    return {"type": "function", "function": {
        "name": AskAgent.name,
        "description": ("Ask another assistant of the organisation a question. It searches its own memory "
                        "and answers in its own words."),
        "parameters": {"type": "object", "properties": {
            "agent": {"type": "string", "enum": agents},
            "question": {"type": "string", "description": "What to ask, self-contained."},
        }, "required": ["agent", "question"]}}}


def tool_texts(cfg: Settings, org: bool) -> list[dict]:
    """The memory tool's texts and ask_agent's schema: its request carries all three tools."""
    return [*memory_tool.tool_texts(cfg, org), ask_schema([str(a) for a in cfg.agents])]


class AskAgent:
    name = "ask_agent"

    def __init__(self, ctx, cfg: Settings):
        self.ctx, self.cfg = ctx, cfg
        self.agents = [str(a) for a in cfg.agents]

    def schema(self) -> dict:
        return ask_schema(self.agents)

    def __call__(self, agent: str = "", question: str = "") -> ToolResult:
        if agent not in self.agents:
            raise ToolError(f"agent must be one of {', '.join(self.agents)}")
        if not isinstance(question, str) or not question.strip():
            raise ToolError("question must be a non-empty string")
        t0 = time.perf_counter()
        tools = tools_for(self.ctx, dataclasses.replace(self.cfg, scope="own"), agent=agent)
        system = system_prompt(self.ctx.question.date.strftime(DATE_FORMAT), ASKED_ACCESS, org=True)
        result = run_loop(self.ctx.run_agent(f"asked:{agent}"), system, question, tools,
                          max_rounds=self.cfg.asked_max_rounds,
                          first_tool_choice=getattr(self.ctx, "first_tool_choice", None),
                          recorder=getattr(self.ctx, "transcript", None))
        return ToolResult(result.answer or "(no answer)", retrieval_s=0.0,
                          log={"kind": "ask", "agent": agent, "question": question,
                               "asked_rounds": result.tool_rounds, "wall_s": round(time.perf_counter() - t0, 4)})


def build(cfg: Settings, ctx) -> Access:
    return Access(text=str(cfg.access), tools=[*tools_for(ctx, cfg), AskAgent(ctx, cfg)],
                  notes={"guidance": check_guidance(cfg.guidance), "asked_agents": [str(a) for a in cfg.agents],
                         "asked_max_rounds": cfg.asked_max_rounds})
