"""The kernel with many users in one memory space (issue 23, item 1): every user's read returns
min(cap, the user's visible items) on each index the personalization stage may be given, and a read
the index truncates is counted. Real PostgreSQL/Redis (services fixture); hash vectors keep it fast
(random vectors give a query no affinity to the user's items, the hardest case for a post-filter).
bench/kernel_scale.py measures the same at 150 and 1,500 users with MiniLM.
"""

from __future__ import annotations

import pytest

from bench.kernel_scale import extracted, index_config, kernel_over
from harness.data import personal as trials_data
from harness.kernel import IdentityResolver, KernelMemory, MemoryItem
from harness.kernel.syscalls import Syscalls
from harness.memory.backends.exact import ExactBackend
from harness.memory.encoder import HashEncoder
from harness.memory.space import MemorySpace
from harness.personal import assistant
from harness.personal.writers import PROFILE, TASK

CAP = 10
BACKGROUND, MEASURED = 100, 6


def crowd(kernel: Syscalls, trials: list[dict]) -> None:
    """Other users' items straight into the space in one bulk add (the index's bulk path), not as reads' targets."""
    units = []
    for i, t in enumerate(trials):
        for w, seq in ((PROFILE, 1), (TASK, 2)):
            units += [it.unit() for it in extracted(t, w, _Ticket(t["user_id"], seq))]
    kernel._memory.space.add_units(units, progress=False)


class _Ticket:
    def __init__(self, user, seq):
        self.user, self.seq = user, seq


def write_measured(kernel: Syscalls, t: dict, i: int) -> int:
    """A measured user: shared profile items, task items shared only for even i (private otherwise, so
    the assistant may not see them), a private note: returns how many items the assistant may see."""
    task_sharing = "shared" if i % 2 == 0 else "private"
    p = kernel.write(PROFILE.name, lambda tk: extracted(t, PROFILE, tk), t["user_id"])
    kernel.write(TASK.name, lambda tk: extracted(t, TASK, tk, task_sharing), t["user_id"])
    kernel.write("conversation_extractor", lambda tk: [MemoryItem(tk.user, tk.agent, "conversation", "private",
                                                                  {"value": f"note {i}"}, tk.seq)], t["user_id"])
    return len(p) + (len(extracted(t, TASK, _Ticket(t["user_id"], 0))) if task_sharing == "shared" else 0)


@pytest.mark.services
@pytest.mark.parametrize("index", ["pgvector_kernel", "redis_qe", "vectorset", "exact"])
def test_each_user_gets_min_cap_visible_in_a_crowded_space(index):
    trials = trials_data.generate(BACKGROUND + MEASURED, 0)["trials"]
    kernel = kernel_over(index_config(index), HashEncoder(), cap=CAP)
    try:
        crowd(kernel, trials[:BACKGROUND])
        for i, t in enumerate(trials[BACKGROUND:]):
            visible = write_measured(kernel, t, i)
            got = kernel.retrieve(assistant.NAME, t["query"], t["user_id"])
            assert got.user == t["user_id"] and got.rule == "request"
            mem = [kernel.item(r.unit.uid) for r in got.injection.memories]
            assert len(mem) == min(CAP, visible), (index, i, got.read.describe())
            assert {m.user_id for m in mem} == {t["user_id"]}
            assert all(m.sharing == "shared" for m in mem)  # no private item of a writer reaches the assistant
            d = got.read.describe()
            assert (d["visible"], d["expected"], d["short"]) == (visible, min(CAP, visible), 0)
            if index == "pgvector_kernel":
                assert d["plan"]["path"] == "exact" and d["plan"]["view_rows"] == visible
        if index == "pgvector_kernel":  # the exact path reads the view's rows through the b-tree, never the graph
            from harness.memory.backends.base import Query
            from harness.memory.views import View

            backend = kernel._memory.space.dense
            q = Query(vector=HashEncoder().embed_query("what next?"))
            plan = backend.explain_exact(q, View(trials[-1]["user_id"], assistant.NAME, "shared"), 30)
            assert "_hnsw" not in plan and "_org" in plan, plan
    finally:
        kernel.close()


class Lossy(ExactBackend):
    """An index that returns only its best hit, whatever k: a read it answers is short by construction."""

    def search(self, query, view, k):
        return super().search(query, view, k)[:1]


def test_a_read_the_index_truncates_is_counted():
    space = MemorySpace(HashEncoder(), Lossy())
    kernel = Syscalls(KernelMemory(space, IdentityResolver(), cap=4, threshold=-1.0))
    t = trials_data.generate(1, 0)["trials"][0]
    kernel.write(PROFILE.name, lambda tk: extracted(t, PROFILE, tk), t["user_id"])  # 7 shared items
    got = kernel.retrieve(assistant.NAME, t["query"], t["user_id"])
    assert got.read.describe() == {"visible": 7, "expected": 4, "returned": 1, "short": 3,
                                   "plan": {"path": "exact"}}
    other = kernel.retrieve(assistant.NAME, t["query"], "user-without-items")
    assert other.read.short == 0 and other.read.expected == 0
    kernel.close()
