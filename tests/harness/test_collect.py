from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import make_record, test_run_id

from attnbench.harness.cli.collect import main
from attnbench.harness.jobs.records import SCHEMA_VERSION, write_record
from attnbench.harness.results.collect import COLUMNS, MissingRunsError, collect

DESIGN_COLUMNS = [
    "run_id",
    "status",
    "error",
    "task",
    "variant",
    "variant_params",
    "task_params",
    "seed",
    "device",
    "device_name",
    "dtype",
    "metric",
    "value",
    "x_name",
    "x_value",
    "higher_is_better",
    "attnbench_version",
    "torch_version",
    "git_commit",
    "created_at",
    "duration_s",
]


def rid(name: str) -> str:
    return test_run_id(name)


def _record(name, status="ok", metrics=None, error=None, **kw):
    return make_record(
        name,
        status=status,
        error=error,
        task_params={"seq_len": 8},
        variant_params={"temperature": 1.0},
        metrics=metrics or [],
        env={"torch_version": "x", "device_name": "cpu0"},
        **kw,
    )


def _write(tmp_path, name, status="ok", metrics=None, error=None, **kw):
    return write_record(tmp_path, _record(name, status, metrics, error, **kw))


def test_design_columns_present():
    assert set(DESIGN_COLUMNS) <= set(COLUMNS)


def test_tidy_rows_and_failed_runs_kept(tmp_path):
    pts = [
        {
            "metric": "fwd_ms",
            "value": 2.0,
            "x_name": "seq_len",
            "x_value": 8.0,
            "higher_is_better": False,
        },
        {
            "metric": "gflops",
            "value": 10.0,
            "x_name": "seq_len",
            "x_value": 8.0,
            "higher_is_better": True,
        },
    ]
    _write(tmp_path, "a", metrics=pts)
    _write(tmp_path, "b", status="failed", error="RuntimeError: boom")
    summary = collect(tmp_path)
    frame = pd.read_parquet(tmp_path / "results.parquet")
    assert summary.n_records == 2 and len(frame) == 3
    assert list(frame.columns) == COLUMNS
    ok = frame[frame.run_id == rid("a")].set_index("metric")
    assert ok.loc["fwd_ms", "value"] == 2.0 and not ok.loc["fwd_ms", "higher_is_better"]
    assert json.loads(ok.loc["gflops", "variant_params"]) == {"temperature": 1.0}
    failed = frame[frame.run_id == rid("b")].iloc[0]
    assert failed.status == "failed" and failed.error == "RuntimeError: boom"
    assert pd.isna(failed.metric)


def test_corrupt_and_foreign_files_skipped_with_warning(tmp_path):
    _write(tmp_path, "a")
    (tmp_path / "runs" / "corrupt.json").write_text("{not json")
    (tmp_path / "runs" / "foreign.json").write_text('{"hello": 1}')
    with pytest.warns(UserWarning):
        summary = collect(tmp_path)
    assert summary.n_records == 1 and len(summary.skipped) == 2
    assert "skipped 2" in summary.describe()


def test_cli_without_runs_says_what_to_do(tmp_path, capsys):
    """Bad input like a missing folder, exit 2 (was 1: a folder without records, or whose runs
    is a file, and a missing folder answered differently); an empty runs/ is collected (0)."""
    assert main([str(tmp_path)]) == 2
    assert "run a sweep first" in capsys.readouterr().err
    assert main([str(tmp_path / "missing")]) == 2
    (tmp_path / "runs").write_text("")
    assert main([str(tmp_path)]) == 2
    assert "is a file, not the folder of run records" in capsys.readouterr().err
    (tmp_path / "runs").unlink()
    (tmp_path / "runs").mkdir()
    assert main([str(tmp_path)]) == 0


def _point(value):
    return [{"metric": "fwd_ms", "value": value, "x_name": "seq_len", "x_value": 8.0}]


def _sorted(frame):
    return frame.sort_values(["run_id", "metric"]).reset_index(drop=True)


def test_incremental_collection_equals_a_full_one(tmp_path):
    for i in range(5):
        _write(tmp_path, f"r{i}", metrics=_point(float(i)))
    first = collect(tmp_path)
    assert first.n_records == 5 and first.n_reused == 0
    again = collect(tmp_path)
    assert again.n_reused == 5 and "5 unchanged" in again.describe()

    _write(tmp_path, "r1", status="failed", error="boom")  # a failed attempt beside the ok one
    _write(tmp_path, "r3", metrics=_point(30.0), created_at="2030-01-01T00:00:00+00:00")  # newer
    _write(tmp_path, "r9", metrics=_point(9.0))  # new
    (tmp_path / "runs" / f"{rid('r2')}.json").unlink()  # removed: its run dropped when asked
    with pytest.raises(MissingRunsError):
        collect(tmp_path)
    incremental = collect(tmp_path, drop_missing=True)
    assert incremental.n_records == 5 and incremental.n_reused == 3  # r0, r1 (its ok), r4
    table = _sorted(pd.read_parquet(tmp_path / "results.parquet"))
    assert sorted(table.run_id.unique()) == sorted(rid(n) for n in ["r0", "r1", "r3", "r4", "r9"])
    r1 = table[table.run_id == rid("r1")]
    assert r1.status.tolist() == ["ok"] and r1.latest_status.tolist() == ["failed"]
    assert r1.attempts.tolist() == [2]
    assert table[table.run_id == rid("r3")].value.tolist() == [30.0]
    collect(tmp_path, incremental=False)
    full = _sorted(pd.read_parquet(tmp_path / "results.parquet"))
    pd.testing.assert_frame_equal(table, full)


def test_unusable_table_means_a_full_collection(tmp_path):
    _write(tmp_path, "a", metrics=_point(1.0))
    collect(tmp_path)
    (tmp_path / "results.parquet").write_text("not a table")
    summary = collect(tmp_path)
    assert summary.n_records == 1 and summary.n_reused == 0
    assert len(pd.read_parquet(tmp_path / "results.parquet")) == 1


@pytest.mark.parametrize("damage", ["junk", "truncated", "empty"])
def test_an_unreadable_table_is_moved_aside_not_written_over(tmp_path, damage):
    """A table that cannot be read may hold runs whose records are gone (it cannot say), so
    the collection moves it to a name of its own and says where, byte for byte kept."""
    for name in "ab":
        _write(tmp_path, name, metrics=_point(1.0))
    collect(tmp_path)
    table = tmp_path / "results.parquet"
    whole = table.read_bytes()
    bad = {"junk": b"not a table", "truncated": whole[: len(whole) // 2], "empty": b""}[damage]
    table.write_bytes(bad)
    summary = collect(tmp_path)
    (aside,) = tmp_path.glob("results.unreadable-*.parquet")
    assert aside.read_bytes() == bad
    assert summary.set_aside == aside and str(aside) in summary.describe()
    assert summary.n_records == 2 and len(run_ids_of(table)) == 2
    collect(tmp_path)  # a readable table: nothing more moved
    assert len(list(tmp_path.glob("results.unreadable-*"))) == 1


def run_ids_of(table):
    return set(pd.read_parquet(table, columns=["run_id"]).run_id)


def _table(tmp_path):
    return pd.read_parquet(tmp_path / "results.parquet")


def test_rows_are_keyed_by_run_id_not_by_file_name(tmp_path):
    for name in ("a", "b"):
        _write(tmp_path, name, metrics=_point(1.0))
    collect(tmp_path)
    runs = tmp_path / "runs"
    (runs / f"{rid('a')}.json").rename(runs / "renamed.json")
    (runs / "b (copy).json").write_bytes((runs / f"{rid('b')}.json").read_bytes())
    for incremental in (True, False):
        summary = collect(tmp_path, incremental=incremental)
        table = _table(tmp_path)
        assert summary.n_records == 2 and len(table) == 2  # nothing lost, nothing duplicated
        assert sorted(table.run_id) == sorted([rid("a"), rid("b")])
        assert table.attempts.tolist() == [1, 1]  # a copy is not another attempt
        assert set(table.record_file) == {"renamed.json", f"{rid('b')}.json"}


def test_a_mistyped_record_is_skipped_naming_its_file_and_field(tmp_path):
    _write(tmp_path, "good", metrics=_point(1.0))
    bad = _write(tmp_path, "bad", metrics=_point(2.0))
    data = json.loads(bad.read_text())
    data["metrics"] = "fwd_ms=2"
    bad.write_text(json.dumps(data))
    with pytest.warns(UserWarning, match=rf"{bad.name}.*field metrics must be list"):
        summary = collect(tmp_path)
    assert summary.n_records == 1 and _table(tmp_path).run_id.tolist() == [rid("good")]
    assert "skipped 1 invalid files" in summary.describe()


def test_a_symlinked_record_is_not_followed(tmp_path):
    outside = tmp_path / "outside"
    _write(outside, "x", metrics=_point(1.0))
    _write(tmp_path / "r", "y", metrics=_point(1.0))
    (tmp_path / "r" / "runs" / "link.json").symlink_to(outside / "runs" / f"{rid('x')}.json")
    with pytest.warns(UserWarning, match="not a regular file"):
        summary = collect(tmp_path / "r")
    assert summary.n_records == 1


def test_a_record_of_a_newer_schema_is_reported_and_left_untouched(tmp_path):
    _write(tmp_path, "a", metrics=_point(1.0))
    newer = tmp_path / "runs" / "future.json"
    text = json.dumps({"run_id": rid("f"), "schema_version": SCHEMA_VERSION + 1})
    newer.write_text(text)
    with pytest.warns(UserWarning, match="left untouched.*upgrade attnbench"):
        summary = collect(tmp_path)
    assert summary.newer == [str(newer)] and newer.read_text() == text
    assert "left 1 records of a newer schema untouched" in summary.describe()


def test_records_of_older_code_are_history_not_current(tmp_path):
    _write(tmp_path, "now", metrics=_point(1.0))
    _write(tmp_path, "edited", metrics=_point(2.0), code_modules={"attnbench.metrics": "0"})
    _write(tmp_path, "removed", metrics=_point(3.0), code_modules={"attnbench.gone": "0"})
    _write(tmp_path, "unfingerprinted", metrics=_point(4.0), code_modules={})
    summary = collect(tmp_path)
    current = _table(tmp_path).set_index("run_id")["current"]
    assert current[rid("now")]
    for name in ("edited", "removed", "unfingerprinted"):
        assert not current[rid(name)], name
    assert summary.n_stale == 3 and "3 of older code kept as history" in summary.describe()


def test_a_record_claiming_a_fingerprint_with_other_modules_cannot_make_old_code_current(tmp_path):
    """Staleness is judged from the modules recorded with a fingerprint. A record whose
    code_modules are today's but whose code_fingerprint is an old run's must not make that run
    current (read last, it did), nor one that claims the fingerprint with no modules make it
    stale; the altered record is skipped naming the field."""
    from attnbench.harness.jobs.fingerprint import combined_digest

    old_modules = {"attnbench.metrics": "0"}
    _write(tmp_path, "old", metrics=_point(1.0), code_modules=old_modules)
    _write(tmp_path, "now", metrics=_point(2.0))
    forged = tmp_path / "runs" / f"{rid('zz-forged')}.json"
    data = json.loads((tmp_path / "runs" / f"{rid('now')}.json").read_text())
    data.update(run_id=rid("zz-forged"), code_fingerprint=combined_digest(old_modules))
    forged.write_text(json.dumps(data))
    empty = tmp_path / "runs" / f"{rid('zz-empty')}.json"
    data.update(
        run_id=rid("zz-empty"),
        code_fingerprint=json.loads((tmp_path / "runs" / f"{rid('now')}.json").read_text())[
            "code_fingerprint"
        ],
        code_modules={},
    )
    empty.write_text(json.dumps(data))
    with pytest.warns(UserWarning, match=rf"{forged.name}.*code_fingerprint.*altered"):
        collect(tmp_path)
    current = _table(tmp_path).drop_duplicates("run_id").set_index("run_id")["current"]
    assert not current[rid("old")] and current[rid("now")]
    assert rid("zz-forged") not in current.index


def test_a_newer_record_whose_run_id_is_not_its_identity_s_never_replaces_the_genuine_run(tmp_path):
    """A run's rows come from its best record; one whose run_id is not the hash of its identity
    (copied or edited into another run's id: here another variant, newer) must not be it."""
    import dataclasses

    from attnbench.harness.jobs.records import make_run_id, record_path

    genuine = _record("g", metrics=_point(1.0))
    genuine = dataclasses.replace(genuine, run_id=make_run_id(genuine.identity()))
    write_record(tmp_path, genuine)
    forged = dataclasses.replace(
        genuine, variant="linear", metrics=_point(9.0), created_at="2999-01-01T00:00:00+00:00"
    )
    path = record_path(tmp_path, genuine.run_id)
    (path.parent / f"{genuine.run_id}.29990101T000000.json").write_text(forged.to_json())
    collect(tmp_path)
    rows = _table(tmp_path)
    assert rows.variant.unique().tolist() == ["softmax"] and rows.value.tolist() == [1.0]


def test_records_of_a_plugin_not_installed_here_are_current_unless_superseded(tmp_path):
    elsewhere = {"some_plugin_not_installed.variant": "d1"}
    _write(
        tmp_path,
        "old",
        metrics=_point(1.0),
        code_modules=elsewhere,
        created_at="2026-01-01T00:00:00+00:00",
    )
    collect(tmp_path)
    assert _table(tmp_path)["current"].tolist() == [True]  # cannot tell: the only record
    newer_code = {"some_plugin_not_installed.variant": "d2"}
    _write(
        tmp_path,
        "new",
        metrics=_point(2.0),
        code_modules=newer_code,
        created_at="2026-01-02T00:00:00+00:00",
    )  # same job (same JOB_KEY columns), newer code
    collect(tmp_path)
    current = _table(tmp_path).set_index("run_id")["current"]
    assert current[rid("new")] and not current[rid("old")]


def test_concurrent_collectors_take_turns(tmp_path):
    import threading

    from filelock import FileLock

    _write(tmp_path, "a", metrics=_point(1.0))
    with FileLock(tmp_path / ".collect.lock"):
        worker = threading.Thread(target=collect, args=(tmp_path,))
        worker.start()
        worker.join(timeout=0.5)
        assert worker.is_alive()  # waits for the lock
        assert not (tmp_path / "results.parquet").exists()
    worker.join(timeout=30)
    assert not worker.is_alive() and len(_table(tmp_path)) == 1


def test_a_results_folder_that_cannot_be_written_is_one_sentence(tmp_path, capsys, monkeypatch):
    _write(tmp_path, "a", metrics=_point(1.0))

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("attnbench.harness.results.collect.FileLock", refuse)
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write the table" in err and "Traceback" not in err


def test_library_variants_carry_their_peer_and_library_and_older_records_read_empty(tmp_path):
    _write(
        tmp_path,
        "peer",
        variant="peer_local_window",
        details={"peer_of": "window", "variant_library": "local-attention 1.11.2"},
    )
    _write(tmp_path, "ours", variant="window", details={"peer_of": "", "variant_library": ""})
    _write(tmp_path, "older", variant="softmax", details={"variant_family": "softmax"})
    collect(tmp_path)
    frame = pd.read_parquet(tmp_path / "results.parquet").set_index("variant")
    at = COLUMNS.index("variant_family")
    assert COLUMNS[at : at + 3] == ["variant_family", "peer_of", "variant_library"]
    assert frame.loc["peer_local_window", ["peer_of", "variant_library"]].tolist() == [
        "window",
        "local-attention 1.11.2",
    ]
    assert frame.loc["window", ["peer_of", "variant_library"]].tolist() == ["", ""]
    assert frame.loc["softmax", ["peer_of", "variant_library"]].tolist() == ["", ""]


def test_a_full_disk_is_said_as_such(tmp_path, capsys, monkeypatch):
    _write(tmp_path, "a", metrics=_point(1.0))

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("attnbench.harness.results.collect.write_table", full)
    assert main([str(tmp_path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith(
        "(No space left on device: the disk is full; free some space and run it again)."
    )


def test_ctrl_c_is_one_line_exit_130_and_leaves_the_table_as_it_was(tmp_path, capsys, monkeypatch):
    _write(tmp_path, "a", metrics=_point(1.0))
    collect(tmp_path)
    before = (tmp_path / "results.parquet").read_bytes()
    _write(tmp_path, "b", metrics=_point(2.0))

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("attnbench.harness.results.collect.pq.write_table", interrupted)
    assert main([str(tmp_path), "--full"]) == 130
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        "attnbench-collect: interrupted by Ctrl-C; the table is as it was "
        "(collect again to finish)."
    )
    assert (tmp_path / "results.parquet").read_bytes() == before
    assert not list(tmp_path.glob(".results.parquet.*"))  # its temporary table removed


def test_a_killed_collector_s_temporary_table_is_removed_by_the_next(tmp_path):
    """kill -9 gives a collector no chance to clean up; the next one (holding the lock, so no
    other collector is writing) removes what it left."""
    _write(tmp_path, "a", metrics=_point(1.0))
    orphan = tmp_path / ".results.parquet.k1ll3d.tmp"
    orphan.write_bytes(b"x" * 1000)
    other = tmp_path / ".results.parquet.lock.keep"  # not a temporary table: left alone
    other.write_text("")
    collect(tmp_path)
    assert not orphan.exists() and other.exists()


def test_a_copied_results_folder_is_still_collected(tmp_path):
    """A clone or a copy gives every record a new mtime: the table (its content digests) still
    reflects them, so nothing is collected again, and the committed reference table is not
    rewritten by reading it; a record whose content changed (same size) is seen."""
    import os
    import shutil

    from attnbench.harness.results.collect import uncollected

    for i in range(3):
        _write(tmp_path / "a", f"r{i}", metrics=_point(float(i)))
    collect(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")  # copytree keeps mtimes: change them
    for path in (tmp_path / "b" / "runs").glob("*.json"):
        os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert uncollected(tmp_path / "b") == 0
    assert collect(tmp_path / "b").n_reused == 3

    path = tmp_path / "b" / "runs" / f"{rid('r1')}.json"
    text = path.read_text()
    path.write_text(text.replace('"value": 1.0', '"value": 7.0'))
    assert len(path.read_text()) == len(text)
    os.utime(path, ns=(path.stat().st_atime_ns, tmp_path.stat().st_mtime_ns))  # an old mtime
    assert uncollected(tmp_path / "b") == 1
    collect(tmp_path / "b")
    assert 7.0 in _table(tmp_path / "b").value.tolist()


MALFORMED = [  # (what the file holds, a fragment of the warning that skips it)
    ("[" * 100_000, "nested too deeply"),
    ('{"a":' * 100_000, "nested too deeply"),
    ("created_at=yesterday", "field created_at 'yesterday' is not an ISO 8601 time"),
    ("created_at=2026-01-01T00:00:00", "is not an ISO 8601 time"),  # no zone: not comparable
]
# metric points the table would take wrongly (the adversarial pre-round of issue #63): each
# skips its record naming the point
POINT = {"metric": "fwd_ms", "value": 1.0, "x_name": "seq_len", "x_value": 8.0}
BAD_POINTS = [
    ([{**POINT, "value": float("inf")}], r"metrics\[0\]\.value is inf, not a finite number"),
    ([{**POINT, "x_value": float("-inf")}], r"metrics\[0\]\.x_value is -inf"),
    ([{**POINT, "metric": ""}], r"metrics\[0\]\.metric is empty"),
    ([{k: v for k, v in POINT.items() if k != "value"}], r"metrics\[0\]\.value is missing"),
    ([POINT, {**POINT, "value": 2.0}], r"metrics\[1\] repeats fwd_ms at seq_len = 8.0"),
    (
        [{"metric": "accuracy", "value": 0.5}, {"metric": "converged", "value": 2.67}],
        r"metrics\[1\]\.value 2.67 of the flag converged is not 0 or 1",
    ),
]


@pytest.mark.parametrize("content, why", MALFORMED, ids=[w for _, w in MALFORMED])
def test_a_malformed_file_is_skipped_saying_why_and_the_rest_collected(tmp_path, content, why):
    """Found by the adversarial round of issue #28 (a RecursionError traceback; a timestamp that
    compares as the newest attempt forever)."""
    _write(tmp_path, "good", metrics=_point(1.0))
    if content.startswith("created_at="):
        path = _write(tmp_path, "bad", metrics=_point(2.0))
        path.write_text(json.dumps({**json.loads(path.read_text()), "created_at": content[11:]}))
    else:
        (tmp_path / "runs" / "bad.json").write_text(content)
    with pytest.warns(UserWarning, match=why):
        summary = collect(tmp_path)
    assert summary.n_records == 1 and _table(tmp_path).run_id.tolist() == [rid("good")]


@pytest.mark.parametrize("points, why", BAD_POINTS, ids=[w for _, w in BAD_POINTS])
def test_a_record_with_a_bad_metric_point_is_skipped_naming_it(tmp_path, points, why):
    _write(tmp_path, "good", metrics=_point(1.0))
    from attnbench.task_info import TaskInfo

    info = TaskInfo(name="recall", convergence={"accuracy": "converged"}).to_dict()
    path = _write(tmp_path, "bad", metrics=_point(2.0), task_info=info)
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "metrics": points}))  # Infinity: as JSON writes it
    with pytest.warns(UserWarning, match=why):
        summary = collect(tmp_path)
    assert summary.n_records == 1 and _table(tmp_path).run_id.tolist() == [rid("good")]


def test_a_variants_pattern_sizes_reach_the_table(tmp_path):
    """The job's record names its variant's pattern-size parameters (details, from
    `AttentionVariant.size_params`); the table holds them as text for the board's labels, and
    "" where a record names none or names them in a shape that is no list of names."""
    _write(tmp_path, "a", details={"variant_size_params": ["local", "stride"]})
    _write(tmp_path, "b", details={"variant_size_params": "local"})
    _write(tmp_path, "c")
    collect(tmp_path)
    frame = pd.read_parquet(tmp_path / "results.parquet").set_index("run_id")
    assert frame.loc[rid("a"), "variant_size_params"] == "local,stride"
    assert frame.loc[rid("b"), "variant_size_params"] == ""
    assert frame.loc[rid("c"), "variant_size_params"] == ""
