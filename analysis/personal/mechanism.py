"""What each memory method's read found, and whose id it searched: the mechanism behind a method's score.

The paper attributes mem0_default's floor to write ordering and identity resolution. Here the mechanism is
read from the records rather than asserted: per method, the scope its read searched (Mem0's filters, the
kernel's view), how many items it retrieved, how many the store held under that scope when it read, how many
the trial's writers stored (`written_items`, under their own agent ids) and how many reads timed out waiting.
A method that retrieves nothing while its writers stored items under other ids is scoped away from them (the
paper's mem0_default searches by the assistant's agent id, under which no writer stores anything), whatever
it waited; a method that retrieves little because its reads timed out lost to write ordering.
"""

from __future__ import annotations

import pandas as pd

from analysis.markdown import md_table
from analysis.personal import Table, register

COLUMNS = ("model", "condition", "trials", "searched_scope", "retrieved_items", "retrieved_mean",
           "reads_with_none", "scope_items", "written_items", "timeouts")


def build(st) -> pd.DataFrame:
    runs = st.study
    if runs.empty or "searched_scope" not in runs:
        return pd.DataFrame(columns=list(COLUMNS))
    k = runs[runs.searched_scope.notna()]
    rows = []
    for (model, cond), g in k.groupby(["model", "condition"], sort=True):
        num = lambda c: int(pd.to_numeric(g[c], errors="coerce").fillna(0).sum())  # noqa: E731
        rows.append({"model": model, "condition": cond, "trials": len(g),
                     "searched_scope": "; ".join(sorted(set(g.searched_scope))),
                     "retrieved_items": int(g.n_candidates.sum()), "retrieved_mean": float(g.n_candidates.mean()),
                     "reads_with_none": int((g.n_candidates == 0).sum()), "scope_items": num("scope_items"),
                     "written_items": num("written_items"), "timeouts": int(g.timed_out.sum())})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def reading(r) -> str:
    """One sentence on the mechanism, from the row's own figures."""
    if r.retrieved_items == 0 and r.written_items > 0:
        return (f"retrieved nothing in {r.reads_with_none} of {r.trials} reads although the trials' writers stored "
                f"{r.written_items} items: it searched {r.searched_scope}, under which the store held "
                f"{r.scope_items}; the floor is its scope (the writers store under their own ids), "
                + ("not waiting (no read timed out)" if r.timeouts == 0 else f"and {r.timeouts} reads timed out"))
    if r.timeouts:
        return (f"{r.timeouts} of {r.trials} reads timed out before the writes landed (write ordering); "
                f"{r.retrieved_mean:.2f} items per read")
    return f"{r.retrieved_mean:.2f} items per read of {r.written_items / max(r.trials, 1):.1f} written per trial"


def section(st) -> str:
    t = st.table("mechanism")
    body = [[r.model, r.condition, r.searched_scope, f"{r.retrieved_items} ({r.retrieved_mean:.2f}/read)",
             r.scope_items, r.written_items, r.timeouts, reading(r)] for r in t.itertuples()]
    return ("## What each method's read found, and whose id it searched\n\n[`mechanism.csv`](mechanism.csv)\n\n"
            + (md_table(["model", "method", "searched", "items retrieved", "held under that scope",
                         "written by the trial's writers", "timeouts", "mechanism"], body) if body
               else "(no method read a store)") + "\n")


register(Table("mechanism", "mechanism.csv", build, section, order=65, columns=COLUMNS))
