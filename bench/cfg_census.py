"""How far the untyped config travels: functions that take or hold a `cfg` (a parameter named cfg / *_cfg or
annotated DictConfig, or a `self.cfg` / `self.*_cfg` they assign; a parameter annotated with a typed
settings class, e.g. `cfg: Settings`, is not counted), and those that read two or more levels deep
from one (`cfg.stage.conditions`, `cfg.model.get("params")`, `cfg["judge"]["kinds"]`).

WHY: issue 31 counted 140 and 27; this reruns the count so a change can say what it moved.
`python bench/cfg_census.py [--list]` from the tree's root.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGES = ("harness", "conditions", "judge", "analysis", "bench")
EDGE = "harness/run/settings.py"  # the config edge, whose job is to read the whole config


def _is_cfg_name(name: str) -> bool:
    return name == "cfg" or name.endswith("_cfg")


def _root(node) -> tuple[str | None, int]:
    """(the name a chain of attribute / subscript / .get reads starts from, its depth)."""
    depth = 0
    while True:
        if isinstance(node, ast.Attribute):
            depth += 1
            node = node.value
        elif isinstance(node, ast.Subscript):
            depth += 1
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            node = node.func.value  # x.get("k") is one level, counted by its Attribute below as `get`
        else:
            break
    if isinstance(node, ast.Name):
        return node.id, depth
    return None, depth


def _chain_depth(node) -> tuple[str | None, int]:
    """Levels of config read below a cfg name: `cfg.a.b` 2, `cfg.get('a').get('b')` 2, `self.cfg.a` 1."""
    levels = 0
    cur = node
    while True:
        if isinstance(cur, ast.Call) and isinstance(cur.func, ast.Attribute) and cur.func.attr == "get":
            levels += 1
            cur = cur.func.value
        elif isinstance(cur, ast.Attribute):
            if isinstance(cur.value, ast.Name) and cur.value.id == "self" and _is_cfg_name(cur.attr):
                return "self." + cur.attr, levels
            if _is_cfg_name(cur.attr) and not isinstance(cur.value, ast.Name):
                return cur.attr, levels
            levels += 1
            cur = cur.value
        elif isinstance(cur, ast.Subscript):
            levels += 1
            cur = cur.value
        else:
            break
    if isinstance(cur, ast.Name) and _is_cfg_name(cur.id):
        return cur.id, levels
    return None, levels


def _annot_dictconfig(a) -> bool:
    return a is not None and "DictConfig" in ast.unparse(a)


def _untyped(a) -> bool:
    """A config parameter without a typed node: no annotation, or DictConfig / Any / dict."""
    return a.annotation is None or any(t in ast.unparse(a.annotation) for t in ("DictConfig", "Any", "dict"))


def census(root: Path):
    takes, deep = [], []
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            if str(path.relative_to(root)) == EDGE:
                continue
            tree = ast.parse(path.read_text(), str(path))
            for fn in ast.walk(tree):
                if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
                holds = any((_is_cfg_name(a.arg) and _untyped(a)) or _annot_dictconfig(a.annotation) for a in args)
                depth = 0
                for n in ast.walk(fn):
                    if isinstance(n, (ast.Assign, ast.AnnAssign)):
                        for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and \
                                    t.value.id == "self" and _is_cfg_name(t.attr):
                                holds = True
                    if isinstance(n, (ast.Attribute, ast.Subscript, ast.Call)):
                        name, levels = _chain_depth(n)
                        if name is not None:
                            depth = max(depth, levels)
                where = f"{path.relative_to(root)}:{fn.lineno} {fn.name}"
                if holds:
                    takes.append(where)
                if depth >= 2:
                    deep.append(where)
    return takes, deep


if __name__ == "__main__":
    takes, deep = census(Path.cwd())
    print(f"functions taking or holding a cfg: {len(takes)}; reading two or more levels deep: {len(deep)}")
    if "--list" in sys.argv:
        print("\n".join(["# deep", *deep]))
