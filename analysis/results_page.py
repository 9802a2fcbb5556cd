"""`python -m analysis.results_page datasets=DIR[,DIR] [out=results_page] [viewer=URL]` — a static results page.

One HTML file (index.html) from one or more published datasets (analysis/publish.py): one row
per stage folder x condition x variant with the reader model, accuracy and its Wilson 95%
interval over the judged runs (a failed run counts wrong, as in the analysis), tokens per
run, cost at list price, and whether the stage's fidelity manifest is the paper's (same) or
not (differs: the settings named; not known: settings the manifest could not compare). Every column sorts by a click on its heading (a few lines
of script in the page; nothing fetched). Each row links into Inspect's viewer at
`viewer` (default http://127.0.0.1:7575/, what `make view` serves) on the stage's log for that
condition; the logs are written beside the page (out/logs: `make view VIEW_DIR=out/logs`).

Each dataset is checked against its card and rebuilt first, as `make analyze` does.
"""

from __future__ import annotations

import html
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from statsmodels.stats.proportion import proportion_confint

from analysis import export_inspect
from analysis.load import AnalysisError, find_folders, load_folder, runs_frame
from analysis.markdown import estimated, estimated_calls, estimated_note
from harness.failures import announce

COLUMNS = ["stage", "model", "condition", "variant", "runs", "accuracy", "interval", "tokens / run", "cost (USD)",
           "manifest"]
DEFAULT_VIEWER = "http://127.0.0.1:7575/"


def manifest_status(info: dict) -> str:
    rows = (info.get("fidelity") or {}).get("rows") or []
    if not rows:
        return "not recorded"
    differs = [str(r.get("key")) for r in rows if r.get("status") == "differs"]
    unknown = [str(r.get("key")) for r in rows if r.get("status") not in ("same", "differs")]
    if differs:
        return "differs: " + ", ".join(differs)
    return "not known: " + ", ".join(unknown) if unknown else "same"


def rows(folders, viewer: str, logs: dict[tuple[str, str], str]) -> list[dict]:
    runs = runs_frame(folders)
    out = []
    for f in folders:
        model = (f.info.get("model") or {}).get("model") or (f.info.get("model") or {}).get("name") or "?"
        mine = runs[runs["folder"] == f.name]
        for cond in f.condition_order():
            for variant, g in mine[mine["condition"] == cond].groupby("variant", sort=True):
                judged = g["correct"].dropna()
                n, k = len(judged), int(judged.sum())
                lo, hi = proportion_confint(k, n, alpha=0.05, method="wilson") if n else (math.nan, math.nan)
                out.append({"stage": f.name, "model": model, "condition": cond, "variant": variant or "-",
                            "runs": len(g), "accuracy": k / n if n else math.nan, "lo": lo, "hi": hi,
                            "tokens": float(g["tokens"].mean()), "cost": float(g["cost"].sum()),
                            "usage_estimated_calls": estimated_calls(g),  # tokens and cost marked ~
                            "manifest": manifest_status(f.info),
                            "link": f"{viewer}#/logs/{logs[(f.name, cond)]}"})
    return out


def _num(x: float, fmt: str) -> tuple[str, str]:
    """(shown text, sort key) of a number; NaN shows a dash and sorts last."""
    return ("–", "") if math.isnan(x) else (format(x, fmt), repr(float(x)))


def render(table: list[dict], sources: list[str]) -> str:
    head = "".join(f'<th onclick="sortBy({i})">{html.escape(c)}</th>' for i, c in enumerate(COLUMNS))
    body = []
    for r in table:
        acc, acc_key = _num(r["accuracy"], ".1%")
        interval = "–" if math.isnan(r["lo"]) else f"{r['lo']:.1%} – {r['hi']:.1%}"
        tok, tok_key = _num(r["tokens"], ",.0f")
        cost, cost_key = _num(r["cost"], ".4f")
        tok, cost = (estimated(x, r.get("usage_estimated_calls")) for x in (tok, cost))
        cells = [(r["stage"], r["stage"]), (r["model"], r["model"]),
                 (f'<a href="{html.escape(r["link"], quote=True)}">{html.escape(r["condition"])}</a>', r["condition"]),
                 (r["variant"], r["variant"]), (str(r["runs"]), str(r["runs"])), (acc, acc_key),
                 (interval, repr(r["lo"])), (tok, tok_key), (cost, cost_key), (r["manifest"], r["manifest"])]
        tds = "".join(f'<td data-key="{html.escape(k, quote=True)}">{v if i == 2 else html.escape(v)}</td>'
                      for i, (v, k) in enumerate(cells))
        body.append(f"<tr>{tds}</tr>")
    est = estimated_note(sum(r.get("usage_estimated_calls") or 0 for r in table)).strip()
    note = f"<p>{html.escape(est)}</p>\n" if est else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>memspace-harness results</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px}}th{{cursor:pointer;background:#eee}}</style></head>
<body><h1>Results</h1>
<p>From the published datasets: {html.escape(", ".join(sources))}. Accuracy over judged runs (failed runs count
wrong), Wilson 95% interval; cost at list price. Click a heading to sort; a condition opens its runs in Inspect's
viewer.</p>
<table id="results"><thead><tr>{head}</tr></thead><tbody>
{chr(10).join(body)}
</tbody></table>
{note}<script>
let last = null, asc = true;
function sortBy(col) {{
  asc = last === col ? !asc : true; last = col;
  const tbody = document.querySelector('#results tbody');
  const rows = Array.from(tbody.rows);
  rows.sort((a, b) => {{
    const x = a.cells[col].dataset.key, y = b.cells[col].dataset.key;
    const nx = parseFloat(x), ny = parseFloat(y);
    const c = (x === '' ? 1 : 0) - (y === '' ? 1 : 0) ||
      (!isNaN(nx) && !isNaN(ny) ? nx - ny : x.localeCompare(y));
    return asc ? c : -c;
  }});
  rows.forEach(r => tbody.appendChild(r));
}}
</script></body></html>
"""


def build(datasets: Sequence[str | Path], out: str | Path, viewer: str = DEFAULT_VIEWER) -> Path:
    from analysis import publish

    out = Path(out)
    for d in datasets:
        if not publish.is_published(d):
            raise AnalysisError(f"{d}: not a dataset written by make publish (no dataset card)")
    folders = [load_folder(f) for f in find_folders(list(datasets))]
    if not folders:
        raise AnalysisError("no stage folders in " + ", ".join(map(str, datasets)))
    logs = {(f.name, cond): export_inspect.log_file_name(f, cond)  # names checked before anything is written
            for f in folders for cond in f.condition_order()}
    out.mkdir(parents=True, exist_ok=True)
    written = export_inspect.export(folders, out / "logs")
    assert all(out / "logs" / name in written for name in logs.values())
    page = out / "index.html"
    page.write_text(render(rows(folders, viewer, logs), [Path(d).name for d in datasets]), encoding="utf-8")
    return page


def main(argv: Sequence[str] | None = None) -> int:
    opts = {"datasets": [], "out": "results_page", "viewer": DEFAULT_VIEWER}
    try:
        for a in (sys.argv[1:] if argv is None else argv):
            k, eq, v = a.partition("=")
            if not eq or k not in opts:
                raise AnalysisError(f"unknown argument {a!r}; python -m analysis.results_page datasets=DIR[,DIR] "
                                    f"[out=DIR] [viewer=URL]")
            opts[k] = [x for x in v.split(",") if x] if k == "datasets" else v
        if not opts["datasets"]:
            raise AnalysisError("datasets=DIR[,DIR] is required (folders written by make publish)")
        page = build(opts["datasets"], opts["out"], opts["viewer"])
    except AnalysisError as exc:
        return announce(exc)
    print(f"wrote {page} (logs in {page.parent / 'logs'}: make view VIEW_DIR={page.parent / 'logs'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
