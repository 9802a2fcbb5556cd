"""judge.agreement and judge.probe check LongMemEval's answer check; on a stage of another study (the
personalization study, judged by its rubric) they stop with exit 2 and say what checks that study's judge,
before reading a record or sending anything."""

from __future__ import annotations
import sys

import pytest

from tests import cli
from tests.fake_model import FakeModel


@pytest.mark.parametrize("module,extra", [("judge.agreement", ["+judge@judge2=vllm", "judge2.model=k"]),
                                          ("judge.probe", []), ("judge.agreement", ["dry_run=true",
                                                                                    "+judge@judge2=vllm"])])
def test_agreement_and_probe_on_a_personal_stage_refuse_it_naming_what_to_use(tmp_path, module, extra):
    from tests.personal_helpers import fake_folder

    fake_folder(tmp_path / "runs", "personal_smoke", "smoke", {"name": "vllm", "model": "m"},
                [{"condition": "naive_concat", "trial_id": "t0000", "llm": {"profile": 3, "task": 3, "integration": 3}}])
    with FakeModel(script=lambda req: {"role": "assistant", "content": "Yes"}) as fake:
        res = cli.run([sys.executable, "-m", module, "stage=personal_smoke", f"runs_dir={tmp_path}/runs",
                              f"cache_dir={tmp_path}/cache", "judge=vllm", f"judge.base_url={fake.base_url}",
                              "judge.model=j", *extra] + ([f"judge2.base_url={fake.base_url}"] if extra else []),
                             capture_output=True, text=True, timeout=120)
        assert fake.requests == []
    assert res.returncode == 2, res.stderr[-1500:]
    err = res.stderr
    assert "Traceback" not in err and "KeyError" not in err
    assert "personal" in err and "rubric" in err and "analysis.personal.validation" in err, err
    assert "make judge STAGE=personal_smoke" in err, err


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
