"""Publishing, tried as an adversary would (analysis/publish.py, harness/records/privacy.py).

Safe to receive: a crafted dataset (paths out of its folder, symlinks out, an edited card, an extra
file, more than the bounds) is refused by name with exit 2 under `make analyze`, `make results-page`
and `make view`, and nothing is written. Safe to share: credentials and paths planted wherever a user
can put them never reach a byte or a cell of the dataset; a transcript that shows a private agent's
unit stays behind; the data file goes only when it is the generator's own. Push reads the
repository's visibility, and a failed commit says what the Hub holds, without a traceback.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from analysis import export_inspect
from analysis import publish as P
from analysis import results_page
from analysis import run as A
from harness.cli import publish as publish_cli
from harness.data.synth import generate
from harness.records import privacy
from tests.analysis_fixtures import Stage, sha256_file
from tests.test_publish import loopback_hub, published  # noqa: F401  (fixtures)


def _reseal(ds: Path, table: str, rows: list[dict]) -> None:
    """Write a changed table and its new sha256 into the card, as whoever crafts a dataset can."""
    path = ds / table / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(path)), path)
    card = (ds / "README.md").read_text()
    (ds / "README.md").write_text(card.replace(P.read_card(ds)["tables"][table], P.sha256(path.read_bytes())))


def _files(root: Path) -> set[str]:
    return {str(p) for p in root.rglob("*")}


def _every_reader_refuses(ds: Path, tmp_path: Path, capsys, match: str) -> None:
    """make analyze, make results-page and make view: exit 2, the problem named, nothing written."""
    before = _files(tmp_path)
    assert A.main([f"runs={ds}", f"out={tmp_path / 'analysis'}", "replay=none"]) == 2
    P._REBUILT.clear()
    assert results_page.main([f"datasets={ds}", f"out={tmp_path / 'page'}"]) == 2
    P._REBUILT.clear()
    assert export_inspect.main([f"runs={ds}", f"out={tmp_path / 'logs'}"]) == 2
    P._REBUILT.clear()
    err = capsys.readouterr().err
    assert err.count(match) == 3 and "Traceback" not in err, err
    assert _files(tmp_path) == before


# ------------------------------------------------------------------------------ safe to receive


@pytest.mark.parametrize("where", ["path", "absolute", "folder", "symlinked table"])
def test_a_dataset_that_would_write_outside_its_folder_is_refused_and_nothing_is_written(
        published, tmp_path, capsys, where):
    ds = tmp_path / "ds"
    shutil.copytree(published["out"], ds)
    target = tmp_path / "outside" / "planted.txt"
    files = pq.read_table(ds / "files" / "train.parquet").to_pylist()
    row = dict(files[0], table=None, format=None, content="planted", sha256=P.sha256("planted"), bytes=7)
    if where == "path":
        row["path"], match = "../../../outside/planted.txt", "leaves its folder"
    elif where == "absolute":
        row["path"], match = str(target), "leaves its folder"
    elif where == "folder":
        row["folder"], match = "../outside", "stage folder '../outside'"
    if where == "symlinked table":  # a table that points at a file elsewhere on the reader's machine
        outside = tmp_path / "elsewhere.parquet"
        shutil.move(ds / "prompts" / "train.parquet", outside)
        os.symlink(outside, ds / "prompts" / "train.parquet")
        match = "symlink(s) out of the dataset's folder: prompts/train.parquet"
    else:
        _reseal(ds, "files", files + [row])
    _every_reader_refuses(ds, tmp_path, capsys, match)
    assert not target.exists() and not (tmp_path.parent / "outside").exists()


def test_an_edited_card_is_refused_whatever_part_was_edited(published, tmp_path, capsys):
    card = (published["out"] / "README.md").read_text()
    # the fidelity block turned from differs to same, in the header and the body alike
    edited = card.replace("status: differs", "status: same").replace("| differs |", "| same |")
    assert edited != card
    ds = tmp_path / "fidelity"
    shutil.copytree(published["out"], ds)
    (ds / "README.md").write_text(edited)
    _every_reader_refuses(ds, tmp_path, capsys, "the card's block of smoke/smoke differs from its stage.json in "
                                                "['fidelity']")
    # the body alone (what the Hub shows a reader)
    body = tmp_path / "body"
    shutil.copytree(published["out"], body)
    (body / "README.md").write_text(card.replace("| differs |", "| same |"))
    with pytest.raises(P.PublishError, match=r"README.md is not the card this harness writes .*line \d+ differs"):
        P.rebuild(body, tmp_path / "r1")
    # the pre-registration file beside the card (a stage of this tree's hypotheses file: it goes along)
    st = Stage(tmp_path / "runs", "pre", prereg_sha=sha256_file(P.analysis_repo() / "conf/prereg/hypotheses.yaml"))
    st.add("none", "q1")
    pre = tmp_path / "prereg"
    P.publish([st.write()], pre, say=lambda s: None)
    (p,) = (pre / "prereg").iterdir()
    assert len(P.rebuild(pre, tmp_path / "r0")) == 1
    p.write_text(p.read_text() + "\n# one more hypothesis\n")
    with pytest.raises(P.PublishError, match=rf"prereg/{p.name} is missing or does not match the card's sha256"):
        P.rebuild(pre, tmp_path / "r2")
    assert not (tmp_path / "r1").exists() and not (tmp_path / "r2").exists()


def test_a_file_the_card_does_not_name_is_refused_by_name(published, tmp_path, capsys):
    ds = tmp_path / "ds"
    shutil.copytree(published["out"], ds)
    (ds / "notes.html").write_text("<script>alert(1)</script>")
    _every_reader_refuses(ds, tmp_path, capsys, "file(s) the card does not name: notes.html")
    (ds / "notes.html").unlink()
    (ds / ".gitattributes").write_text("*.parquet filter=lfs\n")  # what a Hub download holds: not the dataset's
    assert len(P.rebuild(ds, tmp_path / "ok")) == 2


def test_a_dataset_beyond_the_bounds_is_refused(published, tmp_path, monkeypatch):
    monkeypatch.setattr(P, "MAX_FILES", 10)  # the published fixture has 25 files
    with pytest.raises(P.PublishError, match="25 files in table 'files': more than 10"):
        P.rebuild(published["out"], tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_a_record_naming_a_condition_like_a_path_cannot_name_a_log_file(tmp_path, capsys):
    st = Stage(tmp_path / "runs", "s")
    st.add("none", "q1")
    st.records[0]["condition"] = "../../escape"
    folder = st.write()
    assert export_inspect.main([f"runs={folder}", f"out={tmp_path / 'logs'}"]) == 2
    assert "condition '../../escape' is no plain name" in capsys.readouterr().err
    assert not (tmp_path / "logs").exists() and not list(tmp_path.glob("**/*.eval"))


def test_a_card_whose_replaced_block_counts_with_true_instead_of_a_number_is_refused(published, tmp_path, capsys):
    """`replaced` holds counts: a card rewritten whole to say `true` (a bool passes as an int) for each kind is no
    count of what was replaced, and is refused like any other edit of the block."""
    import shutil

    import pyarrow.parquet as pq

    from analysis import publish as P

    ds = tmp_path / "ds"
    shutil.copytree(published["out"], ds)
    meta = P.read_card(ds)
    assert meta["replaced"]["endpoint urls"] >= 1
    meta["replaced"] = {k: True for k in meta["replaced"]}
    counts = {t: pq.read_metadata(ds / t / "train.parquet").num_rows for t in meta["tables"]}
    (ds / "README.md").write_text(P.card_text(meta, counts))
    _every_reader_refuses(ds, tmp_path, capsys, "the card's replaced block")


def _reseal_card_anew(ds: Path, table: str, rows: list[dict]) -> None:
    """A changed table, its sha256 and the card written anew from them: what whoever crafts a dataset can do."""
    path = ds / table / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(path)), path)
    meta = P.read_card(ds)
    meta["tables"][table] = P.sha256(path.read_bytes())
    counts = {t: pq.read_metadata(ds / t / "train.parquet").num_rows for t in meta["tables"]}
    (ds / "README.md").write_text(P.card_text(meta, counts))


def test_a_card_nested_past_the_recursion_limit_is_refused_not_a_traceback(published, tmp_path, capsys):
    ds = tmp_path / "ds"
    shutil.copytree(published["out"], ds)
    (ds / "README.md").write_text("---\nmemspace: " + "[" * 3000 + "]" * 3000 + "\n---\n# x\n")
    before = {str(p) for p in tmp_path.rglob("*")}
    assert A.main([f"runs={ds}", f"out={tmp_path / 'analysis'}", "replay=none"]) == 2
    assert results_page.main([f"datasets={ds}", f"out={tmp_path / 'page'}"]) == 2
    assert export_inspect.main([f"runs={ds}", f"out={tmp_path / 'logs'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 3 and "Traceback" not in err, err
    assert {str(p) for p in tmp_path.rglob("*")} == before


def test_a_cell_nested_past_the_recursion_limit_is_refused_not_a_traceback(published, tmp_path, capsys):
    ds = tmp_path / "ds"
    shutil.copytree(published["out"], ds)
    runs = pq.read_table(ds / "runs" / "train.parquet").to_pylist()
    runs[0]["_extra"] = "[" * 100000 + "]" * 100000
    _reseal_card_anew(ds, "runs", runs)
    _every_reader_refuses(ds, tmp_path, capsys, "its tables are not what this harness writes (RecursionError")


def test_a_symlink_loop_in_the_dataset_is_refused_not_a_traceback(published, tmp_path, capsys):
    ds = tmp_path / "ds"
    shutil.copytree(published["out"], ds)
    (ds / "a").symlink_to(ds / "b")
    (ds / "b").symlink_to(ds / "a")
    _every_reader_refuses(ds, tmp_path, capsys, "symlink(s) out of the dataset's folder: a, b")


def test_a_row_twice_in_a_table_is_refused_though_the_files_rebuild_the_same(published, tmp_path, capsys):
    """The runs table of a dataset is what `datasets.load_dataset` users count: a run twice in it (the card's
    totals made to agree) must not pass as checked, though the rebuilt record file is the same."""
    ds = tmp_path / "ds"
    shutil.copytree(published["out"], ds)
    runs = pq.read_table(ds / "runs" / "train.parquet").to_pylist()
    runs.append(dict(runs[0]))
    path = ds / "runs" / "train.parquet"
    pq.write_table(pa.Table.from_pylist(runs, schema=pq.read_schema(path)), path)
    meta = P.read_card(ds)
    meta["tables"]["runs"], meta["totals"] = P.sha256(path.read_bytes()), P._totals(runs)
    counts = {t: pq.read_metadata(ds / t / "train.parquet").num_rows for t in meta["tables"]}
    (ds / "README.md").write_text(P.card_text(meta, counts))
    _every_reader_refuses(ds, tmp_path, capsys, "table 'runs' holds {'folder': 'smoke/smoke', 'file': 'records/")


def test_a_table_whose_values_decode_past_the_bound_is_refused_before_they_are_decoded(published, tmp_path,
                                                                                     monkeypatch):
    """Parquet stores a value repeated by its dictionary: a table of a few KB can decode to any size. The bound
    on what a dataset rebuilds must hold while the tables are read, not after they are in memory."""
    import tracemalloc

    ds = tmp_path / "ds"
    shutil.copytree(published["out"], ds)
    value = "x" * (1 << 20)
    files = pq.read_table(ds / "files" / "train.parquet").to_pylist()
    _reseal_card_anew(ds, "files", files + [dict(files[0], path=f"bomb/{i}.txt", table=None, format=None, content=value,
                                       sha256=P.sha256(value), bytes=len(value)) for i in range(64)])
    assert (ds / "files" / "train.parquet").stat().st_size < 256 << 10  # 64 MiB of values in a small file
    monkeypatch.setattr(P, "MAX_REBUILT_BYTES", 8 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(P.PublishError, match="its tables decode .table 'files' at row .*. to more than 8 MiB"):
            P.rebuild(ds, tmp_path / "r")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 24 << 20, f"{peak >> 20} MiB decoded before the refusal"
    assert not (tmp_path / "r").exists()


def _add_file(ds: Path, path: str, content: str = "x") -> None:
    files = pq.read_table(ds / "files" / "train.parquet").to_pylist()
    row = dict(files[0], path=path, table=None, format=None, content=content, sha256=P.sha256(content),
               bytes=len(content.encode()))
    _reseal_card_anew(ds, "files", files + [row])


def test_a_file_name_longer_than_a_file_system_takes_is_refused_before_anything_is_written(
        published, tmp_path, capsys):
    ds = tmp_path / "ds"
    shutil.copytree(published["out"], ds)
    _add_file(ds, "notes/" + "\N{GRINNING FACE}" * 100 + ".txt")  # 100 characters, 404 bytes: NAME_MAX is 255
    _every_reader_refuses(ds, tmp_path, capsys, "leaves its folder or is no plain relative path")
    with pytest.raises(P.PublishError):
        P.rebuild(ds, tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_a_file_where_the_data_folder_goes_is_refused_before_anything_is_written(published, tmp_path, capsys):
    ds = tmp_path / "ds"
    shutil.copytree(published["out"], ds)
    _add_file(ds, "data")  # the stage folder's `data` a file, and the user's data file beside the card
    (ds / "data").mkdir()
    (ds / "data" / "synth_tiny.json").write_text("[]")
    with pytest.raises(P.PublishError, match="a file named 'data' where the data folder goes"):
        P.rebuild(ds, tmp_path / "r")
    assert not (tmp_path / "r").exists()
    _every_reader_refuses(ds, tmp_path, capsys, "a file named 'data' where the data folder goes")


@pytest.mark.parametrize("extra", [".gitattributes.html", ".gitattributes-x/run.sh", "data/notes.html"])
def test_a_file_beside_the_card_that_it_does_not_name_is_refused_whatever_its_name(published, tmp_path, capsys,
                                                                                   extra):
    ds = tmp_path / "ds"
    shutil.copytree(published["out"], ds)
    (ds / extra).parent.mkdir(parents=True, exist_ok=True)
    (ds / extra).write_text("<script>alert(1)</script>")
    with pytest.raises(P.PublishError, match=f"file\\(s\\) the card does not name: {extra}"):
        P.rebuild(ds, tmp_path / "r")
    (ds / extra).unlink()
    if extra.startswith("data/"):  # the stages' own data file, put there for the replay, is still welcome
        (ds / "data" / "synth_tiny.json").write_text("[]")
    (ds / ".gitattributes").write_text("*.parquet filter=lfs\n")
    assert len(P.rebuild(ds, tmp_path / "ok")) == 2


# ------------------------------------------------------------------------------ safe to share

SECRET = "s3cr3t-pa55w0rd"
TOKEN = "tok-PLANTED-0123456789"


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """A stage with credentials and another machine's paths in every place a user can put them."""
    monkeypatch.setenv("MY_SERVICE_TOKEN", TOKEN)
    base = f"http://jdoe:{SECRET}@10.9.8.7:8000/v1/"  # with its trailing slash
    data_path = "/gpfs/home/jdoe/data sets/synth_tiny.json"
    st = Stage(tmp_path / "runs", "odd", data={"path": data_path, "sha256": "d" * 64, "kind": "longmemeval"},
               config_extra={"model": {"name": "vllm", "base_url": base, "api_key": "sk-live-abcdefghijklmnop0123",
                                       "extra_headers": {"Authorization": "Bearer abcdefghijklmnopqrstuvwxyz"}},
                             "cache_dir": "/scratch/jdoe/My Runs/cache",
                             "judge": {"name": "gpt", "base_url": f"https://judge.internal.example.com/v1?key={SECRET}"}})
    for qid in ("q1", "q2"):
        r = st.add("none", qid, status="failed" if qid == "q2" else "ok",
                   answer=f"saw https://jdoe:{SECRET}@files.example.com/a?token={TOKEN}#frag and {TOKEN}")
        r["data_path"] = data_path
        r["endpoint"] = {"base_url": base}
        if qid == "q2":
            r["error"] = ('Traceback (most recent call last):\n  File "/home/Jo Doe/proj/harness/loop.py", line 3\n'
                          f'/scratch/jdoe/My Runs/cache/x.json\nOSError: token {TOKEN}')
    for j in st.judgements:  # the judge's identity strips the slash: what the issue saw leak
        j["judge"]["base_url"] = base
        j["judge"]["identity"] = f"openai_compatible:judge@{base.rstrip('/')}:0123abcd4567"
    folder = st.write()
    (folder / "driver.lock").write_text(json.dumps({"host": "jdoe-laptop", "pid": 4242}) + "\n")
    return folder


def _published_bytes(out: Path) -> list[tuple[str, str]]:
    """Every file of the dataset as text (parquet decoded cell by cell), each with where it came from."""
    parts = []
    for p in sorted(out.rglob("*")):
        if p.suffix == ".parquet":
            for i, row in enumerate(pq.read_table(p).to_pylist()):
                for col, v in row.items():
                    parts.append((f"{p.parent.name}[{i}].{col}", json.dumps(v, ensure_ascii=False, default=str)))
            parts.append((str(p), p.read_bytes().decode("latin-1")))
        elif p.is_file():
            parts.append((str(p), p.read_text()))
    return parts


def test_planted_credentials_and_other_machines_paths_never_reach_a_byte_or_cell(planted, tmp_path):
    out = tmp_path / "ds"
    said = io.StringIO()
    with contextlib.redirect_stdout(said):
        assert publish_cli.main([f"runs={planted}", f"out={out}"]) == 0
    forbidden = [SECRET, TOKEN, "jdoe:", "10.9.8.7", "sk-live", "abcdefghijklmnopqrstuvwxyz", "/gpfs", "/scratch",
                 "Jo Doe", "/home/", "internal.example.com", "files.example.com", "#frag", "My Runs"]
    for where, text in _published_bytes(out):
        for bad in forbidden:
            assert bad not in text, f"{bad!r} in {where}"
    cells = "\n".join(t for _, t in _published_bytes(out))
    # the data file by its name; a folder no key declares a file: withheld whole
    assert "<local path>/synth_tiny.json" in cells and "cache_dir: <withheld>\\n" in cells
    assert "openai_compatible:judge@<endpoint url>:0123abcd4567" in cells and "https://<host>/a" in cells
    # host names stay home; process ids go along, and both the plan and the card say so
    card = (out / "README.md").read_text()
    assert "jdoe-laptop" not in said.getvalue() + card and "process ids" in card and "process ids" in said.getvalue()


def test_the_report_of_the_published_stage_is_the_original_s(planted, tmp_path):
    """The identity with its slash stripped is replaced the same way where the analysis prints it."""
    from tests.test_analysis import prereg_file

    P.publish([planted], tmp_path / "ds", say=lambda s: None)
    common = ["replay=none", f"prereg={prereg_file(tmp_path)}", "lenient=true"]
    assert A.main([f"runs={planted}", f"out={tmp_path / 'a'}", *common]) == 0
    assert A.main([f"runs={tmp_path / 'ds'}", f"out={tmp_path / 'b'}", *common]) == 0
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    differ = [str(f) for f in files if (tmp_path / "a" / f).read_bytes() != (tmp_path / "b" / f).read_bytes()]
    assert differ == ["shards.csv"]  # the driver lock's host name stayed home; its pid went along
    a, b = (tmp_path / "a" / "shards.csv").read_text(), (tmp_path / "b" / "shards.csv").read_text()
    assert "jdoe-laptop:4242" in a and b == a.replace("jdoe-laptop:4242", "<withheld>:4242")
    assert not any(SECRET in (tmp_path / "a" / f).read_text(errors="replace") for f in files)


def test_what_escapes_the_redaction_is_refused_by_the_last_scan_naming_it(planted, tmp_path, capsys):
    rec = min((planted / "records").glob("*.json"))
    # JSON's own escapes hide a path and a key from a scan of the file's text, not from its cells
    rec.write_text(rec.read_text().replace('"answer": "', '"answer": "\\/home\\/jdoe\\/notes.txt \\u0073k-'
                                                          'hiddenhiddenhidden0 ', 1))
    # the policy reads the parsed value: the escapes hide nothing from it
    assert publish_cli.main([f"runs={planted}", f"out={tmp_path / 'ok'}"]) == 0
    assert not any("jdoe" in t or "hiddenhidden" in t for _, t in _published_bytes(tmp_path / "ok"))
    # whatever still looks private when the tables are written (here planted in a cell after the policy) is refused
    ex = P.collect([planted])
    ex.rows["runs"][0]["answer"] = "see /home/jdoe/notes.txt and sk-hiddenhiddenhidden0"
    with pytest.raises(P.PublishError) as err:
        P.write(ex, tmp_path / "ds")
    assert "refused to publish what looks private" in str(err.value)
    assert "a local path (/home/jdoe/notes.txt)" in str(err.value) and "a credential (sk-hid...)" in str(err.value)
    assert "table 'runs'" in str(err.value) and "column 'answer'" in str(err.value)
    assert not (tmp_path / "ds").exists() and not list(tmp_path.glob(".ds.publish-*"))


def test_urls_and_paths_are_recognised_by_their_shape():
    found = privacy.Private()
    found.scan_object({"model": {"base_url": "http://u:p4ssw0rd@h.example:8000/v1/"}})
    text = found.redact(
        "a openai:m@http://u:p4ssw0rd@h.example:8000/v1:0123abcd4567 b http://h.example:8000/v1 c "
        "https://x.example.org/docs/page?token=abc#part d /scratch/u/run e /gpfs/home/u/data sets/z.json f "
        "/home/Jo Doe/runs/x g /usr/bin/sqlite3 h /chat/completions i /tmp/x and then j C:\\\\Users\\\\jo\\\\r.json")
    assert text == ("a openai:m@<endpoint url>:0123abcd4567 b <endpoint url> c https://<host>/docs/page d "
                    "<local path> e <local path>/z.json f <local path> g /usr/bin/sqlite3 h /chat/completions "
                    "i <local path> and then j <local path>/r.json")
    assert privacy.leaks(text) == []
    assert privacy.leaks("see /home/u/x and sk-abcdefghijklmnopqrstu") == [
        "a credential (sk-abc...)", "a local path (/home/u/x)"]


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


@pytest.mark.parametrize("text", ["see https://example.com/recipes/chocolate-cake.",
                                  "(https://docs.python.org/3/library/json.html)", "at https://example.com/a/b, then",
                                  "see example.com/a/T0A1B2C3D."])
def test_a_redacted_url_ending_a_sentence_is_not_taken_for_a_secret_by_the_last_scan(text):
    """A URL followed by a full stop, a comma or a closing bracket keeps that mark after it (it is no part of the
    URL); the last scan must read the path as the redaction did, or every such sentence refuses the dataset."""
    redacted = privacy.Private().redact(text)
    assert privacy.leaks(redacted) == [], redacted


PEM_BODY = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw"


PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n7YhUSqUr0ZMuWs4Q\n-----END RSA PRIVATE KEY-----"


def test_a_pem_private_key_is_replaced_whole_not_only_its_first_line():
    found = privacy.Private()
    for text in (PEM, json.dumps({"error": f"could not load {PEM} for tls"})):
        out = found.redact(text)
        assert PEM_BODY not in out and "7YhUSqUr0ZMuWs4Q" not in out and "END RSA" not in out, out
    assert found.redact(json.dumps({"error": f"load {PEM} for tls"})) == '{"error": "load <key> for tls"}'


@pytest.mark.parametrize("name", ["x-api-key", "api-key", "X-Auth-Token", "Proxy-Authorization"])
def test_a_key_under_a_header_s_name_is_replaced(name):
    found = privacy.Private()
    cfg = {"model": {"extra_headers": {name: "q7Zr2Lp9Wx4Kt8Vn"}}}
    found.scan_object(cfg)
    assert "q7Zr2Lp9Wx4Kt8Vn" not in found.redact(json.dumps(cfg))
    assert found.redact("q7Zr2Lp9Wx4Kt8Vn") == privacy.KEY


def test_urls_written_with_json_unicode_escapes_lose_their_host_and_query(tmp_path):
    """json.dumps escapes non-ASCII by default (the judge's info file, the fixtures' records): a URL with
    an IDN host or a non-ASCII path must still lose host, user info and query, in every cell."""
    judge = "https://jüdge.intern.example.de/v1"
    st = Stage(tmp_path / "runs", "idn", config_extra={"judge": {"name": "gpt", "base_url": judge}})
    st.add("none", "q1", answer="see https://jdoe:pw1@files.intern.example.com/dösya?token=Zq81LmX3#Fq9zW")
    for j in st.judgements:
        j["judge"]["base_url"] = judge
        j["judge"]["identity"] = f"openai_compatible:judge@{judge}:0123abcd4567"
    folder = st.write()
    info = folder / "judgements" / "j.info.json"
    if not info.exists():
        (info := next((folder / "judgements").glob("*.info.json")))
    meta = json.loads(info.read_text())
    meta["judge"]["base_url"] = judge
    info.write_text(json.dumps(meta, indent=1, sort_keys=True, default=str))  # as judge/answer_check.py writes it
    assert "\\u00fc" in info.read_text()
    out = tmp_path / "ds"
    with contextlib.redirect_stdout(io.StringIO()):
        assert publish_cli.main([f"runs={folder}", f"out={out}"]) == 0
    for where, text in _published_bytes(out):
        for bad in ("intern.example", "dge.intern", "jdoe", "pw1", "Zq81LmX3", "Fq9zW"):
            assert bad not in text, f"{bad!r} in {where}: {text[:300]}"


def test_the_data_file_of_an_org_stage_with_no_run_recorded_yet_stays_behind(tmp_path):
    """An Org stage is one whose config plans public/private groups, not one whose runs say so: before its
    first record its data file (the private agents' units) must stay behind too."""
    from harness.data.synth import generate
    from tests.analysis_fixtures import sha256_file

    data_file = tmp_path / "cache" / "synth_tiny_seed0_q2.json"
    data_file.parent.mkdir(parents=True)
    data_file.write_text(json.dumps(generate(0, "tiny"), ensure_ascii=False))
    stage = {"name": "o", "label": "o", "kind": "agents", "conditions": {"shared": {"module": "shared"}}}
    data = {"kind": "synth", "size": "tiny", "seed": 0, "path": str(data_file)}
    folders = {}
    for name, groups in (("lme", [{"sample": "smoke"}]), ("org", [{"variant": "public"}, {"variant": "private"}])):
        st = Stage(tmp_path / name, "o", data={"path": str(data_file), "sha256": sha256_file(data_file),
                                               "kind": "synth"},
                   config_extra={"stage": {**stage, "groups": groups}, "data": data})
        folders[name] = st.write()  # no run recorded yet

    def data_rows(folder, **kw):
        return [f["path"] for f in P.collect([folder], **kw).rows["files"] if f["path"].startswith("data/")]

    assert data_rows(folders["lme"]) == ["data/synth_tiny_seed0_q2.json"]
    assert data_rows(folders["org"]) == []
    assert data_rows(folders["org"], private_transcripts=True) == ["data/synth_tiny_seed0_q2.json"]


@pytest.mark.parametrize("url", ["file:///home/jdoe/runs/x.json", "file://localhost/home/jdoe/runs/x.json",
                                 "sqlite:////scratch/jdoe/runs/x.json", "file:///C:/Users/jdoe/runs/x.json"])
def test_a_file_url_loses_its_local_path(url):
    """hydra.searchpath=[file:///...] and a database's URL name a local path: it goes as <local path>/NAME."""
    found = privacy.Private()
    text = found.redact(json.dumps({"searchpath": [url], "note": f"loaded {url} ok"}))
    assert "jdoe" not in text and "<local path>/x.json" in text and privacy.leaks(text) == [], text
    assert privacy.leaks(f"loaded {url} ok") != []  # and the last scan names one left behind


def test_a_folder_name_of_several_words_in_a_traceback_is_replaced_whole():
    found = privacy.Private()
    text = found.redact('Traceback:\n  File "/home/Mary Ann Smith/proj/x.py", line 3 in /tmp/x and then')
    assert text == 'Traceback:\n  File "<local path>/x.py", line 3 in <local path> and then', text


@pytest.mark.parametrize("path", ["/usr/home/jdoe/runs/x.json", "/run/media/jdoe/USB/runs/x.json"])
def test_a_user_s_folder_under_a_system_folder_is_a_local_path(path):
    """FreeBSD's homes are /usr/home/NAME, removable disks mount at /run/media/NAME: not the system's own."""
    text = privacy.Private().redact(f"wrote {path} ok")
    assert text == "wrote <local path>/x.json ok" and privacy.leaks(f"wrote {path}") != []
    # a user's runtime folder (/run/user/<uid>) is the user's: it goes as a placeholder; /usr/bin is everyone's
    assert privacy.Private().redact("ran /usr/bin/sqlite3 on /run/user/1000") == "ran /usr/bin/sqlite3 on <local path>"


# ------------------------------------------------------------------------------ privacy per memory unit


def _unit_log(agent: str | None, scope: str, owners: list[str]) -> dict:
    return {"kind": "search", "agent": agent, "view": {"org": "q", "agent": agent, "scope": scope},
            "units": [[f"{o}|s{i}|0", o] for i, o in enumerate(owners)], "query": "q", "k": 5}


def test_a_transcript_that_shows_a_private_agents_unit_stays_behind_whatever_the_variant(tmp_path):
    st = Stage(tmp_path / "runs", "org")
    shown = {}
    for qid, cond, log in [("q1", "no_view", _unit_log(None, "all", ["a1", "a4"])),  # public variant, no view
                           ("q2", "shared", _unit_log("a0", "shared", ["a1", "a2"])),  # public units only
                           ("q3", "shared", None)]:
        r = st.add(cond, qid, variant="public", tool_calls=1 if log else 0,
                   tools=[{"log": log}] if log else None)
        r["transcript"] = {"role": "agent", "system_sha256": "0" * 64, "tools": [], "messages": [
            {"role": "user", "content": f"unit text of {qid}", "tool_calls": None, "tool_call_id": None,
             "tool": None, "call": None, "asked": None}]}
        shown[qid] = r["run_id"]
    folder = st.write()
    ex = P.collect([folder])
    kept = {r["run_id"] for r in ex.rows["transcripts"]}
    assert kept == {shown["q2"], shown["q3"]} and ex.private_transcripts == 1
    assert len(P.collect([folder], private_transcripts=True).rows["transcripts"]) == 3


def _synth_stage(tmp_path: Path, name: str, variant: str = "", edit: bool = False) -> Path:
    data_file = tmp_path / name / "cache" / "synth_tiny_seed0_q2.json"
    data_file.parent.mkdir(parents=True)
    text = json.dumps(generate(0, "tiny"), ensure_ascii=False)
    data_file.write_text(text.replace("a", "b", 1) if edit else text)
    st = Stage(tmp_path / name / "runs", name, data={"path": str(data_file), "sha256": sha256_file(data_file),
                                                     "kind": "synth"},
               config_extra={"data": {"kind": "synth", "size": "tiny", "seed": 0, "path": str(data_file)}})
    st.add("shared" if variant else "none", "q1", variant=variant)
    return st.write()


def test_the_data_file_goes_along_only_when_the_generator_wrote_it_and_holds_no_private_unit(tmp_path):
    def data_rows(folder, **kw):
        return [f["path"] for f in P.collect([folder], **kw).rows["files"] if f["path"].startswith("data/")]

    assert data_rows(_synth_stage(tmp_path, "own")) == ["data/synth_tiny_seed0_q2.json"]
    edited = _synth_stage(tmp_path, "edited", edit=True)  # its stage.json has the edited file's own sha256
    assert data_rows(edited) == []
    assert any("differs from what the generator writes" in x for x in P.collect([edited]).left_out)
    org = _synth_stage(tmp_path, "orgdata", variant="public")
    assert data_rows(org) == [] and data_rows(org, private_transcripts=True) == ["data/synth_tiny_seed0_q2.json"]


# ------------------------------------------------------------------------------ push and the folder


def test_push_refuses_an_existing_public_repository_unless_asked(published, tmp_path, loopback_hub, capsys):
    loopback_hub.repos["me/open"] = {"private": False, "commits": []}
    shutil.copytree(published["out"], tmp_path / "ds")
    args = [f"runs={published['folders'][0]}", f"out={tmp_path / 'ds2'}", "push=me/open",
            f"endpoint={loopback_hub.url}"]
    assert publish_cli.main(args) == 2
    cap = capsys.readouterr()
    assert "me/open is a public dataset repository: refused" in cap.err and "(private" not in cap.out
    assert loopback_hub.commits == [] and loopback_hub.created == []
    assert publish_cli.main(args + ["public=true"]) == 0
    assert "(public, existing)" in capsys.readouterr().out and len(loopback_hub.commits) == 1


@pytest.mark.parametrize("exists", [False, True])
def test_a_failed_push_says_what_happened_and_what_the_hub_holds(published, tmp_path, loopback_hub, capsys, exists):
    if exists:
        loopback_hub.repos["me/results"] = {"private": True, "commits": []}
    loopback_hub.fail_commit = 403  # refused (a 5xx is retried by the client for half a minute first)
    code = publish_cli.main([f"runs={published['folders'][0]}", f"out={tmp_path / 'ds'}", "push=me/results",
                             f"endpoint={loopback_hub.url}"])
    err = capsys.readouterr().err
    assert code == 3 and "Traceback" not in err
    assert "push to me/results failed while committing the dataset's files" in err and "403" in err
    assert ("is as it was (the upload is one commit, never made" if exists else
            "was created (private) and holds no commit of this dataset") in err
    assert loopback_hub.files("me/results") == []


def test_publishing_again_deletes_nothing_it_did_not_write(published, tmp_path):
    out = tmp_path / "ds"
    P.publish(published["folders"], out, say=lambda s: None)
    (out / "data").mkdir()
    (out / "data" / "synth_tiny.json").write_text("[]")  # what the card tells its user to put there
    (out / "my-notes.txt").write_text("mine")
    P.publish(published["folders"][:1], out, say=lambda s: None)  # fewer tables' rows, the same folder
    assert (out / "data" / "synth_tiny.json").read_text() == "[]" and (out / "my-notes.txt").read_text() == "mine"
    assert P.read_card(out)["stages"].keys() == {"smoke/smoke"}
    gone = set(P.read_card(published["out"])["tables"]) - set(P.read_card(out)["tables"])
    assert all(not (out / t).exists() for t in gone)
    assert yaml.safe_load((out / "README.md").read_text().split("---\n")[1])["memspace"]["format"] == 1


def test_html_in_a_model_name_is_shown_in_the_card_never_rendered(tmp_path):
    st = Stage(tmp_path / "runs", "h")
    st.add("none", "q1")
    folder = st.write()
    info = json.loads((folder / "stage.json").read_text())
    info["model"]["model"] = "<img src=x onerror=alert(1)>"  # no plain name: withheld by the publish policy
    info["fidelity"] = {"rows": [{"key": "reader_model", "setting": "<img src=y onerror=alert(2)>", "paper": "a",
                                  "stage": "b", "status": "same", "detail": "", "pool": "b"}]}  # text: shown
    (folder / "stage.json").write_text(json.dumps(info))
    P.publish([folder], tmp_path / "ds", say=lambda s: None)
    body = (tmp_path / "ds" / "README.md").read_text().split("\n---\n", 1)[1]
    assert "<img" not in body and "&lt;img src=y onerror=alert(2)&gt;" in body
    assert "(&lt;withheld&gt;)" in body
    assert len(P.rebuild(tmp_path / "ds", tmp_path / "r")) == 1  # and the card still reads back


def test_inspect_logs_of_an_original_folder_name_the_data_file_not_its_path(planted, tmp_path):
    from inspect_ai.log import read_eval_log

    assert export_inspect.main([f"runs={planted}", f"out={tmp_path / 'logs'}"]) == 0
    (log,) = [read_eval_log(str(p)) for p in (tmp_path / "logs").glob("*.eval")]
    assert log.eval.dataset.name == "synth_tiny.json"


@pytest.mark.parametrize("edit", ["format", "card files"])
def test_a_crafted_format_or_card_block_is_refused_not_a_traceback(published, tmp_path, capsys, edit):
    ds = tmp_path / "ds"
    shutil.copytree(published["out"], ds)
    if edit == "format":  # an indent that would write a file of a billion spaces a line
        files = pq.read_table(ds / "files" / "train.parquet").to_pylist()
        row = next(f for f in files if f["format"] and "indent" in f["format"])
        row["format"] = json.dumps({"indent": 10**9, "ensure_ascii": False, "newline": True})
        _reseal(ds, "files", files)
        match = "a file format"
    else:
        meta = P.read_card(ds)
        counts = {t: pq.read_metadata(ds / t / "train.parquet").num_rows for t in meta["tables"]}
        (ds / "README.md").write_text(P.card_text({**meta, "files": [3]}, counts))  # a card written as ours is
        match = "are not what this harness writes (TypeError"
    assert A.main([f"runs={ds}", f"out={tmp_path / 'a'}", "replay=none"]) == 2
    err = capsys.readouterr().err
    assert match in err and "Traceback" not in err and not (tmp_path / "a").exists()


@pytest.mark.parametrize("url,kept", [
    ("https://hooks.slack.com/services/T000/B000/XXXXXXXX", "https://<host>/services/<key>"),
    ("https://discord.com/api/webhooks/123456789012345678/AbCdEf-GhIjKl_MnOpQrStUvWx", "https://<host>/api/webhooks/<key>"),
    ("https://api.telegram.org/bot123456:ABCdefGhIJKlmNoPQRsTUVwxyZ/sendMessage", "https://<host>/<key>"),
    ("https://example.com/reset/token/plainlettersonly/x", "https://<host>/reset/token/<key>"),
    ("https://example.com/files/a8Kq2mZ9xL4vB7nR", "https://<host>/files/<key>"),
    ("https://example.com/s/AbCdEfGhIjKlMnOpQrStUvWx", "https://<host>/s/<key>"),
    ("https://x.example/a?key=abc&token=zzz&sig=123", "https://<host>/a"),
    ("https://docs.python.org/3/library/json.html", "https://<host>/3/library/json.html"),
    ("https://example.com/recipes/chocolate-cake", "https://<host>/recipes/chocolate-cake")])
def test_a_secret_in_the_path_of_a_url_that_is_no_endpoint_is_redacted(url, kept):
    """A webhook's or a capability URL's secret sits in its path: from the first segment that could be one
    (a digit in a word, a long or case-mixed word, or what follows a segment named like a key or a hook) the
    rest of the path goes; a path of plain words stays. The last scan refuses such a path left unredacted."""
    text = privacy.Private().redact(f"post it to {url} now")
    assert text == f"post it to {kept} now"
    assert privacy.leaks(text) == []
    from urllib.parse import urlsplit

    old = f"post it to https://<host>{urlsplit(url).path} now"  # what went out before: the host alone replaced
    assert any("a secret in its path" in x for x in privacy.leaks(old)) == kept.endswith("<key>"), old


@pytest.mark.parametrize("edit", ["kept", "replaced"])
def test_a_card_whose_kept_or_replaced_block_disagrees_with_its_tables_is_refused(published, tmp_path, capsys, edit):
    """The card's `kept` (host names, pids) is what the rebuilt folders show and its `replaced` counts a kind of
    private string wherever the tables hold its placeholder: a card rewritten whole (header and body agreeing,
    as whoever crafts a dataset can write it) to say otherwise is refused."""
    ds = tmp_path / "ds"
    shutil.copytree(published["out"], ds)
    meta = P.read_card(ds)
    assert meta["replaced"]["keys"] >= 1 and meta["replaced"]["local paths"] >= 1 and meta["kept"] == []
    if edit == "kept":
        meta["kept"] = ["the host names that ran the stage (driver lock, sessions): elsewhere"]
        match = "the card's kept block"
    else:
        meta["replaced"] = {k: 0 for k in meta["replaced"]}
        match = "the card's replaced block says no endpoint urls were replaced, yet the tables hold <endpoint url>"
    counts = {t: pq.read_metadata(ds / t / "train.parquet").num_rows for t in meta["tables"]}
    (ds / "README.md").write_text(P.card_text(meta, counts))
    _every_reader_refuses(ds, tmp_path, capsys, match)


@pytest.mark.parametrize("named", ["../victim.txt", "mine/notes.txt", "../victim/train.parquet"])
def test_a_crafted_card_in_the_folder_does_not_make_publish_delete_what_it_did_not_write(published, tmp_path,
                                                                                          named):
    out = tmp_path / "ds"
    shutil.copytree(published["out"], out)
    victim = (out / named).resolve()
    victim.parent.mkdir(parents=True, exist_ok=True)
    victim.write_text("mine")
    meta = P.read_card(out)
    if named.endswith("/train.parquet"):  # a table's name that walks out
        meta["tables"] = {**meta["tables"], named.rsplit("/", 1)[0]: "0" * 64}
    else:
        meta["files"] = [*meta["files"], [named, P.sha256("mine")]]
    counts = {t: pq.read_metadata(published["out"] / t / "train.parquet").num_rows for t in P.read_card(out)["tables"]}
    (out / "README.md").write_text(P.card_text(meta, counts))
    P.publish(published["folders"], out, say=lambda s: None)
    assert victim.read_text() == "mine"
    assert named not in P._written_by(P.read_card(out)) and P.read_card(out)["tables"] == P.read_card(
        published["out"])["tables"]  # the new card is publish's own


@pytest.mark.parametrize("html_for", ["info", "commit"])
def test_a_hub_answering_with_an_html_page_is_a_failed_push_not_a_traceback(published, tmp_path, loopback_hub,
                                                                              capsys, html_for):
    """A proxy or a network's sign-in portal answers 200 with a page: exit 3, said, and what the Hub holds."""
    loopback_hub.html_for = html_for
    if html_for == "commit":
        loopback_hub.repos["me/results"] = {"private": True, "commits": []}
    code = publish_cli.main([f"runs={published['folders'][0]}", f"out={tmp_path / 'ds'}", "push=me/results",
                             f"endpoint={loopback_hub.url}"])
    err = capsys.readouterr().err
    assert code == 3 and "Traceback" not in err, err
    if html_for == "info":
        assert "failed while reading the repository's visibility" in err and "nothing was changed on the Hub" in err
    else:
        assert "failed while committing the dataset's files" in err
        assert "the Hub's answer could not be read: whether me/results holds this commit is unknown" in err


# ------------------------------------------------------------------------------ a received dataset is data


def test_a_received_config_gives_the_replay_no_place_and_no_interpolation(tmp_path, monkeypatch):
    """replay_config reads the stage's config.yaml as the record of what ran: the backend and its numbers and named
    choices; the cache, the services' addresses, paths and table names are this machine's, `${...}` never resolved."""
    from harness.run.replay import LOCAL_CACHE, REPO, replay_config

    monkeypatch.setenv("I43_PLANTED_DIR", str(tmp_path / "from-env"))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({
        "cache_dir": str(tmp_path / "outside"),
        "index": {"name": "redis_qe", "url": "redis://evil.example:6379", "index": "victim", "dim": 384,
                  "ef_runtime": 100, "hybrid_policy": "${oc.env:I43_PLANTED_DIR}", "port": 6379},
        "encoder": {"name": "minilm", "path": "${oc.env:I43_PLANTED_DIR}", "device": "cuda:7"}}))
    cfg = replay_config(tmp_path)
    assert cfg["cache_dir"] == LOCAL_CACHE
    assert cfg["index"] == {"name": "redis_qe", "dim": 384, "ef_runtime": 100}
    assert cfg["encoder"] == yaml.safe_load((REPO / "conf" / "encoder" / "minilm.yaml").read_text())
    assert "from-env" not in json.dumps(cfg) and "evil" not in json.dumps(cfg) and "victim" not in json.dumps(cfg)


def _memory_stage(tmp_path: Path) -> Path:
    """A synthetic-data stage (its data goes along) whose one run logged a memory search: the replay rebuilds it."""
    data_file = tmp_path / "cache" / "synth_tiny_seed0_q2.json"
    data_file.parent.mkdir(parents=True)
    questions = generate(0, "tiny")
    data_file.write_text(json.dumps(questions, ensure_ascii=False))
    st = Stage(tmp_path / "runs", "mem", data={"path": str(data_file), "sha256": sha256_file(data_file),
                                               "kind": "synth"},
               config_extra={"data": {"kind": "synth", "size": "tiny", "seed": 0, "path": str(data_file)},
                             "index": {"name": "fts5"}, "encoder": {"name": "minilm"}})
    qid = str(questions[0]["question_id"])
    log = {"kind": "search", "agent": "a0", "view": {"org": qid, "agent": "a0", "scope": "own"}, "units": [],
           "query": "hello", "k": 3, "scoring": "bm25"}
    st.add("tool_bm25", qid, tool_calls=1, tools=[{"log": log}])
    return st.write()


def test_analysing_a_received_dataset_takes_no_place_and_no_environment_from_its_config(tmp_path, monkeypatch):
    """A config.yaml row naming an outside cache, an outside index file and `${oc.env:...}` (hashes recomputed, as
    any uploader can): `make analyze` with the replay builds the space from this machine's defaults."""
    from tests.test_analysis import prereg_file

    ds = tmp_path / "ds"
    P.publish([_memory_stage(tmp_path)], ds, say=lambda s: None)
    outside = tmp_path / "outside"
    monkeypatch.setenv("I43_PLANTED_DIR", str(tmp_path / "from-env"))
    files = pq.read_table(ds / "files" / "train.parquet").to_pylist()
    row = next(f for f in files if f["path"] == "config.yaml")
    cfg = yaml.safe_load(row["content"])
    cfg.update(cache_dir=str(outside / "cache"), runs_dir="${oc.env:I43_PLANTED_DIR}",
               index={"name": "fts5", "path": str(outside / "index.db")},
               encoder={"name": "minilm", "path": "${oc.env:I43_PLANTED_DIR}/model"})
    row["content"] = yaml.safe_dump(cfg)
    row["sha256"], row["bytes"] = P.sha256(row["content"]), len(row["content"].encode())
    _reseal(ds, "files", files)
    cwd = tmp_path / "analyst"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    common = [f"prereg={prereg_file(tmp_path)}", "lenient=true"]
    assert A.main([f"runs={ds}", f"out={tmp_path / 'a'}", "replay=all", *common]) == 0
    assert not outside.exists() and not (tmp_path / "from-env").exists()
    assert (cwd / ".cache").is_dir()  # the space was built, in this machine's default cache (conf/config.yaml)


def test_a_small_table_that_decodes_to_far_more_than_its_size_is_refused(published, tmp_path, capsys):
    """A files table of a few KB whose repeated value decodes to 300 MiB: refused by the ratio to its size on disk,
    whatever the total allowed; within the ratio, the analyst's total (max_bytes) decides."""
    ds = tmp_path / "ds"
    shutil.copytree(published["out"], ds)
    value = "x" * (1 << 20)
    files = pq.read_table(ds / "files" / "train.parquet").to_pylist()
    _reseal(ds, "files", files + [dict(files[0], path=f"bomb/{i}.txt", table=None, format=None, content=value,
                                       sha256=P.sha256(value), bytes=len(value)) for i in range(300)])
    size = sum(p.stat().st_size for p in ds.glob("*/train.parquet"))
    assert size < 1 << 20
    with pytest.raises(P.PublishError, match="its tables decode .* to more than 64 MiB"):
        P.rebuild(ds, tmp_path / "r", max_bytes=8 << 30)
    assert not (tmp_path / "r").exists()
    assert A.main([f"runs={ds}", f"out={tmp_path / 'a'}", "replay=none"]) == 2
    assert "to more than 64 MiB" in capsys.readouterr().err
    assert P.decoded_limit(published["out"], P.read_card(published["out"]), max_bytes=1 << 20) == 1 << 20


@pytest.fixture
def gadget(tmp_path, monkeypatch):
    """A package importable here whose import plants a file: what `module: <it>` in a received record would run."""
    pkg = tmp_path / "gadgetpath" / "zqgadget"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "payload.py").write_text(f"import pathlib\npathlib.Path({str(tmp_path / 'PWNED')!r}).write_text('ran')\n"
                                    "def build(cfg, ctx):\n    return None\n")
    monkeypatch.syspath_prepend(str(tmp_path / "gadgetpath"))
    yield tmp_path / "PWNED"
    import sys

    for name in ("zqgadget.payload", "zqgadget"):
        sys.modules.pop(name, None)


@pytest.mark.parametrize("module", ["zqgadget.payload", "venv.__main__", "zqgadget"])
def test_a_record_naming_any_module_imports_nothing_whatever_reads_it(gadget, tmp_path, module):
    """conditions.load is the one point code is loaded by name, and it only hands out registered modules: a
    record's `module` that no local registration names is unknown data for analyze, view and the results page."""
    import sys

    import conditions

    with pytest.raises(ModuleNotFoundError, match="is registered"):
        conditions.load(module)
    st = Stage(tmp_path / "runs", "smoke")
    st.add("tool_bm25", "q1", module=module, tool_calls=1, tools=[{}])
    folder = st.write()
    ds = tmp_path / "ds"
    P.publish([folder], ds, say=lambda s: None)
    assert all(r["module"] != module for r in pq.read_table(ds / "runs" / "train.parquet").to_pylist())
    # the policy publishes only a registered name; an uploader's own harness may have registered it
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(conditions.CONDITIONS, "names", lambda: [module])
        P.publish([folder], ds, say=lambda s: None)
    assert all(r["module"] == module for r in pq.read_table(ds / "runs" / "train.parquet").to_pylist())
    cwd = tmp_path / "analyst"
    cwd.mkdir()
    with contextlib.chdir(cwd):
        assert A.main([f"runs={folder}", f"out={tmp_path / 'a0'}", "replay=none", "lenient=true"]) == 0
        assert A.main([f"runs={ds}", f"out={tmp_path / 'a'}", "replay=none", "lenient=true"]) == 0
        P._REBUILT.clear()
        export_inspect.main([f"runs={ds}", f"out={tmp_path / 'logs'}"])
        P._REBUILT.clear()
        results_page.main([f"datasets={ds}", f"out={tmp_path / 'page'}"])
        P._REBUILT.clear()
    assert not gadget.exists() and "zqgadget.payload" not in sys.modules
    assert list(cwd.iterdir()) == []  # venv.__main__ made a virtualenv here


@pytest.mark.parametrize("how", ["absolute", "climbing"])
def test_a_received_judge_name_picks_no_file_outside_the_local_presets(tmp_path, how):
    """config.yaml `judge.name: /tmp/x/evilprices` (or `../../x/evilprices`) made the cost table read that yaml's
    prices: a name from a dataset is looked up among conf/judge's presets only, else unknown."""
    from analysis.load import REPO, judge_prices_from_conf

    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / "evilprices.yaml").write_text("model: evil-model\nprices: {hit: 777.0, miss: 777.0, output: 777.0}\n")
    name = str(evil / "evilprices") if how == "absolute" else \
        os.path.relpath(evil / "evilprices", REPO / "conf" / "judge")
    assert judge_prices_from_conf(name) is None
    assert privacy.local_preset("judge", "deepseek") == REPO / "conf" / "judge" / "deepseek.yaml"  # a preset name
    assert privacy.local_preset("judge", name) is None and privacy.local_preset("judge", "../model/vllm") is None
    st = Stage(tmp_path / "runs", "smoke")
    for q in ("q1", "q2"):
        r = st.add("tool_bm25", q, judged=False)
        st.judge_call(r["run_id"], 500, 5)
    ds = tmp_path / "ds"
    P.publish([st.write()], ds, say=lambda s: None)
    files = pq.read_table(ds / "files" / "train.parquet").to_pylist()
    row = next(f for f in files if f["path"] == "config.yaml")
    cfg = yaml.safe_load(row["content"])
    cfg["judge"] = {"name": name}
    row["content"] = yaml.safe_dump(cfg)
    row["sha256"], row["bytes"] = P.sha256(row["content"]), len(row["content"].encode())
    _reseal(ds, "files", files)
    out = tmp_path / "a"
    assert A.main([f"runs={ds}", f"out={out}", "replay=none", "lenient=true"]) == 0
    written = " ".join(p.read_text() for p in out.rglob("*") if p.suffix in (".csv", ".md", ".json"))
    assert "777.0" not in written and "evil-model" not in written


def test_a_value_that_decompresses_past_the_bound_is_refused_before_it_is_decoded(published, tmp_path, capsys):
    """One 80 MiB value in a zstd page of a few KB (no dictionary): its page header's uncompressed size is read
    before the page is decompressed and refused there (it was decoded first: 1.66 GiB RSS for 512 MiB)."""
    ds = tmp_path / "ds"
    shutil.copytree(published["out"], ds)
    path = ds / "files" / "train.parquet"
    files = pq.read_table(path).to_pylist()
    value = "x" * (80 << 20)
    files.append(dict(files[0], path="bomb.txt", table=None, format=None, content=value, sha256=P.sha256(value),
                      bytes=len(value)))
    pq.write_table(pa.Table.from_pylist(files, schema=pq.read_schema(path)), path, compression="zstd",
                   use_dictionary=False)
    del files, value
    card = (ds / "README.md").read_text()
    (ds / "README.md").write_text(card.replace(P.read_card(ds)["tables"]["files"], P.sha256(path.read_bytes())))
    assert path.stat().st_size < 1 << 20
    assert P._declared_bytes(path, pq.ParquetFile(path)) >= 80 << 20
    with pytest.raises(P.PublishError, match=r"its tables declare \(table 'files'"):
        P.rebuild(ds, tmp_path / "r", max_bytes=8 << 30)
    assert not (tmp_path / "r").exists()
    plain = published["out"] / "files" / "train.parquet"  # what the harness writes passes, its figure its pages'
    assert 0 < P._declared_bytes(plain, pq.ParquetFile(plain)) < 1 << 20
