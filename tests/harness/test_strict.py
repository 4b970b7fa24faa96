"""``--strict`` on every command (`harness.cli.strict`): a plugin that failed to load stops the
commands that load plugins (exit 2, before anything is done, one sentence naming it); a record
that cannot be read makes the commands that read results exit 1 after their work, naming it.
Each passes with ``--strict`` where nothing is wrong.

The plugin failures are made in-process (a `PluginFailure` put into discovery's bookkeeping), so
that each command's own ``main`` runs in seconds; `test_the_console_script_takes_strict_off`
and tests/harness/test_discovery.py do the same with a really installed broken distribution.
"""

from __future__ import annotations

import json
import sys

import pytest
from conftest import FAST, make_record, run_cli

from attnbench.harness import discovery
from attnbench.harness.cli import app, collect, compare, speed
from attnbench.harness.cli import variants as listing
from attnbench.harness.cli.strict import bad_records, take_strict_flag
from attnbench.harness.discovery import PluginFailure
from attnbench.harness.jobs.records import write_record
from attnbench.harness.results.collect import collect as collect_table

BROKEN = PluginFailure(
    "attnbench.variants", "broken", "broken_plugin_mod", "broken-plugin", "ImportError: xyz"
)
NAMED = (
    "plugin broken-plugin (entry point attnbench.variants: broken = broken_plugin_mod) failed "
    "to load: ImportError: xyz; fix or uninstall it (--strict makes this an error)."
)


@pytest.fixture
def broken(monkeypatch):
    """A plugin that failed to load, as discovery records one."""
    monkeypatch.setattr(discovery, "_failures", [BROKEN])


@pytest.fixture
def intact(monkeypatch):
    """Every plugin loaded (whatever this environment has installed)."""
    monkeypatch.setattr(discovery, "_failures", [])


def test_the_flag_is_taken_off_a_command_line():
    assert take_strict_flag(["-m", "--strict", "seed=1"]) == (["-m", "seed=1"], True)
    assert take_strict_flag(["seed=1"]) == (["seed=1"], False)


# --- commands that load plugins: exit 2 before doing anything ----------------------------------


def _attnbench(monkeypatch, capsys, *args):
    """Run ``attnbench`` in-process; Hydra replaced by a stub that records the argv it gets."""
    reached = []
    monkeypatch.setattr(sys, "argv", ["attnbench", *args])
    monkeypatch.setattr(app, "_hydra_main", lambda: reached.append(list(sys.argv)))
    try:
        app.main()
        status = 0
    except SystemExit as exc:
        status = exc.code
    return status, reached, capsys.readouterr().err


def test_attnbench_strict_refuses_a_broken_plugin_before_hydra(
    broken, monkeypatch, capsys, tmp_path
):
    status, reached, err = _attnbench(
        monkeypatch, capsys, "--strict", "variant=softmax", f"results_dir={tmp_path / 'r'}"
    )
    assert status == 2 and not reached
    assert err == f"attnbench: {NAMED}\n"
    assert list(tmp_path.iterdir()) == []


def test_attnbench_strict_passes_where_every_plugin_loaded(intact, monkeypatch, capsys, tmp_path):
    results = f"results_dir={tmp_path / 'r'}"
    status, reached, err = _attnbench(monkeypatch, capsys, "variant=softmax", "--strict", results)
    assert status == 0, err
    assert reached == [["attnbench", "variant=softmax", results]]  # Hydra never sees --strict


def test_attnbench_without_strict_warns_once_and_goes_on(broken, monkeypatch, capsys, tmp_path):
    status, reached, err = _attnbench(
        monkeypatch, capsys, "variant=softmax", f"results_dir={tmp_path / 'r'}"
    )
    assert status == 0 and reached
    assert err == (
        "attnbench: warning: plugin broken-plugin (entry point attnbench.variants: broken = "
        "broken_plugin_mod) failed to load and is skipped: ImportError: xyz\n"
    )


def test_variants_strict(broken, capsys):
    assert listing.main(["--strict", "softmax"]) == 2
    captured = capsys.readouterr()
    assert "softmax" in captured.out  # the listing is still printed: it shows what did load
    assert captured.err == f"attnbench-variants: {NAMED}\n"
    assert listing.main(["softmax"]) == 0
    assert "warning: plugin broken-plugin" in capsys.readouterr().err


def test_variants_strict_passes_where_every_plugin_loaded(intact, capsys):
    assert listing.main(["--strict", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["failed_plugins"] == []


def test_speed_strict_refuses_before_measuring(broken, monkeypatch, capsys):
    monkeypatch.setattr(speed, "measure", lambda *_, **__: pytest.fail("measured"))
    assert speed.main(["--strict"]) == 2
    assert capsys.readouterr().err == f"attnbench-speed: {NAMED}\n"


def test_speed_strict_passes_where_every_plugin_loaded(intact, monkeypatch, capsys):
    monkeypatch.setattr(speed, "declared_targets", lambda: ([], []))
    monkeypatch.setattr(speed, "measure", lambda *_, **__: ([], {}))
    assert speed.main(["--strict", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"targets": [], "median_ms": {}}


def test_the_console_script_takes_strict_off(tmp_path):
    """Through the real ``attnbench`` command: Hydra never sees ``--strict`` and the job runs."""
    proc = run_cli(
        "attnbench", "--strict", "variant=softmax", *FAST, f"results_dir={tmp_path}", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert len(list((tmp_path / "runs").glob("*.json"))) == 1


# --- commands that read records: exit 1 after their work -----------------------------------------


def _results(folder, *names):
    for name in names:
        metrics = [{"metric": "fwd_ms", "value": 1.0, "x_name": "seq_len", "x_value": 8.0}]
        write_record(folder, make_record(name, metrics=metrics))
    collect_table(folder)
    return folder


def _corrupt(folder):
    bad = folder / "runs" / "corrupt.json"
    bad.write_text("{not json")
    return bad


def test_collect_strict_writes_the_table_then_fails_naming_the_record(tmp_path, capsys):
    _results(tmp_path, "a")
    bad = _corrupt(tmp_path)
    (tmp_path / "results.parquet").unlink()
    assert collect.main([str(tmp_path), "--strict"]) == 1
    captured = capsys.readouterr()
    assert "collected 1 records" in captured.out and (tmp_path / "results.parquet").is_file()
    (line,) = captured.err.splitlines()
    assert line.startswith(f"attnbench-collect: left out {bad}: Expecting property name")
    assert line.endswith("(--strict makes this an error).")


def test_collect_strict_counts_a_record_of_a_newer_schema(tmp_path, capsys):
    _results(tmp_path, "a")
    newer = tmp_path / "runs" / "future.json"
    newer.write_text(json.dumps({"run_id": "f" * 16, "schema_version": 10**6}))
    assert collect.main([str(tmp_path), "--strict"]) == 1
    assert f"left out {newer} has record schema version" in capsys.readouterr().err


def test_collect_strict_passes_with_valid_records(tmp_path, capsys):
    _results(tmp_path, "a", "b")
    assert collect.main([str(tmp_path), "--strict", "--full"]) == 0
    assert capsys.readouterr().err == ""


def test_collect_without_strict_skips_with_a_warning(tmp_path, capsys):
    _results(tmp_path, "a")
    _corrupt(tmp_path)
    with pytest.warns(UserWarning, match="corrupt.json"):
        assert collect.main([str(tmp_path)]) == 0


def test_compare_strict_reports_then_fails_naming_the_record(tmp_path, capsys):
    old, new = _results(tmp_path / "old", "a"), _results(tmp_path / "new", "a")
    assert compare.main([str(old), str(new), "--strict"]) == 0
    assert capsys.readouterr().err == ""
    bad = _corrupt(new)
    assert compare.main([str(old), str(new / "results.parquet"), "--strict"]) == 1
    captured = capsys.readouterr()
    assert "metric points compared" in captured.out  # the report is still given
    (line,) = captured.err.splitlines()
    assert line.startswith("attnbench-compare: left out ") and str(bad) in line
    assert compare.main([str(old), str(new)]) == 0  # without --strict: not compare's concern


def test_bad_records_of_a_table_without_a_runs_folder_are_none(tmp_path):
    (tmp_path / "results.csv").write_text("run_id\n")
    assert bad_records(tmp_path / "results.csv") == []


def test_leaderboard_strict_builds_then_fails_naming_the_record(tmp_path, capsys):
    from attnbench.harness.cli import leaderboard as site

    _results(tmp_path, "a")
    assert site.main([str(tmp_path), "--strict"]) == 0
    assert capsys.readouterr().err == ""
    bad = tmp_path / "runs" / "corrupt.json"
    bad.write_text("{not json")
    assert site.main([str(tmp_path), "--strict"]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"attnbench-leaderboard: left out {bad}: Expecting property name")
    assert (tmp_path / "leaderboard" / "index.html").is_file()
    assert site.main([str(tmp_path)]) == 0
