"""The `grids` sweeper: a union of cartesian grids, each one like Hydra's basic sweeper.

Hydra's basic sweeper runs one cartesian product, so a preset cannot give each task its own sizes
(hydra#2851). `grids` takes a list of parameter dicts, expands each exactly as the basic sweeper
would (glob, ranges, choice lists), with the command line's overrides applied on top of every
grid, and runs the union without duplicates, in order::

    hydra:
      sweeper:
        grids:
          - {variant: glob(*), task: throughput, task.seq_len: "256,1024"}
          - {variant: glob(*), task: recall, task.steps: 200}

A preset selects it with ``defaults: [override /hydra/sweeper: grids]`` (conf/sweep/quick.yaml).
"""

# No `from __future__ import annotations` here: Hydra imports plugin modules without entering them
# in sys.modules, and dataclasses then cannot resolve string annotations.
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

log = logging.getLogger(__name__)


@dataclass
class GridsSweeperConf:
    """Config of the `grids` sweeper."""

    _target_: str = "hydra_plugins.attnbench_sweeper.grids_sweeper.GridsSweeper"
    max_batch_size: int | None = None  # jobs handed to the launcher at once; None = all
    grids: list[dict[str, Any]] = field(default_factory=list)  # each a basic-sweeper params dict


ConfigStore.instance().store(
    group="hydra/sweeper", name="grids", node=GridsSweeperConf, provider="attnbench"
)


class GridsSweeper(BasicSweeper):
    """Runs the union of several basic-sweeper grids (see the module docstring)."""

    def __init__(self, grids: list[dict[str, Any]], max_batch_size: int | None = None) -> None:
        super().__init__(max_batch_size=max_batch_size, params=None)
        self.grids = [{str(k): str(v) for k, v in g.items()} for g in grids]  # YAML gives numbers

    def job_overrides(self, arguments: list[str]) -> list[list[str]]:
        """Every job's overrides: each grid expanded, command line on top, duplicates dropped."""
        assert self.hydra_context is not None
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        jobs: list[list[str]] = []
        seen: set[tuple[str, ...]] = set()
        for grid in self.grids or [{}]:
            lines = [f"{k}={v}" for k, v in grid.items()] + list(arguments)
            (expanded,) = self.split_arguments(parser.parse_overrides(lines), None)
            for job in expanded:
                if tuple(job) not in seen:
                    seen.add(tuple(job))
                    jobs.append(job)
        return jobs

    def validate_jobs(self, jobs: list[list[str]]) -> None:
        """Compose every job and check its values before the first one runs.

        A bad value anywhere in the sweep prints one sentence and exits with status 2, so a
        sweep never stops half-way on bad input.
        """
        from attnbench.harness.validation import ConfigError, prepare_job

        assert self.hydra_context is not None and self.config is not None
        loader = self.hydra_context.config_loader
        for job in jobs:
            try:
                prepare_job(loader.load_sweep_config(self.config, list(job)))
            except ConfigError as exc:
                print(f"attnbench: {exc} (job: {' '.join(job)})", file=sys.stderr)
                raise SystemExit(2) from None

    def sweep(self, arguments: list[str]) -> Any:
        assert self.config is not None and self.launcher is not None
        jobs = self.job_overrides(arguments)
        self.validate_jobs(jobs)
        self.overrides = list(self.split_overrides_to_chunks(jobs, self.max_batch_size))
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        log.info("grids sweeper: %d jobs from %d grids", len(jobs), len(self.grids))
        returns = []
        first = 0
        while not self.is_done():
            batch = self.get_job_batch()
            self.validate_batch_is_legal(batch)
            returns.append(self.launcher.launch(batch, initial_job_idx=first))
            first += len(batch)
        return returns
