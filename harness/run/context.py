"""What a run can reach: its question, its organisation, the stage's memory space and stores.

The Environment holds what runs of a stage share and builds each part once, on
first use, under a lock (runs execute as threads): the questions of the plan,
LongMemEval-Org assignments, the memory space with each organisation's units,
and the runtime's session stores. A RunContext is one run's window onto it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from harness.data.longmemeval import Question, Session, load
from harness.data.org import ASKER, VISIBILITY, OrgAssignment, assign
from harness.memory.units import Unit, units_of_sessions
from harness.memory.views import View
from harness.run.plan import Plan, RunSpec

LME_AGENT = "a0"  # a LongMemEval history is the memory of one agent


class Environment:
    def __init__(self, cfg, plan: Plan):
        self.cfg = cfg
        self.plan = plan
        self.cache_dir = Path(str(cfg.cache_dir))
        self._lock = threading.Lock()
        self._org_locks: dict[str, threading.Lock] = {}
        self._loaded: set[str] = set()
        self._space = None
        self._assignments: dict[tuple[str, str], OrgAssignment] = {}

    @cached_property
    def questions(self) -> dict[str, Question]:
        wanted = {r.qid for r in self.plan.runs}
        return load(self.plan.data["path"], only=wanted)

    def assignment(self, qid: str, variant: str) -> OrgAssignment | None:
        if not variant:
            return None
        key = (qid, variant)
        with self._lock:
            if key not in self._assignments:
                self._assignments[key] = assign(self.questions[qid], variant)
            return self._assignments[key]

    def units(self, spec: RunSpec) -> list[Unit]:
        q = self.questions[spec.qid]
        a = self.assignment(spec.qid, spec.variant)
        if a is None:
            return units_of_sessions(q.sessions, spec.org, lambda sid: LME_AGENT, lambda agent: "private")
        return units_of_sessions(q.sessions, spec.org, a.owner.__getitem__, VISIBILITY.__getitem__)

    @property
    def space(self):
        with self._lock:
            if self._space is None:
                from harness.memory.space import space_from_config
                from harness.run.settings import index_node

                # the index node checked against its backend's settings (a misspelt option is an error)
                self._space = space_from_config(index_node(self.cfg.index), encoder_cfg=self.cfg.encoder,
                                                cache_dir=self.cfg.get("cache_dir"))
                if self._space.dense is not None:
                    # load the encoder now (setup): lazily, the first query's ~5 s model load held
                    # every agent's search behind the model lock inside its loop (the rehearsal)
                    self._space.encoder.warm()
            return self._space

    def space_for(self, spec: RunSpec):
        """The memory space with this run's organisation loaded (once per organisation)."""
        space = self.space
        with self._lock:
            lock = self._org_locks.setdefault(spec.org, threading.Lock())
        with lock:
            if spec.org not in self._loaded:
                space.add_units(self.units(spec))
                self._loaded.add(spec.org)
        return space

    def space_description(self) -> dict | None:
        """The memory space's own account of itself, once a run has used it."""
        with self._lock:
            return self._space.describe() if self._space is not None else None

    def close(self) -> None:
        if self._space is not None:
            self._space.close()


@dataclass
class RunContext:
    spec: RunSpec
    env: Environment
    agent: str = ASKER
    first_tool_choice: str | None = None  # from the model config (see harness.run.loop.run_loop)
    transcript: Any = None  # the run's harness.run.loop.TranscriptRecorder, shared with asked agents
    _sessions: dict[str, Session] = field(default_factory=dict)

    @property
    def question(self) -> Question:
        return self.env.questions[self.spec.qid]

    @property
    def is_org(self) -> bool:
        return bool(self.spec.variant)

    @property
    def assignment(self) -> OrgAssignment | None:
        return self.env.assignment(self.spec.qid, self.spec.variant)

    @property
    def space(self):
        return self.env.space_for(self.spec)

    def view(self, scope: str, agent: str | None = None) -> View:
        if scope == "all":
            return View(self.spec.org, agent or self.agent, "all")
        return View(self.spec.org, agent or self.agent, scope)

    def session(self, sid: str) -> Session | None:
        if not self._sessions:
            self._sessions.update({s.sid: s for s in self.question.sessions})
        return self._sessions.get(sid)

    def owner_of(self, sid: str) -> str:
        a = self.assignment
        return a.owner[sid] if a else LME_AGENT

    def view_admits_session(self, view: View, sid: str) -> bool:
        owner = self.owner_of(sid)
        probe = Unit(view.org, owner, VISIBILITY[owner] if self.is_org else "private", 0.0, sid, 0, 0, "")
        return view.without_dates().admits(probe)
