"""An outside audit of branch lo's claims (_notes/claims-lo.md): each test a way a claim was found to break."""

from __future__ import annotations

import json

import pytest

from harness.records import privacy
from tests import cli
from tests.test_publish import loopback_hub, published  # noqa: F401  (fixtures)

HOOK = "https://hooks.slack.com/services/T0A1B2C3D/B0A1B2C3D/abcdefghijklmnopqrstuvwx"


@pytest.mark.parametrize("wrap", ["plain", "json-escaped"])
def test_a_webhook_url_written_with_escaped_slashes_loses_its_host_and_secret(wrap):
    """JSON may write "/" as "\\/" (PHP's json_encode, a tool's output read back as text): the URL is the same URL,
    so its host and the secret in its path go as they do when written plainly, and the last scan finds it if
    left behind."""
    url = HOOK if wrap == "plain" else HOOK.replace("/", "\\/")
    text = privacy.Private().redact(f'{{"hook": "{url}"}}')
    assert "hooks.slack.com" not in text and "abcdefghijklmnopqrstuvwx" not in text and "T0A1B2C3D" not in text
    assert json.loads(text)["hook"] == "https://<host>/services/<key>"
    assert privacy.leaks(text) == []
    assert privacy.leaks(f'{{"hook": "{url}"}}') != []  # unredacted, it is refused
    left = "https://<host>/services/T0A1B2C3D/B0A1B2C3D/abcdefgh"  # the host alone replaced
    left = left if wrap == "plain" else left.replace("/", "\\/")
    assert any("a secret in its path" in x for x in privacy.leaks(left))


def test_an_interval_rules_n_for_80_below_the_cap_is_the_simulated_rules_not_the_normal_formulas():
    """Below SIM_N_CAP questions the n for 80% is searched on the simulated rule: it reaches 80% there. A
    normal-formula n of 2,609 that the simulated rule does not reach (its search doubling past the cap) was
    returned as it was; the search now stops at the cap, and an n beyond it is at least the cap."""
    from analysis import power as W
    from tests.test_trust_checks import comparison

    c = comparison("accuracy_above", 100, 3.0, 0.3, 0.0)
    assert c.n80 < W.SIM_N_CAP  # the normal formula's n is below the cap: the simulation decides
    n = c.n80_rule
    boot = W.BOOT // 2 if not c.accuracy else W.BOOT  # what assess and simulated_n simulate with
    if n <= W.SIM_N_CAP:
        assert W.simulate(c, n=int(n), boot=boot).power >= 0.8
        assert W.simulate(c, n=int(n) - 1, boot=boot).power < 0.8
    else:
        assert W.simulate(c, n=W.SIM_N_CAP, boot=boot).power < 0.8


def test_agreement_on_a_personal_stage_without_a_second_judge_is_refused_for_its_study_first(tmp_path):
    """`make agreement STAGE=personal` without JUDGE2: the stage is refused for its study (exit 2, the rubric and its
    validation named), not told to add a second judge that would then be refused."""
    import sys

    res = cli.run([sys.executable, "-m", "judge.agreement", "stage=personal_smoke", f"runs_dir={tmp_path}/runs",
                          f"cache_dir={tmp_path}/cache", "judge=vllm", "judge.base_url=http://127.0.0.1:9/v1",
                          "judge.model=j"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 2, res.stderr[-1500:]
    assert "rubric" in res.stderr and "analysis.personal.validation" in res.stderr, res.stderr
    assert "no second judge" not in res.stderr


def test_a_card_whose_replaced_block_counts_with_true_instead_of_a_number_is_refused(published, tmp_path, capsys):
    """`replaced` holds counts: a card rewritten whole to say `true` (a bool passes as an int) for each kind is no
    count of what was replaced, and is refused like any other edit of the block."""
    import shutil

    import pyarrow.parquet as pq

    from analysis import publish as P
    from tests.test_publish_safety import _every_reader_refuses

    ds = tmp_path / "ds"
    shutil.copytree(published["out"], ds)
    meta = P.read_card(ds)
    assert meta["replaced"]["endpoint urls"] >= 1
    meta["replaced"] = {k: True for k in meta["replaced"]}
    counts = {t: pq.read_metadata(ds / t / "train.parquet").num_rows for t in meta["tables"]}
    (ds / "README.md").write_text(P.card_text(meta, counts))
    _every_reader_refuses(ds, tmp_path, capsys, "the card's replaced block")


def test_a_dry_sweep_spelt_dry_run_yes_writes_no_sweep_file_under_runs(tmp_path):
    """The stage reads `dry_run=yes` as a dry run (any true value); hydra.sweep.dir must read it the same way, or
    the dry sweep leaves multirun.yaml and its job folders under runs/.sweeps."""
    import sys

    res = cli.run([sys.executable, "-m", "harness.run", "-m", "stage=smoke", "seed=0,1", "dry_run=yes",
                          f"runs_dir={tmp_path}/runs", f"cache_dir={tmp_path}/cache",
                          "model.base_url=http://127.0.0.1:9/v1"], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.count("dry run: nothing started") == 2  # both jobs took it for a dry run
    assert not (tmp_path / "runs").exists() or list((tmp_path / "runs").rglob("*")) == []


def test_a_dry_run_with_another_data_seed_prints_that_seeds_data_not_seed_0s_cached_file(tmp_path):
    """`data.seed=1` generates seed 1's questions: with seed 0's file already in the cache (the first smoke run's),
    the dry run must print seed 1's sha256, the one its first real run writes, not reuse seed 0's file (the
    generated files' paths named seed 0 whatever data.seed said)."""
    import hashlib
    import sys

    from harness.data import synth

    data, size = "synth_tiny", "tiny"
    synth.write(tmp_path / "cache" / "data", 0, size, path=tmp_path / "cache" / "data" / synth.file_name(size, 0))
    res = cli.run([sys.executable, "-m", "harness.run", "stage=smoke", f"data={data}", "data.seed=1",
                          "dry_run=true", f"runs_dir={tmp_path}/runs", f"cache_dir={tmp_path}/cache",
                          "model.base_url=http://127.0.0.1:9/v1"], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    line = next(x for x in res.stdout.splitlines() if x.startswith("data "))
    assert f"sha256 {hashlib.sha256(synth.dumps(1, size)).hexdigest()}" in line, line
    assert synth.file_name(size, 1) in line, line


@pytest.mark.parametrize("text,kept", [
    ("post it to hooks.slack.com/services/T0A1B2C3D/B0A1B2C3D/abcdefghijklmnopqrstuvwx now",
     "post it to <host>/services/<key> now"),
    ("(discord.com/api/webhooks/123456789012345678/AbCdEf-GhIjKl_MnOpQrStUvWx)", "(<host>/api/webhooks/<key>)"),
    ("see example.com/recipes/chocolate-cake", "see example.com/recipes/chocolate-cake"),  # no secret: as it was
    ("watch www.youtube.com/watch?v=IIHZUR67JsY now", "watch <host>/watch now"),  # a query goes, as from a URL
    ("the module analysis.personal/validation", "the module analysis.personal/validation"),
    ("mail bob@example.com/T0A1B2C3D", "mail bob@example.com/T0A1B2C3D")])  # not a bare host: left to the key rules
def test_a_webhook_url_written_without_its_scheme_loses_its_host_and_secret(text, kept):
    """A webhook pasted without "https://" is the same secret: a bare host/path whose path holds a secret-looking
    segment goes as the URL would (`<host>/services/<key>`); a bare host with a plain-word path is left alone, and
    the last scan finds one left behind."""
    assert privacy.Private().redact(text) == kept
    assert privacy.leaks(kept) == []
    assert (privacy.leaks(text) != []) == (kept != text)


@pytest.mark.parametrize("url", [HOOK, "https://example.com/recipes/chocolate-cake", "wss://x.example/a?token=zz",
                                 HOOK.replace("/", "\\/")])
def test_redacting_a_redacted_text_changes_nothing(url):
    """A published dataset's text published again (its folders rebuilt and sent along with new ones) keeps its
    placeholders: `https://<host>/...` is no URL with a host to take away (it lost its "//": `https:<host>/...`)."""
    once = privacy.Private().redact(f"see {url} now")
    p = privacy.Private()
    assert p.redact(once) == once
    assert p.summary()["other urls"] == 0


def test_a_dry_backend_study_refuses_the_papers_preset_on_generated_data_whether_or_not_it_is_cached(tmp_path):
    """`stage=backends preset=paper data=synth_tiny dry_run=true`: the real run refuses the generated data (it is not
    the paper's), so the dry run says so too, on a fresh cache as on one that holds the file, writing nothing."""
    import sys

    def dry():
        return cli.run([sys.executable, "-m", "harness.run", "stage=backends", "preset=paper", "data=synth_tiny",
                               "dry_run=true", f"runs_dir={tmp_path}/runs", f"cache_dir={tmp_path}/cache"],
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)

    fresh = dry()
    assert fresh.returncode == 3, fresh.stdout[-1500:] + fresh.stderr[-1500:]
    assert "generated data; allow_deviation=[data] accepts it" in fresh.stdout + fresh.stderr
    assert not (tmp_path / "cache" / "data").exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("text", ["see https://example.com/recipes/chocolate-cake.",
                                  "(https://docs.python.org/3/library/json.html)", "at https://example.com/a/b, then",
                                  "see example.com/a/T0A1B2C3D."])
def test_a_redacted_url_ending_a_sentence_is_not_taken_for_a_secret_by_the_last_scan(text):
    """A URL followed by a full stop, a comma or a closing bracket keeps that mark after it (it is no part of the
    URL); the last scan must read the path as the redaction did, or every such sentence refuses the dataset."""
    redacted = privacy.Private().redact(text)
    assert privacy.leaks(redacted) == [], redacted
