"""What the results commands do with a folder an adversarial review handed them.

Each case ends in one sentence on stderr and exit status 2, in a record, or in the correct
result: never a traceback, never silent data loss.

- **A table is never replaced by one with fewer runs without being told.** A table copied without
  its ``runs/`` (or whose records were deleted since) was "collected" into an empty table by
  `attnbench-leaderboard`, exit 0, and every run was gone. Now `collect` raises
  `MissingRunsError` unless ``drop_missing=True`` (``attnbench-collect --drop-missing``), and
  the leaderboard builds from the table as it is, in one warning line, leaving it byte for byte.
  A sweep only adds runs, so its collection is unaffected.
- **A symbolic link that leads back into itself** on the results folder, its ``runs/``, Hydra's
  output folder or a site folder: Hydra's ELOOP traceback, a RuntimeError from ``resolve``, or a
  misleading "no such folder"; now one sentence naming the link, exit 2.
- **A full disk** under Hydra's own writes (``multirun.yaml``, a job's ``.hydra/config.yaml``):
  Hydra's traceback; now one sentence naming the folder and the fix, exit 2.
- **A record with an integer beyond 64 bits** (``"seed": 123456789012345678901234567890``): once
  pyarrow's OverflowError in collect, the board and ``attnbench.results()``; now the file is
  skipped with one warning naming it and its field, on a writable folder and on a read-only
  mount, where ``attnbench.results()`` reads the table as it is, or, with no table yet, makes it
  from the records in memory: reading never writes.

`COMMANDS` run the real console scripts. The full disk is simulated at the boundary where
Hydra writes (`FULL_DISK`: every ``write`` of a file opened under the folder raises ENOSPC, as a
full disk makes it), and, where this machine lets a test mount a 2 MiB tmpfs, for real.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import warnings
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO, make_record, run_cli
from omegaconf import OmegaConf

from attnbench.harness.jobs.paths import looping_link, write_failure
from attnbench.harness.jobs.records import runs_dir, write_record
from attnbench.harness.leaderboard.site import build_site
from attnbench.harness.results import collect as collect_module
from attnbench.harness.results.collect import TABLE_NAME, MissingRunsError, collect, run_ids
from attnbench.harness.sweep.callbacks import CollectResults
from attnbench.harness.sweep.outcome import OUTCOME

REFERENCE = REPO / "results" / "reference" / TABLE_NAME
# a job quick on a busy machine too: at most a second of sampling per timing (it is not the point)
FAST = [
    "task.seq_len=32",
    "task.backward=false",
    "task.min_run_time=0.01",
    "threads=1",
    "task.min_samples=4",
    "task.max_timing_s=1",
]
LOOP = "a symbolic link that leads back into itself"
SWEEP_IN_LOOP = "hydra.sweep.dir=loop/s"
N_REFERENCE = len(run_ids(pd.read_parquet(REFERENCE)))  # runs of the reference table

# a sitecustomize: with ATTNBENCH_TEST_FULL_DISK set, every file opened for writing under that
# folder takes no data (its write raises ENOSPC), as on a disk with 0 bytes free
FULL_DISK = """
import builtins, errno, io, os
root = os.environ.get("ATTNBENCH_TEST_FULL_DISK")
if root:
    real_open = io.open
    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    def full_open(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        named = isinstance(file, (str, bytes, os.PathLike))
        name = os.path.abspath(os.fsdecode(file)) if named else ""
        if name.startswith(root) and set(mode) & set("wax+"):
            f.write = no_space
        return f
    io.open = builtins.open = full_open
"""


def _point(value: float) -> list[dict]:
    return [{"metric": "fwd_ms", "value": value, "x_name": "seq_len", "x_value": 8.0}]


def _folder(root: Path, names: list[str]) -> Path:
    """A results folder with one ok record per name, collected."""
    for i, name in enumerate(names):
        write_record(root, make_record(name, metrics=_point(float(i)), seed=i))
    collect(root)
    return root


def _runs(root: Path) -> set[str]:
    return run_ids(pd.read_parquet(root / TABLE_NAME))


# --- the table: never fewer runs without being told ------------------------------------------


def test_collect_refuses_to_drop_runs_and_leaves_the_table_as_it_was(tmp_path):
    _folder(tmp_path, ["a", "b", "c"])
    before = (tmp_path / TABLE_NAME).read_bytes()
    records = sorted((tmp_path / "runs").glob("*.json"))
    records[0].unlink()
    write_record(tmp_path, make_record("d", metrics=_point(4.0)))  # a new run does not cover it
    with pytest.raises(MissingRunsError) as refused:
        collect(tmp_path)
    assert (refused.value.held, refused.value.collected, refused.value.missing) == (3, 3, 1)
    message = str(refused.value)
    # equal counts of runs held and given ("holds 2 runs and the records give 2, so collecting
    # would drop 1" reads as a contradiction): the sentence leads with the runs that would go
    assert message.startswith(f"1 of the 3 runs {tmp_path / TABLE_NAME} holds have no valid")
    assert "give 3 runs" in message
    assert f"attnbench-collect --drop-missing {tmp_path}" in message
    assert (tmp_path / TABLE_NAME).read_bytes() == before  # not written
    shutil.rmtree(tmp_path / "runs")  # every record gone: still the table it was
    with pytest.raises(MissingRunsError, match="3 of the 3 runs .* give 0 runs"):
        collect(tmp_path, incremental=False)
    assert (tmp_path / TABLE_NAME).read_bytes() == before


def test_collect_drops_the_missing_runs_when_told(tmp_path):
    _folder(tmp_path, ["a", "b", "c"])
    gone = sorted((tmp_path / "runs").glob("*.json"))[0]
    gone.unlink()
    summary = collect(tmp_path, drop_missing=True)
    assert summary.n_records == 2 and gone.stem not in _runs(tmp_path)


def test_the_cli_refuses_in_one_sentence_naming_the_flag_and_obeys_it(tmp_path):
    _folder(tmp_path, ["a", "b"])
    sorted((tmp_path / "runs").glob("*.json"))[0].unlink()
    refused = run_cli("attnbench-collect", str(tmp_path))
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.startswith(f"attnbench-collect: 1 of the 2 runs {tmp_path / TABLE_NAME}")
    assert "--drop-missing" in run_cli("attnbench-collect", "--help").stdout
    told = run_cli("attnbench-collect", "--drop-missing", str(tmp_path))
    assert told.returncode == 0, told.stderr
    assert "; dropped 1 run(s) whose records are gone, as told" in told.stdout  # said (R4)
    assert len(_runs(tmp_path)) == 1


def test_a_sweep_s_collection_only_adds_runs(tmp_path):
    """What a sweep writes beside a collected table: new runs, a failed re-run kept beside its ok
    record, a re-run that replaces its record (same run_id), and a run of the same job by other
    code (a run_id of its own). The sweep's callback collects all of it; nothing is refused."""
    _folder(tmp_path, ["a", "b"])
    write_record(tmp_path, make_record("c", metrics=_point(3.0)))  # new
    write_record(tmp_path, make_record("a", status="failed", error="boom"))  # kept beside
    write_record(
        tmp_path, make_record("b", metrics=_point(9.0), created_at="2099-01-01T00:00:00+00:00")
    )  # replaces b's record; the earlier one becomes an attempt file
    other_code = {"attnbench.metrics": "0" * 64}  # the same job as "c", older code
    write_record(tmp_path, make_record("c-old", code_modules=other_code, metrics=_point(1.0)))
    OUTCOME.reset()
    CollectResults().on_multirun_end(OmegaConf.create({"results_dir": str(tmp_path)}))
    assert OUTCOME.collection_error is None and OUTCOME.exit_status() == 0
    table = pd.read_parquet(tmp_path / TABLE_NAME)
    assert len(run_ids(table)) == 4
    assert table.loc[table.run_id == make_record("a").run_id, "attempts"].tolist() == [2]


def test_the_sweep_s_callback_reports_runs_it_would_drop_and_keeps_the_table(tmp_path):
    _folder(tmp_path, ["a", "b"])
    before = (tmp_path / TABLE_NAME).read_bytes()
    sorted((tmp_path / "runs").glob("*.json"))[0].unlink()
    OUTCOME.reset()
    CollectResults().on_multirun_end(OmegaConf.create({"results_dir": str(tmp_path)}))
    try:
        assert OUTCOME.exit_status() == 1
        (line,) = OUTCOME.report()
        assert line.startswith("the table was not updated: ") and "--drop-missing" in line
    finally:
        OUTCOME.reset()
    assert (tmp_path / TABLE_NAME).read_bytes() == before


def test_the_board_of_a_table_without_runs_shows_it_and_leaves_it_byte_for_byte(tmp_path, caplog):
    source = _folder(tmp_path / "source", ["a", "b", "c"])
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copyfile(source / TABLE_NAME, alone / TABLE_NAME)
    before = (alone / TABLE_NAME).read_bytes()
    index = build_site(alone)
    assert (alone / TABLE_NAME).read_bytes() == before
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "has no run records beside it" in warning and "as it is" in warning
    assert len(run_ids(pd.read_parquet(index.parent / "results.parquet"))) == 3  # all shown


def test_the_board_shows_the_table_as_it_is_where_records_it_holds_are_gone(tmp_path, caplog):
    _folder(tmp_path, ["a", "b", "c"])
    sorted((tmp_path / "runs").glob("*.json"))[0].unlink()
    write_record(tmp_path, make_record("d", metrics=_point(4.0)))
    before = (tmp_path / TABLE_NAME).read_bytes()
    build_site(tmp_path)
    assert (tmp_path / TABLE_NAME).read_bytes() == before
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("1 of the 3 runs" in w and "--drop-missing" in w for w in warnings), warnings


def test_a_real_sweep_extends_a_collected_folder(tmp_path):
    results = tmp_path / "r"
    first = run_cli("attnbench", "-m", "variant=softmax,linear", *FAST, f"results_dir={results}")
    assert first.returncode == 0, first.stderr
    again = run_cli(
        "attnbench", "-m", "variant=softmax,linear,decay", *FAST, f"results_dir={results}"
    )
    assert again.returncode == 0, again.stderr
    assert len(_runs(results)) == 3


# --- the command lines: one sentence, exit 2, or the right result -------------------------


@pytest.fixture
def folders(tmp_path, monkeypatch):
    """The review's folders, in the working directory: ``loop`` (a link to itself), ``r`` (whose
    ``runs/`` is a link to itself), ``q`` (empty), ``alone`` (the reference table without its
    runs) and ``full`` (a results folder on a disk with 0 bytes free, `FULL_DISK`)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "loop").symlink_to("loop")
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "runs").symlink_to("runs")
    (tmp_path / "q").mkdir()
    (tmp_path / "alone").mkdir()
    shutil.copyfile(REFERENCE, tmp_path / "alone" / TABLE_NAME)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(FULL_DISK)
    return tmp_path


def _full_disk_env(folders: Path) -> dict[str, str]:
    """The environment in which ``folders/full`` is on a disk with 0 bytes free (`FULL_DISK`)."""
    path = [str(folders / "site"), os.environ.get("PYTHONPATH", "")]
    return {
        "PYTHONPATH": os.pathsep.join(p for p in path if p),
        "ATTNBENCH_TEST_FULL_DISK": str(folders / "full"),
    }


SPACE = "No space left on device: the disk is full; free some space or give another folder with"
COMMANDS = [  # (command line, exit status, the start of stderr's one line, a fragment of it)
    (
        ["attnbench-leaderboard", "alone"],
        0,
        "attnbench-leaderboard: alone/results.parquet has no run records beside it",
        "the board shows the table as it is",
    ),
    (
        ["attnbench-collect", "alone"],
        2,
        f"attnbench-collect: {N_REFERENCE} of the {N_REFERENCE} runs alone/results.parquet "
        f"holds have no valid record in alone/runs any more (the records there give 0 runs), "
        "so collecting would drop them",
        "or drop those runs with attnbench-collect --drop-missing alone.",
    ),
    (
        ["attnbench", "-m", "variant=softmax,linear", *FAST, "results_dir=loop/x"],
        2,
        "attnbench: results_dir=loop/x cannot be reached",
        f"(loop is {LOOP}); fix the link or choose another with results_dir=PATH.",
    ),
    (
        ["attnbench", "variant=softmax", *FAST, "results_dir=r"],
        2,
        "attnbench: results_dir=r cannot be reached",
        f"(r/runs is {LOOP})",
    ),
    (
        ["attnbench", "-m", "variant=softmax,linear", *FAST, "results_dir=q", SWEEP_IN_LOOP],
        2,
        "attnbench: hydra.sweep.dir=loop/s cannot be reached",
        "leave hydra.sweep.dir out",
    ),
    (["attnbench-collect", "r"], 2, "attnbench-collect: r cannot be read", f"(r/runs is {LOOP})"),
    (["attnbench-collect", "loop/x"], 2, "attnbench-collect: loop/x cannot be read", LOOP),
    (
        ["attnbench-leaderboard", "r"],
        2,
        "attnbench-leaderboard: the results folder r cannot be reached",
        f"(r/runs is {LOOP})",
    ),
    (
        ["attnbench-leaderboard", "q", "-o", "loop/site"],
        2,
        "attnbench-leaderboard: the site folder loop/site cannot be reached",
        LOOP,
    ),
    (["attnbench-compare", "loop/x", "q"], 2, "attnbench-compare: loop/x cannot be read", LOOP),
    (
        ["attnbench", "-m", "variant=softmax,linear", *FAST, "results_dir=full"],
        2,
        "attnbench: cannot write Hydra's output in hydra.sweep.dir=full/hydra/multiruns/",
        f"({SPACE} results_dir=PATH or hydra.sweep.dir=PATH); no job ran.",
    ),
    (
        ["attnbench", "variant=softmax", *FAST, "results_dir=full"],
        2,
        "attnbench: cannot write Hydra's output in hydra.run.dir=",
        f"({SPACE} results_dir=PATH or hydra.run.dir=PATH); no job ran.",
    ),
]


@pytest.mark.parametrize(
    "args, status, start, fragment", COMMANDS, ids=[" ".join(c[0]) for c in COMMANDS]
)
def test_the_review_s_command_lines(folders, args, status, start, fragment):
    env = _full_disk_env(folders)
    table_before = (folders / "alone" / TABLE_NAME).read_bytes()
    proc = run_cli(*args, env=env, cwd=folders)
    err = proc.stderr
    assert proc.returncode == status, err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err  # one sentence
    assert err.startswith(start), err
    assert fragment in err, err
    assert (folders / "alone" / TABLE_NAME).read_bytes() == table_before
    assert (folders / "loop").is_symlink() and not (folders / "q" / "runs").exists()


def test_the_run_folder_named_is_the_one_hydra_made(folders):
    """The sentence of a failed run names Hydra's own folder, its time stamp included."""
    env = _full_disk_env(folders)
    proc = run_cli("attnbench", "variant=softmax", *FAST, "results_dir=full", env=env, cwd=folders)
    (made,) = (folders / "full" / "hydra" / "runs").iterdir()
    assert f"hydra.run.dir={made.relative_to(folders)} (" in proc.stderr, proc.stderr


# --- the parts -----------------------------------------------------------------------------


def test_looping_link_names_the_link_and_nothing_else(tmp_path):
    (tmp_path / "loop").symlink_to("loop")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b").symlink_to("c")
    (tmp_path / "a" / "c").symlink_to("b")
    assert looping_link(tmp_path / "loop" / "x") == f"{tmp_path / 'loop'} is {LOOP}"
    assert looping_link(tmp_path / "a" / "b" / "runs") == f"{tmp_path / 'a' / 'b'} is {LOOP}"
    assert looping_link(tmp_path / "missing" / "x") is None
    assert looping_link(tmp_path / "a") is None
    message = write_failure(OSError(errno.ELOOP, os.strerror(errno.ELOOP)))
    assert "leads back into itself" in message


def test_collect_of_a_runs_folder_linking_to_itself_raises_eloop_not_an_empty_table(tmp_path):
    (tmp_path / "runs").symlink_to("runs")
    with pytest.raises(OSError) as raised:
        collect(tmp_path)
    assert raised.value.errno == errno.ELOOP
    assert not (tmp_path / TABLE_NAME).exists()


@pytest.fixture
def full_disk(tmp_path):
    """A 2 MiB tmpfs with 0 bytes free; skips where it cannot be mounted (not root)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)]
    if subprocess.run(mount, capture_output=True).returncode != 0:
        pytest.skip("a full disk needs a small tmpfs, which only root can mount here")
    (disk / "results").mkdir()
    try:
        with open(disk / "fill", "wb") as f:
            f.write(b"\0" * 4 * 1024 * 1024)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    yield disk
    subprocess.run(["umount", str(disk)], check=False)


@pytest.mark.parametrize("mode", [["-m", "variant=softmax,linear"], ["variant=softmax"]])
def test_a_disk_with_no_space_left_is_one_sentence(full_disk, mode):
    proc = run_cli("attnbench", *mode, *FAST, f"results_dir={full_disk / 'results'}")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert proc.stderr.startswith("attnbench: cannot write Hydra's output in hydra.")
    assert f"={full_disk / 'results' / 'hydra'}" in proc.stderr
    assert "the disk is full; free some space or give another folder" in proc.stderr


# --- one record beyond 64 bits: skipped with its name, on a writable and a read-only folder ------

HUGE_SEED = 123456789012345678901234567890  # the issue's: beyond pyarrow's int64


def _with_a_huge_seed(root: Path) -> tuple[set[str], Path]:
    """Two valid records and a copy of one whose ``seed`` is `HUGE_SEED` (no table yet): the
    valid runs and the bad file."""
    for i, name in enumerate(["a", "b"]):
        write_record(root, make_record(name, metrics=_point(float(i)), seed=i))
    first = sorted(runs_dir(root).glob("*.json"))[0]
    data = json.loads(first.read_text())
    data.update(seed=HUGE_SEED, run_id="0123456789abcdef")
    bad = runs_dir(root) / "0123456789abcdef.json"
    bad.write_text(json.dumps(data))
    return {p.stem for p in runs_dir(root).glob("*.json")} - {bad.stem}, bad


def _read_with_warnings(path: Path) -> tuple[pd.DataFrame, list[str]]:
    """``attnbench.results(path)`` and the warnings it gave, each at the line that called it."""
    import attnbench

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frame = attnbench.results(path)
    assert {w.filename for w in caught} <= {__file__}, [w.filename for w in caught]
    return frame, [str(w.message) for w in caught]


def _naming(lines: list[str], bad: Path) -> list[str]:
    return [line for line in lines if str(bad) in line]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture
def read_only(tmp_path, monkeypatch):
    """A function giving a read-only view of a folder: a read-only bind mount where this process
    may mount (root here: permission bits do not stop root, a read-only mount does); elsewhere
    the folder itself, every collection's lock failing as on a read-only mount (EROFS), which is
    where a collection writes first. Either way a test checks that nothing was written."""
    mounted: list[Path] = []

    def view(folder: Path) -> Path:
        target = tmp_path / f"{folder.name}-read-only"
        target.mkdir()
        if _ran(["mount", "--bind", str(folder), str(target)]):
            mounted.append(target)
            if _ran(["mount", "-o", "remount,bind,ro", str(target)]):
                return target
        read_only_lock = OSError(errno.EROFS, os.strerror(errno.EROFS))
        monkeypatch.setattr(collect_module, "_collection_lock", _raising(read_only_lock))
        return folder

    yield view
    for target in mounted:
        subprocess.run(["umount", str(target)], check=False)


def _ran(command: list[str]) -> bool:
    """Whether ``command`` ran and succeeded (False where it is not installed)."""
    try:
        return subprocess.run(command, capture_output=True).returncode == 0
    except OSError:
        return False


def _raising(exc: BaseException):
    def fail(*args, **kwargs):
        raise exc

    return fail


def test_a_record_beyond_64_bits_is_skipped_with_its_name_by_collect_board_and_results(tmp_path):
    """The issue's first "done when": pyarrow's OverflowError took down all three."""
    results = tmp_path / "results"
    runs, bad = _with_a_huge_seed(results)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = collect(results)
    assert summary.n_records == 2 and _runs(results) == runs
    (warning,) = [str(w.message) for w in caught]
    assert warning.startswith(f"skipping {bad}: field seed = {HUGE_SEED} is beyond a 64-bit")

    index = build_site(results, tmp_path / "site")
    assert run_ids(pd.read_parquet(index.parent / "results.parquet")) == runs

    frame, said = _read_with_warnings(results)  # fresh: not collected again, the file named
    assert set(frame["run_id"]) == runs
    assert said == [warning]


def test_the_same_on_a_read_only_mount(tmp_path, read_only, capsys):
    from attnbench.harness.cli import collect as collect_cli

    results = tmp_path / "results"
    runs, bad = _with_a_huge_seed(results)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        collect(results)
    view = read_only(results)
    bad = view / bad.relative_to(results)
    before = _snapshot(view)

    assert collect_cli.main([str(view)]) == 2  # it cannot write: one sentence, nothing else
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"attnbench-collect: cannot write the table in {view} (")

    index = build_site(view, tmp_path / "site")
    assert run_ids(pd.read_parquet(index.parent / "results.parquet")) == runs

    frame, said = _read_with_warnings(view)
    assert set(frame["run_id"]) == runs
    assert len(_naming(said, bad)) == 1 and len(said) == 1, said
    assert _snapshot(view) == before


def test_a_read_only_folder_of_records_without_a_table_reads_from_them(tmp_path, read_only):
    """Reading never needs writing: once a ValueError ("has records but no table, and collecting
    them failed"), now the table made in memory, with one line saying so."""
    results = tmp_path / "results"
    runs, bad = _with_a_huge_seed(results)
    view = read_only(results)
    bad = view / bad.relative_to(results)
    before = _snapshot(view)

    frame, said = _read_with_warnings(view)
    assert set(frame["run_id"]) == runs and frame["current"].all()
    assert len(_naming(said, bad)) == 1
    (note,) = [line for line in said if line.startswith("attnbench.results:")]
    assert note.startswith(
        f"attnbench.results: {view} has records but no table, and collecting them failed ("
    )
    assert note.endswith(
        "); its table is made from them in memory, not saved (run attnbench-collect "
        f"{view} where it can write to keep one)."
    )
    assert len(said) == 2, said
    assert _snapshot(view) == before and not (view / TABLE_NAME).exists()
