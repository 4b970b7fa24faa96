"""attnbench-leaderboard's input and output: refused paths and tables (one sentence, exit 2,
nothing written), and which run records it publishes beside the page."""

from __future__ import annotations

import builtins
import errno
import io
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import BIN, make_record, run_cli, test_run_id

from attnbench.harness.cli.leaderboard import main
from attnbench.harness.jobs.records import Record, record_path, write_record
from attnbench.harness.leaderboard import build_site
from attnbench.harness.leaderboard import site as site_module
from attnbench.harness.leaderboard.publish import remove_orphans
from attnbench.harness.leaderboard.ranking import with_machine
from attnbench.harness.leaderboard.site import RUN_LINK
from attnbench.harness.leaderboard.tables import task_table
from attnbench.harness.results import freshness
from attnbench.harness.results.collect import COLUMNS, collect, write_table

RUN = {name: test_run_id(name) for name in ["a", "b", "c", "d", "e", "f"]}
NAME = {run_id: name for name, run_id in RUN.items()}


def _record(run_id: str, variant: str = "softmax", fwd_ms: float = 1.0) -> Record:
    return make_record(
        NAME[run_id],
        variant=variant,
        task_params={"seq_len": 64},
        metrics=[
            {
                "metric": "fwd_ms",
                "value": fwd_ms,
                "x_name": "seq_len",
                "x_value": 64,
                "higher_is_better": False,
            }
        ],
        env={"device_name": "cpu0"},
    )


def _results(tmp_path: Path, *names: str) -> Path:
    results = tmp_path / "results"
    for i, name in enumerate(names):
        write_record(results, _record(RUN[name], variant=f"v{i}", fwd_ms=1.0 + i))
    return results


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its contents (None: a folder or a link)."""
    return {
        str(p.relative_to(root)): None if p.is_dir() or p.is_symlink() else p.read_bytes()
        for p in sorted(root.rglob("*"))
    }


def _refused(capsys, argv: list[str], root: Path, *words: str) -> None:
    """``main(argv)`` exits 2 with one line on stderr holding ``words``, and writes nothing."""
    before = _tree(root)
    assert main(argv) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith("attnbench-leaderboard: ") and captured.out == ""
    for word in words:
        assert word in line, line
    assert _tree(root) == before


# --- what is refused ---------------------------------------------------------------------------


def test_a_missing_results_folder_is_one_sentence_and_no_page(tmp_path):
    proc = run_cli("attnbench-leaderboard", str(tmp_path / "nowhere"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.splitlines()
    assert f"no results folder {tmp_path / 'nowhere'}; run a sweep first" in line
    assert list(tmp_path.iterdir()) == []


def test_a_results_path_that_is_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "results").write_text("not a folder")
    _refused(capsys, [str(tmp_path / "results")], tmp_path, "is a file, not a results folder")


def _unwritable(tmp_path: Path) -> Path | None:
    """A folder this process cannot write in: a read-only one, or for root (whom permission
    bits do not stop) one of sysfs; None where there is neither."""
    folder = tmp_path / "read_only"
    folder.mkdir()
    folder.chmod(0o555)
    for candidate in (folder, Path("/sys")):
        try:
            (candidate / ".probe").mkdir()
        except OSError:
            return candidate
        (candidate / ".probe").rmdir()
    return None


def test_bad_output_folders_are_refused_before_anything_is_written(tmp_path, capsys):
    results = _results(tmp_path, "a", "b")  # records, no table yet: a build would collect
    other = _results(tmp_path / "other", "a")  # a results folder not named on the command line
    (tmp_path / "file.html").write_text("mine")
    (tmp_path / "site").mkdir()
    os.symlink(results / "runs", tmp_path / "site" / "runs")  # its clean-up would delete records
    cases = [
        (results, "is the results folder itself"),
        (results / "runs", "is inside the run records"),
        (results / "runs" / "deeper", "is inside the run records"),
        (other / "runs", "is inside the run records"),
        (other / "runs" / "deeper", "is inside the run records"),
        (tmp_path / "file.html", "is an existing file, not a folder"),
        (tmp_path / "file.html" / "sub", "cannot be created"),
        (tmp_path / "site", "is a link or a file"),
    ]
    for out, what in cases:
        _refused(capsys, [str(results), "-o", str(out)], tmp_path, str(out), what, "-o OUT_DIR")
    assert not (results / "results.parquet").exists()
    unwritable = _unwritable(tmp_path)
    if unwritable is None:
        pytest.skip("no folder here that this user cannot write")
    out = unwritable / "site"
    _refused(capsys, [str(results), "-o", str(out)], tmp_path, str(out), "is not writable")


def test_a_corrupt_or_old_table_is_one_sentence_naming_it_and_the_fix(tmp_path, capsys):
    results = _results(tmp_path, "a")
    table = results / "results.parquet"
    table.write_bytes(b"PAR1 cut short")
    fix = f"attnbench-collect --full {results}"
    _refused(capsys, [str(results)], tmp_path, f"{table} is not a readable parquet", fix)
    write_table(pd.DataFrame({"run_id": [RUN["a"]], "value": [1.0]}), table)  # an older layout
    _refused(capsys, [str(results)], tmp_path, f"{table} lacks the column(s) derived, status", fix)
    collect(results, incremental=False)
    assert main([str(results)]) == 0  # the fix works


def test_an_existing_folder_without_results_still_gets_the_empty_page(tmp_path, capsys):
    (tmp_path / "results").mkdir()
    assert main([str(tmp_path / "results")]) == 0
    assert "No results yet" in (tmp_path / "results" / "leaderboard" / "index.html").read_text()
    assert "no results yet in" in capsys.readouterr().err


# --- which records are published ---------------------------------------------------------------


def test_only_valid_records_of_the_table_runs_are_published(tmp_path, caplog, monkeypatch):
    results = _results(tmp_path, "a", "b", "c")
    runs = results / "runs"
    outside = tmp_path / "outside"
    write_record(outside, _record(RUN["d"], variant="linked"))
    (tmp_path / "secret.txt").write_text("a private key")
    os.symlink(record_path(outside, RUN["d"]), runs / f"{RUN['d']}.json")  # a valid record, linked
    os.symlink(tmp_path / "secret.txt", runs / f"{RUN['e']}.json")
    (runs / "notes.json").write_text('{"not": "a record"}')
    (runs / f"{RUN['f']}.json").write_text('{"run_id": "x"}')  # not a record either
    with pytest.warns(UserWarning):  # collect skips what is not a record, and links
        collect(results)
    table = pd.read_parquet(results / "results.parquet")
    assert RUN["d"] not in set(table["run_id"])  # collection does not follow the link
    table = pd.concat([table, table.assign(run_id=RUN["d"], variant="linked")])
    write_table(table, results / "results.parquet")  # a table that has it: publishing must not
    # after collection: b's file now holds a's record, and a record of a run not in the table
    record_path(results, RUN["b"]).write_bytes(record_path(results, RUN["a"]).read_bytes())
    write_record(results, make_record("late", variant="late"))
    # the folder cannot be written, so the build publishes from the table as it is
    monkeypatch.setattr(freshness, "collect", _read_only_collect)
    site = tmp_path / "site"
    (site / "runs").mkdir(parents=True)
    (site / ".attnbench-site").write_text("")  # an earlier build's folder, with its record:
    (site / "runs" / "0000000000000abc.json").write_text("{}")
    (site / "runs" / "README.txt").write_text("not ours")
    with caplog.at_level(logging.WARNING):
        html = build_site(results, site).read_text()
    published = sorted(p.name for p in (site / "runs").iterdir())
    assert published == [f"{RUN['a']}.json", f"{RUN['c']}.json", "README.txt"]  # stale one gone
    assert (site / "runs" / f"{RUN['a']}.json").read_bytes() == record_path(
        results, RUN["a"]
    ).read_bytes()
    assert f'href="runs/{RUN["a"]}.json"' in html and f'href="runs/{RUN["c"]}.json"' in html
    for name in ("b", "d"):  # in the table, but their records were not published: no dead link
        assert f"runs/{RUN[name]}.json" not in html
    # left out: b (a's record under b's name), d and e (links), notes.json and f (not
    # records); "late", a valid record the table does not hold, is not called invalid: the line
    # below says it was not collected (the adversarial pre-round of issue #63)
    (message,) = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert message.startswith("attnbench-leaderboard: left out 5 file(s) of ")
    (stale,) = [r.getMessage() for r in caplog.records if "not collected yet" in r.getMessage()]
    assert stale.startswith("attnbench-leaderboard: 2 record file(s) of ")  # b changed, late new
    assert stale.endswith(
        "the board shows the table as it was (run attnbench-collect " + (f"{results}).")
    )


def _read_only_collect(results_dir, incremental=True):
    raise OSError(errno.EROFS, "Read-only file system")


def test_a_runs_folder_linking_out_of_the_results_folder_is_not_read(tmp_path, caplog):
    elsewhere = _results(tmp_path / "elsewhere", "a")
    results = tmp_path / "results"
    results.mkdir()
    os.symlink(elsewhere / "runs", results / "runs")
    collect(results)
    with caplog.at_level(logging.WARNING):
        html = build_site(results).read_text()
    assert list((results / "leaderboard" / "runs").iterdir()) == []
    assert "runs/" + RUN["a"] not in html
    assert any("links out of the results folder" in r.getMessage() for r in caplog.records)


def test_a_run_id_that_is_not_a_hash_becomes_neither_a_link_nor_a_file(tmp_path):
    hostile = ["../../etc/passwd", 'x" onmouseover="alert(1)', "../leaderboard/index"]
    rows = []
    for i, run_id in enumerate(hostile):
        row = dict.fromkeys(COLUMNS)
        row.update(
            run_id=run_id,
            derived=False,
            current=True,
            status="ok",
            task="throughput",
            variant=f"v{i}",
            variant_params="{}",
            task_params='{"seq_len": 64}',
            seed=0,
            device="cpu",
            dtype="float32",
            metric="fwd_ms",
            value=1.0 + i,
            x_name="seq_len",
            x_value=64.0,
            higher_is_better=False,
        )
        rows.append(row)
    results = tmp_path / "results"
    (results / "runs").mkdir(parents=True)
    (results / "runs" / "passwd.json").write_text("{}")
    table = pd.DataFrame(rows, columns=COLUMNS).astype({"derived": bool, "current": bool})
    write_table(table, results / "results.parquet")
    html = build_site(results).read_text()
    assert 'href="runs/' not in html and "passwd.json" not in html
    # the table alone, whatever records there are: only a run_id of the hash form links
    hashed = with_machine(table.assign(run_id=[RUN["a"], *hostile[1:]]))
    cells = [row[-1] for row in task_table(hashed, {}, RUN_LINK).rows]
    links = [link for cell in cells for link in cell.links]
    assert links == [(f"runs/{RUN['a']}.json", RUN["a"][:8])]
    assert list((results / "leaderboard" / "runs").iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]


def test_the_console_script_says_how_many_files_it_left_out_in_one_line(tmp_path):
    results = _results(tmp_path, "a")
    (results / "runs" / "notes.json").write_text("[]")
    proc = run_cli("attnbench-leaderboard", str(results))
    assert proc.returncode == 0, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if "left out" in x]
    assert lines == [
        f"attnbench-leaderboard: left out 1 file(s) of {results / 'runs'} that are not valid "
        "records of the table's runs (links, other files, invalid records)."
    ]
    assert "Traceback" not in proc.stderr


def test_kept_attempts_beside_a_record_are_history_not_left_out(tmp_path, caplog):
    results = _results(tmp_path, "a")
    failed = make_record("a", status="timeout", error="slow", task_params={"seq_len": 64})
    beside = write_record(results, failed)
    assert beside.name != f"{RUN['a']}.json"  # the ok record stays, the failure sits beside it
    collect(results)
    with caplog.at_level(logging.WARNING):
        build_site(results)
    assert sorted(p.name for p in (results / "leaderboard" / "runs").iterdir()) == [
        f"{RUN['a']}.json"
    ]
    assert not [r for r in caplog.records if "left out" in r.getMessage()]


def test_another_results_folder_as_output_is_refused_and_keeps_its_records(tmp_path, capsys):
    """`attnbench-leaderboard A -o B`, B another results folder: building there would delete B's
    records that are not A's and replace B's table, so it is refused before anything is touched."""
    results = _results(tmp_path, "a")
    other = tmp_path / "other"
    write_record(other, _record(RUN["b"]))
    collect(other)
    for out in (other, tmp_path / "table_only"):
        if out.name == "table_only":
            out.mkdir()
            (out / "results.parquet").write_bytes((other / "results.parquet").read_bytes())
        _refused(capsys, [str(results), "-o", str(out)], tmp_path, str(out), "holds run records")
    assert record_path(other, RUN["b"]).exists()


def test_a_site_folder_is_rebuilt_in_place_only_where_its_mark_is(tmp_path, capsys):
    results = _results(tmp_path, "a", "b")
    site = tmp_path / "site"
    site.mkdir()  # an empty folder: the board's to fill
    assert main([str(results), "-o", str(site)]) == 0
    assert (site / "runs").is_dir() and (site / "results.parquet").exists()
    assert main([str(results), "-o", str(site)]) == 0  # its own copies: rebuilt
    (site / ".attnbench-site").unlink()  # a board of before the mark, or copied without it
    capsys.readouterr()
    _refused(capsys, [str(results), "-o", str(site)], tmp_path, "holds run records")


def test_a_folder_of_the_user_s_own_files_is_refused_and_left_as_it_was(tmp_path, capsys):
    """`-o DIR`, DIR holding a user's own ``index.html`` and notes and no mark: the board
    replaced the page without a word. Its title was no guard either (a page titled like the
    board, e.g. a user's edited copy of one, counted as a board of before the mark)."""
    results = _results(tmp_path, "a")
    collect(results)
    capsys.readouterr()
    for page in ("<h1>my page</h1>", "<title>attnbench leaderboard</title> my edited copy"):
        for mine in (tmp_path / "mine", results / "leaderboard"):  # -o DIR, and the default
            mine.mkdir(exist_ok=True)
            (mine / "index.html").write_text(page)
            (mine / "notes.txt").write_text("my notes")
            argv = [str(results), "-o", str(mine)] if mine.name == "mine" else [str(results)]
            _refused(
                capsys,
                argv,
                tmp_path,
                f"the site folder {mine} holds files that no leaderboard build wrote "
                "(index.html, notes.txt: no .attnbench-site mark), which building there could "
                "replace; empty it or choose another with -o OUT_DIR.",
            )
    (tmp_path / "mine" / "a").mkdir()
    (tmp_path / "mine" / "b.txt").write_text("")
    _refused(
        capsys,
        [str(results), "-o", str(tmp_path / "mine")],
        tmp_path,
        "(a, b.txt, index.html, …: no",
    )


def test_a_board_of_several_folders_always_has_the_results_folder_column(tmp_path):
    """The second folder's runs all in the first: it has no rows left, and the table was copied
    as one folder's, without the column the docs promise."""
    first = _results(tmp_path / "first", "a", "b")
    second = tmp_path / "second"
    shutil.copytree(first, second)  # the same records: every run also in the first folder
    for folder in (first, second):
        collect(folder)
    site = tmp_path / "site"
    build_site([first, second], site)
    for table in (pd.read_parquet(site / "results.parquet"), pd.read_csv(site / "results.csv")):
        assert set(table["results_folder"]) == {str(first)}
        assert set(table["run_id"]) == {RUN["a"], RUN["b"]}


def test_a_board_of_several_folders_stopped_while_it_writes_keeps_the_old_table(
    tmp_path, monkeypatch
):
    """A board of several folders deleted the previous table before writing the new one: a
    build stopped in between left no table at all."""
    first = _results(tmp_path / "first", "a", "b")
    second = _results(tmp_path / "second", "c")
    site = tmp_path / "site"
    build_site([first, second], site)
    before = {name: (site / name).read_bytes() for name in ("results.parquet", "results.csv")}
    write_record(second, _record(RUN["d"], variant="v9", fwd_ms=9.0))
    collect(second)
    real = pd.DataFrame.to_parquet

    def stopped(self, path, **kwargs):
        real(self.iloc[: len(self) // 2], path, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(pd.DataFrame, "to_parquet", stopped)
    with pytest.raises(KeyboardInterrupt):
        build_site([first, second], site)
    assert {name: (site / name).read_bytes() for name in before} == before
    assert not list(site.glob(".*.tmp"))


def test_a_build_stopped_before_its_page_keeps_every_record_the_old_page_links(
    tmp_path, monkeypatch
):
    """The records an earlier build published and this one does not were deleted before the
    new page was written: a build stopped in between left the old page's links dead. Nor does
    the stopped build leave its own copies beside the old page (it left d's record and a's new
    one there: the adversarial pre-round of issue #63)."""
    results = _results(tmp_path, "a", "b", "c")
    site = tmp_path / "site"
    build_site(results, site)
    old_page = (site / "index.html").read_text()
    old_records = {p.name: p.read_bytes() for p in (site / "runs").glob("*.json")}
    linked = set(re.findall(r"runs/([0-9a-f]{16})\.json", old_page))
    assert linked == {RUN["a"], RUN["b"], RUN["c"]}
    other = _results(tmp_path / "other", "a", "d")  # b and c are stale for its board
    real = site_module.atomic_write_text

    def stopped(path, text):
        if path.name == "index.html":
            raise KeyboardInterrupt
        real(path, text)

    monkeypatch.setattr(site_module, "atomic_write_text", stopped)
    with pytest.raises(KeyboardInterrupt):
        build_site(other, site)
    assert (site / "index.html").read_text() == old_page
    assert all((site / "runs" / f"{run_id}.json").is_file() for run_id in linked)
    assert {p.name: p.read_bytes() for p in (site / "runs").glob("*.json")} == old_records
    monkeypatch.setattr(site_module, "atomic_write_text", real)
    build_site(other, site)  # the new page in place: now the stale copies go
    assert {p.stem for p in (site / "runs").glob("*.json")} == {RUN["a"], RUN["d"]}


def test_a_killed_build_s_temporary_files_are_removed_by_the_next_build(tmp_path):
    results = _results(tmp_path, "a")
    site = tmp_path / "site"
    build_site(results, site)
    orphans = [
        site / ".index.html.k3_x9a0b.tmp",
        site / ".results.csv.abcdefgh.tmp",
        site / ".results.parquet.01234567.tmp",
        site / "runs" / f".{RUN['a']}.json.zz_9y8x7.tmp",
        site / "runs" / f".{RUN['b']}.json.qwertyui.tmp",
    ]
    others = [  # not the board's temporary files: another name, or not tempfile's pattern
        site / ".notes.txt.abcdefgh.tmp",
        site / "draft.tmp",
        site / ".index.html.tmp",
        site / "runs" / ".notes.json.abcdefgh.tmp",
    ]
    for path in orphans + others:
        path.write_text("cut sh")
    build_site(results, site)
    assert [p for p in orphans if p.exists()] == []
    assert [p for p in others if not p.exists()] == []
    unmarked = tmp_path / "unmarked"  # only in a folder the board made
    unmarked.mkdir()
    (unmarked / ".index.html.abcdefgh.tmp").write_text("")
    remove_orphans(unmarked, ("index.html",))
    assert (unmarked / ".index.html.abcdefgh.tmp").exists()


def _full_disk(monkeypatch, root: Path) -> None:
    """Every file opened for writing by name under ``root`` takes no data (its write raises
    ENOSPC), as on a disk with 0 bytes free (as tests/test_adversarial_results.py's FULL_DISK)."""
    real_open = io.open

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def full_open(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        named = isinstance(file, (str, bytes, os.PathLike))
        under = named and Path(os.fsdecode(file)).resolve().is_relative_to(root.resolve())
        if under and set(mode) & set("wax+"):
            f.write = no_space
        return f

    monkeypatch.setattr(io, "open", full_open)
    monkeypatch.setattr(builtins, "open", full_open)


def test_a_full_disk_is_one_sentence_and_leaves_the_old_board(tmp_path, capsys, monkeypatch):
    results = _results(tmp_path, "a", "b")
    site = tmp_path / "site"
    assert main([str(results), "-o", str(site)]) == 0
    before = {name: (site / name).read_bytes() for name in ("index.html", "results.csv")}
    n_runs = len(pd.read_parquet(site / "results.parquet"))
    write_record(results, _record(RUN["c"], variant="v9", fwd_ms=9.0))
    collect(results)
    capsys.readouterr()
    _full_disk(monkeypatch, site)
    assert main([str(results), "-o", str(site)]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line == (
        f"attnbench-leaderboard: could not write the site folder {site} (No space left on "
        "device: the disk is full; free some space or give another folder with -o OUT_DIR); "
        "every file in it is whole, either the previous build's or this one's."
    )
    monkeypatch.undo()
    assert {name: (site / name).read_bytes() for name in before} == before
    assert len(pd.read_parquet(site / "results.parquet")) in (n_runs, n_runs + 1)
    assert not list(site.rglob(".*.tmp"))


def test_records_written_after_the_table_are_collected_before_the_build(tmp_path):
    """A sweep stopped before it collected, or records copied in: the board must show them, not
    call them "not valid records of the table's runs"."""
    results = _results(tmp_path, "a")
    (results / "runs" / "notes.json").write_text("[]")  # seen and skipped by every collection
    collect_warnings = pytest.warns(UserWarning)
    with collect_warnings:
        collect(results)
    write_record(results, _record(RUN["b"], variant="late"))
    proc = run_cli("attnbench-leaderboard", str(results))
    assert proc.returncode == 0, proc.stderr
    assert (
        f"attnbench-leaderboard: collected 1 new or changed record file(s) of {results / 'runs'} "
        "first." in proc.stderr.splitlines()
    )
    assert RUN["b"] in set(pd.read_parquet(results / "results.parquet")["run_id"])
    assert (results / "leaderboard" / "runs" / f"{RUN['b']}.json").exists()
    again = run_cli("attnbench-leaderboard", str(results))  # up to date: no second collection
    assert again.returncode == 0 and "collected" not in again.stderr, again.stderr


def _table_judged_for_other_code(tmp_path: Path) -> Path:
    """A folder of two runs, "fresh" of the installed code and "older_code" of a changed one,
    whose table says both are current, as the code that collected it judged; its table file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    results = tmp_path / "results"
    write_record(results, _record(RUN["a"], variant="fresh"))
    older = {"attnbench.metrics": "the digest of a metrics module since changed"}
    write_record(results, make_record("b", variant="older_code", code_modules=older))
    collect(results)
    table_file = results / "results.parquet"
    table = pq.read_table(table_file)
    assert not table.to_pandas().set_index("run_id").loc[RUN["b"], "current"].any()
    current = pa.array([True] * table.num_rows)
    table = table.set_column(table.schema.get_field_index("current"), "current", current)
    pq.write_table(table, table_file)
    os.utime(table_file)
    return table_file


def test_runs_of_code_older_than_the_installed_one_are_left_out_though_the_table_says_current(
    tmp_path,
):
    """A table collected before the code changed (a committed reference, read by a newer
    checkout) says which runs were current for the code that collected it: shown as it was, a
    FLA peer's runs of code since changed showed a FLOP count 1.5× the GPU's peak. The board
    judges again against the code installed, and collects first."""
    table_file = _table_judged_for_other_code(tmp_path)
    results = table_file.parent
    proc = run_cli("attnbench-leaderboard", str(results))
    assert proc.returncode == 0, proc.stderr
    assert (
        f"attnbench-leaderboard: 1 run(s) of {table_file} were judged against other code than "
        "the installed attnbench; collected again first." in proc.stderr.splitlines()
    ), proc.stderr
    html = (results / "leaderboard" / "index.html").read_text()
    assert "fresh" in html and "older_code" not in html
    assert not pd.read_parquet(table_file).set_index("run_id").loc[RUN["b"], "current"].any()


def test_runs_of_older_code_are_left_out_where_the_table_cannot_be_collected_again(tmp_path):
    """A table whose flags were judged for other code, with no records beside it to collect
    again (also a record gone, a read-only folder), shown as it was would call its runs of older
    code "of the installed code". The page judges them again."""
    import shutil

    table_file = _table_judged_for_other_code(tmp_path)
    results = table_file.parent
    shutil.rmtree(results / "runs")
    proc = run_cli("attnbench-leaderboard", str(results), "-o", str(tmp_path / "site"))
    assert proc.returncode == 0, proc.stderr
    assert (
        f"attnbench-leaderboard: 1 run(s) of {table_file} were judged against other code than "
        "the installed attnbench; this page judges them again (runs of older code left out, "
        "their tasks' fits not drawn), the table stays as it is." in proc.stderr.splitlines()
    ), proc.stderr
    html = (tmp_path / "site" / "index.html").read_text()
    assert "fresh" in html and "older_code" not in html
    assert pd.read_parquet(table_file)["current"].all()  # the table itself is left as it was


def _without_code_memory(table_file: Path) -> None:
    """The table as a tool other than attnbench-collect would re-save it: no metadata."""
    import pyarrow.parquet as pq

    pq.write_table(pq.read_table(table_file).replace_schema_metadata(None), table_file)


def test_a_table_that_does_not_record_its_runs_code_is_collected_again_first(tmp_path):
    """With its metadata gone, the flags cannot be judged as they are: the page would call every
    run "of the installed code". It is collected again first."""
    table_file = _table_judged_for_other_code(tmp_path)
    _without_code_memory(table_file)
    proc = run_cli("attnbench-leaderboard", str(table_file.parent))
    assert proc.returncode == 0, proc.stderr
    assert (
        f"attnbench-leaderboard: 2 run(s) of {table_file} are marked current but the table does "
        "not record their code; collected again first." in proc.stderr.splitlines()
    ), proc.stderr
    html = (table_file.parent / "leaderboard" / "index.html").read_text()
    assert "fresh" in html and "older_code" not in html


def test_runs_whose_code_no_one_can_judge_are_not_called_the_installed_code_s(tmp_path):
    import shutil

    table_file = _table_judged_for_other_code(tmp_path)
    _without_code_memory(table_file)
    shutil.rmtree(table_file.parent / "runs")
    proc = run_cli("attnbench-leaderboard", str(table_file.parent), "-o", str(tmp_path / "site"))
    assert proc.returncode == 0, proc.stderr
    assert (
        f"attnbench-leaderboard: 2 run(s) of {table_file} are marked current but the table does "
        "not record their code (not written by attnbench-collect, or altered), so they cannot be "
        "judged against the installed attnbench; the page shows them as the table marks them and "
        "says so." in proc.stderr.splitlines()
    ), proc.stderr
    html = (tmp_path / "site" / "index.html").read_text()
    assert "of the installed code (none stale)" not in html
    assert "2 runs could not be judged against the installed code" in html


def test_ctrl_c_is_one_line_and_exit_130(tmp_path, capsys, monkeypatch):
    results = _results(tmp_path, "a")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(site_module, "overview", interrupted)
    assert main([str(results)]) == 130
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line == (
        "attnbench-leaderboard: interrupted by Ctrl-C; every file in the site folder is whole, "
        "either the previous build's or this one's; build it again to bring the page, its table "
        "and its records in step."
    )


def test_a_build_stopped_while_it_writes_the_table_leaves_the_old_one_whole(tmp_path, monkeypatch):
    """The site's results.csv and results.parquet are written to a temporary file beside them
    and renamed into place: a build that stops part-way through writing (here: the CSV writer
    raising after half its rows, as a Ctrl-C would stop it) leaves the previous board's table
    as it was, and no temporary file behind."""
    results = _results(tmp_path, "a", "b", "c")
    out = tmp_path / "site"
    build_site(results, out)
    before = {name: (out / name).read_bytes() for name in ("results.csv", "results.parquet")}
    write_record(results, _record(RUN["d"], variant="v9", fwd_ms=9.0))
    real = pd.DataFrame.to_csv

    def stopped(self, path, **kwargs):
        real(self.iloc[: len(self) // 2], path, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(pd.DataFrame, "to_csv", stopped)
    with pytest.raises(KeyboardInterrupt):
        build_site(results, out)
    assert (out / "results.csv").read_bytes() == before["results.csv"]
    assert not list(out.glob(".*.tmp"))


# --- a build killed at any moment ---------------------------------------------------------------

GENERATED = re.compile(rb"\d{4}-\d\d-\d\d \d\d:\d\d UTC")  # the page's one moving part
SIGTERM_LINE = (
    "attnbench-leaderboard: stopped by SIGTERM; every file in the site folder is whole, either "
    "the previous build's or this one's; build it again to bring the page, its table and its "
    "records in step."
)


def _files(site: Path) -> dict[str, bytes]:
    """Every file under ``site`` by its relative path, the page's build time blanked."""
    files = {str(p.relative_to(site)): p.read_bytes() for p in site.rglob("*") if p.is_file()}
    if "index.html" in files:
        files["index.html"] = GENERATED.sub(b"", files["index.html"])
    return files


def _many(root: Path, first: int, last: int) -> Path:
    """A collected results folder with the runs ``first`` .. ``last - 1``, a table big enough
    that writing it takes a moment."""
    for i in range(first, last):
        point = {"metric": "fwd_ms", "value": 1.0 + i, "x_name": "seq_len", "x_value": 64}
        write_record(root, make_record(f"run{i}", variant=f"v{i % 7}", metrics=[point], seed=i))
    collect(root)
    return root


def _old_or_new(site: Path, old: dict[str, bytes], new: dict[str, bytes]) -> None:
    """Each file of ``site`` is whole and the old board's or the new one's; every record the
    page there links is beside it."""
    for name, data in _files(site).items():
        assert data in (old.get(name), new.get(name)), f"{name}: neither the old nor the new one"
    counts = {_rows(old), _rows(new)}
    assert len(pd.read_parquet(site / "results.parquet")) in counts
    assert len(pd.read_csv(site / "results.csv")) in counts
    linked = re.findall(r"runs/[0-9a-f]{16}\.json", (site / "index.html").read_text())
    assert linked and all((site / link).is_file() for link in linked)


def _rows(files: dict[str, bytes]) -> int:
    return len(pd.read_csv(io.BytesIO(files["results.csv"])))


@pytest.mark.slow  # the console script started five times: about 17 s on two cores
def test_a_board_killed_at_any_moment_leaves_each_file_old_or_new_and_whole(tmp_path):
    """The real console script, stopped by SIGTERM at random moments and just after it starts
    writing: every file of the site is the previous board's or the new one's, whole, and the
    page's record links all hold; a stop it catches says so in one line (exit 143)."""
    site, pristine = tmp_path / "site", tmp_path / "pristine"
    build_site(_many(tmp_path / "old", 0, 150), pristine)  # the board before
    new_results = _many(tmp_path / "new", 75, 225)  # half the runs shared, half stale, half new
    old = _files(pristine)
    shutil.copytree(pristine, site)
    exe = shutil.which("attnbench-leaderboard", path=str(BIN))
    started = time.monotonic()  # a real process, as the stopped ones (run_cli's skips imports)
    done = subprocess.run([exe, str(new_results), "-o", str(site)], capture_output=True, text=True)
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    new = _files(site)
    assert set(new) != set(old) and new["results.csv"] != old["results.csv"]
    rng = random.Random(63)
    for attempt in range(4):
        shutil.rmtree(site)
        shutil.copytree(pristine, site)
        proc = subprocess.Popen(
            [exe, str(new_results), "-o", str(site)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        if attempt < 2:  # any moment, start-up included
            time.sleep(rng.uniform(0.15, 0.7) * took)
        else:  # once it writes: its first new record copy
            records = {p.name for p in (site / "runs").iterdir()}
            deadline = time.monotonic() + 2 * took + 10
            while proc.poll() is None and time.monotonic() < deadline:
                if {p.name for p in (site / "runs").iterdir()} != records:
                    break
                time.sleep(0.002)
            time.sleep(rng.uniform(0, 0.05) * took)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode in (0, 143, -signal.SIGTERM), err
        assert "Traceback" not in err
        if proc.returncode == 143:
            assert err.splitlines()[-1] == SIGTERM_LINE
        _old_or_new(site, old, new)
        assert not list(site.rglob(".*.tmp"))  # a stop it caught removes its temporary files
