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

The command line narrows the grids. A config group it sets (``task=recall``,
``variant=softmax,linear``) is intersected with each grid's choices for that group: a grid left
with no choice is dropped (its other keys, such as ``task.min_run_time``, may not exist for the
command line's choice), the others run only the common choices; if no grid is left, that is one
sentence and exit 2. Any other key of the command line replaces the grid's value.

A grid may set ``run_alone: true`` (a key of the grid, not an override): each of its jobs runs
by itself in the sweep's own process (Hydra's basic launcher), whatever the configured launcher,
so that with a parallel launcher (joblib) a job that times something never shares the machine
with another job of the sweep, while the other grids' jobs still run side by side
(conf/sweep/quick.yaml, standard.yaml). In-process also keeps the per-process set-up a timing job
reuses (the memory probe, `attnbench.toolkit.memory`), which a worker process must shut down after
every job.

A grid may set ``seeds_at_best: "1,2"`` (a key of the grid): its jobs tune the task's tuning axes
(``task.lr: 0.001,0.003,0.01,0.03`` at one ``seed``), and once every job of the sweep's grids has
run, each (variant, setting) is run again at these seeds with the values that won, by the
board's rule (`attnbench.harness.results.tuning_choice`: the best validation score over the seeds
the values share). Four values and three seeds then cost six jobs, not twelve, and the board's
number for a variant is the mean of three seeds at its tuned value. The choice is read from the
records, so a resumed sweep makes the same one and skips what it ran; a (variant, setting) whose
values all failed gets no further seeds, and the sweep says so.

A grid may set ``expected_s: 1.4`` (a key of the grid): the seconds of the sweep's clock one of
its jobs took on the host the preset was sized on (a pooled job's share: its time over the
workers). Jobs differ by tens between grids (a timing run alone against a training job beside
another), so a mean over the jobs done so far mispredicts the rest; where every grid gives its
time, the progress line's estimate is the jobs left weighed by it, scaled by how this machine
compares on the jobs done (`attnbench.harness.sweep.progress.SweepProgress`).

Beyond the basic sweeper, three promises (see ``attnbench --help`` in README.md):

* every job is checked before the first one runs (``job_check``, by default
  `attnbench.harness.jobs.preflight.prepare_job`; a ``ValueError`` is one sentence and exit 2),
  and a job with a finished record is not launched at all (``job_done``);
* every job's result is checked after its batch, as Hydra's basic sweeper does by reading each
  ``JobReturn.return_value``, but a job that raised does not end the sweep: the other jobs run,
  the callbacks still collect, and the failure is reported through `attnbench.harness.sweep.outcome`
  (the ``attnbench`` command lists it and exits 1);
* Ctrl-C stops after the running job, a second Ctrl-C at once, and the sweep still ends through
  Hydra's callbacks (`attnbench.harness.sweep.stop`);
* the sweep shows its progress (jobs done of all, failed, elapsed, time left) instead of the
  launchers' per-job messages (`attnbench.harness.sweep.progress`): it knows the number of
  jobs up front and reads each job's result, live for a job run in its own process, per batch
  for jobs in workers.
"""

# No `from __future__ import annotations` here: Hydra imports plugin modules without entering them
# in sys.modules, and dataclasses then cannot resolve string annotations.
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from hydra._internal.core_plugins.basic_launcher import BasicLauncher
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.core.utils import JobReturn
from hydra.types import HydraContext, TaskFunction
from hydra.utils import get_method
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from attnbench.harness.jobs.paths import write_failure
from attnbench.harness.jobs.records import FAILURES, find_finished_record
from attnbench.harness.results.tuning_choice import score_candidates, value_label, winner
from attnbench.harness.sweep.outcome import OUTCOME
from attnbench.harness.sweep.progress import JobEnds, ReportingTask, SweepProgress, job_status
from attnbench.harness.sweep.stop import (
    SKIPPED,
    STOP_FILE,
    GracefulStop,
    GuardedTask,
    StopSweep,
    raised_by_a_stop,
)
from attnbench.harness.sweep.warm import KernelWarmer

log = logging.getLogger(__name__)
RUN_ALONE = "run_alone"  # a grid key: launch each of the grid's jobs in a batch of its own
SEEDS_AT_BEST = "seeds_at_best"  # a grid key: seeds to run again at each tuned winner
EXPECTED = "expected_s"  # a grid key: a job's seconds on the sweep's clock, where it was sized
GRID_KEYS = (RUN_ALONE, SEEDS_AT_BEST, EXPECTED)  # keys of a grid that are not overrides


@dataclass
class GridsSweeperConf:
    """Config of the `grids` sweeper."""

    _target_: str = "hydra_plugins.attnbench_sweeper.grids_sweeper.GridsSweeper"
    max_batch_size: int | None = None  # jobs handed to the launcher at once; None = all
    grids: list[dict[str, Any]] = field(default_factory=list)  # each a basic-sweeper params dict
    # checks one composed job before any runs: a ValueError refuses the sweep; null = no check
    job_check: str | None = "attnbench.harness.jobs.preflight.prepare_job"
    # (composed job, job_check's return) -> whether it finished earlier and is not launched;
    # null = launch every job
    job_done: str | None = "attnbench.harness.jobs.job.finished_earlier"


ConfigStore.instance().store(
    group="hydra/sweeper", name="grids", node=GridsSweeperConf, provider="attnbench"
)


def _runs_in_local_workers(launcher: Any) -> bool:
    """Whether the launcher runs its jobs in worker processes of this machine that end with the
    sweep (joblib's). A first Ctrl-C before any of them started stops at once (`GracefulStop`);
    not so for a cluster's queued jobs (submitit), which would outlive the sweep and then run."""
    return type(launcher).__module__.startswith("hydra_plugins.hydra_joblib_launcher")


def refuse(message: str) -> NoReturn:
    """Bad input found by the sweeper: one sentence, exit status 2, before any job runs."""
    print(f"attnbench: {message}", file=sys.stderr)
    raise SystemExit(2)


def _choices(override: Override) -> list[str]:
    """The values an override stands for, as override strings (globs expanded)."""
    if override.is_discrete_sweep():
        return list(override.sweep_string_iterator())
    return [override.get_value_element_as_str()]


def _seeds(value: Any) -> tuple[int, ...]:
    """A grid's ``seeds_at_best`` (``"1,2"``, ``[1, 2]``, ``1`` or absent) as whole seeds."""
    if value is None:
        return ()
    items = value if isinstance(value, list | tuple) else str(value).split(",")
    try:
        seeds = tuple(int(str(s).strip()) for s in items)
    except ValueError:
        refuse(f"seeds_at_best: {value!r} is not a list of whole seeds; write it as 1,2.")
    if any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        refuse(f"seeds_at_best: {value!r} must list distinct seeds of 0 or more, as 1,2.")
    return seeds


def _key(override: str) -> str:
    """The key of an override line (``+task.lr=0.1`` → ``task.lr``)."""
    return override.split("=", 1)[0].lstrip("+~")


def _value(job: list[str], key: str) -> str | None:
    """The value a job's overrides give ``key``; None where they do not set it."""
    for o in job:
        if _key(o) == key:
            return o.split("=", 1)[1]
    return None


def _seconds(value: Any) -> float | None:
    """A grid's ``expected_s``: a positive number of seconds, or None where it gives none."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        refuse(f"expected_s={value} in a grid: give the seconds one of its jobs takes (> 0).")
    return seconds


def _scalar(points: list[dict], metric: str) -> float | None:
    """A record's value of ``metric`` without a curve axis; None where it has none."""
    for p in points:
        if p.get("metric") == metric and not p.get("x_name"):
            value = p.get("value")
            return None if value is None else float(value)
    return None


class GridsSweeper(BasicSweeper):
    """Runs the union of several basic-sweeper grids (see the module docstring)."""

    def __init__(
        self,
        grids: list[dict[str, Any]],
        max_batch_size: int | None = None,
        job_check: str | None = None,
        job_done: str | None = None,
    ) -> None:
        super().__init__(max_batch_size=max_batch_size, params=None)
        # YAML gives numbers; `run_alone` and `seeds_at_best` are the grid's own, not overrides
        self.grids = [{str(k): str(v) for k, v in g.items() if k not in GRID_KEYS} for g in grids]
        self.alone = [bool(g.get(RUN_ALONE, False)) for g in grids]
        self.at_best = [_seeds(g.get(SEEDS_AT_BEST)) for g in grids]
        self.expected = [_seconds(g.get(EXPECTED)) for g in grids]
        self.job_expected: dict[tuple[str, ...], float | None] = {}  # a job → its grid's
        self.alone_jobs: set[tuple[str, ...]] = set()
        self.tuned: list[tuple[tuple[int, ...], list[list[str]]]] = []  # (seeds, the grid's jobs)
        self.prepared: dict[tuple[str, ...], Any] = {}  # a tuned grid's job → job_check's return
        self.in_process: BasicLauncher | None = None  # runs the run_alone jobs
        self.job_check = job_check
        self.job_done = job_done
        self.guard: GuardedTask | None = None
        self.reporting: ReportingTask | None = None  # the guard, as the launchers run it
        self.stopped = False  # the last `_launch_all` ended by a stop, not by its last batch
        self.warmer: KernelWarmer | None = None  # their first calls, while the jobs are composed

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        """As the basic sweeper, but the launcher gets the task wrapped in a `GuardedTask` (a
        stop between jobs) and that in a `ReportingTask` (the progress moves as a job ends)."""
        stop_file = Path(str(config.hydra.sweep.dir)).absolute() / STOP_FILE
        self.guard = GuardedTask(task_function, stop_file)
        self.reporting = ReportingTask(self.guard)
        super().setup(hydra_context=hydra_context, task_function=self.reporting, config=config)

    # --- which jobs ------------------------------------------------------------------------

    def _is_group(self, key: str) -> bool:
        assert self.hydra_context is not None
        return bool(self.hydra_context.config_loader.get_group_options(key))

    def _narrow(self, grid: list[Override], command_line: list[Override]) -> list[str] | None:
        """A grid's override lines with the command line applied; None if it selects nothing.

        Config groups in both are intersected (the grid's order kept); every other command-line
        override is appended, so that it wins over the grid's value.
        """
        given = {o.get_key_element(): o for o in command_line}
        lines, merged = [], set()
        for o in grid:
            key = o.get_key_element()
            if key in given and self._is_group(o.key_or_group):
                wanted = _choices(given[key])
                common = [c for c in _choices(o) if c in wanted]
                if not common:
                    return None
                lines.append(f"{key}={','.join(common)}")
                merged.add(key)
            else:
                lines.append(o.input_line)
        return lines + [o.input_line for o in command_line if o.get_key_element() not in merged]

    def job_overrides(self, arguments: list[str]) -> list[list[str]]:
        """Every job's overrides: each grid narrowed by the command line and expanded,
        duplicates dropped. Refuses (exit 2) when the command line leaves no grid or no job."""
        assert self.hydra_context is not None
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        command_line = parser.parse_overrides(list(arguments))
        grids = [parser.parse_overrides([f"{k}={v}" for k, v in g.items()]) for g in self.grids]
        jobs: list[list[str]] = []
        seen = set()
        kept = 0
        self.tuned = []
        for grid, alone, seeds, expected in zip(
            grids or [[]],
            self.alone or [False],
            self.at_best or [()],
            self.expected or [None],
            strict=True,
        ):
            lines = self._narrow(grid, command_line)
            if lines is None:
                continue
            kept += 1
            (expanded,) = self.split_arguments(parser.parse_overrides(lines), None)
            if seeds:
                self._check_tuned_grid(expanded, seeds)
                self.tuned.append((seeds, expanded))
            for job in expanded:
                # one job per set of overrides, whatever their order: a command-line override
                # appended to one grid can repeat another grid's job with its keys reordered
                if (key := tuple(sorted(job))) not in seen:
                    seen.add(key)
                    jobs.append(job)
                    self.job_expected[tuple(job)] = expected
                    if alone:
                        self.alone_jobs.add(tuple(job))
        if not kept:
            self._refuse_no_grid(grids, command_line)
        if not jobs:
            refuse(
                "this sweep expands to no job (a glob that matches nothing?); a sweep that "
                "matches nothing is an error."
            )
        return jobs

    @staticmethod
    def _check_tuned_grid(jobs: list[list[str]], seeds: tuple[int, ...]) -> None:
        """A ``seeds_at_best`` grid tunes at one seed: its own seed must not be one it adds."""
        own = {_value(job, "seed") for job in jobs}
        clash = sorted(s for s in seeds if str(s) in own or (s == 0 and None in own))
        if clash:
            refuse(
                f"a grid with seeds_at_best: {','.join(map(str, seeds))} also runs seed "
                f"{clash[0]} itself; give the grid one seed the list does not have."
            )

    def _refuse_no_grid(self, grids: list[list[Override]], command_line: list[Override]) -> None:
        in_grids = {o.get_key_element() for grid in grids for o in grid}
        keys = {
            o.get_key_element()
            for o in command_line
            if o.get_key_element() in in_grids and self._is_group(o.key_or_group)
        }
        given = " ".join(o.input_line for o in command_line if o.get_key_element() in keys)
        offered = []
        for grid in grids:
            text = " ".join(o.input_line for o in grid if o.get_key_element() in keys)
            if text not in offered:
                offered.append(text)
        refuse(
            f"{given} leaves none of this sweep's grids to run (they have: "
            f"{'; '.join(offered)}); drop it or choose values a grid has."
        )

    def validate_jobs(self, jobs: list[list[str]]) -> list[list[str]]:
        """Compose every job and run ``job_check`` on it before the first one runs; return the
        jobs to launch: those ``job_done`` does not call finished.

        A bad value anywhere in the sweep prints one sentence and exits with status 2, so a
        sweep never stops half-way on bad input. A job finished earlier is not launched: on a
        cluster each launch is a scheduled job and an interpreter start, only for the job to
        find its record (`harness.jobs.job` would skip it too). A job bound for a worker whose
        default thread count is not this process's gets ``threads=0`` resolved to the worker's
        count (`_worker_threads`), so that "finished earlier" compares what the worker records.
        """
        if not self.job_check:
            return jobs
        check = get_method(self.job_check)
        done = get_method(self.job_done) if self.job_done else None
        assert self.hydra_context is not None and self.config is not None
        loader = self.hydra_context.config_loader
        workers = self._worker_threads()
        todo = []
        tuned = {tuple(job) for _, grid in self.tuned for job in grid}
        for job in jobs:
            original = tuple(job)
            cfg = loader.load_sweep_config(self.config, list(job))
            if workers is not None and tuple(job) not in self.alone_jobs and cfg.threads == 0:
                job = [o for o in job if o.split("=", 1)[0].lstrip("+") != "threads"]
                job.append(f"threads={workers}")
                # what composing again with the override gives, without composing (each
                # composition costs about 0.1 s: the quick sweep's 221 pooled jobs took 25 s
                # twice over before the first job ran)
                with read_write(cfg), open_dict(cfg):
                    cfg.threads = workers
            try:
                checked = check(cfg)
            except ValueError as exc:
                refuse(f"{exc} (job: {' '.join(job)})")
            if original in tuned:
                self.prepared[original] = checked
            if done is None or not done(cfg, checked):
                todo.append(job)
                identity = getattr(checked, "identity", None)  # a `PreparedJob`'s, by default
                on_cpu = isinstance(identity, dict) and identity.get("device") == "cpu"
                if on_cpu and self.warmer is not None:  # its first call, while we compose
                    self.warmer.add(str(identity.get("variant")))
        OUTCOME.sweep_planned(len(jobs), len(todo), self.config.get("results_dir"))
        if len(todo) < len(jobs):
            log.info(
                "grids sweeper: %d of %d jobs finished earlier (a record each): not launched",
                len(jobs) - len(todo),
                len(jobs),
            )
        return todo

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        """Hydra composes every job of a batch once more before launching it, to fail early;
        `validate_jobs` composed and checked every job of the sweep before the first one ran
        (where a ``job_check`` is set), so that is not repeated: before the quick sweep's
        batch of 220 jobs it took 23 s in which no job ran."""
        if not self.job_check:
            super().validate_batch_is_legal(batch)

    def _worker_threads(self) -> int | None:
        """The thread count ``threads=0`` stands for in the configured launcher's workers, where
        that is not this process's count; None where jobs run with this process's default.

        ``threads=0`` is torch's default thread count, read in the process that runs the job,
        and a job's identity holds the resolved count. Joblib's (loky) workers start with
        ``OMP_NUM_THREADS`` at cpu_count // n_jobs (joblib's ``_prepare_worker_env``), so torch's
        default there may not be this process's: resolved here, a job run earlier at this
        process's count would be skipped as finished while the workers measure at theirs.
        Resolved to the workers' count and passed to each job, the two identities are one. With
        one effective worker joblib runs the jobs in this process, at its count.
        """
        assert self.config is not None
        launcher = self.config.hydra.launcher
        if "hydra_joblib_launcher" not in str(launcher.get("_target_", "")):
            return None
        from joblib._parallel_backends import LokyBackend

        backend = LokyBackend()
        n_jobs = launcher.get("n_jobs")
        n_jobs = backend.effective_n_jobs(None if n_jobs is None else int(n_jobs))
        if n_jobs == 1:
            return None
        return int(backend._prepare_worker_env(n_jobs)["OMP_NUM_THREADS"])

    # --- the seeds at the tuned values ----------------------------------------------------

    def _tuned_groups(self) -> list[tuple[tuple[int, ...], dict[tuple[str, ...], list[list[str]]]]]:
        """Per ``seeds_at_best`` grid: its seeds, and its jobs grouped by (variant, setting):
        every override but ``seed`` and the task's tuning axes (``task.lr``, …)."""
        out = []
        for seeds, jobs in self.tuned:
            groups: dict[tuple[str, ...], list[list[str]]] = {}
            for job in jobs:
                axes = {f"task.{a}" for a in self._tuning(job).params} | {"seed"}
                key = tuple(sorted(o for o in job if _key(o) not in axes))
                groups.setdefault(key, []).append(job)
            out.append((seeds, groups))
        return out

    def _tuning(self, job: list[str]) -> Any:
        """The tuning axes the task of a ``seeds_at_best`` grid's job declares (`Tuning`)."""
        prepared = self.prepared.get(tuple(job))
        if prepared is None:  # no job_check: nothing composed the job
            refuse("seeds_at_best needs the sweeper's job_check to compose its jobs; set it.")
        tuning = prepared.task_class.describe().tuning
        if tuning is None or not tuning.params:
            refuse(
                f"seeds_at_best is for a grid that tunes: task '{prepared.task_class.name}' "
                "declares no tuning axes (TaskInfo.tuning); run its seeds in the grid instead."
            )
        return tuning

    def _jobs_at_best(self) -> list[list[str]]:
        """The jobs of every ``seeds_at_best`` grid's seeds at each group's winning values, read
        from the records of the grid's jobs; a group none of whose values has a score adds none
        (said in the log, since its failures are on the board)."""
        assert self.config is not None
        folder = str(self.config.results_dir)
        out = []
        for seeds, groups in self._tuned_groups():
            for key, jobs in groups.items():
                tuning = self._tuning(jobs[0])
                info = self.prepared[tuple(jobs[0])].task_class.describe()
                metric = info.metric(tuning.select_by)
                higher = bool(metric.higher_is_better) if metric else True
                scores: dict[str, dict[int, float]] = {}
                by_label: dict[str, list[str]] = {}
                for job in jobs:
                    record = find_finished_record(folder, self.prepared[tuple(job)].run_id)
                    if record is None:
                        continue
                    label = value_label(record.task_params, tuning.params)
                    by_label[label] = job
                    value = _scalar(record.metrics, tuning.select_by)
                    scores.setdefault(label, {})
                    if value is not None:
                        scores[label][int(record.seed)] = value
                best = winner(score_candidates(scores), higher)
                if best is None:
                    log.warning(
                        "seeds_at_best: no value of %s scored %s for %s: no further seeds run",
                        ", ".join(tuning.params),
                        tuning.select_by,
                        " ".join(key),
                    )
                    continue
                base = [o for o in by_label[best] if _key(o) != "seed"]
                for seed in seeds:
                    out.append(base + [f"seed={seed}"])
                    self.job_expected[tuple(out[-1])] = self.job_expected.get(tuple(jobs[0]))
        return out

    # --- running them ----------------------------------------------------------------------

    def _launcher_of(self, batch: Sequence[Sequence[str]]) -> Any:
        """The configured launcher, or for a `run_alone` job Hydra's basic launcher: in this
        process, nothing else running."""
        if not (len(batch) == 1 and tuple(batch[0]) in self.alone_jobs):
            return self.launcher
        if self.in_process is None:
            assert self.hydra_context is not None and self.config is not None
            self.in_process = BasicLauncher()
            self.in_process.setup(
                hydra_context=self.hydra_context, task_function=self.reporting, config=self.config
            )
        return self.in_process

    def batches(self, jobs: list[list[str]]) -> list[list[list[str]]]:
        """The launcher's batches, in job order: a `run_alone` grid's job alone, runs of the
        other jobs in chunks of ``max_batch_size`` (all of a run when None)."""
        batches: list[list[list[str]]] = []
        shared: list[list[str]] = []

        def flush() -> None:
            if shared:
                batches.extend(self.split_overrides_to_chunks(shared, self.max_batch_size))
                shared.clear()

        for job in jobs:
            if tuple(job) in self.alone_jobs:
                flush()
                batches.append([job])
            else:
                shared.append(job)
        flush()
        return batches

    def _check_returns(self, results: Sequence[JobReturn]) -> tuple[int, int]:
        """Read every job's return value, as Hydra's basic sweeper does; a job that raised goes
        to the command's outcome instead of ending the sweep. Returns how many did not run and
        how many failed (raised, or recorded ``failed``, ``oom`` or ``timeout``)."""
        not_run = failed = 0
        for r in results:
            try:
                value = r.return_value  # re-raises the job's exception, as Hydra intends
            except Exception as exc:
                failure = OUTCOME.job_failed(r.overrides, exc)
                log.debug("job %s failed", failure.job, exc_info=exc)
                failed += 1
                continue
            OUTCOME.job_ended(value)  # counted for the sweep's last line and exit status
            not_run += isinstance(value, str) and value == SKIPPED
            failed += job_status(value) in FAILURES
        return not_run, failed

    def sweep(self, arguments: list[str]) -> Any:
        assert self.config is not None and self.launcher is not None and self.guard is not None
        assert self.reporting is not None
        warmer = self.warmer = KernelWarmer()  # first calls as the jobs name their variants
        try:
            jobs = self.validate_jobs(self.job_overrides(arguments))
        except BaseException:
            warmer.abandon()  # a refused or interrupted sweep waits for no build
            raise
        finally:
            self.warmer = None
        seconds = warmer.finish()  # a Ctrl-C while it waits: `finish` abandons the rest
        if seconds >= 1:
            log.info(
                "grids sweeper: first calls (kernel builds) took %.0f s, before the clock", seconds
            )
        self.overrides = self.batches(jobs)
        self._save_sweep(Path(self.config.hydra.sweep.dir))
        later = sum(len(groups) * len(seeds) for seeds, groups in self._tuned_groups())
        source = f"{len(self.grids)} grids" if self.grids else "the command line"
        log.info("grids sweeper: %d jobs from %s", len(jobs), source)
        if later:
            log.info(
                "grids sweeper: then at most %d at the tuned values (seeds_at_best), once those "
                "ran",
                later,
            )
        if not jobs and not later:
            return []
        self.reporting.progress = progress = SweepProgress(
            len(jobs) + later, expected=self._expected(self.overrides, later)
        )
        self.reporting.ends = JobEnds.open(progress)
        try:
            returns = self._launch_all(jobs, progress)
            if later and not self.stopped:
                tuned = self.validate_jobs(self._jobs_at_best())
                self.overrides.extend(self.batches(tuned))
                progress.resize(len(jobs) + len(tuned), self._expected(self.overrides, 0))
                returns += self._launch_all(tuned, progress, offset=len(jobs))
            return returns
        finally:
            if self.reporting.ends is not None:
                self.reporting.ends.close()
            progress.close()
            self.reporting.progress = self.reporting.ends = None

    def _expected(self, batches: list[list[list[str]]], later: int) -> list[float] | None:
        """Each job's expected seconds in launch order, then ``later`` jobs' at the tuned grids'
        (their groups' grid's); None unless every grid gives one (``expected_s``)."""
        times = [self.job_expected.get(tuple(job)) for batch in batches for job in batch]
        for seeds, groups in self._tuned_groups() if later else []:
            for jobs in groups.values():
                times += [self.job_expected.get(tuple(jobs[0]))] * len(seeds)
        if any(t is None for t in times):
            return None
        return [float(t) for t in times if t is not None]

    def _launch_all(self, jobs: list[list[str]], progress: SweepProgress, offset: int = 0) -> Any:
        """Launch the batches of ``jobs`` in order (`sweep`), until done or stopped; ``offset``:
        the number of the sweep's jobs launched before them (Hydra numbers jobs from it)."""
        assert self.launcher is not None and self.guard is not None
        returns = []
        first = 0
        self.stopped = True  # until every batch has been launched: a stop returns early
        self.guard.take_batch()
        with GracefulStop(self.guard.stop_file) as stop:
            while not self.is_done() and not stop.requested:
                batch = self.get_job_batch()
                self.validate_batch_is_legal(batch)
                launcher = self._launcher_of(batch)
                stop.new_batch(local_workers=_runs_in_local_workers(launcher))
                try:
                    results = launcher.launch(batch, initial_job_idx=offset + first)
                except (StopSweep, KeyboardInterrupt) as exc:
                    self._aborted(batch, exc, before_any_job=stop.before_any_job)
                    return returns
                except Exception as exc:
                    # A Ctrl-C while joblib's workers start reaches them before they ignore it
                    # (GuardedTask), and the pool breaks (BrokenProcessPool): after a Ctrl-C a
                    # launcher's failure is the stop it asked for, not a traceback. So is an
                    # error raised by a stop that landed in Hydra's set-up of the next job.
                    if stop.requested or raised_by_a_stop(exc):
                        self._aborted(batch, exc)
                    elif isinstance(exc, OSError):  # Hydra's own writes for a job: config, log
                        self._launch_failed(batch, exc)
                    else:
                        raise
                    return returns
                first += len(batch)
                returns.append(results)
                skipped, failed = self._check_returns(results)
                if self.reporting is not None and self.reporting.ends is not None:
                    self.reporting.ends.next_batch()  # a late message of this batch is dropped
                progress.batch_finished(len(results) - skipped, failed)
                self.guard.take_batch()
                if stop.requested:
                    OUTCOME.stopped(skipped + (len(jobs) - first))
            self.stopped = stop.requested
        return returns

    def _save_sweep(self, sweep_dir: Path) -> None:
        """Create the sweep folder and write Hydra's ``multirun.yaml`` in it, as Hydra's basic
        sweeper does. Where that fails (a full disk, a symbolic link that leads back into
        itself), no job has run: one sentence naming the folder and the fix, exit status 2."""
        assert self.config is not None
        try:
            sweep_dir.mkdir(parents=True, exist_ok=True)
            OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        except OSError as exc:
            refuse(
                f"cannot write Hydra's output in hydra.sweep.dir={sweep_dir} ("
                + write_failure(exc, "results_dir=PATH or hydra.sweep.dir=PATH")
                + "); no job ran."
            )

    def _launch_failed(self, batch: Sequence[Sequence[str]], exc: OSError) -> None:
        """Hydra could not set a job up (before a job runs it writes the job's config and log
        under the sweep folder: a full disk, a folder removed), and the launch raised. The sweep
        stops there, since the next job would meet the same wall, but ends through the
        callbacks, so that what finished is collected; the failures seen, the job Hydra was
        setting up and the number not run go to the command's outcome (exit 1)."""
        assert self.guard is not None and self.overrides is not None
        started, finished, failures = self.guard.take_batch()
        for overrides, error in failures:
            OUTCOME.job_failed(overrides, error)
        later = sum(len(b) for b in self.overrides[self.batch_index :])
        in_process = isinstance(self._launcher_of(batch), BasicLauncher)
        if in_process and started < len(batch):
            OUTCOME.job_failed(batch[started], exc)  # the job whose set-up failed
        OUTCOME.aborted(exc, later + len(batch) - started - 1 if in_process else None)

    def _aborted(
        self, batch: Sequence[Sequence[str]], exc: BaseException, before_any_job: bool = False
    ) -> None:
        """A launch that a Ctrl-C cut short: note the stop and the failures seen in this process.

        Jobs that ran in this process (Hydra's basic launcher) are counted by the guard; jobs in
        workers cannot be (their results are lost with the launch), so the number not run is
        then unknown, unless the stop came before any job of the batch started.
        """
        assert self.guard is not None and self.overrides is not None
        started, finished, failures = self.guard.take_batch()
        for overrides, error in failures:
            OUTCOME.job_failed(overrides, error)
        in_process = (
            isinstance(exc, StopSweep)
            or started > 0
            or before_any_job
            or isinstance(self._launcher_of(batch), BasicLauncher)
        )
        later = sum(len(b) for b in self.overrides[self.batch_index :])
        OUTCOME.stopped(later + len(batch) - finished if in_process else None)
