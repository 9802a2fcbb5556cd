"""What the study asks of each engine. Every answer comes from the backend's own description
(harness/memory/backends/base.py): its private index, query settings, versions, footprint, storage."""

from __future__ import annotations

from harness.memory.backends.base import backend_class
from harness.memory.views import View

from .cases import K_PRIME, Config

# -------------------------------------------------------------------------------- provenance


def engine_versions(names) -> dict:
    """Versions the chosen backends (`names`: the configurations' and the fan-out side's) read from their
    engines (the running servers, SQLite), and the Python side's. A backend not chosen is not asked: a
    study of in-process backends reads no server, so one that is down stops nothing."""
    from harness.records.provenance import versions

    from harness.failures import EnvironmentFailure

    out: dict = {}
    for name in sorted(set(names)):
        try:
            out.update(backend_class(name).engine_versions())
        except Exception as exc:  # noqa: BLE001 - a server that does not answer (redis-py's, psycopg's errors)
            if not any(w in type(exc).__name__ for w in ("Connection", "Operational", "Timeout")) and \
                    not isinstance(exc, OSError):
                raise
            raise EnvironmentFailure(f"backend {name}'s server does not answer ({type(exc).__name__}: {exc})",
                                     "make services-up, or leave that backend out (stage.only=[...], "
                                     "stage.fanout=false for the fan-out side's)") from exc
    out.update({f"py:{k}": v for k, v in versions().items()})
    return out


def engine_label(backend: str, v: dict) -> str:
    try:
        return backend_class(backend).engine_label(v)
    except KeyError:
        return backend


# -------------------------------------------------------------------------------- the study's index


def make_index(cfg: Config, name: str):
    """The configuration's index under its own private name, dropped on close."""
    from harness.memory.backends.base import make_backend

    cls = backend_class(cfg.backend)
    return make_backend(cfg.backend, **{**cls.study_build_defaults, **cfg.build, **cls.private_params(name)})


def apply_query(backend, cfg: Config, defaults: dict) -> None:
    for attr, val in {**defaults, **cfg.query}.items():
        setattr(backend, attr, val)
    backend.prepare_queries()


def query_defaults(backend) -> dict:
    """The settings a configuration may change, as the backend was built (restored before each configuration)."""
    return {k: getattr(backend, k) for k in backend.query_settings}


def k_prime_of(cfg: Config) -> int:
    """K' of Proposition 2: the candidates the engine's graph search hands to the filter (pgvector: its
    ef_search); engines without a fixed candidate list take the paper's K' = 40 as the reference."""
    kp = backend_class(cfg.backend).candidates(cfg.query)
    return K_PRIME if kp is None else kp


def filter_mode(cfg: Config, view: View | None, plan: str | None) -> str:
    """How the engine applied the view to this query (only a post-filter has survivors to count)."""
    return backend_class(cfg.backend).query_filter(view, plan, cfg.query)


def server_memory(backend: str) -> int | None:
    return backend_class(backend).server_memory()


def footprint_row(backend, cfg: Config, fam: str, units: int, build_s: float, mem0: int | None, vers: dict) -> dict:
    """Footprint with every index of the family in place (full_footprint: pgvector's owner b-tree too)."""
    fp = {k: v for k, v in backend.full_footprint().items() if k != "units"}
    mem1 = server_memory(cfg.backend)
    if mem0 is not None and mem1 is not None:
        fp["server_memory_growth_bytes"] = mem1 - mem0
    return {"backend": fam, "units": units, "build_s": round(build_s, 2), "storage": type(backend).storage, **fp,
            "engine": engine_label(cfg.backend, vers)}
