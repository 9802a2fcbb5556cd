"""The kernel's system-call interface (harness/kernel/syscalls.py; paper 2, Appendix A.6): the calls the
agents write and read through, with identity resolution and the write barrier inside them, and the
self-description Table 7 is generated from. In process: the exact index and hash vectors."""

from __future__ import annotations

import inspect
import threading
import time

import pytest

from harness.kernel import IdentityResolver, KernelMemory, MemoryItem
from harness.kernel.syscalls import Syscalls, interface, modules, syscall
from harness.memory.backends.exact import ExactBackend
from harness.memory.encoder import HashEncoder
from harness.memory.space import MemorySpace


def kernel(timeout_s: float = 5.0, barrier: bool = True) -> Syscalls:
    space = MemorySpace(HashEncoder(), ExactBackend())
    return Syscalls(KernelMemory(space, IdentityResolver(), barrier, timeout_s, threshold=-1.0))


def item(tk, value: str, sharing="shared", kind="profile") -> MemoryItem:
    return MemoryItem(tk.user, tk.agent, kind, sharing, {"field": "tools", "value": value}, tk.seq)


def test_the_interface_describes_every_call_of_the_layer():
    calls = {c["name"]: c for c in interface()}
    public = {n for n, f in inspect.getmembers(Syscalls, inspect.isfunction) if not n.startswith("_")}
    undeclared = public - set(calls) - {"candidates", "describe", "close"}
    assert not undeclared, f"calls without @syscall (missing from Table 7): {undeclared}"
    agent_calls = [c["name"] for c in interface() if c["caller"] == "agent"]
    assert agent_calls == ["open_session", "write_begin", "write_commit", "write_abort", "write", "retrieve"]
    assert calls["write_begin"]["operations"] == ["identity.resolve", "barrier.begin"]
    assert calls["retrieve"]["arguments"] == ["agent", "query", "user=None"]
    assert {"barrier.wait", "visibility.visible"} <= set(calls["retrieve"]["operations"])
    for c in interface():
        assert c["summary"] and c["guarantee"]
        assert all(op.split(".")[0] in modules() for op in c["operations"])
    assert modules()["barrier"]["implementation"] == "harness.kernel.barrier.WriteBarrier"
    with pytest.raises(ValueError, match="no operation"):  # an operation the module does not have
        syscall(operations=["barrier.acquire"], guarantees="-")
    interface()[0]["operations"].append("x")  # a copy: the table cannot be changed from outside
    assert "x" not in interface()[0]["operations"]


def test_retrieve_waits_for_a_write_begun_before_it_and_never_shows_private_items_of_others():
    k = kernel()
    ticket = k.write_begin("profile_agent", "u1")
    assert (ticket.user, ticket.seq, ticket.rule) == ("u1", 1, "request")

    def late():
        time.sleep(0.3)
        k.write_commit(ticket, [item(ticket, "Neovim")])

    threading.Thread(target=late).start()
    k.write("conversation_extractor", lambda tk: [item(tk, "a secret", "private", "conversation")], "u1")
    k.write("profile_agent", lambda tk: [item(tk, "Docker")], "u2")  # another user's shared item
    got = k.retrieve("assistant_agent", "what tools?", "u1")
    assert got.read.barrier["waited_s"] >= 0.25 and not got.read.barrier["timed_out"]
    values = {k.item(r.unit.uid).content["value"] for r in got.injection.memories}
    assert values == {"Neovim"}
    assert "Neovim" in got.block and "===== MEMORY CONTEXT =====" in got.block
    assert k.audit(got.read)["missed"] == 0
    assert [w["owner"] for w in k.writes("u1")] == ["profile_agent", "conversation_extractor"]
    k.close()


def test_identity_is_resolved_inside_the_calls():
    k = kernel()
    k.open_session("s1", "u7")
    t = k.write_begin("task_agent")  # no user id on the request: the latest session's user
    assert (t.user, t.rule) == ("u7", "session")
    k.write_commit(t, [item(t, "pytest")])
    got = k.retrieve("assistant_agent", "tools?")
    assert (got.user, got.rule) == ("u7", "session") and len(got.injection.memories) == 1
    k.close()


def test_an_aborted_or_refused_write_releases_its_number():
    k = kernel(timeout_s=2.0)
    t = k.write_begin("profile_agent", "u1")
    k.write_abort(t, "extraction failed")
    with pytest.raises(ValueError, match="cannot be committed"):  # an item of another user on this ticket
        t2 = k.write_begin("profile_agent", "u1")
        k.write_commit(t2, [MemoryItem("u2", "profile_agent", "profile", "shared", {"value": "x"}, t2.seq)])
    with pytest.raises(RuntimeError):
        k.write("task_agent", lambda tk: (_ for _ in ()).throw(RuntimeError("model down")), "u1")
    got = k.retrieve("assistant_agent", "q", "u1")
    assert not got.read.barrier["timed_out"] and got.read.barrier["waited_s"] < 1.0
    assert [bool(w["failed"]) for w in k.writes("u1")] == [True, True, True]
    k.close()


def test_table7_is_rendered_from_this_layer():
    from analysis.personal import table7

    t = table7.build(None)
    assert list(t.name) == [c["name"] for c in interface()]
    row = t[t.name == "retrieve"].iloc[0]
    assert row.arguments == "agent, query, user=None" and "barrier.wait" in row.operations and row.caller == "agent"
