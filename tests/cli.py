"""The harness's command lines run inside the test process: `run(argv)` takes what `subprocess.run` would
(`[sys.executable, "-m", MODULE, *overrides]`) and returns a CompletedProcess with the exit code, stdout and
stderr, without a fresh interpreter's start, imports, torch and encoder load each time (seconds a call).

For tests that check what a command prints, writes and returns; a test whose point is the process itself
(killed mid-way, a signal, the environment it inherits, orphans) keeps `subprocess`. Under pytest-xdist
each worker is its own process, so two in-process commands never run at once in one interpreter.
"""

from __future__ import annotations

import contextlib
import io
import os
import runpy
import subprocess
import sys
import threading
import traceback
import warnings
from pathlib import Path

# the command lines run here, each as `python -m` runs it (runpy, as __main__): Hydra finds its config
# from the file of a __main__ function, as on the command line
MODULES = {"harness.run", "judge.run", "judge.agreement", "judge.probe", "analysis.run", "analysis.personal"}

_lock = threading.Lock()  # sys.argv, sys.stdout, sys.stderr and os.environ are the process's own


def _code(exc: SystemExit, err: io.StringIO) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=err)  # sys.exit("message"): the interpreter prints it and exits 1
    return 1


def run(argv, timeout: float | None = None, env: dict | None = None, cwd=None, **_ignored) -> subprocess.CompletedProcess:
    """`subprocess.run(argv, capture_output=True, text=True)` for `python -m MODULE ...`, in this process.

    `timeout` is accepted for the call sites' sake and left to pytest-timeout; `env` (a whole environment,
    as subprocess takes it) and `cwd` are applied for the call; both are restored after it either way."""
    argv = [str(a) for a in argv]
    if argv[:2] != [sys.executable, "-m"] or argv[2] not in MODULES:
        raise ValueError(f"not a harness command line this helper runs in-process: {argv[:3]}")
    out, err = io.StringIO(), io.StringIO()
    with _lock:
        saved_argv, saved_env, saved_cwd = sys.argv, dict(os.environ), os.getcwd()
        saved_modules, saved_plugins = set(sys.modules), plugin_state()
        if cwd is not None:
            os.chdir(cwd)
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        code = 0
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    sys.argv = [argv[2], *argv[3:]]
                    with warnings.catch_warnings():  # "found in sys.modules": the module runs again, as __main__
                        warnings.simplefilter("ignore", RuntimeWarning)
                        runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
                except SystemExit as exc:
                    code = _code(exc, err)
                except Exception:  # the interpreter prints the traceback and exits 1
                    traceback.print_exc(file=err)
                    code = 1
        finally:  # what the command changed in its environment ends with it, as with a process
            sys.argv = saved_argv
            os.chdir(saved_cwd)
            if os.environ != saved_env:
                os.environ.clear()
                os.environ.update(saved_env)
            _reset_hydra()
            _forget_foreign_modules(saved_modules)
            restore_plugins(saved_plugins)
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def _forget_foreign_modules(before: set[str]) -> None:
    """A module the command imported from outside the tree and the environment (a test's plugin on PYTHONPATH)
    ends with the command, as with a process: left loaded, the lock's loaded-code row refuses every later stage."""
    roots = [Path(__file__).resolve().parents[1], Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()]
    for name in set(sys.modules) - before:
        f = getattr(sys.modules.get(name), "__file__", None)
        if f and not any(Path(f).resolve().is_relative_to(r) for r in roots):
            sys.modules.pop(name, None)


def plugin_state() -> tuple:
    """What the plugins loaded so far left in the process: the modules imported and every registry's entries."""
    from harness import plugins

    return set(plugins._loaded), {id(r): set(r._entries) for r in plugins.REGISTRIES}


def restore_plugins(state: tuple) -> None:
    """A plugin a command (or a test) loaded ends with it, as with a process: left loaded, the preset's
    plugins row refuses every later stage of the worker, and its names stay in the registries. Entries the
    tree's own modules registered meanwhile (a registry read for the first time) stay: their modules stay
    imported, so they would not register again."""
    from harness import plugins

    loaded, names = state
    plugins._loaded.clear()
    plugins._loaded.update(loaded)
    for reg in plugins.REGISTRIES:
        before = names.get(id(reg), set())
        for name, (_, origin) in list(reg._entries.items()):
            if name not in before and plugins.namespace(origin) is not None:
                del reg._entries[name]


def _reset_hydra() -> None:
    """Hydra keeps the last run's config and config loader in singletons; a fresh process starts without."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    GlobalHydra.instance().clear()
    HydraConfig.instance().cfg = None


def shared_cache(tmp_path) -> str:
    """One `cache_dir` for every stage a test session runs: pytest's base temporary directory (one per
    session, one per xdist worker) holds it beside the tests' own folders. What is cached there is keyed by
    content (the prepared data by its sha256, the embeddings by encoder id and text), as in a user's
    `.cache`; so a stage embeds its memory once per session, not once per test, and the encoder, keyed by
    its cache, is loaded once per process."""
    return str(Path(tmp_path).parent / "shared-cache")
