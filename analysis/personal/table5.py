"""Table 5 (Appendix A.4): output length in words per model x method, the method under test vs the reference baseline on words
(Welch's t), and within each method the correlation of words with latency (Pearson r).

Latency is the paper's: the assistant's answer call (`answer_s`). Successful runs only (a
failed run has no reply). A method whose yaml says `hide_in: [table5]` stays in the CSV; the paper
leaves Mem0 out of its table (short, generic replies: no meaningful comparison), and so does the report's.
"""

from __future__ import annotations

import pandas as pd
from scipy import stats

from analysis.markdown import md_table, pval
from analysis.personal import Table, register

from .common import mean_sd

COLUMNS = ("model", "condition", "n", "words_mean", "words_sd", "latency_mean", "r_words_latency", "r_p",
           "words_diff_vs_concat", "welch_t", "welch_p", "answers_cut_length")


def build(st) -> pd.DataFrame:
    ok, who = st.study[st.study.status == "ok"], st.roles
    rows = []
    for model, g in ok.groupby("model", sort=True):
        for cond in who.order(g.condition):
            c = g[g.condition == cond]
            row = {"model": model, "condition": cond, "n": len(c), "words_mean": c.words.mean(),
                   "words_sd": c.words.std(ddof=1), "latency_mean": c.answer_s.mean(),
                   # answers that ended at their token limit: their words count the cut, not the method
                   "answers_cut_length": int(c.answer_cut_length.sum()) if "answer_cut_length" in c else 0}
            if len(c) >= 3 and c.words.nunique() > 1 and c.answer_s.nunique() > 1:
                r = stats.pearsonr(c.words, c.answer_s)
                row["r_words_latency"], row["r_p"] = float(r.statistic), float(r.pvalue)
            if cond == who.under_test:
                a, b = c.words.astype(float), g.loc[g.condition == who.reference, "words"].astype(float)
                if len(a) >= 2 and len(b) >= 2:
                    w = stats.ttest_ind(a, b, equal_var=False)
                    row.update(words_diff_vs_concat=a.mean() - b.mean(), welch_t=float(w.statistic),
                               welch_p=float(w.pvalue))
            rows.append(row)
    return pd.DataFrame(rows, columns=list(COLUMNS))


def section(st) -> str:
    t, who = st.table("table5"), st.roles
    ok = st.study[st.study.status == "ok"]
    shown = t[t.condition.isin(who.shown_in("table5", t.condition.unique()))]
    left_out = sorted(set(t.condition) - set(shown.condition))
    cut = int(shown.answers_cut_length.sum()) if len(shown) else 0
    body = []
    for r in shown.itertuples():
        words = mean_sd(ok.loc[(ok.model == r.model) & (ok.condition == r.condition), "words"])
        test = "" if pd.isna(r.welch_p) else f"{r.words_diff_vs_concat:+.0f} (t {r.welch_t:.2f}, p {pval(r.welch_p)})"
        body.append([r.model, r.condition, r.n, words, r.answers_cut_length, "–" if pd.isna(r.r_words_latency) else
                     f"{r.r_words_latency:.2f} (p {pval(r.r_p)})", test])
    return ("## Table 5: output length (words) by method and model\n\n[`table5_words.csv`](table5_words.csv); "
            f"r(words, latency) within each method, latency = the assistant's answer call; {who.under_test} - "
            f"{who.reference} words with Welch's t."
            + (f" {', '.join(left_out)} left out of the table, as in the paper (in the CSV)." if left_out else "")
            + (f" {cut} answers cut at their token limit (finish_reason length, \"cut\"): their words count the "
               "cut, not the method." if cut else "")
            + "\n\n"
            + (md_table(["model", "method", "n", "words (mean ± SD)", "cut", "r(words, latency)",
                         f"{who.under_test} - {who.reference} words"], body) if body else "(no successful runs)") + "\n")


register(Table("table5", "table5_words.csv", build, section, order=50, columns=COLUMNS))
