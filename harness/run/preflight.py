"""Preflight: everything a stage needs, checked before its first run.

A stage of 2,040 paid runs must not discover a missing key, a stopped Redis or a machine
without a sandbox on run 1 and record 2,040 failures. Each check returns a line; the first
failing check stops the stage before any run (EnvironmentFailure). `dry_run=true` runs the
checks that cost nothing and names the model call it will make.

What a condition needs is declared by the condition module itself (`NEEDS`), so a new
condition never has to be taught to the preflight.

Fidelity (harness.run.fidelity): with `preset=paper` every setting that differs from the
paper (encoder weights absent or not bge, the official prompt file absent, another runtime,
model or index) is one failed line, unless `allow_deviation=[key, ...]` names it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import conditions
from harness.endpoints.client import Agent, Meter, ModelCallFailed
from harness.endpoints.registry import PROVIDERS
from harness.failures import EnvironmentFailure, classify

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


def needs(cfg) -> set[str]:
    out: set[str] = set()
    for c in (cfg.stage.get("conditions") or {}).values():
        out |= set(getattr(conditions.load(str(c.module)), "NEEDS", ()))
    return out


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


def model_call(proxy_url: str, model_cfg, who: str) -> Check:
    """One metered call of at most one output token, under role `preflight`."""
    meter = Meter(model_cfg["prices"], model_cfg.get("offpeak"))
    params = {**(model_cfg.get("params") or {}), "max_tokens": 1}
    agent = Agent(proxy_url, model_cfg, ROLE, 1, meter, role=ROLE, max_retries=min(2, int(model_cfg.get("max_retries", 2))),
                  backoff_s=float(model_cfg.get("backoff_s", 1.0)), params=params)
    try:
        agent.complete([{"role": "user", "content": PROMPT}])
    except EnvironmentFailure as exc:
        return Check("model", False, f"{who}: {exc}")
    except ModelCallFailed as exc:
        return Check("model", False, f"{who}: model={model_cfg.get('name')} does not answer: {exc}")
    return Check("model", True, f"{who}: {model_cfg.get('name')} ({model_cfg.get('model')}) answered one metered call")


def fidelity_checks(cfg, plan) -> list[Check]:
    """One line per setting the paper preset refuses; one line in all when nothing is refused."""
    from harness.run import fidelity
    from harness.run.plan import PlanError

    rows = fidelity.manifest(cfg, plan)
    try:
        refused = fidelity.refusals(cfg, rows)
    except ValueError as exc:
        raise PlanError(str(exc)) from None
    differ = [r.key for r in rows if r.status == "differs"]
    if fidelity.preset(cfg) is None:
        return [Check("fidelity", True, "no preset: " + (f"differs from the paper in {', '.join(differ)}" if differ
                                                        else "every setting is the paper's") + " (stage.json, report)")]
    if refused:
        return [Check("fidelity", False, f"{r.key}: {r.line()}; allow_deviation=[{r.key}] accepts it") for r in refused]
    accepted = [k for k in differ if k in fidelity.allowed(cfg)]
    return [Check("fidelity", True, f"preset {fidelity.preset(cfg)}: "
                  + (f"accepted deviations {', '.join(accepted)}" if accepted else "every checked setting is the paper's"))]


def static_checks(cfg, plan, judge_too: bool) -> list[Check]:
    """Checks that cost nothing: data, keys, services, sandbox, fidelity to the paper."""
    checks = [Check("data", True, f"{plan.data['questions']} questions validated, sha256 {plan.data['sha256'][:12]}")]
    checks.append(_key_check(cfg.model, "model"))
    if judge_too:
        checks.append(_key_check(cfg.judge, "judge"))
    need = needs(cfg)
    if "memory_space" in need:
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
        "sandbox": "run as root with CAP_SYS_ADMIN, or leave the shell condition out",
        "model": "check model.base_url, model.model and the key; then run the same command again",
        "fidelity": "fetch or choose the part named (each line says how), or accept it with allow_deviation=[...]"}
