"""Exact search: numpy brute force under the view. The embedded default and the ground truth.

Owner, org and visibility are interned to integer codes, so the view compiles
to a boolean mask over a few int arrays and the scan is one matrix-vector product
over the admitted rows: nothing approximate, no candidate limit, no truncation.
"""

from __future__ import annotations

import threading
from typing import Sequence

import numpy as np

from ..units import Unit
from ..views import View
from .base import Backend, Hit, Query, check_units, register


@register("exact")
class ExactBackend(Backend):
    kind = "dense"
    filter_mode = "exact"  # the view is a mask before a brute-force scan
    exact = True  # brute force: the ground truth of every recall
    in_place_visibility = True

    @classmethod
    def engine_label(cls, versions: dict) -> str:
        return f"numpy {versions.get('py:numpy')}"

    @classmethod
    def query_filter(cls, view: View | None, plan: str | None, query: dict) -> str:
        return "no filter" if view is None else "pre-filter"

    def __init__(self, dim: int = 384, **_ignored):
        self.dim = dim
        self._lock = threading.RLock()
        self._codes: dict[str, int] = {}
        self._row: dict[str, int] = {}  # uid -> row
        self._uids: list[str] = []
        cap = 1024
        self._vec = np.zeros((cap, dim), dtype=np.float32)
        self._org = np.full(cap, -1, dtype=np.int32)
        self._owner = np.full(cap, -1, dtype=np.int32)
        self._public = np.zeros(cap, dtype=bool)
        self._time = np.zeros(cap, dtype=np.float64)
        self._alive = np.zeros(cap, dtype=bool)
        self._n = 0

    def _code(self, s: str) -> int:
        c = self._codes.get(s)
        if c is None:
            c = self._codes[s] = len(self._codes)
        return c

    def _grow(self, need: int) -> None:
        cap = len(self._alive)
        if need <= cap:
            return
        new = max(need, cap * 2)
        for name in ("_vec", "_org", "_owner", "_public", "_time", "_alive"):
            old = getattr(self, name)
            shape = (new,) + old.shape[1:]
            arr = np.zeros(shape, dtype=old.dtype) if name not in ("_org", "_owner") else np.full(shape, -1, old.dtype)
            arr[:cap] = old
            setattr(self, name, arr)

    def add(self, units: Sequence[Unit], vectors: np.ndarray | None = None) -> None:
        vectors = check_units(units, vectors, dense=True)
        if len(units) and vectors.shape[1] != self.dim:
            raise ValueError(f"vectors have dimension {vectors.shape[1]}, the index {self.dim}")
        with self._lock:
            self._grow(self._n + len(units))
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors = vectors / np.where(norms > 0, norms, 1.0)  # cosine, like every other backend
            for u, v in zip(units, vectors):
                r = self._row.get(u.uid)
                if r is None:
                    r = self._row[u.uid] = self._n
                    self._uids.append(u.uid)
                    self._n += 1
                self._vec[r] = v
                self._org[r] = self._code(u.org)
                self._owner[r] = self._code(u.owner)
                self._public[r] = u.visibility == "public"
                self._time[r] = u.time
                self._alive[r] = True

    def delete(self, uids: Sequence[str]) -> None:
        with self._lock:
            for uid in uids:
                r = self._row.get(uid)
                if r is not None:
                    self._alive[r] = False

    def set_visibility(self, changes: dict[str, str]) -> dict:
        """Change units' visibility in place (uid -> visibility)."""
        with self._lock:
            for uid, vis in changes.items():
                self._public[self._row[uid]] = vis == "public"
        return {"updated": len(changes)}

    def mask(self, view: View | None) -> np.ndarray:
        """The view as a boolean mask over rows (the compiled predicate)."""
        n = self._n
        m = self._alive[:n].copy()
        if view is None:
            return m
        org = self._codes.get(view.org)
        if org is None:
            return np.zeros(n, dtype=bool)
        m &= self._org[:n] == org
        me = self._codes.get(view.agent, -2) if view.agent else -2
        if view.scope == "own":
            m &= self._owner[:n] == me
        elif view.scope == "shared":
            m &= (self._owner[:n] == me) | self._public[:n]
        if view.since is not None:
            m &= self._time[:n] >= view.since
        if view.until is not None:
            m &= self._time[:n] <= view.until
        return m

    def search(self, query: Query, view: View | None, k: int) -> list[Hit]:
        q = query.need_vector(self.name)
        nq = float(np.linalg.norm(q))
        q = q / nq if nq > 0 else q
        with self._lock:
            rows = np.flatnonzero(self.mask(view))
            if not len(rows) or k <= 0:
                return []
            scores = self._vec[rows] @ q
            uids = self._uids
            if len(rows) > k:
                # keep everything tied with the k-th score, then order by (score desc, uid)
                kth = np.partition(scores, len(scores) - k)[len(scores) - k]
                keep = np.flatnonzero(scores >= kth)
            else:
                keep = np.arange(len(rows))
            pairs = sorted(((uids[rows[i]], float(scores[i])) for i in keep), key=lambda p: (-p[1], p[0]))
        return [Hit(u, s) for u, s in pairs[:k]]

    def count(self, view: View | None) -> int:
        with self._lock:
            return int(self.mask(view).sum())

    def __len__(self) -> int:
        with self._lock:
            return int(self._alive[:self._n].sum())

    def footprint(self) -> dict:
        with self._lock:
            n = self._n
            used = sum(getattr(self, a)[:n].nbytes for a in ("_vec", "_org", "_owner", "_public", "_time", "_alive"))
            return {"units": len(self), "memory_bytes": int(used)}

    def describe(self) -> dict:
        return {"backend": self.name, "dim": self.dim}
