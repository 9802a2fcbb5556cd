"""What one Mem0 add costs, read from the installed mem0ai (not assumed): its LLM calls and their prompts.

Read by the forecast (calls and tokens per method) and by the manifest's Mem0 rows (harness/personal/schedule.py),
so it sits below both.
"""

from __future__ import annotations

import functools

MEM0_PROMPT_CHARS = 6_000  # only when mem0ai cannot be imported: its prompts, with their examples, per call
MEM0_CALLS_PER_ADD = 2  # likewise: mem0ai 1.x's extraction + update


def mem0_add(message: str) -> tuple[int, float, str]:
    """(LLM calls one `Memory.add(message, infer=True)` makes, their prompt characters, where the figures come from),
    read from the installed mem0ai: the calls its add path makes (`llm.generate_response(` in
    Memory._add_to_vector_store) and the system and user prompts its own builder writes for the message (no
    existing memories: each writer adds one message per user). Without mem0ai: the 1.x figures, said so."""
    m0, calls = _installed()
    if m0 is None:  # not installed, or broken: the assumed figures, named as such
        return MEM0_CALLS_PER_ADD, MEM0_CALLS_PER_ADD * (MEM0_PROMPT_CHARS + len(message)), "assumed (no mem0ai)"
    build = getattr(m0, "generate_additive_extraction_prompt", None)
    system = getattr(m0, "ADDITIVE_EXTRACTION_PROMPT", None)
    if build is None or system is None:  # another generation of Mem0's prompts: its size per call, estimated
        return calls, calls * (MEM0_PROMPT_CHARS + len(message)), f"mem0ai calls ({calls}/add), prompts estimated"
    user = build(existing_memories=[], new_messages=m0.parse_messages([{"role": "user", "content": message}]),
                 last_k_messages=[])
    return calls, calls * (len(system) + len(user)), f"mem0ai {_mem0_version()} ({calls} call/add, its prompts)"


@functools.cache
def _installed():
    """(mem0ai's module of Memory, the LLM calls its add path makes), read once a process: the forecast asks for
    every run of a stage (600 trials: reading the source each time was most of a personal dry run); (None, 0)
    without mem0ai."""
    import inspect
    import os

    # mem0ai reads these when first imported (its telemetry would reach the internet): off, as the method sets them
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from mem0.memory import main as m0
    except Exception:  # noqa: BLE001 - not installed, or broken
        return None, 0
    return m0, inspect.getsource(m0.Memory._add_to_vector_store).count("llm.generate_response(")


def _mem0_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("mem0ai")
    except metadata.PackageNotFoundError:
        return "?"
