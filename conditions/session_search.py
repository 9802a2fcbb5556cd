"""The runtime's own session_search over the agent's Hermes store (default or compact output).

The store is written by the runtime's storage code and the tool is the runtime's
own, called as a library on that store; its schema and description are the
installed package's. `compact: true` cuts each result to the matching message
and one neighbour on each side (<= 1,000 characters each), without bookends.
"""

from dataclasses import dataclass

from conditions import Access
from harness.runtime import SessionSearchTool, build_store, runtime_label

NEEDS = ("runtime",)  # the runtime's store and tool: the fidelity manifest names its version


@dataclass
class Settings:
    """compact: cut each result to the matching message and a neighbour each side (conf/condition/session_search*.yaml)."""

    compact: bool = False


def forecast(cfg: Settings) -> dict:
    """harness.run.forecast's typical run: 0.21.5's search returns ~15k characters (0.19.0's 8-31k); compact ~3k."""
    return {"calls": 3, "result_chars": 3_000 if cfg.compact else 15_000, "schema_chars": 5_800}


def store_notes(info) -> dict:
    return {"agent": info.agent, "sessions": info.sessions, "rounds": info.rounds, "bytes": info.bytes,
            "build_s": info.build_s, "cache_hit": info.cache_hit}


def build(cfg: Settings, ctx) -> Access:
    q, a = ctx.question, ctx.assignment
    sha = ctx.env.plan.data["sha256"]
    if a is None:
        store = build_store(q, sha)
    else:
        store = build_store(q, sha, agent=ctx.agent, layout=f"org-{ctx.spec.variant}",
                            sessions=a.sessions_of(ctx.agent))
    tool = SessionSearchTool(store, compact=cfg.compact)
    return Access(text=str(cfg.access), tools=[tool], close=[tool.close],
                  notes={"runtime": runtime_label(), **search_notes(tool), "compact": cfg.compact,
                         "store": store_notes(store)})


def search_notes(tool) -> dict:
    """What a run records about the search it had: the runtime's shape, its tool module and the texts' size (P)."""
    import json

    from harness.runtime import tool_sha256

    return {"session_search_shape": tool.shape, "session_search_tool_sha256": tool_sha256(),
            "schema_chars": len(json.dumps(tool.schema(), ensure_ascii=False))}
