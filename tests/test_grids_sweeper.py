"""The `grids` sweeper (hydra_plugins/attnbench_sweeper).

On Hydra's own test app (``hydra.test_utils``): Hydra's launcher, batching and integration test
suites, as Hydra's plugin examples run them; then, in-process, a job that raises is reported and
the sweep goes on (basic and joblib launchers), Ctrl-C stops after the running job and twice
stops now, and the command line narrows the grids. Last, real sweeps of attnbench via the CLI.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from conftest import REPO, run_cli
from hydra.core.utils import JobStatus
from hydra.test_utils.launcher_common_tests import (
    BatchedSweeperTestSuite,
    IntegrationTestSuite,
    LauncherTestSuite,
)

from attnbench.harness.sweep.outcome import OUTCOME, JobFailure

SEARCHPATH = f"hydra.searchpath=[file://{REPO / 'tests' / 'conf'}]"
# Hydra's test app is no attnbench config: no attnbench job check on it. Hydra's suites expect
# each job to run in its own output folder, the default before version_base 1.2; other tests set
# version_base 1.3 process-wide (hydra.initialize), so it is asked for explicitly.
GRIDS = ["hydra/sweeper=grids", "hydra.sweeper.job_check=null", "hydra.job.chdir=true"]


@pytest.mark.parametrize("launcher_name, overrides", [("basic", GRIDS), ("joblib", GRIDS)])
class TestHydrasLauncherSuite(LauncherTestSuite):
    """Hydra's checks of a sweeper/launcher pair: job outputs, directories, overrides, configs."""


@pytest.mark.parametrize(
    "launcher_name, overrides", [("basic", [*GRIDS, "hydra.sweeper.max_batch_size=2"])]
)
class TestHydrasBatchedSweeperSuite(BatchedSweeperTestSuite):
    """Batches of two jobs keep their own directories and overrides."""


@pytest.mark.parametrize(
    "task_launcher_cfg, extra_flags", [({}, ["-m", *GRIDS, "hydra/launcher=basic"])]
)
class TestHydrasIntegrationSuite(IntegrationTestSuite):
    """Real Hydra apps in subprocesses: task names, sweep and job directories, original cwd."""


def _sweep_batches(runner, tmp_path, task_function, *overrides):
    """Run a sweep of Hydra's test app with the grids sweeper; return the job returns per batch
    the launcher was handed."""
    OUTCOME.reset()
    sweep = runner(
        calling_file=None,
        calling_module="hydra.test_utils.a_module",
        task_function=task_function,
        config_path="configs",
        config_name="compose.yaml",
        overrides=[*GRIDS, *overrides],
        temp_dir=tmp_path,
    )
    with sweep:
        return sweep.returns


def _sweep(runner, tmp_path, task_function, *overrides):
    """Run a sweep of Hydra's test app with the grids sweeper; return the flat job returns."""
    return [
        r for batch in _sweep_batches(runner, tmp_path, task_function, *overrides) for r in batch
    ]


def fails_for_bar_2(cfg):
    """A job whose record write would fail: it raises instead of returning (module level: the
    joblib launcher pickles it by reference)."""
    if cfg.bar == 2:
        raise OSError("No space left on device")
    return cfg.bar


@pytest.mark.parametrize("launcher", ["basic", "joblib"])
def test_a_job_that_raises_is_reported_and_the_sweep_goes_on(
    hydra_sweep_runner, tmp_path, launcher
):
    returns = _sweep(
        hydra_sweep_runner, tmp_path, fails_for_bar_2, f"hydra/launcher={launcher}", "bar=1,2,3"
    )
    assert [r.status for r in returns] == [
        JobStatus.COMPLETED,
        JobStatus.FAILED,
        JobStatus.COMPLETED,
    ]
    assert [r.return_value for r in returns if r.status == JobStatus.COMPLETED] == [1, 3]
    assert OUTCOME.failed_jobs == [JobFailure("bar=2", "OSError: No space left on device")]
    assert OUTCOME.exit_status() == 1
    assert OUTCOME.report() == [
        "job failed without a record: bar=2 (OSError: No space left on device)"
    ]


def accept_any(cfg):
    """A job check that accepts every job (module level: the sweeper imports it by name)."""
    return cfg


@pytest.mark.parametrize("job_check", ["test_grids_sweeper.accept_any", "null"])
def test_each_job_is_composed_once_before_the_sweep_and_once_to_run(
    hydra_sweep_runner, tmp_path, monkeypatch, job_check
):
    """Hydra composes every job of a batch again before launching it; where the sweeper's job
    check composed the whole sweep first, that third composition is skipped (for the quick
    sweep's batch of 220 jobs it was 23 s in which no job ran). Without a job check, Hydra's
    check of the batch is the only one before the launch, and stays."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    calls = []
    compose = ConfigLoaderImpl.load_sweep_config

    def counted(self, master_config, sweep_overrides):
        calls.append(tuple(sweep_overrides))
        return compose(self, master_config, sweep_overrides)

    monkeypatch.setattr(ConfigLoaderImpl, "load_sweep_config", counted)
    OUTCOME.reset()
    sweep = hydra_sweep_runner(
        calling_file=None,
        calling_module="hydra.test_utils.a_module",
        task_function=lambda cfg: cfg.bar,
        config_path="configs",
        config_name="compose.yaml",
        overrides=[
            "hydra/sweeper=grids",
            f"hydra.sweeper.job_check={job_check}",
            "hydra.sweeper.job_done=null",
            "hydra.job.chdir=true",
            "hydra/launcher=basic",
            "bar=1,2,3",
        ],
        temp_dir=tmp_path,
    )
    with sweep:
        assert [r.return_value for batch in sweep.returns for r in batch] == [1, 2, 3]
    assert len(calls) == 6  # job check + launch, or Hydra's batch check + launch


def _ctrl_c_in_job(times: int, finished: list):
    """A task that presses Ctrl-C ``times`` times while job bar=2 runs (signals to itself)."""

    def task(cfg):
        if cfg.bar == 2:
            for _ in range(times):
                os.kill(os.getpid(), signal.SIGINT)
        finished.append(cfg.bar)
        return cfg.bar

    return task


def test_first_ctrl_c_finishes_the_running_job_and_runs_no_other(
    hydra_sweep_runner, tmp_path, capfd
):
    finished: list[int] = []
    previous = signal.getsignal(signal.SIGINT)
    _sweep(hydra_sweep_runner, tmp_path, _ctrl_c_in_job(1, finished), "bar=1,2,3,4")
    assert finished == [1, 2]  # bar=2 ran to its end; 3 and 4 never started
    assert OUTCOME.interrupted and OUTCOME.not_run == 2 and OUTCOME.exit_status() == 130
    assert "stopping after the running job" in capfd.readouterr().err
    assert not list(tmp_path.glob("3")) and not (tmp_path / ".stop").exists()
    assert signal.getsignal(signal.SIGINT) is previous  # the handler is put back


def test_second_ctrl_c_stops_the_running_job_now(hydra_sweep_runner, tmp_path):
    finished: list[int] = []
    _sweep(hydra_sweep_runner, tmp_path, _ctrl_c_in_job(2, finished), "bar=1,2,3,4")
    assert finished == [1]  # bar=2 was interrupted
    assert OUTCOME.interrupted and OUTCOME.not_run == 3 and OUTCOME.exit_status() == 130
    assert OUTCOME.failed_jobs == []  # an interrupted job is not a failure


def test_a_sigterm_inside_hydra_s_composition_of_the_next_job_is_the_stop(
    hydra_sweep_runner, tmp_path, monkeypatch
):
    """SIGTERM between jobs lands in Hydra's composition of the next one (the basic launcher
    composes each job before running it), whose clean-up of the half-made config raises an
    AttributeError. That error is the stop: counted (bar=3 and 4 not run), exit 143, not Hydra's
    error with exit 1 and no count (CI met it in test_a_stopped_sweep_runs_no_seeds_at_best)."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    from attnbench.harness.sweep.stop import terminate_now

    compose = ConfigLoaderImpl.load_sweep_config
    armed: list[bool] = []

    def interrupted(self, master_config, sweep_overrides):
        if armed:
            armed.clear()
            try:
                terminate_now(signal.SIGTERM, None)  # as the handler does: KeyboardInterrupt
            finally:
                raise AttributeError("'NoneType' object has no attribute '_invalidate_flags_cache'")
        return compose(self, master_config, sweep_overrides)

    def task(cfg):
        armed.extend([True] * (cfg.bar == 2))  # the next composition is bar=3's
        return cfg.bar

    monkeypatch.setattr(ConfigLoaderImpl, "load_sweep_config", interrupted)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        returns = _sweep(hydra_sweep_runner, tmp_path, task, "hydra/launcher=basic", "bar=1,2,3,4")
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert returns == []  # the launch was cut short: its returns are lost, its records are not
    assert OUTCOME.interrupted and OUTCOME.not_run == 2 and OUTCOME.exit_status() == 143
    assert OUTCOME.report()[-1].startswith("stopped by SIGTERM; 2 job(s) not run.")


def test_a_worker_pool_broken_by_the_ctrl_c_is_the_stop_not_a_traceback(
    hydra_sweep_runner, tmp_path, monkeypatch, capfd
):
    """A Ctrl-C while joblib's workers start kills them before they ignore it, and the launch
    raises BrokenProcessPool: the sweep ends as a stopped one (130, collected), no traceback."""
    from concurrent.futures.process import BrokenProcessPool

    from hydra_plugins.attnbench_sweeper.grids_sweeper import GridsSweeper

    class PoolBrokenByCtrlC:
        def launch(self, batch, initial_job_idx):
            os.kill(os.getpid(), signal.SIGINT)  # the first Ctrl-C, which the workers also got
            raise BrokenProcessPool("A process in the process pool was terminated abruptly")

    monkeypatch.setattr(GridsSweeper, "_launcher_of", lambda self, batch: PoolBrokenByCtrlC())
    assert _sweep(hydra_sweep_runner, tmp_path, lambda cfg: cfg.bar, "bar=1,2") == []
    assert OUTCOME.interrupted and OUTCOME.exit_status() == 130
    assert "Traceback" not in capfd.readouterr().err


JOBLIB = "hydra_plugins.hydra_joblib_launcher.joblib_launcher"
SUBMITIT = "hydra_plugins.hydra_submitit_launcher.submitit_launcher"


def _launcher_pressing_ctrl_c(sweeper, module: str, job_started: bool):
    """A launcher of jobs in other processes (of ``module``: joblib's workers, a cluster's jobs)
    that are still starting when the Ctrl-C comes, or of which one has started a job (the file
    a guarded job leaves)."""

    class Launcher:
        def launch(self, batch, initial_job_idx):
            from attnbench.harness.sweep.stop import started_file

            if job_started:
                started_file(sweeper.guard.stop_file).touch()
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(20):  # the handler runs between these bytecodes
                time.sleep(0.01)
            raise RuntimeError("the launch went on after the Ctrl-C")

    Launcher.__module__ = module
    return Launcher()


@pytest.mark.parametrize(
    "module, job_started, stops_now",
    [(JOBLIB, False, True), (JOBLIB, True, False), (SUBMITIT, False, False)],
    ids=["joblib-starting", "joblib-job-started", "cluster-queued"],
)
def test_a_first_ctrl_c_stops_now_only_while_joblib_s_workers_start(
    hydra_sweep_runner, tmp_path, monkeypatch, capfd, module, job_started, stops_now
):
    """With joblib, a first Ctrl-C before any job started stops now instead of waiting for every
    worker to start and skip its jobs (5-13 s). A cluster's queued jobs would outlive the sweep:
    there it still waits."""
    from hydra_plugins.attnbench_sweeper.grids_sweeper import GridsSweeper

    monkeypatch.setattr(
        GridsSweeper,
        "_launcher_of",
        lambda self, b: _launcher_pressing_ctrl_c(self, module, job_started),
    )
    assert _sweep(hydra_sweep_runner, tmp_path, lambda cfg: cfg.bar, "bar=1,2") == []
    err = capfd.readouterr().err
    assert ("no job has started yet; stopping now" in err) is stops_now
    assert ("stopping after the running job" in err) is not stops_now
    assert OUTCOME.interrupted and OUTCOME.exit_status() == 130
    if stops_now:
        assert OUTCOME.not_run == 2  # none started: every job is known not to have run


GRID_LIST = "hydra.sweeper.grids=[{group1:file1,bar:'1,2'},{group1:file2,bar:3}]"


def _jobs(returns):
    return [r.overrides for r in returns]


def test_a_group_on_the_command_line_keeps_only_the_grids_that_have_it(
    hydra_sweep_runner, tmp_path
):
    assert _jobs(_sweep(hydra_sweep_runner, tmp_path, None, GRID_LIST)) == [
        ["group1=file1", "bar=1"],
        ["group1=file1", "bar=2"],
        ["group1=file2", "bar=3"],
    ]
    assert _jobs(_sweep(hydra_sweep_runner, tmp_path, None, GRID_LIST, "group1=file2")) == [
        ["group1=file2", "bar=3"]
    ]
    # a choice list is intersected with each grid's choices; other keys replace the grid's
    assert _jobs(
        _sweep(hydra_sweep_runner, tmp_path, None, GRID_LIST, "group1=file2,file1", "bar=7")
    ) == [["group1=file1", "bar=7"], ["group1=file2", "bar=7"]]


def test_a_group_that_no_grid_has_is_one_sentence(hydra_sweep_runner, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        _sweep(hydra_sweep_runner, tmp_path, None, GRID_LIST, "group1=abc.cde")
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        "attnbench: group1=abc.cde leaves none of this sweep's grids to run (they have: "
        "group1=file1; group1=file2); drop it or choose values a grid has.\n"
    )


def test_the_progress_weighs_the_jobs_left_by_their_grids_expected_seconds(
    hydra_sweep_runner, tmp_path, monkeypatch
):
    """Each job's ``expected_s`` reaches the progress in launch order (a grid's jobs have its
    time); a sweep where one grid gives none keeps the mean per job done."""
    from attnbench.harness.sweep.progress import SweepProgress

    seen: list[list[float] | None] = []
    init = SweepProgress.__init__

    def recording(self, total, stream=None, expected=None):
        init(self, total, stream, expected)
        seen.append(self.expected)

    # the class itself: Hydra loads its plugin modules apart from sys.modules
    monkeypatch.setattr(SweepProgress, "__init__", recording)
    timed = (
        "hydra.sweeper.grids=[{group1:file1,bar:'1,2',expected_s:0.5},"
        "{group1:file2,bar:3,expected_s:4}]"
    )
    assert len(_sweep(hydra_sweep_runner, tmp_path, None, timed)) == 3
    assert len(_sweep(hydra_sweep_runner, tmp_path, None, GRID_LIST)) == 3
    assert seen == [[0.5, 0.5, 4.0], None]


# --- real sweeps of attnbench -------------------------------------------------------------


def _records(results_dir):
    records = [json.loads(p.read_text()) for p in (results_dir / "runs").glob("*.json")]
    return sorted((r["task"], r["variant"], r["task_params"]["seq_len"]) for r in records)


@pytest.mark.slow
def test_union_of_grids_without_duplicates(tmp_path):
    proc = run_cli("attnbench", "-m", "sweep=grids_test", SEARCHPATH, f"results_dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    log = proc.stdout + proc.stderr
    assert "grids sweeper: 6 jobs from 3 grids" in log  # the third grid repeats a job of the first
    assert _records(tmp_path) == [
        ("concentration", "linear", 16),
        ("concentration", "softmax", 16),
        ("throughput", "linear", 32),
        ("throughput", "linear", 64),
        ("throughput", "softmax", 32),
        ("throughput", "softmax", 64),
    ]


@pytest.mark.slow
def test_command_line_narrows_every_grid(tmp_path):
    proc = run_cli(
        "attnbench",
        "-m",
        "sweep=grids_test",
        SEARCHPATH,
        "variant=linear",
        f"results_dir={tmp_path}",
    )
    assert proc.returncode == 0, proc.stderr
    assert _records(tmp_path) == [
        ("concentration", "linear", 16),
        ("throughput", "linear", 32),
        ("throughput", "linear", 64),
    ]


def process_id(cfg):
    """The process a job ran in (module level: the joblib launcher pickles it by reference)."""
    return os.getpid()


@pytest.mark.parametrize("launcher", ["basic", "joblib"])
def test_run_alone_jobs_run_one_at_a_time_in_the_sweeps_own_process(
    hydra_sweep_runner, tmp_path, launcher
):
    grids = (
        "hydra.sweeper.grids=[{group1:file1,bar:'1,2'},"
        "{group1:file2,bar:'3,4',run_alone:true},{group1:file1,bar:'5,6'}]"
    )
    returns = _sweep_batches(
        hydra_sweep_runner, tmp_path, process_id, grids, f"hydra/launcher={launcher}"
    )
    batches = [[(r.overrides[-1], r.return_value) for r in b] for b in returns]
    assert [[o for o, _ in b] for b in batches] == [
        ["bar=1", "bar=2"],
        ["bar=3"],
        ["bar=4"],
        ["bar=5", "bar=6"],
    ]
    alone = {pid for b in batches[1:3] for _, pid in b}
    shared = {pid for b in (batches[0], batches[3]) for _, pid in b}
    assert alone == {os.getpid()}  # the sweep's own process, whatever the launcher
    assert (shared == {os.getpid()}) == (launcher == "basic")  # joblib: worker processes


def _copy_records(results_dir):
    return [json.loads(p.read_text()) for p in (results_dir / "runs").glob("*.json")]


def _val(record):
    return next(p["value"] for p in record["metrics"] if p["metric"] == "val_accuracy")


@pytest.mark.slow
def test_seeds_at_best_run_each_variants_winner_at_the_further_seeds(tmp_path):
    """Three learning rates at seed 0, then seeds 1 and 2 at each variant's best validation
    accuracy (ties to the smaller lr, as the board's label order): 2 × (3 + 2) records; run
    again, every job is found finished and the same choice is made."""
    command = ["attnbench", "-m", "sweep=tuned_test", SEARCHPATH, f"results_dir={tmp_path}"]
    proc = run_cli(*command)
    assert proc.returncode == 0, proc.stderr
    assert "then at most 4 at the tuned values" in proc.stdout + proc.stderr
    records = _copy_records(tmp_path)
    assert len(records) == 10 and all(r["status"] == "ok" for r in records)
    for variant in ("softmax", "linear"):
        mine = [r for r in records if r["variant"] == variant]
        tuning = [r for r in mine if r["seed"] == 0]
        assert sorted(r["task_params"]["lr"] for r in tuning) == [0.001, 0.01, 0.1]
        best = max(tuning, key=lambda r: (_val(r), -r["task_params"]["lr"]))["task_params"]["lr"]
        further = [r for r in mine if r["seed"] != 0]
        assert sorted(r["seed"] for r in further) == [1, 2]
        assert {r["task_params"]["lr"] for r in further} == {best}
    again = run_cli(*command)
    assert again.returncode == 0, again.stderr
    assert "6 of 6 jobs finished earlier" in again.stdout + again.stderr
    assert "4 of 4 jobs finished earlier" in again.stdout + again.stderr
    assert len(_copy_records(tmp_path)) == 10


@pytest.mark.parametrize(
    "grid, says",
    [
        ("{variant:softmax,task:throughput,task.seq_len:32,seeds_at_best:'1,2'}", "no tuning axes"),
        ("{variant:softmax,task:copy,seed:1,task.lr:'0.001,0.01',seeds_at_best:'1,2'}", "seed 1"),
        ("{variant:softmax,task:copy,task.lr:'0.001,0.01',seeds_at_best:'one'}", "whole seeds"),
        ("{variant:softmax,task:throughput,task.seq_len:32,expected_s:-1}", "expected_s=-1"),
    ],
)
def test_a_bad_seeds_at_best_grid_is_one_sentence(tmp_path, grid, says):
    proc = run_cli(
        "attnbench",
        "-m",
        "hydra/sweeper=grids",
        f"hydra.sweeper.grids=[{grid}]",
        f"results_dir={tmp_path}",
    )
    assert proc.returncode == 2, proc.stderr
    assert says in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_a_stopped_sweep_runs_no_seeds_at_best(tmp_path):
    """SIGTERM while the tuning jobs run: the sweep stops there, and does not go on to choose
    winners from the records it has (it did: a line per (variant, setting) saying no value had
    scored, then the choice from a part of the grid)."""
    import subprocess

    from conftest import BIN

    proc = subprocess.Popen(
        [
            str(BIN / "attnbench"),
            "-m",
            "sweep=tuned_test",
            SEARCHPATH,
            f"results_dir={tmp_path}",
            "task.steps=400",
            "hydra/launcher=basic",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "HYDRA_FULL_ERROR": "0"},
    )
    deadline = time.monotonic() + 120
    while not list((tmp_path / "runs").glob("*.json")) and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0, out
    assert "no value of" not in out and "5 job(s) not run" in out, out
    records = _copy_records(tmp_path)
    assert records and len(records) < 6 and {r["seed"] for r in records} == {0}
