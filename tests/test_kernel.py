"""Kernel-managed injection: the visibility rule, the write barrier, and the injected block."""

import threading
import time

import pytest

from harness.data.longmemeval import Session, Turn
from harness.kernel import FOOTER, HEADER, Kernel, WriteBarrier, visible
from harness.memory.space import MemorySpace, Result
from harness.memory.units import Round, Unit, units_of_sessions


@pytest.mark.parametrize("owner,sharing,agent,expect", [
    ("a1", "private", "a1", True),      # own memory
    ("a2", "shared", "a1", True),
    ("a2", "public", "a1", False),      # not the paper's word: unknown -> private (fail closed)
    ("a2", "Public", "a1", False),
    ("a2", "private", "a2", True),      # explicitly private, own
    ("a2", ["shared"], "a1", False),    # malformed (a list) -> private
    ("a2", {"sharing": "shared"}, "a1", False),
    ("a2", " Shared ", "a1", False),   # not exactly "shared": malformed -> private
    ("a2", "private", "a1", False),
    ("a2", None, "a1", False),          # absent -> private
    ("a2", "", "a1", False),
    ("a2", "everyone", "a1", False),    # malformed -> private
    ("a2", 1, "a1", False),
])
def test_visibility_rule(owner, sharing, agent, expect):
    """The paper's cases (Section 3.3): own, shared; absent, malformed, unknown or private -> private."""
    assert visible(owner, sharing, agent) is expect
    # the item's unit in the memory space follows the same rule through the view and the kernel's re-check
    from harness.kernel import MemoryItem, unit_visible
    from harness.memory.views import View

    u = MemoryItem("user", owner, "profile", sharing, {"field": "tools", "value": "vim"}).unit()
    assert unit_visible(u.owner, u.visibility, agent) is expect
    assert View("user", agent, "shared").admits(u) is expect


def test_barrier_waits_for_earlier_writes_of_the_same_user_only():
    b = WriteBarrier(timeout_s=5)
    assert b.wait("u1")["timed_out"] is False
    seq = b.begin("u1")
    other = b.begin("u2")
    threading.Timer(0.3, b.release, args=("u1", seq)).start()
    got = b.wait("u1")
    assert got["snapshot"] == 1 and not got["timed_out"] and got["waited_s"] >= 0.25
    # u2's pending write never blocks u1 (and is still pending for u2)
    assert b.wait("u1")["waited_s"] < 0.1
    b.release("u2", other)


def test_barrier_ignores_writes_issued_after_the_read_began():
    b = WriteBarrier(timeout_s=2)
    first = b.begin("u")
    result = {}

    def reader():
        result.update(b.wait("u"))

    t = threading.Thread(target=reader)
    t.start()
    time.sleep(0.1)
    later = b.begin("u")  # after the reader's snapshot: must not hold it back
    b.release("u", first)
    t.join(timeout=2)
    assert result["snapshot"] == 1 and result["timed_out"] is False and result["waited_s"] < 1.0
    b.release("u", later)


def test_barrier_fails_open_after_its_timeout():
    b = WriteBarrier(timeout_s=0.3)
    b.begin("u")
    t0 = time.monotonic()
    got = b.wait("u")
    assert got["timed_out"] is True and 0.25 <= time.monotonic() - t0 < 2


class Broken:
    def commit(self, *a, **k):
        raise RuntimeError("index down")


def test_a_failed_write_still_releases_its_number():
    k = Kernel(Broken(), WriteBarrier(timeout_s=3))
    with pytest.raises(RuntimeError):
        k.write(Round("s1", 1, "u", "a", 0.0), "org", "a0", "private")
    assert k.barrier.wait("org")["timed_out"] is False


class FixedSpace:
    """Hands the kernel crafted candidates (as a faulty index might), to test its own filtering."""

    def __init__(self, results):
        self.results = results

    def search(self, query, view, k, scoring):
        return self.results[:k]


def res(owner, vis, score, text, n):
    return Result(Unit("org", owner, vis, 1.7e9 + n, f"s{n}", 1, 0, f"User: {text}\nAssistant: ok"), score, n)


def test_kernel_filters_dedupes_thresholds_caps_and_formats():
    cands = [res("a9", "private", 0.99, "secret of another agent", 1),   # invisible even if returned
             res("a0", "private", 0.95, "my own note", 2),
             res("a3", "public", 0.90, "a shared fact", 3),
             res("a3", "public", 0.89, "a  Shared fact", 4),              # duplicate after normalising
             res("a4", None, 0.88, "no policy", 5),                       # absent policy -> private
             res("a3", "public", 0.20, "weakly related", 6)]              # below 0.3
    cands += [res("a0", "private", 0.8 - i / 100, f"note {i}", 10 + i) for i in range(20)]
    inj = Kernel(FixedSpace(cands), cap=10).inject("org", "a0", "q")
    kept = [r.unit.text for r in inj.memories]
    assert len(kept) == 10
    assert not any("secret" in t or "no policy" in t or "weakly" in t for t in kept)
    assert sum("hared fact" in t for t in kept) == 1
    assert [r.score for r in inj.memories] == sorted((r.score for r in inj.memories), reverse=True)
    assert inj.block.startswith(HEADER + "\n- On ") and FOOTER in inj.block
    assert "the user said: my own note; the assistant replied: ok" in inj.block
    assert inj.log["dropped"] == {"invisible": 2, "duplicate": 1, "below_threshold": 1}


def test_kernel_truncates_to_the_token_budget():
    cands = [res("a0", "private", 0.9 - i / 100, "x" * 1000 + str(i), i) for i in range(10)]
    inj = Kernel(FixedSpace(cands), budget_tokens=600).inject("org", "a0", "q")
    assert 0 < len(inj.memories) < 10
    assert len(inj.block) / 4 <= 600
    assert Kernel(FixedSpace([]), budget_tokens=600).inject("org", "a0", "q").block == ""


def test_kernel_over_a_real_space_never_injects_private_units_of_others(minilm_encoder):
    from harness.memory.backends.base import make_backend

    space = MemorySpace(minilm_encoder, make_backend("exact"))
    owners = {"s1": "a0", "s2": "a2", "s3": "a4"}
    vis = {"a0": "public", "a2": "public", "a4": "private"}
    text = {"s1": "I adopted a beagle called Biscuit.", "s2": "My beagle Biscuit loves the park.",
            "s3": "Biscuit the beagle had surgery last week."}
    sessions = [Session(sid, __import__("datetime").datetime(2023, 1, i + 1),
                        (Turn("user", text[sid]), Turn("assistant", "Noted.")))
                for i, sid in enumerate(owners)]
    space.add_units(units_of_sessions(sessions, "org1", owners.__getitem__, vis.__getitem__))
    inj = Kernel(space, threshold=0.0).inject("org1", "a0", "What is my beagle called?")
    got = {r.unit.owner for r in inj.memories}
    assert got == {"a0", "a2"}
    assert "surgery" not in inj.block
    space.close()


@pytest.mark.parametrize("sharing", ["Shared", " shared", "shared ", "SHARED", "\tshared\n"])
def test_only_the_exact_shared_policy_shares(sharing):
    """Claim 5: the paper's Eq. 1 shares when s = "shared"; a policy spelled otherwise is malformed, so private
    in the rule, the index's unit and the view alike (fail closed, never a lenient parse that opens)."""
    from harness.kernel import MemoryItem, unit_visible, visible
    from harness.memory.views import View

    assert visible("a2", sharing, "a1") is False
    u = MemoryItem("user", "a2", "profile", sharing, {"field": "tools", "value": "vim"}).unit()
    assert u.visibility == "private" and unit_visible(u.owner, u.visibility, "a1") is False
    assert View("user", "a1", "shared").admits(u) is False
