"""A record's provenance: `git_dirty` counts code only, names the files, and collection reports
which code produced each run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import make_record, test_run_id

from attnbench.harness.cli.collect import main
from attnbench.harness.jobs import env
from attnbench.harness.jobs.records import write_record
from attnbench.harness.results.collect import collect, read_table
from attnbench.harness.results.provenance import per_run_lines, summary_lines

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = None


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A git checkout laid out like attnbench's, with results/ ignored; `env` reads it."""
    repo = tmp_path / "repo"
    for name in ("harness/jobs/env.py", "tasks/copy.py", "docs/index.md", "results/README.md"):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text("x\n")
    (repo / ".gitignore").write_text("results/runs/\n*.pyc\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    monkeypatch.setattr(env, "SOURCE_DIR", repo.resolve())
    env.git_state.cache_clear()
    yield repo
    env.git_state.cache_clear()


def _state() -> env.GitState:
    env.git_state.cache_clear()
    return env.git_state()


def test_a_clean_checkout_names_its_commit(checkout):
    state = _state()
    assert state.commit and len(state.commit) == 40
    assert state.dirty is False and state.dirty_files == ()


def test_results_docs_and_ignored_files_are_not_code(checkout):
    (checkout / "results" / "README.md").write_text("changed\n")
    (checkout / "results" / "runs").mkdir()
    (checkout / "results" / "runs" / "abc.json").write_text("{}")
    (checkout / "results" / "results.parquet").write_text("new table")
    (checkout / "docs" / "index.md").write_text("changed\n")
    (checkout / "tasks" / "cache.pyc").write_text("ignored")
    assert _state().dirty is False


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda repo: (repo / "tasks" / "copy.py").write_text("y\n"), "tasks/copy.py"),
        (lambda repo: (repo / "tasks" / "new_task.py").write_text("y\n"), "tasks/new_task.py"),
        (lambda repo: (repo / "harness" / "jobs" / "env.py").unlink(), "harness/jobs/env.py"),
    ],
    ids=["modified", "untracked", "deleted"],
)
def test_a_code_change_makes_the_record_dirty_and_names_the_file(checkout, change, named):
    change(checkout)
    state = _state()
    assert state.dirty is True
    assert state.dirty_files == (named,)


def test_code_paths_are_the_packages_the_wheel_is_built_from():
    if tomllib is None:
        pytest.skip("tomllib needs Python 3.11")
    root = Path(__file__).resolve().parents[2]
    package_dir = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"
    ]
    assert set(env.CODE_PATHS) == {*package_dir.values(), "pyproject.toml"}


def _record(tmp_path, run_id, commit, dirty, files=(), seed=0):
    write_record(
        tmp_path,
        make_record(
            run_id,
            seed=seed,
            env={
                "git_commit": commit,
                "git_dirty": dirty,
                "git_dirty_files": list(files),
                "code_source": "checkout" if commit else "distribution",
                "attnbench_version": "0.2.0",
            },
        ),
    )


def test_collect_reports_provenance_per_commit_and_per_run(tmp_path, capsys):
    _record(tmp_path, "a1", "a" * 40, False, seed=1)
    _record(tmp_path, "a2", "a" * 40, False, seed=2)
    _record(tmp_path, "b1", "b" * 40, True, ["tasks/copy.py"], seed=3)
    _record(tmp_path, "w1", None, None, seed=4)
    collect(tmp_path)
    frame, _ = read_table(tmp_path / "results.parquet")
    assert summary_lines(frame) == [
        "provenance: 2 runs of commit aaaaaaaaaaaa, clean code",
        "provenance: 1 run of installed attnbench 0.2.0",
        "provenance: 1 run of commit bbbbbbbbbbbb, code differs from it (tasks/copy.py)",
    ]
    per_run = per_run_lines(frame)
    assert len(per_run) == 4
    b1 = test_run_id("b1")
    assert any(line.startswith(b1) and "(tasks/copy.py)" in line for line in per_run)
    row = frame[frame["run_id"] == b1].iloc[0]
    assert row["git_dirty_files"] == "tasks/copy.py" and row["code_source"] == "checkout"
    assert main([str(tmp_path), "--provenance"]) == 0
    out = capsys.readouterr().out
    assert test_run_id("a1") in out and "installed attnbench 0.2.0" in out


def test_older_records_without_the_new_fields_still_collect(tmp_path):
    write_record(tmp_path, make_record("old", env={"git_commit": "c" * 40, "git_dirty": True}))
    collect(tmp_path)
    frame, _ = read_table(tmp_path / "results.parquet")
    assert frame["git_dirty_files"].tolist()[0] == ""
    assert summary_lines(frame) == [
        "provenance: 1 run of commit cccccccccccc, code differs from it"
    ]
    assert isinstance(frame, pd.DataFrame)
