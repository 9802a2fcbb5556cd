"""kernel_shared (second seed paper): writers write tagged items; the kernel alone reads and injects.

ProfileAgent, TaskAgent and the ConversationExtractor write through the kernel's system calls
(harness/kernel/syscalls.py: write_begin/write_commit, with identity resolution and the per-user
write barrier inside); AssistantAgent gets the block of the kernel's `retrieve` and does no
retrieval itself. `sharing` sets each memory type's policy: Phase 2 shares profile and task
items, Phase 1 (`kernel_private.yaml`) keeps everything private; conversation items stay
private by default. Settings (barrier, timeout, budget, cap, threshold, format, write
delay) come from the condition's yaml. The kernel is harness/kernel/ (memory.py behind syscalls.py).
The record keeps the read's index check (method_log.read: visible, expected, returned, short, and
the index's plan); `short` > 0 is a read the index truncated.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from harness.memory.space import space_from_config
from harness.personal import assistant, writers
from harness.kernel import KernelMemory
from harness.kernel.syscalls import Syscalls
from harness.personal.method import Injected, Method, RunCtx
from harness.run.settings import index_node


@dataclass
class Settings:
    """conf/condition/kernel_shared.yaml (and its ablations): the writers, what each memory type shares, the
    barrier, the kernel's retrieval and the injected format."""

    writers: list = field(default_factory=lambda: ["profile_agent", "task_agent", "conversation_extractor"])
    sharing: dict = field(default_factory=lambda: {"profile": "shared", "task_context": "shared",
                                                   "conversation": "private"})
    barrier: bool = True
    barrier_timeout_s: float = 5.0
    write_delay_s: float = 0.0
    attach_user_id: bool = True
    budget_tokens: int = 2000
    cap: int = 10
    threshold: float = 0.3
    candidates: int = 30
    format: str = "statement"


def kernel_for(cfg: Settings, ctx: RunCtx) -> Syscalls:
    """The condition's kernel (one memory space for every user of the stage), reached by its system calls."""
    def make() -> Syscalls:
        sh = ctx.shared
        space = space_from_config(index_node(sh.cfg.index), encoder=sh.encoder)
        return Syscalls(KernelMemory(space, sh.resolver, cfg.barrier, cfg.barrier_timeout_s, cfg.budget_tokens, cfg.cap,
                                     cfg.threshold, cfg.candidates, cfg.format, cfg.write_delay_s))

    return ctx.shared.once(f"kernel:{ctx.condition}", make)


class KernelShared(Method):
    writes = "kernel"

    def __init__(self, cfg: Settings, ctx: RunCtx):
        self.cfg, self.ctx = cfg, ctx
        self.kernel = kernel_for(cfg, ctx)
        self.attach = cfg.attach_user_id
        self.futures = []
        self.read = self.retrieval = None

    def write(self) -> None:
        pending = []
        for name in self.cfg.writers:
            w = writers.WRITERS[str(name)]
            pending.append((w, self.ctx.agent(w.name, json=True), self.cfg.sharing.get(w.memory_type)))
        self.futures = writers.submit(pending, self.kernel, self.ctx.trial, self.ctx.shared.pool(self.ctx.condition),
                                      self.attach)

    def inject(self) -> Injected:
        t = self.ctx.trial
        t0 = time.perf_counter()
        got = self.kernel.retrieve(assistant.NAME, t["query"], t["user_id"] if self.attach else None)
        dt = time.perf_counter() - t0
        self.read, inj = got.read, got.injection
        items = [self.kernel.item(r.unit.uid).describe(r.score) for r in inj.memories]
        cands = [it.describe() for it in self.kernel.candidates(got)]
        log = {"resolved_user": got.user, "identity_rule": got.rule, "barrier": inj.log["barrier"],
               "dropped": inj.log["dropped"], "threshold": inj.log["threshold"], "cap": inj.log["cap"],
               "budget_tokens": inj.log["budget_tokens"], "view": inj.log["view"], "read": self.read.describe(),
               "stages": inj.log["stages"]}  # A.9's two stages: the agent's own memories, the other agents' shared
        self.retrieval = got
        return Injected(inj.block, items, cands, dt, log)

    def finish(self) -> dict:
        errors = []
        for f in self.futures:
            try:
                f.result()
            except Exception as exc:  # recorded: a failed write is released and counted, never hidden
                errors.append(f"{type(exc).__name__}: {exc}"[:300])
        out = {"write_errors": errors, "writes": self.kernel.writes(self.read.user if self.read else
                                                                     self.ctx.trial["user_id"])}
        if self.read is not None:
            out["reads"] = self.kernel.audit(self.read)
            # the exposure audit, once this trial's writes have landed (a read that timed out at the barrier is
            # audited against everything its writers stored); writes still open are counted unaudited
            audit, unlanded = self.kernel.unrestricted(self.retrieval, self.ctx.trial["query"])
            out.update(audit=[it.describe() for it in audit], unaudited_writes=unlanded)
        return out


build = KernelShared
