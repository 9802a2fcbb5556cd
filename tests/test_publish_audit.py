"""Publishing, audited from outside (issue 35's claims, docs/publishing.md): each test is an attack that
got through before its fix. Safe to share: a PEM key's body, a key under a header's name (`x-api-key`), a URL
written with JSON's or YAML's escapes, a file URL's path, a folder name of several words, a user's folder under
a system folder, an Org stage's data before its first record. Safe to receive: a card or a cell nested past
the recursion limit, a file name longer than the file system takes, a file where the data folder goes, files
beside the card it does not name, a symlink loop, a row twice in a table, values that decode past the bound.
Pushing and republishing: a Hub answering with an HTML page; a crafted card in the folder must not make
publish delete what it did not write.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analysis import export_inspect
from analysis import publish as P
from analysis import results_page
from analysis import run as A
from harness.cli import publish as publish_cli
from harness.records import privacy
from tests.analysis_fixtures import Stage
from tests.test_publish import loopback_hub, published  # noqa: F401  (fixtures)
from tests.test_publish_safety import _every_reader_refuses, _published_bytes

PEM_BODY = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw"
PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n7YhUSqUr0ZMuWs4Q\n-----END RSA PRIVATE KEY-----"


# ------------------------------------------------------------------------------ safe to share


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


# ------------------------------------------------------------------------------ safe to receive


def _reseal(ds: Path, table: str, rows: list[dict]) -> None:
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
    _reseal(ds, "runs", runs)
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
    _reseal(ds, "files", files + [dict(files[0], path=f"bomb/{i}.txt", table=None, format=None, content=value,
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
    _reseal(ds, "files", files + [row])


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


# ------------------------------------------------------------------------------ publishing into a folder again


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


# ------------------------------------------------------------------------------ push


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
