"""Redis vector sets (built into Redis 8): VADD with JSON attributes, VSIM with FILTER.

One vector set per org (the org part of the view selects the key): a filter on
org inside one big set would make every view a tiny fraction of the set, which
the bounded filter effort of VSIM truncates. The rest of the view is a FILTER
expression over the attributes, e.g.

    (.owner == "a0" or .visibility == "public") and .time >= 1684540800.0

Quantisation Q8 (the engine's default) or NOQUANT (fp32); M 16 and build
exploration factor 200 like the other HNSW indexes. Search effort (EF) and
filter effort (FILTER-EF) default to the engine's own defaults unless set.
VSIM scores are similarities in [0, 1] (1 - cosine distance / 2); they are
mapped back to cosine so every dense backend reports the same scale.
Filter strings have no escape mechanism (a backslash is kept verbatim), so a
value is quoted with a quote character it does not contain; values with both
quote characters are rejected.
"""

from __future__ import annotations

import hashlib
import json
from typing import Sequence

import numpy as np

from ..units import Unit
from ..views import View
from .base import Backend, Hit, Query, auto_name, check_units, register


def filter_literal(value: str) -> str:
    for q in ('"', "'"):
        if q not in value and not value.endswith("\\"):
            return f"{q}{value}{q}"
    raise ValueError(f"value {value!r} cannot be written in a vector-set FILTER expression")


def compile_view(view: View) -> str | None:
    """The view minus its org (which picks the key) as a FILTER expression; None = no filter."""
    parts = []
    if view.scope == "own":
        parts.append(f".owner == {filter_literal(view.agent)}")
    elif view.scope == "shared":
        parts.append(f"(.owner == {filter_literal(view.agent)} or .visibility == \"public\")")
    if view.since is not None:
        parts.append(f".time >= {float(view.since)!r}")
    if view.until is not None:
        parts.append(f".time <= {float(view.until)!r}")
    return " and ".join(parts) if parts else None


@register("vectorset")
class VectorSet(Backend):
    kind = "dense"
    service = "redis"
    filter_mode = "in-search filter"  # VSIM FILTER: the expression is evaluated during the graph search
    in_place_visibility = True  # VSETATTR changes the attributes, not the graph
    approximate = True
    isolation_keys = ("prefix",)
    query_settings = ("ef", "filter_ef")

    @classmethod
    def private_params(cls, name: str) -> dict:
        return {"prefix": name.replace("_", ":"), "drop_existing": True, "drop_on_close": True}

    @classmethod
    def engine_versions(cls) -> dict:
        from .redis_qe import redis_modules

        mods, v = redis_modules()
        vs = mods.get("vectorset")
        # vector sets ship inside Redis 8 and report the server's version number
        return {**v, "vectorset": (f"{vs // 10000}.{vs // 100 % 100}.{vs % 100}" if vs else None)
                if "vectorset" in mods else None}

    @classmethod
    def engine_label(cls, versions: dict) -> str:
        return f"Redis {versions.get('redis_server')} vector sets {versions.get('vectorset')}"

    @classmethod
    def server_memory(cls) -> int | None:
        from .redis_qe import redis_used_memory

        return redis_used_memory()

    def __init__(self, prefix: str | None = None, url: str | None = None, quant: str = "Q8", m: int = 16,
                 ef_construction: int = 200, ef: int | None = None, filter_ef: int | None = None,
                 drop_existing: bool = False, drop_on_close: bool | None = None, **_):
        import redis

        from ... import services

        if prefix is None:  # private keys per instance
            prefix, drop_on_close = auto_name("memspace:vset"), True if drop_on_close is None else drop_on_close

        if quant not in ("Q8", "NOQUANT", "BIN"):
            raise ValueError(f"quant must be Q8, NOQUANT or BIN, got {quant!r}")
        self.url = url or services.settings().redis_url
        self.r = redis.Redis.from_url(self.url, protocol=3)
        self.prefix, self.quant, self.m, self.ef_construction = prefix, quant, m, ef_construction
        self.ef, self.filter_ef, self.drop_on_close = ef, filter_ef, bool(drop_on_close)
        self.registry = f"{prefix}:orgs"  # the set of org keys this backend wrote
        if drop_existing:
            self.drop()

    def key(self, org: str) -> str:
        # hashed: an org name with spaces or braces must not change key semantics
        return f"{self.prefix}:{hashlib.sha256(org.encode()).hexdigest()[:20]}"

    def drop(self) -> None:
        keys = [k for k in self.r.smembers(self.registry)]
        if keys:
            self.r.delete(*keys)
        self.r.delete(self.registry)

    def add(self, units: Sequence[Unit], vectors: np.ndarray | None = None) -> None:
        vectors = check_units(units, vectors, dense=True)
        for i in range(0, len(units), 500):
            pipe = self.r.pipeline(transaction=False)
            for u, v in zip(units[i:i + 500], vectors[i:i + 500]):
                filter_literal(u.owner)  # validate: the owner must be writable in a FILTER
                attrs = json.dumps({"owner": u.owner, "visibility": u.visibility, "time": float(u.time),
                                    "org": u.org}, ensure_ascii=False)
                k = self.key(u.org)
                pipe.sadd(self.registry, k)
                pipe.execute_command("VADD", k, "FP32", np.asarray(v, dtype=np.float32).tobytes(), u.uid,
                                     self.quant, "EF", str(self.ef_construction), "SETATTR", attrs, "M", str(self.m))
            pipe.execute()

    def delete(self, uids: Sequence[str]) -> None:
        pipe = self.r.pipeline(transaction=False)
        for uid in uids:
            org = uid.rsplit("|", 3)[0]  # Unit.uid is org|session|round|chunk
            pipe.execute_command("VREM", self.key(org), uid)
        pipe.execute()

    def set_visibility(self, changes: dict[str, str]) -> dict:
        """Change units' visibility in place (uid -> visibility): VSETATTR rewrites the JSON attributes
        only, the graph is not touched."""
        import json as _json

        keys = {}
        for uid in changes:
            keys.setdefault(self.key(uid.rsplit("|", 3)[0]), []).append(uid)
        n = 0
        for key, uids in keys.items():
            for i in range(0, len(uids), 500):
                part = uids[i:i + 500]
                pipe = self.r.pipeline(transaction=False)
                for uid in part:
                    pipe.execute_command("VGETATTR", key, uid)
                attrs = pipe.execute()
                pipe = self.r.pipeline(transaction=False)
                for uid, raw in zip(part, attrs):
                    a = _json.loads(raw)
                    a["visibility"] = changes[uid]
                    pipe.execute_command("VSETATTR", key, uid, _json.dumps(a, ensure_ascii=False))
                n += sum(1 for x in pipe.execute() if x)
        return {"updated": n}

    def _vsim(self, key: str, vec: np.ndarray, k: int, flt: str | None) -> list[Hit]:
        args = ["VSIM", key, "FP32", vec.astype(np.float32).tobytes(), "WITHSCORES", "COUNT", str(k)]
        if self.ef:
            args += ["EF", str(self.ef)]
        if flt:
            args += ["FILTER", flt]
            if self.filter_ef:
                args += ["FILTER-EF", str(self.filter_ef)]
        res = self.r.execute_command(*args)
        if isinstance(res, dict):
            pairs = [(k_.decode() if isinstance(k_, bytes) else k_, float(s)) for k_, s in res.items()]
        else:  # RESP2: flat [elem, score, ...]
            pairs = [(res[i].decode(), float(res[i + 1])) for i in range(0, len(res), 2)]
        return [Hit(u, 2.0 * s - 1.0) for u, s in pairs]

    def search(self, query: Query, view: View | None, k: int) -> list[Hit]:
        if k <= 0:
            return []
        vec = query.need_vector(self.name)
        if view is None:  # no filter at all: every org's set, merged
            hits = [h for key in sorted(self.r.smembers(self.registry)) for h in self._vsim(key.decode(), vec, k, None)]
        else:
            hits = self._vsim(self.key(view.org), vec, k, compile_view(view))
        hits.sort(key=lambda h: (-h.score, h.uid))
        return hits[:k]

    def __len__(self) -> int:
        return sum(int(self.r.execute_command("VCARD", k)) for k in self.r.smembers(self.registry))

    def footprint(self) -> dict:
        keys = list(self.r.smembers(self.registry))
        mem = sum(int(self.r.memory_usage(k, samples=0) or 0) for k in keys)
        return {"units": len(self), "sets": len(keys), "memory_bytes": mem, "quant": self.quant}

    def describe(self) -> dict:
        return {"backend": self.name, "quant": self.quant, "m": self.m, "ef_construction": self.ef_construction,
                "ef": self.ef or "default", "filter_ef": self.filter_ef or "default"}

    def close(self) -> None:
        if self.drop_on_close:
            self.drop()
        self.r.close()
