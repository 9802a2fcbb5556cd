"""Gold errata (`make analyze errata=FILE`): the questions a correction touches and whether any
conclusion changes under the corrected gold; every table under the corrected gold is in corrected/.
Exploratory: not in the pre-registration file (a correction is known only after the study)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis import errata as ER
from analysis.markdown import DASH, ci, integer, link, md_table, text
from analysis.tables import Table, register


def changes(res: Any) -> list[str]:
    """'H1c: flips under corrected gold' lines for the report's summary and the command's output."""
    t = res.table("errata_conclusions")
    if t.empty:
        return []
    s = t.drop_duplicates("conclusion")
    return [f"{r.conclusion}: {r.robust}" for r in s.itertuples() if str(r.robust).startswith("flips")]


def section(res: Any) -> str:
    if getattr(res, "gold", "official") != "official":
        return (f"\n## Gold\n\nEvery table of this report is computed under the **{res.gold}** gold; the official "
                "gold's report is one folder up (`../report.md`).\n")
    er = res.errata
    if er is None:
        return ""
    a, c = res.table("errata"), res.table("errata_conclusions")
    out = [f"\n## Gold errata\n\n{link('errata.csv')}, {link('errata_conclusions.csv')}; every table under the "
           f"corrected gold: [`corrected/report.md`](corrected/report.md). Errata file `{er.path}` "
           f"({er.name}, version {er.version or DASH}, sha256 `{er.sha256}`), *exploratory*. A corrected answer "
           "takes its correctness from judgements against it (`make judge ... errata=FILE`); an excluded question "
           "is left out of every table; disputed evidence leaves the question out of the evidence-hit rates.\n\n"]
    out.append(f"Applies to the data files (by content) {', '.join(f'`{x}`' for x in er.listed())}"
               + (f"; not applied to {', '.join(ER.not_applied(res, er))} (another data file: official gold)"
                  if ER.not_applied(res, er) else "") + ".\n\n")
    out.append("Every public report on the data, with the choice made:\n\n" + md_table(
        ["report", "question", "choice", "reasoning"],
        [[r["source"], r["qid"] or DASH,
          r["choice"] + (f": {er.entries[r['qid']].answer}" if r["choice"] == "corrected (answer)" else ""),
          r["reasoning"]] for r in er.reports()]) + "\n")
    out.append("\nAffected runs:\n\n" + (md_table(
        ["folder", "question", "action", "runs", "correct (official)", "correct (corrected)", "not yet judged",
         "labels changed"],
        [[r.folder, r.qid, r.action, integer(r.runs), integer(r.official_correct), integer(r.corrected_correct),
          integer(r.corrected_unjudged), integer(r.changed_labels)] for r in a.itertuples()]) + "\n"
        if not a.empty else "No analysed run answers a corrected question.\n"))
    if not a.empty and a["corrected_unjudged"].sum():
        out.append(f"\n{int(a['corrected_unjudged'].sum())} run(s) of corrected questions are not yet judged against "
                   f"the corrected answer (left out under the corrected gold): `make judge STAGE=... errata={er.path}`.\n")
    flips = changes(res)
    out.append("\n" + ("**Conclusions that change under the corrected gold:** " + "; ".join(flips) + ".\n" if flips
                       else "No conclusion changes under the corrected gold.\n"))
    if not c.empty:
        out.append(ER.C.summary(ER.C.compare_verdicts(c), "official against corrected gold") + "\n")
    moved = c[c["conclusion"].isin({x.split(":")[0] for x in flips})] if flips and not c.empty else c.iloc[0:0]
    if not moved.empty:
        out.append("\n" + md_table(["conclusion", "test", "gold", "n", "estimate [95% CI]", "verdict"], [
            [r.conclusion, text(r.test), r.labels, integer(r.n), ci(r.estimate, r.lo, r.hi, 3), r.verdict]
            for r in moved.itertuples()]) + "\n")
    return "".join(out)


register(Table("errata", "errata.csv", ER.affected_frame, section, prereg=("errata",), order=56,
               columns=ER.AFFECTED_COLUMNS))
register(Table("errata_conclusions", "errata_conclusions.csv", ER.conclusions_frame, order=57,
               columns=(*ER.C.COLUMNS, "robust")))
