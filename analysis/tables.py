"""The paper's tables, built from the tidy frames of analysis.load (and the replay).

Every comparison is paired: conditions A and B of one stage folder (and one Org
variant) are compared on the questions both ran, using repeat 0 of each (the second
run of the 60 repeated questions is only for Table 5). Costs use every paired
question; accuracy uses the paired questions whose correctness is known on both
sides (a failed run counts as wrong; a missing judgement leaves the question out,
and the row says how many). Each table row carries what is needed to recompute it:
the folder, the conditions, n, the seed, the number of resamples and the confidence.

Ratios are A / B: in Table 1 each condition over session search, in Table 2 the
shared view over each other condition (the paper's "0.27x the tokens of fan-out").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from analysis import stats
from analysis.load import Folder, price_book
from analysis.replay import FolderReplay, owner_counts

METRICS = ("model_calls", "tool_calls", "tokens", "cost", "time")
LME_REFERENCE = "session_search"
# further pairs the paper reports (Section 5.1-5.2); exploratory unless a hypothesis names them
LME_EXTRA_PAIRS = [("tool_hybrid", "tool_bm25"), ("tool_hybrid", "tool_dense"), ("tool_dense", "tool_bm25"),
                   ("tool_hybrid", "session_search_compact"), ("tool_hybrid", "prefetch"), ("tool_hybrid", "full")]
ORG_REFERENCE = "shared"
ORG_EXTRA_PAIRS = [("no_view_policy", "no_view")]
QTYPE_ORDER = ("single-session-user", "single-session-assistant", "single-session-preference", "multi-session",
               "temporal-reasoning", "knowledge-update")
ORG_AGENTS = ("a0", "a1", "a2", "a3", "a4", "a5")


@dataclass(frozen=True)
class Settings:
    seed: int
    resamples: int
    confidence: float = 0.95


# ------------------------------------------------------------------------------ pairing


@dataclass
class Paired:
    folder: str
    variant: str
    a: str
    b: str
    qids: list[str]  # questions both ran (repeat 0)
    qids_judged: list[str]  # of those, correctness known on both sides
    metrics: stats.PairComparison | None
    accuracy: stats.PairComparison | None

    @property
    def n(self) -> int:
        return len(self.qids)

    @property
    def n_judged(self) -> int:
        return len(self.qids_judged)


_GROUPS: list = []  # [(runs frame, {(folder, variant, condition, repeat): rows})], the last frame grouped


def _groups(runs: pd.DataFrame) -> dict:
    if not _GROUPS or _GROUPS[0][0] is not runs:
        g = {k: d.sort_values("qid", kind="mergesort")
             for k, d in runs.groupby(["folder", "variant", "condition", "repeat"], sort=True)}
        _GROUPS[:] = [(runs, g)]
    return _GROUPS[0][1]


def select(runs: pd.DataFrame, folder: str, variant: str, condition: str, repeat: int | None = 0) -> pd.DataFrame:
    """Runs of one condition (one repeat, or all) of a folder and variant, sorted by question."""
    if repeat is not None:
        d = _groups(runs).get((folder, variant, condition, repeat))
        return runs.iloc[0:0] if d is None else d
    m = (runs["folder"] == folder) & (runs["variant"] == variant) & (runs["condition"] == condition)
    return runs[m].sort_values(["qid", "repeat"], kind="mergesort")


def pair_frame(runs: pd.DataFrame, folder: str, variant: str, a: str, b: str) -> pd.DataFrame:
    da, db = select(runs, folder, variant, a), select(runs, folder, variant, b)
    return da.merge(db, on="qid", suffixes=("_a", "_b"), how="inner", validate="one_to_one").sort_values(
        "qid", kind="mergesort")


def compare(runs: pd.DataFrame, folder: str, variant: str, a: str, b: str, st: Settings,
            metrics: Sequence[str] = METRICS, keep_boot: bool = False,
            statistics: Sequence[str] = stats.STATISTICS) -> Paired:
    """A vs B on the questions both ran: metric ratios, and accuracy on the jointly judged ones."""
    m = pair_frame(runs, folder, variant, a, b)
    qids = m["qid"].tolist()
    mc = None
    if qids and metrics:
        mc = stats.compare_pair({k: m[f"{k}_a"].to_numpy(float) for k in metrics},
                                {k: m[f"{k}_b"].to_numpy(float) for k in metrics},
                                seed=st.seed, n_resamples=st.resamples, confidence=st.confidence,
                                statistics=statistics, keep_boot=keep_boot, names=(a, b))
    j = m[m["correct_a"].notna() & m["correct_b"].notna()]
    ac = None
    if len(j):
        ac = stats.compare_pair({}, {}, correct_a=j["correct_a"].to_numpy(float),
                                correct_b=j["correct_b"].to_numpy(float), seed=st.seed, n_resamples=st.resamples,
                                confidence=st.confidence, keep_boot=keep_boot, names=(a, b))
    return Paired(folder, variant, a, b, qids, j["qid"].tolist(), mc, ac)


def pair_rows(p: Paired) -> list[dict]:
    """Long-format rows (stats.ROW_FIELDS) of one pair, with folder and variant."""
    rows = []
    for pc in (p.metrics, p.accuracy):
        if pc is not None:
            for r in pc.rows():
                rows.append({"folder": p.folder, "variant": p.variant, **r})
    return rows


def _nan(x) -> float:
    return math.nan if x is None else float(x)


def pair_columns(p: Paired | None, metrics: Sequence[str] = METRICS) -> dict:
    """Wide columns of one pair for Tables 1 and 2."""
    out: dict = {"a": None, "b": None, "n_paired": 0, "n_paired_judged": 0, "acc_diff_pts": math.nan,
                 "acc_diff_lo": math.nan, "acc_diff_hi": math.nan, "mcnemar_p": math.nan, "a_only": math.nan,
                 "b_only": math.nan}
    for k in metrics:
        out.update({f"ratio_{k}": math.nan, f"ratio_{k}_lo": math.nan, f"ratio_{k}_hi": math.nan})
    out.update({"median_ratio_tokens": math.nan, "median_ratio_tokens_lo": math.nan,
                "median_ratio_tokens_hi": math.nan, "median_ratio_tokens_excluded": math.nan,
                "share_cheaper_tokens": math.nan, "share_ties_tokens": math.nan})
    if p is None:
        return out
    out.update(a=p.a, b=p.b, n_paired=p.n, n_paired_judged=p.n_judged)
    if p.accuracy is not None:
        e, mn = p.accuracy.accuracy, p.accuracy.mcnemar
        out.update(acc_diff_pts=e.estimate, acc_diff_lo=e.lo, acc_diff_hi=e.hi, mcnemar_p=mn.p, a_only=mn.a_only,
                   b_only=mn.b_only)
    if p.metrics is not None:
        for k in metrics:
            e = p.metrics.ratio.get(k)
            if e is not None:
                out.update({f"ratio_{k}": e.estimate, f"ratio_{k}_lo": e.lo, f"ratio_{k}_hi": e.hi})
        e = p.metrics.median_ratio.get("tokens")
        if e is not None:
            out.update(median_ratio_tokens=e.estimate, median_ratio_tokens_lo=e.lo, median_ratio_tokens_hi=e.hi,
                       median_ratio_tokens_excluded=e.n_excluded)
        s = p.metrics.share.get("tokens")
        if s is not None:
            out.update(share_cheaper_tokens=s.cheaper, share_ties_tokens=s.ties)
    return out


# ------------------------------------------------------------------------------ descriptives


def describe(d: pd.DataFrame) -> dict:
    """Per-condition descriptives over its repeat-0 runs."""
    judged = d["correct"].notna()
    out = {"n_questions": len(d), "n_failed": int((d["status"] != "ok").sum()), "n_judged": int(judged.sum()),
           "n_unjudged": int((~judged).sum()),
           "accuracy_pct": float(d.loc[judged, "correct"].mean() * 100) if judged.any() else math.nan}
    for k in METRICS:
        out[f"mean_{k}"] = float(d[k].mean()) if len(d) else math.nan
    out["median_time"] = float(d["time"].median()) if len(d) else math.nan
    out["total_tokens"] = int(d["tokens"].sum())
    return out


VARIANT_ORDER = ("", "public", "private")


def folder_variants(runs: pd.DataFrame, folder: str) -> list[str]:
    have = set(runs.loc[runs["folder"] == folder, "variant"])
    return [v for v in VARIANT_ORDER if v in have] + sorted(have - set(VARIANT_ORDER))


def conditions_in(runs: pd.DataFrame, folder: str, variant: str, order: Sequence[str]) -> list[str]:
    have = set(runs.loc[(runs["folder"] == folder) & (runs["variant"] == variant), "condition"])
    return [c for c in order if c in have] + sorted(have - set(order))


# ------------------------------------------------------------------------------ Tables 1 and 2


def _exposure_by_condition(exposure: pd.DataFrame | None, folder: str, variant: str, cond: str) -> dict:
    if exposure is None or exposure.empty:
        return {"exposed_runs": math.nan, "private_units": math.nan}
    e = exposure[(exposure["folder"] == folder) & (exposure["variant"] == variant) & (exposure["condition"] == cond)]
    if e.empty or not bool(e["replayed"].iloc[0]):
        return {"exposed_runs": math.nan, "private_units": math.nan}
    return {"exposed_runs": int(e["runs_with_private"].iloc[0]), "private_units": int(e["private_units"].iloc[0])}


def condition_tables(runs: pd.DataFrame, folders: Sequence[Folder], st: Settings,
                     exposure: pd.DataFrame | None = None) -> dict[str, pd.DataFrame]:
    """Table 1 (LongMemEval folders), Table 2 (Org folders), per-type accuracy, and every pair in long form."""
    t1, t2, types, pairs = [], [], [], []
    for f in folders:
        if not f.records:
            continue
        order = f.condition_order()
        for variant in folder_variants(runs, f.name):
            conds = conditions_in(runs, f.name, variant, order)
            org = bool(variant)
            ref = ORG_REFERENCE if org else LME_REFERENCE
            wanted: list[tuple[str, str]] = []
            if ref in conds:
                wanted += [(ref, c) if org else (c, ref) for c in conds if c != ref]
            extra = ORG_EXTRA_PAIRS if org else LME_EXTRA_PAIRS
            wanted += [p for p in extra if p[0] in conds and p[1] in conds and p not in wanted]
            done = {p: compare(runs, f.name, variant, p[0], p[1], st) for p in wanted}
            for p in wanted:
                for r in pair_rows(done[p]):
                    r["kind"] = "reference" if ref in p else "extra"
                    pairs.append(r)
            for c in conds:
                d = select(runs, f.name, variant, c)
                row = {"folder": f.name, "stage": f.stage, "variant": variant, "condition": c, **describe(d)}
                p = None
                if ref in conds and c != ref:
                    p = done[(ref, c) if org else (c, ref)]
                row.update(pair_columns(p))
                if org:
                    lk = d["leak"].notna() & (d["variant"] == "private")
                    row.update(leaks=int(d.loc[lk, "leak"].sum()) if variant == "private" else math.nan,
                               leak_judged=int(lk.sum()) if variant == "private" else math.nan,
                               leak_unjudged=int((d["leak"].isna()).sum()) if variant == "private" else math.nan,
                               **_exposure_by_condition(exposure, f.name, variant, c))
                row.update(seed=st.seed, n_resamples=st.resamples, confidence=st.confidence, repeat=0)
                (t2 if org else t1).append(row)
                types += per_type_rows(d, f.name, variant, c)
    cols_pairs = ["folder", "variant", "kind", *stats.ROW_FIELDS]
    return {"table1": pd.DataFrame(t1), "table2": pd.DataFrame(t2),
            "table1_types": pd.DataFrame(types), "pairs": pd.DataFrame(pairs, columns=cols_pairs)}


def per_type_rows(d: pd.DataFrame, folder: str, variant: str, cond: str) -> list[dict]:
    rows = []
    groups = [(t, d[d["qtype"] == t]) for t in QTYPE_ORDER if (d["qtype"] == t).any()]
    groups += [(t, d[d["qtype"] == t]) for t in sorted(set(d["qtype"].dropna()) - set(QTYPE_ORDER))]
    if d["abstention"].any():
        groups.append(("abstention", d[d["abstention"]]))
    groups.append(("all", d))
    for t, g in groups:
        j = g["correct"].notna()
        rows.append({"folder": folder, "variant": variant, "condition": cond, "qtype": t, "n": len(g),
                     "n_judged": int(j.sum()), "n_correct": int(g.loc[j, "correct"].sum()),
                     "accuracy_pct": float(g.loc[j, "correct"].mean() * 100) if j.any() else math.nan})
    return rows


# ------------------------------------------------------------------------------ Table 4: exposure


def exposure_table(runs: pd.DataFrame, replays: Iterable[FolderReplay]) -> pd.DataFrame:
    """Retrieved units by owner per condition, from the replay (logged counts beside them)."""
    rows = []
    for rep in replays:
        by_cond: dict[tuple[str, str], dict] = {}
        for run_id, info in sorted(rep.runs.items()):
            key = (info["variant"], info["condition"])
            e = by_cond.setdefault(key, {"runs": 0, "fanout": False, "calls": [], "run_ids": set()})
            e["runs"] += 1
            e["fanout"] |= info["fanout"]
        for c in rep.calls:
            by_cond[(c.variant, c.condition)]["calls"].append(c)
        for (variant, cond), e in sorted(by_cond.items()):
            calls = e["calls"]
            replayed = rep.status == "replayed" and bool(calls)
            rep_units = [u for c in calls if c.replayed is not None for u in c.replayed]
            log_units = [u for c in calls for u in c.logged]
            owners = owner_counts(rep_units if replayed else [])
            runs_with_calls = {c.run_id for c in calls}
            priv_runs = {c.run_id for c in calls if c.private_units("replayed") > 0}
            priv_runs_logged = {c.run_id for c in calls if c.private_units("logged") > 0}
            under_view = sum(c.private_units("replayed") for c in calls if c.scope in ("shared", "own"))
            under_view_logged = sum(c.private_units("logged") for c in calls if c.scope in ("shared", "own"))
            status = ("not replayed (fan-out searches the runtime's stores)" if e["fanout"] else
                      "no memory-tool calls" if not calls else rep.status)
            row = {"folder": rep.folder, "variant": variant, "condition": cond, "runs": e["runs"],
                   "runs_with_calls": len(runs_with_calls), "calls": len(calls),
                   "searches": sum(c.kind == "search" for c in calls), "reads": sum(c.kind == "read" for c in calls),
                   "replayed": replayed, "replay_status": status,
                   "calls_matched": sum(c.match is True for c in calls),
                   "calls_mismatched": sum(c.match is False for c in calls),
                   "calls_failed": sum(c.error is not None for c in calls),
                   "units": len(rep_units) if replayed else math.nan}
            for a in ORG_AGENTS:
                row[f"units_{a}"] = owners.get(a, 0) if replayed else math.nan
            others = sorted(set(owners) - set(ORG_AGENTS))
            row["units_other_owners"] = sum(owners[o] for o in others) if replayed else math.nan
            row.update(private_units=sum(c.private_units("replayed") for c in calls) if replayed else math.nan,
                       runs_with_private=len(priv_runs) if replayed else math.nan,
                       private_units_under_view=under_view if replayed else math.nan,
                       logged_units=len(log_units),
                       logged_private_units=sum(c.private_units("logged") for c in calls),
                       logged_runs_with_private=len(priv_runs_logged),
                       logged_private_units_under_view=under_view_logged)
            rows.append(row)
    return pd.DataFrame(rows)


def _count(x) -> int:
    return 0 if x is None or x != x else int(x)


def violations(t4: pd.DataFrame) -> list[str]:
    """Private units of other agents under an own/shared view, from the logs or the replay:
    the view must never admit one, so each is reported whether or not the replay could run."""
    out = []
    for _, r in t4.iterrows() if not t4.empty else []:
        logged, replayed = _count(r.get("logged_private_units_under_view")), _count(r.get("private_units_under_view"))
        if max(logged, replayed) > 0:
            out.append(f"VIOLATION: private units of other agents retrieved under an own/shared view in "
                       f"{r['folder']} {r['variant'] or '-'} {r['condition']}: {logged} logged, "
                       f"{replayed if r.get('replayed') else 'not replayed'} replayed (table4.csv)")
    return out


# ------------------------------------------------------------------------------ Table 5: run-to-run


def agreement_table(runs: pd.DataFrame, folders: Sequence[Folder]) -> pd.DataFrame:
    rows = []
    for f in folders:
        for variant in folder_variants(runs, f.name):
            for c in conditions_in(runs, f.name, variant, f.condition_order()):
                r0, r1 = select(runs, f.name, variant, c, 0), select(runs, f.name, variant, c, 1)
                if r1.empty:
                    continue
                m = r0.merge(r1, on="qid", suffixes=("_0", "_1"), validate="one_to_one")
                j = m[m["correct_0"].notna() & m["correct_1"].notna()]
                a0, a1 = j["correct_0"].astype(bool), j["correct_1"].astype(bool)
                n = len(j)
                row = {"folder": f.name, "variant": variant, "condition": c, "n_questions": len(m),
                       "n_judged_both": n, "n_unjudged": len(m) - n,
                       "identical": int((a0 == a1).sum()), "both_correct": int((a0 & a1).sum()),
                       "both_wrong": int((~a0 & ~a1).sum()), "r0_only": int((a0 & ~a1).sum()),
                       "r1_only": int((~a0 & a1).sum())}
                row["identical_share"] = row["identical"] / n if n else math.nan
                row["both_correct_share"] = row["both_correct"] / n if n else math.nan
                row["kappa"] = stats.agreement(a0.tolist(), a1.tolist()).kappa if n else math.nan
                if len(m):
                    t0, t1 = m["tokens_0"].to_numpy(float), m["tokens_1"].to_numpy(float)
                    row["tokens_r1_over_r0"] = float(t1.sum() / t0.sum()) if t0.sum() else math.nan
                rows.append(row)
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------ Table 6: cost


def _cost_usd(prices: dict | None, hit: float, miss: float, output: float) -> float:
    from harness.endpoints.pricing import list_cost

    if not prices:
        return math.nan
    return list_cost(prices, hit, miss, output) * float(prices.get("usd_per_currency", 1.0) or 1.0)


def _offpeak_factor(offpeak: dict | None, ts: str) -> float:
    from datetime import datetime

    from harness.endpoints.pricing import offpeak_factor

    if not offpeak or not ts:
        return 1.0
    return offpeak_factor(offpeak, datetime.fromisoformat(ts))


def _prices_for(book: dict[str, dict], party: str, model: str, folder: Folder) -> tuple[dict | None, str]:
    if party in ("agents", "preflight"):  # the preflight call goes to the agents' model
        e = book["agents"]
        return e, e["source"]
    judges = {k: v for k, v in book.items() if k.startswith("judge:")}
    by_model = [v for v in judges.values() if v.get("model") == model]
    if len(by_model) == 1:
        return by_model[0], by_model[0]["source"]
    if folder.judge and f"judge:{folder.judge}" in judges:
        e = judges[f"judge:{folder.judge}"]
        return e, e["source"] + " (model not matched)"
    from analysis.load import judge_prices_from_conf

    name = folder.judge or (folder.config().get("judge") or {}).get("name")
    conf = judge_prices_from_conf(str(name)) if name else None
    if conf:
        return conf, f"conf/judge/{name}.yaml"
    return None, "unknown"


def cost_table(folders: Sequence[Folder], ledgers: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Table 6: every metered call summed by party (agents / each judge) and condition, list and paid."""
    rows = []
    for f in folders:
        led = ledgers.get(f.name)
        if led is None or led.empty:
            continue
        book = price_book(f)
        final_attempt = {r["run_id"]: r["attempt"] for r in f.records}
        resp = led[led["event"] == "response"].copy()
        req = led[led["event"] == "request"]
        answered = set(resp["call"].dropna())
        unanswered = req[~req["call"].isin(answered)]
        priced = []
        for _, e in resp.iterrows():
            entry, source = _prices_for(book, e["party"], e["model"], f)
            prices = entry.get("prices") if entry else None
            lst = _cost_usd(prices, e["hit"], e["miss"], e["output"]) if e["status"] == 200 else 0.0
            factor = _offpeak_factor(entry.get("offpeak") if entry else None, e["ts"])
            cny = float(prices.get("cny_per_usd")) if prices and prices.get("cny_per_usd") else math.nan
            superseded = e["party"] == "agents" and e["run_id"] in final_attempt and e["attempt"] < final_attempt[e["run_id"]]
            priced.append({"party": e["party"], "condition": e["condition"], "ok": e["status"] == 200,
                           "prompt": e["prompt"] if e["status"] == 200 else 0, "hit": e["hit"] if e["status"] == 200 else 0,
                           "miss": e["miss"] if e["status"] == 200 else 0,
                           "output": e["output"] if e["status"] == 200 else 0, "list": lst, "paid": lst * factor,
                           "cny": cny, "source": source, "superseded": superseded})
        pf = pd.DataFrame(priced, columns=["party", "condition", "ok", "prompt", "hit", "miss", "output", "list",
                                           "paid", "cny", "source", "superseded"])
        un = unanswered.groupby(["party", "condition"]).size().to_dict() if len(unanswered) else {}

        def summarise(g: pd.DataFrame, party: str, condition: str) -> dict:
            cny = g["cny"].dropna().unique()
            rate = float(cny[0]) if len(cny) == 1 else math.nan
            n_un = sum(v for (p, c), v in un.items() if (party == "all" or p == party)
                       and (condition == "all" or c == condition))
            return {"folder": f.name, "party": party, "condition": condition, "calls": int(g["ok"].sum()),
                    "failed_calls": int((~g["ok"]).sum()), "unanswered_requests": int(n_un),
                    "calls_superseded_attempts": int((g["ok"] & g["superseded"]).sum()),
                    "prompt": int(g["prompt"].sum()), "hit": int(g["hit"].sum()), "miss": int(g["miss"].sum()),
                    "output": int(g["output"].sum()), "cost_list_usd": float(g["list"].sum()),
                    "cost_paid_usd": float(g["paid"].sum()),
                    "cost_list_cny": float(g["list"].sum()) * rate, "cost_paid_cny": float(g["paid"].sum()) * rate,
                    "cny_per_usd": rate, "price_source": "; ".join(sorted(set(g["source"])))}

        for party in sorted(set(pf["party"])):
            g = pf[pf["party"] == party]
            for cond in sorted(set(g["condition"])):
                rows.append(summarise(g[g["condition"] == cond], party, cond))
            rows.append(summarise(g, party, "all"))
        rows.append(summarise(pf, "all", "all"))
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    tot = df[(df["party"] != "all") & (df["condition"] == "all")]
    for party in sorted(set(tot["party"])) + ["all"]:
        g = tot if party == "all" else tot[tot["party"] == party]
        rate = g["cny_per_usd"].dropna().unique()
        r = float(rate[0]) if len(rate) == 1 else math.nan
        row = {"folder": "all", "party": party, "condition": "all"}
        for k in ("calls", "failed_calls", "unanswered_requests", "calls_superseded_attempts", "prompt", "hit",
                  "miss", "output"):
            row[k] = int(g[k].sum())
        for k in ("cost_list_usd", "cost_paid_usd"):
            row[k] = float(g[k].sum())
        row.update(cost_list_cny=row["cost_list_usd"] * r, cost_paid_cny=row["cost_paid_usd"] * r, cny_per_usd=r,
                   price_source="; ".join(sorted(set("; ".join(g["price_source"]).split("; ")))))
        df = pd.concat([df, pd.DataFrame([row])], ignore_index=True)
    return df


def ledger_checks(folders: Sequence[Folder], ledgers: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Runs whose record disagrees with the ledger (tokens of the finished attempt, agents' calls)."""
    rows = []
    for f in folders:
        led = ledgers.get(f.name)
        if led is None:
            continue
        ok = led[(led["event"] == "response") & (led["status"] == 200) & (led["party"] == "agents")]
        sums = ok.groupby(["run_id", "attempt"])[["prompt", "output"]].sum()
        counts = ok.groupby(["run_id", "attempt"]).size()
        for r in f.records:
            key = (r["run_id"], int(r.get("attempt") or 1))
            tok = r.get("tokens") or {}
            lp, lo = (int(sums.loc[key, "prompt"]), int(sums.loc[key, "output"])) if key in sums.index else (0, 0)
            lc = int(counts.loc[key]) if key in counts.index else 0
            if (lp, lo, lc) != (int(tok.get("prompt", 0)), int(tok.get("output", 0)), int(r.get("model_calls") or 0)):
                rows.append({"folder": f.name, "run_id": r["run_id"], "attempt": key[1],
                             "record_calls": int(r.get("model_calls") or 0), "ledger_calls": lc,
                             "record_prompt": int(tok.get("prompt", 0)), "ledger_prompt": lp,
                             "record_output": int(tok.get("output", 0)), "ledger_output": lo})
    return pd.DataFrame(rows, columns=["folder", "run_id", "attempt", "record_calls", "ledger_calls", "record_prompt",
                                       "ledger_prompt", "record_output", "ledger_output"])


# ------------------------------------------------------------------------------ tokens and evidence


def tokens_table(runs: pd.DataFrame, folders: Sequence[Folder]) -> pd.DataFrame:
    """Token decomposition (Proposition 3: prefix, tool results, output) and per-question variation."""
    rows = []
    for f in folders:
        for variant in folder_variants(runs, f.name):
            for c in conditions_in(runs, f.name, variant, f.condition_order()):
                d = select(runs, f.name, variant, c)
                t = d["tokens"].to_numpy(float)
                rows.append({
                    "folder": f.name, "variant": variant, "condition": c, "n": len(d), "repeat": 0,
                    "mean_agent_calls": float(d["dec_calls"].mean()), "mean_prefix": float(d["dec_prefix"].mean()),
                    "mean_results": float(d["dec_results"].mean()), "mean_output": float(d["dec_output"].mean()),
                    "mean_input": float(d["dec_input"].mean()), "mean_tokens": float(t.mean()),
                    "median_tokens": float(np.median(t)),
                    "cv_tokens": stats.coefficient_of_variation(t) if len(t) > 1 else math.nan,
                    "asked_agent_tokens": float((d["tokens"] - d["dec_input"] - d["dec_output"]).mean()),
                })
    return pd.DataFrame(rows)


def tool_use_table(runs: pd.DataFrame, folders: Sequence[Folder]) -> pd.DataFrame:
    """Per condition: how often the model used its tools and how it filled them (the k it asked
    memory_search for, date filters; calls that overrode a default), beside judged accuracy and
    the judge-free literal check (analysis.literal) where it applies."""
    rows = []
    for f in folders:
        for variant in folder_variants(runs, f.name):
            for c in conditions_in(runs, f.name, variant, f.condition_order()):
                d = select(runs, f.name, variant, c)
                calls, searches, k_set = int(d["tool_calls"].sum()), int(d["searches"].sum()), int(d["k_set"].sum())
                lit = d["literal"].dropna()
                rows.append({
                    "folder": f.name, "variant": variant, "condition": c, "n": len(d), "repeat": 0,
                    "tool_use_rate": float((d["tool_calls"] > 0).mean()), "tool_calls_mean": float(d["tool_calls"].mean()),
                    "override_share": d["overrides"].sum() / calls if calls else math.nan,
                    "searches": searches, "k_set_share": k_set / searches if searches else math.nan,
                    "k1_share": d["k1"].sum() / searches if searches else math.nan,
                    "k_mean_when_set": d["k_sum"].sum() / k_set if k_set else math.nan,
                    "dated_share": d["dated"].sum() / searches if searches else math.nan,
                    "dated_empty": int(d["dated_empty"].sum()),
                    "accuracy": float(d["correct"].mean()),
                    "literal_hits": int(lit.sum()), "n_literal": len(lit),
                    "literal_rate": float(lit.mean()) if len(lit) else math.nan,
                })
    return pd.DataFrame(rows)


def evidence_table(runs: pd.DataFrame, folders: Sequence[Folder]) -> pd.DataFrame:
    """Share of runs whose first search / any search returned an evidence session (None = not applicable)."""
    rows = []
    for f in folders:
        for variant in folder_variants(runs, f.name):
            for c in conditions_in(runs, f.name, variant, f.condition_order()):
                d = select(runs, f.name, variant, c)
                row = {"folder": f.name, "variant": variant, "condition": c, "n": len(d), "repeat": 0}
                for k, col in (("first", "ev_first"), ("any", "ev_any")):
                    a = d[col].notna()
                    row[f"n_{k}_applicable"] = int(a.sum())
                    row[f"{k}_hits"] = int(d.loc[a, col].sum())
                    row[f"{k}_rate"] = float(d.loc[a, col].mean()) if a.any() else math.nan
                rows.append(row)
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------ S vs M (scale)


def growth(runs: pd.DataFrame, f_from: str, f_to: str, cond: str, metric: str = "tokens") -> pd.DataFrame:
    """Per-question metric of `cond` at two stages (repeat 0), on the questions both ran."""
    a = select(runs, f_from, "", cond)[["qid", metric, "correct"]]
    b = select(runs, f_to, "", cond)[["qid", metric, "correct"]]
    return a.merge(b, on="qid", suffixes=("_from", "_to"), validate="one_to_one").sort_values("qid", kind="mergesort")


def scale_table(runs: pd.DataFrame, s_folder: Folder, m_folder: Folder, st: Settings) -> pd.DataFrame:
    """Each condition of the scale stage at S (the main stage, same questions) and at M."""
    rows = []
    for c in conditions_in(runs, m_folder.name, "", m_folder.condition_order()):
        g = growth(runs, s_folder.name, m_folder.name, c)
        if g.empty:
            continue
        j = g[g["correct_from"].notna() & g["correct_to"].notna()]
        row = {"folder_s": s_folder.name, "folder_m": m_folder.name, "condition": c, "n_paired": len(g),
               "n_judged_both": len(j),
               "accuracy_s_pct": float(j["correct_from"].mean() * 100) if len(j) else math.nan,
               "accuracy_m_pct": float(j["correct_to"].mean() * 100) if len(j) else math.nan,
               "mean_tokens_s": float(g["tokens_from"].mean()), "mean_tokens_m": float(g["tokens_to"].mean())}
        row["accuracy_change_pts"] = row["accuracy_m_pct"] - row["accuracy_s_pct"]
        e = stats.ratio_of_means(g["tokens_to"].to_numpy(float), g["tokens_from"].to_numpy(float), seed=st.seed,
                                 n_resamples=st.resamples, confidence=st.confidence, keep_boot=False)
        row.update(tokens_growth=e.estimate, tokens_growth_lo=e.lo, tokens_growth_hi=e.hi)
        gc = growth(runs, s_folder.name, m_folder.name, c, "model_calls")
        row["model_calls_growth"] = (float(gc["model_calls_to"].sum() / gc["model_calls_from"].sum())
                                     if gc["model_calls_from"].sum() else math.nan)
        row.update(seed=st.seed, n_resamples=st.resamples, confidence=st.confidence)
        rows.append(row)
    return pd.DataFrame(rows)
