"""What stops a stage, as opposed to what fails a run.

A run fails (recorded, counted wrong, Appendix F(vi)) when its own calls fail after retries
or its own output breaks the loop. An environment failure is not the run's doing: a missing
or refused key, a model the endpoint does not know, an upstream that refuses connections, the
services of the index down, a shell sandbox this machine cannot build. Recording such runs as
failed would count the environment's fault as wrong answers and, since recorded runs never
run again, burn the stage. So an environment failure stops the stage instead: the affected
runs stay unrecorded and run on resume, and the message says what to fix.

Every command ends the same way on such exceptions (exit_code, announce): 2 bad input, 3
stopped by the environment, 4 the budget reached; each exception class carries its code.
"""

from __future__ import annotations

import contextlib
import functools
import sys


class EnvironmentFailure(RuntimeError):
    def __init__(self, what: str, fix: str):
        self.what, self.fix = what, fix
        super().__init__(f"{what} — fix: {fix}")


class StageStopping(EnvironmentFailure):
    """The stage is stopping (a breaker, credit gone, Ctrl-C): a run in flight sends no further model call and
    stays unrecorded, so its failure is never counted as its own."""

    def __init__(self, why: str = "the stage is stopping"):
        super().__init__(f"{why}: no further model call is sent", "see why the stage stopped")


class CapReached(StageStopping):
    """The metering proxy refused a call that could take the stage's spend past its cap (`budget_usd`): the run
    or judgement that asked stays unrecorded, and the stage stops with exit 4 (harness.run.budget)."""

    def __init__(self, why: str = "the spending cap is reached"):
        EnvironmentFailure.__init__(self, why, "raise budget_usd and run the same command")

    def __str__(self) -> str:  # announce() adds what to do
        return self.what


def classify(exc: BaseException) -> EnvironmentFailure | None:
    """The environment failure `exc` stands for, or None if it is the run's own failure."""
    if isinstance(exc, EnvironmentFailure):
        return exc
    # by the names of the classes it is one of (a server shutting down is psycopg's AdminShutdown, an
    # OperationalError), so this module imports neither client library
    kinds = {(c.__module__ or "", c.__name__) for c in type(exc).__mro__}

    def of(lib: str, *names: str) -> bool:
        return any(mod.startswith(lib) and name in names for mod, name in kinds)

    if of("", "SandboxUnavailable"):
        return EnvironmentFailure(f"shell sandbox unavailable: {exc}",
                                  "run as root with CAP_SYS_ADMIN, or leave the shell condition out of the stage")
    if of("redis", "ConnectionError", "TimeoutError", "BusyLoadingError", "AuthenticationError"):
        return EnvironmentFailure(f"Redis unreachable: {exc}", "start the services (make services-up) or check the Redis URL")
    if of("psycopg", "OperationalError", "InterfaceError"):
        return EnvironmentFailure(f"PostgreSQL unreachable: {exc}",
                                  "start the services (make services-up) or check the PostgreSQL URL")
    return None


# ------------------------------------------------------------------------------ exit codes

BAD_INPUT = 2  # bad configuration, data, records or prompts: fix the input
STOPPED = 3  # the environment stopped the step (or a shard is held): fix the cause, run the same command
BUDGET = 4  # the spending cap is reached: raise budget_usd, run the same command

EnvironmentFailure.exit_code = STOPPED
CapReached.exit_code = BUDGET


def exit_code(exc: BaseException) -> int | None:
    """The exit code a command ends with when `exc` stops it, or None (a bug: let it raise).

    Each exception class says its own code in a class attribute `exit_code` (BAD_INPUT,
    STOPPED or BUDGET), so this mapping names no class and imports nothing."""
    code = getattr(type(exc), "exit_code", None)
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def announce(exc: BaseException) -> int | None:
    """Print the one line a command ends with for `exc` and return its exit code (None: not ours)."""
    code = exit_code(exc)
    if code is None:
        return None
    if code == BUDGET:
        line = f"{exc}; raise budget_usd and run the same command to go on"
    elif code == STOPPED:
        line = f"stopped: {exc}"
    else:
        line = f"error: {exc}"
    print(line, file=sys.stderr)
    return code


INTERRUPTED = ("interrupted (Ctrl-C): no run or judgement started after it; the ones in flight were let end: each "
               "that finished is recorded, the others stay unrecorded and their calls stay in the ledger — fix: run "
               "the same command to go on")


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a stage's runs, with what became of the runs in flight (counted once the pool has joined)."""

    def __init__(self, in_flight: int, recorded: int):
        super().__init__(in_flight, recorded)
        self.in_flight, self.recorded = in_flight, recorded

    def __str__(self) -> str:
        return self.line()

    def line(self) -> str:
        left = self.in_flight - self.recorded
        return (f"interrupted (Ctrl-C): no run started after it; of the {self.in_flight} run(s) in flight, "
                f"{self.recorded} finished and were recorded, {left} stay unrecorded"
                + (" (their calls stay in the ledger)" if left else "")
                + " — fix: run the same command to go on")


def interrupted(exc: BaseException | None = None) -> int:
    """Ctrl-C ends a command like any other stop: one `stopped:` line, exit 3, no traceback. The line counts
    what became of the runs in flight when the driver knows it (Interrupted), never claims more."""
    print(f"stopped: {exc.line() if isinstance(exc, Interrupted) else INTERRUPTED}", file=sys.stderr)
    return STOPPED


def returns_exit_code(fn):
    """Wrap a command body: an exception with an exit code is announced and its code returned."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except KeyboardInterrupt as exc:
            return interrupted(exc)
        except Exception as exc:
            code = announce(exc)
            if code is None:
                raise
            return code
    return wrapper


@contextlib.contextmanager
def exits_with_code():
    """Around a command's main (a context manager, so Hydra still sees the command's own function):
    an exception with an exit code is announced and the process exits with its code."""
    try:
        yield
    except KeyboardInterrupt as exc:
        sys.exit(interrupted(exc))
    except Exception as exc:
        code = announce(exc)
        if code is None:
            raise
        sys.exit(code)
