"""runs.csv: one row per run, the data behind every table (analysis.load.runs_frame)."""

from __future__ import annotations

from analysis.tables import Table, register

register(Table("runs", "runs.csv", lambda res: res.runs, order=1))
