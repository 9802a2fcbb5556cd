"""Judge validation (Appendix E): the second judge against the main judge, per folder and pooled over stages.

`make agreement STAGE=... JUDGE2=...` has a second judge grade a stratified sample of the
answers (3 per condition x question type, the Org variants pooled, judge/agreement.py) into its own
judgements file beside the main judge's. This table reads every judgements file of a folder
other than the main judge's and compares the labels both judges gave to the same (run, kind):
agreement, Cohen's kappa (analysis.stats.agreement, statsmodels), and who said yes alone. The
pooled row (the paper's 234 answers) sums every folder's sample for the same second judge,
when the folders may be pooled (analysis.tables.fidelity).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis import stats
from analysis.load import judge_names, read_judgements
from analysis.markdown import integer, link, num, share, simple_section, text
from analysis.tables import Table, register
from analysis.tables.fidelity import pool

COLUMNS = ("folder", "judge", "judge2", "kind", "n", "strata", "agreement", "kappa", "only_main_yes",
           "only_second_yes", "pooled")
PAIR_COLUMNS = ("folder", "run_id", "kind", "condition", "variant", "qtype", "label_main", "label_second")


def _pairs(folder) -> dict[str, list[dict]]:
    """second judge -> [(run, kind) both judges labelled]."""
    if not folder.judge or not folder.records:
        return {}
    runs = {r["run_id"]: r for r in folder.records}
    out: dict[str, list[dict]] = {}
    for name in judge_names(folder):
        if name == folder.judge:
            continue
        second = read_judgements(folder, name)
        rows = []
        for (rid, kind), j2 in sorted(second.items()):
            j1 = folder.judgements.get((rid, kind))
            if rid not in runs or j1 is None or not isinstance(j1.get("label"), bool) \
                    or not isinstance(j2.get("label"), bool):
                continue
            r = runs[rid]
            rows.append({"folder": folder.name, "run_id": rid, "kind": kind, "condition": r["condition"],
                         "variant": r.get("variant") or "", "qtype": r["qtype"], "label_main": j1["label"],
                         "label_second": j2["label"]})
        if rows:
            out[name] = rows
    return out


def _summary(rows: list[dict], **head) -> list[dict]:
    out = []
    for kind in ("all", "correct", "leak"):
        d = [r for r in rows if kind == "all" or r["kind"] == kind]
        if not d:
            continue
        a = stats.agreement([r["label_main"] for r in d], [r["label_second"] for r in d])
        out.append({**head, "kind": kind, "n": a.n,
                    "strata": len({(r["folder"], r["condition"], r["variant"], r["qtype"]) for r in d}),
                    "agreement": a.agreement, "kappa": a.kappa,
                    "only_main_yes": sum(r["label_main"] and not r["label_second"] for r in d),
                    "only_second_yes": sum(r["label_second"] and not r["label_main"] for r in d)})
    return out


def _build(res: Any) -> pd.DataFrame:
    rows, by_judge = [], {}
    for f in res.folders:
        for name, pairs in _pairs(f).items():
            rows += _summary(pairs, folder=f.name, judge=f.judge, judge2=name, pooled=False)
            by_judge.setdefault(name, []).append((f, pairs))
    for name, entries in sorted(by_judge.items()):
        if len(entries) > 1 and pool(res, "judge_agreement", [f for f, _ in entries]):
            rows += _summary([p for _, ps in entries for p in ps], folder="all (pooled)",
                             judge="; ".join(sorted({f.judge for f, _ in entries})), judge2=name, pooled=True)
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _build_pairs(res: Any) -> pd.DataFrame:
    return pd.DataFrame([p for f in res.folders for ps in _pairs(f).values() for p in ps], columns=list(PAIR_COLUMNS))


def section(res: Any) -> str:
    from analysis.tables.status import status_line

    t = res.table("judge_agreement")
    head = (f"\n## Judge validation (Appendix E)\n\n{link('judge_agreement.csv')}, every compared label "
            f"{link('judge_agreement_pairs.csv')}; status: {status_line(res, 'judge_agreement')}. A second judge "
            "(`make agreement`) graded a stratified sample (3 per condition and question type) with the "
            "main judge's prompts; agreement and Cohen's kappa on the labels both gave. The paper: 97.9% on 234 "
            "answers, kappa 0.94.\n\n")
    if t.empty:
        return head + "No second judge's judgements in these folders (make agreement).\n"
    return head + simple_section(t, [
        ("folder", "folder", text), ("main judge", "judge", text), ("second judge", "judge2", text),
        ("labels", "kind", text), ("n", "n", integer), ("strata", "strata", integer), ("agreement", "agreement", share),
        ("kappa", "kappa", lambda x: num(x, 3)), ("yes only by main", "only_main_yes", integer),
        ("yes only by second", "only_second_yes", integer)])


register(Table("judge_agreement", "judge_agreement.csv", _build, section, prereg=("judge_agreement",), order=85,
               columns=COLUMNS))
register(Table("judge_agreement_pairs", "judge_agreement_pairs.csv", _build_pairs, order=86, columns=PAIR_COLUMNS))

