"""Hybrid ranking: reciprocal rank fusion of the top 50 lexical and top 50 dense results, constant 60.

RRF (Cormack et al., 2009) adds 1 / (c + rank) over the lists a unit appears in,
so it needs no score calibration between BM25 and cosine. Both lists are taken
under the same view, so fusion cannot widen it.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..units import Unit
from ..views import View
from .base import Backend, Hit, Query, make_backend, register

DEPTH = 50
RRF_K = 60


def rrf(lists: Sequence[Sequence[Hit]], c: int = RRF_K) -> list[Hit]:
    """Fuse ranked lists; ties broken by uid."""
    score: dict[str, float] = {}
    for hits in lists:
        for rank, h in enumerate(hits, start=1):
            score[h.uid] = score.get(h.uid, 0.0) + 1.0 / (c + rank)
    return [Hit(u, s) for u, s in sorted(score.items(), key=lambda p: (-p[1], p[0]))]


def _parts_services(cfg: dict, keys) -> list[tuple[str, dict]]:
    from .base import backend_class

    out = []
    for key in keys:
        part = cfg.get(key) if isinstance(cfg, dict) else None
        part = {"name": part} if isinstance(part, str) else part
        if isinstance(part, dict) and part.get("name"):
            out += backend_class(str(part["name"])).service_configs(part)
    return out


@register("hybrid")
class Hybrid(Backend):
    """A lexical and a dense backend fused by RRF; `add` feeds both."""

    kind = "hybrid"
    parts = ("dense", "lexical")  # config keys holding the fused backends (services, replay names)
    default_dense = "exact"  # the dense side when a config names none

    @classmethod
    def service_configs(cls, cfg: dict) -> list[tuple[str, dict]]:
        return _parts_services(cfg, cls.parts)

    def __init__(self, lexical: Backend | dict | str = "fts5", dense: Backend | dict | str | None = None,
                 depth: int = DEPTH, rrf_k: int = RRF_K, **_):
        self.lexical = lexical if isinstance(lexical, Backend) else make_backend(lexical)
        dense = self.default_dense if dense is None else dense
        self.dense = dense if isinstance(dense, Backend) else make_backend(dense)
        self.depth, self.rrf_k = depth, rrf_k

    def add(self, units: Sequence[Unit], vectors: np.ndarray | None = None) -> None:
        self.lexical.add(units)
        self.dense.add(units, vectors)

    def delete(self, uids: Sequence[str]) -> None:
        self.lexical.delete(uids)
        self.dense.delete(uids)

    def search(self, query: Query, view: View | None, k: int) -> list[Hit]:
        lists = [self.lexical.search(query, view, self.depth), self.dense.search(query, view, self.depth)]
        return rrf(lists, self.rrf_k)[:k]

    def __len__(self) -> int:
        return len(self.dense)

    def footprint(self) -> dict:
        return {"lexical": self.lexical.footprint(), "dense": self.dense.footprint()}

    def describe(self) -> dict:
        return {"backend": self.name, "depth": self.depth, "rrf_k": self.rrf_k,
                "lexical": self.lexical.describe(), "dense": self.dense.describe()}

    def close(self) -> None:
        self.lexical.close()
        self.dense.close()
