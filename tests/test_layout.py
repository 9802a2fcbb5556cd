"""The tests folder by concept: each test module opens with a docstring saying the concept it checks, and no test's
name is defined in two modules (two modules testing one thing under one name is one concept split in two)."""

import ast
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_every_test_module_says_its_concept_and_no_test_name_lives_in_two_modules():
    where: dict[str, list[str]] = defaultdict(list)
    silent = []
    for path in sorted(TESTS.glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if not (ast.get_docstring(tree) or "").strip():
            silent.append(path.name)
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                where[node.name].append(path.name)
    assert not silent, f"test modules without a docstring naming their concept: {silent}"
    twice = {name: files for name, files in where.items() if len(files) > 1}
    assert not twice, f"one test name in several modules: {twice}"
