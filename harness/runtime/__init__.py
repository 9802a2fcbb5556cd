"""The runtime's own memory: Hermes Agent session stores, its session_search tool, and a shell.

hermes.py         loads the runtime once (HERMES_HOME, TZ=UTC); runtime_facts(): version and result shape
store.py          builds and caches per-agent stores with the runtime's storage API
session_search.py the runtime's tool, unmodified, plus the compact cut and fan-out
sandbox.py        the namespace/cgroup/seccomp/rlimit sandbox for shell commands
sandbox_cgroup.py the memory and pids cgroup of each sandboxed call
sandbox_exec.py   the sandbox's last step (cgroups joined, seccomp loaded, then sh -c)
shell.py          terminal(command) over one store, and which sessions its output shows
access.py         the prompt's access paragraphs for these conditions
"""

from .access import SESSION_SEARCH, access_paragraph, fanout_paragraph, shell_paragraph
from .hermes import (
    PAPER_RUNTIME, PAPER_RUNTIME_VERSION, PAPER_SESSION_SEARCH_SHAPE, SHAPES, RuntimeSetupError, runtime_distribution,
    runtime_facts, runtime_label, runtime_version, session_search_shape, tool_sha256,
)
from .hermes import load as load_runtime
from .sandbox import LIMITS, Limits, SandboxResult, SandboxUnavailable, check_sandbox, run_sandboxed
from .session_search import SessionSearchTool, compact_result, fts5_error, profile_search_supported, runtime_schema
from .shell import SessionDetector, ShellTool
from .store import (
    StoreInfo, StoreRuntimeMismatch, build_org_stores, build_store, check_store_writer, ensure_sandbox_copy,
    open_session_db, store_path,
)

__all__ = [
    "SESSION_SEARCH", "access_paragraph", "fanout_paragraph", "shell_paragraph",
    "PAPER_RUNTIME", "PAPER_RUNTIME_VERSION", "PAPER_SESSION_SEARCH_SHAPE", "SHAPES", "RuntimeSetupError",
    "load_runtime", "runtime_distribution", "runtime_facts", "runtime_label", "runtime_version",
    "session_search_shape", "tool_sha256",
    "LIMITS", "Limits", "SandboxResult", "SandboxUnavailable", "check_sandbox", "run_sandboxed",
    "SessionSearchTool", "compact_result", "fts5_error", "profile_search_supported", "runtime_schema",
    "SessionDetector", "ShellTool",
    "StoreInfo", "StoreRuntimeMismatch", "build_org_stores", "build_store", "check_store_writer",
    "ensure_sandbox_copy", "open_session_db", "store_path",
]
