"""Per-user isolation in the kernel (second paper: the barrier is "scoped to a single user_id, without blocking
retrievals for unrelated users"): a read waits only for its own user's writes, sees every write of its user
released before it, and never an item it may not see; the encoder is a batching worker over per-user queues, not a lock; a write is
released only by the ticket issued for it.

In process: the exact index, hash vectors through the kernel's encoder worker. A slow commit is an index whose
insert for user A is held by a gate the test opens; the assertions are on the order of events, never on speed.
"""

from __future__ import annotations

import threading

import pytest
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

    enc = BatchEncoder(SlowFirst(), threads=1)  # one thread: the others' jobs queue while it is busy
    first, _ = in_thread(lambda: enc.embed(["first"]))
    assert entered.wait(WAIT)
    waiting = [in_thread(lambda u=u: enc.embed([f"{u} item {i}" for i in range(3)])) for u in range(5)]
    while True:  # every user's commit is queued behind the running batch
        if enc._writes.queued() == 15:
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


def test_a_users_write_and_read_complete_while_another_users_batch_is_held_in_the_commit_encoder():
    """A's commit held inside the commit encoder (outside any model lock): B's write, queued after it, is embedded
    by another of the worker's threads and B's read sees it before A's batch is let go (a user's batch in flight
    occupies one thread at most)."""
    gate, entered = threading.Event(), threading.Event()

    class HeldForA(HashEncoder):
        def embed(self, texts, progress=None):
            if any("for A" in t for t in texts):
                entered.set()
                assert gate.wait(WAIT)
            return super().embed(texts, progress)

    k, enc = kernel(ExactBackend(), encoder=HeldForA())
    commit, commit_out = in_thread(lambda: k.write("profile_agent", lambda tk: [item(tk, "Neovim for A")], "A"))
    assert entered.wait(WAIT)
    writer, wrote = in_thread(lambda: k.write("profile_agent", lambda tk: [item(tk, "Helix by B")], "B"))
    writer.join(WAIT)
    reader, got = in_thread(lambda: k.retrieve("assistant_agent", "which editor", "B"))
    reader.join(WAIT)
    assert not writer.is_alive() and not reader.is_alive() and commit.is_alive() and not gate.is_set()
    r = got["value"]
    assert not r.injection.log["barrier"]["timed_out"] and "Helix by B" in r.block and "Neovim" not in r.block
    gate.set()
    commit.join(WAIT)
    assert "error" not in commit_out
    enc.close()


def test_a_write_the_encoder_cannot_embed_fails_alone_not_the_other_users_in_its_batch():
    """Users' commits queued together go into one batch; one of them cannot be embedded: that commit fails (its
    number released, the failure recorded), the others' are embedded and their reads see them."""
    gate, entered = threading.Event(), threading.Event()

    class Poison(HashEncoder):
        def embed(self, texts, progress=None):
            if any("warmup" in t for t in texts):
                entered.set()
                assert gate.wait(WAIT)
            if any("POISON" in t for t in texts):
                raise ValueError("cannot embed this text")
            return super().embed(texts, progress)

    enc = BatchEncoder(Poison(), threads=1)  # one thread, so A's and B's commits queue and share a batch
    k = Syscalls(KernelMemory(MemorySpace(enc, ExactBackend()), IdentityResolver(), True, WAIT, cap=1000,
                              threshold=-1.0, candidates=1000))
    warm, _ = in_thread(lambda: k.write("profile_agent", lambda tk: [item(tk, "warmup by C")], "C"))
    assert entered.wait(WAIT)
    a, a_out = in_thread(lambda: k.write("profile_agent", lambda tk: [item(tk, "POISON for A")], "A"))
    b, b_out = in_thread(lambda: k.write("profile_agent", lambda tk: [item(tk, "Helix by B")], "B"))
    for _ in range(int(WAIT / 0.01)):
        if enc._writes.queued() == 2:
            break
        threading.Event().wait(0.01)
    gate.set()
    for t in (warm, a, b):
        t.join(WAIT)
    assert "error" not in b_out
    r = k.retrieve("assistant_agent", "which editor", "B")
    assert not r.injection.log["barrier"]["timed_out"] and "Helix by B" in r.block
    assert enc.figures()["commits"]["failed_batches_split"] == 1  # they did share a batch
    assert "Helix by B" not in str(a_out.get("error", "")) and k.retrieve("assistant_agent", "x", "A").block.count("POISON") == 0
    enc.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(("u0", "u1", "u2")),
                          st.lists(st.sampled_from(("vim", "emacs", "POISON", "a long text about helix")),
                                   min_size=1, max_size=4)), min_size=1, max_size=12),
       st.integers(1, 3), st.integers(1, 6))
def test_every_encoder_job_gets_its_own_vectors_and_only_a_job_that_cannot_be_embedded_fails(jobs, threads, batch):
    """Any mix of users' jobs, submitted at once, through any number of threads and batch sizes: each job gets
    exactly its own texts' vectors, or, when its own texts cannot be embedded, the error; never another's."""
    from harness.kernel.encoding import for_user

    class Poison(HashEncoder):
        def embed(self, texts, progress=None):
            if any("POISON" in t for t in texts):
                raise ValueError("cannot embed this text")
            return super().embed(texts, progress)

    enc = BatchEncoder(Poison(), threads=threads, max_batch=batch)

    def submit(user, texts):
        with for_user(user):
            return enc.embed(texts)

    try:
        runs = [(texts, *in_thread(lambda u=u, t=texts: submit(u, t))) for u, texts in jobs]
        plain = HashEncoder()
        for texts, t, out in runs:
            t.join(WAIT)
            assert not t.is_alive()
            if "POISON" in texts:
                assert isinstance(out.get("error"), ValueError)
            else:
                assert "error" not in out and (out["value"] == plain.embed(texts)).all()
    finally:
        enc.close()


@pytest.mark.services
def test_a_users_read_completes_while_another_users_insert_waits_inside_postgresql(services, unique_name):
    """PostgreSQL as the index: an outside transaction holds the row user A's commit upserts, so A's insert waits
    inside PostgreSQL; user B's write and read still complete before it is let go (no lock of the index spans
    users; PostgreSQL orders concurrent inserts by row)."""
    import psycopg

    from harness.memory.backends.pgvector import PgVector

    table = unique_name("iso")
    index = PgVector(table=table, dim=384, drop_existing=True, exact_max_rows=4096, drop_on_close=True)
    k, enc = kernel(index)
    other = psycopg.connect(services.pg_dsn)
    try:
        k.write("profile_agent", lambda tk: [item(tk, "Emacs by B")], "B")
        k.write("profile_agent", lambda tk: [item(tk, "Vim for A")], "A")
        ticket = k.write_begin("profile_agent", "A")
        held = item(ticket, "Neovim for A")
        other.execute(f"INSERT INTO {table} SELECT %s, org, owner, visibility, time, embedding FROM {table} LIMIT 1",
                      (held.unit().uid,))  # not committed: A's ON CONFLICT on this uid waits for it
        commit, commit_out = in_thread(lambda: k.write_commit(ticket, [held]))
        blocked = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s"
        with psycopg.connect(services.pg_dsn, autocommit=True) as watch:
            for _ in range(int(WAIT / 0.01)):  # until A's insert is seen waiting on the row lock
                if watch.execute(blocked, (f"%INSERT INTO {table}%",)).fetchone()[0]:
                    break
                threading.Event().wait(0.01)
            else:
                raise AssertionError("A's insert never waited on the outside transaction")
        writer, wrote = in_thread(lambda: k.write("profile_agent", lambda tk: [item(tk, "Helix by B")], "B"))
        writer.join(WAIT)
        reader, got = in_thread(lambda: k.retrieve("assistant_agent", "which editor", "B"))
        reader.join(WAIT)
        assert not writer.is_alive() and "error" not in wrote
        assert not reader.is_alive() and commit.is_alive()  # B done while A's insert still waits in PostgreSQL
        r = got["value"]
        assert not r.injection.log["barrier"]["timed_out"] and "Helix by B" in r.block and "Neovim" not in r.block
    finally:
        other.rollback()
        other.close()
    commit.join(WAIT)
    assert not commit.is_alive() and "error" not in commit_out
    enc.close()
    index.close()


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


# ------------------------------------------------------------------------------ tickets: only the issued one


def test_a_ticket_made_up_from_a_pending_writes_fields_releases_nothing():
    """A Ticket is the issued object, not its fields: another agent (or anyone) writing down the user, number,
    writer and rule of profile_agent's pending write cannot abort or commit it; the reader keeps waiting for the
    real write, which its writer then commits once (a second use of its ticket is refused)."""
    from harness.kernel.syscalls import Ticket

    k, enc = kernel(ExactBackend(), timeout_s=0.2)
    real = k.write_begin("profile_agent", "Y")
    for forged in (Ticket("Y", real.seq, "someone_else", real.rule), Ticket("Y", real.seq, "profile_agent", real.rule),
                   Ticket("Y", real.seq, "profile_agent", real.rule, "0" * 32)):
        with pytest.raises(PermissionError):
            k.write_abort(forged, "forged")
        with pytest.raises(PermissionError):
            k.write_commit(forged, [item(forged, "planted")])
    assert k.retrieve("assistant_agent", "which editor", "Y").injection.log["barrier"]["timed_out"]  # still pending
    k.write_commit(real, [item(real, "Helix by Y")])
    with pytest.raises(PermissionError):
        k.write_abort(real, "used twice")
    r = k.retrieve("assistant_agent", "which editor", "Y")
    assert not r.injection.log["barrier"]["timed_out"] and "Helix by Y" in r.block and "planted" not in r.block
    enc.close()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_no_forged_ticket_ever_releases_a_pending_write(data):
    """Tickets built from any user, number, writer, rule and token (the real write's fields among the choices,
    its token never) are all refused, and the pending write stays pending until its own ticket releases it."""
    from harness.kernel.syscalls import Ticket

    k, enc = kernel(ExactBackend(), timeout_s=0.05)
    try:
        real = k.write_begin("profile_agent", "Y")
        others = [k.write_begin(a, u) for a, u in (("task_agent", "Y"), ("profile_agent", "Z"))]
        issued = {(t.user, t.seq, t.agent, t.token) for t in (real, *others)}  # drawing one of these is no forgery
        text = st.text(max_size=40)
        forged = data.draw(st.lists(st.builds(
            Ticket, st.one_of(st.just("Y"), st.just("Z"), text), st.one_of(st.integers(-2, 5), st.just(real.seq)),
            st.one_of(st.sampled_from(AGENTS), text), st.one_of(st.just(real.rule), text),
            st.one_of(st.just(""), st.just(others[0].token), st.just(others[1].token), text))
            .filter(lambda t: (t.user, t.seq, t.agent, t.token) not in issued), min_size=1, max_size=8))
        for f in forged:
            op_ = data.draw(st.sampled_from(("abort", "commit")))
            with pytest.raises(PermissionError):
                if op_ == "abort":
                    k.write_abort(f, "forged")
                else:
                    k.write_commit(f, [])
        assert real.seq in k._memory.barrier.pending("Y")
        k.write_abort(real, "its own writer")
        assert real.seq not in k._memory.barrier.pending("Y")
    finally:
        enc.close()
