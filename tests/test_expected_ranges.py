"""The ranges a stage prints as expected on the embedded defaults (conf/expected/<stage>.yaml) are computed
from judged run records by harness.run.expected, and the file in the repository is what that module
writes. Checked against the records and judgements read here directly, and the interval against
statsmodels' Wilson interval."""

from __future__ import annotations

import hashlib
import json
import math
import sys
from pathlib import Path

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from statsmodels.stats.proportion import proportion_confint

from harness.run import expected
from tests import cli
from tests.fake_model import FakeModel

REPO = Path(__file__).resolve().parents[1]


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 400).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_the_accuracy_interval_is_wilsons(kn):
    k, n = kn
    lo, hi = expected.wilson(k, n)
    ref_lo, ref_hi = proportion_confint(k, n, alpha=0.05, method="wilson")
    assert math.isclose(lo, ref_lo, abs_tol=1e-6) and math.isclose(hi, ref_hi, abs_tol=1e-6)
    assert 0.0 <= lo <= k / n <= hi <= 1.0


def _judge_half(req):
    """Agents answer; the judge says yes to about half of the answers, decided by the prompt's hash."""
    text = json.dumps(req["messages"])
    if "Reply with yes or no only" in text:
        return {"role": "assistant", "content": "yes" if hashlib.sha256(text.encode()).digest()[0] % 2 else "no"}
    return {"role": "assistant", "content": "I don't know."}


def _stage(tmp_path, fake, seed):
    out = cli.run([sys.executable, "-m", "harness.run", "stage=smoke", "model=vllm",
                   f"model.base_url={fake.base_url}", "model.api_key_env=null", "judge=vllm",
                   f"judge.base_url={fake.base_url}", "samples.smoke.limit=2",
                   "stage.groups=[{sample:smoke,conditions:[none,full]}]", f"runs_dir={tmp_path}/runs",
                   f"cache_dir={cli.shared_cache(tmp_path)}", f"seed={seed}", f"stage.label=smoke_seed{seed}"],
                  cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return tmp_path / "runs" / "smoke" / f"smoke_seed{seed}"


def _by_hand(folders):
    """condition -> (runs, correct, per-run tokens), read from the files without the harness."""
    got: dict[str, tuple[int, int, list[int]]] = {}
    for f in folders:
        labels = {}
        for line in (f / "judgements" / "vllm.jsonl").read_text().splitlines():
            j = json.loads(line)
            if j["kind"] == "correct":
                labels[j["run_id"]] = j["label"]
        for p in sorted((f / "records").glob("*.json")):
            r = json.loads(p.read_text())
            if r["status"] != "ok":  # a failed run is left out of the ranges
                continue
            n, k, toks = got.get(r["condition"], (0, 0, []))
            got[r["condition"]] = (n + 1, k + (labels.get(r["run_id"]) is True),
                                   toks + [r["tokens"]["prompt"] + r["tokens"]["output"]])
    return got


def test_the_ranges_are_measured_from_the_judged_records(tmp_path):
    with FakeModel(script=_judge_half) as fake:
        folders = [_stage(tmp_path, fake, seed) for seed in (0, 1)]
    # one run of `full` recorded failed (as a run out of retries is): left out of its range, and counted
    path = sorted((folders[1] / "records").glob("full.*.json"))[0]
    rec = json.loads(path.read_text())
    path.write_text(json.dumps({**rec, "status": "failed", "failure_reason": "retries", "answer": "",
                                "error": "RateLimitError: Error code: 429"}))
    got = expected.measure(folders)
    assert got["conditions"]["full"]["failed_left_out"] == 1 and got["conditions"]["none"]["failed_left_out"] == 0
    want = _by_hand(folders)
    assert set(got["conditions"]) == set(want) == {"none", "full"}
    assert sum(k for _, k, _ in want.values()) not in (0, sum(n for n, _, _ in want.values()))  # mixed labels
    for cond, (n, k, toks) in want.items():
        row = got["conditions"][cond]
        lo, hi = proportion_confint(k, n, alpha=0.05, method="wilson")
        assert (row["runs"], row["correct"]) == (n, k)
        assert math.isclose(row["accuracy"][0], lo, abs_tol=0.006) and math.isclose(row["accuracy"][1], hi, abs_tol=0.006)
        assert row["tokens_observed"] == [min(toks), max(toks)]
        assert row["tokens_per_run"] == [math.floor(min(toks) * 0.75), math.ceil(max(toks) * 1.25)]
    assert got["measured"]["seeds"] == [0, 1] and got["stage"] == "smoke"
    assert got["applies_to"] == {"model": "vllm", "encoder": "minilm", "data": "synth"}
    # the file's text is what the stage's summary reads back
    assert {k: v for k, v in yaml.safe_load(expected.render(got)).items()} == \
        {k: got[k] for k in ("applies_to", "measured", "method", "conditions")}


def test_a_folder_without_judgements_is_refused_by_name(tmp_path, capsys):
    folder = tmp_path / "runs" / "smoke" / "smoke"
    (folder / "records").mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump({"judge": {"name": "local"}, "model": {"name": "local"},
                                                        "encoder": {"name": "minilm"}, "data": {"kind": "synth"}}))
    assert expected.main([str(folder)]) == 2
    assert f"{folder}: no judgements of local" in capsys.readouterr().err


def test_the_repository_file_is_the_measured_one():
    """conf/expected/smoke.yaml was written by harness.run.expected: measured, with a range per smoke condition."""
    exp = yaml.safe_load((REPO / "conf" / "expected" / "smoke.yaml").read_text())
    stage = yaml.safe_load((REPO / "conf" / "stage" / "smoke.yaml").read_text())
    keys = [k for d in stage["defaults"] for k in (d if isinstance(d, dict) else {d: None})]
    conds = {k.split("@stage.conditions.")[1] for k in keys if "@stage.conditions." in k}
    assert len(conds) == 6
    assert exp["measured"]["seeds"] and exp["measured"]["model"] and exp["measured"]["encoder"]
    assert set(exp["conditions"]) == conds
    for row in exp["conditions"].values():
        lo, hi = expected.wilson(row["correct"], row["runs"])
        assert row["accuracy"] == [round(lo, 2), round(hi, 2)]
        assert row["tokens_per_run"][0] <= row["tokens_observed"][0] <= row["tokens_observed"][1] <= row["tokens_per_run"][1]


def test_each_condition_s_own_figures_are_set_beside_its_range_and_a_figure_outside_is_named():
    """expected_lines against the shipped file, fed by `figures` from records: a failed run is left out (as the
    ranges were measured), a figure inside both ranges is 'within', one outside is named with the decimal that
    puts it outside (56.2% beside 3%-56%), an unjudged accuracy is never 'within', a smaller sample than a measured
    seed is told its accuracy may fall outside by chance, and a condition whose runs all failed has nothing to set
    beside its range."""
    from types import SimpleNamespace as NS

    from hydra import compose, initialize_config_dir

    exp = yaml.safe_load((REPO / "conf" / "expected" / "smoke.yaml").read_text())
    rows = exp["conditions"]
    per_seed = rows["none"]["runs"] / len(exp["measured"]["seeds"])

    def run(cond, i, status, tokens):
        return NS(condition=cond, run_id=f"{cond}.{i}", status=status, tokens=NS(prompt=tokens, output=0))

    mid = (rows["none"]["tokens_per_run"][0] + rows["none"]["tokens_per_run"][1]) // 2
    full_hi = rows["full"]["accuracy"][1]
    k = next(k for k in range(1, 200) if full_hi < (k / 16) and round(k / 16, 2) <= full_hi + 0.01)  # just above
    records = ([run("none", i, "ok", mid) for i in range(int(per_seed))]
               + [run("none", 99, "failed", 10**9)]  # left out: its tokens would put the mean outside
               + [run("full", i, "ok", rows["full"]["tokens_per_run"][0]) for i in range(16)]
               + [run("prefetch", 0, "failed", 10)]
               + [run("tool_bm25", 0, "ok", 10)])
    labels = {f"full.{i}": i < k for i in range(16)} | {"none.99": True, "tool_bm25.0": True}
    got = expected.figures(records, labels)
    assert got["none"] == (int(per_seed), 0.0, mid) and got["prefetch"] == (0, None, 0.0)
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["stage=smoke"])
    by = {line.split()[0]: line for line in expected.expected_lines(cfg, got)[1:]}
    assert by["none"].endswith(f"; this run accuracy 0.0%, tokens/run {mid:,.1f}: within"), by["none"]
    assert by["prefetch"].endswith("no finished run to set beside it"), by["prefetch"]
    assert f"OUTSIDE: accuracy {k / 16:.1%}" in by["full"] and "likely by chance" not in by["full"], by["full"]
    assert "OUTSIDE: accuracy 100.0%, tokens/run 10.0 (1 finished run(s), fewer than a measured seed's " \
           f"{per_seed:g}: an accuracy outside is likely by chance)" in by["tool_bm25"], by["tool_bm25"]
    unjudged = expected.expected_lines(cfg, expected.figures(records, None))
    line = next(x for x in unjudged if x.startswith("  none "))
    assert line.endswith("accuracy not judged, tokens/run " f"{mid:,.1f}: tokens within"), line
