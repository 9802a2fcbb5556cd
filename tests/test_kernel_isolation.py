"""Per-user isolation in the kernel (second paper: the barrier is "scoped to a single user_id, without blocking
retrievals for unrelated users"): a read waits only for its own user's writes, sees every write of its user
released before it, and never an item it may not see; the encoder is one batching worker, not a lock.

In process: the exact index, hash vectors through the kernel's encoder worker. A slow commit is an index whose
insert for user A is held by a gate the test opens; the assertions are on the order of events, never on speed.
"""

from __future__ import annotations

import threading

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.kernel import IdentityResolver, KernelMemory, MemoryItem, visible
from harness.kernel.encoding import BatchEncoder
from harness.kernel.syscalls import Syscalls
from harness.memory.backends.exact import ExactBackend
from harness.memory.encoder import HashEncoder
from harness.memory.space import MemorySpace

WAIT = 60.0  # how long the test waits for an event that must happen (never reached when the kernel is right)


class GatedIndex(ExactBackend):
    """The exact index, whose insert of a gated user's units holds until the test opens the gate (a slow
    index for that user only)."""

    def __init__(self, gated: str):
        super().__init__()
        self.gated, self.entered, self.gate = gated, threading.Event(), threading.Event()

    def add(self, units, vectors=None):
        if any(u.org == self.gated for u in units):
            self.entered.set()
            assert self.gate.wait(WAIT), "the test never opened the gate"
        return super().add(units, vectors)


def kernel(index, timeout_s: float = WAIT, encoder=None) -> tuple[Syscalls, BatchEncoder]:
    enc = BatchEncoder(encoder or HashEncoder())
    space = MemorySpace(enc, index)
    return Syscalls(KernelMemory(space, IdentityResolver(), True, timeout_s, cap=1000, threshold=-1.0,
                                 candidates=1000)), enc


def item(tk, value: str, sharing="shared", kind="profile") -> MemoryItem:
    return MemoryItem(tk.user, tk.agent, kind, sharing, {"field": "tools", "value": value}, tk.seq)


def in_thread(fn) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def test_a_users_read_completes_while_another_users_commit_is_held_open():
    index = GatedIndex("A")
    k, enc = kernel(index)
    k.write("profile_agent", lambda tk: [item(tk, "Emacs for B")], "B")
    ticket = k.write_begin("profile_agent", "A")
    commit, commit_out = in_thread(lambda: k.write_commit(ticket, [item(ticket, "Neovim for A")]))
    assert index.entered.wait(WAIT)  # A's commit is inside the index, held by the gate
    reader, got = in_thread(lambda: k.retrieve("assistant_agent", "which editor", "B"))
    reader.join(WAIT)
    # B's read has completed while A's commit is still held open: it never waited on A
    assert not reader.is_alive() and commit.is_alive() and not index.gate.is_set()
    r = got["value"]
    assert not r.injection.log["barrier"]["timed_out"] and r.injection.log["barrier"]["snapshot"] == 1
    assert "Emacs for B" in r.block and "Neovim" not in r.block
    # A's own read issued now waits for A's commit: it cannot complete before the gate opens
    own, own_got = in_thread(lambda: k.retrieve("assistant_agent", "which editor", "A"))
    reader_b2, got_b2 = in_thread(lambda: k.retrieve("assistant_agent", "which editor", "B"))
    reader_b2.join(WAIT)
    assert not reader_b2.is_alive() and own.is_alive() and commit.is_alive()  # B again done; A still waiting
    index.gate.set()
    commit.join(WAIT)
    own.join(WAIT)
    assert "error" not in commit_out and not own.is_alive()
    a = own_got["value"]
    assert not a.injection.log["barrier"]["timed_out"] and "Neovim for A" in a.block and "Emacs" not in a.block
    enc.close()


def test_a_users_read_completes_while_another_users_commit_is_held_inside_the_encoder():
    """The commit encoder held on user A's batch: B's read (its query never embedded before) still completes,
    since reads' queries have their own worker and model instance."""
    gate, entered = threading.Event(), threading.Event()

    class HeldForA(HashEncoder):  # one model behind one lock, as harness.memory.encoder.Encoder holds it
        def __init__(self):
            super().__init__()
            self.model_lock = threading.Lock()

        def embed(self, texts, progress=None):
            with self.model_lock:
                if any("for A" in t for t in texts):
                    entered.set()
                    assert gate.wait(WAIT)
                return super().embed(texts, progress)

    enc = BatchEncoder(HeldForA(), query_encoder=HeldForA())  # the stage loads a second instance for reads
    k = Syscalls(KernelMemory(MemorySpace(enc, ExactBackend()), IdentityResolver(), True, WAIT, cap=1000,
                              threshold=-1.0, candidates=1000))
    k.write("profile_agent", lambda tk: [item(tk, "Emacs by B")], "B")
    commit, _ = in_thread(lambda: k.write("profile_agent", lambda tk: [item(tk, "Neovim for A")], "A"))
    assert entered.wait(WAIT)
    reader, got = in_thread(lambda: k.retrieve("assistant_agent", "a question never asked before", "B"))
    reader.join(WAIT)
    assert not reader.is_alive() and commit.is_alive() and "Emacs by B" in got["value"].block
    gate.set()
    commit.join(WAIT)
    enc.close()


def test_the_encoder_worker_batches_texts_of_many_users_into_one_model_call():
    """Commits of several users queued while the worker is busy go into one batch (throughput grows with load)."""
    gate, entered = threading.Event(), threading.Event()

    class SlowFirst(HashEncoder):
        def embed(self, texts, progress=None):
            if not entered.is_set():
                entered.set()
                assert gate.wait(WAIT)
            return super().embed(texts, progress)

    enc = BatchEncoder(SlowFirst())
    first, _ = in_thread(lambda: enc.embed(["first"]))
    assert entered.wait(WAIT)
    waiting = [in_thread(lambda u=u: enc.embed([f"{u} item {i}" for i in range(3)])) for u in range(5)]
    while True:  # every user's commit is queued behind the running batch
        with enc._writes.cond:
            if sum(len(j.texts) for j in enc._writes.queue) == 15:
                break
        threading.Event().wait(0.01)
    gate.set()
    for t, out in waiting:
        t.join(WAIT)
        assert out["value"].shape == (3, 384)
    first.join(WAIT)
    assert enc.figures()["commits"]["batches"] == 2 and enc.figures()["commits"]["largest_batch"] == 15
    # each caller got its own texts' vectors
    assert (enc.embed(["0 item 1"]) == HashEncoder().embed(["0 item 1"])).all()
    enc.close()


# ------------------------------------------------------------------------------ property: any schedule

USERS = ("u0", "u1", "u2")
AGENTS = ("profile_agent", "task_agent", "assistant_agent")
SHARING = ("shared", "private", "public", None)

op = st.one_of(
    st.tuples(st.just("begin"), st.sampled_from(USERS), st.sampled_from(AGENTS), st.sampled_from(SHARING)),
    st.tuples(st.just("commit"), st.integers(0, 20)),
    st.tuples(st.just("abort"), st.integers(0, 20)),
    st.tuples(st.just("bad_commit"), st.integers(0, 20)),  # an item of another user on the ticket: refused
    st.tuples(st.just("read"), st.sampled_from(USERS), st.sampled_from(AGENTS)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, max_size=30))
def test_any_schedule_of_writes_reads_and_failures_keeps_each_user_isolated(schedule):
    """Every read sees all of its own user's writes released before it (that it may see), never waits on another
    user's open writes, and never returns an item of another user or one the visibility rule hides from it.
    Run in one thread: a read that waited on a write nobody releases would time out, so `timed_out` says it."""
    k, enc = kernel(ExactBackend(), timeout_s=0.2)
    open_: list = []  # (ticket, sharing) begun, not released
    released: dict[str, list] = {u: [] for u in USERS}  # user -> (owner, sharing, value) committed
    n = 0
    try:
        for step in schedule:
            if step[0] == "begin":
                _, user, agent, sharing = step
                open_.append((k.write_begin(agent, user), sharing))
            elif step[0] in ("commit", "abort", "bad_commit") and open_:
                ticket, sharing = open_.pop(step[1] % len(open_))
                if step[0] == "commit":
                    n += 1
                    value = f"value {n} of {ticket.user}"
                    k.write_commit(ticket, [item(ticket, value, sharing)])
                    released[ticket.user].append((ticket.agent, sharing, value))
                elif step[0] == "abort":
                    k.write_abort(ticket, "extraction failed")
                else:
                    other = next(u for u in USERS if u != ticket.user)
                    bad = MemoryItem(other, ticket.agent, "profile", sharing, {"field": "tools", "value": "x"})
                    try:
                        k.write_commit(ticket, [bad])
                        raise AssertionError("an item of another user was committed")
                    except ValueError:
                        pass
            elif step[0] == "read":
                _, user, agent = step
                r = k.retrieve(agent, "tools", user)
                own_open = any(t.user == user for t, _ in open_)
                # waits only on its own user's open writes: with none open it never times out
                assert r.injection.log["barrier"]["timed_out"] is own_open
                got = [k.item(m.unit.uid) for m in r.injection.memories]
                assert all(i.user_id == user and visible(i.owner, i.sharing, agent) for i in got)
                want = {v for owner, sharing, v in released[user] if visible(owner, sharing, agent)}
                assert {i.content["value"] for i in got} == want  # every released write it may see, nothing else
                assert r.user == user and r.rule == "request"
    finally:
        for ticket, _ in open_:
            k.write_abort(ticket, "schedule ended")
        enc.close()
