"""`harness.results.freshness.fresh_table`: a results folder's table, collected again first where
it is not fresh for the installed code, and judged for it where it cannot be collected."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import make_record, test_run_id

from attnbench.harness.jobs.records import write_record
from attnbench.harness.results import freshness
from attnbench.harness.results.collect import TABLE_NAME, collect
from attnbench.harness.results.freshness import FreshnessError, fresh_table

FRESH, OLDER = test_run_id("fresh"), test_run_id("older")
WHO = "a reader"


def _current(frame) -> dict[str, bool]:
    runs = frame[~frame["derived"]].drop_duplicates("run_id")
    return dict(zip(runs["run_id"], runs["current"], strict=True))


def _judged_for_other_code(folder: Path) -> Path:
    """A folder of a run of the installed code and one of a changed module, whose table says
    both are current (as a table collected before the code changed does); its table file."""
    write_record(folder, make_record("fresh", variant="fresh"))
    older = {"attnbench.metrics": "the digest of a metrics module since changed"}
    write_record(folder, make_record("older", variant="older_code", code_modules=older))
    collect(folder)
    table_file = folder / TABLE_NAME
    table = pq.read_table(table_file)
    current = pa.array([True] * table.num_rows)
    table = table.set_column(table.schema.get_field_index("current"), "current", current)
    pq.write_table(table, table_file)
    os.utime(table_file)
    return table_file


def test_a_table_judged_against_other_code_is_collected_again_first(tmp_path):
    table_file = _judged_for_other_code(tmp_path)
    said: list[str] = []
    fresh = fresh_table(tmp_path, WHO, say=said.append)
    assert fresh.collected is not None and fresh.has_table and fresh.path == table_file
    assert _current(fresh.frame) == {FRESH: True, OLDER: False}
    assert (fresh.n_judged, fresh.n_unjudged) == (0, 0)
    assert fresh.notes == [
        f"{WHO}: 1 run(s) of {table_file} were judged against other code than the installed "
        "attnbench; collected again first."
    ]
    assert said == fresh.notes  # each line said as it happened
    assert _current(pq.read_table(table_file).to_pandas()) == {FRESH: True, OLDER: False}
    again = fresh_table(tmp_path, WHO, say=said.append)  # fresh now: read as it is, silently
    assert again.collected is None and again.notes == [] and len(said) == 1


def _read_only(results_dir, incremental=True):
    raise OSError(errno.EROFS, "Read-only file system")


def test_a_read_only_folder_gives_the_frame_judged_for_the_installed_code(tmp_path, monkeypatch):
    table_file = _judged_for_other_code(tmp_path)
    before = table_file.read_bytes()
    monkeypatch.setattr(freshness, "collect", _read_only)
    fresh = fresh_table(tmp_path, WHO, say=lambda line: None)
    assert fresh.collected is None and fresh.n_judged == 1
    assert _current(fresh.frame) == {FRESH: True, OLDER: False}
    assert fresh.notes == [
        f"{WHO}: 1 run(s) of {table_file} were judged against other code than the installed "
        "attnbench; this page judges them again (runs of older code left out, their tasks' fits "
        "not drawn), the table stays as it is."
    ]
    assert table_file.read_bytes() == before


def test_records_written_after_the_table_are_collected_first(tmp_path):
    write_record(tmp_path, make_record("fresh"))
    collect(tmp_path)
    write_record(tmp_path, make_record("older", variant="late"))
    fresh = fresh_table(tmp_path, WHO, say=lambda line: None)
    assert set(_current(fresh.frame)) == {FRESH, OLDER}
    assert fresh.notes == [
        f"{WHO}: collected 1 new or changed record file(s) of {tmp_path / 'runs'} first."
    ]


def test_a_table_without_runs_beside_it_is_read_as_it_is(tmp_path):
    table_file = _judged_for_other_code(tmp_path / "source")
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copyfile(table_file, alone / TABLE_NAME)
    fresh = fresh_table(alone, WHO, say=lambda line: None)
    assert fresh.collected is None and fresh.n_judged == 1
    assert _current(fresh.frame) == {FRESH: True, OLDER: False}
    assert fresh.notes[0].startswith(f"{WHO}: {alone / TABLE_NAME} has no run records beside it")
    assert sorted(p.name for p in alone.iterdir()) == [TABLE_NAME]  # nothing collected


def test_records_without_a_table_that_cannot_be_collected_are_one_sentence(tmp_path, monkeypatch):
    write_record(tmp_path, make_record("fresh"))
    monkeypatch.setattr(freshness, "collect", _read_only)
    with pytest.raises(FreshnessError) as caught:
        fresh_table(tmp_path, WHO)
    assert str(caught.value) == (
        f"{tmp_path} has records but no table, and collecting them failed (Read-only file "
        f"system); run attnbench-collect {tmp_path} where it can write."
    )


def test_a_folder_with_neither_records_nor_a_table_reads_as_empty(tmp_path):
    fresh = fresh_table(tmp_path, WHO)
    assert not fresh.has_table and fresh.frame.empty and fresh.notes == []
    assert sorted(tmp_path.iterdir()) == []


def test_records_without_a_table_are_read_in_memory_where_the_reader_asks(tmp_path, monkeypatch):
    """`attnbench.results` reads a read-only folder of records that has no table yet: the table
    made in memory, judged for the installed code, nothing written, one line saying so."""
    write_record(tmp_path, make_record("fresh"))
    monkeypatch.setattr(freshness, "collect", _read_only)
    fresh = fresh_table(tmp_path, WHO, say=lambda line: None, in_memory=True)
    assert fresh.in_memory and not fresh.has_table and fresh.collected.n_records == 1
    assert _current(fresh.frame) == {FRESH: True}
    assert fresh.notes == [
        f"{WHO}: {tmp_path} has records but no table, and collecting them failed (Read-only "
        "file system); its table is made from them in memory, not saved (run attnbench-collect "
        f"{tmp_path} where it can write to keep one)."
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]


def test_a_table_read_as_it_is_names_the_record_files_it_left_out(tmp_path, monkeypatch):
    """Collection warns of an invalid record file as it reads it; a table read without
    collecting again (fresh, or a read-only folder) names it in the same line (``left_out``),
    and not a valid record written since (``uncollected`` counts that one)."""
    write_record(tmp_path, make_record("fresh"))
    bad = tmp_path / "runs" / "bad.json"
    bad.write_text('{"schema_version": -1}')
    with pytest.warns(UserWarning) as collecting:
        collect(tmp_path)
    (line,) = [str(w.message) for w in collecting]
    assert line.startswith(f"skipping {bad}")

    fresh = fresh_table(tmp_path, WHO, say=lambda line: None)
    assert fresh.collected is None and fresh.left_out == [line]

    monkeypatch.setattr(freshness, "collect", _read_only)
    write_record(tmp_path, make_record("older", variant="late"))
    fresh = fresh_table(tmp_path, WHO, say=lambda line: None)
    assert fresh.collected is None and fresh.left_out == [line]
    assert fresh.notes[0].startswith(f"{WHO}: 1 record file(s) of {tmp_path / 'runs'} are not")
