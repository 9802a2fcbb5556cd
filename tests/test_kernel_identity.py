"""Identity resolution and the two-stage cross-agent retrieval of the second paper's kernel (Section 3.1, A.8/A.9).

Order: the request's own id, the latest session, the user of the requesting agent's own memories (A.9's first
stage), the global registry, the agent's own id. Retrieval: the agent's own memories of the user, then the
other agents' shared ones. In process: the exact index and hash vectors through the kernel's encoder worker.
"""

from __future__ import annotations

import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.kernel import IdentityResolver, KernelMemory, MemoryItem
from harness.kernel.encoding import BatchEncoder
from harness.kernel.syscalls import Syscalls
from harness.memory.backends.exact import ExactBackend
from harness.memory.encoder import HashEncoder
from harness.memory.space import MemorySpace


def kernel(resolver: IdentityResolver | None = None) -> Syscalls:
    space = MemorySpace(BatchEncoder(HashEncoder()), ExactBackend())
    return Syscalls(KernelMemory(space, resolver or IdentityResolver(), True, 5.0, cap=100, threshold=-1.0,
                                 candidates=100))


def item(tk, value: str, sharing="shared", number: int = 0) -> MemoryItem:
    return MemoryItem(tk.user, tk.agent, "profile", sharing, {"field": "tools", "value": value}, tk.seq, number)


def test_each_rule_of_the_order_applies_only_when_the_ones_before_it_find_nothing():
    k = kernel()
    assert (k.retrieve("assistant_agent", "q").user, k.retrieve("assistant_agent", "q").rule) == \
        ("assistant_agent", "agent")  # nothing known: the agent's own id (rule 4)
    k.write("profile_agent", lambda tk: [item(tk, "vim of u1")], "u1")
    r = k.retrieve("task_agent", "q")  # no memories of its own: the registry's latest user (rule 3)
    assert (r.user, r.rule) == ("u1", "registry") and "vim of u1" in r.block  # zero-shot, across agents
    k.write("task_agent", lambda tk: [item(tk, "goal of u2")], "u2")
    r = k.retrieve("profile_agent", "q")  # its own memories are about u1, though the registry's latest is u2
    assert (r.user, r.rule) == ("u1", "agent_memory")
    assert (k.retrieve("assistant_agent", "q").user, k.retrieve("assistant_agent", "q").rule) == ("u2", "registry")
    k.open_session("s1", "u3")
    assert (k.retrieve("profile_agent", "q").user, k.retrieve("profile_agent", "q").rule) == ("u3", "session")
    r = k.retrieve("profile_agent", "q", "u2")
    assert (r.user, r.rule) == ("u2", "request") and "goal of u2" in r.block and "vim" not in r.block
    # writes resolve the same way
    assert k.write_begin("task_agent").user == "u3" and k.write_begin("task_agent", "u1").rule == "request"


def test_two_trials_in_flight_without_the_request_id_read_the_later_sessions_user():
    """The `attach_user_id: false` ablation, in the order two concurrent trials can take: both sessions are
    open before the first trial reads. Without the id its read resolves to the other trial's user and injects
    that user's memories; with the id it reads its own and nothing else."""
    k = kernel()
    k.open_session("s1", "u1")
    k.write("profile_agent", lambda tk: [item(tk, "vim of u1")], "u1")
    k.open_session("s2", "u2")
    k.write("profile_agent", lambda tk: [item(tk, "emacs of u2")], "u2")
    r = k.retrieve("assistant_agent", "q")  # trial s1's read, sent without its user
    assert (r.user, r.rule) == ("u2", "session") and "emacs of u2" in r.block and "vim of u1" not in r.block
    r = k.retrieve("assistant_agent", "q", "u1")
    assert (r.user, r.rule) == ("u1", "request") and "vim of u1" in r.block and "emacs of u2" not in r.block


def test_retrieval_takes_the_agents_own_memories_then_the_other_agents_shared_ones():
    k = kernel()
    k.write("profile_agent", lambda tk: [item(tk, "own note", "private"), item(tk, "own shared", number=1)], "u")
    k.write("task_agent", lambda tk: [item(tk, "task shared"), item(tk, "task private", "private", 1)], "u")
    k.write("task_agent", lambda tk: [item(tk, "other user's")], "v")
    r = k.retrieve("profile_agent", "q", "u")
    assert r.injection.log["stages"] == {"agent_scoped": 2, "cross_agent": 1}
    assert {"own note", "own shared", "task shared"} == {k.item(m.unit.uid).content["value"]
                                                        for m in r.injection.memories}


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(["u0", "u1", "u2", "u3"]), min_size=2, max_size=6, unique=True),
       st.integers(1, 30))
def test_under_concurrent_trials_a_request_with_its_id_always_resolves_to_its_own_user(users, rounds):
    """Trials of different users register sessions, write and read at once; whatever the interleaving, every
    call carrying the request's id resolves to that user by rule 1, and every read returns that user's items."""
    k = kernel()
    start, errors = threading.Barrier(len(users)), []

    def trial(user: str) -> None:
        try:
            start.wait()
            for i in range(rounds):
                k.open_session(f"{user}-{i}", user)
                t = k.write_begin("profile_agent", user)
                assert (t.user, t.rule) == (user, "request")
                k.write_commit(t, [item(t, f"{user} item {i}")])
                r = k.retrieve("assistant_agent", "q", user)
                assert (r.user, r.rule) == (user, "request")
                assert all(k.item(m.unit.uid).user_id == user for m in r.injection.memories)
                assert f"{user} item {i}" in r.block
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=trial, args=(u,)) for u in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[0]
    # without the id, the latest session decides (rule 2): one of the trials' users, the ablation's contamination
    r = k.retrieve("assistant_agent", "q")
    assert r.rule == "session" and r.user in users
