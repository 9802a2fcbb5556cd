"""Preflight: everything a stage needs, checked before its first run.

A stage of 2,040 paid runs must not discover a missing key, a stopped Redis or a machine
without a sandbox on run 1 and record 2,040 failures. Each check returns a line; the first
failing check stops the stage before any run (EnvironmentFailure). `dry_run=true` runs the
checks that cost nothing and names the model call it will make.

What a condition needs is declared by the condition module itself (`NEEDS`), so a new
condition never has to be taught to the preflight.

The model check sends what the stage will send (`request_shapes`): one metered request of at
most one output token per distinct request shape — the agents' plain request, each distinct
tool set with the tool_choice the loop sends first and the forced answer's tool_choice
"none", and the judge's answer-check request when the stage judges after its runs (or at
`make judge`) — each with the stage's parameters fitted to `model.accepts`. So a server
without tool calling, or a parameter the endpoint rejects, stops the stage before its first
run (harness.endpoints.fit names the parameter and the fix). The dry run lists the requests.

Fidelity (harness.run.fidelity): with `preset=paper` every row of the manifest that differs
from the paper's reference (conf/paper.yaml: a condition's field, the groups, a short sample,
data that is not the published file, a model, judge, index, fusion or tool-text setting) is one
failed line, unless `allow_deviation=[key, ...]` names it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import conditions
from harness.run.settings import condition_node
from harness.endpoints.client import Agent, Meter, ModelCallFailed, backoff_s
from harness.endpoints.registry import PROVIDERS
from harness.endpoints.settings import EndpointSettings, endpoint_settings
from harness.failures import CapReached, EnvironmentFailure, classify
from harness.run.fidelity import decide as _DECIDE  # captured at import: a later patch of the module is refused, not obeyed

ROLE = "preflight"
PROMPT = "Reply with OK."


@dataclass
class Check:
    name: str
    ok: bool | None  # None: not run (dry run)
    detail: str

    def line(self) -> str:
        mark = {True: "ok", False: "FAILED", None: "--"}[self.ok]
        return f"  preflight {self.name:<9} {mark:<6} {self.detail}"


def _key_check(model_cfg, who: str) -> Check:
    provider = str(model_cfg.get("provider"))
    if provider not in PROVIDERS:
        return Check("key", False, f"{who}: unknown provider {provider!r} (known: {', '.join(sorted(PROVIDERS))})")
    env = model_cfg.get("api_key_env")
    if not env:
        return Check("key", True, f"{who}: {model_cfg.get('name')} needs no key")
    if not os.environ.get(str(env)):
        return Check("key", False, f"{who}: ${env} is not set (model={model_cfg.get('name')})")
    return Check("key", True, f"{who}: ${env} is set")


def _reach_redis(cfg, s) -> str:
    import redis

    url = cfg.get("url") or f"redis://127.0.0.1:{s.redis_port}"
    redis.Redis.from_url(str(url), socket_connect_timeout=3).ping()
    return f"Redis at {url} answers"


def _reach_postgres(cfg, s) -> str:
    import psycopg

    dsn = cfg.get("dsn") or s.pg_dsn
    with psycopg.connect(str(dsn), connect_timeout=3):
        pass
    return "PostgreSQL answers"


REACH = {"redis": _reach_redis, "postgres": _reach_postgres}  # service -> how to reach it


def _prices_check(model_cfg, who: str, budget) -> Check | None:
    """Null prices (a hosted endpoint whose prices are not set) count as 0: say so, and refuse a cap."""
    from harness.endpoints.pricing import unknown_prices

    missing = unknown_prices(model_cfg.get("prices"))
    if not missing:
        return None
    what = f"{who}: {model_cfg.get('name')} has no list price for {', '.join(missing)} (null)"
    if budget is not None:
        return Check("prices", False, f"{what}: budget_usd={budget} cannot be kept")
    return Check("prices", True, f"{what}: its cost counts as 0 in records and Table 6; set {who}.prices to count it")


def _services_check(index_cfg) -> Check:
    """Reach the servers the stage's index lives on: the services its backend declares (`service`;
    a composite backend such as hybrid: its parts')."""
    from omegaconf import DictConfig, OmegaConf

    from harness import services
    from harness.memory.backends.base import backend_class

    cfg = OmegaConf.to_container(index_cfg, resolve=True) if isinstance(index_cfg, DictConfig) else dict(index_cfg)
    name = str(cfg.get("name"))
    try:
        needed = backend_class(name).service_configs(cfg)
    except KeyError as exc:
        return Check("services", False, f"index {name}: {exc.args[0]}")
    if not needed:
        return Check("services", True, f"index {name}: in process, no server needed")
    s = services.settings()
    said = []
    for service, part in needed:
        part_name = str(part.get("name", name))
        try:
            if service not in REACH:
                return Check("services", False, f"index {part_name}: unknown service {service!r} "
                                                f"(known: {', '.join(sorted(REACH))})")
            said.append(f"index {part_name}: {REACH[service](part, s)}")
        except Exception as exc:  # noqa: BLE001 - reported as the failed check
            env = classify(exc) or EnvironmentFailure(f"index {part_name}: {exc}",
                                                      "start the services (make services-up)")
            return Check("services", False, str(env))
    return Check("services", True, "; ".join(said))


def _sandbox_check() -> Check:
    from harness.runtime.sandbox import SandboxUnavailable, check_sandbox

    try:
        check_sandbox()
    except SandboxUnavailable as exc:
        return Check("sandbox", False, f"shell sandbox unavailable: {exc}")
    return Check("sandbox", True, "shell sandbox builds and runs a probe command")


@dataclass
class Shape:
    """One distinct request shape of a stage: who sends it, with which parameters and tools."""

    who: str  # model | judge
    what: str  # e.g. "agents, tools memory_search+memory_read, tool_choice none"
    model_cfg: EndpointSettings  # a mapping given is typed (endpoint_settings)
    params: dict
    tools: list[dict] | None = None
    tool_choice: str | None = None
    conditions: list[str] = field(default_factory=list)
    system: str | None = None  # the system message the runs send (a server without the system role fails here)

    def __post_init__(self):
        self.model_cfg = endpoint_settings(self.model_cfg)

    def sent(self) -> dict:
        """What this request sends besides the prompt, after fitting to the endpoint's `accepts`."""
        from harness.endpoints.fit import fit

        out, dropped = fit({**self.params, "max_tokens": 1}, self.model_cfg.accepts)
        if self.tools:
            out["tools"] = [t["function"]["name"] for t in self.tools]
            if self.tool_choice:
                out["tool_choice"] = self.tool_choice
        return out | ({"not sent": dropped} if dropped else {})


PROBE_TOOL = {"type": "function", "function": {
    "name": "probe", "description": "A stand-in for this condition's tools (the preflight's request shape).",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}


def _condition_tools(name: str, c, org: bool) -> list[dict] | None:
    """The tool definitions a condition's agent is offered, as far as the module declares them
    (`tool_texts`); a condition with tools but no declared texts gets a probe tool."""
    mod = conditions.load(str(c.module))
    c = condition_node(c, f"stage.conditions.{name}")  # what the module's build() receives
    if hasattr(mod, "tool_texts"):
        schemas = [t for t in mod.tool_texts(c, org) if isinstance(t, dict) and t.get("type") == "function"]
        if schemas:
            return schemas
    fc = mod.forecast(c) if hasattr(mod, "forecast") else getattr(mod, "FORECAST", {})
    return [PROBE_TOOL] if (fc or {}).get("schema_chars") else None


def request_shapes(cfg, judge_too: bool, used: set[str] | None = None) -> list[Shape]:
    """Every distinct request the stage's runs (and its judge) will send, once each; `used`: the
    conditions the plan runs (default: every condition of the stage)."""
    from omegaconf import OmegaConf

    from harness.run.fidelity import _is_org
    from harness.run.prompts import system_prompt

    mc = OmegaConf.to_container(cfg.model, resolve=True)
    params = dict(mc.get("params") or {})
    org = _is_org(cfg)
    system = system_prompt(SAMPLE_DATE, "", org)
    shapes: dict[str, Shape] = {}

    def add(what: str, tools, choice, cond: str) -> None:
        key = json.dumps([tools, choice], sort_keys=True)
        if key not in shapes:
            shapes[key] = Shape("model", what, mc, params, tools, choice, system=system)
        shapes[key].conditions.append(cond)

    for name, c in sorted((cfg.stage.get("conditions") or {}).items()):
        if used is not None and name not in used:
            continue
        tools = _condition_tools(name, c, org)
        if not tools:
            add("agents, no tools", None, None, name)
            continue
        names = "+".join(t["function"]["name"] for t in tools)
        first = mc.get("first_tool_choice")
        add(f"agents, tools {names}" + (f", tool_choice {first}" if first else ""), tools, first, name)
        add(f"agents' forced answer, tools {names}, tool_choice none", tools, "none", name)
    out = list(shapes.values())
    if judge_too:
        out.append(judge_shape(cfg.judge, cfg.get("stage")))
    return out


def judge_shape(judge_cfg, stage_cfg=None) -> Shape:
    """The judge's request (judge.common.judge_model_config: its official parameters), named by the
    judgement kinds it will make (judge.kinds.chosen), so a dry run shows a chosen kind is used."""
    from judge import kinds
    from judge.common import judge_model_config

    jc = judge_model_config(judge_cfg)
    made = [k.name for k in kinds.chosen(judge_cfg, stage_cfg)]
    label = "answer check" if made == list(kinds.DEFAULT) else "kinds " + ", ".join(made)
    return Shape("judge", f"judge, {label}", jc, dict(jc.get("params") or {}))


def dry_run_lines(shapes: list[Shape]) -> list[str]:
    """What the model check would send, one line per request shape (nothing is sent)."""
    lines = [Check("model", None, f"at start: {len(shapes)} metered call(s) of one output token "
                                  f"(role preflight), one per request shape:").line()]
    for s in shapes:
        where = f" [{', '.join(s.conditions)}]" if s.conditions else ""
        lines.append(f"      {s.who}: {s.what}{where}: {json.dumps(s.sent(), sort_keys=True)}")
    return lines


def messages(params: dict, system: str | None = None) -> list[dict]:
    """The preflight's prompt, after the runs' system message when the shape has one; in JSON mode the
    system message mentions JSON (OpenAI's JSON mode refuses a prompt that does not)."""
    plain = [{"role": "user", "content": PROMPT}]
    text = "\n".join(t for t in (system, JSON_HINT if "response_format" in params else None) if t)
    return [{"role": "system", "content": text}, *plain] if text else plain


JSON_HINT = "Answer in JSON."
SAMPLE_DATE = "2023/05/30 (Tue) 23:40"  # the date line of the runs' system prompt, in the benchmark's format


def _retries(mc: EndpointSettings) -> int:
    """The preflight's retries: the endpoint's, default 2."""
    return int(mc.max_retries if mc.max_retries is not None else 2)


def send(proxy_url: str, shape: Shape) -> Check:
    """One metered call of at most one output token in this shape, under role `preflight`."""
    mc = shape.model_cfg
    meter = Meter(mc.prices, mc.offpeak)
    agent = Agent(proxy_url, mc, ROLE, 1, meter, role=ROLE, max_retries=min(2, _retries(mc)),
                  backoff_s=backoff_s(mc), params={**shape.params, "max_tokens": 1})
    try:
        agent.complete(messages(shape.params, shape.system), shape.tools, tool_choice=shape.tool_choice)
    except CapReached:
        raise  # the spending cap, not the endpoint: exit 4
    except EnvironmentFailure as exc:
        return Check("model", False, f"{shape.who} ({shape.what}): {exc}")
    except ModelCallFailed as exc:
        return Check("model", False, f"{shape.who} ({shape.what}): model={mc.name} does not answer: {exc}")
    return Check("model", True, f"{shape.who}: {mc.name} ({mc.model}) answered {shape.what}")


def model_call(proxy_url: str, model_cfg, who: str) -> Check:
    """One plain metered call of at most one output token, under role `preflight`."""
    mc = endpoint_settings(model_cfg)
    return send(proxy_url, Shape(who, "a plain request", mc, dict(mc.params or {})))


def judge_preflight(proxy_url: str, judge_cfg, budget=None, config: dict | None = None) -> None:
    """Before judging (`make judge`, or after a stage's runs): the judge's request shape once
    (`config`: a judge config with its call parameters already set, e.g. the rubric judge's). A
    request the endpoint refuses stops judging (EnvironmentFailure), a rejection the body does not
    explain or a "too large" included: every judgement sends this shape; retries exhausted are left to
    the judgements, which record and retry their own (and the judge's breaker, harness.endpoints.liveness)."""
    if budget is not None and budget.exhausted:
        return
    shape = judge_shape(judge_cfg) if config is None else Shape("judge", "judge", config, dict(config.get("params") or {}))
    mc = shape.model_cfg
    agent = Agent(proxy_url, mc, ROLE, 1, Meter(mc.prices, mc.offpeak), role=ROLE,
                  max_retries=min(2, _retries(mc)), backoff_s=backoff_s(mc), params={**shape.params, "max_tokens": 1})
    try:
        agent.complete(messages(shape.params))
    except CapReached:
        raise
    except EnvironmentFailure as exc:
        raise EnvironmentFailure(f"preflight judge failed: {exc.what}", exc.fix) from exc
    except ModelCallFailed as exc:
        if exc.reason != "retries":
            raise EnvironmentFailure(f"preflight judge failed: model={mc.get('name')} refuses the judge's request: "
                                     f"{exc}", _FIX["model"]) from exc


def stage_calls(proxy_url: str, cfg, shapes: list[Shape], ledger=None) -> list[Check]:
    """The model check: every request shape of the stage (`request_shapes`, or a study's own),
    through the stage's proxy; the judge's
    through the same proxy when it is the same endpoint, else through a proxy of its own on the
    stage's ledger (a local judge on another endpoint is checked when judging starts)."""
    from harness.endpoints.registry import identity

    checks = []
    for shape in shapes:
        if shape.who == "judge" and identity(cfg.judge) != identity(cfg.model):
            if str(cfg.judge.get("provider")) == "local" or ledger is None:
                continue
            checks.append(_via_own_proxy(cfg.judge, shape, ledger))
        else:
            checks.append(send(proxy_url, shape))
        if checks[-1].ok is False:
            break  # the first refusal says what to fix; the rest need not be paid for
    return checks


def _via_own_proxy(judge_cfg, shape: Shape, ledger) -> Check:
    from harness.endpoints.proxy import MeteringProxy
    from harness.endpoints.registry import open_endpoint

    try:
        with open_endpoint(judge_cfg) as ep, MeteringProxy(ep.base_url, ledger, ep.key,
                                                           float(judge_cfg.get("timeout_s", 600)),
                                                           str(judge_cfg.get("model"))) as proxy:
            return send(proxy.base_url, shape)
    except EnvironmentFailure as exc:
        return Check("model", False, f"judge: {exc}")


def fidelity_checks(cfg, plan) -> list[Check]:
    """One line per setting the paper preset refuses; one line in all when nothing is refused."""
    from harness.run import fidelity
    from harness.run.plan import PlanError

    rows = fidelity.manifest(cfg, plan)
    try:
        refused = _DECIDE(cfg, rows)
    except ValueError as exc:
        raise PlanError(str(exc)) from None
    differ = [r.key for r in rows if r.status == "differs"]
    if fidelity.preset(cfg) is None:
        return [Check("fidelity", True, "no preset: " + (f"differs from the paper in {', '.join(differ)}" if differ
                                                        else "every setting is the paper's") + " (stage.json, report)")]
    if refused:
        return [Check("fidelity", False, fidelity.refusal_line(r)) for r in refused]
    accepted = [k for k in differ if k in fidelity.allowed(cfg)]
    return [Check("fidelity", True, f"preset {fidelity.preset(cfg)}: "
                  + (f"accepted deviations {', '.join(accepted)}" if accepted else "every checked setting is the paper's"))]


def static_checks(cfg, plan, judge_too: bool) -> list[Check]:
    """Checks that cost nothing: data, keys, services, sandbox, fidelity to the paper."""
    checks = [Check("data", True, f"{plan.data['questions']} questions validated, sha256 {plan.data['sha256'][:12]}")]
    checks.append(_key_check(cfg.model, "model"))
    if judge_too:
        checks.append(_key_check(cfg.judge, "judge"))
    for who, mc in (("model", cfg.model), ("judge", cfg.judge)) if judge_too else (("model", cfg.model),):
        c = _prices_check(mc, who, cfg.get("budget_usd"))
        if c is not None:
            checks.append(c)
    need = conditions.needs(cfg.stage.get("conditions"))
    if "memory_space" in need and cfg.get("dry_run"):  # nothing is started or reached for a plan
        checks.append(Check("services", None, f"index {cfg.index.get('name')}: its servers are reached when the "
                                              "stage runs (a dry run reaches no server)"))
    elif "memory_space" in need:
        checks.append(_services_check(cfg.index))
    if "sandbox" in need:
        checks.append(_sandbox_check())
    return checks + fidelity_checks(cfg, plan)


def raise_first_failure(checks: list[Check]) -> None:
    for c in checks:
        if c.ok is False:
            same = [d.detail for d in checks if d.name == c.name and d.ok is False]  # every refused part, one line each
            raise EnvironmentFailure(f"preflight {c.name} failed: " + "\n  ".join(same), _FIX.get(c.name, "see above"))


_FIX = {"key": "export the key named above (or choose another model=)",
        "services": "make services-up (or point the index at running servers)",
        "prices": "set the model's prices (model.prices.hit/miss/output), or run without budget_usd",
        "sandbox": "run as root with CAP_SYS_ADMIN, or leave the shell condition out",
        "model": "the line above says what the endpoint refused and how to fix it (model.base_url, model.model, the key, "
                 "model.accepts, the server's flags); then run the same command again",
        "fidelity": "fetch or choose the part named (each line says how), or accept it with allow_deviation=[...]"}
