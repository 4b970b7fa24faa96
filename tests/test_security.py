"""Configs, records and plugin metadata are data: no eval/exec, no pickle, no unsafe YAML.

An AST scan of the project's own code (harness, variants, tasks, the sweeper plugin), so a change
that introduces one of these fails here. Hydra loads YAML itself, with safe loaders.
"""

from __future__ import annotations

import ast

import pytest
from conftest import REPO

PACKAGES = ["harness", "variants", "tasks", "hydra_plugins"]
FILES = sorted(p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py"))
FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__"}
FORBIDDEN_MODULES = {"pickle", "cPickle", "dill", "shelve", "marshal"}
UNSAFE_ATTRIBUTES = {("yaml", "load"), ("yaml", "unsafe_load"), ("torch", "load")}


def _violations(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        called = isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        if called and node.func.id in FORBIDDEN_CALLS:
            yield f"{path.name}:{node.lineno} calls {node.func.id}()"
        attribute = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
        if attribute and (node.value.id, node.attr) in UNSAFE_ATTRIBUTES:
            yield f"{path.name}:{node.lineno} uses {node.value.id}.{node.attr}"
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            for name in names:
                if name and name.split(".")[0] in FORBIDDEN_MODULES:
                    yield f"{path.name}:{node.lineno} imports {name}"


def test_the_scan_sees_the_code():
    assert len(FILES) > 20


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_eval_pickle_or_unsafe_yaml(path):
    assert list(_violations(path)) == []


def test_the_scan_catches_what_it_forbids(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import pickle\nimport yaml\nyaml.load(open('x'))\neval('1')\n")
    assert len(list(_violations(bad))) == 3
