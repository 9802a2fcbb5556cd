"""Ctrl-C stops a stage like any other stop (issue 42): one `stopped:` line naming it, exit 3, no traceback;
the line counts what became of the runs in flight (let end: recorded if they finished, else unrecorded; it
once said "stay unrecorded" of runs it had just recorded) and the same command finishes every run exactly once."""

from __future__ import annotations

import re
import signal
import subprocess
import time

from tests.fake_model import FakeModel
from tests.test_driver import cmd, records


def ctrl_c_as_a_terminal_sends_it() -> None:
    """In the child before it runs: SIGINT handled by default and not blocked, as a shell starts a command. A
    process inherits both from its parent, and a test worker's parent may have set either (a SIGINT ignored
    there is ignored by the command, and no KeyboardInterrupt is ever raised in it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def test_ctrl_c_mid_stage_is_a_stop_with_exit_3_and_the_same_command_finishes(tmp_path):
    with FakeModel(delay_s=2.0) as fake:
        proc = subprocess.Popen(cmd(fake, tmp_path, "concurrency=1"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, preexec_fn=ctrl_c_as_a_terminal_sends_it)
        deadline = time.monotonic() + 240
        while not fake.run_requests and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)  # waits for an event (the first run's call), not for a duration
        assert fake.run_requests, "no run started"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 3, err
        assert "stopped: interrupted (Ctrl-C)" in err
        assert "Traceback" not in err and "KeyboardInterrupt" not in err
        first = records(tmp_path)
        assert len(first) < 36
        # one run at a time, interrupted during the first run's call: no record before it, so every record
        # is one of the runs in flight, and the line says how many
        said = re.search(r"of the (\d+) run\(s\) in flight, (\d+) finished and were recorded, (\d+) stay unrecorded",
                         err)
        assert said, err
        assert int(said.group(1)) == 1 and int(said.group(2)) == len(first) and int(said.group(3)) == 1 - len(first)
        fake.delay_s = 0.0
        again = subprocess.run(cmd(fake, tmp_path, "concurrency=4"), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    recs = records(tmp_path)
    assert len(recs) == 36 and all(r["status"] == "ok" for r in recs.values())
    assert all(recs[k]["finished"] == v["finished"] for k, v in first.items())  # none recorded twice


def test_the_stop_line_counts_the_runs_in_flight_as_they_ended(capsys):
    """Runs in flight at Ctrl-C are let end: the line says how many were recorded, never "stay unrecorded" of all."""
    from harness.failures import STOPPED, Interrupted, interrupted

    assert interrupted(Interrupted(2, 2)) == STOPPED
    err = capsys.readouterr().err
    assert "of the 2 run(s) in flight, 2 finished and were recorded, 0 stay unrecorded —" in err
    assert interrupted(Interrupted(3, 1)) == STOPPED
    assert "1 finished and were recorded, 2 stay unrecorded (their calls stay in the ledger)" in capsys.readouterr().err
    interrupted(KeyboardInterrupt())  # outside the runs (a judge, the preflight): no count, no false claim
    assert "each that finished is recorded, the others stay unrecorded" in capsys.readouterr().err
