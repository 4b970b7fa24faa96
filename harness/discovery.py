"""Plugin discovery through `importlib.metadata` entry points (never by scanning folders).

Groups: ``attnbench.variants`` and ``attnbench.tasks``. An entry point names either a module whose
import registers (``name = "pkg.module"``) or a class registered under the entry point's name
(``name = "pkg.module:MyVariant"``). The built-ins are declared the same way in attnbench's own
pyproject. A plugin that fails to import is reported with a warning naming it and skipped.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from importlib import metadata

from attnbench.harness.registry import Registry, registering_from
from attnbench.harness.task_api import TASKS, Task, register_task
from attnbench.harness.variant_api import VARIANTS, AttentionVariant, register_variant

GROUPS = {"attnbench.variants": VARIANTS, "attnbench.tasks": TASKS}


@dataclass(frozen=True)
class PluginFailure:
    """A plugin entry point that could not be loaded."""

    group: str
    name: str
    value: str
    distribution: str
    error: str


class PluginLoadWarning(UserWarning):
    """Emitted when a plugin fails to load; the rest keep working."""


_failures: list[PluginFailure] = []
_loaded_groups: set[str] = set()


def load_plugins(*, reload: bool = False) -> list[PluginFailure]:
    """Load every entry point of the attnbench groups (once per process unless ``reload``).

    Returns:
        The plugins that failed to load (also emitted as `PluginLoadWarning`).
    """
    for group, registry in GROUPS.items():
        if group in _loaded_groups and not reload:
            continue
        for ep in metadata.entry_points(group=group):
            _load_one(group, ep, registry)
        _loaded_groups.add(group)
    return list(_failures)


def failures() -> list[PluginFailure]:
    """Plugins that failed to load so far."""
    return list(_failures)


def _load_one(group: str, ep: metadata.EntryPoint, registry: Registry) -> None:
    dist = ep.dist.name if ep.dist is not None else "unknown"
    try:
        with registering_from(dist):
            obj = ep.load()
            _register_class_entry(ep.name, obj, registry)
    except Exception as exc:  # a broken plugin must not take the benchmark down
        failure = PluginFailure(group, ep.name, ep.value, dist, f"{type(exc).__name__}: {exc}")
        if failure not in _failures:
            _failures.append(failure)
            warnings.warn(
                f"attnbench: plugin '{ep.name}' ({ep.value}, from {dist}) failed to load and is "
                f"skipped: {failure.error}",
                PluginLoadWarning,
                stacklevel=2,
            )


def _register_class_entry(name: str, obj: object, registry: Registry) -> None:
    """An entry point that points at a class registers it under the entry point's name."""
    if not isinstance(obj, type) or name in registry:
        return  # a module: its import did the registering
    if issubclass(obj, AttentionVariant) and registry is VARIANTS:
        register_variant(name)(obj)
    elif issubclass(obj, Task) and registry is TASKS:
        register_task(name)(obj)
    else:
        raise TypeError(f"entry point '{name}' points at {obj!r}, which is not a {registry.kind}")


def list_variants(pattern: str = "*") -> list[str]:
    """Names of the registered variants matching a shell-style ``pattern`` (plugins loaded).

    Example:
        >>> list_variants("lin*")
        ['linear']
    """
    load_plugins()
    return VARIANTS.names(pattern)


def list_tasks(pattern: str = "*") -> list[str]:
    """Names of the registered tasks matching a shell-style ``pattern`` (plugins loaded)."""
    load_plugins()
    return TASKS.names(pattern)
