"""The small interface every index backend implements, and a registry by name.

Like ann-benchmarks' `module.py`: a backend is one module with one class that
`add`s units (with their vectors), `delete`s them, `search`es under a View and
reports its `footprint`. The view is passed as the View object and each backend
compiles it into its own filter syntax (TAG query, FILTER expression, SQL WHERE,
numpy mask) -- never as a list of agents. A backend stores org, owner,
visibility and time with every unit so the engine itself evaluates the view.

Scores are "higher is better" everywhere (cosine similarity for dense, -bm25 for
lexical); ties are broken by unit id so results are deterministic.
Hydra's conf/index/<name>.yaml names a backend by `name`; `make_backend` builds it.

Backends are discovered, not listed: every module of this package is imported (pkgutil) and so are
the plugins (`harness.plugins.load()`: entry points of group `memspace_harness`, $MEMSPACE_PLUGINS);
a module registers its class with `@register(name)`. A backend describes itself with class
attributes, so the preflight, the personalization runner, the replay and the backend study
(bench/backends) read them and spell no backend names:

    service              None | "redis" | "postgres": the server it lives on
    filter_mode          how it applies a view: "pre-filter" | "post-filter" | "exact" | "lexical"
    in_place_visibility  set_visibility() changes a unit's visibility without re-inserting it
    approximate          an approximate index (built several times by the study); exact is not
    exact                its dense results are the true top-k (a replay checks no search of it)
    storage              "memory" | "disk": where its footprint lies
    isolation_keys       the config keys naming its private index (what a replay renames, so it never
                         drops a live stage's index); private_params(name) names one for the study
    query_settings       the attributes a study configuration may change at query time
    study_build_defaults build parameters the backend study uses unless a configuration sets them
and, for the study's probes, methods with neutral defaults: engine_versions()/engine_label()
(classmethods; versions read from the running server), server_counter(), server_memory(),
probe(), query_filter(), candidates(), probes_per_query(), post_filter_survivors(),
prepare_queries(), full_footprint(); service_configs() for composite backends; last_plan() says how the
calling thread's last search ran (the kernel records it with every read).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from harness.plugins import Registry, caller

from ..units import Unit
from ..views import View


@dataclass(frozen=True)
class Query:
    """What a search asks: the text (lexical) and/or its vector (dense)."""

    text: str = ""
    vector: np.ndarray | None = None

    def need_vector(self, backend: str) -> np.ndarray:
        if self.vector is None:
            raise ValueError(f"{backend} is a dense backend: the query needs a vector")
        return np.asarray(self.vector, dtype=np.float32)


@dataclass(frozen=True)
class Hit:
    uid: str
    score: float


class Backend(ABC):
    name: str = "?"
    kind: str = "dense"  # dense | lexical | hybrid
    service: str | None = None  # None (in process) | "redis" | "postgres"
    filter_mode: str = "pre-filter"  # pre-filter | post-filter | exact | lexical
    in_place_visibility: bool = False  # set_visibility() keeps the index structure
    approximate: bool = False
    exact: bool = False  # returns the true top-k under the view: a ground truth (the replay re-issues no search of it)
    storage: str = "memory"  # memory | disk
    isolation_keys: tuple[str, ...] = ()  # config keys naming its private index (renamed by a replay)
    query_settings: tuple[str, ...] = ()  # attributes a study configuration may set at query time
    study_build_defaults: dict = {}  # build parameters the backend study uses unless a configuration sets them
    in_space: bool = True  # False: for the backend study only, never a memory space's index

    # -- how the backend is isolated and named ------------------------------------------
    @classmethod
    def private_params(cls, name: str) -> dict[str, Any]:
        """Build parameters that give the backend its own index called `name`, dropped on close."""
        return {}

    @classmethod
    def service_configs(cls, cfg: dict) -> list[tuple[str, dict]]:
        """(service, the index config that reaches it) for every server an index config of this backend
        reads: its own, or (a composite backend such as hybrid) its parts'."""
        return [(cls.service, cfg)] if cls.service else []

    def candidate_list(self) -> int | None:
        """The candidate list the built index uses now (checked against candidates() of the configuration)."""
        return None

    # -- provenance ---------------------------------------------------------------------
    @classmethod
    def engine_versions(cls) -> dict[str, Any]:
        """Versions read from the engine itself (the running server, the library), not from clients."""
        return {}

    @classmethod
    def engine_label(cls, versions: dict) -> str:
        return cls.name

    # -- the backend study's probes (neutral defaults) ------------------------------------
    def set_visibility(self, changes: dict[str, str]) -> dict:
        raise NotImplementedError(f"{self.name} cannot change visibility in place: rebuild it")

    def server_counter(self) -> tuple[int, int] | None:
        """(calls, microseconds) of the engine's own search counter, or None: server-side timing."""
        return None

    @classmethod
    def server_memory(cls) -> int | None:
        """Bytes the server holds (before/after a build: the growth), or None for an in-process index."""
        return None

    @classmethod
    def probes_per_query(cls, query: dict) -> int:
        """Extra statements probe() and post_filter_survivors() send per measured query (the plan)."""
        return 0

    @classmethod
    def candidates(cls, query: dict) -> int | None:
        """K' of Proposition 2 when the engine hands a fixed candidate list to the filter, else None."""
        return None

    def probe(self, query: Query, view: View | None, k: int) -> dict[str, Any]:
        """{"server_ms", "plan"} of one query as the engine executed it (None where it does not say)."""
        return {"server_ms": None, "plan": None}

    @classmethod
    def query_filter(cls, view: View | None, plan: str | None, query: dict) -> str:
        """How the engine applied this view to one query, given the plan probe() read and the
        configuration's query settings (only a post-filter has survivors to count)."""
        return "no filter" if view is None else cls.filter_mode

    def post_filter_survivors(self, query: Query, view: View | None, k_prime: int) -> dict:
        return {"survivors": None, "candidates": None}

    def last_plan(self) -> dict | None:
        """How the calling thread's last search ran (records keep it beside each read); by default the
        backend's filter mode and query settings, which fix the plan. pgvector says which path it took."""
        return {"path": self.filter_mode, **{k: getattr(self, k, None) for k in self.query_settings}}

    def prepare_queries(self) -> None:
        """Called after a configuration's query settings are set (e.g. indexes they need, statistics)."""

    def full_footprint(self) -> dict[str, Any]:
        """footprint() with every index of the configuration family in place."""
        return self.footprint()

    @abstractmethod
    def add(self, units: Sequence[Unit], vectors: np.ndarray | None = None) -> None:
        """Insert or replace units (by uid). Dense backends need one vector per unit."""

    @abstractmethod
    def delete(self, uids: Sequence[str]) -> None: ...

    @abstractmethod
    def search(self, query: Query, view: View | None, k: int) -> list[Hit]:
        """The top k units the view admits, best first. view=None: no filter at all (all orgs)."""

    @abstractmethod
    def footprint(self) -> dict[str, Any]:
        """Memory/disk the index uses, in bytes where the engine reports it."""

    def __len__(self) -> int:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name}

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def check_units(units: Sequence[Unit], vectors: np.ndarray | None, dense: bool) -> np.ndarray | None:
    if not dense:
        return None
    if vectors is None:
        raise ValueError("a dense backend needs one vector per unit")
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[0] != len(units):
        raise ValueError(f"got {vectors.shape} vectors for {len(units)} units")
    return vectors


def ranked(pairs, k: int) -> list[Hit]:
    """Sort (uid, score) by score desc, uid asc; keep k."""
    out = sorted(pairs, key=lambda p: (-p[1], p[0]))[:k]
    return [Hit(u, float(s)) for u, s in out]


def auto_name(prefix: str) -> str:
    """A name no other process uses: indexes of concurrent stages and test runs never collide."""
    import os
    import uuid

    return f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"


BACKENDS: Registry[type[Backend]] = Registry("index backend", __package__, skip=("base",))


def register(name: str):
    """@register("mine") above a Backend subclass: found by name, a second `mine` refused with both modules."""
    origin = caller()

    def deco(cls):
        cls.name = name
        return BACKENDS.register(name, cls, origin)

    return deco


def make_backend(name_or_cfg, **params) -> Backend:
    """make_backend("redis_qe", ef_runtime=100) or make_backend({"name": "redis_qe", ...})."""
    if not isinstance(name_or_cfg, str):
        cfg = dict(name_or_cfg)
        name = cfg.pop("name") if "name" in cfg else cfg.pop("backend")
        cfg.pop("_target_", None)
        params = {**cfg, **params}
    else:
        name = name_or_cfg
    return backend_class(name)(**params)


def backend_class(name: str):
    """The registered class of `name` (its descriptive attributes need no instance and no server)."""
    return BACKENDS.get(name)


def backends() -> dict[str, Callable[..., Backend]]:
    """Every registered backend, by name (the package's modules and the plugins)."""
    return BACKENDS.items()
