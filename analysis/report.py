"""The Markdown report: every number in it comes from a table written next to it.

Nothing here computes a statistic; it formats the frames that analysis.run wrote
as CSV and links them, so a number in the report can always be found, at full
precision, in the CSV named above its table.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

import pandas as pd

from analysis import tables as T

DASH = "–"


# ------------------------------------------------------------------------------ formatting


def _isnan(x: Any) -> bool:
    try:
        return x is None or (isinstance(x, float) and math.isnan(x)) or pd.isna(x)
    except (TypeError, ValueError):
        return False


def num(x: Any, nd: int = 2) -> str:
    if _isnan(x):
        return DASH
    x = float(x)
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:,.{nd}f}"


def integer(x: Any) -> str:
    return DASH if _isnan(x) else f"{int(round(float(x))):,}"


def pval(x: Any) -> str:
    if _isnan(x):
        return DASH
    x = float(x)
    return "<0.001" if x < 0.001 else f"{x:.3f}"


def ci(est: Any, lo: Any, hi: Any, nd: int = 2, sign: bool = False) -> str:
    if _isnan(est):
        return DASH
    e = f"{float(est):+.{nd}f}" if sign else num(est, nd)
    if _isnan(lo) or _isnan(hi):
        return e
    lo_s = f"{float(lo):+.{nd}f}" if sign else num(lo, nd)
    hi_s = f"{float(hi):+.{nd}f}" if sign else num(hi, nd)
    return f"{e} [{lo_s}, {hi_s}]"


def money(x: Any) -> str:
    if _isnan(x):
        return DASH
    return f"{float(x):,.4f}" if abs(float(x)) < 100 else f"{float(x):,.2f}"


def md_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(cell(v) for v in r) + " |")
    return "\n".join(lines)


def link(name: str) -> str:
    return f"[`{name}`]({name})"


# ------------------------------------------------------------------------------ sections


METRIC_NAMES = {"model_calls": "model calls", "tool_calls": "tool calls", "tokens": "tokens", "cost": "cost (USD)",
                "time": "time (s)"}
METRIC_DIGITS = {"model_calls": 2, "tool_calls": 2, "tokens": 0, "cost": 5, "time": 2}


def _metric_cell(r: pd.Series, k: str) -> str:
    mean = num(r[f"mean_{k}"], METRIC_DIGITS[k])
    if _isnan(r.get(f"ratio_{k}")):
        return mean
    return f"{mean} ({ci(r[f'ratio_{k}'], r[f'ratio_{k}_lo'], r[f'ratio_{k}_hi'])}×)"


def conditions_section(t: pd.DataFrame, folder: str, variant: str, org: bool) -> str:
    d = t[(t["folder"] == folder) & (t["variant"] == variant)]
    if d.empty:
        return ""
    heads = ["condition", "n", "failed", "unjudged", "accuracy %", "Δ accuracy pts [95% CI]", "McNemar p",
             *(METRIC_NAMES[k] for k in ("model_calls", "tool_calls", "tokens", "cost", "time")), "median time (s)"]
    if org and variant == "private":
        heads += ["leaks", "runs with private units", "private units"]
    rows = []
    for _, r in d.iterrows():
        diff = DASH if _isnan(r["acc_diff_pts"]) else (
            ci(r["acc_diff_pts"], r["acc_diff_lo"], r["acc_diff_hi"], 1, sign=True) + f" (n={integer(r['n_paired_judged'])})")
        row = [r["condition"], integer(r["n_questions"]), integer(r["n_failed"]), integer(r["n_unjudged"]),
               num(r["accuracy_pct"], 1), diff, pval(r["mcnemar_p"]),
               *(_metric_cell(r, k) for k in ("model_calls", "tool_calls", "tokens", "cost", "time")),
               num(r["median_time"], 2)]
        if org and variant == "private":
            row += [f"{integer(r['leaks'])} of {integer(r['leak_judged'])}", integer(r["exposed_runs"]),
                    integer(r["private_units"])]
        rows.append(row)
    ref = d["b"].dropna().iloc[0] if not org and d["b"].notna().any() else (
        d["a"].dropna().iloc[0] if org and d["a"].notna().any() else None)
    if org:
        how = (f"Ratios are **{ref} / condition** on the questions both ran; Δ accuracy = {ref} − condition."
               if ref else "The shared view was not run: no ratios.")
    else:
        how = (f"Ratios are **condition / {ref}** on the questions both ran; Δ accuracy = condition − {ref}."
               if ref else "Session search was not run in this folder: no ratios.")
    r0 = d.iloc[0]
    return (f"{how} Each metric cell: mean per question (ratio [95% CI]×). Seed {int(r0['seed'])}, "
            f"{integer(r0['n_resamples'])} paired bootstrap resamples over questions; repeat 0 of each condition.\n\n"
            + md_table(heads, rows) + "\n")


def types_section(types: pd.DataFrame, folder: str, variant: str) -> str:
    d = types[(types["folder"] == folder) & (types["variant"] == variant)]
    if d.empty:
        return ""
    qtypes = list(dict.fromkeys(d["qtype"]))
    conds = list(dict.fromkeys(d["condition"]))
    rows = []
    for c in conds:
        row = [c]
        for q in qtypes:
            x = d[(d["condition"] == c) & (d["qtype"] == q)]
            row.append(DASH if x.empty else f"{num(x['accuracy_pct'].iloc[0], 1)} ({integer(x['n_judged'].iloc[0])})")
        rows.append(row)
    return "Accuracy % by question type (judged runs in parentheses).\n\n" + md_table(["condition", *qtypes], rows) + "\n"


def pairs_section(pairs: pd.DataFrame, folder: str, variant: str) -> str:
    d = pairs[(pairs["folder"] == folder) & (pairs["variant"] == variant) & (pairs["kind"] == "extra")]
    if d.empty:
        return ""
    rows = []
    for (a, b), g in d.groupby(["a", "b"], sort=False):
        acc = g[g["statistic"] == "accuracy_diff_points"]
        tok = g[(g["statistic"] == "ratio_of_means") & (g["metric"] == "tokens")]
        rows.append([f"{a} vs {b}",
                     DASH if acc.empty else integer(acc["n"].iloc[0]),
                     DASH if acc.empty else ci(acc["estimate"].iloc[0], acc["lo"].iloc[0], acc["hi"].iloc[0], 1, True),
                     DASH if acc.empty else f"{integer(acc['a_only'].iloc[0])} / {integer(acc['b_only'].iloc[0])}",
                     DASH if acc.empty else pval(acc["p"].iloc[0]),
                     DASH if tok.empty else ci(tok["estimate"].iloc[0], tok["lo"].iloc[0], tok["hi"].iloc[0])])
    return ("Further pairs (exploratory; all statistics in " + link("comparisons.csv") + ").\n\n"
            + md_table(["pair a vs b", "n judged", "Δ accuracy a − b pts", "discordant a / b", "McNemar p",
                        "tokens a/b"], rows) + "\n")


def table3_section(t3: pd.DataFrame, comps: pd.DataFrame, expl: pd.DataFrame) -> str:
    def origin(source: str, quote: Any, why: Any) -> str:  # "paper: “…”" / "reconstructed: why"
        text = "; ".join(x for x in ((f"“{quote}”" if isinstance(quote, str) and quote else ""),
                                     (why if isinstance(why, str) else "")) if x)
        return f"{source}: {text}" if text else str(source)

    rows = []
    for _, r in t3.iterrows():
        est = DASH if _isnan(r["estimate"]) else ci(r["estimate"], r["lo"], r["hi"], 3)
        rows.append([r["id"], r["family"], r["tests"], r["threshold_source"], r["folders"] or DASH, integer(r["n"]),
                     est, pval(r["p"]), pval(r["p_holm"]) if r["in_holm"] else DASH, f"**{r['outcome']}**",
                     r["status"] + (f" ({r['reason']})" if r["reason"] else "")])
    out = md_table(["id", "family", "rule", "threshold from", "folders", "n", "estimate [95% CI]", "p", "p (Holm)",
                    "outcome", "status"], rows) + "\n"
    out += "\n" + "\n".join(f"- **{r['id']}**: {r['statement']} (hypothesis from "
                            f"{origin(r['hypothesis_source'], r['hypothesis_quote'], r['hypothesis_why'])})"
                            for _, r in t3.iterrows()) + "\n"
    crow = []
    for _, c in comps.iterrows():
        crow.append([f"{c['id']}.{int(c['component'])}", c["test"], c["folder"] or DASH, integer(c["n"]),
                     DASH if _isnan(c["estimate"]) else ci(c["estimate"], c["lo"], c["hi"], 3),
                     num(c["threshold"], 3), c["threshold_source"], pval(c["p"]),
                     DASH if _isnan(c["holds"]) else ("holds" if c["holds"] else "does not hold"),
                     "; ".join(x for x in (c["note"], c["error"]) if isinstance(x, str) and x)])
    out += "\nComponents (" + link("table3_components.csv") + "):\n\n" + md_table(
        ["test", "rule", "folder", "n", "estimate [95% CI]", "threshold", "threshold from", "p", "result", "note"],
        crow) + "\n"
    out += ("\nWhere each threshold comes from (paper: the paper's words; reconstructed: our choice):\n\n"
            + "\n".join(f"- {c['id']}.{int(c['component'])} {c['test']}: "
                         f"{origin(c['threshold_source'], c['threshold_quote'], c['threshold_why'])}"
                         for _, c in comps.iterrows() if c["threshold_source"] != "none") + "\n")
    if expl is not None and not expl.empty:
        erow = []
        for _, e in expl.iterrows():
            if e["analysis"] == "comparison":
                what = f"{e['a']} vs {e['b']} ({e['folder']}{' ' + e['variant'] if e['variant'] else ''})"
                res = (f"Δ acc {ci(e['acc_diff_pts'], e['acc_diff_lo'], e['acc_diff_hi'], 1, True)} pts, "
                       f"McNemar p {pval(e['mcnemar_p'])}; tokens {ci(e['tokens_ratio'], e['tokens_ratio_lo'], e['tokens_ratio_hi'])}×")
            else:
                what, res = e["analysis"], "descriptive"
            erow.append([what, res, f"{e['status']} ({e['reason']})"])
        out += "\nAnalyses not in the pre-registration file (" + link("table3_exploratory.csv") + "):\n\n" + md_table(
            ["analysis", "result", "status"], erow) + "\n"
    return out


def exposure_section(t4: pd.DataFrame) -> str:
    if t4.empty:
        return "No memory-tool calls to replay.\n"
    owners = [c for c in t4.columns if c.startswith("units_a")]
    rows = []
    for _, r in t4.iterrows():
        rows.append([r["folder"], r["variant"] or DASH, r["condition"], integer(r["runs"]), integer(r["calls"]),
                     r["replay_status"], f"{integer(r['calls_matched'])} / {integer(r['calls_mismatched'])}",
                     integer(r["units"]), *(integer(r[o]) for o in owners), integer(r["private_units"]),
                     integer(r["runs_with_private"]),
                     integer(r["private_units_under_view"]) + (" **VIOLATION**" if T.violations(
                         pd.DataFrame([r])) else ""),
                     f"{integer(r['logged_units'])} / {integer(r['logged_private_units'])}"])
    return md_table(["folder", "variant", "condition", "runs", "calls", "replay", "matched / mismatched",
                     "units", *(o.replace("units_", "") for o in owners), "private units", "runs with private",
                     "private under shared/own view", "logged units / private"], rows) + "\n"


def simple_section(df: pd.DataFrame, columns: Sequence[tuple[str, str, Any]]) -> str:
    """columns: (header, column, formatter)."""
    if df is None or df.empty:
        return "Nothing to show.\n"
    rows = [[fmt(r[col]) for _, col, fmt in columns] for _, r in df.iterrows()]
    return md_table([h for h, _, _ in columns], rows) + "\n"


def text(x: Any) -> str:
    return DASH if _isnan(x) or x == "" else str(x)


def share(x: Any) -> str:
    return DASH if _isnan(x) else f"{float(x) * 100:.1f}%"


# ------------------------------------------------------------------------------ the report


TABLE_OF = {"table1": "table1", "table1_types": "table1", "median_ratio": "table1", "table2": "table2",
            "exposure_audit": "table4", "table5": "table5", "table6": "table6", "token_decomposition": "tokens",
            "evidence_hit": "evidence", "scale": "scale"}


def _status_line(res: Any, name: str) -> str:
    """Pre-specified or exploratory, judged on the folders whose data the table shows."""
    from analysis.prereg import analysis_status

    df = res.tables.get(TABLE_OF.get(name, name))
    names: set = set()
    if df is not None and not df.empty:
        for col in ("folder", "folder_s", "folder_m"):
            if col in df.columns:
                names |= set(df[col].dropna())
    folders = [f for f in res.folders if f.name in names]
    if not folders:
        return "*no data*"
    status, why = analysis_status(name, res.prereg, folders, res.first_calls)
    return f"*{status}*" + (f" ({why})" if why else "")


def _provenance(res: Any) -> str:
    rows = []
    for f in res.folders:
        pr = (f.info.get("prereg") or {}).get("sha256")
        recs = f.records
        commits = sorted({f"{(r.get('code') or {}).get('commit') or '?'}"[:12] + (
            "+dirty" if (r.get("code") or {}).get("dirty") else "") for r in recs})
        stage_code = f.info.get("code") or {}
        code = ", ".join(commits) if commits else (
            f"{str(stage_code.get('commit') or '?')[:12]}" + ("+dirty" if stage_code.get("dirty") else ""))
        data = f.info.get("data") or {}
        rows.append([f.name + (" **(pilot: not a result)**" if f.is_pilot else ""), f.stage, f.kind,
                     integer(len(recs)), f"`{str(f.info.get('config_hash') or DASH)[:16]}`",
                     f"`{str(data.get('sha256') or DASH)[:16]}`", text(data.get("kind")),
                     f"`{pr[:12]}`" if pr else DASH, text(f.info.get("seed")),
                     text((f.info.get("model") or {}).get("model")), code])
    out = md_table(["folder", "stage", "kind", "records", "config hash", "data sha256", "data", "prereg sha256",
                    "seed", "model", "code (records)"], rows) + "\n"
    jrows = []
    for f in res.folders:
        if not f.records:
            continue
        js = list(f.judgements.values())
        status = {}
        for j in js:
            status[j.get("status")] = status.get(j.get("status"), 0) + 1
        first = js[0] if js else {}
        judge = first.get("judge") or {}
        info = f.judge_info or {}
        prompts = info.get("prompts") or {}
        sources = sorted({str(j.get("prompt_source")) for j in js})
        jrows.append([f.name, text(f.judge) if f.judge else "**none**", text(judge.get("model")),
                      text(judge.get("identity")), ", ".join(sources) or DASH,
                      f"`{str(prompts.get('source_sha256') or first.get('prompt_source_sha256') or DASH)[:16]}`",
                      ", ".join(f"{k} {v}" for k, v in sorted(status.items(), key=lambda kv: str(kv[0]))) or DASH])
    if jrows:
        out += "\nJudges (correctness and leak labels):\n\n" + md_table(
            ["folder", "judge", "model", "identity", "prompt source", "prompt source sha256", "judgements by status"],
            jrows) + "\n"
    code = res.code or {}
    out += (f"\nAnalysis code: commit `{code.get('commit') or '?'}`" + (" with uncommitted changes" if code.get("dirty")
                                                                         else "")
            + f"; pre-registration file `{res.prereg.path.name}` sha256 `{res.prereg.sha256}`; "
            f"descriptive tables: seed {res.settings.seed}, {res.settings.resamples:,} resamples, "
            f"{res.settings.confidence:.0%} percentile intervals.\n")
    return out


def _quality(res: Any) -> str:
    lines = []
    runs = res.runs
    for f in res.folders:
        if not f.records:
            continue
        d = runs[runs["folder"] == f.name]
        failed = int((d["status"] != "ok").sum())
        unjudged = int(d["correct"].isna().sum())
        unparsable = int((d["correct_source"] == "judge_unparsable").sum())
        leak_missing = int(((d["variant"] == "private") & d["leak"].isna()).sum())
        led = res.ledgers.get(f.name)
        interrupted = 0 if led is None else int((led["event"] == "interrupted").sum())
        planned = len((f.info.get("plan") or {}).get("runs") or [])
        lines.append(f"- **{f.name}**: {len(d)} records" + (f" of {planned} planned" if planned else "")
                     + f"; {failed} failed runs (counted as wrong); {unjudged} runs without a usable correctness "
                     f"judgement (left out of accuracy); {unparsable} unparsable judge replies (official rule "
                     f"applied); {leak_missing} private-variant runs without a leak judgement; "
                     f"{interrupted} interrupted attempts in the ledger.")
    for _, c in res.tables["coverage"].iterrows():
        if c["kind"] == "agents" and c["records"] != c["planned"]:
            lines.append(f"- **INCOMPLETE: {c['folder']}: {c['records']} of {c['planned']} planned records.** "
                         "Its tables describe the recorded runs only.")
    sh = res.tables.get("shards")
    for _, c in (sh.iterrows() if sh is not None else []):
        if c["status"] != "complete" and c["shard"] != "-":
            lines.append(f"- **{c['status'].upper()} SHARD: {c['folder']} shard {c['shard']}: {c['records']} of its "
                         f"{c['runs']} runs recorded** (" + link("shards.csv") + ").")
    dq = res.tables["data_quality"]
    lines.append(f"- Files or lines left out because they do not fit the record schema: {len(dq)} ("
                 + link("data_quality.csv") + ")" + (":" if len(dq) else "."))
    for _, p in dq.iterrows():
        where = p["file"] + (f" line {int(p['line'])}" if p["line"] == p["line"] and p["line"] is not None else "")
        lines.append(f"  - `{where}`: {p['problem']} ({p['consequence']})")
    jp, lc, mm = res.tables["judgement_problems"], res.tables["ledger_checks"], res.tables["replay_mismatches"]
    lines.append(f"- Judgement problems: {len(jp)} (" + link("judgement_problems.csv") + ").")
    lines.append(f"- Records whose tokens or calls differ from the ledger: {len(lc)} (" + link("ledger_checks.csv")
                 + ").")
    lines.append(f"- Replayed memory calls that differ from the logs: {len(mm)} (" + link("replay_mismatches.csv")
                 + ").")
    return "\n".join(lines) + "\n"


def render(res: Any, files: dict) -> str:
    t = res.tables
    parts = ["# Results\n\n",
             "Generated by `" + (res.command or "python -m analysis.run") + "` from the run records, the "
             "judgements and the metering ledgers of the folders below; nothing here is typed by hand. "
             "`make analyze` rewrites this folder. Every number printed here is in the CSV linked above its "
             "table, at full precision; " + link("runs.csv") + " has one row per run (the data behind every "
             "table). Failed runs count as wrong; runs without a usable judgement are left out and counted "
             "below.\n",
             *(["\n## VIOLATIONS\n\n", "".join(f"- **{v}**\n" for v in T.violations(t["table4"]))]
               if T.violations(t["table4"]) else []),
             "\n## Provenance\n\n", _provenance(res), "\n## Data quality\n\n", _quality(res)]

    # Table 1
    parts.append("\n## Table 1: LongMemEval conditions\n\n")
    parts.append("Tokens = prompt + output tokens of every model call of a run (asked agents included); cost = "
                 "list price in US dollars; time = wall seconds per run; model and tool calls per run. ")
    parts.append(f"{link('table1.csv')}, per type {link('table1_types.csv')}, all pairs {link('comparisons.csv')}. "
                 f"Status: {_status_line(res, 'table1')}; per-type accuracy {_status_line(res, 'table1_types')}; "
                 f"median ratios {_status_line(res, 'median_ratio')}.\n")
    t1 = t["table1"]
    if t1.empty:
        parts.append("No LongMemEval folder analysed.\n")
    for folder in list(dict.fromkeys(t1["folder"])) if not t1.empty else []:
        parts.append(f"\n### {folder}\n\n")
        parts.append(conditions_section(t1, folder, "", org=False))
        d = t1[t1["folder"] == folder]
        med = d[d["median_ratio_tokens"].notna()]
        if not med.empty:
            parts.append("\nPer-question token ratio (median [95% CI]) and share of questions where the "
                         "condition used fewer tokens:\n\n" + md_table(
                             ["condition", "median ratio", "questions excluded (0 tokens in reference)", "cheaper",
                              "ties"],
                             [[r["condition"], ci(r["median_ratio_tokens"], r["median_ratio_tokens_lo"],
                                                  r["median_ratio_tokens_hi"]),
                               integer(r["median_ratio_tokens_excluded"]), share(r["share_cheaper_tokens"]),
                               share(r["share_ties_tokens"])] for _, r in med.iterrows()]) + "\n")
        parts.append("\n" + types_section(t["table1_types"], folder, ""))
        parts.append("\n" + pairs_section(t["comparisons"], folder, ""))
        fig = f"figure3_{folder.replace('/', '_')}.png"
        if fig in res.figures:
            parts.append(f"\n![{res.figures[fig]}]({fig})\n")

    # Table 2
    parts.append("\n## Table 2: LongMemEval-Org conditions\n\n")
    parts.append(f"{link('table2.csv')}; status: {_status_line(res, 'table2')}. Private variant: correct = the "
                 "answer declines; leaks = the judge found the private answer; exposure from the replay (Table 4).\n")
    t2 = t["table2"]
    if t2.empty:
        parts.append("No LongMemEval-Org folder analysed.\n")
    for folder in list(dict.fromkeys(t2["folder"])) if not t2.empty else []:
        for variant in list(dict.fromkeys(t2.loc[t2["folder"] == folder, "variant"])):
            parts.append(f"\n### {folder}, {variant} variant\n\n")
            parts.append(conditions_section(t2, folder, variant, org=True))
            parts.append("\n" + types_section(t["table1_types"], folder, variant))
            parts.append("\n" + pairs_section(t["comparisons"], folder, variant))
        fig = f"figure6_{folder.replace('/', '_')}.png"
        if fig in res.figures:
            parts.append(f"\n![{res.figures[fig]}]({fig})\n")

    # Table 3
    parts.append("\n## Table 3: pre-registered tests and outcomes\n\n")
    parts.append(f"{link('table3.csv')}. Rules from `{res.prereg.path.name}` (sha256 `{res.prereg.sha256[:16]}`); "
                 f"alpha {res.prereg.settings['alpha']}, seed {res.prereg.settings['seed']}, "
                 f"{int(res.prereg.settings['primary_resamples']):,} resamples for primary and "
                 f"{int(res.prereg.settings['resamples']):,} for secondary tests; Holm over "
                 f"{', '.join(res.prereg.settings.get('holm_family') or [])}. A test is confirmatory only if its "
                 "stage recorded this file's sha256 before its first model call.\n\n")
    parts.append(table3_section(t["table3"], t["table3_components"], t["table3_exploratory"]))

    # Table 4
    parts.append("\n## Table 4: exposure audit (replay of every logged memory-tool call)\n\n")
    parts.append(f"{link('table4.csv')}, differences {link('replay_mismatches.csv')}; status: "
                 f"{_status_line(res, 'exposure_audit')}. Replay mode `{res.replay_mode}`. Units by owner are what the "
                 "replay returned (search results and rounds read); private units = units of a private agent other "
                 "than the one whose view it is. Under a shared or own view they must be 0. Fan-out is not "
                 "replayed; ask-agent rows include the asked agents' calls.\n\n")
    parts.append(exposure_section(t["table4"]))

    # Table 5
    parts.append("\n## Table 5: run-to-run agreement on repeated questions\n\n")
    parts.append(f"{link('table5.csv')}; status: {_status_line(res, 'table5')}. Repeat 0 vs repeat 1 on the "
                 "questions run twice with both runs judged.\n\n")
    parts.append(simple_section(t["table5"], [
        ("folder", "folder", text), ("variant", "variant", text), ("condition", "condition", text),
        ("questions", "n_questions", integer), ("judged both", "n_judged_both", integer),
        ("identical", "identical_share", share), ("both correct", "both_correct_share", share),
        ("only r0", "r0_only", integer), ("only r1", "r1_only", integer), ("kappa", "kappa", lambda x: num(x, 3)),
        ("tokens r1/r0", "tokens_r1_over_r0", num)]))

    # Table 6
    parts.append("\n## Table 6: cost at list and paid (off-peak) prices\n\n")
    parts.append(f"{link('table6.csv')}; status: {_status_line(res, 'table6')}. Sums of the metering ledger "
                 "(every model call, interrupted attempts included), priced per call at its party's prices; paid "
                 "applies the off-peak factor at the call's time.\n\n")
    t6 = t["table6"]
    parts.append(simple_section(t6[t6["condition"] == "all"] if not t6.empty else t6, [
        ("folder", "folder", text), ("party", "party", text), ("calls", "calls", integer),
        ("failed", "failed_calls", integer), ("unanswered", "unanswered_requests", integer),
        ("prompt tokens", "prompt", integer), ("cache hit", "hit", integer), ("miss", "miss", integer),
        ("output", "output", integer), ("list USD", "cost_list_usd", money), ("paid USD", "cost_paid_usd", money),
        ("list CNY", "cost_list_cny", money), ("paid CNY", "cost_paid_cny", money),
        ("prices", "price_source", text)]))

    # tokens, evidence, scale
    parts.append("\n## Token decomposition (Proposition 3)\n\n")
    parts.append(f"{link('tokens.csv')}; status: {_status_line(res, 'token_decomposition')}. Per question (repeat "
                 "0): the first call's prompt (prefix P), what tool results added between calls, output; the "
                 "agent's own calls only (asked agents in the last column); CV = sd/mean of tokens per question.\n\n")
    parts.append(simple_section(t["tokens"], [
        ("folder", "folder", text), ("variant", "variant", text), ("condition", "condition", text),
        ("n", "n", integer), ("calls", "mean_agent_calls", num), ("prefix", "mean_prefix", integer),
        ("results", "mean_results", integer), ("output", "mean_output", integer), ("input", "mean_input", integer),
        ("tokens", "mean_tokens", integer), ("CV tokens", "cv_tokens", num),
        ("asked agents' tokens", "asked_agent_tokens", integer)]))
    parts.append("\n## Evidence-hit rates\n\n")
    parts.append(f"{link('evidence.csv')}; status: {_status_line(res, 'evidence_hit')}. Share of runs whose first "
                 "search (or any tool result) contained an evidence session; runs where it does not apply are "
                 "left out.\n\n")
    parts.append(simple_section(t["evidence"], [
        ("folder", "folder", text), ("variant", "variant", text), ("condition", "condition", text),
        ("first: hits / applicable", "first_hits", integer), ("", "n_first_applicable", integer),
        ("first rate", "first_rate", share), ("any: hits / applicable", "any_hits", integer),
        ("", "n_any_applicable", integer), ("any rate", "any_rate", share)]))
    parts.append("\n## Tool use and the arguments the model chose\n\n")
    parts.append(f"{link('tool_use.csv')}. Per condition: runs that called a tool, tool calls per run, the share "
                 "of calls that set an argument to another value than its default, and for memory_search the "
                 "share of searches that set k, that asked for k = 1, and the mean k when set (absent = the "
                 "tool's default), the share limited to dates (since/until) and how many of those came back "
                 "empty; judged accuracy beside them, and the judge-free literal check (the answer contains a "
                 "short gold word for word; not for preference or abstention questions).\n\n")
    parts.append(simple_section(t["tool_use"], [
        ("folder", "folder", text), ("variant", "variant", text), ("condition", "condition", text),
        ("n", "n", integer), ("tool use", "tool_use_rate", share), ("tool calls", "tool_calls_mean", num),
        ("overrode a default", "override_share", share), ("searches", "searches", integer),
        ("k set", "k_set_share", share), ("k = 1", "k1_share", share), ("mean k when set", "k_mean_when_set", num),
        ("dated", "dated_share", share), ("dated and empty", "dated_empty", integer), ("accuracy", "accuracy", share),
        ("literal: hits / applicable", "literal_hits", integer), ("", "n_literal", integer),
        ("literal rate", "literal_rate", share)]))
    parts.append("\n## S vs M histories (scale)\n\n")
    parts.append(f"{link('scale.csv')}; status: {_status_line(res, 'scale')}. Each condition of the scale stage on "
                 "its questions, at S (main stage) and M.\n\n")
    parts.append(simple_section(t["scale"], [
        ("condition", "condition", text), ("n", "n_paired", integer), ("acc S %", "accuracy_s_pct", lambda x: num(x, 1)),
        ("acc M %", "accuracy_m_pct", lambda x: num(x, 1)), ("change pts", "accuracy_change_pts", lambda x: num(x, 1)),
        ("tokens S", "mean_tokens_s", integer), ("tokens M", "mean_tokens_m", integer),
        ("growth M/S", "tokens_growth", num), ("lo", "tokens_growth_lo", num), ("hi", "tokens_growth_hi", num),
        ("calls growth", "model_calls_growth", num)]))
    if "figure5.png" in res.figures:
        parts.append(f"\n![{res.figures['figure5.png']}](figure5.png)\n")

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
    parts.append("\n## Files\n\n" + "\n".join(f"- {link(name)}" for name in sorted(
        [*files.values(), *res.figures])) + "\n")
    return "".join(parts)
