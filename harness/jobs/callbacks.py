"""Hydra callbacks: collect the run records into the results table when a run or sweep ends."""

from __future__ import annotations

import logging
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from attnbench.harness.jobs.outcome import OUTCOME, one_line
from attnbench.harness.jobs.paths import write_failure
from attnbench.harness.results.collect import collect

log = logging.getLogger(__name__)


class CollectResults(Callback):
    """Runs `harness.results.collect.collect` on ``results_dir`` after a single run and after a
    multirun.

    A failed collection is caught here, logged as one sentence and noted in
    `harness.jobs.outcome.OUTCOME`, so that the ``attnbench`` command exits with status 1: Hydra
    itself would only turn the exception into a warning and exit 0. The records stay; collecting
    again (``attnbench-collect``) retries.
    """

    def _collect(self, config: DictConfig) -> None:
        results_dir = config.results_dir
        try:
            summary = collect(results_dir)
        except Exception as exc:  # reported, not raised: Hydra would reduce it to a warning
            reason = write_failure(exc) if isinstance(exc, OSError) else one_line(exc)
            message = (
                f"collecting the records in {results_dir} into the table failed "
                f"({reason}); the records are kept: run attnbench-collect {results_dir} "
                "to retry."
            )
            log.error("%s", message)
            OUTCOME.collection_failed(message)
            return
        log.info("%s", summary.describe())

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._collect(config)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._collect(config)
