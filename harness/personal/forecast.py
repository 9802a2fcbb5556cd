"""What a personalization stage will cost before it runs (dry_run=true): calls and tokens per method.

From the trials themselves: each writer's prompt (its system text and the message it reads),
the assistant's prompt (its system text, the block the method injects, the query) and a
typical reply; Mem0's own extraction counted as two calls per writer message (its fact
extraction and its memory update). Tokens are characters / 4, as in harness/run/forecast.py,
whose rows and table this reuses. Judging adds one rubric call per run at the judge's prices.
"""

from __future__ import annotations

from harness.run.forecast import CHARS_PER_TOKEN, Row, render_rows

from . import assistant
from .writers import WRITERS

REPLY_TOKENS = {"writer": 60, "assistant": 300, "mem0": 120}
MEM0_PROMPT_CHARS = 6_000  # Mem0's extraction and update prompts, with their examples


def _tokens(chars: float) -> float:
    return chars / CHARS_PER_TOKEN


def per_run(cond_cfg, trial: dict) -> tuple[int, float, float]:
    """(calls, prompt tokens, output tokens) of one run of this method on this trial."""
    msgs = trial["messages"]
    module = str(cond_cfg.module)
    writers = [WRITERS[str(w)] for w in cond_cfg.get("writers") or []]
    calls, prompt, out = 1, _tokens(len(assistant.SYSTEM) + len(trial["query"])), REPLY_TOKENS["assistant"]
    if module.endswith("naive_concat"):
        prompt += _tokens(len(msgs["profile"]) + len(msgs["task"]))
    elif module.endswith("mem0_default"):
        for w in writers:
            calls += 2
            prompt += 2 * _tokens(MEM0_PROMPT_CHARS + len(msgs[w.message]))
            out += 2 * REPLY_TOKENS["mem0"]
        prompt += _tokens(sum(len(msgs[w.message]) for w in writers) / 2)  # what the search injects
    else:
        for w in writers:
            calls += 1
            prompt += _tokens(len(w.system) + len(msgs[w.message]))
            out += REPLY_TOKENS["writer"]
        prompt += _tokens(sum(len(msgs[w.message]) for w in writers) / 2)  # what the kernel or RAG injects
    return calls, prompt, out


def forecast(cfg, plan) -> tuple[list[Row], str]:
    rows: dict[str, Row] = {}
    for r in plan.runs:
        calls, prompt, out = per_run(cfg.stage.conditions[r.condition], plan.trials[r.trial_id])
        row = rows.setdefault(r.condition, Row(r.condition, 0, 0, 0, 0, 0, "trials (typical replies)"))
        row.runs, row.calls, row.miss, row.output = row.runs + 1, row.calls + calls, row.miss + prompt, row.output + out
    return [rows[c] for c in sorted(rows)], "the trials' message sizes with typical replies (harness/personal/forecast.py)"


def render(cfg, plan) -> str:
    rows, said = forecast(cfg, plan)
    return render_rows(cfg, rows, said, "judging adds one rubric call per run at the judge's prices (make judge)")
