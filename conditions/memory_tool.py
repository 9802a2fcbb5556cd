"""The memory tool over the memory space: memory_search and memory_read (Appendix B).

memory_search(query, k=8, since, until) returns at most k results, one per round,
each with its date, opaque session id, round number, owner (LongMemEval-Org only)
and best-matching chunk; memory_read(session_id, round, window=1) returns whole
rounds, each message cut at 4,000 characters. Both only ever see the run's view:
the predicate is evaluated in the index, and a read of a session outside the
view is answered as if the session did not exist.

Guidance (`guidance:` in the condition's config, recorded in every record): `paper` is the
tool of Appendix B as the study measured it; `assisted` adds two texts the 1.5B local model
needs (docs/measurements.md, pilot_local): the date parameters say every memory predates the current date,
and an empty search limited to dates names the dates the view's memory holds and says to
search again without them. Stages on the local model choose `assisted`; every other stage,
and the paper preset, `paper`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar, get_args
from datetime import datetime, timedelta, timezone

from conditions import Access
from harness.memory.space import SCORINGS
from harness.data.longmemeval import DATE_FORMAT
from harness.memory.units import rounds_of
from harness.memory.views import Scope, View
from harness.runtime.tools import ToolError, ToolResult

NEEDS = ("memory_space",)  # checked before the first run (harness.run.preflight)
FORECAST = {"calls": 3, "result_chars": 6_000, "schema_chars": 1_200}  # without a question: harness.run.forecast
SEARCH_TOOLS = ("memory_search",)  # the tool_use table counts these calls as searches (analysis.load)

GUIDANCE = ("paper", "assisted")
MAX_K = 20
READ_CHARS = 4000
MAX_WINDOW = 5
# assisted only: small models otherwise filter on the current date, which is after every memory
LEAVE_DATES_OUT = ("Leave it out to search all your memory, unless the user asks about a particular period; "
                   "every memory is older than the current date.")


def fmt_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime(DATE_FORMAT)


def fmt_day(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%d")


def parse_day(value, end: bool) -> float | None:
    """'2023-05-30' or '2023/05/30' (a whole day, inclusive) -> epoch seconds."""
    if value in (None, ""):
        return None
    text = str(value).strip().replace("/", "-")[:10]
    try:
        day = datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=timezone.utc)
    except ValueError:
        raise ToolError(f"dates must look like 2023-05-30, got {value!r}") from None
    return (day + timedelta(days=1) - timedelta(seconds=1)).timestamp() if end else day.timestamp()


def format_results(results, show_owner: bool) -> str:
    if not results:
        return "No matching memories."
    out = []
    for i, r in enumerate(results, 1):
        u = r.unit
        head = f"[{i}] {fmt_time(u.time)} | session {u.session} | round {u.round}"
        if show_owner:
            head += f" | owner {u.owner}"
        out.append(f"{head}\n{u.text[:1000]}")
    return "\n\n".join(out)


def result_chars(question, k: int) -> int:
    """What one search adds for this question, read from its data: k of its rounds (or all it has), each as
    format_results shows one (a head line and at most 1,000 characters)."""
    sizes = sorted((len(r.user) + len(r.assistant) + 12 for s in question.sessions for r in rounds_of(s)), reverse=True)
    shown = [min(1000, n) + 80 for n in sizes]
    n = min(k, len(shown))
    return round(sum(shown) / len(shown) * n) if shown else len("No matching memories.")


def forecast(cfg: Settings, question=None) -> dict:
    """harness.run.forecast's run: three searches whose results are sized from the question's own history."""
    if question is None:
        return FORECAST
    return {**FORECAST, "result_chars": result_chars(question, cfg.k)}


def check_guidance(value) -> str:
    g = str(value)
    if g not in GUIDANCE:
        raise ValueError(f"memory tool guidance must be one of {', '.join(GUIDANCE)}, got {value!r}")
    return g


def search_schema(guidance: str, show_owner: bool, default_k: int) -> dict:
    """memory_search's definition; `assisted` adds the date guidance (module doc)."""
    dates = (" " + LEAVE_DATES_OUT) if check_guidance(guidance) == "assisted" else ""
    return {"type": "function", "function": {
        "name": MemorySearch.name,
        "description": ("Search your memory of past conversations. Returns up to k past exchanges, best match "
                        "first, each with its date, session id and round number"
                        + (" and the assistant that holds it" if show_owner else "") + "."),
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "description": "What to look for."},
            "k": {"type": "integer", "description": "How many results (default 8).", "default": default_k},
            "since": {"type": "string", "description": "Optional. Only exchanges on or after this date, YYYY-MM-DD."
                                                       + dates},
            "until": {"type": "string", "description": "Optional. Only exchanges on or before this date, YYYY-MM-DD."
                                                       + dates},
        }, "required": ["query"]}}}


def read_schema() -> dict:
    return {"type": "function", "function": {
        "name": MemoryRead.name,
        "description": "Read whole exchanges of a past session: the given round and `window` rounds on each side.",
        "parameters": {"type": "object", "properties": {
            "session_id": {"type": "string"},
            "round": {"type": "integer", "description": "Round number as shown by memory_search."},
            "window": {"type": "integer", "description": "Rounds on each side (default 1).", "default": 1},
        }, "required": ["session_id", "round"]}}}


PAPER_K = 8


@dataclass
class Settings:
    """The memory tool's own options (conf/condition/tool_*.yaml): build(), tools_for() and tool_texts() receive
    an instance, with every condition's keys (harness.run.settings.ConditionSettings), built at the config edge."""

    # the keys whose values are names a publish may show (harness.run.settings.publish_names): choices
    NAMES: ClassVar[dict] = {"scoring": SCORINGS, "scope": get_args(Scope), "guidance": GUIDANCE}

    scoring: str = "hybrid"
    scope: str = "own"
    k: int = PAPER_K
    guidance: str = "paper"

    def __post_init__(self) -> None:
        if str(self.guidance) not in GUIDANCE:  # a choice: refused at the config edge naming its key
            raise ValueError(f"guidance: {self.guidance!r} is not one of {', '.join(GUIDANCE)}")


def tool_texts(cfg: Settings, org: bool) -> list[dict]:
    """Every text the model reads from these tools besides results, as this stage has them: the fidelity
    manifest compares their sha256 with the paper's, pinned in conf/paper.yaml (harness.run.fidelity)."""
    guidance = check_guidance(cfg.guidance)
    k = cfg.k
    texts: list[dict] = [search_schema(guidance, org, k), read_schema()]
    if guidance == "assisted":
        texts.append({"empty_dated_search": "No matching memories {asked}, but your memory holds exchanges from "
                                            "{first} to {last}. Search again without since and until."})
    return texts


class MemorySearch:
    name = "memory_search"

    def __init__(self, ctx, view: View, scoring: str, default_k: int = 8, agent: str | None = None,
                 guidance: str = "paper"):
        self.ctx, self.view, self.scoring, self.default_k = ctx, view, scoring, default_k
        self.guidance = check_guidance(guidance)
        self.show_owner = ctx.is_org
        self.agent = agent or view.agent

    def schema(self) -> dict:
        return search_schema(self.guidance, self.show_owner, self.default_k)

    def __call__(self, query: str = "", k: int | None = None, since=None, until=None) -> ToolResult:
        if not isinstance(query, str) or not query.strip():
            raise ToolError("query must be a non-empty string")
        try:
            k = self.default_k if k in (None, "") else int(k)
        except (TypeError, ValueError):
            raise ToolError(f"k must be an integer, got {k!r}") from None
        k = max(1, min(k, MAX_K))
        view = View(self.view.org, self.view.agent, self.view.scope, parse_day(since, False), parse_day(until, True))
        t0 = time.perf_counter()
        results = self.ctx.space.search(query, view, k=k, scoring=self.scoring)
        took = time.perf_counter() - t0
        text, shown = format_results(results, self.show_owner), []
        if not results and self.guidance == "assisted" and (view.since is not None or view.until is not None):
            text, shown = self._outside_dates(view, since, until)
        return ToolResult(
            text=text, sessions=[r.unit.session for r in results],
            retrieval_s=took, empty=not results,
            log={"kind": "search", "agent": self.agent, "query": query, "k": k, "since": since, "until": until,
                 "scoring": self.scoring, "guidance": self.guidance, "view": view.describe(),
                 "units": [[r.unit.uid, r.unit.owner] for r in results],
                 "shown": [[u.uid, u.owner] for u in shown]})

    def _outside_dates(self, view: View, since, until) -> tuple[str, list]:
        """An empty date-filtered search says what dates the memory holds, so a model that
        filtered on the wrong period (small models pass the current date) can widen it; with the two units
        whose dates it shows (the log's `shown`: a date is read from a unit, whose owner may be private)."""
        units = list(self.ctx.space.units(view.without_dates()))
        asked = f"from {since or 'the start'} to {until or 'now'}"
        if not units:
            return f"No matching memories {asked}; your memory is empty.", []
        first, last = min(units, key=lambda u: u.time), max(units, key=lambda u: u.time)
        return (f"No matching memories {asked}, but your memory holds exchanges from {fmt_day(first.time)} to "
                f"{fmt_day(last.time)}. Search again without since and until.", [first, last])


class MemoryRead:
    name = "memory_read"

    def __init__(self, ctx, view: View, agent: str | None = None):
        self.ctx, self.view = ctx, view
        self.agent = agent or view.agent

    def schema(self) -> dict:
        return read_schema()

    def __call__(self, session_id: str = "", round=None, window=1) -> ToolResult:
        try:
            rnd, window = int(round), int(window if window not in (None, "") else 1)
        except (TypeError, ValueError):
            raise ToolError("round and window must be integers") from None
        window = max(0, min(window, MAX_WINDOW))
        session = self.ctx.session(session_id)
        if session is None or not self.ctx.view_admits_session(self.view, session_id):
            return ToolResult(f"No session {session_id!r} in your memory.", empty=True,
                              log={"kind": "read", "agent": self.agent, "session": session_id, "round": rnd,
                                   "window": window, "view": self.view.describe(), "units": []})
        t0 = time.perf_counter()
        rounds = [r for r in rounds_of(session) if rnd - window <= r.number <= rnd + window]
        owner = self.ctx.owner_of(session_id)
        parts = [f"session {session_id} | {session.date.strftime(DATE_FORMAT)}"
                 + (f" | owner {owner}" if self.ctx.is_org else "")]
        for r in rounds:
            parts.append(f"round {r.number}\nUser: {r.user[:READ_CHARS]}\nAssistant: {r.assistant[:READ_CHARS]}")
        if not rounds:
            parts.append(f"(no round {rnd}; the session has {len(rounds_of(session))} rounds)")
        return ToolResult("\n\n".join(parts), sessions=[session_id] if rounds else [],
                          retrieval_s=time.perf_counter() - t0, empty=not rounds,
                          log={"kind": "read", "agent": self.agent, "session": session_id, "round": rnd,
                               "window": window, "view": self.view.describe(),
                               "units": [[f"{self.view.org}|{session_id}|{r.number}|*", owner] for r in rounds]})


def replay_read(ctx, view: View, log: dict) -> list[list[str]]:
    """The exposure replay of a logged memory_read: the same read under the logged view (harness.run.replay)."""
    res = MemoryRead(ctx, view, agent=log.get("agent"))(session_id=log.get("session"), round=log.get("round"),
                                                       window=log.get("window", 1))
    return [list(u) for u in res.log.get("units", [])]


# log kind -> how the replay re-executes it; a `search` is the memory space's own (harness.run.replay)
REPLAY = {"read": replay_read}


def tools_for(ctx, cfg: Settings, agent: str | None = None):
    ctx.space  # load the organisation's units now, so indexing is setup and not retrieval time
    view = ctx.view(cfg.scope, agent=agent)
    return [MemorySearch(ctx, view, cfg.scoring, cfg.k, agent, cfg.guidance),
            MemoryRead(ctx, view, agent)]


def build(cfg: Settings, ctx) -> Access:
    return Access(text=str(cfg.access), tools=tools_for(ctx, cfg),
                  notes={"guidance": check_guidance(cfg.guidance)})
