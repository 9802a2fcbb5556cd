"""A dry run reaches nothing beyond this machine (harness/run/offline.py): every socket the process opens while a
dry run is under way goes to a loopback host or a local socket, or is refused naming the host; the hub libraries
are offline; and the stages' own dry runs plan without fetching what is not here."""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from harness.run.offline import OFFLINE_ENV, DryRunReachedOut, is_local, offline
from tests import cli

REPO = Path(__file__).resolve().parents[1]

labels = st.from_regex(r"[a-z][a-z0-9-]{0,14}[a-z0-9]", fullmatch=True)
hostnames = st.lists(labels, min_size=1, max_size=4).map(".".join).filter(
    lambda h: h not in ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(address=st.ip_addresses(), port=st.integers(1, 65535))
def test_under_a_dry_run_a_socket_reaches_a_host_only_when_it_is_this_machine(address, port):
    """Any address: a loopback one gets as far as the kernel (refused or answered there), any other is stopped
    before a packet leaves, by the guard, naming the host."""
    family = socket.AF_INET if address.version == 4 else socket.AF_INET6
    try:
        u = socket.socket(family, socket.SOCK_DGRAM)  # a datagram leaves without a connection: sendmsg and sendto
    except OSError:  # a machine without IPv6
        assume(False)
    with offline(), u:
        for send in (lambda: u.sendmsg([b"x"], [], 0, (str(address), port)), lambda: u.sendto(b"x", (str(address), port))):
            try:
                send()
                sent = True
            except DryRunReachedOut:
                sent = False
            except OSError:
                sent = True  # the kernel's answer: the guard let it through
            assert sent == address.is_loopback, (address, send)
    try:
        s = socket.socket(family, socket.SOCK_STREAM)
    except OSError:  # a machine without IPv6
        assume(False)
    s.settimeout(0.05)
    with offline():
        try:
            s.connect((str(address), port))
            reached = "connected"
        except DryRunReachedOut as exc:
            reached = "refused by the guard"
            assert exc.host == str(address)
        except OSError:
            reached = "the kernel's answer"
        finally:
            s.close()
    assert (reached != "refused by the guard") == address.is_loopback, (address, reached)


@settings(max_examples=40, deadline=None)
@given(host=hostnames)
def test_under_a_dry_run_no_name_is_looked_up_but_this_machines(host):
    """A name is refused before the resolver is asked (no DNS query leaves either); outside a dry run the same
    lookup is the resolver's business again (refused here only by the resolver, never by the guard)."""
    for lookup in (lambda: socket.getaddrinfo(host, 443), lambda: socket.gethostbyname(host),
                   lambda: socket.gethostbyname_ex(host)):
        with offline(), pytest.raises(DryRunReachedOut):
            lookup()
    try:
        socket.getaddrinfo(host, 443)
    except OSError:
        pass


def test_loopback_names_and_local_sockets_pass_and_the_hub_is_offline_only_within():
    before = {k: os.environ.get(k) for k in OFFLINE_ENV}
    with offline():
        with offline():  # nested: the outer one still holds when the inner ends
            assert socket.getaddrinfo("localhost", 80)
        assert all(os.environ[k] == "1" for k in OFFLINE_ENV)
        a, b = socket.socketpair()  # a local (Unix) socket
        a.close(), b.close()
        for host in ("127.0.0.1", "127.8.9.1", "::1", "LOCALHOST.", "/tmp/x.sock"):
            assert is_local(host), host
        for host in ("10.0.0.1", "0.0.0.0x", "localhost.example.com", "huggingface.co", "8.8.8.8", "::ffff:8.8.8.8"):
            assert not is_local(host), host
    assert {k: os.environ.get(k) for k in OFFLINE_ENV} == before
    assert ipaddress.ip_address("127.0.0.1").is_loopback  # the oracle the property above trusts


def test_the_second_papers_dry_run_under_the_preset_plans_without_an_encoder_it_would_have_to_fetch(tmp_path):
    """stage=personal_smoke preset=paper dry_run=true measured the encoder's throughput by loading bge, which
    reached for the Hub when its weights were not here (a network traceback, exit 1). It now says the figure is
    not measured and why, and ends as the preset's refusals decide (exit 3), no traceback."""
    empty = tmp_path / "no-bge"
    empty.mkdir()
    res = cli.run([sys.executable, "-m", "harness.run", "stage=personal_smoke", "preset=paper", "dry_run=true",
                   f"runs_dir={tmp_path / 'runs'}", f"cache_dir={tmp_path / 'cache'}"],
                  env={**os.environ, "MEMSPACE_BGE_PATH": str(empty)}, cwd=REPO)
    out = res.stdout + res.stderr
    assert "Traceback" not in out and "huggingface" not in out.lower(), out[-3000:]
    assert res.returncode == 3, out[-3000:]  # the preset refuses the smoke stage's deviations, by name
    assert "the encoder's throughput is not measured in this dry run" in out
    assert "commits through the encoder not measured" in out
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("index", ["pgvector", "redis_qe"])
def test_a_dry_run_asks_no_server_even_one_a_c_client_would_reach_unseen(tmp_path, index):
    """The index's server at an address a listener holds: a dry run of the smoke stage on it connects to nothing
    (libpq opens its sockets in C, where the guard's hooks do not look, so nothing may ask; a dsn at a remote
    address reached a server before), and says the servers are reached when the stage runs."""
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    port, reached, done = listener.getsockname()[1], [], threading.Event()

    def count():
        while not done.is_set():
            try:
                reached.append(listener.accept()[0])
            except OSError:
                pass

    t = threading.Thread(target=count, daemon=True)
    t.start()
    where = (f"index.dsn='host=127.0.0.1 port={port} user=postgres dbname=memspace connect_timeout=3'"
             if index == "pgvector" else f"+index.url=redis://127.0.0.1:{port}")
    try:
        res = cli.run([sys.executable, "-m", "harness.run", "stage=smoke", f"index={index}", where, "dry_run=true",
                       f"runs_dir={tmp_path / 'runs'}", f"cache_dir={tmp_path / 'cache'}"], cwd=REPO)
    finally:
        done.set()
        t.join()
        listener.close()
    assert res.returncode == 0, res.stderr[-3000:]
    assert reached == [], f"{len(reached)} connection(s) reached the {index} server in a dry run"
    assert "its servers are reached when the stage runs" in res.stdout and "not asked (dry run)" in res.stdout
    assert "unreachable" not in res.stdout + res.stderr


@settings(max_examples=60, deadline=None)
@given(launcher=st.sampled_from(["slurm", "basic", "submitit_local"]),
       value=st.sampled_from(["true", "True", "yes", "1", "on", "false", "False", "null", "0", "true,false"]),
       flag=st.sampled_from(["-m", "--multirun"]), plus=st.booleans())
def test_a_dry_runs_sweep_is_planned_here_whatever_launcher_the_command_names(launcher, value, flag, plus):
    """hydra/launcher=slurm submitted a dry run's jobs with sbatch (a child process the guard cannot see, reaching
    the cluster's hosts). Any dry_run value Hydra reads as true runs the sweep on the basic launcher; only a sweep
    whose every value is false keeps the launcher it names."""
    from harness.run.sweep import FALSE, dry_sweep_here

    argv = ["x", flag, f"hydra/launcher={launcher}", "stage=smoke", f"{'+' if plus else ''}dry_run={value}", "seed=0,1"]
    got = dry_sweep_here(argv)
    dry = any(v.lower() not in FALSE for v in value.split(","))
    launchers = [a for a in got if a.startswith("hydra/launcher=")]
    assert launchers == (["hydra/launcher=basic"] if dry else [f"hydra/launcher={launcher}"]), (argv, got)
    assert [a for a in got if not a.startswith("hydra/launcher=")] == [a for a in argv if not a.startswith("hydra/")]


def test_a_dry_sweep_on_the_cluster_launcher_submits_nothing_and_plans_each_job(tmp_path):
    res = cli.run([sys.executable, "-m", "harness.run", "-m", "hydra/launcher=slurm", "stage=smoke", "dry_run=true",
                   "seed=0,1", f"runs_dir={tmp_path / 'runs'}", f"cache_dir={tmp_path / 'cache'}"], cwd=REPO)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.count("dry run: nothing started") == 2 and "sbatch" not in res.stdout + res.stderr
    assert not (tmp_path / "runs").exists()
