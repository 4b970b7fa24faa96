"""The public API: `from attnbench import ...` is the whole surface a plugin needs."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import attnbench

REPO = Path(__file__).resolve().parent.parent
ISSUE_NAMES = [  # the names the plugin API promises (design.md)
    "AttentionVariant",
    "register_variant",
    "VariantShape",
    "Task",
    "register_task",
    "Metric",
    "MetricPoint",
    "TaskResult",
    "JobContext",
]


def test_all_lists_exactly_the_lazy_exports_and_each_resolves():
    assert sorted(attnbench.__all__) == sorted([*attnbench._EXPORTS, "__version__"])
    assert set(ISSUE_NAMES) <= set(attnbench.__all__)
    for name in attnbench.__all__:
        assert getattr(attnbench, name) is not None, name
    assert attnbench.__version__ != "unknown"


def test_importing_the_api_does_not_import_torch():
    """The leaderboard imports the package; it must not pay for (or need) torch."""
    code = "import sys, attnbench; assert 'torch' not in sys.modules, 'torch imported'"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_no_module_imports_the_repository_folders_as_top_level_packages():
    """harness/, variants/ and tasks/ are attnbench.harness, … once installed: an import of
    plain `harness` works from the repository root only, and breaks a real install."""
    offenders = []
    for folder in ("api", "harness", "variants", "tasks", "hydra_plugins", "tests", "examples"):
        for path in (REPO / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                for name in names:
                    if name.split(".")[0] in {"harness", "variants", "tasks", "conf", "api"}:
                        offenders.append(f"{path.relative_to(REPO)}: {name}")
    assert offenders == []
