"""The record of one trial x method: a flat, documented dict built here and nowhere else.

Provenance: stage, label, seed, config_hash, data_path/data_sha256 (the trials file),
versions, code, model, prices/offpeak, encoder, index.
The trial: run_id (trial_id__condition), trial_id, user_id, condition, module, attempt,
status ("ok" | "failed": a failed run is recorded, never skipped), error, query, answer,
answer_words.
status ("ok" | "failed"), failure_reason (retries | context_length | rejected | method) and error.
Time (seconds): answer_s is THE LATENCY the paper compares (Section 4.5: the assistant's
answer call alone, retries included, from the moment it holds one of the endpoint's slots);
queue_s the time it waited for that slot (behind other calls of the stage), never inside
answer_s; beside them, retrieval_s (the method's read
without the barrier's wait), barrier_wait_s (how long the read waited for the user's
writes; 0 for methods without a barrier) and wall_s (the trial's whole span, write
acceptance to answer: for the memory methods it holds the writers' extraction the barrier
waits for, so it is not comparable across methods).
transcript: the assistant's call as sent (its system prompt in prompts/<sha256>.txt, the
injected block as a second system message) and its answer.
What was injected: block, block_chars, injected (items), n_injected, candidates (what
the store returned before the kernel's checks), n_candidates, short_read (kernel methods: how many
of min(cap, the reader's visible committed items) the index did not return -- 0 is a full read,
> 0 an index that lost memories, e.g. an HNSW post-filter over many users; None for methods
without that check; the details and the index's plan are in method_log.read).
Privacy and identity: resolved_user, identity_rule, foreign_items (injected items of
another user: must be 0), exposure_private (retrieval-eligible items the reader may not see
by the visibility rule -- another agent's, policy not "shared": must be 0), conversation_retrieved /
conversation_injected (private-by-default conversation items of another agent). The exposure
audit, read by the method's `finish` once the trial's writes have landed: audited_items (the user's items
nearest the query read under the unrestricted scope, no view), written_items (what the trial's writes
stored, beside it), unaudited_writes (writes not landed when the audit read, or, for a method that reads without
waiting for them all (mem0_user), not landed when the read ran: their items are left out of the audit, never
counted kept out),
prevented_items (those the rule keeps from the reader that the read did not return: what
the view prevented), prevented_conversation (of them, conversation items); None: no store read.
Write ordering: barrier (snapshot, waited_s, timed_out), missed_writes,
writes_before_read, failed_writes, unfinished_writes, write_errors, writes.
Cost: calls (every model call of the run: writers, Mem0, assistant), calls_by_role,
tokens {prompt, hit, miss, output}, assistant_tokens, cost_list, cost_paid.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timezone

from harness.kernel.visibility import visible
from harness.records.schema import SCHEMA_VERSION

READER = "assistant_agent"  # harness.personal.assistant.NAME: whose visibility the record checks


def build(*, provenance: dict, trial: dict, condition: str, cond_cfg: dict, attempt: int, status: str,
          error: str | None, injected, answer: str, answer_s: float, wall_s: float, queue_s: float = 0.0,
          finish: dict, calls: list[dict], failure_reason: str | None = None, transcript: dict | None = None) -> dict:
    inj_items = injected.items if injected else []
    cands = injected.candidates if injected else []
    log = injected.log if injected else {}
    read_s = injected.retrieval_s if injected else 0.0  # the method's read, any barrier wait inside it
    waited = float((log.get("barrier") or {}).get("waited_s") or 0.0)
    user = trial["user_id"]

    def others_private(items):  # what the reader may not see, by the kernel's one rule (fails closed)
        return [i for i in items if i.get("owner") is not None and not visible(i["owner"], i.get("sharing"), READER)]

    def key(i):
        return (i.get("owner"), json.dumps(i.get("content"), sort_keys=True, default=str))

    # the exposure audit is the method's `finish` read, after the trial's writes landed (never the read's own time,
    # when a method without a barrier has not stored them yet); writes not landed are counted, not kept out
    audit = finish.get("audit")
    returned = {key(i) for i in cands}
    prevented = None if audit is None else [i for i in others_private(audit) if key(i) not in returned]

    reads = finish.get("reads") or {}
    tokens = {k: sum(c[k] for c in calls) for k in ("prompt", "hit", "miss", "output")}
    own = [c for c in calls if c["role"] == "assistant"]
    return {
        **provenance, "schema_version": SCHEMA_VERSION,
        "run_id": f"{trial['trial_id']}__{condition}", "trial_id": trial["trial_id"], "user_id": user,
        "condition": condition, "module": cond_cfg.get("module"), "condition_config": cond_cfg,
        "attempt": attempt, "status": status, "error": error, "failure_reason": failure_reason,
        "query": trial["query"], "answer": answer, "answer_words": len(answer.split()),
        "answer_s": round(answer_s, 4), "queue_s": round(queue_s, 4), "retrieval_s": round(max(0.0, read_s - waited), 6),
        "barrier_wait_s": round(waited, 6), "wall_s": round(wall_s, 4), "transcript": transcript,
        "block": injected.block if injected else "", "block_chars": len(injected.block) if injected else 0,
        "injected": inj_items, "n_injected": len(inj_items), "candidates": cands, "n_candidates": len(cands),
        "short_read": (log.get("read") or {}).get("short"),
        "resolved_user": log.get("resolved_user", user), "identity_rule": log.get("identity_rule", "request"),
        "foreign_items": sum(1 for i in inj_items if i.get("user_id") not in (None, user)),
        "exposure_private": len(others_private(cands)),
        "conversation_retrieved": sum(1 for i in others_private(cands) if i.get("memory_type") == "conversation"),
        "conversation_injected": sum(1 for i in others_private(inj_items) if i.get("memory_type") == "conversation"),
        "audited_items": None if audit is None else len(audit),
        "prevented_items": None if prevented is None else len(prevented),
        "prevented_conversation": None if prevented is None else
        sum(1 for i in prevented if i.get("memory_type") == "conversation"),
        "written_items": sum(int(w.get("items") or 0) for w in finish.get("writes") or []) if audit is not None
        else None,
        "unaudited_writes": finish.get("unaudited_writes") if audit is not None else None,
        "barrier": log.get("barrier"), "method_log": log,
        "missed_writes": reads.get("missed"), "writes_before_read": reads.get("writes_before_read"),
        "failed_writes": reads.get("failed"), "unfinished_writes": reads.get("unfinished"),
        "write_errors": finish.get("write_errors", []), "writes": finish.get("writes", []),
        "calls": calls, "calls_by_role": dict(Counter(c["role"] for c in calls)), "tokens": tokens,
        "assistant_tokens": {"prompt": sum(c["prompt"] for c in own), "output": sum(c["output"] for c in own),
                             "latency_s": round(sum(c["latency_s"] for c in own), 4)},
        "cost_list": sum(c["cost_list"] for c in calls), "cost_paid": sum(c["cost_paid"] for c in calls),
        "finished": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
    }
