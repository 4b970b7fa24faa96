"""attnbench: an open benchmark and leaderboard for attention mechanisms.

This module is the **public, stable API**: for plugins (a new attention variant or task in its
own package imports only from here and from `attnbench.testing`), and `run` and `results` for
notebooks and scripts::

    from attnbench import AttentionVariant, VariantShape, register_variant

Everything under ``attnbench.harness``, ``attnbench.variants`` and ``attnbench.tasks`` is the
engine and the built-ins: internal, and free to change between versions.

The names are imported lazily (PEP 562), so ``import attnbench`` stays cheap and does not import
torch by itself: the leaderboard, which only reads a table, never pays for torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# public name → module that defines it (inside this package)
_EXPORTS: dict[str, str] = {
    # variants
    "AttentionVariant": "attnbench.harness.variant_api",
    "VariantShape": "attnbench.harness.variant_api",
    "NoParams": "attnbench.harness.variant_api",
    "UnsupportedError": "attnbench.harness.variant_api",
    "register_variant": "attnbench.harness.variant_api",
    "build_variant": "attnbench.harness.variant_api",
    "COST_CLASSES": "attnbench.harness.variant_api",
    "per_query_head": "attnbench.harness.variant_api",
    "repeat_kv_heads": "attnbench.harness.variant_api",
    # the incremental (token-by-token) form of a variant
    "IncrementalAttention": "attnbench.harness.incremental_api",
    "register_incremental": "attnbench.harness.incremental_api",
    "incremental_form": "attnbench.harness.incremental_api",
    "why_no_incremental_form": "attnbench.harness.incremental_api",
    # tasks
    "Task": "attnbench.harness.task_api",
    "JobContext": "attnbench.harness.task_api",
    "register_task": "attnbench.harness.task_api",
    "build_task": "attnbench.harness.task_api",
    "NonFiniteError": "attnbench.harness.task_api",
    "check_finite": "attnbench.harness.task_api",
    "Metric": "attnbench.harness.metrics",
    "MetricPoint": "attnbench.harness.metrics",
    "TaskResult": "attnbench.harness.metrics",
    "ScalingFit": "attnbench.harness.scaling",
    "Tuning": "attnbench.harness.task_info",
    # registries and discovery
    "UnknownNameError": "attnbench.harness.registry",
    "DuplicateNameError": "attnbench.harness.registry",
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
        from attnbench.harness.env import attnbench_version

        return attnbench_version()
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'attnbench' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names load on first use
    from attnbench.harness.discovery import list_tasks, list_variants, load_plugins
    from attnbench.harness.incremental_api import (
        IncrementalAttention,
        incremental_form,
        register_incremental,
        why_no_incremental_form,
    )
    from attnbench.harness.metrics import Metric, MetricPoint, TaskResult
    from attnbench.harness.python_api import results, run
    from attnbench.harness.registry import DuplicateNameError, UnknownNameError
    from attnbench.harness.scaling import ScalingFit
    from attnbench.harness.task_api import (
        JobContext,
        NonFiniteError,
        Task,
        build_task,
        check_finite,
        register_task,
    )
    from attnbench.harness.task_info import Tuning
    from attnbench.harness.variant_api import (
        COST_CLASSES,
        AttentionVariant,
        NoParams,
        UnsupportedError,
        VariantShape,
        build_variant,
        per_query_head,
        register_variant,
        repeat_kv_heads,
    )
