"""`python -m judge.probe stage=NAME [judge=...]` (`make probe`): how often the judge is wrong.

From the stage's own questions (its records' question, gold and type) the probe plants answers
whose correctness is known and has the judge grade them with the stage's prompts:

* planted wrong: another question's gold (`other_gold`), the gold with a number changed
  (`changed_number`) or a date changed (`changed_date`), and for an abstention question a
  confident answer (`confident_answer`);
* planted right: the gold restated (`paraphrase`), its parts reordered (`reordered`) and the gold
  with extra words around it (`extra_words`); for an abstention question a plain refusal.

A planted answer becomes a pseudo-record (`probe.<kind>.<qid>.r0`, condition `probe`) judged
through judge/answer_check.py like any run: the same prompts, the reply cache, the metering
proxy into the stage's ledger (tag `judge-probe:<id>`, role judge) and the stage's spending cap.
Its judgements go to judgements/<judge>.probe.jsonl, which no analysis takes for correctness;
`make analyze` turns them into false-positive and false-negative rates per question type with
Wilson intervals beside the accuracy they bound (analysis/tables/judge_error.py). Seeded: the
same stage and seed plant the same answers.
"""

from __future__ import annotations

import random
import re
import sys

import hydra
from omegaconf import DictConfig

from harness.failures import STOPPED, exits_with_code
from harness.records import RunDir

WRONG = ("other_gold", "changed_number", "changed_date", "confident_answer")
RIGHT = ("paraphrase", "reordered", "extra_words", "refusal")
SUFFIX = "probe"
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?![\w.])")
_MONTH = re.compile(r"\b(" + "|".join(MONTHS) + r")\b")
_DAY = re.compile(r"\b(" + "|".join(DAYS) + r")\b")
_ISO = re.compile(r"\b(\d{4})[-/](\d{2})[-/](\d{2})\b")


def _change_number(gold: str) -> str | None:
    m = _NUMBER.search(gold)
    if not m:
        return None
    x = m.group(1)
    new = str(int(x) + 3) if x.isdigit() else f"{float(x) * 2:g}"
    return gold[:m.start(1)] + new + gold[m.end(1):]


def _change_date(gold: str) -> str | None:
    m = _ISO.search(gold)
    if m:
        month = (int(m.group(2)) % 12) + 1
        return gold[:m.start()] + f"{m.group(1)}-{month:02d}-{m.group(3)}" + gold[m.end():]
    for pat, names in ((_MONTH, MONTHS), (_DAY, DAYS)):
        m = pat.search(gold)
        if m:
            other = names[(names.index(m.group(1)) + 3) % len(names)]
            return gold[:m.start()] + other + gold[m.end():]
    return None


def _reorder(gold: str) -> str | None:
    parts = [p.strip() for p in re.split(r",\s*|\s+and\s+", gold) if p.strip()]
    if len(parts) < 2:
        return None
    return ", ".join(parts[::-1][:-1]) + " and " + parts[::-1][-1]


def plant(questions: list[dict], seed: int) -> list[dict]:
    """Planted answers for every question: {qid, qtype, abstention, question, gold, kind, truth, answer}."""
    qs = sorted({q["qid"]: q for q in questions}.values(), key=lambda q: q["qid"])
    out = []
    for q in qs:
        rng = random.Random(f"probe:{seed}:{q['qid']}")
        gold, abst = str(q["gold"]), bool(q["abstention"])
        others = [o for o in qs if o["qid"] != q["qid"] and not o["abstention"] and str(o["gold"]) != gold]
        other = rng.choice(others)["gold"] if others else None
        answers: dict[str, str | None]
        if abst:
            answers = {"confident_answer": f"Yes, I remember: it was {other}." if other else None,
                       "refusal": "I don't have that information; it was never mentioned in our conversations."}
        else:
            changed_n, changed_d = _change_number(gold), _change_date(gold)
            answers = {"other_gold": f"{other}" if other else None,
                       "changed_number": changed_n,
                       "changed_date": changed_d if changed_d != changed_n else None,
                       "paraphrase": f"From what you told me earlier, the answer is {gold}.",
                       "reordered": _reorder(gold),
                       "extra_words": f"Let me check our past conversations. {gold}. I hope that helps!"}
        for kind, answer in answers.items():
            if answer is not None:
                out.append({**{k: q[k] for k in ("qid", "qtype", "abstention", "question", "gold")}, "kind": kind,
                            "truth": kind in RIGHT, "answer": answer})
    return out


def probe_records(records: list[dict], seed: int) -> list[dict]:
    """Pseudo-records of the planted answers, in the record schema's shape (the judge reads them as runs)."""
    base = [r for r in records if (r.get("variant") or "") != "private"]  # Org private asks for declining
    out = []
    for p in plant(base, seed):
        src = next(r for r in base if r["qid"] == p["qid"])
        out.append({**src, "run_id": f"probe.{p['kind']}.{p['qid']}.r0", "condition": "probe", "module": "probe",
                    "variant": "", "repeat": 0, "attempt": 1, "status": "ok", "error": None, "answer": p["answer"],
                    "condition_notes": {"probe_kind": p["kind"], "probe_truth": p["truth"]}})
    return out


def judgements_name(judge: str) -> str:
    return f"{judge}.{SUFFIX}"


def run_probe(cfg, rd: RunDir | None = None) -> dict:
    from judge.answer_check import judge_model_config, judge_stage
    from harness.run.budget import Budget
    from omegaconf import OmegaConf

    rd = rd or RunDir.for_stage(cfg)
    records = [r.model_dump(mode="json") for r in rd.records()]
    if not records:
        raise SystemExit(f"error: {rd.root} has no records; run the stage first")
    planted = probe_records(records, int(cfg.seed))
    budget = None
    if cfg.get("budget_usd") is not None:  # the probe's calls count in the stage's cap, like any judging
        budget = Budget(cfg.budget_usd, OmegaConf.to_container(cfg.model, resolve=True).get("prices"),
                        judge_model_config(cfg.judge).get("prices"), rd.ledger_paths())
    return judge_stage(cfg, rd, records=planted, name=judgements_name(str(cfg.judge.name)),
                       tag_prefix="judge-probe", budget=budget)


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with exits_with_code():  # 2 bad input, 3 stopped, 4 budget (harness.failures)
        s = run_probe(cfg)
        if s["failed"]:
            print(f"{s['failed']} probe judgements failed: run the same command again", file=sys.stderr)
            sys.exit(STOPPED)


if __name__ == "__main__":
    main()
