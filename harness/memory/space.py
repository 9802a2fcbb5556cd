"""The memory space: one dense index and per-view lexical indexes over every agent's units.

Dense vectors are stored once (in the backend the config names: exact, redis_qe,
vectorset or pgvector); lexical entries once per view that contains the unit
(Proposition 1). A search runs under a View, scores with BM25, cosine or their
RRF fusion, and returns at most k results ONE PER ROUND (the best chunk of each
round), as the memory_search tool shows them. `read` returns whole rounds for
memory_read, under the same view.

Thread-safe (the driver runs up to 8 agents as threads): writes hold one lock,
searches go to backends that are themselves thread-safe. Deterministic: ties are
broken by unit id, query vectors come from the cache, so a logged search replays
to the same results against the same index (the exposure audit).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from harness.data.longmemeval import Session

from .backends.base import Backend, Hit, Query, backend_class, make_backend
from .backends.fts5 import FTS5PerView
from .backends.hybrid import DEPTH, RRF_K, rrf
from .units import Round, Unit, chunk_text, rounds_of
from .views import View

SCORINGS = ("bm25", "dense", "hybrid")
MAX_CANDIDATES = 4096


@dataclass(frozen=True)
class Result:
    unit: Unit  # the best-matching chunk of its round
    score: float
    rank: int  # 1-based among rounds

    def describe(self) -> dict:
        u = self.unit
        return {"rank": self.rank, "score": self.score, "uid": u.uid, "owner": u.owner, "session": u.session,
                "round": u.round, "time": u.time}


@dataclass(frozen=True)
class StoredRound:
    org: str
    owner: str
    visibility: str
    session: str
    round: int
    time: float
    user: str
    assistant: str


@dataclass
class CommitReport:
    """A committed round's write path; delta = commit -> searchable by dense retrieval (seconds)."""

    units: int
    delta: float
    chunk_s: float
    embed_s: float
    insert_dense_s: float
    insert_lexical_s: float
    probes: int  # searches issued until the round was found
    lexical_views: int  # per-view lexical indexes the units entered
    extra: dict = field(default_factory=dict)


def round_key(u: Unit) -> tuple[str, str, int]:
    return (u.org, u.session, u.round)


class MemorySpace:
    def __init__(self, encoder, dense: Backend | None, lexical: FTS5PerView | None = None,
                 depth: int = DEPTH, rrf_k: int = RRF_K):
        self.encoder, self.dense = encoder, dense
        self.lexical = lexical if lexical is not None else FTS5PerView()
        self.depth, self.rrf_k = depth, rrf_k
        self._units: dict[str, Unit] = {}
        self._rounds: dict[tuple[str, str], dict[int, StoredRound]] = {}
        self._lock = threading.RLock()

    # -- writes -------------------------------------------------------------------------
    def add_units(self, units: Iterable[Unit], progress: bool | None = None) -> int:
        """Embed (through the cache) and index units not yet in the space; return how many were new.

        The space's lock guards its unit table only: the embedding and the indexes' inserts (each index
        with its own lock) run outside it, so one writer's slow embedding or insert never holds another
        writer, or any search, behind it (the kernel's users never wait on each other)."""
        with self._lock:
            new, seen = [], set()
            for u in units:
                if u.uid not in self._units and u.uid not in seen:
                    seen.add(u.uid)
                    new.append(u)
        if not new:
            return 0
        vecs = self.encoder.embed([u.text for u in new], progress=progress) if self.dense is not None else None
        with self._lock:  # a concurrent add of the same uids may have won: keep its units
            keep = [i for i, u in enumerate(new) if u.uid not in self._units]
            new = [new[i] for i in keep]
            for u in new:
                self._units[u.uid] = u
        if not new:
            return 0
        if self.dense is not None:
            self.dense.add(new, vecs[keep])
        self.lexical.add(new)
        return len(new)

    def _store_round(self, r: Round, org: str, owner: str, visibility: str) -> None:
        self._rounds.setdefault((org, r.session), {})[r.number] = StoredRound(
            org, owner, visibility, r.session, r.number, r.time, r.user, r.assistant)

    def add_rounds(self, rounds: Sequence[Round], org: str, owner: str, visibility: str,
                   progress: bool | None = None) -> int:
        units = []
        with self._lock:
            for r in rounds:
                self._store_round(r, org, owner, visibility)
                units += [Unit(org, owner, visibility, r.time, r.session, r.number, c, t)
                          for c, t in enumerate(chunk_text(r.user, r.text))]
            return self.add_units(units, progress=progress)

    def add_sessions(self, sessions: Iterable[Session], org: str, owner_of: Callable[[str], str],
                     visibility_of: Callable[[str], str], progress: bool | None = None) -> int:
        """A history: owner_of(session id) -> agent, visibility_of(agent) -> private|public."""
        units = []
        with self._lock:
            for s in sessions:
                owner = owner_of(s.sid)
                vis = visibility_of(owner)
                for r in rounds_of(s):
                    self._store_round(r, org, owner, vis)
                    units += [Unit(org, owner, vis, r.time, r.session, r.number, c, t)
                              for c, t in enumerate(chunk_text(r.user, r.text))]
            return self.add_units(units, progress=progress)

    def commit(self, r: Round, org: str, owner: str, visibility: str, verify: bool = True,
               timeout: float = 5.0) -> CommitReport:
        """The write path: chunk, embed, insert into the vector index and into the lexical index of
        every view that contains the round; then probe until dense retrieval finds it (delta)."""
        if self.dense is None:
            raise ValueError("commit measures the dense write path; this space has no dense index")
        with self._lock:
            t0 = time.perf_counter()
            units = [Unit(org, owner, visibility, r.time, r.session, r.number, c, t)
                     for c, t in enumerate(chunk_text(r.user, r.text))]
            t1 = time.perf_counter()
            hits_before = self.encoder.stats.cache_hits
            vecs = self.encoder.embed([u.text for u in units], progress=False)
            cached = self.encoder.stats.cache_hits - hits_before
            t2 = time.perf_counter()
            self._store_round(r, org, owner, visibility)
            for u in units:
                self._units[u.uid] = u
            self.dense.add(units, vecs)
            t3 = time.perf_counter()
            self.lexical.add(units)
            t4 = time.perf_counter()
            views = sum(1 for key in self.lexical.view_keys() if self._admitted_by_key(key, units[0]))
        probes, t_found = 0, t4
        if verify:
            own = View(org, owner, "own")
            target = units[0].uid
            while True:
                t_probe = time.perf_counter()
                probes += 1
                hits = self.dense.search(Query(vector=vecs[0]), own, 10)
                if any(h.uid == target for h in hits):
                    t_found = t_probe
                    break
                if t_probe - t0 > timeout:
                    raise RuntimeError(f"round {r.session}#{r.number} not searchable after {timeout} s")
                time.sleep(0.001)
        return CommitReport(len(units), t_found - t0, t1 - t0, t2 - t1, t3 - t2, t4 - t3, probes, views,
                            {"cached_embeddings": cached})

    def _admitted_by_key(self, key: str, u: Unit) -> bool:
        if key == "*":
            return True
        org, scope, agent = key.rsplit("|", 2)
        return View(org, None if agent == "*" else agent, scope).admits(u)

    def delete(self, uids: Sequence[str]) -> None:
        with self._lock:
            for uid in uids:
                self._units.pop(uid, None)
            if self.dense is not None:
                self.dense.delete(uids)
            self.lexical.delete(uids)

    # -- reads --------------------------------------------------------------------------
    def query_vector(self, text: str) -> np.ndarray:
        return self.encoder.embed_query(text)

    def _unit(self, uid: str) -> Unit:
        try:
            return self._units[uid]
        except KeyError:
            raise RuntimeError(f"the index returned {uid!r}, which this space never added (a stale index?)") from None

    def _per_round(self, hits: Sequence[Hit], k: int) -> list[Result]:
        out: list[Result] = []
        seen: set[tuple] = set()
        for h in hits:
            u = self._unit(h.uid)
            key = round_key(u)
            if key in seen:
                continue
            seen.add(key)
            out.append(Result(u, h.score, len(out) + 1))
            if len(out) == k:
                break
        return out

    def _grow(self, backend: Backend, query: Query, view: View, k: int) -> list[Result]:
        """Ask for more chunks until k distinct rounds come back or the view is exhausted."""
        n = max(4 * k, 32)
        while True:
            hits = backend.search(query, view, n)
            res = self._per_round(hits, k)
            if len(res) >= k or len(hits) < n or n >= MAX_CANDIDATES:
                return res
            n *= 4

    def search(self, query: str, view: View, k: int = 8, scoring: str = "hybrid") -> list[Result]:
        if scoring not in SCORINGS:
            raise ValueError(f"scoring must be one of {SCORINGS}, got {scoring!r}")
        if not isinstance(view, View):
            raise TypeError("a memory search always runs under a View")
        if k <= 0:
            return []
        if scoring == "bm25":
            return self._grow(self.lexical, Query(text=query), view, k)
        if self.dense is None:
            raise ValueError(f"{scoring} scoring needs a dense index")
        q = Query(text=query, vector=self.query_vector(query))
        if scoring == "dense":
            return self._grow(self.dense, q, view, k)
        lists = [self.lexical.search(q, view, self.depth), self.dense.search(q, view, self.depth)]
        return self._per_round(rrf(lists, self.rrf_k), k)

    def read(self, view: View, session: str, round: int, window: int = 1) -> list[StoredRound]:
        """Whole rounds round-window .. round+window of a session, if the view (without dates) admits them."""
        base = view.without_dates()
        rounds = self._rounds.get((view.org, session), {})
        out = []
        for n in range(round - window, round + window + 1):
            r = rounds.get(n)
            if r is None:
                continue
            probe = Unit(r.org, r.owner, r.visibility, r.time, r.session, r.round, 0, "")
            if base.admits(probe):
                out.append(r)
        return out

    def units(self, view: View | None = None) -> list[Unit]:
        with self._lock:
            us = list(self._units.values())
        return us if view is None else [u for u in us if view.admits(u)]

    def __len__(self) -> int:
        return len(self._units)

    def footprint(self) -> dict[str, Any]:
        return {"units": len(self._units), "rounds": sum(len(v) for v in self._rounds.values()),
                "dense": self.dense.footprint() if self.dense is not None else None,
                "lexical": self.lexical.footprint()}

    def describe(self) -> dict[str, Any]:
        return {"encoder": self.encoder.describe(), "dense": self.dense.describe() if self.dense is not None else None,
                "lexical": self.lexical.describe(), "hybrid": {"depth": self.depth, "rrf_k": self.rrf_k},
                "results": "one per round (best chunk)"}

    def close(self) -> None:
        if self.dense is not None:
            self.dense.close()
        self.lexical.close()


def _plain(cfg) -> dict:
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(cfg, DictConfig):
            return OmegaConf.to_container(cfg, resolve=True)
    except ImportError:  # pragma: no cover
        pass
    return dict(cfg)


def space_from_config(index_cfg, encoder=None, encoder_cfg=None, cache_dir: str | None = None) -> MemorySpace:
    """Build a space from conf/index/<name>.yaml (+ conf/encoder/<name>.yaml).

    a dense index (kind "dense": exact, redis_qe, ...): that backend + per-view FTS5;
    a hybrid index (kind "hybrid"): its `dense` entry + per-view FTS5, fused with its depth/rrf_k;
    a lexical index (kind "lexical"): lexical only (dense and hybrid scoring raise);
    a backend with in_space = False (the study's one shared FTS5 index) is refused.
    """
    from .encoder import from_config as encoder_from_config

    cfg = _plain(index_cfg)
    if "name" not in cfg and "backend" in cfg:
        cfg["name"] = cfg.pop("backend")
    if encoder is None:
        ecfg = _plain(encoder_cfg or {"name": "minilm"})
        if cache_dir and not ecfg.get("cache_dir"):
            ecfg["cache_dir"] = str(Path(cache_dir) / "embeddings")
        encoder = encoder_from_config(ecfg)
    name = cfg["name"]
    depth, rrf_k = cfg.get("depth", DEPTH), cfg.get("rrf_k", RRF_K)
    cls = backend_class(name)
    if not cls.in_space:
        raise ValueError(f"{name} breaks Proposition 1; it exists for the backend study only")
    if cls.kind == "hybrid":
        dense_cfg = cfg.get("dense", getattr(cls, "default_dense", None))
        dense = make_backend(dense_cfg)
    elif cls.kind == "lexical":
        dense = None
    else:
        dense = make_backend(cfg)
    return MemorySpace(encoder, dense, FTS5PerView(), depth=depth, rrf_k=rrf_k)

