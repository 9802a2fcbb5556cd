"""The `{access}` paragraphs of the system prompt for the runtime's own memory (Appendix B).

WHY here: the prompt may differ between conditions only in this paragraph, and
the shell's paragraph must name exactly what the sandbox shows (the db file, the
three tables that hold the conversations, the unit of timestamps).

The session-search sentence is the paper's. The shell paragraph follows the
paper's description (file, three tables, timestamp unit, then "Use the terminal
tool (sqlite3, grep and other read-only commands)..."), whose full wording is
abridged there; the sentence below is ours. The fan-out addition (how to name
another agent's store) is ours too: the paper says only that the runtime's
session search accepts the name of another agent's store.
"""

from __future__ import annotations

from .sandbox import STORE_MOUNT

SESSION_SEARCH = ("Your past conversations are stored in your session database. "
                  "Use the session_search tool to look them up before you answer.")

SHELL_TABLES = ("sessions", "messages", "messages_fts")


def shell_paragraph(db_file: str = STORE_MOUNT) -> str:
    return (
        f"Your past conversations are stored in the SQLite database {db_file}. Three tables matter: "
        "sessions (one row per conversation; id, started_at, ended_at), "
        "messages (one row per message; id, session_id, role, content, timestamp) and "
        "messages_fts (an FTS5 full-text index of messages.content whose rowid is messages.id). "
        "started_at, ended_at and timestamp are Unix times in seconds (UTC). "
        "Use the terminal tool (sqlite3, grep and other read-only commands) to look up your past "
        "conversations before you answer; the database is read-only, a command may run for at most "
        "20 seconds and its output is cut at 8,000 characters."
    )


def fanout_paragraph(others: tuple[str, ...] = ("a1", "a2", "a3")) -> str:
    names = ", ".join(f'"{a}"' for a in others[:-1]) + f' or "{others[-1]}"' if len(others) > 1 else f'"{others[0]}"'
    plain = ", ".join(others[:-1]) + f" and {others[-1]}" if len(others) > 1 else others[0]
    return (SESSION_SEARCH + f" The session databases of assistants {plain} are open to you as well: "
            f"pass profile {names} to session_search to search one of them.")


def access_paragraph(condition: str) -> str:
    """The access paragraph for 'session_search', 'session_search_compact', 'shell' or 'fanout'."""
    if condition in ("session_search", "session_search_compact"):
        return SESSION_SEARCH
    if condition == "shell":
        return shell_paragraph()
    if condition == "fanout":
        return fanout_paragraph()
    raise ValueError(f"no runtime access paragraph for condition {condition!r}")
