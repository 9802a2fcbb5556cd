"""What every tool of every condition hands back to the agent loop.

The loop shows `text` to the model; the rest is measurement: which sessions the
result contained (for the evidence-hit rate), how long retrieval took, whether
it was empty or an error (the runtime's search swallows FTS5 errors, so these
are counted per run), and a `log` entry the run record keeps for the exposure
replay (query, filters, view, returned unit ids).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class ToolResult:
    text: str
    sessions: list[str] = field(default_factory=list)  # opaque session ids present in the result
    retrieval_s: float = 0.0
    empty: bool = False
    error: bool = False
    log: dict[str, Any] = field(default_factory=dict)


class Tool(Protocol):
    name: str

    def schema(self) -> dict:
        """The OpenAI tool definition: {"type": "function", "function": {name, description, parameters}}."""

    def __call__(self, **arguments: Any) -> ToolResult: ...


class ToolError(Exception):
    """Raised by a tool for bad arguments; the loop returns the message to the model as a tool error."""
