"""The tests' scripted OpenAI-compatible server: bench/fake_upstream.py's FakeModel (one fake upstream
for the tests and the rehearsal); kept as a module because many tests import it from here."""

from bench.fake_upstream import FakeModel, ScriptedUpstream, prompt_tokens  # noqa: F401
