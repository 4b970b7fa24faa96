"""attnbench-compare on hand-made tables with known answers."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import run_cli

from attnbench.harness.cli.compare import main
from attnbench.harness.results.collect import COLUMNS
from attnbench.harness.results.compare import compare, format_report


def _row(variant, metric, value, higher, seed=0, x=None, status="ok", n=256, **extra):
    row = dict.fromkeys(COLUMNS)
    row.update(
        run_id=f"{variant}-{metric}-{seed}-{x}",
        derived=False,
        current=True,
        status=status,
        task="throughput" if metric is None or metric.startswith("fwd") else "recall",
        variant=variant,
        variant_params="{}",
        task_params=json.dumps({"seq_len": n}),
        seed=seed,
        device="cpu",
        dtype="float32",
        metric=metric,
        value=value,
        x_name="seq_len" if x is not None else None,
        x_value=x,
        higher_is_better=higher,
    )
    row.update(extra)
    return row


def _failure(variant, status, seed=0, n=256, error="RuntimeError: out of memory", **extra):
    """The one row of a job that ended without metrics."""
    return _row(variant, None, None, None, seed=seed, status=status, n=n, error=error, **extra)


def _table(rows, columns=COLUMNS):
    return pd.DataFrame(rows, columns=columns)


OLD = _table(
    [
        _row("a", "fwd_ms", 10.0, False, x=256),
        _row("a", "fwd_ms_iqr", 0.1, None, x=256),
        _row("b", "fwd_ms", 10.0, False, x=256),
        _row("b", "fwd_ms_iqr", 5.0, None, x=256),  # noisy: a 20% change is inside its spread
        *[_row("a", "accuracy", v, True, seed=s) for s, v in enumerate([0.90, 0.92, 0.91])],
        _row("c", "fwd_ms", 10.0, False, x=256),
    ]
)
NEW = _table(
    [
        _row("a", "fwd_ms", 12.0, False, x=256),  # 20% slower, spread 0.1: a regression
        _row("a", "fwd_ms_iqr", 0.1, None, x=256),
        _row("b", "fwd_ms", 12.0, False, x=256),
        _row("b", "fwd_ms_iqr", 5.0, None, x=256),
        *[_row("a", "accuracy", v, True, seed=s) for s, v in enumerate([0.80, 0.81, 0.79])],
        _row("c", "fwd_ms", 5.0, False, x=256),  # twice as fast: better, not flagged
    ]
)


def _lines(result, threshold=0.05):
    return format_report(result, threshold).splitlines()


def test_regressions_respect_direction_threshold_and_spread():
    result = compare(OLD, NEW, threshold=0.05)
    matched = result.matched.set_index(["variant", "metric"])
    assert bool(matched.loc[("a", "fwd_ms"), "regressed"])
    assert matched.loc[("a", "fwd_ms"), "worse_by"] == pytest.approx(0.2)
    assert not bool(matched.loc[("b", "fwd_ms"), "regressed"])  # within IQR 5 + 5
    assert bool(matched.loc[("a", "accuracy"), "regressed"])  # higher is better, it fell
    assert matched.loc[("a", "accuracy"), "worse_by"] == pytest.approx((0.91 - 0.80) / 0.91)
    assert not bool(matched.loc[("c", "fwd_ms"), "regressed"])
    assert matched.loc[("c", "fwd_ms"), "worse_by"] == pytest.approx(-0.5)
    assert ("a", "fwd_ms_iqr") not in matched.index  # no direction: not judged
    assert result.counts() == {"WORSE": 2, "MISSING": 0, "FAILED": 0, "EMPTY": 0}


def test_threshold_above_the_change_flags_nothing():
    result = compare(OLD, NEW, threshold=0.5)
    assert not result.matched["regressed"].any() and not result.regressed


def test_a_variant_new_lacks_is_one_missing_line_and_fails_the_gate(tmp_path, capsys):
    new = NEW[NEW["variant"] != "b"]
    result = compare(OLD, new)
    assert result.counts()["MISSING"] == 2  # b's fwd_ms and fwd_ms_iqr
    assert "MISSING variant throughput × b: 2 metric points not in NEW" in _lines(result)
    OLD.to_parquet(tmp_path / "old.parquet")
    new.to_parquet(tmp_path / "new.parquet")
    # within the threshold the WORSE lines go, the missing variant stays
    args = [str(tmp_path / "old.parquet"), str(tmp_path / "new.parquet"), "--threshold", "0.9"]
    assert main(args) == 0
    assert main([*args, "--fail"]) == 1
    out = capsys.readouterr().out
    assert "0 worse by more than 90%" in out and "2 metric points missing in NEW" in out


def test_a_missing_setting_metric_and_curve_point_are_each_named():
    icl = {"task": "icl", "x_name": "n_examples"}
    curve = [_row("a", "mse", 1 / k, False, x=k, **icl) for k in (1, 2, 3)]
    tp = {"task": "throughput"}
    old = _table(
        [
            *curve,
            _row("a", "fwd_ms", 10.0, False, x=256),
            _row("a", "gflops", 50.0, True, x=256, **tp),
            _row("a", "fwd_ms", 40.0, False, x=512, n=512),
            _row("a", "gflops", 60.0, True, x=512, n=512, **tp),
        ]
    )
    new = _table(
        [
            *curve[:2],  # the curve lost its point at 3
            _row("a", "fwd_ms", 10.0, False, x=256),  # gflops dropped at 256; 512 not run
        ]
    )
    lines = _lines(compare(old, new))
    assert (
        'MISSING setting throughput × a {} {"seq_len": 512} cpu float32: 2 metric points not in NEW'
        in lines
    )
    assert (
        'MISSING metric throughput × a {} {"seq_len": 256} cpu float32: gflops '
        "(1 metric point not in NEW)" in lines
    )
    assert 'MISSING point icl × a {} {"seq_len": 256} cpu float32: mse at n_examples=3' in lines
    assert compare(old, new).counts()["MISSING"] == 4
    assert lines[-1].endswith(
        "4 metric points missing in NEW, 0 jobs failed in NEW; 0 metric points new in NEW."
    )


def test_a_job_that_now_fails_is_failed_not_missing():
    old = _table([_row("a", "fwd_ms", 10.0, False, x=256), _row("b", "fwd_ms", 9.0, False, x=256)])
    new = _table([_failure("a", "oom"), _row("b", "fwd_ms", 9.0, False, x=256)])
    result = compare(old, new)
    assert result.counts() == {"WORSE": 0, "MISSING": 0, "FAILED": 1, "EMPTY": 0}
    (line,) = [x for x in _lines(result) if not x[0].isdigit()]
    assert line == (
        'FAILED throughput × a {} {"seq_len": 256} cpu float32 seed 0: oom in NEW, ok in OLD '
        "(RuntimeError: out of memory)"
    )


def test_a_seed_that_fails_where_other_seeds_ran_ok_before_is_failed():
    old = _table([_row("a", "accuracy", v, True, seed=s) for s, v in enumerate([0.9, 0.9])])
    failure = _failure("a", "timeout", seed=7, task="recall")
    new = _table([_row("a", "accuracy", 0.9, True, seed=0), failure])
    result = compare(old, new)
    assert result.counts()["FAILED"] == 1 and result.failed.iloc[0]["seed"] == 7
    assert result.counts()["MISSING"] == 0  # seed 0 still gives the point its value


def test_a_job_that_failed_before_and_still_fails_is_no_regression():
    rows = [_row("a", "accuracy", 0.9, True, seed=0), _failure("a", "oom", seed=1, task="recall")]
    old, new = _table(rows), _table(rows)
    assert not compare(old, new).regressed
    never_ran = _table([_failure("b", "oom")])  # neither a regression nor news
    both = compare(never_ran, never_ran)
    assert not both.regressed and both.new_failed.empty and len(_lines(both)) == 1


def test_a_setting_now_unsupported_is_missing_with_the_status_noted():
    old = _table([_row("a", "fwd_ms", 10.0, False, x=256), _row("b", "fwd_ms", 9.0, False, x=256)])
    new = _table(
        [_failure("a", "unsupported", error="no causal"), _row("b", "fwd_ms", 9.0, False, x=256)]
    )
    result = compare(old, new)
    assert result.counts() == {"WORSE": 0, "MISSING": 1, "FAILED": 0, "EMPTY": 0}
    assert (
        "MISSING variant throughput × a: 1 metric point not in NEW; NEW recorded: unsupported"
        in _lines(result)
    )


def test_a_missing_metric_is_named_beside_a_job_that_recorded_no_metric():
    """NEW's not-ok runs have no metric (NaN): the notes for a missing metric are looked up
    without tripping on the key's type (it raised in pandas' merge)."""
    gflops = _row("a", "gflops", 5.0, True, x=256, task="throughput")
    old = _table([_row("a", "fwd_ms", 10.0, False, x=256), gflops])
    new = _table([_row("a", "fwd_ms", 10.0, False, x=256), _failure("b", "unsupported")])
    lines = _lines(compare(old, new))
    assert (
        'MISSING metric throughput × a {} {"seq_len": 256} cpu float32: gflops '
        "(1 metric point not in NEW)" in lines
    )


def test_what_only_new_has_is_reported_as_new_and_passes_the_gate(tmp_path):
    new = _table(
        [
            *NEW.to_dict("records"),
            _row("d", "fwd_ms", 1.0, False, x=256),
            _failure("e", "oom"),
        ]
    )
    result = compare(OLD, new, threshold=0.9)
    assert not result.regressed
    lines = _lines(result, 0.9)
    assert "NEW variant throughput × d: 1 metric point not in OLD" in lines
    assert (
        'NEW throughput × e {} {"seq_len": 256} cpu float32 seed 0: oom in NEW, a setting OLD did '
        "not run ok (RuntimeError: out of memory)" in lines
    )
    assert lines[-1].endswith("; 1 metric point new in NEW.")


def test_an_empty_new_table_fails_even_against_an_empty_old_one():
    empty = _table([])
    result = compare(OLD, empty)
    assert result.new_is_empty and result.regressed
    assert result.counts()["MISSING"] == len(compare(OLD, OLD).matched) + 2  # + the iqr points
    assert "EMPTY NEW has no runs (no run rows, or none marked current)." in _lines(result)
    both = compare(empty, empty)
    assert both.regressed and both.counts() == {"WORSE": 0, "MISSING": 0, "FAILED": 0, "EMPTY": 1}
    assert "NOTE OLD has no runs: nothing to hold NEW to." in _lines(both)


def test_only_current_rows_are_compared_where_the_table_marks_them():
    def marked(table, current):
        return table.assign(current=current)

    history = _row("a", "fwd_ms", 1.0, False, x=256, current=False)  # old code, much faster
    old = _table([*marked(OLD, True).to_dict("records"), history], COLUMNS)
    result = compare(old, marked(NEW, True))
    assert result.matched.set_index(["variant", "metric"]).loc[("a", "fwd_ms"), "mean_old"] == 10.0
    # a point NEW has only as history is missing, and a NEW of history alone is empty
    new = marked(NEW, NEW["variant"] != "c")
    assert "MISSING variant throughput × c: 1 metric point not in NEW" in _lines(compare(old, new))
    assert compare(old, marked(NEW, False)).new_is_empty
    # strings from a CSV round trip count as well
    assert compare(old, marked(NEW, "True")).counts() == compare(OLD, NEW).counts()


def test_derived_fit_rows_are_neither_compared_nor_missed():
    fit = _row("a", "scaling_exponent", 1.0, False, derived=True, run_id="f" * 16)
    old = _table([*OLD.to_dict("records"), fit])
    worse = _table([*NEW.to_dict("records"), {**fit, "value": 2.0}])  # doubled: not judged
    assert compare(old, worse).counts() == compare(OLD, NEW).counts()
    assert compare(old, NEW).counts() == compare(OLD, NEW).counts()  # fit gone: not missing
    assert "scaling_exponent" not in set(compare(old, worse).matched["metric"])


def test_tables_without_the_derived_and_current_columns_still_compare(tmp_path):
    old = OLD.drop(columns=["derived", "current"])
    old.to_csv(tmp_path / "old.csv", index=False)
    NEW.drop(columns=["derived", "current"]).to_csv(tmp_path / "new.csv", index=False)
    assert main([str(tmp_path / "old.csv"), str(tmp_path / "new.csv"), "--fail"]) == 1
    assert compare(old, NEW).counts()["WORSE"] == 2


def test_cli_exit_codes(tmp_path, capsys):
    OLD.to_parquet(tmp_path / "old.parquet")
    NEW.to_csv(tmp_path / "new.csv", index=False)
    args = [str(tmp_path / "old.parquet"), str(tmp_path / "new.csv")]
    assert main(args) == 0
    assert main([*args, "--fail"]) == 1
    out = capsys.readouterr().out
    assert "WORSE throughput × a {}: fwd_ms at seq_len=256 10 → 12 (+20.0%" in out
    assert (
        "4 metric points compared: 2 worse by more than 5% and outside the spread, 1 better; "
        "0 metric points missing in NEW, 0 jobs failed in NEW; 0 metric points new in NEW." in out
    )
    assert main([*args[:1], *args[:1], "--fail"]) == 0  # a table against itself


def _unreadable(tmp_path):
    """Each unreadable table, with what its one sentence must say."""
    corrupt = tmp_path / "corrupt" / "results.parquet"
    corrupt.parent.mkdir()
    corrupt.write_bytes(b"PAR1 this is not a parquet file")
    (corrupt.parent / "runs").mkdir()  # records it can be collected again from
    lone = tmp_path / "lone" / "results.parquet"  # no records beside it: recollecting cannot help
    lone.parent.mkdir()
    lone.write_bytes(b"garbage")
    old_format = tmp_path / "old_format.csv"
    OLD.drop(columns=["higher_is_better", "x_value"]).to_csv(old_format, index=False)
    no_table = tmp_path / "no_table"
    (no_table / "runs").mkdir(parents=True)
    return [
        (corrupt, f"{corrupt} is not a readable parquet results table", "attnbench-collect --full"),
        (lone, " …); restore it, or the records", f"the records ({lone.parent / 'runs'})"),
        (old_format, f"{old_format} lacks the column(s) x_value, higher_is_better", "--full"),
        (no_table, f"{no_table} has no results.parquet", f"attnbench-collect {no_table}"),
        (tmp_path / "missing", "does not exist; give a results folder", "attnbench-collect"),
    ]


def test_unreadable_tables_are_one_sentence_and_exit_2(tmp_path, capsys):
    good = tmp_path / "good.parquet"
    OLD.to_parquet(good)
    for bad, what, fix in _unreadable(tmp_path):
        for args in ([str(good), str(bad)], [str(bad), str(good)]):
            assert main(args) == 2, bad
            captured = capsys.readouterr()
            assert captured.out == ""
            (line,) = captured.err.splitlines()
            assert line.startswith("attnbench-compare: ") and what in line and fix in line


def test_console_script_gates_on_a_lost_variant_and_refuses_a_corrupt_table(tmp_path):
    OLD.to_parquet(tmp_path / "old.parquet")
    NEW[NEW["variant"] != "c"].to_parquet(tmp_path / "new.parquet")
    tables = [str(tmp_path / "old.parquet"), str(tmp_path / "new.parquet")]
    proc = run_cli("attnbench-compare", *tables, "--fail")
    assert proc.returncode == 1, proc.stderr
    assert "MISSING variant throughput × c: 1 metric point not in NEW" in proc.stdout
    (tmp_path / "new.parquet").write_bytes(b"not parquet")
    proc = run_cli("attnbench-compare", *tables)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


STEADINESS = [("throughput", "fwd_ms", "fwd_steady")]


def _timing(variant, ms, steady, run_id):
    """A throughput run at 256: fwd_ms, its IQR and (unless None) its steadiness flag."""
    rows = [
        _row(variant, "fwd_ms", ms, False, x=256, run_id=run_id),
        _row(variant, "fwd_ms_iqr", 0.1, None, x=256, run_id=run_id),
    ]
    if steady is not None:
        rows.append(_row(variant, "fwd_steady", steady, None, x=256, run_id=run_id))
    return rows


def test_an_unsteady_timing_is_marked_not_called_worse():
    old = _table([*_timing("a", 10.0, 1.0, "a-old"), *_timing("b", 10.0, 1.0, "b-old")])
    new = _table([*_timing("a", 20.0, 0.0, "a-new"), *_timing("b", 20.0, 1.0, "b-new")])
    result = compare(old, new, 0.05, STEADINESS)
    lines = _lines(result)
    assert result.counts()["WORSE"] == 1 and lines[0].startswith("WORSE throughput × b")
    assert lines[1] == (
        "UNSTEADY throughput × a {}: fwd_ms at seq_len=256 10 → 20 (+100.0%) not judged: the "
        "timing in NEW is unsteady (measure it again on a quiet machine)"
    )
    assert lines[-1].endswith("; 1 worse but unsteady, not judged; 0 metric points new in NEW.")
    # an unsteady OLD is no baseline either; without the declaration, it is judged
    old = _table(_timing("a", 10.0, 0.0, "a-old"))
    new = _table(_timing("a", 20.0, 1.0, "a-new"))
    assert (
        "not judged: the timing in OLD is unsteady"
        in _lines(compare(old, new, 0.05, STEADINESS))[0]
    )
    assert compare(old, new).counts()["WORSE"] == 1


def test_a_value_still_learning_is_said_to_be_and_a_fall_is_printed_as_a_fall():
    """A recall accuracy that halved (1 → 0.5, higher is better) reads -50.0%, not +50.0%, and
    where its run's convergence flag is 0 the line says the run is still learning, not that a
    timing is unsteady (the adversarial pre-round of issue #63)."""
    flags = [("recall", "accuracy", "converged")]
    old = _table([_row("a", "accuracy", 1.0, True, run_id="o")])
    new = _table(
        [
            _row("a", "accuracy", 0.5, True, run_id="n"),
            _row("a", "converged", 0.0, None, run_id="n"),
        ]
    )
    assert sum(x.startswith("UNSTEADY") for x in _lines(compare(old, new, 0.05, flags))) == 1
    report = format_report(compare(old, new, 0.05, flags), 0.05, {"converged": "convergence"})
    assert "1 → 0.5 (-50.0%) not judged: the run in NEW is still learning at its cap" in report
    worse = [x for x in _lines(compare(old, new, 0.05)) if x.startswith("WORSE")]
    assert len(worse) == 1 and "(-50.0%," in worse[0]


def test_timings_without_the_flag_are_judged_as_before():
    """Older records (no fwd_steady), or a CSV table (no task descriptions): unknown, which is
    not unsteady."""
    old = _table(_timing("a", 10.0, None, "a-old"))
    new = _table(_timing("a", 20.0, None, "a-new"))
    result = compare(old, new, 0.05, STEADINESS)
    assert result.counts()["WORSE"] == 1 and not result.matched["unsteady_worse"].any()


def test_the_command_reads_the_flags_from_the_tables_task_descriptions(tmp_path, capsys):
    from conftest import make_record

    from attnbench.harness.jobs.records import write_record
    from attnbench.harness.results.collect import collect
    from attnbench.tasks.throughput import Throughput

    for name, ms, steady in (("old", 10.0, 1.0), ("new", 20.0, 0.0)):
        metrics = [
            {"metric": m, "value": v, "x_name": "seq_len", "x_value": 256, "higher_is_better": h}
            for m, v, h in (("fwd_ms", ms, False), ("fwd_steady", steady, None))
        ]
        write_record(
            tmp_path / name,
            make_record(
                name,
                task_params={"seq_len": 256},
                metrics=metrics,
                task_info=Throughput.describe().to_dict(),
            ),
        )
        collect(tmp_path / name)
    assert main([str(tmp_path / "old"), str(tmp_path / "new"), "--fail"]) == 0
    assert "UNSTEADY throughput × softmax {}: fwd_ms at seq_len=256" in capsys.readouterr().out


AVX2, AVX512 = "Some CPU (AVX2)", "Some CPU (AVX512)"


def _on(hardware, variant, ms, seed=0):
    """A timing of ``variant`` on the machine ``hardware`` (CPU model and capability)."""
    return _row(variant, "fwd_ms", ms, False, seed=seed, x=256, hardware=hardware)


def test_a_point_on_another_machine_is_not_judged(tmp_path, capsys):
    """The same setting timed under AVX2 in OLD and AVX-512 in NEW: not WORSE (nor better), one
    OTHER MACHINE line counted in the summary, no regression for --fail; on the same machine
    the same numbers are judged."""
    old = _table([_on(AVX2, "a", 10.0), _on(AVX2, "c", 10.0)])
    new = _table([_on(AVX512, "a", 20.0), _on(AVX512, "c", 5.0)])
    result = compare(old, new)
    assert result.matched.empty and not result.regressed
    assert result.counts() == {"WORSE": 0, "MISSING": 0, "FAILED": 0, "EMPTY": 0}
    lines = _lines(result)
    assert not [line for line in lines if line.startswith(("WORSE", "MISSING", "NEW"))]
    assert [line for line in lines if line.startswith("OTHER MACHINE")] == [
        f"OTHER MACHINE throughput × {v} {{}}: 1 metric point (fwd_ms) not judged: OLD ran on "
        f"{AVX2}, NEW on {AVX512} (run both on one machine to compare them)"
        for v in ("a", "c")
    ]
    assert lines[-1] == (
        "0 metric points compared: 0 worse by more than 5% and outside the spread, 0 better; "
        "0 metric points missing in NEW, 0 jobs failed in NEW; 2 metric points only on another "
        "machine in NEW, not judged; 0 metric points new in NEW."
    )
    old.to_parquet(tmp_path / "old.parquet")
    new.to_parquet(tmp_path / "new.parquet")
    assert main([str(tmp_path / "old.parquet"), str(tmp_path / "new.parquet"), "--fail"]) == 0
    assert "OTHER MACHINE throughput × a" in capsys.readouterr().out

    same = compare(old, _table([_on(AVX2, "a", 20.0), _on(AVX2, "c", 5.0)]))
    assert same.counts()["WORSE"] == 1 and same.other_machine.empty
    assert _lines(same)[0].startswith("WORSE throughput × a {}: fwd_ms at seq_len=256 10 → 20")
    assert "1 better" in _lines(same)[-1] and "another machine" not in _lines(same)[-1]


def test_points_on_several_machines_are_judged_per_machine():
    """Seeds of two machines are never averaged into one point: OLD's AVX-512 timing is held to
    NEW's, its AVX2 one (twice as slow) is not judged, and a point NEW lacks on every machine is
    one missing point however many machines OLD ran it on."""
    old = _table(
        [
            _on(AVX2, "a", 20.0),
            _on(AVX512, "a", 10.0, seed=1),
            _on(AVX2, "b", 10.0),
            _on(AVX512, "b", 10.0, seed=1),
        ]
    )
    new = _table([_on(AVX512, "a", 10.0, seed=1)])
    result = compare(old, new)
    (judged,) = result.matched.itertuples()
    assert (judged.hardware, judged.mean_old, judged.worse_by) == (AVX512, 10.0, 0.0)
    assert result.other_machine[["variant", "hardware_old", "hardware_new"]].values.tolist() == [
        ["a", AVX2, AVX512]
    ]
    assert result.counts() == {"WORSE": 0, "MISSING": 1, "FAILED": 0, "EMPTY": 0}
    assert "MISSING variant throughput × b: 1 metric point not in NEW" in _lines(result)
