"""Provenance: what each folder is, its code, data, seed and pre-registration hash, and its judges."""

from __future__ import annotations

from typing import Any

from analysis.markdown import DASH, integer, md_table, text
from analysis.tables import Table, register
from harness.records.privacy import without_urls  # an endpoint's URL is never printed (nor published)


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
                      text(without_urls(str(judge.get("identity") or ""))), ", ".join(sources) or DASH,
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


def provenance_section(res) -> str:
    return "\n## Provenance\n\n" + _provenance(res)


register(Table("provenance", None, section=provenance_section, order=10))
