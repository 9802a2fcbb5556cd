"""What stops a stage, as opposed to what fails a run.

A run fails (recorded, counted wrong, Appendix F(vi)) when its own calls fail after retries
or its own output breaks the loop. An environment failure is not the run's doing: a missing
or refused key, a model the endpoint does not know, an upstream that refuses connections, the
services of the index down, a shell sandbox this machine cannot build. Recording such runs as
failed would count the environment's fault as wrong answers and, since recorded runs never
run again, burn the stage. So an environment failure stops the stage instead: the affected
runs stay unrecorded and run on resume, and the message says what to fix.
"""

from __future__ import annotations


class EnvironmentFailure(RuntimeError):
    def __init__(self, what: str, fix: str):
        self.what, self.fix = what, fix
        super().__init__(f"{what} — fix: {fix}")


def classify(exc: BaseException) -> EnvironmentFailure | None:
    """The environment failure `exc` stands for, or None if it is the run's own failure."""
    if isinstance(exc, EnvironmentFailure):
        return exc
    mod = type(exc).__module__ or ""
    name = type(exc).__name__
    if name == "SandboxUnavailable":
        return EnvironmentFailure(f"shell sandbox unavailable: {exc}",
                                  "run as root with CAP_SYS_ADMIN, or leave the shell condition out of the stage")
    if mod.startswith("redis") and name in ("ConnectionError", "TimeoutError", "BusyLoadingError", "AuthenticationError"):
        return EnvironmentFailure(f"Redis unreachable: {exc}", "start the services (make services-up) or check the Redis URL")
    if mod.startswith("psycopg") and name in ("OperationalError", "InterfaceError"):
        return EnvironmentFailure(f"PostgreSQL unreachable: {exc}",
                                  "start the services (make services-up) or check the PostgreSQL URL")
    return None
