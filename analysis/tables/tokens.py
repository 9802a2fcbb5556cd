"""Token decomposition (Proposition 3): prefix, tool results and output per question."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd

from analysis import stats
from analysis.load import Folder
from analysis.markdown import integer, link, num, simple_section, text
from analysis.tables import Table, register
from analysis.tables.common import each_condition
from analysis.tables.status import status_line as _status_line


def tokens_table(runs: pd.DataFrame, folders: Sequence[Folder]) -> pd.DataFrame:
    """Token decomposition (Proposition 3: prefix, tool results, output) and per-question variation."""
    rows = []
    for f, variant, c, d in each_condition(runs, folders):
        t = d["tokens"].to_numpy(float)
        rows.append({
            "folder": f.name, "variant": variant, "condition": c, "n": len(d), "repeat": 0,
            "mean_agent_calls": float(d["dec_calls"].mean()), "mean_prefix": float(d["dec_prefix"].mean()),
            "mean_results": float(d["dec_results"].mean()), "mean_output": float(d["dec_output"].mean()),
            "mean_input": float(d["dec_input"].mean()), "mean_tokens": float(t.mean()),
            "median_tokens": float(np.median(t)),
            "cv_tokens": stats.coefficient_of_variation(t) if len(t) > 1 else math.nan,
            "asked_agent_tokens": float((d["tokens"] - d["dec_input"] - d["dec_output"]).mean()),
            # calls whose usage the server did not report as counts: their tokens here are estimates
            "usage_estimated_calls": int(d["usage_estimated_calls"].sum()) if "usage_estimated_calls" in d else 0,
        })
    return pd.DataFrame(rows)


def tokens_section(res) -> str:
    """Token decomposition."""
    t = res.tables
    parts: list[str] = []
    parts.append("\n## Token decomposition (Proposition 3)\n\n")
    parts.append(f"{link('tokens.csv')}; status: {_status_line(res, 'token_decomposition')}. Per question (repeat "
                 "0): the first call's prompt (prefix P), what tool results added between calls, output; the "
                 "agent's own calls only (asked agents in the last column); CV = sd/mean of tokens per question.\n\n")
    parts.append(simple_section(t["tokens"], [
        ("folder", "folder", text), ("variant", "variant", text), ("condition", "condition", text),
        ("n", "n", integer), ("calls", "mean_agent_calls", num), ("prefix", "mean_prefix", integer),
        ("results", "mean_results", integer), ("output", "mean_output", integer), ("input", "mean_input", integer),
        ("tokens", "mean_tokens", integer), ("CV tokens", "cv_tokens", num),
        ("asked agents' tokens", "asked_agent_tokens", integer),
        ("calls with usage estimated", "usage_estimated_calls", integer)],
        usage=("mean_prefix", "mean_results", "mean_output", "mean_input", "mean_tokens", "cv_tokens",
               "asked_agent_tokens")))
    return "".join(parts)


register(Table("tokens", "tokens.csv", lambda res: tokens_table(res.runs, res.folders), tokens_section,
               prereg=("token_decomposition",), order=90))
