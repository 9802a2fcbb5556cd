"""How the personal stage schedules its trials (SPEC 4, the second paper's A.10): how many trials run at once
(never more than the endpoint serves, nor than the encoder commits within the barrier), what each method declares
it needs, and the manifest rows that declare the schedule beside the paper. Read by the run step and by the
forecast, so it sits below both.

The cap on trials in flight (`Capacity`) comes from measured figures: the endpoint's slots
(model.max_concurrency, a local server's parallel slots), the writers' extraction time at the endpoint's
measured speed (model.speed, declared by the preset; unknown: 0, and the dry run says so), and the CPU
encoder's measured cost (harness.kernel.encoding.measure: a batch of n texts costs a + b n). The kernel's
commits of every trial in flight go through one batching encoder worker: T trials commit about
T x ITEMS_PER_TRIAL texts, and a commit waits for the batch before its own at most, so the commit path
takes about 2 (a + b T I) seconds.
T is the largest number whose extraction plus commit stays within HEADROOM of the shortest barrier
timeout of the kernel methods run. The dry run's barrier estimate is this same computation.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import conditions

ITEMS_PER_TRIAL = 16  # items the three writers commit per trial (14 on the generated trials, measured), rounded up
HEADROOM = 0.5  # the expected wait is kept within this share of the barrier's timeout


def method_class(cond_cfg):
    """The Method class a condition builds (its module's `build`), whose declarations (services, writes) the
    stage reads without building it."""
    module = cond_cfg["module"] if isinstance(cond_cfg, dict) else cond_cfg.module
    return conditions.load(str(module)).build


def slots(model_cfg) -> int | None:
    """The calls the endpoint serves at once (model.max_concurrency; a local model's llama.cpp slots), or None."""
    n = model_cfg.get("max_concurrency")
    if model_cfg.get("provider") == "local":
        n = min(int(n or model_cfg.get("parallel") or 1), int(model_cfg.get("parallel") or 1))
    return int(n) if n else None


def trials_in_flight(stage, concurrency: int, model) -> int:
    """`stage.concurrency` (default: the command's `concurrency`), at most the endpoint's slots (model: its node);
    the measured cap (Capacity) may lower it further."""
    want = max(1, int(stage.get("concurrency") or concurrency))
    cap = slots(model)
    return min(want, cap) if cap else want


@dataclass(frozen=True)
class Capacity:
    """Trials in flight from measured figures (see the module's docstring)."""

    want: int  # stage.concurrency, at most the endpoint's slots
    slots: int | None  # the endpoint's declared slots (None: unlimited as declared)
    encoder: tuple[float, float] | None  # (a, b): a batch of n texts costs a + b n seconds, measured; None: no kernel
    extraction_s: float | None  # a trial's writer calls, one after another, at the endpoint's measured speed
    timeout_s: float | None  # the shortest barrier timeout of the kernel methods run (None: none runs)
    probe: dict | None = None  # an endpoint without declared slots, measured at start (harness/personal/probe.py)

    def measured_slots(self, slots: int | None, figures: dict) -> "Capacity":
        """This capacity once the endpoint's calls at once were measured (None: not what bounds the stage)."""
        from dataclasses import replace

        if slots is None:
            return replace(self, probe={**figures, "slots": None})
        return replace(self, want=min(self.want, slots), slots=slots, probe={**figures, "slots": slots})

    def commit_s(self, n: int) -> float:
        """The commit path's time with n trials in flight: their items through the one encoder worker."""
        if not self.encoder:
            return 0.0
        a, b = self.encoder
        return 2.0 * (a + b * n * ITEMS_PER_TRIAL)

    def wait_s(self, n: int) -> float:
        """A read's expected wait for its writes with n trials in flight."""
        return (self.extraction_s or 0.0) + self.commit_s(n)

    @property
    def encoder_cap(self) -> int | None:
        """The most trials whose commits the encoder takes within HEADROOM of the barrier (None: no cap needed)."""
        if not self.encoder or not self.timeout_s:
            return None
        a, b = self.encoder
        budget = (HEADROOM * self.timeout_s - (self.extraction_s or 0.0)) / 2.0 - a
        return max(1, math.floor(budget / (b * ITEMS_PER_TRIAL))) if budget > 0 else 1

    @property
    def in_flight(self) -> int:
        cap = self.encoder_cap
        return min(self.want, cap) if cap else self.want

    def describe(self) -> dict:
        n = self.in_flight
        a, b = self.encoder or (None, None)
        return {"want": self.want, "slots": self.slots,
                "encoder_batch_s": a, "encoder_per_text_s": b, "encoder_cap": self.encoder_cap,  # as measured
                "extraction_s": None if self.extraction_s is None else round(self.extraction_s, 3),
                "commit_s": round(self.commit_s(n), 3), "wait_s": round(self.wait_s(n), 3),
                "barrier_timeout_s": self.timeout_s, "in_flight": n, "items_per_trial": ITEMS_PER_TRIAL,
                "headroom": HEADROOM, "endpoint_probe": self.probe}

    def line(self) -> str:
        n, why = self.in_flight, []
        if self.slots and self.want == self.slots:
            why.append(f"the endpoint's {self.slots} slot(s)" + (" (measured)" if self.probe else ""))
        if self.encoder_cap is not None and self.encoder_cap < self.want:
            a, b = self.encoder
            fits = self.wait_s(n) <= HEADROOM * self.timeout_s
            why.append(f"the encoder's measured cost ({a:.2f} s a batch + {1000 * b:.1f} ms a text: commits of {n} "
                       f"trial(s) in about {self.commit_s(n):.2f} s, "
                       + (f"within {HEADROOM:g} x the {self.timeout_s:g} s barrier)" if fits else
                          f"past {HEADROOM:g} x the {self.timeout_s:g} s barrier even so: this machine is too slow "
                          "or too loaded for the paper's barrier)"))
        return f"{n} trials in flight" + (f", capped at {' and '.join(why)}" if why else "")


def capacity(stage, concurrency: int, model, encoder: tuple[float, float] | None, extraction_s: float | None,
             timeout_s: float | None) -> Capacity:
    return Capacity(trials_in_flight(stage, concurrency, model), slots(model),
                    encoder if timeout_s else None, extraction_s, timeout_s)


def schedule_rows(stage, concurrency: int, model, cap: Capacity) -> list:
    """How the trials were scheduled and what an item is, beside the paper (declared, never silent)."""
    from harness.run.fidelity import Row

    want = max(1, int(stage.get("concurrency") or concurrency))
    in_flight = cap.in_flight
    capped = f", capped from {want} ({cap.line().partition(', capped at ')[2]})" if in_flight < want else ""
    return [
        Row("pipeline", "trial pipeline", "ProfileAgent, then TaskAgent, then AssistantAgent (A.10); writes "
            "asynchronous to the assistant's read, behind the barrier; each condition run for its trials",
            "per trial the writers in the paper's order (profile, task, conversation) on the method's own pool, "
            "asynchronous to the assistant, whose read waits behind the barrier; every model call holds one of the "
            f"endpoint's slots; runs in flight are one method's (blocks of {in_flight}, blocks in a seeded order)",
            "same", ""),
        Row("trials_in_flight", "trials in flight", "not stated (one pipeline run per trial)",
            f"{in_flight}{capped}", "same" if in_flight == 1 else "differs", "",
            ("" if in_flight == 1 else "trials of other users run at once, each method with its own writers' pool; "
             "stage.concurrency=1 runs one trial at a time; ") + "measured: " + json.dumps(cap.describe(),
                                                                                         sort_keys=True)),
        *method_rows(stage),
        Row("item_granularity", "memory items", "about 4 retrieved per trial (1,798 over 450 trials, A.2)",
            "one item per extracted field value, as many as the writers list (8 fields and a note; 14 on the generated "
            "trials)", "differs",
            "", "harness/personal/writers.py Writer.items"),
    ]


MEM0_DEFAULTS = {"threshold": 0.1, "hnsw": True}  # mem0ai's own: Memory.search(threshold=0.1), pgvector hnsw=True


def method_rows(stage) -> list:
    """The kernel's retrieval path and each Mem0 method's settings (threshold, index, k, whose id it searches,
    its calls per add), as run, beside the paper: declared in stage.json and the report, never silent."""
    from harness.run.fidelity import Row

    from .mem0_calls import mem0_add

    rows, methods = [], [str(m) for m in stage.get("methods") or []]
    conds = stage.get("conditions") or {}
    if any(method_class(conds[m]).writes == "kernel" for m in methods if m in conds):
        rows.append(Row("kernel_retrieval", "kernel retrieval path", "two-stage (A.8/A.9): the agent's own memories, "
                        "infer user_id, then the other agents' shared memories; a global registry of users as the "
                        "fallback", "two-stage (harness/kernel/injection.py Kernel.search): the agent's own "
                        "memories of the user, then the other agents' shared ones; identity: request id, latest "
                        "session, the user of the agent's own memories, the registry, the agent's id", "same", ""))
    for m in methods:
        c = conds.get(m)
        if c is None or method_class(c).writes != "mem0":
            continue
        calls, _, source = mem0_add("")
        got = {"threshold": float(c.get("threshold", MEM0_DEFAULTS["threshold"])), "hnsw": bool(c.get("hnsw"))}
        differs = [f"{k} {got[k]} (Mem0's default {v})" for k, v in MEM0_DEFAULTS.items() if got[k] != v]
        rows.append(Row(f"{m}_settings", f"{m}: Mem0's settings", "Mem0 as shipped (its defaults: threshold 0.1, "
                        "an HNSW index), the assistant's search scoped per agent (A.2: fully private)",
                        f"threshold {got['threshold']:g}, HNSW index {'on' if got['hnsw'] else 'off (exact scan)'}, "
                        f"k {c.get('k')}, searched by {method_class(c).searched_by}, add(infer=True) once per "
                        f"writer: {calls} LLM call(s) per add, {source}",
                        "differs" if differs else "same", "",
                        ("; ".join(differs) + ": conf/condition/" + m + ".yaml and the stage") if differs else "",
                        refuse=False))  # the condition's own declared settings, never refused by a preset
    return rows
