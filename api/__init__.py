"""attnbench: an open benchmark and leaderboard for attention mechanisms.

This package is the **public, stable API**: the contracts a plugin meets (defined here, in
`attnbench.variant`, `attnbench.task`, `attnbench.incremental`, `attnbench.metrics`,
`attnbench.task_info`, `attnbench.registry`, `attnbench.masks`), the task author's toolkit
(`attnbench.toolkit`), `attnbench.testing`, and `run` and `results` for notebooks and scripts::

    from attnbench import AttentionVariant, VariantShape, register_variant

Everything under ``attnbench.harness``, ``attnbench.variants`` and ``attnbench.tasks`` is the
engine and the built-ins: internal, and free to change between versions. The built-ins import
only this public package, so a plugin can do whatever they do.

The names are imported lazily (PEP 562), so ``import attnbench`` stays cheap and does not import
torch by itself: the leaderboard, which only reads a table, never pays for torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from attnbench import _moved

_moved.install()  # the 0.2 import paths, with a DeprecationWarning

# public name → module that defines it (inside this package)
_EXPORTS: dict[str, str] = {
    # variants
    "AttentionVariant": "attnbench.variant",
    "VariantShape": "attnbench.variant",
    "NoParams": "attnbench.variant",
    "UnsupportedError": "attnbench.variant",
    "register_variant": "attnbench.variant",
    "build_variant": "attnbench.harness.discovery",  # plugins loaded first
    "COST_CLASSES": "attnbench.variant",
    "per_query_head": "attnbench.variant",
    "repeat_kv_heads": "attnbench.variant",
    "random_gates": "attnbench.variant",
    # the incremental (token-by-token) form of a variant
    "IncrementalAttention": "attnbench.incremental",
    "register_incremental": "attnbench.incremental",
    "incremental_form": "attnbench.incremental",
    "why_no_incremental_form": "attnbench.incremental",
    # tasks
    "Task": "attnbench.task",
    "JobContext": "attnbench.task",
    "register_task": "attnbench.task",
    "build_task": "attnbench.harness.discovery",  # plugins loaded first
    "NonFiniteError": "attnbench.task",
    "check_finite": "attnbench.task",
    "Metric": "attnbench.metrics",
    "MetricPoint": "attnbench.metrics",
    "TaskResult": "attnbench.metrics",
    "ScalingFit": "attnbench.task_info",
    "Tuning": "attnbench.task_info",
    # registries and discovery
    "UnknownNameError": "attnbench.registry",
    "DuplicateNameError": "attnbench.registry",
    "list_variants": "attnbench.harness.discovery",
    "list_tasks": "attnbench.harness.discovery",
    "load_plugins": "attnbench.harness.discovery",
    # running jobs and reading results from Python (notebooks, scripts)
    "run": "attnbench.harness.python_api",
    "results": "attnbench.harness.python_api",
}

__all__ = [
    "AttentionVariant",
    "COST_CLASSES",
    "DuplicateNameError",
    "IncrementalAttention",
    "JobContext",
    "Metric",
    "MetricPoint",
    "NoParams",
    "NonFiniteError",
    "ScalingFit",
    "Task",
    "TaskResult",
    "Tuning",
    "UnknownNameError",
    "UnsupportedError",
    "VariantShape",
    "__version__",
    "build_task",
    "build_variant",
    "check_finite",
    "incremental_form",
    "list_tasks",
    "list_variants",
    "load_plugins",
    "per_query_head",
    "random_gates",
    "register_incremental",
    "register_task",
    "register_variant",
    "repeat_kv_heads",
    "results",
    "run",
    "why_no_incremental_form",
]  # the public API (a test checks it against _EXPORTS)


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib import metadata

        try:
            return metadata.version("attnbench")
        except metadata.PackageNotFoundError:  # an uninstalled checkout
            return "unknown"
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'attnbench' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names load on first use
    from attnbench.harness.discovery import (
        build_task,
        build_variant,
        list_tasks,
        list_variants,
        load_plugins,
    )
    from attnbench.harness.python_api import results, run
    from attnbench.incremental import (
        IncrementalAttention,
        incremental_form,
        register_incremental,
        why_no_incremental_form,
    )
    from attnbench.metrics import Metric, MetricPoint, TaskResult
    from attnbench.registry import DuplicateNameError, UnknownNameError
    from attnbench.task import (
        JobContext,
        NonFiniteError,
        Task,
        check_finite,
        register_task,
    )
    from attnbench.task_info import ScalingFit, Tuning
    from attnbench.variant import (
        COST_CLASSES,
        AttentionVariant,
        NoParams,
        UnsupportedError,
        VariantShape,
        per_query_head,
        random_gates,
        register_variant,
        repeat_kv_heads,
    )
