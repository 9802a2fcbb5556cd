"""The one agent loop every condition shares (Section 4, Appendix B).

OpenAI-compatible chat completions with tool calling; at most `max_rounds` tool
rounds, then one forced answer with tools disabled. Tool results longer than
30,000 characters are cut. Bad tool arguments, unknown tools and tool
exceptions go back to the model as tool errors; only exhausted retries of the
model call itself end a run, and the driver records that run as failed. Every
message sent and received goes into a TranscriptRecorder (the run record's
`transcript`), the loops of asked agents nested under the call that ran them. A tool
that fails because of the environment (services down, no sandbox) raises an
EnvironmentFailure, which stops the stage instead (harness.failures).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any

from harness.endpoints.client import Agent, Meter
from harness.failures import classify
from harness.runtime.tools import Tool, ToolError, ToolResult

MAX_RESULT_CHARS = 30_000


@dataclass
class LoopResult:
    answer: str
    messages: list[dict]
    tool_rounds: int
    forced: bool


class TranscriptRecorder:
    """A run's dialogues as its models saw them (harness.records.schema.Transcript).

    It lives outside the loop, so a run that fails midway keeps what was said until then. A
    loop that starts while another loop's tool call runs (ask_agent) is nested under that
    call's tool message. System prompts are kept apart, by sha256, to be stored once per stage.
    """

    def __init__(self) -> None:
        self.prompts: dict[str, str] = {}
        self.loops: list[dict] = []  # loops started outside any tool call: the run's own
        self._open: list[tuple[dict, list[dict]]] = []  # running loops, innermost last, with loops started under them

    def begin(self, role: str, system: str, tools: list[str]) -> dict:
        sha = hashlib.sha256(system.encode("utf-8")).hexdigest()
        self.prompts[sha] = system
        loop = {"role": role, "system_sha256": sha, "tools": tools, "messages": []}
        (self._open[-1][1] if self._open else self.loops).append(loop)
        self._open.append((loop, []))
        return loop

    def nested(self, loop: dict) -> list[dict]:
        """The loops started under `loop` since the last call (those of the tool call just made)."""
        for own, under in self._open:
            if own is loop:
                taken = list(under)
                under.clear()
                return taken
        return []

    def end(self, loop: dict) -> None:
        self._open = [(own, under) for own, under in self._open if own is not loop]

    def transcript(self) -> dict | None:
        return self.loops[0] if self.loops else None


def _cut(text: str) -> str:
    if len(text) <= MAX_RESULT_CHARS:
        return text
    return text[:MAX_RESULT_CHARS] + f"\n[... cut: {len(text) - MAX_RESULT_CHARS} more characters]"


def overrode_defaults(tool: Tool, args: dict) -> dict:
    """Arguments the model set to something other than the default its schema declares
    (a small model passing k=1 to a tool whose default is 8 changes what it reads)."""
    props = (tool.schema().get("function", {}).get("parameters") or {}).get("properties") or {}
    return {k: v for k, v in args.items()
            if isinstance(props.get(k), dict) and "default" in props[k] and v != props[k]["default"]}


def call_tool(tools: dict[str, Tool], name: str, raw_args: str, meter: Meter) -> str:
    """Run one tool call; every failure becomes a tool error the model can read."""
    entry: dict[str, Any] = {"name": name, "arguments": raw_args}
    t0 = time.perf_counter()
    try:
        if name not in tools:
            raise ToolError(f"unknown tool {name!r}; available: {', '.join(sorted(tools))}")
        try:
            args = json.loads(raw_args or "{}")
        except json.JSONDecodeError as exc:
            raise ToolError(f"arguments are not valid JSON: {exc.msg}") from None
        if not isinstance(args, dict):
            raise ToolError("arguments must be a JSON object")
        entry["overrode_defaults"] = overrode_defaults(tools[name], args)
        try:
            result = tools[name](**args)
        except TypeError as exc:
            raise ToolError(f"bad arguments: {exc}") from None
    except ToolError as exc:
        result = ToolResult(f"error: {exc}", error=True)
        entry["failure"] = "tool_error"
    except Exception as exc:  # a tool's own bug must not end the run; it is recorded
        env = classify(exc)
        if env is not None:  # services down, no sandbox: not the run's fault, the stage stops
            raise env from exc
        result = ToolResult(f"error: {type(exc).__name__}: {exc}", error=True)
        entry["failure"] = "exception"
    text = _cut(result.text)
    entry.update(chars=len(text), sessions=sorted(set(result.sessions)), empty=result.empty, error=result.error,
                 retrieval_s=round(result.retrieval_s, 6), wall_s=round(time.perf_counter() - t0, 6),
                 cut=len(result.text) > MAX_RESULT_CHARS, log=result.log)
    meter.tools.append(entry)
    return text


def _text(content: Any) -> str:
    """A reply's content as text (a list of content parts is joined; anything else is no text)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def normalise_calls(raw: Any, round_no: int) -> tuple[list[dict], list[str]]:
    """A reply's tool calls as the loop can answer them (id, name, arguments as a string), and a flag per
    repair: arguments sent as a JSON object are serialised, a missing or repeated id is assigned. What
    still does not fit (no name, arguments that are not JSON) goes back to the model as a tool error."""
    calls, flags, seen = [], [], set()
    items = raw if isinstance(raw, list) else [raw] if raw else []
    sent = {c.get("id") if isinstance(c, dict) else getattr(c, "id", None) for c in items}  # an assigned id is new
    for i, c in enumerate(items):
        fn = c.get("function") if isinstance(c, dict) else getattr(c, "function", None)
        fget = (lambda k: fn.get(k)) if isinstance(fn, dict) else (lambda k: getattr(fn, k, None))
        name, args = fget("name"), fget("arguments")
        cid = c.get("id") if isinstance(c, dict) else getattr(c, "id", None)
        if not isinstance(name, str):
            flags.append(f"tool call {i} without a function name ({str(name)[:40]!r})")
            name = "" if name is None else str(name)
        if args is None:
            args = ""
        elif not isinstance(args, str):
            flags.append(f"tool call {i} arguments sent as JSON {type(args).__name__}, not a string: serialised")
            args = json.dumps(args, ensure_ascii=False)
        if not isinstance(cid, str) or not cid or cid in seen:
            new = f"call_h{round_no}_{i}"
            while new in seen or new in sent:
                new += "_"
            flags.append(f"tool call {i} {'without an id' if not cid else f'with a repeated id {cid!r}'}: "
                         f"assigned {new}")
            cid = new
        seen.add(cid)
        calls.append({"id": cid, "name": name, "arguments": args})
    return calls, flags


def run_loop(agent: Agent, system: str, question: str, tools: list[Tool], max_rounds: int = 10,
             first_tool_choice: str | None = None, recorder: TranscriptRecorder | None = None) -> LoopResult:
    """`first_tool_choice` ("required") makes the first call use a tool; a model config sets it
    for models that otherwise answer from their prior without ever searching (the local 1.5B).
    `recorder` receives the transcript as it happens (the driver's, shared with asked agents)."""
    messages: list[dict] = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    by_name = {t.name: t for t in tools}
    schemas = [t.schema() for t in tools] or None
    recorder = recorder if recorder is not None else TranscriptRecorder()
    said = recorder.begin(agent.role, system, list(by_name))
    said["messages"].append({"role": "user", "content": question})
    rounds = 0
    try:
        while True:
            forced = bool(schemas) and rounds >= max_rounds
            choice = "none" if forced else (first_tool_choice if rounds == 0 else None)
            msg = agent.complete(messages, schemas, tool_choice=choice)
            call_index = len(agent.meter.calls) - 1
            calls, flags = normalise_calls(getattr(msg, "tool_calls", None), rounds)
            if forced and calls:
                flags, calls = ["forced answer came back as a tool call: ignored, its text is the answer"], []
            elif not schemas and calls:
                flags, calls = ["tool call without tools offered: ignored, its text is the answer"], []
            if flags and call_index >= 0:
                agent.meter.calls[call_index]["flags"] += flags
            content = _text(getattr(msg, "content", None))
            if not calls:
                messages.append({"role": "assistant", "content": content})
                said["messages"].append({"role": "assistant", "content": content, "call": call_index})
                return LoopResult(content.strip(), messages, rounds, forced)
            rounds += 1
            messages.append({"role": "assistant", "content": content,
                             "tool_calls": [{"id": c["id"], "type": "function",
                                             "function": {"name": c["name"], "arguments": c["arguments"]}}
                                            for c in calls]})
            said["messages"].append({"role": "assistant", "content": content, "call": call_index,
                                     "tool_calls": [dict(c) for c in calls]})
            for c in calls:
                text = call_tool(by_name, c["name"], c["arguments"], agent.meter)
                messages.append({"role": "tool", "tool_call_id": c["id"], "content": text})
                seen = {"role": "tool", "tool_call_id": c["id"], "content": text, "tool": len(agent.meter.tools) - 1}
                asked = recorder.nested(said)
                if asked:
                    seen["asked"] = asked
                said["messages"].append(seen)
    finally:
        recorder.end(said)
