"""The ``attnbench`` command: a thin Hydra app around `harness.jobs.job.run_job`.

Before Hydra composes anything, plugins are loaded and every registered variant and task is put
into the ConfigStore, the command line is checked against Hydra's grammar, the registries,
typed schemas and presets, and the results directory is checked for writing
(`harness.jobs.command_line`): bad input gets one sentence and exit status 2, not a traceback, and
nothing is written. With ``--strict`` (taken off the command line before Hydra sees it), a plugin
that failed to load is such bad input too, one sentence each (`harness.cli.strict`), instead of a
warning.

A results folder or Hydra output folder reached through a symbolic link that leads back into
itself is refused the same way (`harness.jobs.paths.looping_link`). Where Hydra cannot write its
own files before any job ran (the output folder, the job's config, ``multirun.yaml``: a full
disk), that is one sentence naming the folder and the fix, exit status 2, not Hydra's traceback.

After Hydra returns, the command's outcome (`harness.sweep.outcome`) decides the exit status: 1 if a
job ended without a record or the collection failed (one line each on stderr), 130 after Ctrl-C
(`harness.sweep.stop`), else 0.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import warnings
from collections.abc import Iterator
from typing import NoReturn

import hydra
from hydra._internal.utils import run_and_report
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import to_absolute_path
from omegaconf import DictConfig

from attnbench.harness.cli.interrupt import quiet_when_the_reader_leaves
from attnbench.harness.cli.strict import refuse_broken_plugins, take_strict_flag
from attnbench.harness.discovery import PluginLoadWarning, failures, load_plugins
from attnbench.harness.jobs.command_line import CONF_DIR, check_command_line, group_keys_per_job
from attnbench.harness.jobs.config import store_configs
from attnbench.harness.jobs.job import run_job
from attnbench.harness.jobs.paths import write_failure
from attnbench.harness.jobs.preflight import ConfigError
from attnbench.harness.sweep.callbacks import forget_hydra_output, hydra_output
from attnbench.harness.sweep.hard_stop import interrupt_noted, stop_watching, watch_stops
from attnbench.harness.sweep.outcome import INTERRUPTED, OUTCOME, TERMINATED
from attnbench.harness.sweep.stop import raised_by_a_stop, terminate_now
from attnbench.registry import UnknownNameError


def refuse(exc: Exception) -> NoReturn:
    """Print one sentence for bad input and exit with status 2 (nothing has been written)."""
    print(f"attnbench: {exc}", file=sys.stderr)
    sys.exit(2)


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def _hydra_main(cfg: DictConfig) -> str | None:
    """One job, in whichever process the launcher runs it.

    ``results_dir`` is made absolute against the directory the command started in, so that
    ``hydra.job.chdir=true`` (which moves the job into its Hydra output folder) still writes
    records where the callbacks collect them.

    In a sweep, an exception propagates: Hydra stores it in the job's ``JobReturn``, where the
    `grids` sweeper reads it (the job may run in a worker process, which cannot reach this
    process's outcome). In a single run, it becomes the command's outcome here.
    """
    cfg.results_dir = to_absolute_path(cfg.results_dir)
    if HydraConfig.get().mode == RunMode.MULTIRUN:
        return run_job(cfg).status
    try:
        return run_job(cfg).status
    except ConfigError as exc:
        refuse(exc)
    except Exception as exc:  # no record was written: say so, and exit 1 after collecting
        OUTCOME.job_failed(HydraConfig.get().overrides.task, exc)
        return None


@contextlib.contextmanager
def _hydra_raises() -> Iterator[None]:
    """Let an exception of Hydra's own (not a job's) reach the caller instead of Hydra printing
    it as a traceback: Hydra re-raises where ``HYDRA_FULL_ERROR`` is 1. Set for this process
    only, while Hydra runs; `main` turns an OSError into one sentence and hands anything else
    back to Hydra's own report (`_hydra_report`)."""
    before = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = before


def _hydra_report(exc: Exception) -> NoReturn:
    """Report ``exc`` as Hydra reports an exception it raised (its traceback from the job down,
    exit status 1; all of it where the user set ``HYDRA_FULL_ERROR=1``): handed back to Hydra's
    own report with the frames above Hydra's left off, as Hydra would have seen them."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_name != "run_and_report":
        tb = tb.tb_next
    exc = exc.with_traceback(tb or exc.__traceback__)

    def reraise() -> NoReturn:
        raise exc

    run_and_report(reraise)
    raise exc  # run_and_report exits or re-raises; never reached


def _refuse_output_failure(exc: OSError) -> NoReturn:
    """Hydra could not write its own files before a job ran: one sentence naming the folder and
    the fix, exit status 2 (no job ran, so there is nothing to collect)."""
    key, folder = hydra_output() or ("hydra.run.dir", exc.filename)
    where = f" in {key}={folder}" if folder else ""
    print(
        f"attnbench: cannot write Hydra's output{where} ("
        + write_failure(exc, f"results_dir=PATH or {key}=PATH")
        + "); no job ran.",
        file=sys.stderr,
    )
    sys.exit(2)


def _done() -> None:
    """Ignore Ctrl-C from here on: the command's work is over, and a Ctrl-C while the interpreter
    shuts down (it joins the memory probe's process, `attnbench.toolkit.memory`) would only print a
    traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@quiet_when_the_reader_leaves
def main() -> None:
    """Entry point of the ``attnbench`` console script: `_main` with the stop watcher on
    (`harness.sweep.hard_stop`), off again however it ends."""
    try:
        _main()
    finally:
        stop_watching()


def _main() -> None:
    """Entry point of the ``attnbench`` console script.

    ``--strict`` is this command's flag, not Hydra's: it is taken off ``sys.argv`` before Hydra
    parses it, and makes a plugin that failed to load an error (exit 2) before anything runs.
    Without it, such a plugin is one warning line once the command line is accepted; a refused
    command line prints its one sentence only (which names the plugin when it asked for one of
    its names).
    """
    OUTCOME.reset()
    forget_hydra_output()
    # a log handler that cannot write (Hydra's job log on a full disk) must not print a
    # traceback per line: what failed is reported once, by the outcome
    logging.raiseExceptions = False
    signal.signal(signal.SIGTERM, terminate_now)
    signal.signal(signal.SIGINT, interrupt_noted)
    watch_stops()  # a stop that reaches a job inside one long native call
    sys.argv[1:], strict = take_strict_flag(sys.argv[1:])
    try:
        if strict and (status := refuse_broken_plugins("attnbench")):
            sys.exit(status)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PluginLoadWarning)  # said below, or in the refusal
            load_plugins()
        skipped = store_configs()
        try:
            check_command_line(sys.argv[1:])
            sys.argv[1:] = group_keys_per_job(sys.argv[1:])
        except (ConfigError, UnknownNameError) as exc:
            refuse(exc)
        for problem in skipped:  # said once, after the check: a refusal naming it says it
            print(f"attnbench: warning: {problem}", file=sys.stderr)
        for failure in failures():
            print(
                f"attnbench: warning: {failure.source} failed to load and is skipped: "
                f"{failure.reason}",
                file=sys.stderr,
            )
        try:
            with _hydra_raises():
                _hydra_main()
        except ConnectionError:  # the reader left (``attnbench --help | head``): not a write
            raise
        except OSError as exc:  # a job's errors are its record or outcome: this is Hydra's write
            _done()
            _refuse_output_failure(exc)
        except Exception as exc:
            if raised_by_a_stop(exc):
                raise KeyboardInterrupt from None
            _hydra_report(exc)
    except KeyboardInterrupt:  # outside a sweep's jobs (which the sweeper stops cleanly)
        _done()
        print(f"attnbench: interrupted by {OUTCOME.stopped_by}.", file=sys.stderr)
        sys.exit(TERMINATED if OUTCOME.stopped_by == "SIGTERM" else INTERRUPTED)
    _done()
    for line in OUTCOME.report():
        print(f"attnbench: {line}", file=sys.stderr)
    if OUTCOME.exit_status():
        sys.exit(OUTCOME.exit_status())


if __name__ == "__main__":
    main()
