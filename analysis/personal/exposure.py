"""Appendix A.2: the privacy invariant checked at both ends of the sharing policy, per model and pooled.

Private end (the methods whose role is `private_end`, common.py): trials whose read returned an item
another agent wrote under a non-shared policy (retrieval-eligible exposure, must be 0), and
trials the judge scored above the floor on Profile or Task although nothing was injected
(`scored_without_memory`: the paper's one such trial was the judge crediting generic
language; each needs a look by hand). Shared end (the method under test): of every item the kernel's
reads returned, how many were the private-by-default conversation items of another agent
(the paper: none of 1,798). Injected items of another user (`foreign_items`) must be 0 everywhere.
Both ends also say what the view prevented: each read is audited under the unrestricted scope
(the user's items nearest the query from every agent, any policy) and the visibility rule applied
(`audited_items`, `prevented_items`, `prevented_conversation`), so a zero exposure is a measured
zero beside what could have leaked, not a zero by construction. The audit reads after the trial's writes
have landed (the method's `finish`), beside what they wrote (`written_items`); a write not landed by then
is counted as unaudited (`unaudited_writes`), never as kept out.
The pooled rows (model "all") sum the models, as the paper's n = 450 does.
"""

from __future__ import annotations

import pandas as pd

from analysis.markdown import md_table
from analysis.personal import Table, register

COLUMNS = ("model", "condition", "endpoint", "trials", "exposed_trials", "scored_without_memory",
           "retrieved_items", "conversation_retrieved", "injected_items", "conversation_injected", "foreign_items",
           "audited_items", "prevented_items", "prevented_conversation", "written_items", "unaudited_writes")


def _row(model: str, cond: str, g: pd.DataFrame, private: bool) -> dict:
    row = {"model": model, "condition": cond, "endpoint": "private" if private else "shared", "trials": len(g),
           "retrieved_items": int(g.n_candidates.sum()), "injected_items": int(g.n_injected.sum()),
           "foreign_items": int(g.foreign_items.sum()),
           "conversation_retrieved": int(g.conversation_retrieved.sum()),
           "conversation_injected": int(g.conversation_injected.sum()),
           **{c: int(pd.to_numeric(g[c], errors="coerce").fillna(0).sum()) if c in g else 0
              for c in ("audited_items", "prevented_items", "prevented_conversation", "written_items",
                        "unaudited_writes")}}
    if private:
        above = (g.profile_usage.fillna(1) > 1) | (g.task_usage.fillna(1) > 1)
        row.update(exposed_trials=int((g.exposure_private > 0).sum()),
                   scored_without_memory=int(((g.n_injected == 0) & above & (g.status == "ok")).sum()))
    return row


def build(st) -> pd.DataFrame:
    runs, who = st.study, st.roles
    rows = []
    ends = [(c, True) for c in who.private_end] + ([(who.under_test, False)] if who.under_test else [])
    for cond, private in ends:
        c = runs[runs.condition == cond]
        if c.empty:
            continue
        rows += [_row(m, cond, g, private) for m, g in c.groupby("model", sort=True)]
        rows.append(_row("all", cond, c, private))
    return pd.DataFrame(rows, columns=list(COLUMNS))


def section(st) -> str:
    t = st.table("exposure")
    body = []
    for r in t.itertuples():
        if r.endpoint == "private":
            what = (f"exposure {int(r.exposed_trials)}/{r.trials} trials; scored above the floor with nothing "
                    f"injected: {int(r.scored_without_memory)}")
        else:
            what = f"conversation items {r.conversation_retrieved} of {r.retrieved_items} retrieved"
        body.append([("**all models**" if r.model == "all" else r.model), r.condition, r.endpoint, what,
                     f"{r.prevented_items} of {r.audited_items} ({r.prevented_conversation} conversation); "
                     f"{r.written_items} written, {r.unaudited_writes} writes unaudited",
                     r.foreign_items])
    return ("## Appendix A.2: exposure at both endpoints (per model and pooled)\n\n[`exposure.csv`](exposure.csv)\n\n"
            + (md_table(["model", "method", "endpoint", "check", "kept out by the rule, of the unrestricted read",
                                "items of another user"], body) if body
               else f"(no runs of {', '.join((*st.roles.private_end, st.roles.under_test or 'the method under test'))})")
            + "\n")


register(Table("exposure", "exposure.csv", build, section, order=60, columns=COLUMNS))
