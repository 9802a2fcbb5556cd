"""The cost forecast of `dry_run=true`: from the data when no pilot exists, from a pilot when one does."""


from omegaconf import OmegaConf

from harness.run.forecast import CHARS_PER_TOKEN, OUTPUT_TOKENS, _conversation
from tests import cli
from tests.fake_model import FakeModel
from tests.test_driver import cmd, records
from tests.test_typed_settings import composed


def test_a_loop_counts_every_earlier_prompt_as_cache_hits():
    hit, miss, out = _conversation(4000, 3, 800)  # prompts of 1000, 1260, 1520 tokens
    assert (hit, miss, out) == (1000 + 1260, 1520, 3 * OUTPUT_TOKENS)
    assert _conversation(400, 1, 5000) == (0.0, 400 / CHARS_PER_TOKEN, OUTPUT_TOKENS)


def forecast_lines(out: str) -> dict[str, list[str]]:
    start = out.index("cost forecast")
    rows = {}
    for line in out[start:].splitlines()[2:]:
        parts = line.split()
        if len(parts) > 6 and parts[1].isdigit():
            rows[parts[0]] = parts
    return rows


def test_forecast_from_a_pilot_matches_the_metered_stage(tmp_path):
    prices = ["model.prices.hit=100", "model.prices.miss=1000", "model.prices.output=2000"]
    with FakeModel() as fake:
        dry = cli.run(cmd(fake, tmp_path, *prices, "dry_run=true"), capture_output=True, text=True, timeout=120)
        assert dry.returncode == 0, dry.stderr
        assert "from the data's prompt sizes" in dry.stdout
        # a pilot of the same model on the same plan, then the forecast reads it
        pilot = cli.run(cmd(fake, tmp_path, *prices, "stage.name=pilot", "stage.label=p"),
                               capture_output=True, text=True, timeout=300)
        assert pilot.returncode == 0, pilot.stderr
        dry = cli.run(cmd(fake, tmp_path, *prices, "dry_run=true"), capture_output=True, text=True, timeout=120)
        assert "from pilot stage" in dry.stdout, dry.stdout
        rows = forecast_lines(dry.stdout)
        res = cli.run(cmd(fake, tmp_path, *prices), capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
    recs = records(tmp_path)
    for cond in ("none", "full"):
        mine = [r for r in recs.values() if r["condition"] == cond]
        calls = sum(r["model_calls"] for r in mine)
        tokens = sum(r["tokens"]["prompt"] for r in mine)
        cost = sum(r["cost_list"] for r in mine)
        row = rows[cond]
        assert int(row[1]) == len(mine) and int(row[2].replace(",", "")) == calls
        assert int(row[3].replace(",", "")) == tokens  # the fake model's usage is deterministic
        assert abs(float(row[5]) - cost) < 1e-4
        assert row[7] == "pilot"


def test_full_context_forecast_grows_with_the_history():
    from harness.run.forecast import _from_data
    from harness.data.longmemeval import Question, Session, Turn
    from datetime import datetime

    def q(n_chars):
        s = Session("s1", datetime(2023, 1, 1), (Turn("user", "x" * n_chars),))
        return Question("q", "multi-session", "why?", "a", datetime(2023, 1, 2), (s,))

    cfg = OmegaConf.create({"module": "full"})
    small = _from_data("full", cfg, ["q"], {"q": q(1000)}, 500)
    big = _from_data("full", cfg, ["q"], {"q": q(101_000)}, 500)
    assert big.miss - small.miss == 100_000 / CHARS_PER_TOKEN and big.calls == small.calls == 1


def test_a_forecast_with_a_keyword_only_option_is_not_handed_the_question(tmp_path, monkeypatch):
    """forecast(settings, *, detail=False) was called forecast(settings, question): a TypeError in the dry run."""
    from harness.run.forecast import reads_question, shape

    (tmp_path / "auditkw").mkdir()
    (tmp_path / "auditkw" / "__init__.py").write_text("")
    (tmp_path / "auditkw" / "toy.py").write_text(
        "def forecast(cfg, *, detail=False):\n    return {'calls': 5}\n\ndef build(cfg, ctx):\n    return None\n"
        "import conditions\nconditions.register('auditkw/toy')\n")
    (tmp_path / "auditkw" / "toyq.py").write_text(
        "def forecast(cfg, question=None):\n    return {'calls': 7 if question is None else 2}\n\n"
        "def build(cfg, ctx):\n    return None\nimport conditions\nconditions.register('auditkw/toyq')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("MEMSPACE_PLUGINS", "auditkw.toy,auditkw.toyq")  # a condition loads by its registered name
    import importlib

    kw, q = importlib.import_module("auditkw.toy"), importlib.import_module("auditkw.toyq")
    assert not reads_question(kw.forecast) and reads_question(q.forecast)
    question = object()
    assert shape(OmegaConf.create({"module": "auditkw/toy", "access": "x"}), question)["calls"] == 5
    assert shape(OmegaConf.create({"module": "auditkw/toyq", "access": "x"}), question)["calls"] == 2
    assert shape(OmegaConf.create({"module": "auditkw/toyq", "access": "x"}))["calls"] == 7


def test_full_is_forecast_from_its_questions_histories_and_says_so():
    """docs/extending.md: `full` puts the whole history in the prompt and the source column says
    `data (its questions' histories)` for it; the row said `typical conversation shape`."""
    from harness.run.forecast import _from_data
    from tests.test_typed_settings import _question

    cfg = composed("stage=smoke").stage.conditions["full"]
    short, long = (_from_data("full", cfg, ["q"], {"q": _question(n, 20)}, 500) for n in (100, 900))
    assert long.miss > short.miss
    assert short.source == "data (its questions' histories)"
