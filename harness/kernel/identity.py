"""User identity, resolved by the kernel in the paper's priority order (Section 3.1).

1. the identifier attached to the request;
2. the user of the most recently registered session;
   (A.9: the user the requesting agent's own memories are about, when the kernel is given a way to look
   them up (`local`): "if no user ID is found locally, the kernel falls back to a global registry";)
3. the most recently observed identifier in the fallback registry;
4. the requesting agent's own identifier.
Enforced once, at the kernel boundary, for writes and reads alike. Under concurrent
trials, step 2 is global state: a request without its own id can resolve to another
trial's user, which is the contamination the request id exists to prevent (the
`attach_user_id: false` ablation shows it).
"""

from __future__ import annotations

import threading


class IdentityResolver:
    def __init__(self):
        self._lock = threading.Lock()
        self._sessions: dict[str, str] = {}
        self._latest_session: str | None = None
        self._registry: list[str] = []

    def register_session(self, session_id: str, user_id: str) -> None:
        with self._lock:
            self._sessions[session_id] = user_id
            self._latest_session = session_id
            self._observe(user_id)

    def _observe(self, user_id: str) -> None:
        if user_id in self._registry:
            self._registry.remove(user_id)
        self._registry.append(user_id)

    def resolve(self, agent: str, request_user: str | None = None, local=None) -> tuple[str, str]:
        """(user id, which rule gave it: request | session | agent_memory | registry | agent). `local(agent)` gives
        the user of the agent's own memories (A.9's first stage), or None; it is asked outside the lock."""
        with self._lock:
            if request_user:
                self._observe(request_user)
                return request_user, "request"
            if self._latest_session is not None:
                return self._sessions[self._latest_session], "session"
        found = local(agent) if local is not None else None
        with self._lock:
            if found:
                return found, "agent_memory"
            if self._registry:
                return self._registry[-1], "registry"
            return agent, "agent"
