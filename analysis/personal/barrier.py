"""The write barrier at work: reads that missed a write the user had already made, and timeouts.

A read misses a write when the write was accepted before the read (its sequence number is
in the read's snapshot), committed items the reader may see, and none came back (Eq. 3);
with the barrier on that happens only after the fail-open timeout.
"""

from __future__ import annotations

import pandas as pd

from analysis.markdown import simple_section
from analysis.personal import Table, register

COLUMNS = ("model", "condition", "reads", "barrier", "missed_writes", "reads_missing", "timeouts",
           "barrier_wait_s_mean")


def build(st) -> pd.DataFrame:
    k = st.study[st.study.missed_writes.notna()]
    if k.empty:
        return pd.DataFrame(columns=list(COLUMNS))
    out = k.groupby(["model", "condition"], sort=True).agg(
        reads=("trial_id", "size"), barrier=("barrier", "first"), missed_writes=("missed_writes", "sum"),
        reads_missing=("missed_writes", lambda s: int((s > 0).sum())), timeouts=("timed_out", "sum"),
        barrier_wait_s_mean=("barrier_wait_s", lambda s: pd.to_numeric(s, errors="coerce").mean())).reset_index()
    return out[list(COLUMNS)]


def section(st) -> str:
    t = st.table("barrier")
    return "## Write barrier\n\n[`barrier.csv`](barrier.csv)\n\n" + simple_section(t, [
        ("model", "model", str), ("method", "condition", str), ("reads", "reads", int), ("barrier", "barrier", str),
        ("missed writes", "missed_writes", int), ("reads missing a write", "reads_missing", int),
        ("timeouts", "timeouts", int), ("mean wait s", "barrier_wait_s_mean", lambda x: f"{x:.3f}")])


register(Table("barrier", "barrier.csv", build, section, order=70, columns=COLUMNS))
