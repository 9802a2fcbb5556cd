"""The kernel's system-call interface (second paper, Section 3 and Appendix A.6, Table 7).

Agents reach memory only through these calls; none of them touches the identity resolver, the
write barrier or the memory space. A writer's message becomes memory in two calls, because
extraction is a model call that runs asynchronously: `write_begin` accepts the write (the user
is resolved and the barrier stamps the write with that user's next sequence number, so any
read issued afterwards waits for it), then `write_commit` indexes the extracted items or
`write_abort` records the failure, and either releases the number. `write` does both at once.
The assistant's context comes from `retrieve`: identity, barrier wait, search under the user's
view, the visibility re-check, dedupe, threshold, rank, cap, format and token budget.

Each call is declared with `@syscall`: the kernel module operations it routes to and what it
guarantees. `interface()` lists them (name, caller, arguments, summary, operations, guarantee), so
Table 7 is generated from the code that runs, and a call added here is in the table at once.
The harness's own bookkeeping (what a read missed, what a user's writes did) is declared too,
with caller "harness": agents never call it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from harness.memory.space import MemorySpace

from . import visibility
from .barrier import WriteBarrier
from .identity import IdentityResolver
from .injection import Injection, Kernel
from .items import MemoryItem
from .memory import KernelMemory, Read

# module -> (the object whose operations the calls route to, what it is); operations name its real methods
MODULES = {
    "identity": (IdentityResolver, "the user of a request, in the paper's priority order (Section 3.1)"),
    "barrier": (WriteBarrier, ("per-user sequence numbers: begin = the paper's acquire, wait = snapshot + "
                               "wait_until_drained (fail-open after the timeout), release (A.7)")),
    "space": (MemorySpace, "the memory space: one dense index over every user's items, searched under a view"),
    "visibility": (visibility, "visible(m, a): owner = a OR sharing = shared; never fails open (Section 3.3)"),
    "injection": (Kernel, ("the read path: two-stage search (the agent's own memories, then the other agents' "
                           "shared ones, A.9), dedupe, threshold, rank, cap, statement format, token budget, "
                           "the MEMORY CONTEXT block (A.8)")),
}

_CALLS: list[dict] = []


def syscall(*, operations: Sequence[str], guarantees: str, caller: str = "agent") -> Callable:
    """Declare a method of Syscalls as a call of the interface (in definition order)."""
    for op in operations:
        module, _, name = op.partition(".")
        if module not in MODULES or not hasattr(MODULES[module][0], name):
            raise ValueError(f"{op!r} is no operation of the kernel's modules ({', '.join(MODULES)})")

    def deco(fn):
        params = [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]
        _CALLS.append({
            "name": fn.__name__, "caller": caller,
            "arguments": [p.name + ("" if p.default is inspect.Parameter.empty else f"={p.default!r}")
                          for p in params],
            "summary": (inspect.getdoc(fn) or "").split("\n")[0], "operations": list(operations),
            "guarantee": guarantees})
        return fn

    return deco


@dataclass(frozen=True)
class Ticket:
    """An accepted write: whose it is (resolved), its barrier number, who writes it and by which rule, and the
    secret the kernel issued with it (`token`): commit and abort accept only the issued ticket (KernelMemory.redeem),
    once, so a ticket made up from the others' fields releases nothing."""

    user: str
    seq: int
    agent: str
    rule: str
    token: str = field(default="", repr=False, compare=False)


@dataclass
class Retrieval:
    """What `retrieve` gives: the resolved user and rule, the injection (block + memories + log) and the read."""

    user: str
    rule: str
    injection: Injection
    read: Read

    @property
    def block(self) -> str:
        return self.injection.block


class Syscalls:
    """The interface over one kernel memory (one memory space, its barrier, the stage's identity resolver)."""

    def __init__(self, memory: KernelMemory):
        self._memory = memory

    @syscall(operations=["identity.register_session"],
             guarantees="later requests without a user id resolve to this session's user (rule 2)")
    def open_session(self, session_id: str, user_id: str) -> None:
        """Register a session of a user."""
        self._memory.resolver.register_session(session_id, user_id)

    @syscall(operations=["identity.resolve", "barrier.begin"],
             guarantees="every retrieve for the resolved user issued after this call waits until the write "
                        "is committed or aborted (or the barrier times out, fail-open, and says so)")
    def write_begin(self, agent: str, user: str | None = None) -> Ticket:
        """Accept a write by `agent` about `user` (or whoever identity resolution finds): resolve, stamp."""
        resolved, seq, rule, token = self._memory.accept(agent, user)
        return Ticket(resolved, seq, agent, rule, token)

    @syscall(operations=["space.add_units", "barrier.release"],
             guarantees="only the ticket write_begin issued, once, is accepted (anything else is refused and releases "
                        "nothing); the items are searchable before the number is released; a failed commit still "
                        "releases it and is recorded, never hidden")
    def write_commit(self, ticket: Ticket, items: Sequence[MemoryItem]) -> None:
        """Index the items of an accepted write (their user and owner must be the ticket's)."""
        self._memory.redeem(ticket.user, ticket.seq, ticket.agent, ticket.token)
        for it in items:
            if it.user_id != ticket.user or it.owner != ticket.agent:
                self._memory.fail(ticket.user, ticket.seq, f"item of {it.user_id}/{it.owner} on a ticket of "
                                                           f"{ticket.user}/{ticket.agent}")
                raise ValueError(f"an item of user {it.user_id!r} by {it.owner!r} cannot be committed on a write "
                                 f"accepted for user {ticket.user!r} by {ticket.agent!r}")
        self._memory.commit(ticket.user, ticket.seq, list(items))

    @syscall(operations=["barrier.release"],
             guarantees="only the ticket write_begin issued, once, is accepted (anything else is refused and releases "
                        "nothing); the number is released, so no read waits on a write that will never commit; the "
                        "failure is recorded")
    def write_abort(self, ticket: Ticket, error: str) -> None:
        """Give up an accepted write (the extraction failed)."""
        self._memory.redeem(ticket.user, ticket.seq, ticket.agent, ticket.token)
        self._memory.fail(ticket.user, ticket.seq, error)

    @syscall(operations=["identity.resolve", "barrier.begin", "space.add_units", "barrier.release"],
             guarantees="write_begin + write_commit (or write_abort if `extract` raises) in one call")
    def write(self, agent: str, extract: Callable[[Ticket], Sequence[MemoryItem]],
              user: str | None = None) -> list[MemoryItem]:
        """Accept, extract the items for the ticket (a callable, e.g. a model call) and commit them."""
        ticket = self.write_begin(agent, user)
        try:
            items = list(extract(ticket))
        except BaseException as exc:
            self.write_abort(ticket, f"{type(exc).__name__}: {exc}")
            raise
        self.write_commit(ticket, items)
        return items

    @syscall(operations=["identity.resolve", "barrier.wait", "injection.search", "space.search", "visibility.visible",
                         "injection.inject"],
             guarantees="two-stage retrieval (A.9): the agent's own memories of the user, then the other agents' "
                        "shared ones; a request without a user id no session names resolves to the user of the "
                        "agent's own memories, then the global registry; waits only for this user's writes; "
                        "never returns an item the agent may not see (another agent's private item, another "
                        "user's item); sees every write for the user accepted before it unless the barrier "
                        "timed out (fail-open, in read.barrier); a search returning fewer of the visible items "
                        "than min(cap, visible) is counted (read.short)")
    def retrieve(self, agent: str, query: str, user: str | None = None) -> Retrieval:
        """The memory block for `agent`'s prompt about `query`, for `user` (or whoever identity resolution finds)."""
        resolved, rule, inj, read = self._memory.inject(agent, user, query)
        return Retrieval(resolved, rule, inj, read)

    # -- the harness's bookkeeping (not agent calls) ----------------------------------------
    @syscall(operations=[], caller="harness",
             guarantees="after the user's writes have ended: the writes accepted before the read that it did "
                        "not see (what the barrier exists to prevent)")
    def audit(self, read: Read) -> dict:
        """What a read missed of the writes issued before it."""
        return self._memory.missed(read)

    @syscall(operations=[], caller="harness", guarantees="every accepted write of the user, in sequence order")
    def writes(self, user: str) -> list[dict]:
        """A user's writes: owner, items, failure, commit latency."""
        return self._memory.writes(user)

    @syscall(operations=[], caller="harness", guarantees="the item behind a uid the index returned")
    def item(self, uid: str) -> MemoryItem:
        """The memory item of a returned unit."""
        return self._memory.item(uid)

    @syscall(operations=["space.search"], caller="harness",
             guarantees="the user's items nearest the read's query under no view (every agent's, any policy): "
                        "the exposure audit applies the visibility rule to them, so it counts what the view "
                        "kept out; with the writes not landed yet counted apart (unaudited); never given to an "
                        "agent")
    def unrestricted(self, retrieval: Retrieval, query: str) -> tuple[list[MemoryItem], int]:
        """The exposure audit's read: the same query over the user's whole partition (and the user's writes not
        landed yet, whose items it cannot audit)."""
        return self._memory.unrestricted(retrieval.user, query)

    def candidates(self, retrieval: Retrieval) -> list[MemoryItem]:
        """Every item the index returned for a read, before the kernel's checks (the exposure audit)."""
        return self._memory.candidates(retrieval.injection)

    def describe(self) -> dict:
        """The kernel's settings and its index (for a stage's records)."""
        k = self._memory.kernel
        return {"barrier": type(self._memory.barrier).__name__, "timeout_s": self._memory.barrier.timeout_s,
                "cap": k.cap, "threshold": k.threshold, "budget_tokens": k.budget_tokens,
                "candidates": k.candidates, "format": self._memory.fmt, "index": self._memory.space.dense.describe()}

    def close(self) -> None:
        self._memory.close()


def interface() -> list[dict]:
    """Every call of the interface: name, caller (agent | harness), arguments, summary, the kernel module
    operations it routes to, and what it guarantees (`guarantee`). Table 7 is rendered from this
    (analysis/personal/table7.py)."""
    return [dict(c, arguments=list(c["arguments"]), operations=list(c["operations"])) for c in _CALLS]


def modules() -> dict[str, dict]:
    """The kernel modules the operations name: the implementing class or module, and what it is."""
    return {m: {"implementation": f"{obj.__module__}.{obj.__qualname__}" if isinstance(obj, type) else obj.__name__,
                "what": what} for m, (obj, what) in MODULES.items()}
