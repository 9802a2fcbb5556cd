"""The shell condition: terminal(command) in the sandbox, attacked; session detection; the prompt paragraph."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from harness.runtime import (
    LIMITS, SessionDetector, ShellTool, access_paragraph, build_org_stores, build_store, shell_paragraph,
)
from harness.runtime.tools import ToolError
from harness.runtime import sandbox
from harness.runtime.sandbox import SandboxUnavailable, open_private_dir, processes_of
from harness.runtime.sandbox_cgroup import CgroupPlan, leftover_groups
from tests.runtime_helpers import shared_stores, tiny_questions

REPO = Path(__file__).resolve().parents[1]
FAST = replace(LIMITS, wall_s=3.0)  # the attacks that run until killed use a short clock


@pytest.fixture(scope="module")
def org():
    qs, sha = tiny_questions()
    q = next(q for q in qs.values() if not q.abstention)
    stores = build_org_stores(q, sha, "public", root=shared_stores())
    holder = next(a for a in ("a1", "a2", "a3") if set(stores[a].sessions) & q.evidence)
    other = next(a for a in stores if a != holder and stores[a].sessions)
    return q, stores, holder, other


@pytest.fixture(scope="module")
def tool(org):
    q, stores, holder, _ = org
    return ShellTool(stores[holder])


def _sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_sqlite_and_grep_work_on_the_store(org, tool):
    q, stores, holder, _ = org
    res = tool(command="sqlite3 /memory/state.db 'SELECT count(*) FROM sessions; SELECT count(*) FROM messages_fts'")
    assert res.text.split() == [str(len(stores[holder].sessions)), str(stores[holder].messages)]
    assert not res.error and not res.empty
    res = tool(command="grep -c . /memory/state.db >/dev/null && echo found; pwd; id -u; ls /etc; "
                       "echo 'a b' | awk '{print $2}'; which sqlite3")
    lines = res.text.split()
    assert lines[0] == "found" and lines[1] == "/memory" and int(lines[2]) >= 1_900_000_000
    assert lines[3:] == ["alternatives", "b", "/usr/bin/sqlite3"]


def test_sessions_are_detected_by_id_and_by_content(org, tool):
    q, stores, holder, _ = org
    sid = next(iter(set(stores[holder].sessions) & q.evidence))
    by_id = tool(command=f"sqlite3 /memory/state.db \"SELECT id FROM sessions WHERE id='{sid}'\"")
    assert by_id.sessions == [sid]
    session = next(s for s in q.sessions if s.sid == sid)
    distinctive = max((t.content for t in session.turns), key=len)
    assert len(distinctive) >= 60
    needle = distinctive[:30].replace("'", "''")
    by_content = tool(command=f"sqlite3 /memory/state.db \"SELECT content FROM messages WHERE content LIKE '{needle}%'\"")
    assert sid not in by_content.text and sid in by_content.sessions
    nothing = tool(command="echo hello")
    assert nothing.sessions == []


def test_detector_rule(tmp_path):
    from datetime import datetime

    from harness.data.longmemeval import Question, Session, Turn

    shared = "Let me know if you want me to go into more detail on any of these points, happy to help."
    a = "I adopted a corgi named Waffles last spring and he already knows how to sit and roll over."
    b = 'My sister said the wedding is in "Lisbon" in October, and I still have not booked a hotel near it.'
    sessions = (
        Session("s00000000000a", datetime(2023, 1, 1, 10, 0), (Turn("user", a), Turn("assistant", shared))),
        Session("s00000000000b", datetime(2023, 1, 2, 10, 0), (Turn("user", b), Turn("assistant", shared))),
    )
    q = Question("gdet", "single-session-user", "?", "x", datetime(2023, 2, 1), sessions, frozenset())
    det = SessionDetector(build_store(q, "2" * 64, root=tmp_path).sandbox_path)
    assert det.sessions("nothing here") == []
    assert det.sessions("id s00000000000b in a listing") == ["s00000000000b"]
    assert det.sessions("s00000000000c is not in this store") == []
    assert det.sessions(f"1|s00000000000x|{a}") == ["s00000000000a"]  # a whole message
    assert det.sessions(a[:55]) == ["s00000000000a"]  # a prefix (substr(content, 1, 55))
    assert det.sessions("..." + b[10:84] + "...") == ["s00000000000b"]  # any 74-character stretch
    assert det.sessions(b[10:50]) == []  # too short to count
    assert det.sessions(shared) == []  # text both sessions hold is evidence of neither
    assert det.sessions(json.dumps([{"content": b}])) == ["s00000000000b"]  # JSON escapes the quotes
    assert det.sessions(a.replace(" ", "\n   ", 3)) == ["s00000000000a"]  # whitespace and escapes folded


def test_writing_the_store_is_contained(org, tool):
    q, stores, holder, _ = org
    before = _sha(stores[holder].sandbox_path), _sha(stores[holder].path)
    for cmd in (
        "sqlite3 /memory/state.db 'DELETE FROM messages'",
        "sqlite3 /memory/state.db 'PRAGMA journal_mode=WAL'",
        "echo x > /memory/state.db",
        "rm -f /memory/state.db",
        "touch /memory/new.db",
        "mv /memory/state.db /tmp/x",
        "chmod 666 /memory/state.db",
    ):
        res = tool(command=cmd)
        assert res.error, cmd
        assert any(w in res.text.lower() for w in ("read-only", "readonly", "not permitted", "denied")), res.text
    after = _sha(stores[holder].sandbox_path), _sha(stores[holder].path)
    assert after == before
    assert tool(command="sqlite3 /memory/state.db 'SELECT count(*) FROM messages'").text.strip() == str(
        stores[holder].messages)


def test_no_network(tool):
    res = tool(command='python3 -c "import socket; socket.create_connection((\'1.1.1.1\', 80), timeout=3)"; '
                       'python3 -c "import socket; print(socket.if_nameindex())"')
    assert "Network is unreachable" in res.text
    assert "[(1, 'lo')]" in res.text  # a fresh network namespace: only a downed loopback


def test_nothing_outside_the_sandbox_is_visible(org, tool):
    q, stores, holder, other = org
    other_store = stores[other].sandbox_path
    res = tool(command=f"cat /etc/passwd; ls /work; cat {REPO / 'pyproject.toml'}; cat {other_store}; "
                       f"ls /proc/1; ls /root; ls /usr/local; ls {other_store.parent}")
    assert res.text.count("No such file or directory") == 7, res.text
    listing = tool(command="find / -xdev \\( -name '*.db' -o -name '*.json' -o -name '*.toml' \\) "
                           "-not -path '/usr/*' 2>/dev/null; ls -a /")
    assert listing.text.split("\n")[0] == "/memory/state.db"
    assert set(listing.text.split()[1:]) == {".", "..", "bin", "dev", "etc", "lib", "lib64", "memory",
                                                  "sbin", "tmp", "usr"}
    # no session of another agent reaches this agent's shell
    dump = tool(command="sqlite3 /memory/state.db 'SELECT id FROM sessions'")
    assert set(dump.text.split()) == set(stores[holder].sessions)
    assert not set(dump.sessions) & set(stores[other].sessions)


def test_fork_bomb_is_contained_and_the_run_goes_on(org):
    """Containment, whichever limit ends the bomb first: the wall clock, or the process limit refusing the
    shell's own `sleep` (then the shell exits and the namespace goes with it, as on a loaded machine)."""
    q, stores, holder, _ = org
    tool = ShellTool(stores[holder], limits=FAST)
    res = tool(command="bomb() { bomb | bomb & }; bomb; sleep 30")
    assert res.error and not res.log["setup_error"]  # the command ran and the call is reported as failed
    # the process limit applied: forks were refused (RLIMIT_NPROC's message, or the pids cgroup's count)
    assert "cannot fork" in res.text.lower() or (res.log["forks_refused"] or 0) > 0, res.text[-500:]
    assert processes_of(res.log["uid"]) == []
    after = tool(command="echo alive")
    assert after.text.strip() == "alive"


def test_allocating_past_the_limit_fails_inside(tool):
    res = tool(command='python3 -c "x = bytearray(1 << 30)"; '
                       "sqlite3 :memory: 'SELECT length(randomblob(1000000000))'; "
                       'python3 -c "x = bytearray(100 << 20); print(len(x))"')
    assert "MemoryError" in res.text
    assert "out of memory" in res.text.lower() or "too big" in res.text.lower()
    assert "104857600" in res.text  # 100 MB is fine under 256 MB


def test_sleep_is_killed_at_the_wall_clock(org):
    q, stores, holder, _ = org
    tool = ShellTool(stores[holder], limits=replace(LIMITS, wall_s=1.5))
    t0 = time.monotonic()
    res = tool(command="echo started; setsid sleep 60 & nohup sleep 60 >/dev/null & sleep 60")
    took = time.monotonic() - t0
    assert 1.4 < took < 60  # not before the clock, and well before any sleep ends (the kill, not its speed)
    assert res.text.startswith("started") and "[killed: time limit of 1.5 s]" in res.text
    assert res.error and res.log["timed_out"] and res.log["exit_code"] is None
    assert processes_of(res.log["uid"]) == []


def test_closing_output_does_not_end_the_clock_early(org):
    q, stores, holder, _ = org
    tool = ShellTool(stores[holder], limits=replace(LIMITS, wall_s=1.5))
    res = tool(command="exec >&- 2>&-; sleep 60")
    assert res.log["timed_out"] and processes_of(res.log["uid"]) == []


def test_output_is_cut_at_8000_characters(tool):
    res = tool(command="yes 0123456789 | head -c 20000")
    assert len(res.text) <= 8000 and "[output cut at 8,000 characters]" in res.text
    assert res.log["truncated"] and not res.log["output_limited"]
    flood = tool(command="yes")
    assert not flood.log["timed_out"]  # cut by the output limit, not by the wall clock
    assert len(flood.text) <= 8000 and flood.log["output_limited"] and flood.error
    failing = tool(command="echo oops; exit 3")
    assert failing.text == "oops\n[exit status 3]" and failing.error and failing.log["exit_code"] == 3


def test_concurrent_calls_get_their_own_sandbox(org):
    q, stores, holder, other = org
    tools = [ShellTool(stores[a]) for a in (holder, other, holder)]
    results: list = [None] * 3

    def go(i):
        results[i] = tools[i](command="sleep 0.5; sqlite3 /memory/state.db 'SELECT count(*) FROM sessions'; id -u")

    threads = [threading.Thread(target=go, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counts = [int(r.text.split()[0]) for r in results]
    assert counts == [len(stores[holder].sessions), len(stores[other].sessions), len(stores[holder].sessions)]
    assert len({r.log["uid"] for r in results}) == 3
    # the sandboxes' mounts lived in their namespaces only
    assert "memspace" not in Path("/proc/self/mountinfo").read_text()


def test_memory_is_bounded_per_call_and_the_run_goes_on(tool):
    """Issue 15: eight 240 MB allocations in one call used to take 2 GB of the host; now 256 MiB in all."""
    assert "rlimit" not in tool.bounds, tool.describe()  # this machine can make cgroups (v1 here)
    assert tool.describe()["memory"].startswith("256 MiB for the whole command, no swap")
    res = tool(command='for i in $(seq 8); do python3 -c "x = bytearray(240 << 20); import time; '
                       'time.sleep(2); print(\'held\')" & done; wait; echo finished')
    assert res.text.startswith("held") and "finished" in res.text, res.text
    assert res.log["oom_kills"] >= 1 and res.text.count("held") + res.log["oom_kills"] == 8, res.text
    assert res.log["memory_peak_bytes"] <= 256 << 20
    assert f"[killed: {res.log['oom_kills']} processes over the memory limit of 256 MB" in res.text
    assert res.error and res.log["bounds"] == tool.bounds
    assert tool(command="echo alive").text == "alive\n"


def test_without_a_cgroup_the_weaker_bound_applies_and_is_said(org):
    """Where no cgroup can be made the per-process rlimits remain, and the plan says so."""
    q, stores, holder, _ = org
    plan = CgroupPlan({}, {"memory": "no writable memory hierarchy (test)", "pids": "none (test)"})
    res = sandbox._run(plan, 'for i in 1 2; do python3 -c "x = bytearray(200 << 20); import time; '
                             'time.sleep(1); print(\'held\')" & done; wait', stores[holder].sandbox_path, sandbox.LIMITS)
    assert res.output.count("held") == 2  # 400 MB in one call: only each process is bounded
    assert res.oom_kills is None and res.memory_peak_bytes is None and res.forks_refused is None
    assert plan.label == "memory=rlimit,pids=rlimit"
    bounds = plan.bounds(256 << 20, 10)
    assert bounds["memory"] == ("weaker: 256 MiB per process only (RLIMIT_AS), up to 10 x 256 MiB per call; "
                                "no memory cgroup: no writable memory hierarchy (test)")
    assert bounds["processes"].startswith("weaker: 10 processes of the call's uid (RLIMIT_NPROC) only")


# Each call returns (result, errno); run as the sandbox's uid. Without the filter (on the host as an
# unprivileged uid) clone/unshare(CLONE_NEWUSER), ptrace, keyctl, perf_event_open and io_uring_setup
# succeed, and clone3, setns, bpf fail with other errnos (EINVAL, EBADF, EINVAL).
SYSCALL_PROBE = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(nr, *args):
    ctypes.set_errno(0)
    return libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args]), ctypes.get_errno()
res = {}
r = sc(56, 0x10000000 | 17, 0, 0, 0, 0)  # clone(CLONE_NEWUSER | SIGCHLD)
if r[0] == 0:
    os._exit(0)
res["clone_newuser"] = r
res["unshare_user_mount"] = sc(272, 0x10000000 | 0x20000)
res["unshare_net"] = sc(272, 0x40000000)
res["clone3"] = sc(435, 0, 0)
res["setns"] = sc(308, -1, 0)
res["mount"] = sc(165, b"none", b"/tmp", b"tmpfs", 0, 0)
res["umount2"] = sc(166, b"/tmp", 0)
res["pivot_root"] = sc(155, b"/tmp", b"/tmp")
res["ptrace"] = sc(101, 0, 0, 0, 0)  # PTRACE_TRACEME
res["keyctl"] = sc(250, 0, -3, 1)  # KEYCTL_GET_KEYRING_ID, session keyring, create
res["add_key"] = sc(248, b"user", b"k", b"v", 1, -3)
attr = (ctypes.c_ubyte * 128)()
ctypes.c_uint32.from_buffer(attr, 0).value = 1  # PERF_TYPE_SOFTWARE, CPU clock
ctypes.c_uint32.from_buffer(attr, 4).value = 128
ctypes.c_uint64.from_buffer(attr, 40).value = (1 << 5) | (1 << 6)  # exclude kernel and hypervisor
res["perf_event_open"] = sc(298, ctypes.addressof(attr), 0, -1, -1, 0)
res["bpf"] = sc(321, 0, 0, 0)
params = (ctypes.c_ubyte * 120)()
res["io_uring_setup"] = sc(425, 1, ctypes.addressof(params))
print(res)
"""


def test_kernel_surface_is_denied(tool):
    """Issue 15: nested user namespaces (and a tmpfs mount in them), ptrace, keyctl, bpf, perf, mounts."""
    import ast

    res = tool(command=f"cat > /tmp/probe.py <<'EOF'\n{SYSCALL_PROBE}\nEOF\npython3 /tmp/probe.py")
    got = ast.literal_eval(res.text.strip().splitlines()[-1])
    eperm, enosys = 1, 38
    assert got.pop("clone3") == (-1, enosys)
    assert got == {name: (-1, eperm) for name in got}, got
    assert set(got) == {"clone_newuser", "unshare_user_mount", "unshare_net", "setns", "mount", "umount2",
                        "pivot_root", "ptrace", "keyctl", "add_key", "perf_event_open", "bpf", "io_uring_setup"}
    # the same call through the x32 ABI is not a way around the filter: the process is killed (SIGSYS)
    x32 = tool(command='python3 -c "import ctypes; ctypes.CDLL(None).syscall(0x40000000 | 272, 0x10000000)"; '
                       'echo "status $?"')
    assert "status 159" in x32.text  # 128 + SIGSYS


def test_state_directory_is_refused_unless_private(tmp_path):
    """Issue 15: a state directory made first by someone else (or a link to elsewhere) is refused."""
    st = os.stat(sandbox.STATE_DIR, follow_symlinks=False)
    assert st.st_uid == 0 and (st.st_mode & 0o777) == 0o700 and str(sandbox.STATE_DIR).startswith("/run/")
    fresh = tmp_path / "fresh"
    os.close(open_private_dir(fresh))
    assert (os.stat(fresh).st_mode & 0o777) == 0o700
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "link").symlink_to(elsewhere)
    foreign = tmp_path / "foreign"
    foreign.mkdir(mode=0o700)
    os.chown(foreign, 65534, 65534)
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o777)
    for hostile, why in ((tmp_path / "link", "link"), (foreign, "uid 65534"), (loose, "mode 777")):
        with pytest.raises(SandboxUnavailable, match=why):
            os.close(open_private_dir(hostile))
    with pytest.raises(SandboxUnavailable, match="link"):
        os.close(open_private_dir("link", dir_fd=os.open(tmp_path, os.O_RDONLY)))
    assert list(elsewhere.iterdir()) == []  # nothing was made where the link points


def test_every_input_becomes_a_tool_result(tool):
    """Issue 15: NUL bytes, unpaired surrogates and over-long commands used to raise."""
    for command, why in (("echo a\0b", "NUL character (at position 6)"),
                         ("echo \ud800", "unpaired surrogate at position 5"),
                         ("echo " + "x" * 200_000, "200,005 bytes long; the limit is 65,536")):
        res = tool(command=command)
        assert res.error and why in res.text and res.text.startswith("[not run: "), res.text
        assert res.log["rejected"] in res.text and res.log["command"] == command and res.log["tool"] == "terminal"
    long_ok = tool(command=": '" + "y" * 60_000 + "'; echo fits")  # 60 kB runs: under the 64 KiB cap
    assert long_ok.text == "fits\n"


def test_the_command_inherits_no_descriptor_of_the_harness(tool):
    """The cgroup descriptors and the file that carried the command are closed before the command runs."""
    res = tool(command="wc -c; python3 -c 'import os\nfor fd in range(1024):\n  try: os.fstat(fd); print(fd)\n"
                       "  except OSError: pass'")
    assert res.text.split() == ["0", "0", "1", "2"], res.text


def test_a_uid_in_use_on_the_host_is_skipped(tool):
    """Issue 15: a host process with the next free uid used to be waited on and shared its process limit."""
    import subprocess

    busy = sandbox.uids_in_use()
    nxt = next(u for u in range(sandbox.UID_BASE, sandbox.UID_BASE + 1000) if u not in busy and _lease_free(u))
    host = subprocess.Popen(["setpriv", f"--reuid={nxt}", f"--regid={nxt}", "--clear-groups", "sleep", "30"])
    try:
        deadline = time.monotonic() + 5
        while not processes_of(nxt) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert processes_of(nxt)
        res = tool(command="id -u")
        assert int(res.text) != nxt and res.log["uid"] == int(res.text)
    finally:
        host.kill()
        host.wait()


def _lease_free(uid: int) -> bool:
    import fcntl

    path = sandbox.STATE_DIR / "uids" / f"{uid}.lock"
    if not path.exists():
        return True
    with open(path) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        return True


def test_bad_arguments_raise_tool_error(tool):
    with pytest.raises(ToolError):
        tool()
    with pytest.raises(ToolError):
        tool(command=["ls"])
    res = tool(command="echo ok", timeout=5)
    assert res.text == "ok\n" and res.log["ignored_arguments"] == {"timeout": 5}


def test_the_limits_and_the_prompt(tool):
    assert (LIMITS.memory_bytes, LIMITS.wall_s, LIMITS.output_chars) == (256 * 1024 * 1024, 20.0, 8000)
    p = access_paragraph("shell")
    assert p == shell_paragraph()
    for needle in ("/memory/state.db", "sessions", "messages", "messages_fts", "seconds", "UTC",
                   "Use the terminal tool (sqlite3, grep and other read-only commands)"):
        assert needle in p
    s = tool.schema()["function"]
    assert s["name"] == "terminal" and s["parameters"]["required"] == ["command"]
    assert access_paragraph("session_search") == access_paragraph("session_search_compact") == (
        "Your past conversations are stored in your session database. "
        "Use the session_search tool to look them up before you answer.")
    assert '"a1"' in access_paragraph("fanout")


def test_a_store_path_gets_a_sandbox_copy(tmp_path):
    qs, sha = tiny_questions(tmp_path / "synth")
    q = next(iter(qs.values()))
    info = build_store(q, sha, root=tmp_path / "stores")
    plain = tmp_path / "plain.db"
    shutil.copyfile(info.path, plain)
    tool = ShellTool(plain)
    assert tool.store_file == plain.with_suffix(".ro.db") and tool.store_file.exists()
    res = tool(command="sqlite3 /memory/state.db 'SELECT count(*) FROM sessions'")
    assert res.text.strip() == str(len(q.sessions))
    assert not os.access(tool.store_file, os.W_OK) or os.geteuid() == 0


def _cmdlines_with(needle: str) -> list[int]:
    """Pids whose command line starts with `needle` (the sandboxed command itself, not its launchers)."""
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ").decode().startswith(needle):
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def test_sandbox_dies_even_if_the_harness_dies(org):
    """A second clock inside the namespace kills the command when the caller is gone."""
    import subprocess
    import sys

    q, stores, holder, _ = org
    code = ("import sys; from harness.runtime.sandbox import Limits, run_sandboxed; "
            "run_sandboxed('sleep 61.25', sys.argv[1], Limits(wall_s=1.0))")
    child = subprocess.Popen([sys.executable, "-c", code, str(stores[holder].sandbox_path)], cwd=REPO)
    deadline = time.monotonic() + 5
    while not _cmdlines_with("sleep 61.25") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _cmdlines_with("sleep 61.25"), "the sandbox did not start"
    child.kill()  # the harness process dies without cleaning up
    child.wait()
    deadline = time.monotonic() + 6
    while _cmdlines_with("sleep 61.25") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _cmdlines_with("sleep 61.25") == []
    # the dead harness left its call's (now empty) cgroups; the next call removes every such group
    leftovers = [u for u in leftover_groups(sandbox._cgroups) if not processes_of(u)]
    assert leftovers, "the killed harness should have left its groups behind"
    ShellTool(stores[holder])(command="true")
    assert not set(leftovers) & set(leftover_groups(sandbox._cgroups))
