"""One exit-code mapping (harness/failures.py): every failure class of the harness maps to the code its commands
exit with (2 bad input, 3 stopped on the environment, 4 budget), in one place."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "conditions", "judge", "analysis", "bench", "hydra_plugins")


def test_one_exit_code_mapping():
    from harness.failures import BAD_INPUT, BUDGET, STOPPED, EnvironmentFailure, exit_code
    from harness.data.longmemeval import DataError
    from harness.data.samples import SampleError
    from harness.records import StageMismatch
    from harness.records.schema import RecordError
    from harness.records.shards import ShardBusy, ShardError
    from harness.run.budget import BudgetReached
    from harness.run.driver import StageStopped
    from harness.run.plan import PlanError
    from judge.prompts import PromptFileError

    for cls in (DataError, SampleError, PlanError, StageMismatch, RecordError, ShardError, PromptFileError):
        assert getattr(cls, "exit_code") == BAD_INPUT, cls
    for cls in (EnvironmentFailure, ShardBusy, StageStopped):
        assert getattr(cls, "exit_code") == STOPPED, cls
    assert BudgetReached.exit_code == BUDGET
    assert exit_code(EnvironmentFailure("x", "y")) == STOPPED and exit_code(BudgetReached("cap")) == BUDGET
    assert exit_code(ValueError("a bug")) is None and exit_code(KeyError("a bug")) is None
    # no command keeps its own except ladder: the codes are spelled only in harness/failures.py
    sources = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))
               if p != ROOT / "harness" / "failures.py"]
    ladders = [str(p.relative_to(ROOT)) for p in sources
               for code in ("sys.exit(2)", "sys.exit(3)", "sys.exit(4)") if code in p.read_text(encoding="utf-8")]
    assert not ladders, ladders


def test_every_judging_command_on_a_stage_without_records_exits_2_with_one_sentence(tmp_path):
    """`make judge`, `make agreement` and `make probe` on a stage that has not run: bad input (exit 2), one `error:`
    line naming the folder and what to run, no traceback (agreement and probe exited 1 through SystemExit)."""
    import sys

    from tests import cli

    for module, extra in (("judge.run", []), ("judge.agreement", ["+judge@judge2=deepseek"]), ("judge.probe", [])):
        res = cli.run([sys.executable, "-m", module, "stage=smoke", f"runs_dir={tmp_path / 'runs'}",
                       f"cache_dir={tmp_path / 'cache'}", *extra])
        assert res.returncode == 2, (module, res.returncode, res.stderr[-2000:])
        errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "has no records" in errors[0] and "Traceback" not in res.stderr, (module, res.stderr)
