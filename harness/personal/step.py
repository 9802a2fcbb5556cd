"""The personalization study's run step: one trial under one method, through the one driver.

What differs from the agent stages and nothing else: the plan (every trial x method once, in
a seeded shuffle so methods and users interleave), the preflight's request shapes (the
assistant's plain request, the writers' JSON mode, the rubric judge's request), the services
the methods declare (the index's, PostgreSQL for Mem0), the forecast, and `execute`: the
method's writers write (in the paper's order, asynchronously to the assistant, on the
method's own pool), the method injects, AssistantAgent answers.

The schedule cannot decide the result: no more trials are in flight than the endpoint serves
at once (model.max_concurrency) nor than the CPU encoder commits within the barrier at its measured
cost (`capacity`, harness/personal/schedule.py; the dry run's forecast uses the same object), the
kernel's commits and reads go through one batching encoder worker each (harness/kernel/encoding.py), every model call holds one of its slots (so no call queues
unseen inside the server and `answer_s` is the assistant's call alone, `queue_s` beside it),
each method has its own writers' pool, and what a method loads (Mem0's embedder) is loaded
once before the first run. The summary counts the barrier's timeouts per method with the
writes' commit delay and the read's wait; the manifest declares the schedule. Order, concurrency, attempts, the breaker, `budget_usd`,
`retry_failed`, shards, resumption and stopping on the environment's failures are the
driver's (harness.run.driver), as for every study.

A refused key, an unknown model, an unreachable server or a stopped PostgreSQL — met by the
assistant, a writer or a method's read — stops the stage (exit 3) and the run stays
unrecorded; a writer whose own call fails (retries exhausted, a reply that is not JSON) is
a failed write the record counts; the assistant's own failure fails the run.
"""

from __future__ import annotations

import random
import secrets
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

import conditions
from harness.run import settings
from harness.data import personal as trials_data
from harness.data.longmemeval import sha256_file
from harness.data.source import Unwritten
from harness.endpoints.client import Agent, Meter, ModelCallFailed, backoff_s, max_retries
from harness.failures import EnvironmentFailure, classify
from harness.kernel.identity import IdentityResolver
from harness.records.provenance import versions
from harness.records.schema import parse
from harness.run import fidelity
from harness.run.driver import RunStep, call_notes, stage_info, validated

from .schedule import Capacity, capacity, method_class, schedule_rows, slots, trials_in_flight  # noqa: F401
from harness.run.plan import PlanError
from harness.run.settings import StageSettings

from . import assistant, record
from .method import RunCtx, Shared, Slots, Slotted
from .writers import JSON_PARAMS


@dataclass(frozen=True)
class TrialRun:
    trial_id: str
    condition: str

    @property
    def run_id(self) -> str:
        return f"{self.trial_id}__{self.condition}"


@dataclass
class PersonalPlan:
    stage: str
    label: str
    seed: int
    data: dict
    runs: list[TrialRun]
    trials: dict[str, dict]

    def to_dict(self) -> dict:
        return {"runs": [r.run_id for r in self.runs]}

    def render(self) -> str:
        by = Counter(r.condition for r in self.runs)
        return "\n".join([f"stage {self.stage}  label {self.label}  seed {self.seed}",
                          f"trials {self.data['path']}  sha256 {self.data['sha256']}  ({self.data['n']} trials)"
                          + ("  generated in memory, written by the first run (dry run)"
                             if self.data.get("unwritten") else ""),
                          f"{'method':<24}{'runs':>6}",
                          *(f"{c:<24}{n:>6}" for c, n in sorted(by.items())),
                          f"total runs {len(self.runs)} (seeded interleaved order)"])


def trials_path(stage: StageSettings, cfg):
    """The stage's trials file, written on first use; a dry run's is generated in memory (source.Unwritten)."""
    p = stage.trials
    path = Path(str(p["path"])) if p.get("path") else trials_data.default_path(Path(str(cfg.cache_dir)) / "data",
                                                                             int(p["n"]), int(cfg.seed))
    return trials_data.ensure(path, int(p["n"]), int(cfg.seed), write_missing=not cfg.get("dry_run"))


def plan(stage: StageSettings, cfg) -> PersonalPlan:
    """Every (trial, method) once, in blocks of one method (as many runs as trials in flight), the blocks in a
    seeded shuffle: methods interleave across the stage (a drift of the endpoint hits them alike), yet the runs in
    flight together are one method's (the gate in `execute` keeps a block from overlapping the next)."""
    for c in stage.methods:
        if c not in (stage.conditions or {}):
            raise PlanError(f"stage {stage.name!r} runs method {c!r} but does not define it "
                            f"(add '/condition@stage.conditions.{c}: {c}' to its defaults)")
    path = trials_path(stage, cfg)
    trials = trials_data.load(path)["trials"]
    rng, size = random.Random(int(cfg.seed)), trials_in_flight(stage, cfg.concurrency, cfg.model)
    blocks = []
    for c in stage.methods:
        order = list(trials)
        rng.shuffle(order)
        blocks += [[(t, str(c)) for t in order[i:i + size]] for i in range(0, len(order), size)]
    rng.shuffle(blocks)
    pairs = [p for b in blocks for p in b]
    unwritten = isinstance(path, Unwritten)
    return PersonalPlan(str(stage.name), str(stage.label), int(cfg.seed),
                        {"path": str(path), "n": len(trials), **({"unwritten": True} if unwritten else {}),
                         "sha256": path.sha256 if unwritten else sha256_file(path)},
                        [TrialRun(t["trial_id"], c) for t, c in pairs], {t["trial_id"]: t for t in trials})


def index_services(index_cfg) -> set[str]:
    """The services the stage's index reads, as its backend declares them (`service`)."""
    from omegaconf import DictConfig

    from harness.memory.backends.base import backend_class

    cfg = OmegaConf.to_container(index_cfg, resolve=True) if isinstance(index_cfg, DictConfig) else dict(index_cfg)
    return {service for service, _ in backend_class(str(cfg["name"])).service_configs(cfg)}


def _versions() -> dict:
    from importlib import metadata

    v = versions()
    try:
        v["mem0ai"] = metadata.version("mem0ai")
    except metadata.PackageNotFoundError:
        v["mem0ai"] = None
    return v


class _Watched:
    """A writer's client: an environment failure inside the writers' pool (where the method
    turns exceptions into failed writes) is kept, so the run stops the stage instead."""

    def __init__(self, agent, seen: list):
        self.agent, self.seen = agent, seen

    @property
    def queued_s(self) -> float:
        return self.agent.queued_s

    def complete(self, *args, **kwargs):
        try:
            return self.agent.complete(*args, **kwargs)
        except EnvironmentFailure as exc:
            self.seen.append(exc)
            raise


class PersonalStep(RunStep):
    kind = "personal"

    def __init__(self, cfg):
        super().__init__(cfg)
        self.plan = plan(self.stage, cfg)
        self.nodes = settings.condition_nodes(cfg)  # each method's own typed node (its module's Settings)
        self.shared: Shared | None = None
        self.provenance: dict = {}
        self._capacity: Capacity | None = None
        self._encoder = None
        self._closing: list = []  # what this step opened itself (the reads' encoder)
        self.unmeasured = ""  # why a dry run's capacity has no encoder figure (its weights are not here)

    # --- before the runs ------------------------------------------------------------------
    def methods(self) -> dict:
        used = {r.condition for r in self.plan.runs}
        return {name: c for name, c in self.nodes.items() if name in used}  # their typed nodes

    def fidelity_rows(self):
        return fidelity.personal_manifest(self.cfg) + schedule_rows(self.stage, self.cfg.concurrency, self.model_cfg,
                                                                    self.capacity())

    def encoder(self):
        """The stage's encoder, loaded once (locally: a dry run loads it too, to measure it; nothing is sent)."""
        from harness.memory.encoder import load_encoder

        if self._encoder is None:
            cfg = self.cfg
            self._encoder = load_encoder(str(cfg.encoder.name), cache_dir=str(Path(str(cfg.cache_dir)) / "embeddings"))
        return self._encoder

    def _measure_apart(self, measure):
        """A dry run's measurement: the encoder loaded with its vector cache in a temporary folder, removed after
        (a dry run writes nothing; the measurement reads and writes no cache anyway). Weights not here are not
        fetched (a dry run reaches no network): the measurement is left out and the checks say why."""
        import tempfile

        from harness.memory.encoder import Encoder, HashEncoder, SPECS, weights_status

        name = str(self.cfg.encoder.name)
        status = weights_status(name)
        if not status["present"]:
            self.unmeasured = f"the encoder's throughput is not measured in this dry run: {status['detail']}"
            return None
        with tempfile.TemporaryDirectory(prefix="memspace-measure-") as d:
            enc = HashEncoder() if name == "hash" else Encoder(SPECS[name], cache_dir=d)
            try:
                return measure(enc)
            finally:
                enc.close()

    def _query_encoder(self, encoder):
        """A second instance of the stage's encoder for the reads' queries (its own model and lock, the same
        weights and cache), so a read never waits for a batch of commits; the hash encoder holds no lock."""
        from harness.memory.encoder import Encoder

        if not isinstance(encoder, Encoder):
            return encoder
        q = Encoder(encoder.spec, cache_dir=encoder.cache.path.parent, batch_size=encoder.batch_size,
                    device=encoder.device)
        q.embed_query("warm-up")
        self._closing.append(q)
        return q

    def capacity(self) -> Capacity:
        """Trials in flight from measured figures (harness/personal/schedule.py): the endpoint's slots, the writers'
        calls at its declared speed and the encoder's throughput measured here once (only when a kernel method with
        its barrier runs). The run and the dry run's forecast use this same object."""
        if self._capacity is None:
            from harness.kernel.encoding import measure

            from .forecast import kernel_inputs

            timeout, extraction = kernel_inputs(self.cfg, self.plan)
            rate = (self._measure_apart(measure) if self.cfg.get("dry_run") else measure(self.encoder())) \
                if timeout else None
            self._capacity = capacity(self.stage, self.cfg.concurrency, self.model_cfg, rate, extraction, timeout)
        return self._capacity

    def stage_info(self) -> dict:
        return stage_info(self.stage, OmegaConf.to_container(self.cfg.model, resolve=True), self.plan,
                          fidelity.record(self.cfg, rows=self.fidelity_rows()),
                          prereg=None, versions=_versions())  # the hypotheses file is the first paper's

    def render_plan(self) -> str:
        return self.plan.render()

    def services(self) -> set[str]:
        """The index's servers and those each method declares (`Method.services`: Mem0's PostgreSQL)."""
        needed = index_services(self.cfg.index)
        for c in self.methods().values():
            needed |= set(method_class(c).services)
        return needed

    def static_checks(self, judge_too: bool):
        from harness.run import preflight as pf

        d = self.plan.data
        checks = [pf.Check("data", True, f"{d['n']} trials validated, sha256 {d['sha256'][:12]}"),
                  pf._key_check(self.cfg.model, "model"), pf._key_check(self.cfg.judge, "judge")]
        for who, mc in (("model", self.cfg.model), ("judge", self.cfg.judge)):
            c = pf._prices_check(mc, who, self.cfg.get("budget_usd"))
            if c is not None:
                checks.append(c)
        needed = self.services()
        if needed and self.cfg.dry_run:  # nothing is started or reached for a plan
            checks.append(pf.Check("services", None, f"{', '.join(sorted(needed))}: started if they are the "
                                                     "project's own (make services-up) and reached when the stage runs"))
        elif needed:
            _start_services(needed)  # the project's own servers, as `make services-up` starts them
            own = index_services(self.cfg.index)
            if own:
                checks.append(pf._services_check(self.cfg.index))  # the index's servers, as its config names them
            if "postgres" in needed - own:
                checks.append(_reach_postgres())  # Mem0's vector store: the project's PostgreSQL
        from judge.rubric import paper_judge_refusal

        judge_refused = paper_judge_refusal(self.cfg)
        if judge_refused:
            checks.append(pf.Check("judge", False, judge_refused))
        rows = self.fidelity_rows()
        if self.unmeasured:
            checks.append(pf.Check("encoder", None, self.unmeasured))
        refused = fidelity.decide(self.cfg, rows) if fidelity.preset(self.cfg) else []
        checks += [pf.Check("fidelity", False, f"{r.key}: {r.line()}; allow_deviation=[{r.key}] accepts it")
                   for r in refused] or [pf.Check("fidelity", True, "differs from the second paper in "
                                                   + (", ".join(r.key for r in rows if r.status == "differs") or
                                                      "nothing") + " (stage.json, report)")]
        return checks

    def request_shapes(self, judge_too: bool):
        """The assistant's plain request, the writers' JSON mode (when a method has writers; Mem0's
        own extraction asks for JSON the same way) and the rubric judge's request."""
        from harness.run.preflight import Shape
        from judge.rubric import rubric_config

        mc = self.model_cfg
        params = dict(mc.params or {})
        methods = self.methods()
        shapes = [Shape("model", "assistant, plain request", mc, params, conditions=sorted(methods),
                        system=assistant.SYSTEM)]
        writing = sorted(n for n, c in methods.items() if getattr(c, "writers", None))
        if writing:
            shapes.append(Shape("model", "writers, JSON mode (response_format json_object)", mc,
                                {**params, **JSON_PARAMS}, conditions=writing))
        jc = rubric_config(self.cfg.judge)
        shapes.append(Shape("judge", "rubric judge (make judge)", jc, dict(jc.get("params") or {})))
        return shapes

    def forecast(self) -> str:
        from harness.personal.forecast import render

        return render(self.cfg, self.plan, self.capacity())

    def concurrency(self) -> int:
        """Trials in flight: `stage.concurrency`, never more than the endpoint serves at once
        (model.max_concurrency: one per slot for Ollama or llama.cpp), nor than the encoder commits within
        the barrier at its measured rate (`capacity`), so a trial never waits behind another trial's calls
        and the barrier's timeouts are the method's and the endpoint's own."""
        return self.capacity().in_flight

    # --- the runs -------------------------------------------------------------------------
    def start(self, rd, info, endpoint, proxy_url: str) -> None:
        from harness.kernel.encoding import BatchEncoder

        super().start(rd, info, endpoint, proxy_url)
        cfg = self.cfg
        encoder = self.encoder()
        encoder.embed_query("warm-up")  # loading the encoder is setup, never part of a run's latency
        self.capacity()  # measured before the worker starts, never during the runs
        if slots(self.model_cfg) is None and self._capacity.want > 1:  # no slots declared: measured
            from .probe import endpoint_slots

            try:
                self._capacity = self._capacity.measured_slots(*endpoint_slots(proxy_url, self.model_cfg))
            except Exception as exc:
                raise classify(exc) or exc
            print(f"  schedule {self._capacity.line()}; endpoint probed: {self._capacity.probe}", file=sys.stderr)
        # the encoder worker embeds every user's commits and queries in batches from per-user queues: no lock between users
        self.shared = Shared(cfg, proxy_url, self.model_cfg, IdentityResolver(),
                             BatchEncoder(encoder, query_encoder=self._query_encoder(encoder)),
                             secrets.token_hex(4), Slots(self._capacity.slots), workers=4 * self.concurrency())
        for name, c in self.methods().items():  # setup (Mem0's embedder and collection) is never a run's time
            try:
                method_class(c).setup(self.nodes[name], self.shared, name)
            except Exception as exc:
                raise classify(exc) or exc
        mc = self.model_cfg
        self.provenance = {
            "stage": info.stage, "label": info.label, "seed": info.seed, "kind": "personal",
            "config_hash": info.config_hash, "data_path": info.data["path"], "data_sha256": info.data["sha256"],
            "versions": info.versions, "code": info.code.model_dump(),
            "model": {k: mc.get(k) for k in ("name", "provider", "model", "params", "accepts")},
            "prices": mc.prices, "offpeak": mc.offpeak,
            "encoder": OmegaConf.to_container(cfg.encoder, resolve=True),
            "index": OmegaConf.to_container(cfg.index, resolve=True), "endpoint": endpoint.info,
            "schedule": self._capacity.describe()}

    def close(self) -> None:
        try:
            if self.shared is not None:
                self.shared.close()
        finally:
            for c in self._closing:
                c.close()

    def execute(self, spec: TrialRun, attempt: int):
        """One run, while no run of another method is in flight (Shared.gate: the methods never slow each other)."""
        return self.shared.gate.run(spec.condition, lambda: self._execute(spec, attempt))

    def _execute(self, spec: TrialRun, attempt: int):
        trial = self.plan.trials[spec.trial_id]
        condition, run_id, mc = spec.condition, spec.run_id, self.model_cfg
        cond_cfg = self.stage.conditions[condition]  # as the stage node holds it (resolved)
        meter = Meter(mc.prices, mc.offpeak, abort=self.abort)
        seen: list[EnvironmentFailure] = []

        def agent(role: str, json: bool = False):
            params = {**(mc.params or {}), **(JSON_PARAMS if json else {})}
            a = Agent(self.proxy_url, mc, run_id, attempt, meter, role=role, params=params,
                      max_retries=max_retries(mc), backoff_s=backoff_s(mc))
            return _Watched(Slotted(a, self.shared.slots), seen)

        ctx = RunCtx(trial, condition, self.shared, agent, meter, run_id, attempt)
        status, error, reason, signature = "ok", None, None, None
        injected, answer, answer_s, queue_s, msgs, finish = None, "", 0.0, 0.0, None, {}
        self.shared.resolver.register_session(trial["session_id"], trial["user_id"])
        try:  # building a method (loading Mem0, its collection): a failure here is not the run's
            method = conditions.load(str(cond_cfg["module"])).build(self.nodes[condition], ctx)
        except Exception as exc:
            raise classify(exc) or exc
        t0 = time.perf_counter()
        try:
            try:
                method.write()
                injected = method.inject()
                answer, answer_s, queue_s, msgs = assistant.answer(agent("assistant"), injected.block, trial["query"])
            except EnvironmentFailure:
                raise
            except ModelCallFailed as exc:
                status, error, reason, signature = "failed", f"model: {exc}", exc.reason, exc.signature
            except Exception as exc:  # the method broke: recorded with its traceback, never skipped
                env = classify(exc)
                if env is not None:
                    raise env from exc
                status, error, reason = "failed", "".join(traceback.format_exception(exc))[-4000:], "method"
            wall = time.perf_counter() - t0
            try:
                finish = method.finish()  # waits for the writers
            except Exception as exc:  # a stopped PostgreSQL while counting what the read missed
                raise classify(exc) or exc
        finally:
            method.close()
        if seen:  # a writer met a refused key, an unknown model, an unreachable server
            raise seen[0]
        transcript = self._transcript(msgs, answer) if msgs else None
        rec = record.build(provenance=self.provenance, trial=trial, condition=condition,
                           cond_cfg=dict(cond_cfg), attempt=attempt, status=status,
                           error=error, failure_reason=reason, injected=injected, answer=answer, answer_s=answer_s, queue_s=queue_s,
                           wall_s=wall, finish=finish, calls=list(meter.calls), transcript=transcript)
        return validated(self.rd, lambda d: parse("personal_record", d, self.rd.records_dir), rec,
                         {"transcript": None, "answer": ""}), signature

    def _transcript(self, msgs: list[dict], answer: str) -> dict:
        """The assistant's call as sent and answered; its system prompt stored once in prompts/."""
        sha = self.rd.write_prompt(msgs[0]["content"])
        later = [{"role": m["role"], "content": m["content"]} for m in msgs[1:]]
        return {"role": assistant.NAME, "system_sha256": sha, "tools": [],
                "messages": later + [{"role": "assistant", "content": answer}]}

    # --- after ----------------------------------------------------------------------------
    def summary(self, rd, labels=None, judge_name=None) -> str:
        """Per method: runs, failures, injected items, short reads (the store returned fewer of the user's visible
        items than it should), missed writes, the barrier's timeouts, foreign items, exposure, words and times."""
        table = summary_table([x.model_dump(mode="json") for x in rd.records()])
        return "\n".join([table, *call_notes(rd.records())])


def _commit_s(r: dict) -> float | None:
    """The slowest of a run's writes, acceptance to commit (None: no write says)."""
    ds = [w.get("commit_after_accept_s") for w in r.get("writes") or [] if w.get("commit_after_accept_s") is not None]
    return max(ds) if ds else None


def summary_table(records: list[dict]) -> str:
    """The stage's summary table; a barrier timeout is the method's and the endpoint's (trials never exceed the
    endpoint's slots, every method has its own writers' pool), so it is counted per method, with the writes'
    commit delay and the read's wait beside it."""
    rows: dict[str, list[dict]] = {}
    for r in records:
        rows.setdefault(r["condition"], []).append(r)

    def mean(xs) -> str:
        xs = [x for x in xs if x is not None]
        return f"{sum(xs) / len(xs):.2f}" if xs else "-"

    lines = [f"{'method':<22}{'runs':>5}{'failed':>7}{'injected':>9}{'short':>6}{'missed':>7}{'timeouts':>9}"
             f"{'foreign':>8}{'exposed':>8}{'words':>7}{'answer s':>9}{'queue s':>8}{'commit s':>9}{'wait s':>7}"]
    for cond, rs in sorted(rows.items()):
        n = len(rs)
        lines.append(f"{cond:<22}{n:>5}{sum(r['status'] != 'ok' for r in rs):>7}"
                     f"{sum(r['n_injected'] for r in rs) / n:>9.1f}{sum(bool(r.get('short_read')) for r in rs):>6}"
                     f"{sum(r['missed_writes'] or 0 for r in rs):>7}"
                     f"{sum(bool((r['barrier'] or {}).get('timed_out')) for r in rs):>9}"
                     f"{sum(r['foreign_items'] for r in rs):>8}{sum(r['exposure_private'] for r in rs):>8}"
                     f"{sum(r['answer_words'] for r in rs) / n:>7.0f}{sum(r['answer_s'] for r in rs) / n:>9.2f}"
                     f"{mean(r.get('queue_s') for r in rs):>8}{mean(_commit_s(r) for r in rs):>9}"
                     f"{mean(r.get('barrier_wait_s') for r in rs):>7}")
    lines.append("answer s: the assistant's answer call (the paper's latency); queue s: its wait for an endpoint slot; "
                 "commit s: a run's slowest write, acceptance to commit; wait s: the read's wait for the writes")
    short = sum(bool(r.get("short_read")) for rs in rows.values() for r in rs)
    if short:
        lines.append(f"WARNING: {short} short reads: the store returned fewer of a user's visible memories than "
                     "min(cap, visible) (method_log.read in the records; bench/kernel_scale.py)")
    return "\n".join(lines)


def _start_services(needed: set[str]) -> None:
    """Start (and leave running, like `make services-up`) the project's own servers this stage reads."""
    from harness import services

    s = services.settings()
    if "postgres" in needed:
        services.pg_up(s)
    if "redis" in needed:
        services.redis_up(s)


def _reach_postgres():
    from harness import services
    from harness.run.preflight import REACH, Check

    try:
        return Check("services", True, "Mem0: " + REACH["postgres"]({}, services.settings()))
    except Exception as exc:  # noqa: BLE001 - reported as the failed check
        env = classify(exc) or EnvironmentFailure(f"PostgreSQL: {exc}", "start the services (make services-up)")
        return Check("services", False, f"Mem0: {env}")
