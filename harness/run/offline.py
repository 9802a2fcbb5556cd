"""A dry run reaches nothing beyond this machine: one guard, an allowlist of where a socket may go.

WHY: a dry run prints the plan and the checks that cost nothing; it must never download weights, reach a hub
or call a provider, whatever code path a stage, study or plugin takes. Listing the calls that might reach out
misses the next one, so the guard sits under all of them: Python's audit hooks see every `socket.connect`
and `socket.getaddrinfo` of the process, and while a dry run is under way only loopback hosts and local
(Unix) sockets pass; anything else is refused with an error that names the host. The hub libraries are told
the same through their offline variables, so they fail with their own words before opening a socket.
A client written in C (libpq, under psycopg, when given an IP address) opens its sockets where the hooks do not
look: a dry run asks no server anything (preflight and the fidelity manifest say the servers are reached when
the stage runs), and tests/test_dry_run_offline.py checks that with listeners that count what reaches them.
"""

from __future__ import annotations

import ipaddress
import os
import sys
import threading
from contextlib import contextmanager

from harness.failures import BAD_INPUT, EnvironmentFailure

LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
OFFLINE_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")

_active = 0  # dry runs under way in this process (the hook is installed once and stays; it acts only then)
_lock = threading.Lock()
_installed = False
_saved: dict = {}  # the offline variables as they were before the first dry run under way


class DryRunReachedOut(EnvironmentFailure):
    """A dry run tried to open a connection to a host that is not this machine."""

    exit_code = BAD_INPUT

    def __init__(self, host):
        super().__init__(f"a dry run reaches nothing beyond this machine, and something asked for {host!r}",
                         "run the stage without dry_run=true to fetch or call it, or fetch what it needs first "
                         "(python -m harness.data download ...)")
        self.host = host


def is_local(host) -> bool:
    """Whether a socket address or host names this machine: a loopback address, a loopback name, the
    unspecified host of a bind (None, ''), or a Unix socket's path. Everything else is not."""
    if isinstance(host, tuple):  # (host, port[, flowinfo, scope_id])
        host = host[0] if host else None
    if host is None or host == "" or host == b"":
        return True
    if isinstance(host, (bytes, bytearray)):
        try:
            host = bytes(host).decode("ascii")
        except UnicodeDecodeError:
            return False
    if not isinstance(host, str):
        return False
    if host.startswith("/") or host.startswith("\0"):  # AF_UNIX path or abstract socket
        return True
    name = host.strip().rstrip(".").lower()
    if name in LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(name.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _hook(event: str, args) -> None:
    if not _active:
        return
    if event in ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr", "socket.getnameinfo"):
        host = args[0]  # every lookup: a name resolved is a query the resolver sends
    elif event in ("socket.connect", "socket.sendto", "socket.sendmsg"):
        host = args[1]
    else:
        return
    if not is_local(host):
        raise DryRunReachedOut(host if not isinstance(host, tuple) else host[0])


@contextmanager
def offline():
    """Within: no socket of this process reaches a host that is not this machine, and the hub libraries are
    offline. Nested and concurrent uses count; the hook is installed once per process."""
    global _active, _installed, _saved
    with _lock:
        if not _installed:
            sys.addaudithook(_hook)
            _installed = True
        if not _active:
            _saved = {k: os.environ.get(k) for k in OFFLINE_ENV}
        _active += 1
        os.environ.update({k: "1" for k in OFFLINE_ENV})
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if not _active:
                for k, v in _saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
