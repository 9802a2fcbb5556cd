"""The backend study's tables (Section 5.4) and Figures 2 and 7, from its stage folders."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis import backends as B
from analysis.markdown import link, num, simple_section, text
from analysis.tables import Table, register


def backends_section(res) -> str:
    """The backend study."""
    t = res.tables
    parts: list[str] = []
    parts.append("\n## Backend study (Section 5.4)\n\n")
    parts.append(f"{link('backends_recall.csv')}, {link('backends_paper.csv')}. Recall@10 against exact search "
                 "under the same view, mean over repeated builds with the range; latency of the index call as the "
                 "client saw it beside the server's own time. " + " ".join(getattr(res, "notes", [])) + "\n\n")
    bk = t.get("backends", pd.DataFrame())
    parts.append(simple_section(bk, [c for c in [  # a folder of an earlier study lacks some columns
        ("folder", "folder", text), ("config", "config", text), ("case", "case", text), ("s", "selectivity", text),
        ("recall", "recall_at_10", text), ("min", "recall_min", text), ("max", "recall_max", text),
        ("short", "short_lists", text), ("p50 ms", "p50_ms", text), ("server ms", "server_p50_ms", text),
        ("K's", "global_pred", text), ("local", "local_pred", text), ("engine", "engine", text)] if c[1] in bk.columns]))
    parts.append(f"\n### Survivors of the filter against Proposition 2\n\n{link('backends_survivors.csv')}. Survivors: "
                 "the rows a post-filter kept of the K' candidates the graph search handed it, before truncation to "
                 "10 (pgvector with iterative scan off, counted by EXPLAIN ANALYZE of the same search with LIMIT K'); "
                 "engines that filter otherwise say how. Local: how many of the exact K' nearest neighbours "
                 "(unfiltered) the view admits; K's: the global prediction. Means over queries x builds.\n\n")
    parts.append(simple_section(t.get("backends_survivors", pd.DataFrame()), [
        ("folder", "folder", text), ("config", "config", text), ("case", "case", text), ("s", "selectivity", text),
        ("K'", "k_prime", text), ("survivors", "survivors", text), ("local", "local_pred", text),
        ("K's", "global_pred", text), ("surv - local", "survivors_minus_local", text),
        ("surv / local", "survivors_over_local", text), ("local / K's", "local_over_global", text),
        ("engine", "engine", text)]))
    for name, cap in res.figures.items():
        if name.startswith(("figure2_", "figure7_")):
            parts.append(f"\n![{cap}]({name})\n")
    parts.append("\n### The paper's Section 5.4 beside ours (the paper's values are the paper's, not measured here)\n\n")
    parts.append(simple_section(t.get("backends_paper", pd.DataFrame()), [
        ("folder", "folder", text), ("quantity", "quantity", text), ("paper (Section 5.4)", "paper (Section 5.4)", text),
        ("ours", "ours", lambda x: num(x, 3)), ("our setup", "our_setup", text)]))
    return "".join(parts)


def _folders(res) -> list:
    return [f for f in res.folders if B.is_backends(f)]


def draw(res, out: Path) -> dict[str, str]:
    """Figures 2 and 7 of each backend folder whose corpus looks like text (analysis.backends.realistic)."""
    figs = {}
    for f in _folders(res):
        ok, why = B.realistic(f)
        res.notes.append(f"{f.name}: {why}" + ("" if ok else "; Figures 2 and 7 not drawn"))
        if not ok:
            continue
        for num_, fig, what in ((2, B.figure2, "recall@10 and p50 latency by view selectivity"),
                                (7, B.figure7, "fan-out against one shared index")):
            name = f"figure{num_}_{f.name.replace('/', '_')}.png"
            if fig(f, out / name):
                figs[name] = f"Figure {num_}: {what}, {f.name}"
    return figs


register(Table("backends", "backends_recall.csv", lambda res: B.recall_table(_folders(res)), backends_section,
               order=130, draw=draw))
register(Table("backends_paper", "backends_paper.csv", lambda res: B.paper_table(_folders(res)), order=131))
register(Table("backends_survivors", "backends_survivors.csv", lambda res: B.survivors_table(_folders(res)), order=132))
