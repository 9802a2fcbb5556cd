"""Table 7 (Appendix A.6): the system calls the agents write and read memory through, generated from the layer.

`harness.kernel.syscalls.interface()` lists each call (name, arguments, guarantee); this
table prints exactly that, so the table cannot drift from the code. Without that layer in
the tree the table is not built and the analysis says why (exit 1), never a typed-in list.
"""

from __future__ import annotations

import importlib

import pandas as pd

from analysis.markdown import md_table
from analysis.personal import Table, register

MODULE = "harness.kernel.syscalls"
REQUIRED = ("name", "arguments", "guarantee")
COLUMNS = ("name", "arguments", "guarantee")


def interface() -> list[dict]:
    from .report import TableUnavailable

    try:
        mod = importlib.import_module(MODULE)
    except ImportError as exc:
        raise TableUnavailable(f"Table 7 is generated from {MODULE}.interface(), and {MODULE} does not import "
                               f"({exc}); the system-call layer is not in this tree") from None
    fn = getattr(mod, "interface", None)
    if not callable(fn):
        raise TableUnavailable(f"Table 7 is generated from {MODULE}.interface(), which {MODULE} does not define")
    calls = list(fn())
    for i, c in enumerate(calls):
        missing = [k for k in REQUIRED if k not in c]
        if missing:
            raise TableUnavailable(f"{MODULE}.interface() entry {i} lacks {', '.join(missing)}")
    return calls


def frame(calls: list[dict]) -> pd.DataFrame:
    def text(v) -> str:
        if isinstance(v, dict):
            return ", ".join(f"{k}: {t}" for k, t in v.items())
        return ", ".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)

    extra = sorted({k for c in calls for k in c} - set(REQUIRED))
    return pd.DataFrame([{k: text(c.get(k, "")) for k in (*REQUIRED, *extra)} for c in calls],
                        columns=[*REQUIRED, *extra])


def build(st) -> pd.DataFrame:
    return frame(interface())


def section(st) -> str:
    t = st.table("table7")
    return (f"## Table 7: the system-call interface\n\n[`table7_syscalls.csv`](table7_syscalls.csv), generated from "
            f"`{MODULE}.interface()`.\n\n" + md_table(list(t.columns), t.itertuples(index=False)) + "\n")


register(Table("table7", "table7_syscalls.csv", build, section, order=90, columns=COLUMNS))
