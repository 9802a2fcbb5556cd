"""The end of a stage tells a newcomer what happened and what to do: per condition runs, accuracy and
tokens, the range the embedded defaults give (conf/expected/<stage>.yaml, or that none is measured
yet; on another model it says the range does not apply), what to run next, and that the same command
resumes. Run as `make run` runs it, against the scripted upstream."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

from tests import cli
from tests.fake_model import FakeModel

REPO = Path(__file__).resolve().parents[1]


def _smoke(tmp_path, fake, *extra):
    return cli.run([sys.executable, "-m", "harness.run", "stage=smoke", "model=vllm",
                    f"model.base_url={fake.base_url}", "model.api_key_env=null", "judge=vllm",
                    f"judge.base_url={fake.base_url}", "samples.smoke.limit=1",
                    "stage.groups=[{sample:smoke,conditions:[none,full]}]", f"runs_dir={tmp_path}/runs",
                    f"cache_dir={cli.shared_cache(tmp_path)}", *extra], cwd=REPO, capture_output=True, text=True,
                   timeout=600)


def test_a_smoke_stage_ends_with_a_summary_a_newcomer_can_judge(tmp_path):
    with FakeModel() as fake:
        first = _smoke(tmp_path, fake)
        assert first.returncode == 0, first.stderr[-3000:]
        again = _smoke(tmp_path, fake)
    assert again.returncode == 0, again.stderr[-3000:]
    err = first.stderr
    table = err[err.index("condition   "):]
    assert all(f"\n{c} " in table for c in ("none", "full")) and "accuracy judged by vllm" in table, table
    exp = yaml.safe_load((REPO / "conf" / "expected" / "smoke.yaml").read_text())  # measured (test_expected_ranges)
    seeds = ",".join(map(str, exp["measured"]["seeds"]))
    assert f"expected on the embedded defaults (conf/expected/smoke.yaml, measured {exp['measured']['date']}, " \
        f"seeds {seeds})" in table
    assert "they do not apply here: model vllm (expected for local)" in table  # a fake, not the local model
    for c in ("none", "full"):  # the ranges printed are the file's
        row = exp["conditions"][c]
        (lo, hi), (tlo, thi) = row["accuracy"], row["tokens_per_run"]
        assert f"  {c:<22} accuracy {lo:.0%}-{hi:.0%}, tokens/run {tlo:,}-{thi:,} " \
            f"({row['correct']} of {row['runs']} measured runs correct)" in table
    for c in ("none", "full"):  # this stage's own figures (the table above) set beside each range, read back here
        runs, tokens, acc = next(line.split()[2:3] + line.split()[5:7] for line in table.splitlines()
                                 if line.startswith(f"{c} "))
        tokens, acc = float(tokens.rstrip("~").replace(",", "")), float(acc.rstrip("%*")) / 100
        row = exp["conditions"][c]
        line = next(x for x in table.splitlines() if x.startswith(f"  {c:<22} accuracy"))
        m = re.search(r"; this run accuracy ([\d.]+)%, tokens/run ([\d,.]+): (.*)$", line)
        assert m, line
        acc_v, tok_v = float(m[1]) / 100, float(m[2].replace(",", ""))
        assert abs(acc_v - acc) <= 0.005 and abs(tok_v - tokens) <= 0.5, (line, acc, tokens)  # the table's own
        outside = ([f"accuracy {m[1]}%"] if not row["accuracy"][0] <= acc_v <= row["accuracy"][1] else []) + (
            [f"tokens/run {m[2]}"] if not row["tokens_per_run"][0] <= tok_v <= row["tokens_per_run"][1] else [])
        per_seed = row["runs"] / len(exp["measured"]["seeds"])
        assert m[3] == (f"OUTSIDE: {', '.join(outside)}" + (
            f" ({runs} finished run(s), fewer than a measured seed's {per_seed:g}: an accuracy outside is likely by "
            "chance)" if int(runs) < per_seed else "") if outside else "within"), (line, outside)
    assert "  prefetch " not in table[table.index("expected on the embedded"):]  # only the conditions the stage ran
    assert f"{tmp_path}/runs/smoke/smoke: 2 of 2 planned runs recorded" in err
    assert "the same command again runs nothing more" in err and "next: make analyze" in err
    assert "2 runs planned, 2 recorded, 0 to run" in again.stderr  # the same command: nothing run twice
