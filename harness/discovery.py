"""Plugin discovery through `importlib.metadata` entry points (never by scanning folders).

Groups: ``attnbench.variants`` and ``attnbench.tasks``. An entry point names either a module whose
import registers (``name = "pkg.module"``) or a class registered under the entry point's name
(``name = "pkg.module:MyVariant"``). The built-ins are declared the same way in attnbench's own
pyproject. A plugin that fails to import is reported with a warning naming it and skipped.

The failures are kept (`failures`) so that they are not forgotten after the warning: a command
that is asked for a name a failed plugin's entry point declares says that this plugin failed,
and why (`failure_for`, `PluginFailure.asked_for`), instead of calling the name unknown; and
``--strict`` makes any failure an error (`harness.cli.strict`). A plugin written against the imports
of attnbench before 0.2 (``from harness.variant_api import …``) fails with ``ModuleNotFoundError``
for ``harness``; its failure carries a hint saying where those names went (`OLD_IMPORTS_HINT`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from importlib import metadata

from attnbench import task as task_module
from attnbench import variant as variant_module
from attnbench.registry import Registry, registering_from
from attnbench.task import TASKS, Task, register_task
from attnbench.toolkit.memory import at_probe_start
from attnbench.variant import VARIANTS, AttentionVariant, VariantShape, register_variant

ENTRY_POINT_GROUPS = {"attnbench.variants": VARIANTS, "attnbench.tasks": TASKS}


OLD_IMPORTS_HINT = (
    "attnbench 0.2 moved harness.* to the public API: import from attnbench (see docs/migration.md)"
)


@dataclass(frozen=True)
class PluginFailure:
    """A plugin entry point that could not be loaded.

    Attributes:
        group: The entry-point group (``attnbench.variants``).
        name: The entry point's name: the variant or task it was to provide.
        value: What it points at (``pkg.module`` or ``pkg.module:Class``).
        distribution: The distribution that declares it.
        error: ``ExceptionType: message`` (the message's first line).
        hint: What to do about this kind of error, where one is known; else "".
    """

    group: str
    name: str
    value: str
    distribution: str
    error: str
    hint: str = ""

    @property
    def reason(self) -> str:
        """The error with its hint: "ModuleNotFoundError: No module named 'harness'; attnbench
        0.2 moved …"."""
        return f"{self.error}; {self.hint}" if self.hint else self.error

    @property
    def source(self) -> str:
        """ "plugin dist (entry point attnbench.variants: x = mod)": which plugin, and where it
        declares the entry point."""
        return f"plugin {self.distribution} (entry point {self.group}: {self.name} = {self.value})"

    def asked_for(self, kind: str) -> str:
        """The one sentence for a command that asks for this entry point's ``kind`` by name.

        Example:
            variant 'x' comes from plugin p (entry point attnbench.variants: x = p.mod), which
            failed to load: ImportError: no module named xyz; fix or uninstall it.
        """
        return (
            f"{kind} '{self.name}' comes from {self.source}, which failed to load: "
            f"{self.reason}; fix or uninstall it."
        )


class PluginLoadWarning(UserWarning):
    """Emitted when a plugin fails to load; the rest keep working."""


_failures: list[PluginFailure] = []
_loaded_groups: set[str] = set()


def load_plugins(*, reload: bool = False) -> list[PluginFailure]:
    """Load every entry point of the attnbench groups (once per process unless ``reload``).

    Returns:
        The plugins that failed to load (also emitted as `PluginLoadWarning`).
    """
    at_probe_start(load_plugins)  # a memory probe this process starts holds the same registry
    for group, registry in ENTRY_POINT_GROUPS.items():
        if group in _loaded_groups and not reload:
            continue
        for ep in metadata.entry_points(group=group):
            _load_one(group, ep, registry)
        _loaded_groups.add(group)
    return list(_failures)


def build_variant(
    name: str, params: dict | None = None, shape: VariantShape | None = None
) -> AttentionVariant:
    """`attnbench.variant.build_variant` with the installed plugins loaded first (built-in
    variants register on import, like any plugin): what ``attnbench.build_variant`` is, so that
    a fresh process can build ``"softmax"`` without calling `load_plugins` itself."""
    load_plugins()
    return variant_module.build_variant(name, params, shape)


def build_task(name: str, params: dict | None = None) -> Task:
    """`attnbench.task.build_task` with the installed plugins loaded first (as `build_variant`)."""
    load_plugins()
    return task_module.build_task(name, params)


def failures() -> list[PluginFailure]:
    """Plugins that failed to load so far."""
    return list(_failures)


def failure_for(registry: Registry, name: str) -> PluginFailure | None:
    """The failed entry point that would have provided ``name`` to ``registry``, if any.

    Only the entry point's own name is known: a module entry point may register other names as
    well, and those stay unknown (its import never ran).
    """
    for failure in _failures:
        if ENTRY_POINT_GROUPS.get(failure.group) is registry and failure.name == name:
            return failure
    return None


def failed_names(registry: Registry) -> list[str]:
    """Names of the failed entry points that would have provided entries to ``registry``."""
    return sorted({f.name for f in _failures if ENTRY_POINT_GROUPS.get(f.group) is registry})


def _describe(exc: BaseException) -> tuple[str, str]:
    """(``ExceptionType: first line of the message``, hint) of a plugin's import error."""
    lines = str(exc).strip().splitlines()
    error = f"{type(exc).__name__}: {lines[0].rstrip('.')}" if lines else type(exc).__name__
    missing = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    hint = OLD_IMPORTS_HINT if (missing or "").split(".")[0] == "harness" else ""
    return error, hint


def _load_one(group: str, ep: metadata.EntryPoint, registry: Registry) -> None:
    dist = ep.dist.name if ep.dist is not None else "unknown"
    try:
        with registering_from(dist):
            obj = ep.load()
            _register_class_entry(ep.name, obj, registry)
    except Exception as exc:  # a broken plugin must not take the benchmark down
        failure = PluginFailure(group, ep.name, ep.value, dist, *_describe(exc))
        if failure not in _failures:
            _failures.append(failure)
            warnings.warn(
                f"attnbench: {failure.source} failed to load and is skipped: {failure.reason}",
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
