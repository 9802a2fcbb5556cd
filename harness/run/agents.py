"""The agent stages' run step (the first paper): one LongMemEval(-Org) question under one condition.

What the driver (harness.run.driver) runs for a stage of kind `agents`: the plan
(harness.run.plan), the checks and request shapes of the preflight, the cost forecast, the
memory preparation beside the runs, and `execute`, which builds the condition's access, runs
the agent loop and returns the run's record. Everything else (order, concurrency, attempts,
the breaker, the budget, shards, stopping on the environment's failures) is the driver's.
"""

from __future__ import annotations

import time
import traceback

from omegaconf import OmegaConf

import conditions
from harness.data.longmemeval import DATE_FORMAT
from harness.endpoints.client import Agent, Meter, ModelCallFailed, backoff_s, max_retries
from harness.failures import EnvironmentFailure, classify
from harness.records.schema import SCHEMA_VERSION, RunRecord
from harness.run import fidelity, settings
from harness.run.context import Environment, RunContext
from harness.run.driver import RunStep, call_notes, now, stage_info, validated
from harness.run.expected import expected_lines, figures, run_tokens
from harness.run.loop import TranscriptRecorder, run_loop
from harness.run.plan import Plan, RunSpec, build
from harness.run.prepare import MemoryPreparer
from harness.run.prompts import system_prompt


def decomposition(calls: list[dict]) -> dict:
    """Proposition 3: input tokens = c * prefix + what results and outputs add round by round."""
    own = [c for c in calls if c["role"] == "agent"]
    if not own:
        return {"calls": 0, "prefix": 0, "results": 0, "output": 0, "input": 0}
    added = sum(max(0, b["prompt"] - a["prompt"] - a["output"]) for a, b in zip(own, own[1:]))
    return {"calls": len(own), "prefix": own[0]["prompt"], "results": added,
            "output": sum(c["output"] for c in own), "input": sum(c["prompt"] for c in own)}


def evidence(q, access_sessions: list[str], tools: list[dict], search_tools: set[str] | None = None) -> dict:
    """Whether the run reached its evidence sessions, at all and with its first search. The searches
    are the tools the condition declares (SEARCH_TOOLS); a condition declaring none: every tool call
    that is not a read."""
    if search_tools:
        searches = [t for t in tools if t["name"] in search_tools]
    else:
        searches = [t for t in tools if (t.get("log") or {}).get("kind") != "read"]
    ev = q.evidence
    hit_any = bool(ev & set(access_sessions)) or any(ev & set(t["sessions"]) for t in tools)
    first = None
    if access_sessions:
        first = bool(ev & set(access_sessions))
    elif searches:
        first = bool(ev & set(searches[0]["sessions"]))
    return {"any": hit_any if (access_sessions or tools) else None, "first_search": first,
            "evidence_sessions": sorted(ev)}


def needs_memory(nodes):
    """spec -> does its condition read the memory space (declared by the module: NEEDS)? nodes: condition key ->
    its node (settings.condition_nodes)."""
    uses = {name: "memory_space" in getattr(conditions.load(str(c.module)), "NEEDS", ()) for name, c in nodes.items()}
    return lambda spec: uses[spec.condition]


class AgentStep(RunStep):
    kind = "agents"

    def __init__(self, cfg):
        super().__init__(cfg)
        self.plan: Plan = build(self.stage, cfg)
        self.conditions = settings.condition_nodes(cfg)  # each condition's own typed node (its module's Settings)
        self.env: Environment | None = None
        self.preparer: MemoryPreparer | None = None

    # --- before the runs: what the driver prints, checks and sends ------------------------
    def stage_info(self) -> dict:
        return stage_info(self.stage, OmegaConf.to_container(self.cfg.model, resolve=True), self.plan,
                          fidelity.record(self.cfg, self.plan))

    def render_plan(self) -> str:
        return self.plan.render()

    def fidelity_rows(self):
        return fidelity.manifest(self.cfg, self.plan)

    def static_checks(self, judge_too: bool):
        from harness.run import preflight as pf

        return pf.static_checks(self.cfg, self.plan, judge_too)

    def request_shapes(self, judge_too: bool):
        from harness.run import preflight as pf

        return pf.request_shapes(self.cfg, judge_too, {r.condition for r in self.plan.runs})

    def forecast(self) -> str:
        from harness.run.forecast import render

        text, self.forecast_rows = render(self.cfg, self.plan)
        return text

    def concurrency(self) -> int:
        return max(1, min(int(self.cfg.concurrency), int(self.model_cfg.max_concurrency or self.cfg.concurrency)))

    # --- the runs -------------------------------------------------------------------------
    def start(self, rd, info, endpoint, proxy_url: str) -> None:
        super().start(rd, info, endpoint, proxy_url)
        self.env = Environment(self.cfg, self.plan)

    def prepare(self, pending: list[RunSpec]) -> MemoryPreparer:
        self.preparer = MemoryPreparer(self.env, pending, needs_memory(self.conditions)).start()
        return self.preparer

    def close(self) -> None:
        if self.env is not None:
            self.env.close()

    def common(self) -> dict:
        cfg, info, mc = self.cfg, self.info, self.model_cfg
        return {"stage": self.plan.stage, "label": self.plan.label, "seed": self.plan.seed,
                "config_hash": info.config_hash, "data_sha256": self.plan.data["sha256"],
                "data_path": self.plan.data["path"], "versions": info.versions, "code": info.code.model_dump(),
                "model": {k: mc.get(k) for k in ("name", "provider", "model", "params", "first_tool_choice", "accepts")},
                "prices": mc.prices, "offpeak": mc.offpeak,
                "index": OmegaConf.to_container(cfg.index, resolve=True),
                "encoder": OmegaConf.to_container(cfg.encoder, resolve=True),
                "prereg_sha256": (info.prereg or {}).get("sha256")}

    def execute(self, spec: RunSpec, attempt: int) -> tuple[RunRecord, str | None]:
        """Run one planned run. Raises EnvironmentFailure (or a harness error while preparing
        the run) instead of returning a record the environment's fault would have spoilt."""
        q = self.env.questions[spec.qid]
        cond_cfg = self.stage.conditions[spec.condition]  # as the stage node holds it (resolved)
        mc = self.model_cfg
        meter = Meter(mc.prices, mc.offpeak, abort=self.abort)
        ctx = RunContext(spec, self.env)
        ctx.first_tool_choice = mc.first_tool_choice
        ctx.transcript = TranscriptRecorder()
        ctx.run_agent = lambda role: Agent(self.proxy_url, mc, spec.run_id, attempt, meter, role=role,
                                           max_retries=max_retries(mc), backoff_s=backoff_s(mc))
        status, error, answer, loop, reason, signature = "ok", None, "", None, None, None
        preparing = self.preparer is not None and self.preparer.stats["all_ready_s"] is None
        t0 = time.perf_counter()
        try:  # preparing the run (stores, indexes, prefetch): a failure here is not the run's
            access = conditions.load(str(cond_cfg["module"])).build(self.conditions[spec.condition], ctx)
        except Exception as exc:
            raise classify(exc) or exc
        setup_s = time.perf_counter() - t0 - access.retrieval_s
        system = system_prompt(q.date.strftime(DATE_FORMAT), access.text, org=ctx.is_org)
        t1 = time.perf_counter()
        try:
            loop = run_loop(ctx.run_agent("agent"), system, access.prefix + q.question, access.tools,
                            access.max_rounds, first_tool_choice=ctx.first_tool_choice, recorder=ctx.transcript)
            answer = loop.answer
        except EnvironmentFailure:
            raise
        except ModelCallFailed as exc:
            status, error, reason, signature = "failed", f"model: {exc}", exc.reason, exc.signature
        except Exception as exc:  # the run's own conversation broke the loop: recorded, never skipped
            env = classify(exc)
            if env is not None:
                raise env from exc
            status, error, reason = "failed", "".join(traceback.format_exception(exc))[-4000:], "loop"
        finally:
            loop_s = time.perf_counter() - t1
            for close in access.close:
                close()
        # time per question: the agent's loop plus any retrieval done for the prompt (prefetch);
        # building stores or indexing memory is setup, measured apart
        for text in ctx.transcript.prompts.values():  # before the record that names them
            self.rd.write_prompt(text)
        calls = meter.calls
        tok = {k: sum(c[k] for c in calls) for k in ("prompt", "hit", "miss", "output", "reasoning")}
        return validated(self.rd, RunRecord.model_validate, {
            "schema_version": SCHEMA_VERSION,
            "run_id": spec.run_id, "condition": spec.condition, "module": str(cond_cfg["module"]),
            "qid": spec.qid, "qtype": q.qtype, "variant": spec.variant, "repeat": spec.repeat, "org": spec.org,
            "attempt": attempt, "status": status, "error": error, "failure_reason": reason,
            "question": q.question, "question_date": q.date.strftime(DATE_FORMAT), "gold": q.answer,
            "abstention": q.abstention, "answer": answer,
            "model_calls": len(calls), "agent_calls": sum(c["role"] == "agent" for c in calls),
            "tool_calls": len(meter.tools), "tool_rounds": loop.tool_rounds if loop else None,
            "forced_answer": loop.forced if loop else None,
            "tokens": tok, "cost_list": sum(c["cost_list"] for c in calls),
            "cost_paid": sum(c["cost_paid"] for c in calls),
            "wall_s": round(loop_s + access.retrieval_s, 4), "setup_s": round(setup_s, 4),
            "memory_preparing": preparing,
            "retrieval_s": round(access.retrieval_s + sum(t["retrieval_s"] for t in meter.tools), 6),
            "empty_results": sum(bool(t["empty"]) for t in meter.tools),
            "error_results": sum(bool(t["error"]) for t in meter.tools),
            "evidence": evidence(q, access.sessions, meter.tools, conditions.search_tools(str(cond_cfg["module"]))),
            "decomposition": decomposition(calls),
            "calls": calls, "tools": meter.tools, "prefetch": access.log,
            "condition_notes": access.notes,
            "condition_config": dict(cond_cfg),
            "adapter": meter.adapter, "endpoint": self.endpoint.info,
            # which encoder (and whether it is the study's), dense backend and lexical indexes served
            "memory_space": self.env.space_description(),
            "finished": now(),
            "transcript": ctx.transcript.transcript(),
            **self.common(),
        }, {"transcript": None, "tools": [], "prefetch": [], "answer": ""}), signature

    def summary(self, rd, labels: dict[str, bool | None] | None, judge_name: str | None) -> str:
        """Per condition: runs, failures, the share of runs that called a tool, tokens, and judged accuracy."""
        rows: dict[tuple[str, str], list[RunRecord]] = {}
        for r in rd.records():
            rows.setdefault((r.condition, r.variant), []).append(r)
        lines = [f"{'condition':<24}{'variant':<9}{'runs':>5}{'failed':>7}{'tool use':>9}{'tokens/run':>11}"
                 f"{'accuracy':>10}"]
        for (cond, var), rs in sorted(rows.items()):
            n = len(rs)
            used = sum(r.tool_calls > 0 for r in rs)
            tokens = sum(run_tokens(r) for r in rs) / n
            est = "~" if any(c.usage_estimated for r in rs for c in r.calls) else " "
            judged = [labels.get(r.run_id) for r in rs] if labels else []
            acc = (f"{sum(bool(x) for x in judged) / n:>9.0%}" + ("*" if None in judged else " ")) if labels \
                else "       -  "
            lines.append(f"{cond:<24}{var or '-':<9}{n:>5}{sum(r.status != 'ok' for r in rs):>7}"
                         f"{used / n:>9.0%}{tokens:>10,.0f}{est}{acc}")
        if labels:
            lines.append(f"accuracy judged by {judge_name}; * = some runs not judged yet (counted wrong here)")
        records = [r for rs in rows.values() for r in rs]
        return "\n".join(lines + expected_lines(self.cfg, figures(records, labels)) + call_notes(rd.records()))
