"""Hydra callbacks: collect the run records into the results table when a run or sweep ends."""

from __future__ import annotations

import logging
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from attnbench.harness.collect import collect

log = logging.getLogger(__name__)


class CollectResults(Callback):
    """Runs `harness.collect.collect` on ``results_dir`` after a single run and after a multirun."""

    def _collect(self, config: DictConfig) -> None:
        summary = collect(config.results_dir)
        log.info("%s", summary.describe())

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._collect(config)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._collect(config)
