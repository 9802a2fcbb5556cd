"""The README is read in ten minutes and leads to the rest; every link resolves; the glossary defines
the shorthand the code and the reports use."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
# every guide the README's "where things are" must link (each topic's own page)
GUIDES = {"docs/personal-schedule.md", "docs/paper-preset.md", "docs/session-search.md", "docs/failures.md",
          "docs/trust.md", "docs/publishing.md", "docs/cluster.md"}


def links(path: Path) -> list[str]:
    return [m for m in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text(encoding="utf-8"))
            if not m.startswith(("http://", "https://"))]


def test_the_readme_is_short_and_has_what_a_newcomer_looks_for():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    heads = [h.lower() for h in re.findall(r"^## (.+)$", text, flags=re.M)]
    for want in ("set up", "first study", "second study", "backend study", "changing the model or the judge",
                 "extending", "where things are"):
        assert any(want in h for h in heads), (want, heads)
    assert "make run STAGE=smoke" in text and "make test" in text
    assert re.search(r"make setup` \d+ min", text) and "SMOKE_TIME" not in text  # the measured times are filled in


def test_every_link_of_the_readme_and_the_docs_resolves():
    for doc in [README, *sorted((REPO / "docs").glob("*.md"))]:
        for target in links(doc):
            path = (doc.parent / target).resolve()
            rel = str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)
            assert path.exists(), f"{doc.relative_to(REPO)} links to {rel}, which does not exist"


def test_every_doc_is_listed_in_the_index_and_reachable_from_the_readme():
    index = {str((REPO / "docs" / t).resolve().relative_to(REPO)) for t in links(REPO / "docs" / "README.md")}
    readme = {str((REPO / t).resolve().relative_to(REPO)) for t in links(README)}
    docs = {f"docs/{p.name}" for p in (REPO / "docs").glob("*.md") if p.name != "README.md"}
    assert docs <= index and docs <= readme | {"docs/README.md"} | index
    assert GUIDES <= readme  # each topic's guide is linked from "where things are"


def test_the_glossary_defines_every_hypothesis_and_the_papers_shorthand():
    text = (REPO / "docs" / "glossary.md").read_text(encoding="utf-8")
    prereg = yaml.safe_load((REPO / "conf" / "prereg" / "hypotheses.yaml").read_text(encoding="utf-8"))
    ids = [h["id"] for h in prereg["hypotheses"]]
    assert ids and all(f"| {i} |" in text for i in ids), [i for i in ids if f"| {i} |" not in text]
    for term in ("SS-U", "SS-A", "SS-P", "Org", "Proposition 1", "Proposition 2", "Proposition 3", "Proposition 4",
                 "Appendix F", "(vi)", "Phase 1 / Phase 2", "write barrier"):
        assert term in text, term


def test_the_readmes_offline_dry_runs_work_verbatim_on_a_clone_without_downloads(tmp_path):
    """Every `python -m harness.run ... dry_run=true` line of the README, as written (the venv's python is this
    one), from a folder holding nothing: exit 0, a plan, nothing written (no data downloaded, no run folder)."""
    import os
    import shlex
    import subprocess
    import sys

    lines = [ln.split("#")[0].strip() for ln in README.read_text(encoding="utf-8").splitlines()
             if ln.startswith(".venv/bin/python -m harness.run ") and "dry_run=true" in ln]
    assert len(lines) >= 2, lines
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for line in lines:
        argv = shlex.split(line)
        res = subprocess.run([sys.executable, *argv[1:]], cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=600)
        assert res.returncode == 0, (line, res.stderr[-2000:])
        assert "dry run: nothing started" in res.stdout, (line, res.stdout[-1500:])
        assert not any(tmp_path.iterdir()), (line, sorted(p.name for p in tmp_path.iterdir()))


def test_every_link_of_the_readme_and_the_docs_resolves_without_exceptions():
    """Every branch is merged: a link to a file 'written elsewhere' that never came is a dead link."""
    dead = [f"{doc.relative_to(REPO)} -> {t}" for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
            for t in links(doc) if not (doc.parent / t).exists()]
    assert not dead, dead


def test_the_readmes_second_study_commands_pass_their_own_preflight_on_every_model(tmp_path):
    """The README's `make run|judge STAGE=personal_paper ...` lines (the commented one declaring another judge
    too), each as its dry run: the stage file's sweep reaches all three of the paper's models, the paper's judge
    passes its gate, and another judge passes only because the line declares it (refused, exit 2, without)."""
    import os
    import shlex

    from tests import cli

    lines = [ln.lstrip("# ").split(": ", 1)[-1] for ln in (REPO / "README.md").read_text(encoding="utf-8").splitlines()
             if "make run STAGE=personal_paper" in ln or "make judge STAGE=personal_paper" in ln]
    assert len(lines) == 3, lines
    env = {**os.environ, "OPENAI_API_KEY": "unused-in-a-dry-run"}

    def dry(line: str, *extra: str):
        words = shlex.split(line.split(" #")[0])
        make = dict(w.split("=", 1) for w in words[2:] if "=" in w)
        module = {"run": "harness.run", "judge": "judge.run"}[words[1]]
        return cli.run([sys.executable, "-m", module, f"stage={make['STAGE']}", "dry_run=true", f"runs_dir={tmp_path}",
                        f"cache_dir={tmp_path / 'cache'}", *shlex.split(make.get("ARGS", "")), *extra], env=env,
                       cwd=REPO, capture_output=True, text=True, timeout=300)

    for line in lines:
        res = dry(line)
        assert res.returncode == 0, (line, res.stdout[-1500:], res.stderr[-1500:])
        if line.startswith("make run"):
            for model in ("gpt-4o", "llama3.1:8b", "qwen2.5:7b"):  # one job per model of the sweep
                assert f"stage personal  label {model}" in res.stdout, (model, res.stdout[-3000:])
    declared = next(ln for ln in lines if "allow_deviation" in ln)
    undeclared = dry(declared.replace("allow_deviation=[judge_model]", ""))
    assert undeclared.returncode == 2 and "not the paper's judge" in undeclared.stdout + undeclared.stderr
