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
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

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


REGISTRY: dict[str, Callable[..., Backend]] = {}


def register(name: str):
    def deco(cls):
        REGISTRY[name] = cls
        cls.name = name
        return cls

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
    _load_all()
    if name not in REGISTRY:
        raise KeyError(f"unknown index backend {name!r}; known: {sorted(REGISTRY)}")
    return REGISTRY[name](**params)


def _load_all() -> None:
    from . import exact, fts5, hybrid, pgvector, redis_qe, vectorset  # noqa: F401  (registration)
