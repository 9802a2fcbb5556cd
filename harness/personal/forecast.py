"""What a personalization stage will cost before it runs (dry_run=true): calls and tokens per method.

From the trials themselves: each writer's prompt (its system text and the message it reads),
the assistant's prompt (its system text, the block the method injects, the query) and a
typical reply; Mem0's own extraction counted as two calls per writer message (its fact
extraction and its memory update). Tokens are characters / 4, as in harness/run/forecast.py,
whose rows and table this reuses. Judging adds one rubric call per run at the judge's prices.
What a method's writers cost comes from what the method declares (`Method.writes`), not its name.

The barrier check: a read waits for its trial's writer calls, which run one after another
(the paper's pipeline) while no more trials are in flight than the endpoint has slots, so the
wait is about (writer calls) x (seconds per call). With the endpoint's speed declared
(`model.speed: {prompt_tokens_per_s, output_tokens_per_s}`) the forecast says when that passes
a method's timeout (`barrier_timeout_s`, mem0_user's `write_wait_s`): its reads would fail open.
"""

from __future__ import annotations

from harness.run.forecast import CHARS_PER_TOKEN, Row, render_rows
from harness.run.settings import endpoint_node

from . import assistant
from .writers import WRITERS

REPLY_TOKENS = {"writer": 60, "assistant": 300, "mem0": 120}
MEM0_PROMPT_CHARS = 6_000  # Mem0's extraction and update prompts, with their examples


def _tokens(chars: float) -> float:
    return chars / CHARS_PER_TOKEN


def _writes(cond_cfg) -> str | None:
    from harness.personal.schedule import method_class

    return method_class(cond_cfg).writes


def per_run(cond_cfg, trial: dict) -> tuple[int, float, float]:
    """(calls, prompt tokens, output tokens) of one run of this method on this trial."""
    msgs = trial["messages"]
    writes = _writes(cond_cfg)
    writers = [WRITERS[str(w)] for w in cond_cfg.get("writers") or []] if writes else []
    calls, prompt, out = 1, _tokens(len(assistant.SYSTEM) + len(trial["query"])), REPLY_TOKENS["assistant"]
    if not writes and cond_cfg.get("sources") is None:  # everything the user said, unfiltered
        prompt += _tokens(len(msgs["profile"]) + len(msgs["task"]))
    elif writes == "mem0":
        for w in writers:
            calls += 2
            prompt += 2 * _tokens(MEM0_PROMPT_CHARS + len(msgs[w.message]))
            out += 2 * REPLY_TOKENS["mem0"]
        prompt += _tokens(sum(len(msgs[w.message]) for w in writers) / 2)  # what the search injects
    elif writes == "kernel":
        for w in writers:
            calls += 1
            prompt += _tokens(len(w.system) + len(msgs[w.message]))
            out += REPLY_TOKENS["writer"]
        prompt += _tokens(sum(len(msgs[w.message]) for w in writers) / 2)  # what the kernel injects
    else:  # retrieval over the raw messages
        prompt += _tokens(sum(len(msgs[str(src)]) for src in cond_cfg.sources) / 2)
    return calls, prompt, out


def forecast(cfg, plan) -> tuple[list[Row], str]:
    rows: dict[str, Row] = {}
    for r in plan.runs:
        calls, prompt, out = per_run(cfg.stage.conditions[r.condition], plan.trials[r.trial_id])
        row = rows.setdefault(r.condition, Row(r.condition, 0, 0, 0, 0, 0, "trials (typical replies)"))
        row.runs, row.calls, row.miss, row.output = row.runs + 1, row.calls + calls, row.miss + prompt, row.output + out
    return [rows[c] for c in sorted(rows)], "the trials' message sizes with typical replies (harness/personal/forecast.py)"


def barrier_check(cfg, plan) -> list[str]:
    """Lines saying, per method with a bounded wait for its writes, how long a read would wait and whether
    that passes its timeout at the endpoint's declared speed (or that the speed is not declared)."""
    from harness.personal.schedule import slots, trials_in_flight

    speed = cfg.model.get("speed") or {}
    used = {r.condition for r in plan.runs}
    out = []
    for name in sorted(used):
        c = cfg.stage.conditions[name]
        writes, timeout = _writes(c), c.get("barrier_timeout_s", c.get("write_wait_s"))
        if not writes or timeout is None or (writes == "kernel" and not c.get("barrier", True)):
            continue
        ws = [WRITERS[str(w)] for w in c.get("writers") or []]
        trial = next(plan.trials[r.trial_id] for r in plan.runs if r.condition == name)
        per = 2 if writes == "mem0" else 1
        prompt = sum(per * _tokens((MEM0_PROMPT_CHARS if writes == "mem0" else len(w.system))
                                   + len(trial["messages"][w.message])) for w in ws)
        output = len(ws) * per * REPLY_TOKENS["mem0" if writes == "mem0" else "writer"]
        head = (f"barrier: {name}'s read waits for {len(ws) * per} writer calls, one after another "
                f"({trials_in_flight(cfg.stage, cfg.concurrency, cfg.model)} trials in flight, endpoint slots {slots(cfg.model) or 'unlimited'})")
        if not speed.get("output_tokens_per_s"):
            out.append(f"{head}; set model.speed.output_tokens_per_s (and prompt_tokens_per_s) to forecast the wait "
                       f"against its {float(timeout):g} s timeout")
            continue
        wait = output / float(speed["output_tokens_per_s"]) + (
            prompt / float(speed["prompt_tokens_per_s"]) if speed.get("prompt_tokens_per_s") else 0.0)
        if wait > float(timeout):
            out.append(f"WARNING: {head}: about {wait:.1f} s at the declared speed, past its {float(timeout):g} s "
                       "timeout: its reads will fail open and inject little (a faster endpoint, or a longer "
                       "timeout, declared as a deviation)")
        else:
            out.append(f"{head}: about {wait:.1f} s at the declared speed, within its {float(timeout):g} s timeout")
    return out


def render(cfg, plan) -> str:
    rows, said = forecast(cfg, plan)
    table = render_rows(endpoint_node(cfg.model), rows, said, "judging adds one rubric call per run at the judge's prices (make judge)")
    return "\n".join([table, *barrier_check(cfg, plan)])
