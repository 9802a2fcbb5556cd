"""The shell condition: `terminal(command)` in a sandbox that shows only the agent's store.

WHY: deployed agents often read their records with their own sqlite3 and grep
commands (Section 3.3, interface (ii)). The sandbox (see `sandbox.py`) mounts
the store read-only at /memory/state.db, with no network, 256 MB and 10
processes for the whole command, a 20-second limit and output cut to 8,000
characters. Every input returns a result, so the run goes on: a command that
fails, times out or is OOM-killed, and one the sandbox cannot take (a NUL byte,
text that is not Unicode, over 64 KiB), which becomes a tool error the model reads.
Every log carries `bounds`: which memory and process bound applied (a cgroup per
call, or the weaker per-process rlimits where none can be made, and why).

The tool definition is ours (the paper names only `terminal(command)`); the
runtime's own terminal tool carries options (background jobs, working
directories) that do not apply to a one-shot sandbox.

Which sessions did a result contain? Shell output need not show session ids,
so a session counts as present when
  (a) its opaque id (`s` + 12 hex digits) appears in the output, or
  (b) the output contains a stretch copied from one of its messages that no other
      session of the store contains: after collapsing whitespace (and, for a second
      try, undoing JSON/CSV escapes \\n, \\t, \\", \\\\ and ""), some 50-character
      piece of the message taken at offsets 0, 25, 50, ... (and its last 50
      characters) occurs in the output, and that piece occurs in this session only.
Any copied stretch of 74 characters or more, and any message prefix of 50 or
more (`substr(content, 1, 60)`), is therefore detected; short or shared text
(boilerplate repeated across sessions) is not.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from harness.runtime.tools import ToolError, ToolResult

from .sandbox import LIMITS, STORE_MOUNT, Limits, check_sandbox, command_bytes, describe, run_sandboxed
from .store import StoreInfo, ensure_sandbox_copy

TOOL_NAME = "terminal"
SHINGLE = 50
STRIDE = 25
_ID = re.compile(r"s[0-9a-f]{12}")
_WS = re.compile(r"\s+")

DESCRIPTION = (
    "Run a shell command (POSIX sh) in a read-only sandbox that contains your session database at "
    f"{STORE_MOUNT}. sqlite3, grep and the usual read-only command-line tools are available; there is no "
    "network. Each command may run for at most 20 seconds, and its output (stdout and stderr) is cut at "
    "8,000 characters."
)


def _norm(text: str) -> str:
    return _WS.sub(" ", text).strip()


def _unescape(text: str) -> str:
    return (text.replace('\\"', '"').replace("\\n", " ").replace("\\t", " ").replace("\\r", " ")
            .replace("\\\\", "\\").replace('""', '"'))


class SessionDetector:
    """Finds which sessions of a store a piece of shell output contains (rule in the module docstring)."""

    def __init__(self, store_file: Path):
        con = sqlite3.connect(f"file:{store_file}?mode=ro&immutable=1", uri=True)
        try:
            rows = con.execute("SELECT session_id, content FROM messages WHERE content IS NOT NULL").fetchall()
            self.ids = {r[0] for r in con.execute("SELECT id FROM sessions")}
        finally:
            con.close()
        owners: dict[str, set[str]] = defaultdict(set)
        for sid, content in rows:
            text = _norm(str(content))
            if len(text) < SHINGLE:
                continue
            starts = set(range(0, len(text) - SHINGLE + 1, STRIDE)) | {len(text) - SHINGLE}
            for i in starts:
                owners[text[i:i + SHINGLE]].add(sid)
        self.shingles = {k: next(iter(v)) for k, v in owners.items() if len(v) == 1}

    def sessions(self, output: str) -> list[str]:
        found: list[str] = []
        for m in _ID.findall(output):
            if m in self.ids and m not in found:
                found.append(m)
        for variant in {_norm(output), _norm(_unescape(output))}:
            for i in range(0, max(len(variant) - SHINGLE + 1, 0)):
                sid = self.shingles.get(variant[i:i + SHINGLE])
                if sid and sid not in found:
                    found.append(sid)
        return found


class ShellTool:
    """`terminal(command)` on one agent's store."""

    name = TOOL_NAME

    def __init__(self, store: StoreInfo | str | Path, *, limits: Limits = LIMITS):
        if isinstance(store, StoreInfo):
            self.store_file = store.sandbox_path
            self.agent = store.agent
        else:
            path = Path(store)
            self.store_file = path if path.name.endswith(".ro.db") else ensure_sandbox_copy(path)
            self.agent = None
        if not self.store_file.is_file():
            raise FileNotFoundError(f"sandbox copy {self.store_file} does not exist")
        self.limits = limits
        check_sandbox()  # fail at construction, with the reason, not in the middle of a run
        self.bounds = describe(limits)["cgroups"]
        self.detector = SessionDetector(self.store_file)

    def schema(self) -> dict:
        return {
            "type": "function",
            "function": {
                "name": TOOL_NAME,
                "description": DESCRIPTION,
                "parameters": {
                    "type": "object",
                    "properties": {
                        "command": {
                            "type": "string",
                            "description": f'The command to run, e.g. sqlite3 {STORE_MOUNT} "SELECT ..." or grep.',
                        }
                    },
                    "required": ["command"],
                },
            },
        }

    def _format(self, output: str, notes: list[str]) -> tuple[str, bool]:
        limit = self.limits.output_chars
        tail = ("\n" if output and not output.endswith("\n") else "") + "\n".join(notes) if notes else ""
        if len(output) + len(tail) <= limit:
            return (output + tail) or "(no output)", False
        cut_note = f"\n[output cut at {limit:,} characters]"
        tail = cut_note + (("\n" + "\n".join(notes)) if notes else "")
        return output[: max(limit - len(tail), 0)] + tail, True

    def describe(self) -> dict[str, str]:
        """What bounds this tool's calls on this machine (also in every call's log as `bounds`)."""
        return describe(self.limits)

    def __call__(self, command: Any = None, **extra: Any) -> ToolResult:
        if not isinstance(command, str) or not command.strip():
            raise ToolError("terminal needs a non-empty string argument 'command'")
        t0 = time.perf_counter()
        log: dict[str, Any] = {"tool": TOOL_NAME, "command": command, "store": self.agent, "bounds": self.bounds}
        if extra:
            log["ignored_arguments"] = extra
        try:
            command_bytes(command, self.limits)
        except ValueError as exc:  # the sandbox cannot take it: the model reads why, the run goes on
            text = f"[not run: {exc}]"
            log.update(rejected=str(exc), exit_code=None, chars=len(text), sessions=[])
            return ToolResult(text=text, retrieval_s=time.perf_counter() - t0, empty=True, error=True, log=log)
        res = run_sandboxed(command, self.store_file, self.limits)
        wall = time.perf_counter() - t0
        notes = []
        if res.setup_error:
            notes.append(f"[sandbox error: {res.setup_error[-300:]}]")
        elif res.timed_out:
            notes.append(f"[killed: time limit of {self.limits.wall_s:g} s]")
        elif res.output_limited:
            notes.append(f"[killed: output over {self.limits.capture_bytes // 1024} KB]")
        if res.oom_kills:
            notes.append(f"[killed: {res.oom_kills} process{'es' if res.oom_kills > 1 else ''} over the memory "
                         f"limit of {self.limits.memory_bytes >> 20} MB for the whole command]")
        if res.forks_refused:
            notes.append(f"[{res.forks_refused} process start{'s' if res.forks_refused > 1 else ''} refused: "
                         f"limit of {self.limits.nproc} processes]")
        if not (res.setup_error or res.timed_out or res.output_limited) and res.exit_code not in (0, None):
            notes.append(f"[exit status {res.exit_code}]")
        text, truncated = self._format(res.output, notes)
        sessions = self.detector.sessions(text)
        log.update({
            "exit_code": res.exit_code, "timed_out": res.timed_out,
            "output_limited": res.output_limited, "truncated": truncated, "output_chars": len(res.output),
            "chars": len(text), "uid": res.uid, "sandbox_s": res.wall_s,
            "setup_error": res.setup_error, "sessions": sessions, "oom_kills": res.oom_kills,
            "memory_peak_bytes": res.memory_peak_bytes, "forks_refused": res.forks_refused,
        })
        return ToolResult(
            text=text, sessions=sessions, retrieval_s=wall,
            empty=not res.output.strip(),
            error=bool(res.setup_error or res.timed_out or res.output_limited or res.oom_kills
                       or res.exit_code not in (0, None)),
            log=log,
        )
