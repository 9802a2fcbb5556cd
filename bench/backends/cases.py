"""The study's corpus and cases: agents, views of each selectivity, configurations as data."""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from harness.data.longmemeval import Question, iter_questions
from harness.memory.units import Unit, units_of_sessions
from harness.memory.views import View

REPO = Path(__file__).resolve().parents[2]
STAGE_CONF = REPO / "conf" / "stage" / "backends.yaml"
ORG = "bench"
K = 10
K_PRIME = 40  # pgvector's default ef_search: the candidates a post-filter sees
CASES = ("unfiltered", "one", "public10", "public50", "all")
SPLIT_OF = {"unfiltered": "p10", "one": "p10", "public10": "p10", "all": "p10", "public50": "p50"}
PUBLIC_SHARE = {"p10": 0.1, "p50": 0.5}
# The study's design (SPEC 7), named once: the ground truth is exact search; the lexical side compares one
# FTS5 index with an owner column against per-view FTS5; fan-out compares per-agent stores with one shared
# index queried with the agents as a list (lexical: that FTS5 index; dense: the Redis query engine's TAG list).
TRUTH = "exact"
LEXICAL_SHARED, LEXICAL_PER_VIEW = "fts5_shared", "fts5"
FANOUT_DENSE = "redis_qe"


def __getattr__(name: str):
    if name == "APPROXIMATE":  # the approximate backends, as they declare themselves (discovered lazily)
        from harness.memory.backends.base import backends

        return tuple(n for n, c in backends().items() if c.approximate)
    raise AttributeError(name)


@dataclass(frozen=True)
class Config:
    """One configuration: a backend, how it is built, the query-time settings, the cases it runs."""

    id: str
    backend: str
    build: dict = field(default_factory=dict)
    query: dict = field(default_factory=dict)
    cases: tuple[str, ...] = CASES

    @property
    def family(self) -> str:
        """Configurations of one family share a built index."""
        return self.backend + ("" if not self.build else ":" + json.dumps(self.build, sort_keys=True))


def parse_configs(items) -> list[Config]:
    out, seen = [], set()
    for it in items:
        it = dict(it)
        cases = tuple(it.get("cases") or CASES)
        bad = [c for c in cases if c not in CASES]
        if bad or it["id"] in seen:
            raise ValueError(f"configuration {it['id']!r}: unknown cases {bad}" if bad else f"duplicate id {it['id']!r}")
        seen.add(it["id"])
        out.append(Config(it["id"], it["backend"], dict(it.get("build") or {}), dict(it.get("query") or {}), cases))
    return out


def default_stage() -> dict:
    """The stage section of conf/stage/backends.yaml (the command line uses the same cases)."""
    import yaml

    return yaml.safe_load(STAGE_CONF.read_text())["stage"]



# -------------------------------------------------------------------------------- corpus


def load_histories(path: Path, histories: int | None, qids: Sequence[str] | None = None) -> list[Question]:
    if qids:
        want = list(qids)
        got = {q.qid: q for q in iter_questions(path) if q.qid in set(want)}
        missing = [q for q in want if q not in got]
        if missing:
            raise SystemExit(f"{len(missing)} question ids not in {path}: {missing[:3]}")
        qs = [got[q] for q in want]
    else:
        qs = list(itertools.islice(iter_questions(path), histories))
    if histories and len(qs) > histories:
        qs = qs[:histories]
    return qs


def agent_of(i: int) -> str:
    return f"h{i:03d}"


def build_units(qs: list[Question], public: set[str]) -> list[Unit]:
    units = []
    for i, q in enumerate(qs):
        a = agent_of(i)
        units += units_of_sessions(q.sessions, ORG, lambda sid, a=a: a,
                                   lambda agent: "public" if agent in public else "private")
    return units


def public_agents(n: int, share: float, seed: int) -> set[str]:
    agents = [agent_of(i) for i in range(n)]
    rng = random.Random(repr((seed, "public", share)))
    return set(rng.sample(agents, max(1, round(share * n))))


def view_for(case: str, agent: str) -> View | None:
    if case == "unfiltered":
        return None
    if case == "one":
        return View(ORG, agent, "own")
    if case == "all":
        return View(ORG, None, "all")
    return View(ORG, agent, "shared")


def build_seed(seed: int, build: int) -> int:
    """The seed of one build's insertion order (recorded in stage.json)."""
    return random.Random(repr(("build", seed, build))).getrandbits(31)
