"""terminal(command) in a read-only sandbox that shows only the agent's store (Appendix B)."""

from dataclasses import dataclass

from conditions import Access
from conditions.session_search import store_notes
from harness.runtime import ShellTool, build_store, runtime_label, shell_paragraph

NEEDS = ("sandbox", "runtime")  # checked before the first run (harness.run.preflight)
FORECAST = {"calls": 5, "result_chars": 2_500, "schema_chars": 900}  # harness.run.forecast


@dataclass
class Settings:
    """No options of its own: the sandbox's bounds are the runtime's (harness/runtime/sandbox)."""


def build(cfg: Settings, ctx) -> Access:
    q, a = ctx.question, ctx.assignment
    sha = ctx.env.plan.data["sha256"]
    store = build_store(q, sha) if a is None else build_store(
        q, sha, agent=ctx.agent, layout=f"org-{ctx.spec.variant}", sessions=a.sessions_of(ctx.agent))
    tool = ShellTool(store)
    return Access(text=shell_paragraph(), tools=[tool],
                  # which bounds hold on this machine (cgroup per call, or the weaker per-process rlimits)
                  notes={"runtime": runtime_label(), "store": store_notes(store), "sandbox": tool.describe()})
