"""The kernel memory: items on the project's memory space, written through the barrier, read through the kernel.

Writes: a writer's message is *accepted* first (the kernel resolves the user and the
barrier issues the next sequence number for that user), then extracted by a model
call, then committed (embedded and inserted into the vector index), and its number is
released whether the commit succeeded or failed. An optional `write_delay_s` holds each
commit back, like a slow index.

Reads: `inject` is harness.kernel.injection.Kernel.inject (barrier wait -> search under the
user's view -> visibility re-check -> dedupe -> threshold -> rank -> cap -> format ->
budget), with this module's formatter. Each read remembers the snapshot it waited for
and when its search began, so `missed` can count, once the trial's writes have ended,
the writes accepted before the read that the read did not see — the reads the barrier exists to prevent: a write is missed when it committed items the reader
may see (its own or shared) and none of them came back from the read's search. With the barrier off (`Unordered`) the read does
not wait, and the count shows what that costs.

Each read is also checked against the index: the items the reader may see that were committed
before its search began are counted, and a search that returned fewer of them than
min(cap, that count) is a short read (`Read.short`): the index, not the barrier, lost memories
(an HNSW post-filter over many users' items does; bench/kernel_scale.py measures it per index).
The index's plan for the read (`Backend.last_plan`) is kept with it.

Isolation by construction (the paper: the barrier is "scoped to a single user_id, without blocking
retrievals for unrelated users"): each user's writes and reads are kept in that user's own log under
that user's own lock, the barrier has one lane per user, the space's lock guards only its unit
table, and the embedding goes through the stage's encoder worker (harness/kernel/encoding.py), which
batches every user's texts from per-user queues rather than locking the model per commit (the model's
forward pass is the one shared resource: capacity, docs/personal-schedule.md). A write is committed or
aborted only through the ticket issued for it (`redeem`). No lock is held across
users while anything slow (an embedding, an insert, a wait) runs.

Retrieval is the paper's two stages (A.8/A.9): the requesting agent's own memories of the user, then
the other agents' shared memories (Kernel.search); a request without a user id that no session
names resolves to the user of the agent's own memories (`_local_user`) before the global registry.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from dataclasses import dataclass, field

from harness.memory.views import View

from .barrier import Unordered, WriteBarrier
from .encoding import for_user
from .identity import IdentityResolver
from .injection import Kernel
from .items import MemoryItem, line
from .visibility import visible


@dataclass
class Write:
    user: str
    seq: int
    owner: str
    accepted: float  # time.monotonic()
    committed: float | None = None
    failed: str | None = None
    items: int = 0
    units: list = field(default_factory=list)  # (uid, owner, sharing) of what it committed
    token: str = field(default="", repr=False)  # the issued ticket's secret: only its holder may release the write
    redeemed: bool = False  # its ticket has been used (commit or abort): it is never accepted again


@dataclass
class Read:
    user: str
    agent: str
    snapshot: int
    search_start: float  # time.monotonic() when the search began (after any wait)
    barrier: dict = field(default_factory=dict)
    returned: set = field(default_factory=set)  # uids the search returned
    visible: int = 0  # items the reader may see, committed before the search began
    expected: int = 0  # min(cap, visible): what a search that loses nothing returns of them
    found: int = 0  # how many of those the search returned
    plan: dict | None = None  # how the index ran the search (Backend.last_plan)

    @property
    def short(self) -> int:
        """How many of the expected items the index did not return (0: a full read)."""
        return self.expected - min(self.found, self.expected)

    def describe(self) -> dict:
        return {"visible": self.visible, "expected": self.expected, "returned": self.found, "short": self.short,
                "plan": self.plan}


class _UserLog:
    """One user's writes, under that user's own lock (never held across users)."""

    __slots__ = ("lock", "writes")

    def __init__(self):
        self.lock = threading.Lock()
        self.writes: dict[int, Write] = {}


class KernelMemory:
    def __init__(self, space, resolver: IdentityResolver, barrier: bool = True, timeout_s: float = 5.0,
                 budget_tokens: int = 2000, cap: int = 10, threshold: float = 0.3, candidates: int = 30,
                 fmt: str = "statement", write_delay_s: float = 0.0):
        if getattr(space, "dense", None) is None:
            raise ValueError("the kernel ranks by cosine similarity: give it a dense index (exact, pgvector, "
                             "redis_qe, vectorset or hybrid), not a lexical one")
        self.space, self.resolver, self.fmt, self.write_delay_s = space, resolver, fmt, float(write_delay_s)
        self.barrier = (WriteBarrier if barrier else Unordered)(float(timeout_s))
        self.kernel = Kernel(space, self.barrier, int(budget_tokens), int(cap), float(threshold), "dense",
                             int(candidates), formatter=self._format, two_stage=True)
        self._items: dict[str, MemoryItem] = {}  # uid -> item; each uid is written once (GIL-atomic dict ops)
        self._logs: dict[str, _UserLog] = {}
        self._owned: dict[str, dict[str, float]] = {}  # agent -> {user: when its latest own item committed}
        self._registry = threading.Lock()  # finding or creating a user's log only

    def _log(self, user: str) -> _UserLog:
        log = self._logs.get(user)
        if log is None:
            with self._registry:
                log = self._logs.setdefault(user, _UserLog())
        return log

    def _write(self, user: str, seq: int) -> Write:
        log = self._log(user)
        with log.lock:
            return log.writes[seq]

    def _user_writes(self, user: str) -> list[Write]:
        log = self._log(user)
        with log.lock:
            return list(log.writes.values())

    # -- writes --------------------------------------------------------------------------
    def accept(self, agent: str, request_user: str | None) -> tuple[str, int, str, str]:
        """(resolved user, barrier sequence number, identity rule, the ticket's secret token) of a new write."""
        user, rule = self.resolver.resolve(agent, request_user, self._local_user)
        log = self._log(user)
        token = secrets.token_hex(16)
        with log.lock:  # numbered and logged together: a read that sees the number finds the write
            seq = self.barrier.begin(user)
            log.writes[seq] = Write(user, seq, agent, time.monotonic(), token=token)
        return user, seq, rule, token

    def redeem(self, user: str, seq: int, agent: str, token: str) -> None:
        """The one check before a write is committed or aborted: allowed only for the write issued with exactly
        this (user, number, writer, token) that has not been released yet; its ticket is then used up. Anything
        else (a forged or copied ticket, another agent's, one used before) is refused and releases nothing."""
        log = self._logs.get(user) if isinstance(user, str) else None
        w = None
        if log is not None:
            with log.lock:
                w = log.writes.get(seq) if isinstance(seq, int) else None
                ok = (w is not None and not w.redeemed and isinstance(token, str) and isinstance(agent, str)
                      and hmac.compare_digest(w.token.encode(), token.encode("utf-8", "surrogatepass"))
                      and w.owner == agent)
                if ok:
                    w.redeemed = True
                    return
        raise PermissionError(f"not a ticket this kernel issued and has not yet released: {agent!r} on user "
                              f"{user!r} #{seq!r}; nothing is released")

    def commit(self, user: str, seq: int, items: list[MemoryItem]) -> None:
        """Index the items (after the configured delay) and release the number; a failure still releases."""
        w = self._write(user, seq)
        try:
            if self.write_delay_s:
                time.sleep(self.write_delay_s)
            units = [it.unit() for it in items]
            for u, it in zip(units, items):
                self._items[u.uid] = it
            w.units = [(u.uid, it.owner, it.sharing) for u, it in zip(units, items)]
            if units:
                with for_user(user):  # the encoder queues it as this user's (harness/kernel/encoding.py)
                    self.space.add_units(units, progress=False)
            w.items = len(items)
            w.committed = time.monotonic()  # last: a reader that sees it committed sees its units and count
            for it in items:
                self._owned.setdefault(it.owner, {})[user] = w.committed
        except BaseException as exc:
            w.failed = f"{type(exc).__name__}: {exc}"[:500]
            raise
        finally:
            self.barrier.release(user, seq)

    def fail(self, user: str, seq: int, error: str) -> None:
        self._write(user, seq).failed = error[:500]
        self.barrier.release(user, seq)

    # -- reads ---------------------------------------------------------------------------
    def _format(self, unit) -> str:
        return line(self._items[unit.uid], self.fmt)

    def item(self, uid: str) -> MemoryItem:
        return self._items[uid]

    def _local_user(self, agent: str) -> str | None:
        """A.9's first stage for a request without a user: the user the agent's own memories are about (the
        latest it wrote about), or None when it has none (then the registry decides)."""
        users = dict(self._owned.get(agent) or {})
        return max(users, key=lambda u: (users[u], u)) if users else None

    def inject(self, agent: str, request_user: str | None, query: str):
        """(resolved user, rule, Injection, Read)."""
        user, rule = self.resolver.resolve(agent, request_user, self._local_user)
        t0 = time.monotonic()
        inj = self.kernel.inject(user, agent, query)
        b = inj.log["barrier"]
        read = Read(user, agent, int(b["snapshot"]), t0 + float(b["waited_s"]), b,
                    {uid for uid, _owner in inj.log["units"]}, plan=self.space.dense.last_plan())
        before = self._visible_before(read)
        read.visible, read.expected = len(before), min(self.kernel.cap, len(before))
        read.found = len(before & read.returned)
        return user, rule, inj, read

    def _visible_before(self, read: Read) -> set[str]:
        """uids of the reader's user that the reader may see, from writes committed before its search began."""
        ws = [w for w in self._user_writes(read.user) if w.committed is not None and w.committed <= read.search_start]
        return {uid for w in ws for uid, owner, sharing in w.units if visible(owner, sharing, read.agent)}

    def unrestricted(self, user: str, query: str) -> tuple[list[MemoryItem], int]:
        """The exposure audit's read: the user's whole partition, nearest `query` first, under the unrestricted
        scope (View scope "all"), k = every committed item of the user; and how many of the user's writes had not
        landed (neither committed nor failed) when it read: their items are unaudited, never counted kept out."""
        ws = self._user_writes(user)
        held = sum(w.items or 0 for w in ws if w.committed is not None)
        unlanded = sum(w.committed is None and w.failed is None for w in ws)
        res = self.space.search(query, View(user, None, "all"), k=max(self.kernel.candidates, held), scoring="dense")
        return [self._items[r.unit.uid] for r in res if r.unit.uid in self._items], unlanded

    def candidates(self, inj) -> list[MemoryItem]:
        """Every item the index returned for a read (before the kernel's checks), for the exposure audit."""
        return [self._items[uid] for uid, _owner in inj.log["units"] if uid in self._items]

    def missed(self, read: Read) -> dict:
        """Writes accepted before the read (seq <= snapshot) with items the reader may see, none of them read."""
        ws = [w for w in self._user_writes(read.user) if w.seq <= read.snapshot]

        def seen(w: Write) -> list[str]:
            return [uid for uid, owner, sharing in w.units if visible(owner, sharing, read.agent)]

        late = [w for w in ws if w.committed is not None and seen(w) and not read.returned.intersection(seen(w))]
        return {"writes_before_read": len(ws), "missed": len(late), "failed": sum(w.failed is not None for w in ws),
                "unfinished": sum(w.committed is None and w.failed is None for w in ws),
                "missed_items": sum(w.items for w in late)}

    def writes(self, user: str) -> list[dict]:
        ws = sorted(self._user_writes(user), key=lambda w: w.seq)
        return [{"seq": w.seq, "owner": w.owner, "items": w.items, "failed": w.failed,
                 "commit_after_accept_s": None if w.committed is None else round(w.committed - w.accepted, 4)}
                for w in ws]

    def view(self, user: str, agent: str) -> View:
        return View(user, agent, "shared")

    def close(self) -> None:
        self.space.close()
