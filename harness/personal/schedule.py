"""How the personal stage schedules its trials (SPEC 4, the second paper's A.10): how many trials run at once
(never more than the endpoint serves), what each method declares it needs, and the manifest rows that declare the
schedule beside the paper. Read by the run step and by the forecast, so it sits below both."""

from __future__ import annotations

import conditions


def method_class(cond_cfg):
    """The Method class a condition builds (its module's `build`), whose declarations (services, writes) the
    stage reads without building it."""
    return conditions.load(str(cond_cfg.module)).build


def slots(model_cfg) -> int | None:
    """The calls the endpoint serves at once (model.max_concurrency; a local model's llama.cpp slots), or None."""
    n = model_cfg.get("max_concurrency")
    if model_cfg.get("provider") == "local":
        n = min(int(n or model_cfg.get("parallel") or 1), int(model_cfg.get("parallel") or 1))
    return int(n) if n else None


def trials_in_flight(stage, concurrency: int, model) -> int:
    """`stage.concurrency` (default: the command's `concurrency`), at most the endpoint's slots (model: its node)."""
    want = max(1, int(stage.get("concurrency") or concurrency))
    cap = slots(model)
    return min(want, cap) if cap else want


def schedule_rows(stage, concurrency: int, model, in_flight: int) -> list:
    """How the trials were scheduled and what an item is, beside the paper (declared, never silent)."""
    from harness.run.fidelity import Row

    want = max(1, int(stage.get("concurrency") or concurrency))
    cap = slots(model)
    capped = f", capped from {want} at the endpoint's {cap} slot(s)" if cap and want > cap else ""
    return [
        Row("pipeline", "trial pipeline", "ProfileAgent, then TaskAgent, then AssistantAgent (A.10); writes "
            "asynchronous to the assistant's read, behind the barrier; each condition run for its trials",
            "per trial the writers in the paper's order (profile, task, conversation) on the method's own pool, "
            "asynchronous to the assistant, whose read waits behind the barrier; every model call holds one of the "
            f"endpoint's slots; runs in flight are one method's (blocks of {in_flight}, blocks in a seeded order)",
            "same", ""),
        Row("trials_in_flight", "trials in flight", "not stated (one pipeline run per trial)",
            f"{in_flight}{capped}", "same" if in_flight == 1 else "differs", "",
            "" if in_flight == 1 else "trials of other users run at once, each method with its own writers' pool; "
            "stage.concurrency=1 runs one trial at a time"),
        Row("item_granularity", "memory items", "about 4 retrieved per trial (1,798 over 450 trials, A.2)",
            "one item per extracted field value, as many as the writers list (8 fields and a note; 14 on the generated "
            "trials)", "differs",
            "", "harness/personal/writers.py Writer.items"),
    ]
