"""Hydra callbacks: collect the run records into the results table when a run or sweep ends."""

from __future__ import annotations

import logging
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from attnbench.harness.jobs.paths import write_failure
from attnbench.harness.sweep.hard_stop import collect_on_stop
from attnbench.harness.sweep.outcome import OUTCOME, one_line

log = logging.getLogger(__name__)

_output: dict[str, str] = {}  # "key", "folder": Hydra's output folder of this command


def hydra_output() -> tuple[str, str] | None:
    """(``hydra.run.dir`` or ``hydra.sweep.dir``, the folder it names) of the run or sweep this
    process started, as Hydra resolved it; None before one started.

    Hydra writes its own files there (the job's config, ``multirun.yaml``) before any job runs,
    and where that fails the ``attnbench`` command names this folder (`harness.cli.app`): the
    exception of a failed write does not always carry a file name, and the folder's time stamp
    is only known once Hydra resolved it (``${now:…}`` is cached in the config it runs).
    """
    return (_output["key"], _output["folder"]) if _output else None


def forget_hydra_output() -> None:
    """Forget the folder `hydra_output` names (a command starting in a process that ran one)."""
    _output.clear()


def _remember_output(config: DictConfig, key: str) -> None:
    try:
        _output.update(key=f"hydra.{key}", folder=str(OmegaConf.select(config.hydra, key)))
    except Exception:  # an unresolvable folder: Hydra itself says so, this is only a name
        _output.clear()


class CollectResults(Callback):
    """Runs `harness.results.collect.collect` on ``results_dir`` after a single run and after a
    multirun.

    A failed collection is caught here, logged as one sentence and noted in
    `harness.sweep.outcome.OUTCOME`, so that the ``attnbench`` command exits with status 1: Hydra
    itself would only turn the exception into a warning and exit 0. The records stay; collecting
    again (``attnbench-collect``) retries. A collection that would drop runs the table holds
    (their records gone: `MissingRunsError`) leaves the table as it is and is reported the same
    way; a sweep itself only adds runs, so it never causes one.
    """

    def _collect(self, config: DictConfig) -> None:
        # imported here: the collector brings pandas (0.5 s), which a command that stops at its
        # arguments (one sentence, exit 2) never needs
        from attnbench.harness.results.collect import MissingRunsError, collect

        results_dir = config.results_dir
        try:
            summary = collect(results_dir)
        except MissingRunsError as exc:
            message = f"the table was not updated: {exc}"
            log.error("%s", message)
            OUTCOME.collection_failed(message)
            return
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

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        _remember_output(config, "run.dir")
        collect_on_stop(config.results_dir)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        _remember_output(config, "sweep.dir")
        collect_on_stop(config.results_dir)

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._collect(config)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._collect(config)
