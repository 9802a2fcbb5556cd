"""Publishing stage folders as a Hub-layout dataset (analysis/publish.py) and reading them back.

Two hand-written stage folders (tests/analysis_fixtures.py: a LongMemEval stage and an Org
stage with a private run, each with transcripts, system prompts, a fidelity manifest, an
endpoint URL, a key and local paths in its files) are published once. The dataset must load
with `datasets.load_dataset`, re-analyse to the same bytes as the folders, export to Inspect,
hold nothing private, refuse a changed table, upload through huggingface_hub to a loopback
Hub, and give a results page that Chromium shows with a row and a link.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from analysis import publish as P
from analysis import run as A
from harness.cli import publish as publish_cli
from tests.analysis_fixtures import Stage, sha256_file

URL = "http://127.0.0.1:9/v1"
KEY = "sk-test-0123456789abcdef"
FIDELITY = {"preset": None, "accepted": [], "allow_deviation": [], "rows": [
    {"key": "reader_model", "setting": "reader model", "paper": "deepseek-flash", "stage": "test-model",
     "status": "differs", "detail": "", "pool": "test-model"},
    {"key": "seed", "setting": "sample seed", "paper": "0", "stage": "0", "status": "same", "detail": "", "pool": "0"}]}


def _transcript(question: str, sha: str) -> dict:
    return {"role": "agent", "system_sha256": sha, "tools": [], "messages": [
        {"role": "user", "content": question, "tool_calls": None, "tool_call_id": None, "tool": None, "call": None,
         "asked": None}]}


def _with_prompts(stage: Stage, prompts: dict[str, str]) -> Path:
    path = stage.write()
    (path / "prompts").mkdir()
    for text in prompts.values():
        (path / "prompts" / f"{hashlib.sha256(text.encode()).hexdigest()}.txt").write_text(text)
    return path


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    root = tmp_path_factory.mktemp("publish")
    data_file = root / "cache" / "data" / "synth_tiny.json"
    data_file.parent.mkdir(parents=True)
    data_file.write_text(json.dumps([{"question_id": "q1"}]))
    data = {"path": str(data_file), "sha256": sha256_file(data_file), "kind": "synth"}
    extra = {"model": {"name": "vllm", "base_url": URL, "api_key": KEY}}
    public, private = "You answer from memory.", "You answer from memory; private memories below: the code is 4411."
    sha = {t: hashlib.sha256(t.encode()).hexdigest() for t in (public, private)}

    lme = Stage(root / "runs", "smoke", data=data, fidelity=FIDELITY, config_extra=extra)
    for cond, qid, ok, prompt in [("none", "q1", True, 900), ("none", "q2", False, 1100), ("none", "q3", True, 1000),
                                  ("none", "q4", False, 1000), ("tool_bm25", "q1", True, 3000),
                                  ("tool_bm25", "q2", True, 2500), ("tool_bm25", "q3", True, 2000),
                                  ("tool_bm25", "q4", False, 1500)]:
        r = lme.add(cond, qid, correct=ok, prompt=prompt, tool_calls=1 if cond != "none" else 0,
                    tools=[{"sessions": ["s1"], "chars": 12}] if cond != "none" else None)
        r["transcript"] = _transcript(r["question"], sha[public])
    lme.add("none", "q5", status="failed")  # counts wrong, has no transcript
    org = Stage(root / "runs", "smoke_org", data=data, fidelity=FIDELITY, config_extra=extra)
    for variant in ("public", "private"):
        for qid, ok in (("q1", True), ("q2", False)):
            r = org.add("shared", qid, variant=variant, correct=ok, leak=False if variant == "private" else None)
            r["transcript"] = _transcript(r["question"], sha[public if variant == "public" else private])
    folders = [_with_prompts(lme, {"p": public}), _with_prompts(org, {"p": public, "q": private})]
    with open(folders[0] / "ledger.jsonl", "a") as f:  # a driver killed mid-line: a data-quality row in the results
        f.write('{"event": "request", "tag": "none.lme.q6')
    out = root / "dataset"
    said = io.StringIO()
    with contextlib.redirect_stdout(said):  # what `make publish RUNS=a,b OUT=DIR` runs
        assert publish_cli.main([f"runs={folders[0]},{folders[1]}", f"out={out}"]) == 0
    return {"root": root, "folders": folders, "out": out, "said": said.getvalue(), "private": private}


def _all_text(out: Path) -> str:
    """Every value of every table, and the card, as text (parquet pages are compressed)."""
    parts = [(out / "README.md").read_text()]
    for p in sorted(out.glob("*/train.parquet")):
        parts.append(json.dumps(pq.read_table(p).to_pylist(), default=str))
    return "\n".join(parts)


def test_every_table_loads_with_datasets_and_the_card_holds_the_manifest(published, tmp_path):
    import datasets

    out = published["out"]
    card = yaml.safe_load((out / "README.md").read_text().split("---\n")[1])
    names = [c["config_name"] for c in card["configs"]]
    assert names == ["runs", "model_calls", "tool_calls", "transcripts", "judgements", "ledger", "prompts", "files"]
    loaded = {n: datasets.load_dataset(str(out), n, split="train", cache_dir=str(tmp_path / "hf")) for n in names}
    assert len(loaded["runs"]) == 9 + 4
    assert sorted(loaded["runs"].unique("condition")) == ["none", "shared", "tool_bm25"]
    assert loaded["runs"].features["wall_s"].dtype == "float64" and loaded["runs"].features["attempt"].dtype == "int64"
    assert len(loaded["tool_calls"]) == 4 and loaded["tool_calls"][0]["sessions"] == '["s1"]'
    assert len(loaded["transcripts"]) == 8 + 2  # the two private runs' transcripts are left out
    meta = card["memspace"]
    st = meta["stages"]["smoke/smoke"]
    assert st["kind"] == "agents" and st["fidelity"]["rows"][0]["status"] == "differs"
    assert st["data"]["sha256"] == sha256_file(Path(published["folders"][0]) / ".." / ".." / ".." / "cache" / "data"
                                               / "synth_tiny.json")
    assert meta["totals"]["smoke/smoke"]["runs"] == 9 and meta["totals"]["smoke/smoke"]["failed"] == 1
    assert meta["prereg"]["smoke/smoke"]["path"] == "conf/prereg/hypotheses.yaml" and card["license"] == "mit"
    assert meta["tables"]["ledger"] == hashlib.sha256((out / "ledger" / "train.parquet").read_bytes()).hexdigest()


def test_reanalysis_of_the_dataset_is_byte_for_byte_and_it_exports_to_inspect(published, tmp_path):
    from tests.test_analysis import prereg_file

    common = ["replay=none", f"prereg={prereg_file(tmp_path)}", "lenient=true"]
    # published with the private runs' text (the publisher asked for it): the same bytes as the folders
    with contextlib.redirect_stdout(io.StringIO()):
        assert publish_cli.main([f"runs={','.join(map(str, published['folders']))}", f"out={tmp_path / 'all'}",
                                 "private_transcripts=true"]) == 0
    assert A.main([f"runs={','.join(map(str, published['folders']))}", f"out={tmp_path / 'a'}", *common]) == 0
    assert A.main([f"runs={tmp_path / 'all'}", f"out={tmp_path / 'b'}", *common]) == 0
    files_a = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(tmp_path / "b") for p in (tmp_path / "b").rglob("*") if p.is_file())
    assert files_a == files_b and len(files_a) > 20
    differ = [str(f) for f in files_a if (tmp_path / "a" / f).read_bytes() != (tmp_path / "b" / f).read_bytes()]
    assert differ == []
    assert "smoke/smoke/ledger.jsonl,19,torn last line" in (tmp_path / "b" / "data_quality.csv").read_text()
    assert "runs=smoke/smoke,smoke_org/smoke_org" in (tmp_path / "b" / "report.md").read_text()
    # published by default, the private runs' golds and answers stayed home: their literal check is not known,
    # and nothing else of the analysis differs
    assert A.main([f"runs={published['out']}", f"out={tmp_path / 'c'}", *common]) == 0
    import pandas as pd

    a, c = pd.read_csv(tmp_path / "a" / "runs.csv"), pd.read_csv(tmp_path / "c" / "runs.csv")
    private = c["variant"] == "private"
    assert c.loc[private, "literal"].isna().all() and a.loc[private, "literal"].notna().all()
    assert a.drop(columns="literal").equals(c.drop(columns="literal"))
    assert (a.loc[~private, "literal"] == c.loc[~private, "literal"]).all()

    from inspect_ai.log import read_eval_log

    from analysis import export_inspect

    assert export_inspect.main([f"runs={published['out']}", f"out={tmp_path / 'logs'}"]) == 0
    logs = {p.name.split("_")[1]: read_eval_log(str(p)) for p in (tmp_path / "logs").glob("*.eval")}
    assert len(logs["tool-bm25"].samples) == 4 and len(logs["none"].samples) == 5


def test_nothing_private_leaves_and_the_card_says_what_was_left_out(published, tmp_path):
    text = _all_text(published["out"])
    root = str(published["root"])
    assert URL not in text and KEY not in text and root not in text and "127.0.0.1" not in text
    assert published["private"] not in text  # the system prompt only the private runs used
    assert "<local path>/synth_tiny.json" in text and "<endpoint url>" in text
    said = published["said"]
    assert said.index("what leaves this machine") < said.index("wrote ")
    assert "the text of 2 run(s) whose context held a private agent's memory unit" in said
    assert "2 transcript(s)" in said
    assert "the text of 2 run(s) whose context held a private agent" in (published["out"] / "README.md").read_text()
    # with the flag they go along; a dry run lists and writes nothing
    ex = P.publish(published["folders"], tmp_path / "all", private_transcripts=True, say=lambda s: None)
    assert len(ex.rows["transcripts"]) == 12 and ex.private_transcripts == 0
    P.publish(published["folders"], tmp_path / "none", dry_run=True, say=lambda s: None)
    assert not (tmp_path / "none").exists()


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize("folder", ["smoke/smoke", "smoke_org/smoke_org"])  # its ledger kept as text (a torn line), rebuilt
def test_a_changed_table_is_refused_naming_it(published, tmp_path, capsys, folder):
    bad = _copy(published["out"], tmp_path / "bad")
    t = pq.read_table(bad / "ledger" / "train.parquet").to_pylist()
    i = next(i for i, r in enumerate(t) if r["event"] == "response" and r["folder"] == folder)
    t[i]["prompt"] += 1  # one response's prompt tokens
    pq.write_table(pa.Table.from_pylist(t, schema=pq.read_schema(bad / "ledger" / "train.parquet")),
                   bad / "ledger" / "train.parquet")
    assert A.main([f"runs={bad}", f"out={tmp_path / 'r'}", "replay=none"]) == 2
    err = capsys.readouterr().err
    assert "table 'ledger' does not match the card's sha256" in err and not (tmp_path / "r").exists()
    # a card edited to the changed table's hash: the rebuilt file's own hash (table `files`) refuses it, naming both
    card = (bad / "README.md").read_text()
    old = P.read_card(bad)["tables"]["ledger"]
    (bad / "README.md").write_text(card.replace(old, P.sha256((bad / "ledger" / "train.parquet").read_bytes())))
    with pytest.raises(P.PublishError, match=rf"{folder}/ledger.jsonl: (rebuilt from )?table 'ledger'.* does not match"):
        P.rebuild(bad, tmp_path / "rebuilt")


def test_bad_arguments_exit_2(published, tmp_path, capsys):
    assert publish_cli.main([f"runs={published['folders'][0]}"]) == 2
    assert publish_cli.main([f"runs={tmp_path / 'nothing'}", f"out={tmp_path / 'x'}"]) == 2
    assert publish_cli.main([f"runs={published['folders'][0]}", f"out={published['folders'][1]}"]) == 2  # not ours
    err = capsys.readouterr().err
    assert "out=DIR is required" in err and "no such folder" in err and "holds no dataset card" in err


def test_a_personalization_stage_is_refused_by_kind(published, tmp_path):
    folder = _copy(published["folders"][0], tmp_path / "personal" / "p")
    info = json.loads((folder / "stage.json").read_text())
    (folder / "stage.json").write_text(json.dumps({**info, "kind": "personal"}))
    with pytest.raises(P.PublishError, match="a 'personal' stage; only agents stages"):
        P.collect([folder])


@pytest.fixture
def loopback_hub(monkeypatch):
    """huggingface_hub's own client, pointed at a loopback Hub (tests/hub_server.py)."""
    from tests.hub_server import Hub, serve

    monkeypatch.setenv("HF_TOKEN", "hf_test")
    # an encoder loaded earlier in the same test process sets HF_HUB_OFFLINE=1, and the client reads it at import
    import huggingface_hub.constants as hc

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", False)
    hub = Hub()
    srv = serve(hub)
    yield hub
    srv.shutdown()


def test_push_uploads_every_file_to_a_private_dataset_repository(published, tmp_path, loopback_hub, capsys):
    out = tmp_path / "ds"
    # the whole runs root: every stage folder below it, as a sweep family would be
    code = publish_cli.main([f"runs={published['root'] / 'runs'}", f"out={out}", "push=me/results",
                             f"endpoint={loopback_hub.url}"])
    said = capsys.readouterr().out
    assert code == 0 and said.rstrip().endswith("/commit/" + "a" * 40)
    assert "(private, created now)" in said
    assert P.read_card(out)["tables"] == P.read_card(published["out"])["tables"]  # the same two folders
    assert loopback_hub.created == [{"name": "results", "organization": "me", "visibility": "private",
                                     "type": "dataset"}]
    sent = loopback_hub.files("me/results")
    local = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert sent == local and "README.md" in sent and "ledger/train.parquet" in sent


def test_results_page_shows_a_row_and_links_it_into_the_inspect_viewer(published, tmp_path):
    from analysis import results_page
    from tests.browser import Browser, BrowserUnavailable

    page = results_page.build([published["out"]], tmp_path / "site", viewer="http://127.0.0.1:7575/")
    try:
        browser = Browser.start(tmp_path / "profile")
    except BrowserUnavailable as exc:
        pytest.skip(str(exc))
    try:
        browser.goto(page.as_uri())
        for _ in range(50):
            if browser.evaluate("document.readyState") == "complete":
                break
        cells = browser.evaluate("Array.from(document.querySelectorAll('#results tbody tr')).map("
                                 "r => Array.from(r.cells).map(c => c.innerText))")
        links = browser.evaluate("Array.from(document.querySelectorAll('#results tbody a')).map(a => a.href)")
        browser.evaluate("sortBy(5)")  # accuracy, ascending
        sorted_acc = browser.evaluate("Array.from(document.querySelectorAll('#results tbody tr')).map("
                                      "r => r.cells[5].dataset.key)")
    finally:
        browser.close()
    (row,) = [c for c in cells if c[0] == "smoke/smoke" and c[2] == "none"]
    # 2 of 5 right (the failed run counts wrong); Wilson 95% interval by its closed form
    n, p, z = 5, 0.4, 1.959963984540054
    centre, half = (p + z * z / (2 * n)) / (1 + z * z / n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert row[1:6] == ["test-model", "none", "-", "5", "40.0%"]
    assert row[6] == f"{centre - half:.1%} – {centre + half:.1%}"
    assert row[9] == "differs: reader_model"
    log = next(a for a in links if "_none_smoke-smoke.eval" in a)
    assert log.startswith("http://127.0.0.1:7575/#/logs/") and (tmp_path / "site" / "logs" / log.rsplit("/", 1)[1]).exists()
    keys = [float(k) for k in sorted_acc if k]
    assert keys == sorted(keys) and len(keys) == len(cells)


def test_files_the_tables_cannot_rewrite_go_along_as_text_and_rebuild_exactly(published, tmp_path):
    """A torn last ledger line (a killed driver): kept as text; a record written with another indent: rebuilt from
    its row in the harness's own style (what goes out is the published object, not the file's bytes)."""
    folder = _copy(published["folders"][0], tmp_path / "runs" / "smoke" / "odd")
    ledger = folder / "ledger.jsonl"
    ledger.write_text(ledger.read_text() + '{"event": "request", "tag": "none.lme.q9')
    rec = min((folder / "records").glob("*.json"))
    rec.write_text(json.dumps(json.loads(rec.read_text()), indent=4))
    ex = P.publish([folder], tmp_path / "ds", say=lambda s: None)
    assert sorted(ex.verbatim) == ["smoke/smoke/ledger.jsonl"]  # named by its stage.json, not by the folder "odd"
    (root,) = P.rebuild(tmp_path / "ds", tmp_path / "rebuilt")
    # the torn line's text is no object this harness can publish field by field: a marker, still torn, stands in
    assert (root / "ledger.jsonl").read_text() == ledger.read_text().rsplit("\n", 1)[0] + "\n" + P.NOT_JSON
    text = (root / "records" / rec.name).read_text()
    assert text.startswith("{\n ") and json.loads(text) == {**json.loads(rec.read_text()),
                                                          "data_path": "<local path>/synth_tiny.json"}
    assert {p.name for p in (root / "records").iterdir()} == {p.name for p in (folder / "records").iterdir()}


def test_data_that_is_not_ours_stays_behind_and_is_found_beside_the_card(published, tmp_path):
    folder = _copy(published["folders"][0], tmp_path / "runs" / "main" / "main")
    info = json.loads((folder / "stage.json").read_text())
    data_file = Path(info["data"]["path"])
    (folder / "stage.json").write_text(json.dumps({**info, "data": {**info["data"], "kind": "longmemeval"}}))
    ex = P.publish([folder], tmp_path / "ds", say=lambda s: None)
    assert not any(f["path"].startswith("data/") for f in ex.rows["files"])
    assert any("the data file (longmemeval" in x for x in P.read_card(tmp_path / "ds")["left_out"])
    (tmp_path / "ds" / "data").mkdir()
    (tmp_path / "ds" / "data" / data_file.name).write_bytes(data_file.read_bytes())
    (root,) = P.rebuild(tmp_path / "ds", tmp_path / "rebuilt")
    assert (root / "data" / data_file.name).read_bytes() == data_file.read_bytes()


def test_what_counts_as_private():
    from harness.records.privacy import Private, without_urls

    found = Private()
    found.scan_object({"model": {"base_url": "https://api.example.com/v1", "api_key": "EMPTY"},
                       "judge": {"api_key": KEY}, "note": "http://example.org/not-an-endpoint"})
    found.scan_text('{"path": "/chat/completions", "bin": "/usr/bin/sqlite3", "cache": "/tmp/u/x/cache"}')
    text = found.redact('see https://api.example.com/v1 and http://example.org/not-an-endpoint with EMPTY and '
                        f'{KEY}, /usr/bin/sqlite3 /chat/completions /tmp/u/x/cache/enc')
    assert text == ("see <endpoint url> and http://<host>/not-an-endpoint with EMPTY and <key>, /usr/bin/sqlite3 "
                    "/chat/completions <local path>")
    assert without_urls("openai_compatible:m@http://10.0.0.2:8000/v1:0123abcd4567") == \
        "openai_compatible:m@<endpoint url>:0123abcd4567"
