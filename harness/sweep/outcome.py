"""How an ``attnbench`` command ends: what the sweeper, the callback and the command share.

Hydra cannot carry this itself: it drops what a sweeper returns (``_run_app`` ignores the value of
``Hydra.multirun``) and turns a callback's exception into a warning. So the parts report here and
`harness.cli.app.main` reads the result after Hydra returns, prints `SweepOutcome.report` and exits
with `SweepOutcome.exit_status`:

* a job that raised instead of writing a record (`SweepOutcome.job_failed`, from the `grids`
  sweeper's check of every job's return value, or from a single run) → status 1, one line per
  job naming its overrides and the error;
* a failed collection (`SweepOutcome.collection_failed`, from `harness.sweep.callbacks`) →
  status 1;
* a sweep whose jobs ran but none succeeded (`SweepOutcome.job_ended`, from the `grids` sweeper,
  with each job's record status): every one ``failed``, ``oom`` or ``timeout`` (or without a
  record) → status 1. A sweep in which some job succeeded exits 0 however many others failed:
  their records are results too (the board shows them). A job finished earlier (not launched,
  `SweepOutcome.sweep_planned`) counts as succeeded. ``unsupported`` is neither: the variant
  cannot run here, the code did not fail, so a sweep of unsupported jobs only exits 0;
* a sweep stopped by Ctrl-C (`SweepOutcome.stopped`, from the sweeper, see
  `harness.sweep.stop`) → status 130 (128 + SIGINT, the shell's convention), saying how many
  jobs were not run.

A sweep in which a job recorded a failure ends with one line counting the failed jobs by status
(`SweepOutcome.report`; jobs without a record have a line each above it and are counted in it):
``3 of 40 jobs failed: 2 timeout, 1 oom (records in results/runs)``.

There is one `OUTCOME` per process, reset by the command when it starts. Only the process that
runs the sweeper and the callbacks writes it: a job running in a launcher's worker process
reports through its Hydra ``JobReturn``, which the sweeper reads.

Example::

    OUTCOME.reset()
    ...  # Hydra runs the sweep; the sweeper and the callback report here
    for line in OUTCOME.report():
        print(f"attnbench: {line}", file=sys.stderr)
    sys.exit(OUTCOME.exit_status())
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from attnbench.harness.jobs.records import FAILURES, STATUSES

NO_RECORD = "without a record"  # how the count line names jobs that raised instead
INTERRUPTED = 130  # 128 + SIGINT
TERMINATED = 143  # 128 + SIGTERM


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message`` of an exception."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


@dataclass(frozen=True)
class JobFailure:
    """A job that ended without a record: its overrides (as Hydra logs them) and the error."""

    job: str
    error: str


@dataclass
class SweepOutcome:
    """What went wrong during one command (see the module docstring)."""

    failed_jobs: list[JobFailure] = field(default_factory=list)
    collection_error: str | None = None
    interrupted: bool = False
    not_run: int | None = 0  # jobs a stop left unrun; None when a launcher could not say
    stopped_by: str = "Ctrl-C"  # or "SIGTERM" (`harness.sweep.stop.terminate_now`)
    abort_reason: str | None = None  # the sweep could not go on (Hydra could not set a job up)
    abort_not_run: int | None = 0
    statuses: Counter[str] = field(default_factory=Counter)  # launched jobs by record status
    finished_before: int = 0  # jobs a sweep did not launch: finished earlier (a record each)
    records: str | None = None  # the folder of the sweep's records, for the count line
    swept: bool = False  # a sweep reported its jobs here (the count line is a sweep's)

    def reset(self) -> None:
        """Forget everything (the start of a command)."""
        fresh = SweepOutcome()
        self.failed_jobs, self.collection_error = fresh.failed_jobs, fresh.collection_error
        self.interrupted, self.not_run = fresh.interrupted, fresh.not_run
        self.stopped_by = fresh.stopped_by
        self.abort_reason, self.abort_not_run = fresh.abort_reason, fresh.abort_not_run
        self.statuses, self.finished_before = fresh.statuses, fresh.finished_before
        self.records, self.swept = fresh.records, fresh.swept

    def sweep_planned(self, jobs: int, launched: int, results_dir: object = None) -> None:
        """Note a sweep of ``jobs`` jobs of which ``launched`` will run (the rest finished
        earlier) and whose records go to ``results_dir``/runs (None: unknown)."""
        self.swept = True
        self.finished_before += jobs - launched
        if results_dir is not None:
            self.records = str(Path(str(results_dir)) / "runs")

    def job_ended(self, value: object) -> None:
        """Note what a sweep's job returned: its record's status (`harness.jobs.records.STATUSES`);
        anything else (a job a stop left unrun) is no job's end and is not counted."""
        self.swept = True
        if isinstance(value, str) and value in STATUSES:
            self.statuses[value] += 1

    def failures(self) -> Counter[str]:
        """The sweep's failed jobs by status, with `NO_RECORD` for those that raised."""
        failed = Counter({s: self.statuses[s] for s in FAILURES if self.statuses[s]})
        if self.failed_jobs:
            failed[NO_RECORD] = len(self.failed_jobs)
        return failed

    def nothing_succeeded(self) -> bool:
        """Whether a sweep's jobs failed and none ended ``ok`` or had finished earlier
        (``unsupported`` jobs are neither, see the module docstring)."""
        succeeded = self.statuses["ok"] + self.finished_before
        return self.swept and sum(self.failures().values()) > 0 and succeeded == 0

    def job_failed(self, overrides: Sequence[str] | None, exc: BaseException) -> JobFailure:
        """Note a job that raised (so wrote no record); returns the failure noted."""
        failure = JobFailure(" ".join(overrides or []) or "(no overrides)", one_line(exc))
        self.failed_jobs.append(failure)
        return failure

    def collection_failed(self, message: str) -> None:
        """Note that collecting the records into the table failed (``message``: one sentence)."""
        self.collection_error = message

    def stopped(self, not_run: int | None) -> None:
        """Note a stop by Ctrl-C that left ``not_run`` jobs unrun (None: unknown)."""
        self.interrupted = True
        if self.not_run is not None:
            self.not_run = None if not_run is None else self.not_run + not_run

    def aborted(self, exc: BaseException, not_run: int | None) -> None:
        """Note that the sweep stopped because Hydra could not set a job up (it writes each
        job's config and log before the job runs: a full disk, a folder removed), leaving
        ``not_run`` jobs unrun (None: unknown)."""
        self.abort_reason, self.abort_not_run = one_line(exc), not_run

    def exit_status(self) -> int:
        """130 after a Ctrl-C (143 after SIGTERM); 1 after a job without a record, a failed
        collection or a sweep in which no job succeeded; else 0."""
        if self.interrupted:
            return TERMINATED if self.stopped_by == "SIGTERM" else INTERRUPTED
        failed = self.failed_jobs or self.collection_error or self.abort_reason
        return 1 if failed or self.nothing_succeeded() else 0

    def report(self) -> list[str]:
        """One line per thing to tell, without the ``attnbench:`` prefix."""
        lines = [f"job failed without a record: {f.job} ({f.error})" for f in self.failed_jobs]
        if self.abort_reason:
            count = "" if self.abort_not_run is None else f"; {self.abort_not_run} job(s) not run"
            lines.append(
                f"the sweep stopped: Hydra could not set up a job ({self.abort_reason}){count}. "
                "The finished jobs keep their records; fix the cause (a full disk?) and run the "
                "same command again to run the rest."
            )
        if self.collection_error:
            lines.append(self.collection_error)
        if self.interrupted:
            count = "" if self.not_run is None else f"; {self.not_run} job(s) not run"
            lines.append(
                f"stopped by {self.stopped_by}{count}. The finished jobs are collected; running "
                "the same command again runs only what has no record yet."
            )
        if any(self.statuses[status] for status in FAILURES):  # a job's record says it failed
            lines.append(self._count_line())
        return lines

    def _count_line(self) -> str:
        """``3 of 40 jobs failed: 2 timeout, 1 oom (records in results/runs)``: the sweep's last
        line, so that a failure among many jobs' log lines is not missed."""
        failed = self.failures()
        total = sum(self.statuses.values()) + self.finished_before + len(self.failed_jobs)
        reasons = ", ".join(f"{n} {status}" for status, n in failed.most_common())
        where = f" (records in {self.records})" if self.records else ""
        last = "; no job succeeded." if self.nothing_succeeded() else ""
        return f"{sum(failed.values())} of {total} jobs failed: {reasons}{where}{last}"


OUTCOME = SweepOutcome()
