"""PostgreSQL + pgvector (>= 0.8) through psycopg 3: HNSW with the view as a WHERE clause.

pgvector's HNSW scan yields at most `hnsw.ef_search` candidates (default 40) and
PostgreSQL applies the WHERE clause after the index scan. For a selective view
this post-filtering returns fewer than k rows -- the truncation of Proposition 2.
pgvector 0.8's iterative index scans (`hnsw.iterative_scan` = relaxed_order or
strict_order) keep scanning until k rows pass, up to `hnsw.max_scan_tuples`.
A b-tree on owner lets the planner choose an exact filtered scan instead; which
plan it took is visible with `explain`.

Neither holds when one table carries many small views (the personalization study: every user's
dozen items in one table, a view per user). A view admitting a fraction 1/N of the rows needs
about N x k tuples scanned to find k of them, so post-filtering collapses past a few hundred users
and iterative scans stop at `max_scan_tuples`. `exact_max_rows` handles it at the source: the
view's rows are read first (a b-tree on org, created with it), and when they are at most that
many the search is exact over them -- a pre-filter whose cost is the view's size, not the
table's; larger views still go to HNSW (with the configured iterative scan). One statement does
both the count and the exact answer; `last_plan()` says which path the calling thread's last
search took.

Bulk loads into an empty table go through binary COPY and build the HNSW index
afterwards (much faster than growing the graph row by row); later adds are
upserts through a staging table, so adding a unit twice replaces it.
"""

from __future__ import annotations

import contextlib

import re
import struct
import threading
from typing import Sequence

import numpy as np

from ..units import Unit
from ..views import View
from .base import Backend, Hit, Query, auto_name, check_units, register

ITERATIVE = ("off", "relaxed_order", "strict_order")
_IDENT = re.compile(r"^[a-z_][a-z0-9_]{0,50}$")  # + "_hnsw" stays within 63
BULK_MIN = 2000  # an empty table receiving at least this many rows is loaded first, indexed after


DEFAULT_EF_SEARCH = 40  # pgvector's default


def plan_summary(plan: str) -> str:
    """The scan line of an EXPLAIN: which index (or none) answered the query."""
    for line in plan.splitlines():
        if "Scan" in line:
            return line.strip().lstrip("->").strip().split("  (cost")[0]
    return plan.splitlines()[0] if plan else ""


def vector_text(v: np.ndarray) -> str:
    return "[" + ",".join(repr(float(x)) for x in np.asarray(v, dtype=np.float32)) + "]"


def compile_view(view: View | None) -> tuple[str, list]:
    """The view as an SQL predicate with parameters."""
    if view is None:
        return "TRUE", []
    parts, args = ["org = %s"], [view.org]
    if view.scope == "own":
        parts.append("owner = %s")
        args.append(view.agent)
    elif view.scope == "shared":
        parts.append("(owner = %s OR visibility = 'public')")
        args.append(view.agent)
    if view.since is not None:
        parts.append("time >= %s")
        args.append(float(view.since))
    if view.until is not None:
        parts.append("time <= %s")
        args.append(float(view.until))
    return " AND ".join(parts), args


def _copy_binary(units: Sequence[Unit], vectors: np.ndarray) -> bytes:
    """COPY ... (FORMAT BINARY) payload: uid, org, owner, visibility, time, embedding."""
    out = [b"PGCOPY\n\xff\r\n\x00", struct.pack("!ii", 0, 0)]
    dim = vectors.shape[1]
    vhead = struct.pack("!ihh", 4 + 4 * dim, dim, 0)
    for u, v in zip(units, vectors):
        row = [struct.pack("!h", 6)]
        for s in (u.uid, u.org, u.owner, u.visibility):
            b = s.encode("utf-8")
            row += [struct.pack("!i", len(b)), b]
        row.append(struct.pack("!id", 8, float(u.time)))
        row += [vhead, np.asarray(v, dtype=">f4").tobytes()]
        out.append(b"".join(row))
    out.append(struct.pack("!h", -1))
    return b"".join(out)


@register("pgvector")
class PgVector(Backend):
    kind = "dense"
    service = "postgres"
    filter_mode = "post-filter"  # the WHERE clause is applied after the HNSW index scan
    in_place_visibility = True  # an UPDATE of visibility is a HOT update on half-full pages
    approximate = True
    storage = "disk"
    isolation_keys = ("table",)
    query_settings = ("ef_search", "iterative_scan", "max_scan_tuples", "owner_btree", "overfetch", "exact_max_rows")

    # heap pages half full: the 50% split's visibility change is then a HOT update that leaves the
    # HNSW graph alone (on full pages every changed row is re-inserted into the graph)
    study_build_defaults = {"fillfactor": 50}

    @classmethod
    def private_params(cls, name: str) -> dict:
        return {"table": name.lower(), "drop_existing": True, "drop_on_close": True}

    @classmethod
    def engine_versions(cls) -> dict:
        import psycopg

        from ... import services

        with psycopg.connect(services.settings().pg_dsn) as c:
            pg = c.execute("SHOW server_version").fetchone()[0]
            row = c.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
        return {"postgresql": pg, "pgvector": row[0] if row else None}

    @classmethod
    def engine_label(cls, versions: dict) -> str:
        return f"PostgreSQL {versions.get('postgresql')} + pgvector {versions.get('pgvector')}"

    @classmethod
    def candidates(cls, query: dict) -> int | None:
        return int(query.get("ef_search", DEFAULT_EF_SEARCH))  # ef_search: the candidates the filter sees

    def candidate_list(self) -> int | None:
        return int(self.ef_search)

    @classmethod
    def probes_per_query(cls, query: dict) -> int:
        # EXPLAIN ANALYZE, and with iterative scan off the post-filter survivors statement
        return 1 + (query.get("iterative_scan", "off") == "off")

    def probe(self, query: Query, view: View | None, k: int) -> dict:
        ms, text = self.statement(query, view, k)
        return {"server_ms": ms, "plan": plan_summary(text)}

    @classmethod
    def query_filter(cls, view: View | None, plan: str | None, query: dict) -> str:
        if view is None:
            return "no filter"
        if "hnsw" not in (plan or ""):
            return "pre-filter"  # the planner chose an exact scan (e.g. through the owner b-tree)
        return "post-filter" if query.get("iterative_scan", "off") == "off" else "iterative scan"

    def prepare_queries(self) -> None:
        with self._conn() as c, c.transaction():
            self._ensure_indexes(c)
            c.execute(f"ANALYZE {self.table}")

    def full_footprint(self) -> dict:
        """With the owner b-tree too; the heap is ~2x at fillfactor 50 (room for HOT updates), the HNSW
        index is not."""
        self.owner_btree = True
        with self._conn() as c, c.transaction():
            self._ensure_indexes(c)
        return {**self.footprint(), "fillfactor": self.fillfactor or 100}

    def __init__(self, table: str | None = None, dsn: str | None = None, dim: int = 384, m: int = 16,
                 ef_construction: int = 200, ef_search: int = 40, iterative_scan: str = "off",
                 max_scan_tuples: int | None = None, owner_btree: bool = False, overfetch: int | None = None,
                 fillfactor: int | None = None, exact_max_rows: int | None = None, drop_existing: bool = False,
                 drop_on_close: bool | None = None, **_):
        from ... import services

        if table is None:  # a private table per instance
            table, drop_on_close = auto_name("memspace").lower(), True if drop_on_close is None else drop_on_close

        if not _IDENT.match(table):
            raise ValueError(f"table name {table!r} must match {_IDENT.pattern}")
        if iterative_scan not in ITERATIVE:
            raise ValueError(f"iterative_scan must be one of {ITERATIVE}, got {iterative_scan!r}")
        self.dsn = dsn or services.settings().pg_dsn
        self.table, self.dim, self.m, self.ef_construction = table, dim, m, ef_construction
        self.ef_search, self.iterative_scan, self.max_scan_tuples = ef_search, iterative_scan, max_scan_tuples
        self.owner_btree, self.drop_on_close = owner_btree, bool(drop_on_close)
        self.overfetch = overfetch  # over-fetch then rerank: inner LIMIT overfetch, outer LIMIT k
        self.fillfactor = fillfactor  # heap pages left this full: room for HOT updates (set_visibility)
        if exact_max_rows is not None and int(exact_max_rows) < 1:
            raise ValueError(f"exact_max_rows must be a positive number of rows or null, got {exact_max_rows!r}")
        self.exact_max_rows = int(exact_max_rows) if exact_max_rows is not None else None
        self._local = threading.local()
        self._conns: list = []
        self._conns_lock = threading.Lock()
        # DDL only (the bulk path drops and rebuilds the HNSW index): never held by an ordinary insert, so one
        # user's write never waits on another's here (PostgreSQL orders concurrent inserts by row)
        self._ddl_lock = threading.Lock()
        with self._conn() as c, c.transaction():
            if drop_existing:
                c.execute(f"DROP TABLE IF EXISTS {table}")
            c.execute(f"CREATE TABLE IF NOT EXISTS {table} (uid text PRIMARY KEY, org text NOT NULL, "
                      f"owner text NOT NULL, visibility text NOT NULL, time double precision NOT NULL, "
                      f"embedding vector({dim}) NOT NULL)"
                      + (f" WITH (fillfactor = {int(fillfactor)})" if fillfactor else ""))
            self._ensure_indexes(c)

    # -- connections: one per thread ---------------------------------------------------
    def _conn(self):
        import psycopg

        c = getattr(self._local, "conn", None)
        if c is None or c.closed:
            c = psycopg.connect(self.dsn)
            self._local.conn = c
            with self._conns_lock:
                self._conns.append(c)
        return _NoClose(c)

    def _ensure_indexes(self, c) -> None:
        t = self.table
        c.execute(f"CREATE INDEX IF NOT EXISTS {t}_hnsw ON {t} USING hnsw (embedding vector_cosine_ops) "
                  f"WITH (m = {int(self.m)}, ef_construction = {int(self.ef_construction)})")
        if self.owner_btree:
            c.execute(f"CREATE INDEX IF NOT EXISTS {t}_owner ON {t} (owner)")
        else:
            c.execute(f"DROP INDEX IF EXISTS {t}_owner")
        if self.exact_max_rows:  # the exact path reads a view's rows through it
            c.execute(f"CREATE INDEX IF NOT EXISTS {t}_org ON {t} (org)")

    # -- writes -----------------------------------------------------------------------
    def add(self, units: Sequence[Unit], vectors: np.ndarray | None = None) -> None:
        vectors = check_units(units, vectors, dense=True)
        if not len(units):
            return
        t = self.table
        payload = _copy_binary(units, vectors)
        big = len(units) >= BULK_MIN  # a candidate for the bulk path, whose DDL is serialised; nothing else is
        with (self._ddl_lock if big else contextlib.nullcontext()), self._conn() as c, c.transaction():
            bulk = big and c.execute(f"SELECT NOT EXISTS (SELECT 1 FROM {t})").fetchone()[0]
            if bulk:
                c.execute(f"DROP INDEX IF EXISTS {t}_hnsw")
            c.execute(f"CREATE TEMP TABLE stage (LIKE {t}) ON COMMIT DROP")
            with c.cursor().copy("COPY stage (uid, org, owner, visibility, time, embedding) FROM STDIN "
                                 "WITH (FORMAT BINARY)") as cp:
                cp.write(payload)
            c.execute(f"INSERT INTO {t} SELECT DISTINCT ON (uid) * FROM stage ON CONFLICT (uid) DO UPDATE SET "
                      "org = EXCLUDED.org, owner = EXCLUDED.owner, visibility = EXCLUDED.visibility, "
                      "time = EXCLUDED.time, embedding = EXCLUDED.embedding")
            if bulk:
                self._ensure_indexes(c)
        if len(units) >= 100:  # planner statistics decide between the HNSW and the b-tree plan
            with self._conn() as c, c.transaction():
                c.execute(f"ANALYZE {t}")

    def delete(self, uids: Sequence[str]) -> None:
        with self._conn() as c, c.transaction():
            c.execute(f"DELETE FROM {self.table} WHERE uid = ANY(%s)", (list(uids),))

    # -- search -----------------------------------------------------------------------
    def _settings(self, c) -> None:
        c.execute("SELECT set_config('hnsw.ef_search', %s, true), set_config('hnsw.iterative_scan', %s, true)",
                  (str(self.ef_search), self.iterative_scan))
        if self.max_scan_tuples:
            c.execute("SELECT set_config('hnsw.max_scan_tuples', %s, true)", (str(self.max_scan_tuples),))

    def _sql(self, view: View | None, k: int, vec: np.ndarray) -> tuple[str, list]:
        where, args = compile_view(view)
        q = vector_text(vec)
        sql = (f"SELECT uid, embedding <=> %s::vector AS d FROM {self.table} WHERE {where} "
               f"ORDER BY embedding <=> %s::vector LIMIT %s")
        if self.overfetch:  # pgvector's documented form for relaxed order: materialise K' rows, re-sort, keep k
            return (f"WITH c AS MATERIALIZED ({sql}) SELECT uid, d FROM c ORDER BY d LIMIT %s",
                    [q, *args, q, max(k, int(self.overfetch)), k])
        return sql, [q, *args, q, k]

    def _exact_sql(self, view: View, k: int, vec: np.ndarray) -> tuple[str, list]:
        """At most exact_max_rows + 1 rows of the view (materialised, so the view is applied first), their
        count, and the k nearest of them by exact distance: exact when the count is within the limit."""
        where, args = compile_view(view)
        q = vector_text(vec)
        sql = (f"WITH v AS MATERIALIZED (SELECT uid, embedding FROM {self.table} WHERE {where} LIMIT %s) "
               f"SELECT uid, embedding <=> %s::vector AS d, (SELECT count(*) FROM v) AS n FROM v "
               f"ORDER BY d, uid LIMIT %s")
        return sql, [*args, self.exact_max_rows + 1, q, k]

    def _hnsw_plan(self) -> dict:
        return {"path": "hnsw", "ef_search": int(self.ef_search), "iterative_scan": self.iterative_scan,
                "max_scan_tuples": self.max_scan_tuples}

    def search(self, query: Query, view: View | None, k: int) -> list[Hit]:
        if k <= 0:
            return []
        vec = query.need_vector(self.name)
        with self._conn() as c, c.transaction():
            if self.exact_max_rows and view is not None:
                sql, args = self._exact_sql(view, k, vec)
                rows = c.execute(sql, args).fetchall()
                admitted = int(rows[0][2]) if rows else 0
                if admitted <= self.exact_max_rows:
                    self._local.plan = {"path": "exact", "view_rows": admitted, "exact_max_rows": self.exact_max_rows}
                    return [Hit(u, 1.0 - float(d)) for u, d, _n in rows]
                self._local.plan = {**self._hnsw_plan(), "view_rows": f"> {self.exact_max_rows}"}
            else:
                self._local.plan = self._hnsw_plan()
            sql, args = self._sql(view, k, vec)
            self._settings(c)
            rows = c.execute(sql, args).fetchall()
        # relaxed_order may return rows slightly out of order: re-sort
        return sorted((Hit(u, 1.0 - float(d)) for u, d in rows), key=lambda h: (-h.score, h.uid))

    def last_plan(self) -> dict | None:
        """How this thread's last search ran: {"path": "exact", "view_rows"} (fixed by this code), or "hnsw" with
        the statement's settings. Which scan the planner used for the latter is not recorded: a separate
        EXPLAIN of the same statement is no faithful record of it (measured at 1,500 users: EXPLAIN issued
        right after each read said "Seq Scan" for reads that returned 0.3 items on average, i.e. were
        post-filtered; statistics change mid-stage and psycopg prepares repeated statements). The kernel's
        short-read count is what shows the loss."""
        return getattr(self._local, "plan", None)

    def explain_exact(self, query: Query, view: View, k: int) -> str:
        """EXPLAIN of the exact path's statement (the plan PostgreSQL uses to read the view's rows)."""
        sql, args = self._exact_sql(view, k, query.need_vector(self.name))
        with self._conn() as c, c.transaction():
            rows = c.execute(f"EXPLAIN (COSTS) {sql}", args).fetchall()
        return "\n".join(r[0] for r in rows)

    def explain(self, query: Query, view: View | None, k: int, analyze: bool = False) -> str:
        """The plan PostgreSQL chose for this search (index scan on HNSW, on the owner b-tree, or a seq scan)."""
        sql, args = self._sql(view, k, query.need_vector(self.name))
        opts = "ANALYZE, BUFFERS, " if analyze else ""
        with self._conn() as c, c.transaction():
            self._settings(c)
            rows = c.execute(f"EXPLAIN ({opts}COSTS) {sql}", args).fetchall()
        return "\n".join(r[0] for r in rows)

    def statement(self, query: Query, view: View | None, k: int) -> tuple[float, str]:
        """(server-side execution time in ms, the plan's text) of this search: EXPLAIN (ANALYZE, TIMING OFF)."""
        plan = self.explain_analyze(query, view, k)
        ms = next(float(ln.split(":")[1].split()[0]) for ln in plan.splitlines() if ln.strip().startswith("Execution Time"))
        return ms, plan

    def explain_analyze(self, query: Query, view: View | None, k: int) -> str:
        sql, args = self._sql(view, k, query.need_vector(self.name))
        with self._conn() as c, c.transaction():
            self._settings(c)
            rows = c.execute(f"EXPLAIN (ANALYZE, TIMING OFF, COSTS) {sql}", args).fetchall()
        return "\n".join(r[0] for r in rows)

    def post_filter_survivors(self, query: Query, view: View | None, k_prime: int) -> dict:
        """What the post-filter kept: the same search with LIMIT k_prime, EXPLAIN ANALYZE'd. With the
        HNSW plan and iterative scan off, the index yields at most ef_search candidates whatever the
        LIMIT, so the rows returned are the survivors of the filter before truncation to k:
        {"survivors", "candidates" (survivors + rows removed by the filter), "plan"}; survivors and
        candidates are None when the planner chose a plan without the HNSW index (a pre-filter)."""
        import json

        where, args = compile_view(view)
        q = vector_text(query.need_vector(self.name))
        sql = (f"SELECT uid FROM {self.table} WHERE {where} ORDER BY embedding <=> %s::vector LIMIT %s")
        with self._conn() as c, c.transaction():
            self._settings(c)
            raw = c.execute(f"EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) {sql}", [*args, q, int(k_prime)]).fetchone()[0]
        plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
        nodes, types = [plan], []
        while nodes:
            n = nodes.pop()
            types.append(n["Node Type"] + (f" on {n['Index Name']}" if "Index Name" in n else ""))
            if n.get("Index Name") == f"{self.table}_hnsw":
                kept = int(n["Actual Rows"])
                return {"survivors": kept, "candidates": kept + int(n.get("Rows Removed by Filter", 0)),
                        "plan": types[-1]}
            nodes += n.get("Plans", [])
        return {"survivors": None, "candidates": None, "plan": "; ".join(types)}

    def set_visibility(self, changes: dict[str, str]) -> dict:
        """Change units' visibility in place (uid -> visibility). Visibility is in no index, so with room
        on the heap pages (see `fillfactor`) PostgreSQL updates the rows HOT: the HNSW graph is not
        touched. Returns {"updated", "hot"} as counted by PostgreSQL for this transaction."""
        by_vis: dict[str, list[str]] = {}
        for uid, vis in changes.items():
            by_vis.setdefault(vis, []).append(uid)
        with self._conn() as c, c.transaction():
            for vis, uids in by_vis.items():
                c.execute(f"UPDATE {self.table} SET visibility = %s WHERE uid = ANY(%s)", (vis, uids))
            upd, hot = c.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relid = %s::regclass",
                                 (self.table,)).fetchone()
        with self._conn() as c, c.transaction():
            c.execute(f"ANALYZE {self.table}")
        return {"updated": int(upd), "hot": int(hot)}

    # -- bookkeeping ------------------------------------------------------------------
    def __len__(self) -> int:
        with self._conn() as c, c.transaction():
            return c.execute(f"SELECT COUNT(*) FROM {self.table}").fetchone()[0]

    def footprint(self) -> dict:
        t = self.table
        with self._conn() as c, c.transaction():
            n = c.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
            table, total = c.execute("SELECT pg_table_size(%s), pg_total_relation_size(%s)", (t, t)).fetchone()
            hnsw = c.execute("SELECT pg_relation_size(to_regclass(%s))", (f"{t}_hnsw",)).fetchone()[0]
            owner = c.execute("SELECT pg_relation_size(to_regclass(%s))", (f"{t}_owner",)).fetchone()[0]
            org = c.execute("SELECT pg_relation_size(to_regclass(%s))", (f"{t}_org",)).fetchone()[0]
        return {"units": n, "table_bytes": table, "hnsw_index_bytes": hnsw, "owner_btree_bytes": owner,
                **({"org_btree_bytes": org} if org is not None else {}), "total_bytes": total}

    def versions(self) -> dict:
        with self._conn() as c, c.transaction():
            pg = c.execute("SHOW server_version").fetchone()[0]
            vec = c.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()[0]
        return {"postgres": pg, "pgvector": vec}

    def describe(self) -> dict:
        return {"backend": self.name, "table": self.table, "m": self.m, "ef_construction": self.ef_construction,
                "ef_search": self.ef_search, "iterative_scan": self.iterative_scan,
                "max_scan_tuples": self.max_scan_tuples or "default", "owner_btree": self.owner_btree,
                "overfetch": self.overfetch, "fillfactor": self.fillfactor or "default",
                "exact_max_rows": self.exact_max_rows}

    def drop(self) -> None:
        with self._conn() as c, c.transaction():
            c.execute(f"DROP TABLE IF EXISTS {self.table}")

    def close(self) -> None:
        if self.drop_on_close:
            self.drop()
        with self._conns_lock:
            for c in self._conns:
                c.close()
            self._conns.clear()


class _NoClose:
    """Context wrapper that leaves the thread's connection open (psycopg's `with conn` would close it)."""

    def __init__(self, c):
        self.c = c

    def __enter__(self):
        return self.c

    def __exit__(self, *exc):
        return False
