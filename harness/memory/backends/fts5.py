"""SQLite FTS5 BM25: one lexical index per view, and the shared variant with an owner column.

Per view (`fts5`, the memory space's lexical side): BM25's document frequencies
and average length are collection statistics, so a shared index would let units
outside the view change the ranking inside it -- a side channel (Proposition 1).
Each view key (org, scope, agent; without dates) therefore gets its own FTS5
table holding exactly the units that view admits, built the first time the view
is searched and kept current on every `add`. Date filters are applied inside the
query (the view's statistics do not depend on them).

Shared (`fts5_shared`, the backend study's "one FTS5 index with an owner column"):
one table for everything, the view applied as a WHERE clause after the match, so
its scores use collection-wide statistics.

Both use the tokenizer of the runtime's session store (`messages_fts` in
hermes_state), read from the installed runtime so it follows the runtime.
Queries are the free-text tokens OR-ed together, each quoted: the runtime's own
tool passes raw text to MATCH, where `?` or an apostrophe is a syntax error.
"""

from __future__ import annotations

import functools
import re
import sqlite3
import threading
from typing import Sequence

import numpy as np

from ..units import Unit
from ..views import View
from .base import Backend, Hit, Query, register

MAX_QUERY_TOKENS = 64
_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)  # unicode61: letters and digits; '_' and punctuation separate


@functools.lru_cache(maxsize=1)
def runtime_tokenizer() -> tuple[str, str]:
    """(tokenize option, where it came from) of the runtime's `messages_fts` table.

    Read from the installed runtime's schema (FTS_SQL: hermes_state_common in 0.21, hermes_state
    before), loaded through harness.runtime.hermes, the one place that imports the runtime.
    """
    try:
        from harness.runtime.hermes import load

        rt = load()
        state, ver = rt.state_module, rt.label
    except ImportError:
        return "unicode61", "FTS5 default (the runtime is not installed)"
    try:  # 0.21.x keeps it in hermes_state_common (hermes_state re-exports it with a deprecation warning)
        from hermes_state_common import FTS_SQL as sql
    except ImportError:
        sql = getattr(state, "FTS_SQL", "")
    m = re.search(r"messages_fts\s+USING\s+fts5\s*\((.*?)\)\s*;", sql, re.S | re.I)
    if not m:
        raise RuntimeError("the runtime's FTS_SQL no longer defines messages_fts; update fts5.runtime_tokenizer")
    t = re.search(r"tokenize\s*=\s*(['\"])(.*?)\1", m.group(1), re.S)
    if t:
        return t.group(2), f"the runtime's FTS_SQL ({ver})"
    # no tokenize option: FTS5's default, unicode61 with its default options
    return "unicode61", f"the runtime's FTS_SQL has no tokenize option -> FTS5 default ({ver})"


def fts_query(text: str) -> str | None:
    """Free text -> an FTS5 query: distinct tokens, each quoted, OR-ed. None when no token."""
    toks = list(dict.fromkeys(t.lower() for t in _TOKEN.findall(text)))[:MAX_QUERY_TOKENS]
    if not toks:
        return None
    return " OR ".join(f'"{t}"' for t in toks)


def view_sql(view: View | None, prefix: str = "") -> tuple[str, list]:
    """The view (with dates) as an SQL predicate over org/owner/visibility/time columns."""
    if view is None:
        return "1", []
    p = prefix
    parts, args = [f"{p}org = ?"], [view.org]
    if view.scope == "own":
        parts.append(f"{p}owner = ?")
        args.append(view.agent)
    elif view.scope == "shared":
        parts.append(f"({p}owner = ? OR {p}visibility = 'public')")
        args.append(view.agent)
    if view.since is not None:
        parts.append(f"{p}time >= ?")
        args.append(float(view.since))
    if view.until is not None:
        parts.append(f"{p}time <= ?")
        args.append(float(view.until))
    return " AND ".join(parts), args


class _SQLite:
    def __init__(self, path: str | None):
        self._lock = threading.RLock()
        self.db = sqlite3.connect(path or ":memory:", check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=" + ("WAL" if path else "MEMORY"))
        self.tokenizer, self.tokenizer_source = runtime_tokenizer()
        self.path = path

    def _size(self, like: str | None = None) -> int | None:
        try:
            if like is None:
                row = self.db.execute("SELECT SUM(pgsize) FROM dbstat").fetchone()
            else:
                row = self.db.execute("SELECT SUM(pgsize) FROM dbstat WHERE name LIKE ?", (like,)).fetchone()
            return int(row[0] or 0)
        except sqlite3.OperationalError:  # dbstat not compiled in
            if like is None:
                ps = self.db.execute("PRAGMA page_size").fetchone()[0]
                return ps * self.db.execute("PRAGMA page_count").fetchone()[0]
            return None


class _Lexical:
    """What both FTS5 backends say about themselves: in process, lexical, SQLite's version."""

    filter_mode = "lexical"

    @classmethod
    def engine_versions(cls) -> dict:
        return {"sqlite": sqlite3.sqlite_version}

    @classmethod
    def engine_label(cls, versions: dict) -> str:
        return f"SQLite {versions.get('sqlite')} FTS5"


@register("fts5")
class FTS5PerView(_Lexical, Backend, _SQLite):
    """One FTS5 table per view key; the memory space's lexical index."""

    kind = "lexical"

    def __init__(self, path: str | None = None, **_ignored):
        _SQLite.__init__(self, path)
        self.db.executescript(
            """
            CREATE TABLE IF NOT EXISTS units (id INTEGER PRIMARY KEY, uid TEXT UNIQUE NOT NULL, org TEXT NOT NULL,
                owner TEXT NOT NULL, visibility TEXT NOT NULL, time REAL NOT NULL, text TEXT NOT NULL);
            CREATE INDEX IF NOT EXISTS units_org ON units(org, owner);
            CREATE TABLE IF NOT EXISTS views (key TEXT PRIMARY KEY, tab TEXT NOT NULL, org TEXT, scope TEXT, agent TEXT);
            """
        )
        self._views: dict[str, tuple[View | None, str]] = {}
        for key, tab, org, scope, agent in self.db.execute("SELECT key, tab, org, scope, agent FROM views"):
            self._views[key] = (View(org, agent, scope) if org is not None else None, tab)

    # -- writes ---------------------------------------------------------------------
    def add(self, units: Sequence[Unit], vectors: np.ndarray | None = None) -> None:
        with self._lock:
            self.db.execute("BEGIN")
            try:
                for u in units:
                    row = self.db.execute("SELECT id FROM units WHERE uid = ?", (u.uid,)).fetchone()
                    if row:
                        rid = row[0]
                        self.db.execute("UPDATE units SET org=?, owner=?, visibility=?, time=?, text=? WHERE id=?",
                                        (u.org, u.owner, u.visibility, u.time, u.text, rid))
                        for _, tab in self._views.values():
                            self.db.execute(f"DELETE FROM {tab} WHERE rowid = ?", (rid,))
                    else:
                        rid = self.db.execute("INSERT INTO units (uid, org, owner, visibility, time, text) "
                                              "VALUES (?,?,?,?,?,?)",
                                              (u.uid, u.org, u.owner, u.visibility, u.time, u.text)).lastrowid
                    # a unit enters the lexical index of EVERY existing view that contains it
                    for v, tab in self._views.values():
                        if v is None or v.admits(u):
                            self.db.execute(f"INSERT INTO {tab} (rowid, text, time) VALUES (?,?,?)", (rid, u.text, u.time))
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise

    def delete(self, uids: Sequence[str]) -> None:
        with self._lock:
            for uid in uids:
                row = self.db.execute("SELECT id FROM units WHERE uid = ?", (uid,)).fetchone()
                if row:
                    for _, tab in self._views.values():
                        self.db.execute(f"DELETE FROM {tab} WHERE rowid = ?", (row[0],))
                    self.db.execute("DELETE FROM units WHERE id = ?", row)

    # -- per-view indexes -----------------------------------------------------------------
    @staticmethod
    def _key(view: View | None) -> str:
        return "*" if view is None else view.key

    def ensure_view(self, view: View | None) -> str:
        """The FTS5 table of this view (without dates), built on first use from the units it admits."""
        key = self._key(view)
        with self._lock:
            hit = self._views.get(key)
            if hit:
                return hit[1]
            base = view.without_dates() if view is not None else None
            tab = f"v{1 + max((int(t[1:]) for _, t in self._views.values()), default=-1)}"
            where, args = view_sql(base)
            self.db.execute("BEGIN")
            try:
                self.db.execute(f"CREATE VIRTUAL TABLE {tab} USING fts5(text, time UNINDEXED, tokenize={_sqlquote(self.tokenizer)})")
                self.db.execute(f"INSERT INTO {tab} (rowid, text, time) SELECT id, text, time FROM units "
                                f"WHERE {where} ORDER BY id", args)
                self.db.execute("INSERT INTO views VALUES (?,?,?,?,?)",
                                (key, tab, base.org if base else None, base.scope if base else None,
                                 base.agent if base else None))
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self._views[key] = (base, tab)
            return tab

    def drop_view(self, view: View | None) -> None:
        """Forget one view's index (the backend study builds per-view indexes one at a time)."""
        key = self._key(view)
        with self._lock:
            hit = self._views.pop(key, None)
            if hit:
                self.db.execute(f"DROP TABLE {hit[1]}")
                self.db.execute("DELETE FROM views WHERE key = ?", (key,))

    def view_keys(self) -> list[str]:
        with self._lock:
            return list(self._views)

    def search(self, query: Query, view: View | None, k: int) -> list[Hit]:
        q = fts_query(query.text)
        if q is None or k <= 0:
            return []
        with self._lock:
            tab = self.ensure_view(view)
            sql = f"SELECT u.uid, -bm25({tab}) AS s FROM {tab} JOIN units u ON u.id = {tab}.rowid WHERE {tab} MATCH ?"
            args: list = [q]
            if view is not None and view.since is not None:
                sql += f" AND {tab}.time >= ?"
                args.append(float(view.since))
            if view is not None and view.until is not None:
                sql += f" AND {tab}.time <= ?"
                args.append(float(view.until))
            sql += " ORDER BY s DESC, u.uid LIMIT ?"
            rows = self.db.execute(sql, (*args, k)).fetchall()
        return [Hit(uid, float(s)) for uid, s in rows]

    def __len__(self) -> int:
        with self._lock:
            return self.db.execute("SELECT COUNT(*) FROM units").fetchone()[0]

    def footprint(self) -> dict:
        with self._lock:
            per_view = self._size("v%")
            return {"units": len(self), "views": len(self._views), "total_bytes": self._size(),
                    "view_index_bytes": per_view, "tokenizer": self.tokenizer}

    def describe(self) -> dict:
        return {"backend": self.name, "tokenizer": self.tokenizer, "tokenizer_source": self.tokenizer_source,
                "query": "distinct tokens, quoted, OR-ed; score = -bm25()"}

    def close(self) -> None:
        with self._lock:
            self.db.close()


@register("fts5_shared")
class FTS5Shared(_Lexical, Backend, _SQLite):
    """One FTS5 table for all units with an owner column; the view is a WHERE clause (collection-wide BM25)."""

    kind = "lexical"
    in_space = False  # collection-wide BM25 statistics: Proposition 1 excludes it from the agent runs

    def __init__(self, path: str | None = None, **_ignored):
        _SQLite.__init__(self, path)
        self.db.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS shared USING fts5(text, uid UNINDEXED, org UNINDEXED, "
            f"owner UNINDEXED, visibility UNINDEXED, time UNINDEXED, tokenize={_sqlquote(self.tokenizer)})"
        )
        # uid -> FTS rowid, so replacing or deleting a unit is a rowid lookup, not a scan
        self.db.execute("CREATE TABLE IF NOT EXISTS ids (id INTEGER PRIMARY KEY, uid TEXT UNIQUE NOT NULL)")

    def add(self, units: Sequence[Unit], vectors: np.ndarray | None = None) -> None:
        with self._lock:
            self.db.execute("BEGIN")
            try:
                for u in units:
                    row = self.db.execute("SELECT id FROM ids WHERE uid = ?", (u.uid,)).fetchone()
                    if row:
                        rid = row[0]
                        self.db.execute("DELETE FROM shared WHERE rowid = ?", (rid,))
                    else:
                        rid = self.db.execute("INSERT INTO ids (uid) VALUES (?)", (u.uid,)).lastrowid
                    self.db.execute("INSERT INTO shared (rowid, text, uid, org, owner, visibility, time) "
                                    "VALUES (?,?,?,?,?,?,?)", (rid, u.text, u.uid, u.org, u.owner, u.visibility, u.time))
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise

    def delete(self, uids: Sequence[str]) -> None:
        with self._lock:
            for uid in uids:
                row = self.db.execute("SELECT id FROM ids WHERE uid = ?", (uid,)).fetchone()
                if row:
                    self.db.execute("DELETE FROM shared WHERE rowid = ?", row)
                    self.db.execute("DELETE FROM ids WHERE id = ?", row)

    def search(self, query: Query, view: View | None, k: int) -> list[Hit]:
        q = fts_query(query.text)
        if q is None or k <= 0:
            return []
        where, args = view_sql(view)
        with self._lock:
            rows = self.db.execute(f"SELECT uid, -bm25(shared) AS s FROM shared WHERE shared MATCH ? AND {where} "
                                   "ORDER BY s DESC, uid LIMIT ?", (q, *args, k)).fetchall()
        return [Hit(uid, float(s)) for uid, s in rows]

    def search_owners(self, query: Query, org: str, owners: Sequence[str], k: int) -> list[Hit]:
        """The backend study's other form: the view written as an explicit list of agents."""
        q = fts_query(query.text)
        if q is None or k <= 0 or not owners:
            return []
        marks = ",".join("?" * len(owners))
        with self._lock:
            rows = self.db.execute(f"SELECT uid, -bm25(shared) AS s FROM shared WHERE shared MATCH ? AND org = ? "
                                   f"AND owner IN ({marks}) ORDER BY s DESC, uid LIMIT ?",
                                   (q, org, *owners, k)).fetchall()
        return [Hit(uid, float(s)) for uid, s in rows]

    def __len__(self) -> int:
        with self._lock:
            return self.db.execute("SELECT COUNT(*) FROM shared").fetchone()[0]

    def footprint(self) -> dict:
        with self._lock:
            return {"units": len(self), "total_bytes": self._size(), "tokenizer": self.tokenizer}

    def describe(self) -> dict:
        return {"backend": self.name, "tokenizer": self.tokenizer, "tokenizer_source": self.tokenizer_source,
                "statistics": "collection-wide (view applied after MATCH)"}

    def close(self) -> None:
        with self._lock:
            self.db.close()


def _sqlquote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"
