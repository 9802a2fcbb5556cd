"""The import graph has no back-edges (docs/architecture.md: the dependency order).

Every module of the project's packages imports; the imports, function-level ones included, form
no cycle of any length (a registry's "module:function" string and a constant import_module, under
any alias or bound name, are imports too, and importing a module imports the packages above it); no
import runs against docs/architecture.md's dependency order (LAYERS, read from that file: a lower layer
never imports a higher one); the judge never imports the command line; a judge module never imports
another judge module's private (underscore) name; and the kernel's conditions only build on
harness.kernel. Imports are read with ast, so the graph is the source's, not what a test run happened
to load.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "conditions", "judge", "analysis", "bench", "hydra_plugins")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


# "package.module:function": how a registry names a step it imports when used (harness/studies/): an import
NAMED = re.compile(r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):[A-Za-z_]\w*$")


def _imports(name: str, top_level_only: bool) -> list[tuple[str, list[str], int]]:
    """(imported module, names taken from it, line) for each import statement of module `name`, and for each
    import the source spells as data: a "module:function" string, importlib.import_module("<constant>")."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"), str(MODULES[name]))
    package = name if _is_package(name) else name.rpartition(".")[0]
    out = []
    # import_module under another name (`from importlib import import_module as load`), and the strings a name
    # is bound to anywhere in the module (`TARGET = "a.b"; import_module(TARGET)`): read as the call reads them
    loaders = {a.asname for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "importlib"
               for a in n.names if a.name == "import_module" and a.asname}
    loaders |= {f"{a.asname}.import_module" for n in ast.walk(tree) if isinstance(n, ast.Import)
                for a in n.names if a.name == "importlib" and a.asname}
    bound = {t.id: n.value.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
             and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
             for t in n.targets if isinstance(t, ast.Name)}

    def constant(node):
        if isinstance(node, ast.Constant):
            return node.value
        return bound.get(node.id) if isinstance(node, ast.Name) else None

    def visit(node, nested: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                if not top_level_only:
                    visit(child, True)
                continue
            if isinstance(child, ast.If) and ast.unparse(child.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
                for other in child.orelse:  # only the body is never executed; `else:` and `not TYPE_CHECKING` are
                    visit(ast.Module(body=[other], type_ignores=[]), nested)
                continue
            if isinstance(child, ast.Constant) and isinstance(child.value, str) and (m := NAMED.match(child.value)):
                out.append((m.group(1), [], child.lineno))  # "module:function": a registry's step, imported when used
            elif isinstance(child, ast.Call) and (ast.unparse(child.func).endswith(("import_module", "__import__"))
                                                  or ast.unparse(child.func) in loaders) \
                    and child.args and isinstance(constant(child.args[0]), str):
                target = constant(child.args[0])
                anchor = child.args[1] if len(child.args) > 1 else None  # import_module(".x", "package")
                if target.startswith(".") and isinstance(constant(anchor), str):
                    dots = len(target) - len(target.lstrip("."))
                    base = constant(anchor).split(".")
                    target = ".".join(base[: len(base) - (dots - 1)] + [target.lstrip(".")])
                out.append((target, [], child.lineno))
            if isinstance(child, ast.Import):
                out.extend((a.name, [], child.lineno) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")
                    base = base[: len(base) - (child.level - 1)]
                    mod = ".".join(base + ([child.module] if child.module else []))
                else:
                    mod = child.module or ""
                out.append((mod, [a.name for a in child.names], child.lineno))
            visit(child, nested)

    visit(tree, False)
    return out


def _edges(name: str, top_level_only: bool) -> set[str]:
    """The project modules `name` imports: `from a import b` is a.b when that is a module, else a; and the
    packages above each (importing a.b.c runs a/__init__.py and a/b/__init__.py first), but for `name`'s own."""
    out = set()
    for mod, names, _ in _imports(name, top_level_only):
        subs = [f"{mod}.{n}" for n in names if f"{mod}.{n}" in MODULES]
        out.update(subs)
        if mod in MODULES and (not names or len(subs) < len(names)):
            out.add(mod)
    own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 2)}
    out |= {p for e in list(out) for i in range(1, e.count(".") + 1)
            if (p := ".".join(e.split(".")[:i])) in MODULES and p not in own}
    out.discard(name)
    return out


# docs/architecture.md's dependency order, lowest first (its ```layers block). `python -m` entry points
# (__main__) compose the steps of their package as the command line does, so they sit with it.
def _layers() -> tuple[tuple[str, ...], ...]:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = re.search(r"```layers\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md has no ```layers block"
    rows = [line.partition(":") for line in block.group(1).splitlines() if line.strip()]
    assert [int(n) for n, _, _ in rows] == list(range(len(rows))), "layers are numbered 0, 1, 2 ... in order"
    return tuple(tuple(pkgs.split()) for _, _, pkgs in rows)


LAYERS = _layers()


def package_of(module: str) -> tuple[str, int]:
    """The LAYERS package a module belongs to (the longest prefix) and its layer; __main__: the command line."""
    if module.endswith(".__main__") or module == "__main__":
        return "harness.cli", len(LAYERS) - 1
    best = ("", -1)
    for i, layer in enumerate(LAYERS):
        for pkg in layer:
            # `pkg.*`: the modules below pkg, not pkg itself (the study kinds above their registry)
            hit = module.startswith(pkg[:-1]) if pkg.endswith(".*") else module == pkg or module.startswith(pkg + ".")
            if hit and len(pkg) > len(best[0]):
                best = (pkg, i)
    assert best[1] >= 0, f"{module} belongs to no layer of docs/architecture.md's order: add its package there"
    return best


def _package_edges() -> dict[tuple[str, str], list[str]]:
    """(importing package, imported package) -> the imports behind it, function-level ones included."""
    out: dict[tuple[str, str], list[str]] = {}
    for m in MODULES:
        a = package_of(m)[0]
        for e in sorted(_edges(m, top_level_only=False)):
            b = package_of(e)[0]
            if a != b:
                out.setdefault((a, b), []).append(f"{m} -> {e}")
    return out


def test_no_import_runs_against_the_dependency_order():
    up = [why for (a, b), whys in _package_edges().items() if package_of(a)[1] < package_of(b)[1]
          for why in whys]
    assert not up, "imports from a lower layer to a higher one (docs/architecture.md):\n" + "\n".join(up)


def test_the_layer_check_sees_function_level_imports(tmp_path):
    """The check is not vacuous: a function-level import from the ground floor up is an edge it reports."""
    src = "def f():\n    from analysis import stats\n    return stats\n"
    MODULES["harness.records._probe"] = tmp_path / "probe.py"
    (tmp_path / "probe.py").write_text(src)
    try:
        assert "analysis.stats" in _edges("harness.records._probe", top_level_only=False)
        assert "analysis.stats" not in _edges("harness.records._probe", top_level_only=True)
        assert package_of("harness.records._probe")[1] < package_of("analysis.stats")[1]
        assert package_of("harness.data.__main__")[0] == "harness.cli"
        # only the body of `if TYPE_CHECKING:` never runs
        (tmp_path / "probe.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from analysis import stats\n")
        assert "analysis.stats" not in _edges("harness.records._probe", top_level_only=False)
        # a registry's "module:function" step is an import edge like any other
        (tmp_path / "probe.py").write_text('STEP = "analysis.stats:mean"\n')
        assert "analysis.stats" in _edges("harness.records._probe", top_level_only=True)
        # importing a module runs the packages above it first: an edge to each (but the importer's own)
        (tmp_path / "probe.py").write_text("def f():\n    from analysis.tables import common\n")
        assert {"analysis.tables.common", "analysis.tables", "analysis"} <= _edges("harness.records._probe", False)
        assert "harness.records" not in _edges("harness.records._probe", False)
        # the study kinds sit above what they name; their registry stays below the driver that reads it
        assert package_of("harness.studies")[1] < package_of("analysis.run")[1] < package_of("harness.studies.agents")[1]
    finally:
        del MODULES["harness.records._probe"]


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(sorted(MODULES)), st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True),
       st.sampled_from(["STEP = {s!r}\n", "def f():\n    return {s!r}\n", "register(Study(run={s!r}))\n",
                        "def f():\n    import importlib\n    return importlib.import_module({m!r})\n",
                        "def f():\n    import importlib\n    return importlib.import_module('.{last}', {pkg!r})\n",
                        "def f():\n    return __import__({m!r})\n",
                        "from importlib import import_module as load\ndef f():\n    return load({m!r})\n",
                        "import importlib as il\ndef f():\n    return il.import_module({m!r})\n",
                        "TARGET = {m!r}\ndef f():\n    import importlib\n    return importlib.import_module(TARGET)\n",
                        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    pass\nelse:\n    import {m}\n",
                        "from typing import TYPE_CHECKING\nif not TYPE_CHECKING:\n    import {m}\n"]))
def test_a_module_named_as_data_is_an_edge(tmp_path_factory, target, fn, shape):
    """Whatever project module a "module:function" string, a constant import_module or __import__ names (under
    an alias, or through a name bound to the string), or an import that runs beside TYPE_CHECKING (its `else:`,
    `if not TYPE_CHECKING`), is an edge."""
    path = tmp_path_factory.mktemp("probe") / "probe.py"
    pkg, _, last = target.rpartition(".")
    if "{last}" in shape and not pkg:
        shape = "def f():\n    import importlib\n    return importlib.import_module({m!r})\n"
    path.write_text(shape.format(s=f"{target}:{fn}", m=target, pkg=pkg, last=last))
    MODULES["harness.records._probe"] = path
    try:
        assert target in _edges("harness.records._probe", top_level_only=False) or target == "harness.records._probe"
    finally:
        del MODULES["harness.records._probe"]


@pytest.mark.parametrize("name", [m for m in MODULES if not m.endswith("__main__")])
def test_every_module_imports(name):
    importlib.import_module(name)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan, iterative): each holds a cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in graph:
                    continue
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_import_graph_has_no_cycle_of_any_length_function_level_imports_included():
    """A cycle is one idea split across files, however many and however deep the imports sit."""
    graph = {m: _edges(m, top_level_only=False) for m in MODULES}
    found = cycles(graph)
    assert not found, "import cycles (function-level imports included): " + "; ".join(
        " -> ".join(c) + "  [" + ", ".join(f"{a} -> {b}" for a in c for b in sorted(graph[a]) if b in c) + "]"
        for c in found)


def test_the_cycle_check_finds_a_three_module_cycle_through_function_level_imports(tmp_path):
    """Not vacuous: the shape that once passed (fidelity -> rubric -> preflight -> fidelity, every edge
    inside a function) is reported; the same chain left open is not."""
    names = ["harness.run._probe_a", "judge._probe_b", "harness.run._probe_c"]
    for i, name in enumerate(names):
        nxt = names[(i + 1) % len(names)].rpartition(".")
        (tmp_path / f"{i}.py").write_text(f"def f():\n    from {nxt[0]} import {nxt[2]}\n    return {nxt[2]}\n")
        MODULES[name] = tmp_path / f"{i}.py"
    try:
        graph = {m: _edges(m, top_level_only=False) for m in names}
        assert cycles(graph) == [sorted(names)]
        assert not any(_edges(m, top_level_only=True) for m in names)  # no edge at module level at all
        graph[names[-1]] = set()
        assert cycles(graph) == []
    finally:
        for name in names:
            del MODULES[name]


def test_the_judge_never_imports_the_command_line():
    bad = [(m, mod, line) for m in MODULES if m == "judge" or m.startswith("judge.")
           for mod, _, line in _imports(m, top_level_only=False)
           if mod == "harness.cli" or mod.startswith("harness.cli.")]
    assert not bad, f"judge modules importing harness.cli: {bad}"


def test_no_judge_module_takes_another_judge_modules_private_name():
    bad = [(m, mod, n, line) for m in MODULES if m.startswith("judge.")
           for mod, names, line in _imports(m, top_level_only=False)
           if mod.startswith("judge.") and mod != m for n in names if n.startswith("_")]
    assert not bad, f"private names across judge modules: {bad}"


def test_only_the_command_line_composes_it():
    """Nothing below harness.cli imports it, except the `python -m harness.run` entry point."""
    bad = [(m, mod, line) for m in MODULES if not m.startswith("harness.cli") and m != "harness.run.__main__"
           for mod, _, line in _imports(m, top_level_only=False)
           if mod == "harness.cli" or mod.startswith("harness.cli.")]
    assert not bad, f"modules importing the command line: {bad}"


def test_the_kernel_conditions_build_on_the_kernel_package():
    for cond in ("conditions.kernel", "conditions.personal.kernel_shared"):
        mods = {mod for mod, _, _ in _imports(cond, top_level_only=False)}
        assert any(m == "harness.kernel" or m.startswith("harness.kernel.") for m in mods), cond
        assert not {"harness.personal.kernel_memory", "harness.personal.identity", "harness.personal.items"} & mods
