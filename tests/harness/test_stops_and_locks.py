"""What the results commands do where something else holds or blocks a results folder.

- **A named pipe where the table belongs** (``results.parquet`` made with ``mkfifo``): opening it
  to read waits for a writer forever, and `attnbench-collect`, `attnbench-leaderboard`,
  `attnbench-compare` and `attnbench.results()` hung silently. Each now refuses it in one
  sentence naming the file and the fix, before anything opens it.
- **A collection lock held by a stopped collector** (Ctrl-Z, SIGSTOP): the second collector
  waited forever without a word. After `LOCK_PATIENCE_S` it now says who holds the lock, for
  how long, and that the holder is stopped, then waits on (the lock is never stolen: the holder
  may resume).
- **A records folder given where a results folder belongs** (``attnbench-collect results/runs``)
  is named as what it is, with the command that was meant.
- **kill -9 of a sweep whose jobs run in worker processes**: the workers ran on for minutes
  holding their memory; a worker now ends within its poll of its parent.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import make_record, run_cli

from attnbench.harness.jobs.records import write_record
from attnbench.harness.results import collect as collect_module
from attnbench.harness.results.lock_holder import describe_holder, note_path

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")


@pytest.fixture
def piped(tmp_path):
    """A results folder with one record and a named pipe as its table."""
    write_record(tmp_path, make_record("a"))
    os.mkfifo(tmp_path / "results.parquet")
    return tmp_path


@pytest.mark.parametrize(
    "command",
    [
        ("attnbench-collect", "{d}"),
        ("attnbench-leaderboard", "{d}", "-o", "{d}/../site"),
        ("attnbench-compare", "{d}", "{d}"),
    ],
)
def test_a_named_pipe_as_the_table_is_refused_in_one_sentence(piped, command):
    args = [part.format(d=piped) for part in command]
    done = run_cli(*args, timeout=60)  # the bug: no end (TimeoutExpired)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert f"{piped / 'results.parquet'} is a named pipe" in lines[0]
    assert f"attnbench-collect {piped}" in lines[0]


def test_results_refuses_a_named_pipe_as_the_table(piped):
    code = f"import attnbench; attnbench.results({str(piped)!r})"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith("ValueError: ")
    assert "is a named pipe, not a results table file" in done.stderr


@pytest.mark.parametrize(
    ("command", "fix"),
    [
        (("attnbench-leaderboard", "{r}", "-o", "{d}/site"), "attnbench-leaderboard {d}."),
        (("attnbench-compare", "{r}", "{r}"), "{d}."),
        (("attnbench", "task=throughput", "results_dir={r}"), "results_dir={d}."),
    ],
)
def test_every_command_given_a_records_folder_names_the_results_folder(tmp_path, command, fix):
    """The board wrote an empty page for ``results/runs``, compare advised collecting
    ``results/runs`` and a run wrote its records into ``results/runs/runs``."""
    write_record(tmp_path, make_record("a"))
    runs = tmp_path / "runs"
    done = run_cli(*(part.format(r=runs, d=tmp_path) for part in command))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().endswith(
        f"{runs} is the run records folder of {tmp_path}; give the results folder: "
        + fix.format(d=tmp_path)
    )
    assert not (runs / "runs").exists() and not (tmp_path / "site").exists()


def test_collect_of_a_records_folder_names_the_results_folder(tmp_path):
    write_record(tmp_path, make_record("a"))
    done = run_cli("attnbench-collect", str(tmp_path / "runs"))
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"attnbench-collect: {tmp_path / 'runs'} is the run records folder of {tmp_path}; give "
        f"the results folder: attnbench-collect {tmp_path}."
    )


HOLDER = (
    "import sys, time; from pathlib import Path; "
    "from attnbench.harness.results.collect import _collection_lock, LOCK_NAME; "
    "lock = _collection_lock(Path(sys.argv[1]) / LOCK_NAME); lock.__enter__(); "
    "print('held', flush=True); time.sleep(120)"
)


def test_a_collector_waiting_on_a_stopped_holder_names_it_and_how_to_resume_it(tmp_path):
    write_record(tmp_path, make_record("a"))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    waiter = None
    try:
        assert holder.stdout.readline().strip() == "held"
        os.kill(holder.pid, signal.SIGSTOP)
        code = (
            "import logging, sys; logging.basicConfig(format='%(message)s'); "
            "from attnbench.harness.results import collect as c; c.LOCK_PATIENCE_S = 0.5; "
            "c.collect(sys.argv[1])"
        )
        waiter = subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path)],
            stderr=subprocess.PIPE,
            text=True,
        )
        line = waiter.stderr.readline()  # said once the patience is spent, while it waits on
        assert f"held by process {holder.pid}" in line
        assert "which is stopped (Ctrl-Z or SIGSTOP)" in line
        assert f"kill -CONT {holder.pid}" in line
        assert waiter.poll() is None  # it waits on: a lock is never taken from a live holder
        os.kill(holder.pid, signal.SIGKILL)  # the system releases a dead holder's lock
        assert waiter.wait(timeout=60) == 0
    finally:
        holder.kill()
        if waiter is not None and waiter.poll() is None:
            waiter.kill()


def test_the_holder_note_is_removed_on_release_and_a_dead_holder_is_said(tmp_path):
    lock = tmp_path / collect_module.LOCK_NAME
    with collect_module._collection_lock(lock):
        assert f"held by process {os.getpid()}" in describe_holder(lock)
    assert not note_path(lock).exists()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    note_path(lock).write_text(
        f'{{"pid": {dead}, "host": "{os.uname().nodename}", "command": "x", "since": 0}}'
    )
    assert f"process {dead}, which has ended" in describe_holder(lock)


# --- a sweep's workers end with it ---------------------------------------------------------------

WORKER = (
    "import time; from attnbench.toolkit.parent_watch import end_with_parent; "
    "end_with_parent(poll_s=0.05); print('ready', flush=True); time.sleep(60)"
)
SWEEPER = (
    "import subprocess, sys; worker = subprocess.Popen([sys.executable, '-c', sys.argv[1]]); "
    "print(worker.pid, flush=True); worker.wait()"
)


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie no one reaps yet counts as ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] in "ZX"
    except OSError:
        return True


def _ends_within(pid: int, seconds: float) -> bool:
    """Whether process ``pid`` ends within ``seconds``."""
    deadline = time.monotonic() + seconds
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return _gone(pid)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states in /proc")
def test_a_sweep_s_worker_ends_when_the_sweep_is_killed():
    sweeper = subprocess.Popen(
        [sys.executable, "-c", SWEEPER, WORKER], stdout=subprocess.PIPE, text=True
    )
    worker = int(sweeper.stdout.readline())
    try:
        assert sweeper.stdout.readline().strip() == "ready"
        assert not _gone(worker)
        sweeper.kill()  # kill -9: no signal reaches the worker
        sweeper.wait()
        assert _ends_within(worker, 10)
    finally:
        if not _gone(worker):
            os.kill(worker, signal.SIGKILL)


PROBE_OWNER = (
    "from attnbench.toolkit import memory; import os, time; "
    "memory.isolated_cpu_peak(os.getpid); "  # any module-level function: the probe starts
    "print(*memory._probe._processes, flush=True); time.sleep(60)"
)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states in /proc")
def test_the_memory_probe_ends_when_its_job_s_process_is_killed():
    owner = subprocess.Popen([sys.executable, "-c", PROBE_OWNER], stdout=subprocess.PIPE, text=True)
    probe = int(owner.stdout.readline())
    try:
        assert not _gone(probe)
        owner.kill()
        owner.wait()
        assert _ends_within(probe, 10)  # its poll is 1 s
    finally:
        if not _gone(probe):
            os.kill(probe, signal.SIGKILL)


def test_a_record_file_given_as_a_table_names_the_results_folder(tmp_path):
    """`attnbench.results` and compare given one record file advised restoring the records of
    ``runs/runs`` it was collected from (the adversarial pre-round of issue #63)."""
    import attnbench

    path = write_record(tmp_path, make_record("a"))
    with pytest.raises(ValueError) as caught:
        attnbench.results(path)
    assert str(caught.value) == (
        f"{path} is a run record, not a results table; give the results folder: {tmp_path}."
    )
