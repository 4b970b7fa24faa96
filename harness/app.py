"""The ``attnbench`` command: a thin Hydra app around `harness.run.run`.

Before Hydra composes anything, plugins are loaded and every registered variant and task is put
into the ConfigStore, the command line is checked against the registries and typed schemas, and
the results directory is checked for writing (`harness.validation`): bad input gets one sentence
and exit status 2, not a traceback, and nothing is written.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

import hydra
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

import attnbench.conf
from attnbench.harness.config import store_configs
from attnbench.harness.discovery import load_plugins
from attnbench.harness.registry import UnknownNameError
from attnbench.harness.run import run
from attnbench.harness.validation import (
    ConfigError,
    check_overrides,
    check_results_dir,
    prepare_job,
    results_dir_from,
)

# The configs ship inside the package (attnbench.conf), so they are found from any working
# directory, in a checkout and in an installed wheel alike. An absolute path: Hydra would
# otherwise resolve a relative one against the calling module.
CONF_DIR = str(Path(attnbench.conf.__file__).resolve().parent)


def refuse(exc: Exception) -> NoReturn:
    """Print one sentence for bad input and exit with status 2 (nothing has been written)."""
    print(f"attnbench: {exc}", file=sys.stderr)
    sys.exit(2)


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def _hydra_main(cfg: DictConfig) -> str:
    try:
        return run(cfg).status
    except ConfigError as exc:
        refuse(exc)


def check_single_job(args: list[str]) -> None:
    """Compose the one job a non-sweep command line describes and check its values.

    Runs before Hydra creates its run directory, so a refused job leaves nothing behind. (Sweeps
    are checked job by job by the `grids` sweeper before the first job runs.)
    """
    overrides = [a for a in args if "=" in a and not a.startswith(("-", "hydra"))]
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        prepare_job(compose("config", overrides=overrides))


def main() -> None:
    """Entry point of the ``attnbench`` console script."""
    load_plugins()
    store_configs()
    args = sys.argv[1:]
    informational = {"--help", "-h", "--hydra-help", "--info", "--cfg", "-c"}
    try:
        check_overrides(args)
        if not informational & set(args):
            check_results_dir(results_dir_from(args))
            if not {"-m", "--multirun"} & set(args):
                check_single_job(args)
    except (ConfigError, UnknownNameError) as exc:
        refuse(exc)
    _hydra_main()


if __name__ == "__main__":
    main()
