from __future__ import annotations

import json
import os

import pytest

from attnbench.harness.records import (
    SCHEMA_VERSION,
    Record,
    RecordSchemaError,
    atomic_write_text,
    find_ok_record,
    is_run_id,
    make_run_id,
    read_record,
    write_record,
)


def _record(run_id="abc", status="ok", **kw) -> Record:
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
    assert path == tmp_path / "runs" / "abc.json"
    assert read_record(path) == rec
    assert find_ok_record(tmp_path, "abc") == rec
    assert list((tmp_path / "runs").iterdir()) == [path]  # no temporary files left


def test_non_finite_values_are_written_as_null(tmp_path):
    path = write_record(tmp_path, _record(duration_s=float("nan")))
    assert json.loads(path.read_text())["duration_s"] is None


def test_failed_record_is_not_a_finished_run(tmp_path):
    write_record(tmp_path, _record(status="failed", error="boom"))
    assert find_ok_record(tmp_path, "abc") is None


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


def test_newer_schema_is_refused_with_advice(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"run_id": "x", "schema_version": SCHEMA_VERSION + 1}))
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
        from attnbench.harness import records
        real_write = records.os.fdopen
        def dying_fdopen(fd, *args, **kwargs):
            f = real_write(fd, *args, **kwargs)
            real = f.write
            def write(text):
                real(text[: len(text) // 2]); f.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            f.write = write
            return f
        records.os.fdopen = dying_fdopen
        target = records.Path({str(tmp_path / "runs" / "x.json")!r})
        records.atomic_write_text(target, "{{}}" * 1000)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    leftovers = [p.name for p in (tmp_path / "runs").iterdir()]
    assert "x.json" not in leftovers and all(n.startswith(".x.json.") for n in leftovers)
    assert leftovers  # the torn temporary file is there (the kill skipped the clean-up) …
    from attnbench.harness.collect import collect

    assert collect(tmp_path).n_records == 0  # … and the collector does not see it


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
