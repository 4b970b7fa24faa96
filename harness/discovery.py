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

The functions of the Python API (these builders and listings, `attnbench.run`,
`attnbench.results`) refuse an argument of the wrong type before doing anything, in one sentence
naming the function, the argument, what it must be and an example (`check_type`): once ``None``
where a name belongs gave ``'NoneType' object is not iterable`` from inside, and a shape of 3 was
taken. The error, `ArgumentTypeError`, is both a `ValueError` (the API's promise: every bad
argument is one) and a `TypeError` (Python's convention for a wrong type, and what earlier
versions raised), so either ``except`` catches it.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any

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


class ArgumentTypeError(ValueError, TypeError):
    """An argument of the wrong type given to a function of the Python API; the message is one
    sentence naming the function, the argument, what it must be and an example (`check_type`)."""


MAX_SHOWN = 60  # characters of a wrong value's repr quoted in the sentence


def shown(value: Any) -> str:
    """``value`` as a sentence quotes it: its repr where short and on one line, else its type
    ("a DataFrame")."""
    text = repr(value)
    if len(text) > MAX_SHOWN or "\n" in text:
        return f"a {type(value).__name__}"
    return text


def check_type(
    function: str,
    name: str,
    value: Any,
    expected: type | tuple[type, ...],
    wanted: str,
    example: str,
) -> None:
    """Raise `ArgumentTypeError` unless ``value`` is an instance of ``expected``; ``True`` and
    ``False`` pass only where ``expected`` names ``bool`` (they are not numbers here).

    Args:
        function: The public name of the function ("attnbench.results").
        name: The argument's name.
        expected: The types it may have.
        wanted: What it must be, in words ("a folder path (a str or a Path)").
        example: A call that is right ("results_dir='results'").

    Example:
        ``check_type("attnbench.results", "every_run", "yes", bool, "True or False",
        "every_run=True")`` raises "attnbench.results: every_run must be True or False, got
        'yes'; e.g. every_run=True."
    """
    types = expected if isinstance(expected, tuple) else (expected,)
    if isinstance(value, types) and (not isinstance(value, bool) or bool in types):
        return
    raise ArgumentTypeError(
        f"{function}: {name} must be {wanted}, got {shown(value)}; e.g. {example}."
    )


_failures: list[PluginFailure] = []
_loaded_groups: set[str] = set()


def load_plugins(*, reload: bool = False) -> list[PluginFailure]:
    """Load every entry point of the attnbench groups (once per process unless ``reload``).

    Returns:
        The plugins that failed to load (also emitted as `PluginLoadWarning`).

    Raises:
        ArgumentTypeError: ``reload`` is not True or False (`check_type`).
    """
    check_type("attnbench.load_plugins", "reload", reload, bool, "True or False", "reload=True")
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
    a fresh process can build ``"softmax"`` without calling `load_plugins` itself.

    Raises:
        ArgumentTypeError: an argument of the wrong type (`check_type`), before anything
            is loaded.
    """
    who = "attnbench.build_variant"
    check_type(who, "name", name, str, "a variant's name", "build_variant('softmax')")
    _check_params(who, params, "build_variant('softmax', {'temperature': 2.0})")
    if shape is not None:
        check_type(
            who,
            "shape",
            shape,
            VariantShape,
            "a VariantShape or None",
            "shape=VariantShape(n_heads=2, head_dim=16, max_len=64)",
        )
    load_plugins()
    return variant_module.build_variant(name, params, shape)


def build_task(name: str, params: dict | None = None) -> Task:
    """`attnbench.task.build_task` with the installed plugins loaded first (as `build_variant`).

    Raises:
        ArgumentTypeError: an argument of the wrong type (`check_type`).
    """
    who = "attnbench.build_task"
    check_type(who, "name", name, str, "a task's name", "build_task('recall')")
    _check_params(who, params, "build_task('recall', {'seq_len': 64})")
    load_plugins()
    return task_module.build_task(name, params)


def _check_params(who: str, params: object, example: str) -> None:
    """Refuse a builder's ``params`` that is neither a mapping of names to values nor None."""
    if params is not None:
        check_type(who, "params", params, Mapping, "a dict of parameters or None", example)


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
    check_type(
        "attnbench.list_variants",
        "pattern",
        pattern,
        str,
        "a name or a shell-style pattern",
        "list_variants('lin*')",
    )
    load_plugins()
    return VARIANTS.names(pattern)


def list_tasks(pattern: str = "*") -> list[str]:
    """Names of the registered tasks matching a shell-style ``pattern`` (plugins loaded)."""
    check_type(
        "attnbench.list_tasks",
        "pattern",
        pattern,
        str,
        "a name or a shell-style pattern",
        "list_tasks('lin*')",
    )
    load_plugins()
    return TASKS.names(pattern)
