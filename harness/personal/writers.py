"""The memory-producing agents (Section 3.5): model calls that turn a user's message into memory items.

ProfileAgent extracts stable attributes (preferences, tools, language, response
style), TaskAgent the working context (project, goals, blockers, next steps), and the
ConversationExtractor a one-line note of anything else, written private by default.
Each asks for one JSON object (`response_format` json_object, which the local model
serves with a grammar); a reply that is not such an object yields no items and is
counted as a failed write, never dropped silently.

`submit` is the asynchronous write path through the kernel's system calls: `write_begin`
accepts each write first, in the writers' order (identity resolution + barrier sequence number),
then the extractions and `write_commit`s run one after another on the method's writers' pool
(`write_abort` if extraction fails), and each number is released whatever happens.
"""

from __future__ import annotations

import json
import re
from concurrent.futures import Executor, Future
from dataclasses import dataclass

from harness.kernel.items import MemoryItem

PROFILE_FIELDS = ("preferences", "tools", "language", "response_style")
TASK_FIELDS = ("project", "goals", "blockers", "next_steps")


@dataclass(frozen=True)
class Writer:
    name: str  # the owner agent of what it writes
    memory_type: str
    message: str  # which of the trial's messages it reads
    fields: tuple[str, ...]
    system: str

    def prompt(self, text: str) -> list[dict]:
        return [{"role": "system", "content": self.system}, {"role": "user", "content": text}]

    def items(self, reply: str, user: str, sharing, seq: int) -> list[MemoryItem]:
        data = parse_object(reply)
        out: list[MemoryItem] = []
        for f in self.fields:
            values = data.get(f)
            if values in (None, "", []):
                continue
            for v in values if isinstance(values, list) else [values]:
                if isinstance(v, (str, int, float)) and str(v).strip():
                    out.append(MemoryItem(user, self.name, self.memory_type, sharing,
                                          {"field": f, "value": str(v).strip()}, seq, len(out)))
        return out


PROFILE = Writer("profile_agent", "profile", "profile", PROFILE_FIELDS, (
    "You are ProfileAgent. Extract the user's stable profile from their message. Reply with one JSON object "
    'with keys "preferences" (list of short phrases), "tools" (list of tool names), "language" (their main '
    'programming language) and "response_style" (how they want answers written). Use only what the message '
    "says; leave a key empty if it is not mentioned."))
TASK = Writer("task_agent", "task_context", "task", TASK_FIELDS, (
    "You are TaskAgent. Extract the user's current working context from their message. Reply with one JSON "
    'object with keys "project" (what they are working on), "goals" (list), "blockers" (list) and '
    '"next_steps" (list), each item a short phrase taken from the message.'))
CONVERSATION = Writer("conversation_extractor", "conversation", "conversation", ("note",), (
    "You are ConversationExtractor. Summarise anything personal the user mentioned in one short sentence. "
    'Reply with one JSON object {"note": "..."}.'))
WRITERS = {"profile_agent": PROFILE, "task_agent": TASK, "conversation_extractor": CONVERSATION}


class ExtractionError(ValueError):
    pass


def parse_object(reply: str) -> dict:
    """The first JSON object in the reply (code fences allowed); anything else is an ExtractionError."""
    text = re.sub(r"^```(?:json)?\s*|\s*```$", "", (reply or "").strip())
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        m = re.search(r"\{.*\}", text, re.S)
        try:
            data = json.loads(m.group(0)) if m else None
        except json.JSONDecodeError:
            data = None
    if not isinstance(data, dict):
        raise ExtractionError(f"not a JSON object: {(reply or '')[:200]!r}")
    return data


JSON_PARAMS = {"response_format": {"type": "json_object"}}


def in_order(pool: Executor, jobs: list) -> list[Future]:
    """Run `jobs` (callables) one after another on the pool, as the paper's pipeline runs its writers
    (ProfileAgent, then TaskAgent, Appendix A.10), asynchronously to the caller; one future per job."""
    futures = [Future() for _ in jobs]

    def run() -> None:
        for job, fut in zip(jobs, futures):
            try:
                fut.set_result(job())
            except BaseException as exc:  # noqa: BLE001 - the job's own failure, kept in its future
                fut.set_exception(exc)

    pool.submit(run)
    return futures


def submit(pending: list[tuple[Writer, object, object]], kernel, trial: dict, pool: Executor,
           attach_user_id: bool = True) -> list[Future]:
    """Accept every write now, in order (the kernel's write_begin: identity + barrier number), then extract +
    commit them one after another on the pool; each future yields the items its writer wrote.
    `pending` is [(writer, its client, its sharing policy)]; `kernel` the system-call interface
    (harness.kernel.syscalls.Syscalls)."""
    tickets = [kernel.write_begin(w.name, trial["user_id"] if attach_user_id else None) for w, _, _ in pending]

    def job(writer: Writer, agent, sharing, ticket):
        def run() -> list[MemoryItem]:
            try:
                msg = agent.complete(writer.prompt(trial["messages"][writer.message]))
                items = writer.items(msg.content or "", ticket.user, sharing, ticket.seq)
            except BaseException as exc:
                kernel.write_abort(ticket, f"{type(exc).__name__}: {exc}")
                raise
            kernel.write_commit(ticket, items)
            return items
        return run

    return in_order(pool, [job(w, a, sh, t) for (w, a, sh), t in zip(pending, tickets)])
