"""Old import paths of moved modules, kept working for one release (0.3) with a warning.

Plugins in the wild import the contracts from where 0.2 defined them (``attnbench.harness.
variant_api`` and the like). Importing an old path gives a module that forwards every attribute
to the new one and warns once, with a ``DeprecationWarning`` naming the new path. A finder on
``sys.meta_path`` serves them, so no file stands at the old path and the tree shows only the
new layout. `MOVED` is a literal: the code fingerprint reads it without importing (a plugin that
imports an old path is fingerprinted with the module it really uses).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings

REMOVED_IN = "0.4"  # the release without these paths (tests/test_layout.py fails from it on)

# old module → new module (docs/migration.md lists the same)
MOVED: dict[str, str] = {
    "attnbench.harness.variant_api": "attnbench.variant",
    "attnbench.harness.incremental_api": "attnbench.incremental",
    "attnbench.harness.task_api": "attnbench.task",
    "attnbench.harness.metrics": "attnbench.metrics",
    "attnbench.harness.task_info": "attnbench.task_info",
    "attnbench.harness.registry": "attnbench.registry",
    "attnbench.harness.scaling": "attnbench.task_info",  # ScalingFit
    "attnbench.harness.timing": "attnbench.toolkit.timing",
    "attnbench.harness.memory": "attnbench.toolkit.memory",
    "attnbench.harness.model": "attnbench.toolkit.model",
    "attnbench.harness.layer": "attnbench.toolkit.layer",
    "attnbench.harness.training": "attnbench.toolkit.training",
    "attnbench.tasks.timed": "attnbench.toolkit.timed",
    "attnbench.variants.masking": "attnbench.masks",
}


class _Forward(types.ModuleType):
    """The module at an old path: every attribute read from the new module."""

    def __getattr__(self, name: str) -> object:
        return getattr(importlib.import_module(MOVED[self.__name__]), name)

    def __dir__(self) -> list[str]:
        return dir(importlib.import_module(MOVED[self.__name__]))


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: object = None, target: object = None):
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _Forward(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        new = MOVED[module.__name__]
        warnings.warn(
            f"{module.__name__} moved to {new} in attnbench 0.3; import from {new} (the old "
            f"path goes in {REMOVED_IN}).",
            DeprecationWarning,
            stacklevel=2,
        )
        importlib.import_module(new)


def install() -> None:
    """Serve the old paths (idempotent)."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
