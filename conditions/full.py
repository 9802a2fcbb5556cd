"""The whole history in the prompt, oldest first, each session headed by its date."""

from dataclasses import dataclass

from conditions import Access
from harness.data.longmemeval import DATE_FORMAT

# harness.run.forecast: one call whose prompt holds the whole history
FORECAST = {"calls": 1, "result_chars": 0, "schema_chars": 0, "prefix": "history"}


def history(question) -> str:
    parts = []
    for s in question.sessions_by_time():
        lines = [f"### Conversation on {s.date.strftime(DATE_FORMAT)}"]
        lines += [f"{'User' if t.role == 'user' else 'Assistant'}: {t.content}" for t in s.turns]
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


@dataclass
class Settings:
    """No options of its own: `access` (every condition's) holds the {history} slot."""


def build(cfg: Settings, ctx) -> Access:
    # no retrieval happens, so no evidence-hit is measured for this condition
    return Access(text=str(cfg.access).format(history=history(ctx.question)), notes={"history_in_prompt": True})
