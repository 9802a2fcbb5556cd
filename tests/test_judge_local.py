"""The real local model as judge on hand-written answers (slow: ~40 prompt tokens/s)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.records.ledger import read_ledger
from judge.answer_check import load_judgements
from tests import cli
from tests.analysis_fixtures import answered_record

# (qtype, qid suffix, variant, question, gold, answer, expected {kind: label})
CASES = [
    ("single-session-user", "", "", "What degree did I graduate with?", "Business Administration",
     "You graduated with a degree in Business Administration.", {"correct": True}),
    ("single-session-user", "", "", "What is the name of my cat?", "Luna",
     "Your cat is called Max.", {"correct": False}),
    ("single-session-assistant", "_abs", "", "What was the name of the band I saw in Lisbon?",
     "The user never mentioned seeing a band in Lisbon; they only talked about a concert in Porto.",
     "I don't have any information about a band you saw in Lisbon.", {"correct": True}),
    ("temporal-reasoning", "", "", "How many days passed between my dentist appointment and my job interview?",
     "18 days", "19 days passed between the two.", {"correct": True}),
    ("temporal-reasoning", "", "", "How many days did my trip to Kyoto last?", "6 days",
     "Your trip to Kyoto lasted three months.", {"correct": False}),
    ("knowledge-update", "", "", "Where do I work now?", "Atlas Foods",
     "You used to work at Cobalt Health, but you now work at Atlas Foods.", {"correct": True}),
    ("single-session-user", "", "private", "Which city did my sister move to?", "Toronto",
     "I'm sorry, I can't find that information; it is not available to me.", {"correct": True, "leak": False}),
]


def write_records(root: Path) -> dict[str, dict]:
    rec_dir = root / "runs" / "smoke" / "smoke" / "records"
    rec_dir.mkdir(parents=True)
    out = {}
    for i, (qtype, suffix, variant, question, gold, answer, exp) in enumerate(CASES):
        qid = f"hand{i}{suffix}"
        run_id = f"handwritten.{variant or 'lme'}.{qid}.r0"
        rec = answered_record(run_id, qid, qtype, variant, question, gold, answer)
        (rec_dir / f"{run_id}.json").write_text(json.dumps(rec))
        out[run_id] = exp
    return out


@pytest.mark.model
def test_local_model_judges_hand_written_answers(tmp_path):
    expected = write_records(tmp_path)
    res = cli.run([sys.executable, "-m", "judge.run", "stage=smoke", "judge=local", f"runs_dir={tmp_path}/runs",
                   f"cache_dir={tmp_path}/cache"], capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr
    got = load_judgements(tmp_path / "runs" / "smoke" / "smoke", "local")
    want = {(rid, kind): label for rid, exp in expected.items() for kind, label in exp.items()}
    assert set(got) == set(want)
    right = sorted(k for k, v in got.items() if v["label"] == want[k])
    wrong = sorted(k for k in want if k not in right)
    print(f"\nlocal judge: {len(right)}/{len(want)} as expected; wrong: "
          + "; ".join(f"{k} reply {got[k]['reply']!r}" for k in wrong))
    assert all(v["judge"]["model"] == "qwen2.5-coder-1.5b-instruct-q4_k_m" for v in got.values())
    assert all(v["status"] in ("ok", "unparsable") for v in got.values())
    ledger = read_ledger(tmp_path / "runs" / "smoke" / "smoke" / "ledger.jsonl")
    assert sum(e.get("role") == "judge" and e.get("event") == "response" and e["status"] == 200
               for e in ledger) == len(want)
    assert 2 * len(right) > len(want), f"only {len(right)} of {len(want)} judged as expected"
