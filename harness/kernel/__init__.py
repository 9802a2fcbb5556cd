"""The second seed paper's kernel in one package: it alone writes and reads memory for the agents.

visibility  the rule: owner OR shared; any other policy is private (fails closed)
barrier     the per-user write barrier (WriteBarrier, one lane per user) and its no-wait ablation (Unordered)
identity    user-identity resolution in the paper's priority order, with A.9's agent-memory step (IdentityResolver)
encoding    one batching encoder worker for every user's commits, another for reads' queries (BatchEncoder),
            and the encoder's measured cost (measure): no lock between users
items       a memory item (user, owner agent, type, sharing policy, content) and its formats
injection   the read path: barrier wait, two-stage search (the agent's own memories, then the others' shared), visibility re-check, dedupe,
            threshold, rank, cap, format, token budget (Kernel, Injection, statement)
memory      the kernel memory of the personalization study: items written through the
            barrier, read through Kernel, with the reads that missed a write counted and
            the reads the index truncated (short reads)
syscalls    the system-call interface the agents write and read through (write_begin/commit/
            abort, retrieve; identity and barrier inside), describing itself for Table 7

The conditions (conditions/kernel.py on LongMemEval-Org, conditions/personal/kernel_shared.py in the
personalization study, the latter through syscalls only) only build on this package.
"""

from .barrier import Unordered, WriteBarrier
from .identity import IdentityResolver
from .injection import CHARS_PER_TOKEN, FOOTER, HEADER, Injection, Kernel, statement
from .items import MemoryItem, line
from .memory import KernelMemory
from .visibility import SHARED, unit_visible, visible

__all__ = ["CHARS_PER_TOKEN", "FOOTER", "HEADER", "Injection", "IdentityResolver", "Kernel", "KernelMemory",
           "MemoryItem", "SHARED", "Unordered", "WriteBarrier", "line", "statement", "unit_visible", "visible"]
