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
from harness.runtime.sandbox import processes_of
from harness.run.tools import ToolError
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
    q, stores, holder, _ = org
    tool = ShellTool(stores[holder], limits=FAST)
    t0 = time.monotonic()
    res = tool(command="bomb() { bomb | bomb & }; bomb; sleep 30")
    assert time.monotonic() - t0 < FAST.wall_s + 4
    assert res.error and res.log["timed_out"]
    assert "fork" in res.text.lower() or "[killed" in res.text
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
    assert 1.4 < took < 5
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
    t0 = time.monotonic()
    flood = tool(command="yes")
    assert time.monotonic() - t0 < 10
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
