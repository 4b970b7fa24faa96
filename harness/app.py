"""The ``attnbench`` command: a thin Hydra app around `harness.run.run`.

Before Hydra composes anything, plugins are loaded and every registered variant and task is put
into the ConfigStore, and ``variant=`` / ``task=`` choices on the command line are checked against
the registry so that a typo gets "did you mean" rather than Hydra's bare "could not find".
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Glob
from hydra.errors import HydraException
from omegaconf import DictConfig

from harness.config import store_configs
from harness.discovery import load_plugins
from harness.registry import Registry, UnknownNameError
from harness.run import run
from harness.task_api import TASKS
from harness.variant_api import VARIANTS

# An absolute path: Hydra would otherwise look for a Python module "conf" next to the package.
CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")
CHECKED_GROUPS: dict[str, Registry] = {"variant": VARIANTS, "task": TASKS}


def check_choices(args: list[str]) -> None:
    """Raise `UnknownNameError` for a ``variant=``/``task=`` choice that is not registered.

    Sweeps (``variant=a,b``) are checked value by value; ``glob(...)`` is left to Hydra.
    """
    candidates = [a for a in args if a.split("=", 1)[0].lstrip("+~") in CHECKED_GROUPS]
    if not candidates:
        return
    try:
        overrides = OverridesParser.create().parse_overrides(candidates)
    except HydraException:
        return  # Hydra reports malformed overrides itself
    for override in overrides:
        registry = CHECKED_GROUPS[override.key_or_group]
        if override.is_sweep_override():
            if isinstance(override.value(), Glob) or not override.is_choice_sweep():
                continue  # glob(...) and ranges are expanded by Hydra against the ConfigStore
            values = list(override.sweep_string_iterator())
        else:
            values = [override.get_value_element_as_str()]
        for value in values:
            if value not in registry:
                raise UnknownNameError(registry.unknown_message(value))


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def _hydra_main(cfg: DictConfig) -> str:
    return run(cfg).status


def main() -> None:
    """Entry point of the ``attnbench`` console script."""
    load_plugins()
    store_configs()
    try:
        check_choices(sys.argv[1:])
    except UnknownNameError as exc:
        print(f"attnbench: {exc}", file=sys.stderr)
        sys.exit(2)
    _hydra_main()


if __name__ == "__main__":
    main()
