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
