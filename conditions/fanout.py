"""LongMemEval-Org fan-out: the runtime's session search over the stores of a0-a3.

Each agent's store holds only the sessions the Org builder gave it. The model
names another agent's store with the runtime's `profile` argument; the tool
opens that agent's store with SessionDB(db_path=...) and calls the runtime's
own session_search on it (0.19.0 cannot search another profile's store by
name, and exposing the stores as profiles would put a per-tool name in every
link); every result records `fanout_mode`.
"""

from dataclasses import dataclass, field

from conditions import Access
from conditions.session_search import search_notes, store_notes
from harness.runtime import SessionSearchTool, build_org_stores, fanout_paragraph, runtime_label

NEEDS = ("runtime",)  # the runtime's stores and tool: the fidelity manifest names its version
FORECAST = {"calls": 4, "result_chars": 16_000, "schema_chars": 5_800}  # harness.run.forecast
# the exposure replay re-runs memory-space retrievals; fan-out reads the runtime's stores instead
NOT_REPLAYED = "fan-out searches the runtime's stores"


@dataclass
class Settings:
    """The agents whose stores are searched (conf/condition/fanout.yaml)."""

    agents: list = field(default_factory=lambda: ["a0", "a1", "a2", "a3"])


def build(cfg: Settings, ctx) -> Access:
    if not ctx.is_org:
        raise ValueError("fanout is a LongMemEval-Org condition; run it in an Org stage")
    agents = [str(a) for a in cfg.agents]
    stores = build_org_stores(ctx.question, ctx.env.plan.data["sha256"], ctx.spec.variant, agents=agents)
    tool = SessionSearchTool(stores, home=ctx.agent)
    others = tuple(a for a in agents if a != ctx.agent)
    return Access(text=fanout_paragraph(others), tools=[tool], close=[tool.close],
                  notes={"runtime": runtime_label(), **search_notes(tool),
                         "fanout_mode": tool.fanout_mode,
                         "stores": {a: store_notes(s) for a, s in stores.items()}})
