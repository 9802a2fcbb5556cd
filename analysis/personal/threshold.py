"""The kernel's relevance threshold: the choice the stage made, and what each threshold would drop.

The paper ran 0.3 (Section 4.2). The personal stages here run -1 (conf/stage/personal.yaml):
the offline stand-in encoder (MiniLM) gives a vague query a cosine of about -0.1..0.1 with
every profile and task fact, so 0.3 would inject nothing. The sweep shows it on the very
reads of the stage instead of asserting it.

It is exact for every threshold at or above the one the stage ran, from the records alone:
the kernel keeps the items scoring at least the threshold, best first, up to the cap and
the budget, so a higher threshold keeps exactly the injected items that score at least it
(each injected item's cosine is in the record). A threshold below the stage's is not
computable (what the stage's threshold dropped was not scored in the record) and its row
says so; `candidates_below_ran` counts what the stage's own threshold dropped (the kernel's log).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.markdown import md_table
from analysis.personal import Table, register

from .common import PAPER_THRESHOLD

GRID = (-1.0, 0.0, 0.1, 0.2, 0.3, 0.4, 0.5)
TYPES = ("profile", "task_context", "conversation")
COLUMNS = ("model", "condition", "ran_threshold", "encoder", "candidates_below_ran", "threshold", "computable", "reads",
           "items_at_ran",
           "items_kept", "items_dropped", "dropped_share", "reads_left_empty", "mean_kept",
           *(f"dropped_{t}" for t in TYPES))


def build(st) -> pd.DataFrame:
    runs = st.study[st.study.threshold.notna() & (st.study.status == "ok")]
    rows = []
    for (model, cond, ran), g in runs.groupby(["model", "condition", "threshold"], sort=True):
        scores = [np.asarray([np.nan if s is None else s for s in x], float) for x in g.injected_scores]
        types = list(g.injected_types)
        total = int(sum(len(s) for s in scores))
        for t in sorted(set(GRID) | {float(ran)}):
            base = {"model": model, "condition": cond, "ran_threshold": float(ran),
                    "encoder": ", ".join(sorted(set(g.encoder.dropna()))),
                    "candidates_below_ran": pd.to_numeric(g.below_threshold, errors="coerce").sum(min_count=1),
                    "threshold": t, "reads": len(g),
                    "items_at_ran": total, "computable": t >= float(ran)}
            if t < float(ran):
                rows.append(base)
                continue
            keep = [s >= t for s in scores]  # NaN (unscored) never passes a threshold
            kept = int(sum(k.sum() for k in keep))
            row = {**base, "items_kept": kept, "items_dropped": total - kept,
                   "dropped_share": (total - kept) / total if total else np.nan,
                   "reads_left_empty": int(sum(not k.any() for k in keep)), "mean_kept": kept / len(g)}
            for ty in TYPES:
                row[f"dropped_{ty}"] = int(sum(((~k) & (np.asarray(tt, object) == ty)).sum()
                                               for k, tt in zip(keep, types)))
            rows.append(row)
    return pd.DataFrame(rows, columns=list(COLUMNS))


def section(st) -> str:
    t = st.table("threshold")
    if t.empty:
        return "## Relevance threshold\n\n(no kernel reads recorded)\n"
    ran = sorted(set(t.ran_threshold))
    enc = ", ".join(sorted({e for e in t.encoder if e}))
    head = (f"## Relevance threshold: the choice and a sweep\n\n[`threshold_sweep.csv`](threshold_sweep.csv). "
            f"The paper's kernel keeps memories scoring at least {PAPER_THRESHOLD} (Section 4.2); these kernel "
            f"reads ran with {', '.join(f'{x:g}' for x in ran)} on the {enc or 'recorded'} encoder"
            + (" — not the paper's value: the offline stand-in encoder gives a vague query a cosine near 0 with "
               "every fact, so the paper's threshold would inject (almost) nothing. The rows below show what each "
               "threshold would have dropped from these same reads (exact for thresholds at or above the one the "
               "stage ran; lower ones are not computable from the records)."
               if any(x != PAPER_THRESHOLD for x in ran) else ".") + "\n\n")
    body = [[r.model, r.condition, f"{r.threshold:g}" + (" (paper)" if r.threshold == PAPER_THRESHOLD else "")
             + (" (ran)" if r.threshold == r.ran_threshold else ""),
             *(["not computable (below the threshold the stage ran)", "", "", ""] if not r.computable else
               [f"{int(r.items_dropped)} of {int(r.items_at_ran)} ({100 * r.dropped_share:.0f}%)"
                if r.items_at_ran else "0 of 0", f"{r.mean_kept:.2f}", f"{int(r.reads_left_empty)} of {r.reads}",
                ", ".join(f"{ty} {int(getattr(r, 'dropped_' + ty))}" for ty in TYPES)])]
            for r in t[t.condition == st.roles.under_test].itertuples()]
    head += f"{st.roles.under_test} below; every kernel condition in the CSV.\n\n"
    return head + md_table(["model", "method", "threshold", "items dropped", "kept per read", "reads left empty",
                            "dropped by type"], body) + "\n"


register(Table("threshold", "threshold_sweep.csv", build, section, order=75, columns=COLUMNS))
