"""Redis query engine (RediSearch 2.10 in Redis 8): HNSW with the view as a pre-filter.

Schema: TAG org, TAG owner, TAG visibility (case-sensitive, so agents "A0" and
"a0" never merge; separator \\x1f, so commas and pipes in values are data),
NUMERIC time, VECTOR HNSW (M 16, EF_CONSTRUCTION 200, FLOAT32, COSINE). A search
is one KNN query whose pre-filter is the compiled view, written in one pair of
parentheses before `=>` with DIALECT 2 (SPEC 8):

    (@org:{q1} (@owner:{a0} | @visibility:{public}) @time:[since until])=>[KNN $K @vec $B EF_RUNTIME $EF AS dist]

EF_RUNTIME (default 10, the paper's setting) and the hybrid policy (engine's
choice, ADHOC_BF or BATCHES) are configurable. TAG values are escaped: every
ASCII character other than letters, digits and '_' gets a backslash.

No in-place visibility change (set_visibility): an HSET of one field re-indexes the whole
document under a new doc id, vector included (measured: 2,000 HSETs of `visibility` on a
5,000-document index raised max_doc_id to 7,000 and took 70% of the full build's time).
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np

from ..units import Unit
from ..views import View
from .base import Backend, Hit, Query, auto_name, check_units, register

SEPARATOR = "\x1f"
_ESCAPE = re.compile(r"([\x00-\x2f\x3a-\x40\x5b-\x5e\x60\x7b-\x7f])")  # ASCII except [0-9A-Za-z_]


def tag_escape(value: str) -> str:
    if not value:
        raise ValueError("empty TAG value")
    if SEPARATOR in value:
        raise ValueError(f"TAG value {value!r} contains the separator \\x1f")
    return _ESCAPE.sub(r"\\\1", value)


def _num(x: float | None, default: str) -> str:
    return default if x is None else repr(float(x))


def compile_view(view: View | None) -> str:
    """The view as a RediSearch pre-filter (the part before `=>`)."""
    if view is None:
        return "*"
    parts = [f"@org:{{{tag_escape(view.org)}}}"]
    if view.scope == "own":
        parts.append(f"@owner:{{{tag_escape(view.agent)}}}")
    elif view.scope == "shared":
        parts.append(f"(@owner:{{{tag_escape(view.agent)}}} | @visibility:{{public}})")
    if view.since is not None or view.until is not None:
        parts.append(f"@time:[{_num(view.since, '-inf')} {_num(view.until, '+inf')}]")
    return "(" + " ".join(parts) + ")"


def _get(d, key: str):
    if isinstance(d, dict):
        return d.get(key.encode(), d.get(key))
    return None


def _s(x) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def _redis():
    import redis

    from ... import services

    return redis.Redis.from_url(services.settings().redis_url)


def redis_modules() -> tuple[dict, dict]:
    """({module: version number}, {"redis_server": version}) read from the running server."""
    r = _redis()
    try:
        server = r.info("server")["redis_version"]
        mods = {m[b"name"].decode(): int(m[b"ver"]) for m in r.execute_command("MODULE", "LIST")}
    finally:
        r.close()
    return mods, {"redis_server": server}


def redis_used_memory() -> int:
    r = _redis()
    try:
        return int(r.info("memory")["used_memory"])
    finally:
        r.close()


@register("redis_qe")
class RedisQE(Backend):
    kind = "dense"
    service = "redis"
    filter_mode = "pre-filter"  # the view is the KNN query's pre-filter
    approximate = True
    isolation_keys = ("index",)
    query_settings = ("ef_runtime", "hybrid_policy", "batch_size")

    @classmethod
    def private_params(cls, name: str) -> dict:
        return {"index": name, "drop_existing": True, "drop_on_close": True}

    @classmethod
    def engine_versions(cls) -> dict:
        mods, v = redis_modules()
        s = mods.get("search")
        return {**v, "redisearch": f"{s // 10000}.{s // 100 % 100}.{s % 100}" if s else None}

    @classmethod
    def engine_label(cls, versions: dict) -> str:
        return f"Redis {versions.get('redis_server')} + RediSearch {versions.get('redisearch')}"

    @classmethod
    def server_memory(cls) -> int | None:
        return redis_used_memory()

    def server_counter(self) -> tuple[int, int] | None:
        return self.server_usec()

    @classmethod
    def probes_per_query(cls, query: dict) -> int:
        return 1  # FT.PROFILE

    def probe(self, query: Query, view: View | None, k: int) -> dict:
        return {"server_ms": None, "plan": self.executed_policy(query, view, k)}

    @classmethod
    def query_filter(cls, view: View | None, plan: str | None, query: dict) -> str:
        if view is None:
            return "no filter"
        return {"ADHOC_BF": "pre-filter", "BATCHES": "batches"}.get(plan or "", plan or "?")

    def __init__(self, index: str | None = None, url: str | None = None, dim: int = 384, m: int = 16,
                 ef_construction: int = 200, ef_runtime: int = 10, hybrid_policy: str | None = None,
                 batch_size: int | None = None, drop_existing: bool = False, drop_on_close: bool | None = None, **_):
        import redis

        from ... import services

        if index is None:  # a private index per instance: two processes never share (or drop) one
            index, drop_on_close = auto_name("memspace"), True if drop_on_close is None else drop_on_close
        self.url = url or services.settings().redis_url
        self.r = redis.Redis.from_url(self.url, protocol=3)
        self.index, self.prefix, self.dim = index, f"{index}:u:", dim
        self.m, self.ef_construction = m, ef_construction
        self.ef_runtime, self.hybrid_policy, self.batch_size = ef_runtime, hybrid_policy, batch_size
        if hybrid_policy not in (None, "ADHOC_BF", "BATCHES"):
            raise ValueError(f"hybrid_policy must be None, ADHOC_BF or BATCHES, got {hybrid_policy!r}")
        self.drop_on_close = bool(drop_on_close)
        if drop_existing:
            self.drop()
        self._create()

    # -- schema -----------------------------------------------------------------------
    def _exists(self) -> bool:
        import redis

        try:
            self.r.execute_command("FT.INFO", self.index)
            return True
        except redis.ResponseError:
            return False

    def _create(self) -> None:
        if self._exists():
            return
        tag = ["TAG", "SEPARATOR", SEPARATOR, "CASESENSITIVE"]
        self.r.execute_command(
            "FT.CREATE", self.index, "ON", "HASH", "PREFIX", "1", self.prefix, "SCHEMA",
            "org", *tag, "owner", *tag, "visibility", *tag, "time", "NUMERIC",
            "vec", "VECTOR", "HNSW", "10", "TYPE", "FLOAT32", "DIM", str(self.dim), "DISTANCE_METRIC", "COSINE",
            "M", str(self.m), "EF_CONSTRUCTION", str(self.ef_construction),
        )

    def drop(self) -> None:
        """Drop the index and its documents."""
        import redis

        try:
            self.r.execute_command("FT.DROPINDEX", self.index, "DD")
        except redis.ResponseError:
            pass

    # -- writes -----------------------------------------------------------------------
    def add(self, units: Sequence[Unit], vectors: np.ndarray | None = None) -> None:
        vectors = check_units(units, vectors, dense=True)
        for i in range(0, len(units), 500):
            pipe = self.r.pipeline(transaction=False)
            for u, v in zip(units[i:i + 500], vectors[i:i + 500]):
                for val in (u.org, u.owner, u.visibility):
                    tag_escape(val)  # validate before writing
                pipe.hset(self.prefix + u.uid, mapping={
                    "uid": u.uid, "org": u.org, "owner": u.owner, "visibility": u.visibility,
                    "time": repr(float(u.time)), "vec": np.asarray(v, dtype=np.float32).tobytes()})
            pipe.execute()

    def delete(self, uids: Sequence[str]) -> None:
        for i in range(0, len(uids), 1000):
            part = [self.prefix + u for u in uids[i:i + 1000]]
            if part:
                self.r.delete(*part)

    # -- search -----------------------------------------------------------------------
    def _knn(self, prefilter: str, vec: np.ndarray, k: int) -> tuple[list, list]:
        clause = "KNN $K @vec $B"
        params = ["K", str(k), "B", vec.astype(np.float32).tobytes()]
        if prefilter == "*":  # no filter, no hybrid query: a policy would be refused by the engine
            clause += " EF_RUNTIME $EF"
            params += ["EF", str(self.ef_runtime)]
        elif self.hybrid_policy == "ADHOC_BF":
            clause += " HYBRID_POLICY ADHOC_BF"
        else:
            clause += " EF_RUNTIME $EF"
            params += ["EF", str(self.ef_runtime)]
            if self.hybrid_policy == "BATCHES":
                clause += " HYBRID_POLICY BATCHES"
                if self.batch_size:
                    clause += " BATCH_SIZE $BS"
                    params += ["BS", str(self.batch_size)]
        q = f"{prefilter}=>[{clause} AS dist]"
        args = [q, "PARAMS", str(len(params)), *params, "SORTBY", "dist", "ASC", "LIMIT", "0", str(k),
                "RETURN", "1", "dist", "DIALECT", "2"]
        return q, args

    def _parse(self, res) -> list[Hit]:
        out = []
        n = len(self.prefix)
        results = _get(res, "results")
        if results is not None:  # RESP3
            for row in results:
                key = _s(_get(row, "id"))
                dist = float(_s(_get(_get(row, "extra_attributes"), "dist")))
                out.append((key[n:], 1.0 - dist))
        else:  # RESP2: [total, key, [field, value, ...], ...]
            for j in range(1, len(res), 2):
                fields = res[j + 1]
                vals = {_s(fields[i]): _s(fields[i + 1]) for i in range(0, len(fields), 2)}
                out.append((_s(res[j])[n:], 1.0 - float(vals["dist"])))
        out.sort(key=lambda p: (-p[1], p[0]))
        return [Hit(u, s) for u, s in out]

    def search(self, query: Query, view: View | None, k: int) -> list[Hit]:
        if k <= 0:
            return []
        _, args = self._knn(compile_view(view), query.need_vector(self.name), k)
        return self._parse(self.r.execute_command("FT.SEARCH", self.index, *args))

    def search_owners(self, query: Query, org: str, owners: Sequence[str], k: int) -> list[Hit]:
        """The backend study's other form: the view written as a TAG list of agents."""
        if k <= 0 or not owners:
            return []
        pre = f"(@org:{{{tag_escape(org)}}} @owner:{{{'|'.join(tag_escape(o) for o in owners)}}})"
        _, args = self._knn(pre, query.need_vector(self.name), k)
        return self._parse(self.r.execute_command("FT.SEARCH", self.index, *args))

    def profile(self, query: Query, view: View | None, k: int) -> Any:
        """FT.PROFILE of the same query: shows whether the engine ran ad-hoc brute force or batches."""
        _, args = self._knn(compile_view(view), query.need_vector(self.name), k)
        return self.r.execute_command("FT.PROFILE", self.index, "SEARCH", "QUERY", *args)

    def owner_index(self, owner: str) -> str:
        """A separate HNSW index over one agent's documents (FT.CREATE ... FILTER on the same keys):
        the dense side of fan-out, one store per agent, without copying any vector."""
        name = f"{self.index}__{owner}"
        if owner.replace("_", "").isalnum() is False:
            raise ValueError(f"owner {owner!r}: letters, digits and '_' only")
        self.r.execute_command(
            "FT.CREATE", name, "ON", "HASH", "PREFIX", "1", self.prefix, "FILTER", f'@owner=="{owner}"', "SCHEMA",
            "vec", "VECTOR", "HNSW", "10", "TYPE", "FLOAT32", "DIM", str(self.dim), "DISTANCE_METRIC", "COSINE",
            "M", str(self.m), "EF_CONSTRUCTION", str(self.ef_construction))
        return name

    def wait_indexed(self, name: str | None = None, timeout_s: float = 3600) -> None:
        """FT.CREATE over existing keys indexes them in the background: wait until it is done."""
        import time

        t = time.monotonic()
        while True:
            raw = self.r.execute_command("FT.INFO", name or self.index)
            info = {_s(k): v for k, v in (raw.items() if isinstance(raw, dict) else zip(raw[::2], raw[1::2]))}
            if int(_s(info.get("indexing", 0))) == 0:
                return
            if time.monotonic() - t > timeout_s:
                raise TimeoutError(f"{name or self.index} still indexing after {timeout_s} s")
            time.sleep(0.05)

    def search_index(self, name: str, query: Query, k: int) -> list[Hit]:
        """Unfiltered KNN in another index over this backend's keys (see owner_index)."""
        _, args = self._knn("*", query.need_vector(self.name), k)
        return self._parse(self.r.execute_command("FT.SEARCH", name, *args))

    def drop_index(self, name: str) -> None:
        self.r.execute_command("FT.DROPINDEX", name)  # keeps the documents: they belong to self.index

    def executed_policy(self, query: Query, view: View | None, k: int) -> str:
        """What the engine ran for this query, read from FT.PROFILE: HNSW (no filter), ADHOC_BF or BATCHES."""
        prof = _get(self.profile(query, view, k), "profile") or {}
        its = _get(prof, "Iterators profile") or []
        vec = next((i for i in its if _s(_get(i, "Type")) == "VECTOR"), None)
        if vec is None:
            return "other"
        if _get(vec, "Batches number") is not None:
            return "BATCHES"
        return "ADHOC_BF" if _get(vec, "Child iterator") is not None else "HNSW"

    def server_usec(self) -> tuple[int, int]:
        """(calls, microseconds) the server has spent in FT.SEARCH so far (INFO commandstats)."""
        st = self.r.info("commandstats").get("cmdstat_FT.SEARCH") or {}
        return int(st.get("calls", 0)), int(st.get("usec", 0))

    # -- bookkeeping ------------------------------------------------------------------
    def info(self) -> dict:
        raw = self.r.execute_command("FT.INFO", self.index)
        if isinstance(raw, list):
            raw = {raw[i]: raw[i + 1] for i in range(0, len(raw), 2)}
        return {_s(k): v for k, v in raw.items()}

    def __len__(self) -> int:
        return int(_s(self.info()["num_docs"]))

    def footprint(self) -> dict:
        info = self.info()

        def mb(key):
            v = info.get(key)
            return None if v is None else int(float(_s(v)) * 1024 * 1024)

        mem = self.r.info("memory")
        return {"units": int(_s(info["num_docs"])), "vector_index_bytes": mb("vector_index_sz_mb"),
                "inverted_index_bytes": mb("inverted_sz_mb"), "doc_table_bytes": mb("doc_table_size_mb"),
                "server_used_memory_bytes": int(mem["used_memory"])}

    def describe(self) -> dict:
        return {"backend": self.name, "index": self.index, "m": self.m, "ef_construction": self.ef_construction,
                "ef_runtime": self.ef_runtime, "hybrid_policy": self.hybrid_policy or "engine",
                "batch_size": self.batch_size}

    def close(self) -> None:
        if self.drop_on_close:
            self.drop()
        self.r.close()
