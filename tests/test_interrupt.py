"""Ctrl-C stops a stage like any other stop (issue 42): one `stopped:` line naming it, exit 3, no traceback;
the run in flight stays unrecorded and the same command finishes every run exactly once."""

from __future__ import annotations

import signal
import subprocess
import time

from tests.fake_model import FakeModel
from tests.test_driver import cmd, records


def test_ctrl_c_mid_stage_is_a_stop_with_exit_3_and_the_same_command_finishes(tmp_path):
    with FakeModel(delay_s=2.0) as fake:
        proc = subprocess.Popen(cmd(fake, tmp_path, "concurrency=1"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
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
        fake.delay_s = 0.0
        again = subprocess.run(cmd(fake, tmp_path, "concurrency=4"), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    recs = records(tmp_path)
    assert len(recs) == 36 and all(r["status"] == "ok" for r in recs.values())
    assert all(recs[k]["finished"] == v["finished"] for k, v in first.items())  # none recorded twice
