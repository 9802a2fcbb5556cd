"""Table 6: every metered call summed by party and condition, at list and paid prices."""

from __future__ import annotations

import math
from typing import Sequence

import pandas as pd

from analysis.load import Folder, price_book
from analysis.markdown import integer, link, money, simple_section, text
from analysis.tables import Table, register
from analysis.tables.status import status_line as _status_line


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


def _per_correct(df: pd.DataFrame, runs: pd.DataFrame | None) -> pd.DataFrame:
    """Correct answers (every repeat) of each row's folder and condition, and list dollars per correct answer."""
    if runs is None or df.empty:
        return df
    ok = runs[runs["correct"] == 1]
    by = ok.groupby(["folder", "condition"]).size().to_dict()
    per_folder = ok.groupby("folder").size().to_dict()

    def n(r) -> int:
        if r["folder"] == "all":
            return len(ok)
        return per_folder.get(r["folder"], 0) if r["condition"] == "all" else by.get((r["folder"], r["condition"]), 0)

    df["correct_answers"] = [n(r) for _, r in df.iterrows()]
    df["usd_per_correct"] = [r["cost_list_usd"] / r["correct_answers"] if r["correct_answers"] else math.nan
                             for _, r in df.iterrows()]
    return df


def superseded_costs(folders: Sequence[Folder], ledgers: dict[str, pd.DataFrame]) -> dict[tuple[str, str], tuple]:
    """(folder, run_id) -> (list, paid) USD of the agents' billed calls of a run's attempts before its recorded one.

    A run record holds its last attempt's calls only; what earlier attempts were billed was spent all the same,
    so a run's cost (Tables 1, 2 and USD per correct answer) adds it, as Table 6 sums it from the ledger."""
    out: dict[tuple[str, str], tuple] = {}
    for f in folders:
        led = ledgers.get(f.name)
        if led is None or led.empty or not f.records:
            continue
        final = {r["run_id"]: r["attempt"] for r in f.records}
        resp = led[(led["event"] == "response") & (led["party"] == "agents")]
        book = price_book(f)
        for _, e in resp.iterrows():
            rid = e["run_id"]
            if rid not in final or not e["attempt"] < final[rid] or not (e["status"] == 200 and e.get("billed", True)):
                continue
            entry, _ = _prices_for(book, e["party"], e["model"], f)
            lst = _cost_usd(entry.get("prices") if entry else None, e["hit"], e["miss"], e["output"])
            paid = lst * _offpeak_factor(entry.get("offpeak") if entry else None, e["ts"])
            a, b = out.get((f.name, rid), (0.0, 0.0))
            out[(f.name, rid)] = (a + lst, b + paid)
    return out


def cost_table(folders: Sequence[Folder], ledgers: dict[str, pd.DataFrame], runs: pd.DataFrame | None = None
               ) -> pd.DataFrame:
    """Table 6: every metered call summed by party (agents / each judge) and condition, list and paid, and
    list dollars per correct answer (the party's cost over the condition's correct answers)."""
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
            # a 200 whose body is an error object (or no completion) is a failed call; what it billed still counts
            answered_ok = e["status"] == 200 and not isinstance(e.get("error"), str)
            billed = e["status"] == 200 and bool(e.get("billed", True))
            lst = _cost_usd(prices, e["hit"], e["miss"], e["output"]) if billed else 0.0
            factor = _offpeak_factor(entry.get("offpeak") if entry else None, e["ts"])
            cny = float(prices.get("cny_per_usd")) if prices and prices.get("cny_per_usd") else math.nan
            superseded = e["party"] == "agents" and e["run_id"] in final_attempt and e["attempt"] < final_attempt[e["run_id"]]
            priced.append({"party": e["party"], "condition": e["condition"], "ok": answered_ok,
                           "prompt": e["prompt"] if billed else 0, "hit": e["hit"] if billed else 0,
                           "miss": e["miss"] if billed else 0,
                           "output": e["output"] if billed else 0, "list": lst, "paid": lst * factor,
                           "cny": cny, "source": source, "superseded": superseded,
                           "no_usage": billed and e.get("usage_reported") is False,
                           "estimated": billed and bool(e.get("usage_estimated", False)),
                           "length": e.get("finish") == "length"})
        pf = pd.DataFrame(priced, columns=["party", "condition", "ok", "prompt", "hit", "miss", "output", "list",
                                           "paid", "cny", "source", "superseded", "no_usage", "estimated", "length"])
        un = unanswered.groupby(["party", "condition"]).size().to_dict() if len(unanswered) else {}

        def summarise(g: pd.DataFrame, party: str, condition: str) -> dict:
            cny = g["cny"].dropna().unique()
            rate = float(cny[0]) if len(cny) == 1 else math.nan
            n_un = sum(v for (p, c), v in un.items() if (party == "all" or p == party)
                       and (condition == "all" or c == condition))
            return {"folder": f.name, "party": party, "condition": condition, "calls": int(g["ok"].sum()),
                    "failed_calls": int((~g["ok"]).sum()), "unanswered_requests": int(n_un),
                    "calls_superseded_attempts": int((g["ok"] & g["superseded"]).sum()),
                    "calls_without_usage": int(g["no_usage"].astype(bool).sum()),  # cost estimated, not zero
                    # usage missing or not counts (harness.endpoints.usage): tokens and cost here are estimates
                    "calls_usage_estimated": int(g["estimated"].astype(bool).sum()),
                    "calls_cut_length": int(g["length"].astype(bool).sum()),  # finish_reason length
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
        for k in ("calls", "failed_calls", "unanswered_requests", "calls_superseded_attempts", "calls_without_usage",
                  "calls_usage_estimated", "calls_cut_length", "prompt", "hit", "miss", "output"):
            row[k] = int(g[k].sum())
        for k in ("cost_list_usd", "cost_paid_usd"):
            row[k] = float(g[k].sum())
        row.update(cost_list_cny=row["cost_list_usd"] * r, cost_paid_cny=row["cost_paid_usd"] * r, cny_per_usd=r,
                   price_source="; ".join(sorted(set("; ".join(g["price_source"]).split("; ")))))
        df = pd.concat([df, pd.DataFrame([row])], ignore_index=True)
    return _per_correct(df, runs)


def table6_section(res) -> str:
    """Table 6."""
    t = res.tables
    parts: list[str] = []
    # Table 6
    parts.append("\n## Table 6: cost at list and paid (off-peak) prices\n\n")
    parts.append(f"{link('table6.csv')}; status: {_status_line(res, 'table6')}. Sums of the metering ledger "
                 "(every model call, interrupted attempts included), priced per call at its party's prices; paid "
                 "applies the off-peak factor at the call's time. Calls whose usage the server did not report as "
                 "counts are priced at estimated tokens (\"usage estimated\"); a 200 reply that is not a completion is a "
                 "failed call (what it billed counts); \"cut at length\": replies that ended at their token limit "
                 "(finish_reason length).\n\n")
    t6 = t["table6"]
    # the rows are per party, per folder and totals: the note counts each call once, from the grand total
    grand = t6[(t6["folder"] == "all") & (t6["party"] == "all") & (t6["condition"] == "all")] if not t6.empty else t6
    parts.append(simple_section(t6[t6["condition"] == "all"] if not t6.empty else t6, [
        ("folder", "folder", text), ("party", "party", text), ("calls", "calls", integer),
        ("failed", "failed_calls", integer), ("unanswered", "unanswered_requests", integer),
        ("no usage", "calls_without_usage", integer), ("usage estimated", "calls_usage_estimated", integer),
        ("cut at length", "calls_cut_length", integer), ("prompt tokens", "prompt", integer), ("cache hit", "hit", integer), ("miss", "miss", integer),
        ("output", "output", integer), ("list USD", "cost_list_usd", money), ("paid USD", "cost_paid_usd", money),
        ("list CNY", "cost_list_cny", money), ("paid CNY", "cost_paid_cny", money),
        ("correct answers", "correct_answers", integer), ("list USD per correct (every repeat)", "usd_per_correct", money),
        ("prices", "price_source", text)], estimated_in="calls_usage_estimated",
        usage=("prompt", "hit", "miss", "output", "cost_list_usd", "cost_paid_usd", "cost_list_cny", "cost_paid_cny",
               "usd_per_correct"), total=grand.iloc[0] if len(grand) else None))

    return "".join(parts)


register(Table("table6", "table6.csv", lambda res: cost_table(res.folders, res.ledgers, res.runs), table6_section,
               prereg=("table6",), order=80))
