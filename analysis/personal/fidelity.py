"""The report opens with what each folder measured against the second paper (harness.run.fidelity).

The judge's row is the judge that judged, never the stage's configured judge: read from the
rubric lines the tables used (each line's judge block: config name, model, provider, parameters,
and the prompt's sha256) and from the ledger (the model the judge's endpoint reported in its replies).
"""

from __future__ import annotations

import json

import pandas as pd

from analysis.markdown import md_table, text
from analysis.personal import Table, register

COLUMNS = ("folder", "purpose", "setting", "paper", "stage", "status")


PAPER_JUDGE = "GPT-5.4"


def judge_row(folder, name: str | None) -> dict:
    """What judged this folder's rows: the rubric lines' judge blocks and the model its endpoint reported."""
    from analysis.load import ledger_frame
    from harness.records import RunDir
    from judge.rubric import is_paper_judge, load_rubric

    row = {"folder": folder.name, "setting": "judge model (the judgements')", "paper": PAPER_JUDGE}
    lines = [ln for ln in (load_rubric(RunDir(folder.path), name) if name else {}).values()
             if ln.get("status") in ("ok", "unparsable")]
    if not lines:
        return {**row, "stage": "not judged yet", "status": "unknown"}
    blocks = sorted({json.dumps({k: (ln.get("judge") or {}).get(k) for k in ("name", "model", "provider", "params")},
                                sort_keys=True) for ln in lines})
    led = ledger_frame(folder)
    reported = sorted({m for m in led[(led["event"] == "response") & (led["party"] == "judge") & (led["status"] == 200)]
                       ["response_model"] if m}) if not led.empty else []
    models = reported or sorted({json.loads(b)["model"] for b in blocks})
    said = "; ".join(f"{b['model']} ({b['name']}, {b['provider']}, params {b['params']})"
                     for b in map(json.loads, blocks))
    stage = f"{said}; endpoint reported {', '.join(reported) if reported else 'no model'}; {len(lines)} judgements"
    same = all(is_paper_judge(m) for m in models)
    return {**row, "stage": stage, "status": "same" if same else "differs"}


def build(st) -> pd.DataFrame:
    from analysis.tables.fidelity import manifest_rows

    from .load import purpose

    out = []
    for f in st.folders:
        names = sorted({j for j in st.runs.loc[st.runs["folder"] == f.name, "judge"] if isinstance(j, str)})
        rows = [r for r in manifest_rows(f, None) if r.get("key") != "judge_model"]  # the config's, not who judged
        rows.append(judge_row(f, names[0] if names else None))
        out += [{"purpose": purpose(f), **{k: r.get(k) for k in COLUMNS if k != "purpose"}} for r in rows]
    return pd.DataFrame(out, columns=list(COLUMNS))


def section(st) -> str:
    t = st.table("fidelity")
    parts = [("## Fidelity to the paper\n\n[`fidelity.csv`](fidelity.csv): each folder's manifest (stage.json), "
              "the paper's value beside the stage's.\n")]
    for folder, d in t.groupby("folder", sort=True):
        parts.append(f"\n### {folder} ({d['purpose'].iloc[0]})\n\n" + md_table(
            ["setting", "paper", "this stage", "same / differs"],
            [[r.setting, text(r.paper), text(r.stage), (f"**{r.status}**" if r.status == "differs" else r.status)]
             for r in d.itertuples()]) + "\n")
    return "".join(parts)


register(Table("fidelity", "fidelity.csv", build, section, order=5, columns=COLUMNS))
