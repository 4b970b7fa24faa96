from __future__ import annotations

import json
import os
import re

import pytest

from attnbench.harness.jobs.records import (
    IDENTITY_FIELDS,
    SCHEMA_VERSION,
    Record,
    RecordFieldError,
    RecordSchemaError,
    atomic_write_text,
    attempt_run_id,
    find_finished_record,
    is_run_id,
    make_run_id,
    read_record,
    record_path,
    write_record,
)

RUN = "0123456789abcdef"


def _record(run_id=RUN, status="ok", **kw) -> Record:
    return Record(
        run_id=run_id,
        status=status,
        task="throughput",
        variant="softmax",
        task_params={"seq_len": 8},
        variant_params={},
        seed=0,
        device="cpu",
        dtype="float32",
        **kw,
    )


def test_run_id_is_stable_and_order_independent():
    a = make_run_id({"task": "t", "variant": "v", "seed": 1, "task_params": {"a": 1, "b": 2}})
    b = make_run_id({"seed": 1, "task_params": {"b": 2, "a": 1}, "variant": "v", "task": "t"})
    assert a == b and len(a) == 16
    assert a != make_run_id(
        {"task": "t", "variant": "v", "seed": 2, "task_params": {"a": 1, "b": 2}}
    )


def test_write_read_roundtrip(tmp_path):
    rec = _record(
        metrics=[
            {
                "metric": "fwd_ms",
                "value": 1.5,
                "x_name": None,
                "x_value": None,
                "higher_is_better": False,
            }
        ]
    )
    path = write_record(tmp_path, rec)
    assert path == tmp_path / "runs" / f"{RUN}.json"
    assert read_record(path) == rec
    assert find_finished_record(tmp_path, RUN) == rec
    assert list((tmp_path / "runs").iterdir()) == [path]  # no temporary files left


def test_non_finite_values_are_written_as_null(tmp_path):
    path = write_record(tmp_path, _record(duration_s=float("nan")))
    assert json.loads(path.read_text())["duration_s"] is None


def test_failed_record_is_not_a_finished_run(tmp_path):
    write_record(tmp_path, _record(status="failed", error="boom"))
    assert find_finished_record(tmp_path, RUN) is None


def test_atomic_write_keeps_old_file_when_writing_fails(tmp_path, monkeypatch):
    path = tmp_path / "runs" / "x.json"
    atomic_write_text(path, "old")

    def broken_replace(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        atomic_write_text(path, "new")
    assert path.read_text() == "old"
    assert sorted(p.name for p in path.parent.iterdir()) == ["x.json"]


def test_a_stop_the_moment_the_temporary_file_is_made_leaves_none(tmp_path, monkeypatch):
    """A stop (a Ctrl-C, a caught SIGTERM) can land as the temporary file comes into being,
    before its name was handed back (tempfile.mkstemp's window, which left an empty
    ``.x.json.*.tmp`` in a board killed by SIGTERM): the name is chosen first, so it goes."""
    path = tmp_path / "x.json"
    atomic_write_text(path, "old")
    real_open = os.open

    def stopped(name, flags, mode=0o777):
        os.close(real_open(name, flags, mode))  # the file exists now
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "open", stopped)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_text(path, "new")
    monkeypatch.undo()
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json"]


def test_newer_schema_is_refused_with_advice(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"run_id": RUN, "schema_version": SCHEMA_VERSION + 1}))
    with pytest.raises(RecordSchemaError, match="upgrade attnbench"):
        read_record(path)


def test_foreign_json_is_refused(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"hello": "world"}))
    with pytest.raises(RecordSchemaError, match="not an attnbench run record"):
        read_record(path)


def test_process_killed_mid_write_leaves_no_partial_record(tmp_path):
    """A writer SIGKILLed after writing half of a record's bytes: no record appears, and the
    torn temporary file is invisible to the collector."""
    import signal
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(f"""
        import os, signal
        from attnbench.harness.jobs import records
        def dying_open(path, *args, **kwargs):
            f = open(path, *args, **kwargs)
            real = f.write
            def write(text):
                real(text[: len(text) // 2]); f.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            f.write = write
            return f
        records.open = dying_open  # the module's open: the file atomic_write_text writes
        target = records.Path({str(tmp_path / "runs" / "x.json")!r})
        records.atomic_write_text(target, "{{}}" * 1000)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    leftovers = [p.name for p in (tmp_path / "runs").iterdir()]
    assert "x.json" not in leftovers and all(n.startswith(".x.json.") for n in leftovers)
    assert leftovers  # the torn temporary file is there (the kill skipped the clean-up) …
    from attnbench.harness.results.collect import collect

    assert collect(tmp_path).n_records == 0  # … and the collector does not see it


def test_identity_holds_what_determines_the_measurement():
    assert set(IDENTITY_FIELDS) == {
        "task",
        "task_params",
        "variant",
        "variant_params",
        "seed",
        "device",
        "dtype",
        "threads",
        "hardware",
        "code_fingerprint",
    }
    base = _record(threads=1, hardware="cpu A", code_fingerprint="f1").identity()
    for field, other in [("threads", 2), ("hardware", "cpu B"), ("code_fingerprint", "f2")]:
        assert make_run_id({**base, field: other}) != make_run_id(base), field


@pytest.mark.parametrize("run_id", ["abc", "../../etc/passwd", "0123456789ABCDEF", RUN + "0"])
def test_a_run_id_that_is_not_a_hash_never_becomes_a_path(tmp_path, run_id):
    with pytest.raises(ValueError, match="not 16 lowercase hex digits"):
        record_path(tmp_path, run_id)


def _files(tmp_path):
    return sorted(p.name for p in (tmp_path / "runs").iterdir())


def test_a_failed_rerun_never_replaces_an_ok_record(tmp_path):
    ok = _record(created_at="2026-01-01T00:00:00+00:00")
    write_record(tmp_path, ok)
    failed = _record(status="timeout", error="slow", created_at="2026-01-02T00:00:00+00:00")
    beside = write_record(tmp_path, failed)
    assert read_record(tmp_path / "runs" / f"{RUN}.json") == ok  # the ok record stays in place
    assert beside.name == f"{RUN}.20260102T000000Z.json" and read_record(beside) == failed
    assert find_finished_record(tmp_path, RUN) == ok


def test_a_newer_record_of_the_same_run_keeps_the_earlier_one_as_history(tmp_path):
    first = _record(status="failed", error="x", created_at="2026-01-01T00:00:00+00:00")
    second = _record(created_at="2026-01-02T00:00:00+00:00")
    third = _record(duration_s=2.0, created_at="2026-01-03T00:00:00+00:00")
    for record in (first, second, third):
        write_record(tmp_path, record)
    assert read_record(tmp_path / "runs" / f"{RUN}.json") == third
    assert _files(tmp_path) == [
        f"{RUN}.20260101T000000Z.json",
        f"{RUN}.20260102T000000Z.json",
        f"{RUN}.json",
    ]
    # the same second twice: a free name, nothing overwritten
    write_record(tmp_path, _record(status="failed", error="y", created_at=third.created_at))
    assert f"{RUN}.20260103T000000Z.json" in _files(tmp_path)
    assert len(_files(tmp_path)) == 4


def test_a_record_of_a_newer_schema_is_left_untouched(tmp_path, caplog):
    path = tmp_path / "runs" / f"{RUN}.json"
    path.parent.mkdir()
    newer = json.dumps({"run_id": RUN, "schema_version": SCHEMA_VERSION + 1, "future": 1})
    path.write_text(newer)
    beside = write_record(tmp_path, _record(created_at="2026-01-01T00:00:00+00:00"))
    assert path.read_text() == newer
    assert beside != path and read_record(beside).run_id == RUN
    assert "left" in caplog.text and "untouched" in caplog.text


def _data(**changes):
    data = json.loads(_record().to_json())
    data.update(changes)
    return data


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"metrics": "fwd_ms=1"}, "field metrics must be list"),
        ({"metrics": [{"metric": "m", "value": "1.5"}]}, "field metrics[0].value must be"),
        ({"metrics": [{"metric": 3, "value": 1.5}]}, "field metrics[0].metric must be str"),
        ({"seed": "0"}, "field seed must be int"),
        ({"seed": True}, "field seed must be int"),
        ({"task_params": [1]}, "field task_params must be dict"),
        ({"status": "great"}, "field status 'great' is not one of"),
        ({"run_id": "../x"}, "field run_id '../x' is not a run id"),
        ({"env": None}, "field env must be dict"),
        ({"code_modules": {"m": 1}}, "field code_modules[m] must be str"),
        ({"seed": 10**30}, "field seed = 1000000000000000000000000000000 is beyond a 64-bit"),
        ({"threads": 2**64}, "field threads = 18446744073709551616 is beyond a 64-bit"),
        ({"task_params": {"n": -(2**63) - 1}}, "field task_params.n = "),
        (
            {"metrics": [{"metric": "m", "value": 1.0, "x_name": "n", "x_value": 10**400}]},
            "field metrics[0].x_value = 1000",
        ),
        ({"schema_version": -1}, "field schema_version -1 is not a schema version"),
        ({"schema_version": "3"}, "field schema_version '3' is not a schema version"),
        ({"schema_version": 2.5}, "field schema_version 2.5 is not a schema version"),
    ],
)
def test_a_mistyped_field_is_named_with_its_file(tmp_path, changes, field):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_data(**changes)))
    with pytest.raises(RecordFieldError) as info:
        read_record(path)
    assert str(path) in str(info.value) and field in str(info.value)


def test_a_missing_required_field_is_named(tmp_path):
    data = _data()
    del data["task"]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    with pytest.raises(RecordFieldError, match="field task is missing"):
        read_record(path)


def test_schema_2_records_read_with_threads_and_hardware_from_their_environment(tmp_path):
    data = _data(schema_version=2, env={"threads": 4, "device_name": "Some CPU"})
    for key in ("threads", "hardware", "code_fingerprint", "code_modules"):
        del data[key]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    record = read_record(path)
    assert (record.threads, record.hardware, record.code_fingerprint) == (4, "Some CPU", "")


def test_run_ids_have_one_form_that_is_safe_as_a_name_and_a_link():
    assert is_run_id(make_run_id({"task": "recall", "seed": 3}))
    for bad in (
        "../../etc/passwd",
        "0123456789ABCDEF",  # upper case: not what the hash produces
        "0123456789abcdef\n",  # `$` would let this through
        "0123456789abcde",
        "0123456789abcdef0",
        'abc"def0123456789',
        None,
        1234567890123456,
    ):
        assert not is_run_id(bad), bad


def test_attempt_file_names_give_their_run_id(tmp_path):
    write_record(tmp_path, _record(created_at="2026-01-01T00:00:00+00:00"))
    beside = write_record(tmp_path, _record(status="oom", created_at="2026-01-01T00:00:00+00:00"))
    assert attempt_run_id(beside.name) == RUN
    for other in (f"{RUN}.json", "notes.json", f"{RUN}.20260101T000000Z.json.tmp", "x.json"):
        assert attempt_run_id(other) is None, other


def test_a_linked_record_is_not_finished_because_collection_would_not_read_it(tmp_path):
    """A job skipped as finished must reach the table; collection does not follow links."""
    elsewhere = tmp_path / "elsewhere"
    path = write_record(elsewhere, _record())
    (tmp_path / "runs").mkdir()
    os.symlink(path, tmp_path / "runs" / f"{RUN}.json")
    assert find_finished_record(tmp_path, RUN) is None


@pytest.mark.parametrize(
    "unreadable",
    [
        lambda p: p.write_text('{"run_id": 3}'),  # bad field types
        lambda p: p.write_text(json.dumps({"schema_version": 999, "run_id": RUN})),  # newer
        lambda p: p.mkdir(),  # a directory
    ],
    ids=["bad-types", "newer-schema", "directory"],
)
def test_an_ok_record_beside_an_unreadable_one_is_the_finished_run(tmp_path, unreadable):
    """write_record leaves an unreadable run file alone and writes beside it; a later sweep must
    find that record there instead of running the job, and adding an attempt, every time."""
    (tmp_path / "runs").mkdir()
    unreadable(tmp_path / "runs" / f"{RUN}.json")
    ok = _record(created_at="2026-01-01T00:00:00+00:00")
    beside = write_record(tmp_path, ok)
    assert beside.name != f"{RUN}.json"
    assert find_finished_record(tmp_path, RUN) == ok
    newer_failure = _record(status="failed", error="x", created_at="2026-01-02T00:00:00+00:00")
    write_record(tmp_path, newer_failure)
    assert find_finished_record(tmp_path, RUN) == ok  # ok first, though older


GOOD_TASK_INFO = {
    "name": "throughput",
    "headline": "fwd_ms",
    "metrics": [{"name": "fwd_ms", "higher_is_better": False, "description": "ms"}],
    "chart_bands": {"fwd_ms": ["fwd_ms_q25", "fwd_ms_q75"]},
    "scaling_fits": [{"metric": "fwd_ms", "axis": "seq_len"}],
    "tuning": None,
    "a_field_of_a_newer_attnbench": {"anything": 1},  # ignored, as TaskInfo.from_dict does
}


@pytest.mark.parametrize(
    "change, field",
    [
        ({"chart_bands": {"fwd_ms": 3}}, "task_info.chart_bands[fwd_ms]"),
        ({"chart_bands": {"fwd_ms": ["a"]}}, "task_info.chart_bands[fwd_ms]"),
        ({"metrics": [5]}, "task_info.metrics[0]"),
        ({"metrics": [{"name": "x", "description": ""}]}, "task_info.metrics[0].higher_is_better"),
        (
            {"metrics": [{"name": 1, "higher_is_better": None, "description": ""}]},
            "task_info.metrics[0].name",
        ),
        ({"headline": ["fwd_ms"]}, "task_info.headline"),
        ({"tuning": "lr"}, "task_info.tuning"),
        ({"tuning": {"params": "lr"}}, "task_info.tuning.params"),
        ({"scaling_fits": [{"metric": "fwd_ms"}]}, "task_info.scaling_fits[0].axis"),
        ({"name": None}, "task_info.name"),
    ],
)
def test_a_mistyped_task_info_is_an_invalid_record_naming_the_field(tmp_path, change, field):
    """A record's task description is read by every later collection and board: a mistyped
    one is refused like any other malformed record (collection skips it with a warning)."""
    assert read_record(write_record(tmp_path, _record(task_info=GOOD_TASK_INFO))).task_info
    path = write_record(tmp_path / "bad", _record(task_info={**GOOD_TASK_INFO, **change}))
    with pytest.raises(RecordFieldError, match=f"field {re.escape(field)}"):
        read_record(path)
