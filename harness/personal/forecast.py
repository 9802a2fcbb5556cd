"""What a personalization stage will cost before it runs (dry_run=true): calls and tokens per method.

From the trials themselves: each writer's prompt (its system text and the message it reads),
the assistant's prompt (its system text, the block the method injects, the query) and a
typical reply; Mem0's own extraction read from the installed mem0ai (`mem0_add`): the LLM calls
its `Memory.add(..., infer=True)` path makes (one in mem0ai 2.x: its additive extraction; two in
1.x: extraction, then update) and the prompts its own builder writes for the message. Tokens are characters / 4, as in harness/run/forecast.py,
whose rows and table this reuses. Judging adds one rubric call per run at the judge's prices.
What a method's writers cost comes from what the method declares (`Method.writes`), not its name.

The barrier check: a read waits for its trial's writer calls, which run one after another
(the paper's pipeline) while no more trials are in flight than the endpoint has slots, and for
the kernel's commits through the encoder at its measured rate (harness/personal/schedule.py
Capacity: the same figures the run caps trials in flight with), so the wait is about
(writer calls) x (seconds per call) + the commits. With the endpoint's speed declared
(`model.speed: {prompt_tokens_per_s, output_tokens_per_s}`) the forecast says when that passes
a method's timeout (`barrier_timeout_s`, mem0_user's `write_wait_s`): its reads would fail open.
"""

from __future__ import annotations

from harness.run.forecast import CHARS_PER_TOKEN, Row, render_rows
from harness.run.settings import endpoint_node

from . import assistant
from .mem0_calls import MEM0_PROMPT_CHARS, mem0_add  # noqa: F401 (MEM0_PROMPT_CHARS: its fallback)
from .writers import WRITERS

REPLY_TOKENS = {"writer": 60, "assistant": 300, "mem0": 120}


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
            n, chars, _ = mem0_add(msgs[w.message])
            calls += n
            prompt += _tokens(chars)
            out += n * REPLY_TOKENS["mem0"]
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


def _writer_wait(cfg, plan, name: str) -> tuple[int, float, float]:
    """(writer calls a read of `name` waits for, their prompt tokens, their output tokens) on the plan's first
    trial of that method (the writers run one after another)."""
    c = cfg.stage.conditions[name]
    writes = _writes(c)
    ws = [WRITERS[str(w)] for w in c.get("writers") or []]
    trial = next(plan.trials[r.trial_id] for r in plan.runs if r.condition == name)
    if writes == "mem0":
        adds = [mem0_add(trial["messages"][w.message]) for w in ws]
        calls = sum(n for n, _, _ in adds)
        return calls, sum(_tokens(c) for _, c, _ in adds), calls * REPLY_TOKENS["mem0"]
    prompt = sum(_tokens(len(w.system) + len(trial["messages"][w.message])) for w in ws)
    return len(ws), prompt, len(ws) * REPLY_TOKENS["writer"]


def call_seconds(model, prompt: float, output: float) -> float | None:
    """Seconds of calls of these sizes at the endpoint's declared (measured) speed; None: no speed declared."""
    speed = model.get("speed") or {}
    if not speed.get("output_tokens_per_s"):
        return None
    return output / float(speed["output_tokens_per_s"]) + (
        prompt / float(speed["prompt_tokens_per_s"]) if speed.get("prompt_tokens_per_s") else 0.0)


def is_local(model) -> bool:
    """An endpoint on this machine or this network's own server (loopback, or declared slots: Ollama, llama.cpp)."""
    from urllib.parse import urlparse

    host = (urlparse(str(model.get("base_url") or "")).hostname or "").lower()
    return model.get("provider") == "local" or host in ("127.0.0.1", "localhost", "::1") or \
        bool(model.get("max_concurrency") or model.get("parallel"))


def kernel_inputs(cfg, plan) -> tuple[float | None, float | None]:
    """(the shortest barrier timeout of the kernel methods the plan runs with the barrier on, a trial's writer
    extraction in seconds at the declared speed): the figures the schedule's cap and this forecast share."""
    used = sorted({r.condition for r in plan.runs})
    timeouts, extraction = [], None
    for name in used:
        c = cfg.stage.conditions[name]
        if _writes(c) != "kernel" or not c.get("barrier", True):
            continue
        timeouts.append(float(c.get("barrier_timeout_s", 5.0)))
        _n, prompt, output = _writer_wait(cfg, plan, name)
        s = call_seconds(cfg.model, prompt, output)
        extraction = s if extraction is None or (s is not None and s > extraction) else extraction
    return (min(timeouts) if timeouts else None), extraction


def barrier_check(cfg, plan, cap=None) -> list[str]:
    """Lines saying, per method with a bounded wait for its writes, how long a read would wait and whether
    that passes its timeout: the writers' calls at the endpoint's declared speed plus, for the kernel, its
    commits through the encoder at the measured rate and the trials in flight (`cap`, the schedule's Capacity,
    the same figures the run uses)."""
    from harness.personal.schedule import slots

    used = {r.condition for r in plan.runs}
    out = []
    if cap is not None and cap.encoder:
        a, b = cap.encoder
        out.append(f"schedule: {cap.line()}; encoder measured on this machine at {a:.2f} s a batch + "
                   f"{1000 * b:.1f} ms a text (harness/kernel/encoding.py measure), endpoint slots "
                   f"{cap.slots or 'not declared: measured when the stage starts (calls of one output token alone and 4 at once, repeated when fast, harness/personal/probe.py)'}")
    for name in sorted(used):
        c = cfg.stage.conditions[name]
        writes, timeout = _writes(c), c.get("barrier_timeout_s", c.get("write_wait_s"))
        if not writes or timeout is None or (writes == "kernel" and not c.get("barrier", True)):
            continue
        calls, prompt, output = _writer_wait(cfg, plan, name)
        n = cap.in_flight if cap is not None else 1
        commit = cap.commit_s(n) if (cap is not None and writes == "kernel") else 0.0
        head = (f"barrier: {name}'s read waits for {calls} writer calls, one after another "
                f"({n} trials in flight, endpoint slots {slots(cfg.model) or 'unlimited'})")
        extraction = call_seconds(cfg.model, prompt, output)
        if extraction is None:
            local = is_local(cfg.model)
            unmeasured = writes == "kernel" and (cap is None or not cap.encoder)
            out.append(f"{'WARNING: ' if local or commit > float(timeout) else ''}{head}; "
                       + ("its commits through the encoder not measured (no encoder here)" if unmeasured else
                          f"its commits about {commit:.2f} s through the encoder")
                       + ("; this local preset declares no measured speed (model.speed), so its writers may "
                          f"outlast the {float(timeout):g} s barrier unseen" if local else "")
                       + f"; set model.speed.output_tokens_per_s (and prompt_tokens_per_s), measured, to forecast the "
                         f"writers' calls against its {float(timeout):g} s timeout")
            continue
        wait = extraction + commit
        if wait > float(timeout):
            out.append(f"WARNING: {head}: about {wait:.1f} s ({extraction:.1f} s of writer calls at the declared "
                       f"speed, {commit:.2f} s of commits), past its {float(timeout):g} s timeout: its reads will "
                       "fail open and inject little (a faster endpoint, or a longer timeout, declared as a deviation)")
        else:
            out.append(f"{head}: about {wait:.1f} s ({extraction:.1f} s of writer calls at the declared speed, "
                       f"{commit:.2f} s of commits), within its {float(timeout):g} s timeout")
    return out


def _usd(prices, prompt: float, output: float) -> str:
    """List USD of these tokens (all prompt tokens as misses), or "unknown" when a price it needs is not set."""
    from harness.endpoints.pricing import list_cost, unknown_prices

    missing = [k for k in unknown_prices(prices) if k in ("miss", "output")]
    if missing:
        return f"unknown (no {' or '.join(missing)} price: set it; a stage with budget_usd stops at the preflight)"
    return f"{list_cost(prices, 0, int(prompt), int(output)):.4f} USD at list price"


def judging(cfg, plan) -> str:
    """One rubric call per run by the stage's judge: its tokens from the rubric's own template and the trials, at
    the judge's prices (unknown when not set: never counted as $0), and where it is sent."""
    from judge.rubric import TEMPLATE, describe_profile, describe_task

    prompt = output = 0.0
    for r in plan.runs:
        t = plan.trials[r.trial_id]
        prompt += _tokens(len(TEMPLATE) + len(describe_profile(t["profile"])) + len(describe_task(t["task"]))
                          + len(t["query"]) + 4 * REPLY_TOKENS["assistant"])
        output += 60
    j = cfg.judge
    return (f"judging (make judge): {len(plan.runs):,} rubric calls by {j.get('name')} ({j.get('model')}) at "
            f"{where(j)}: about {prompt:,.0f} prompt and {output:,.0f} output tokens, "
            f"{_usd(j.get('prices') or {}, prompt, output)}")


def where(node) -> str:
    """An endpoint's URL as the dry run names it: its base_url, or for the embedded local model the loopback
    server the harness starts (its port is chosen at start), never "None"."""
    url = node.get("base_url") if hasattr(node, "get") else getattr(node, "base_url", None)
    provider = node.get("provider") if hasattr(node, "get") else getattr(node, "provider", None)
    if url:
        return str(url)
    if str(provider) == "local":
        return "http://127.0.0.1:<port chosen at start>/v1 (the embedded local server, started by the harness)"
    return "no base_url set (the preset names none)"


def render(cfg, plan, cap=None) -> str:
    rows, said = forecast(cfg, plan)
    model = endpoint_node(cfg.model)
    table = render_rows(model, rows, said, judging(cfg, plan))
    prices = dict(model.prices or {})
    unknown = [k for k in ("hit", "miss", "output") if prices.get(k) is None]
    if unknown:  # the table counts a null price as 0: say it is not known
        table += (f"\nmodel {model.name}: no {', '.join(unknown)} price: the USD above is unknown, not 0 "
                  "(a stage with budget_usd stops at the preflight)")
    table += f"\nendpoints: model {model.name} ({model.model}) at {where(model)}; judge {cfg.judge.get('name')} " \
             f"({cfg.judge.get('model')}) at {where(cfg.judge)}"
    used = {r.condition for r in plan.runs}
    mem0 = [n for n in sorted(used) if _writes(cfg.stage.conditions[n]) == "mem0"]
    said_mem0 = [f"{', '.join(mem0)}: Mem0's calls and prompts per add from {mem0_add('')[2]}"] if mem0 else []
    return "\n".join([table, *said_mem0, *barrier_check(cfg, plan, cap)])
