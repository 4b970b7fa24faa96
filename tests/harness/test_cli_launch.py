"""The console scripts start in `attnbench.harness.cli`: a Ctrl-C while a command loads is one
line and status 130, and a warning is one line naming the command, not a place in our code."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import warnings
from pathlib import Path

from attnbench.harness import cli

BIN = Path(sys.executable).parent


def test_a_ctrl_c_while_the_command_loads_is_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "slow_to_load.py").write_text("raise KeyboardInterrupt\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = warnings.showwarning
    try:
        assert cli.launch("attnbench-x", "slow_to_load", []) == cli.INTERRUPTED == 130
    finally:
        warnings.showwarning = before
    err = capsys.readouterr().err
    assert err == "attnbench-x: interrupted by Ctrl-C while starting; nothing was done.\n"


def test_a_ctrl_c_in_the_middle_of_the_imports_lets_them_finish_and_runs_nothing(
    tmp_path, monkeypatch, capsys
):
    """A KeyboardInterrupt inside an import leaves modules half-initialised (and a guarded plugin
    import turns it into a false warning and runs on): the Ctrl-C is noted while the command
    loads, the imports finish, and the command stops before its main."""
    (tmp_path / "half_way.py").write_text(
        "import os, pathlib, signal\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        f"pathlib.Path({str(tmp_path / 'imported')!r}).write_text('all of it')\n"
        "def main(argv):\n"
        f"    pathlib.Path({str(tmp_path / 'ran')!r}).write_text('main ran')\n"
        "    return 0\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    before = warnings.showwarning
    try:
        assert cli.launch("attnbench-x", "half_way", []) == cli.INTERRUPTED
    finally:
        warnings.showwarning = before
    assert (tmp_path / "imported").exists()  # the import was not cut in the middle
    assert not (tmp_path / "ran").exists()
    err = capsys.readouterr().err
    assert err == "attnbench-x: interrupted by Ctrl-C while starting; nothing was done.\n"


def test_the_launcher_imports_nothing_heavy():
    heavy = "{'torch', 'pandas', 'hydra'}"
    code = f"import sys, attnbench.harness.cli; print(sorted({heavy} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_a_skipped_record_is_one_line_naming_the_command_and_the_file(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "broken.json").write_text("{not json")
    done = subprocess.run(
        [str(BIN / "attnbench-collect"), str(tmp_path)], capture_output=True, text=True
    )
    lines = [line for line in done.stderr.splitlines() if "broken.json" in line]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("attnbench-collect: warning: skipping ")
    assert ".py:" not in done.stderr and "UserWarning" not in done.stderr


def _shown(message, filename) -> str:
    out = io.StringIO()
    cli._one_line("attnbench")(message, UserWarning, filename, 7, file=out)
    return out.getvalue()


def test_a_warning_from_the_user_s_own_file_names_it_and_no_line(tmp_path):
    plugin = tmp_path / "my_plugin.py"
    plugin.write_text("")
    assert _shown("this plugin is deprecated", str(plugin)) == (
        f"attnbench: warning: this plugin is deprecated (from {plugin})\n"
    )


def test_a_warning_from_attnbench_torch_or_the_standard_library_names_no_file():
    import torch  # an installed package (site-packages)

    for module in (cli, warnings, subprocess, torch):
        assert _shown("a sentence", module.__file__) == "attnbench: warning: a sentence\n"


def test_torch_s_cpp_location_is_cut_from_the_sentence():
    raw = (
        "ignoring invalid value for ATEN_CPU_CAPABILITY: bogus (Triggered internally at "
        "/__w/pytorch/pytorch/aten/src/ATen/native/DispatchStub.cpp:83.)"
    )
    assert _shown(raw, "<string>") == (
        "attnbench: warning: ignoring invalid value for ATEN_CPU_CAPABILITY: bogus\n"
    )


def test_the_resource_tracker_s_clean_up_note_is_not_printed(monkeypatch):
    """A pool stopped by Ctrl-C leaves semaphores that the standard library's resource tracker
    removes, printing a raw warning with a code location after the command's last line. The
    tracker starts with the interpreter's -W options: a process started so prints nothing of it
    (and still prints other warnings)."""
    monkeypatch.setattr(sys, "warnoptions", [])
    cli.quiet_resource_tracker()
    code = (
        "import warnings\n"
        "warnings.warn('resource_tracker: There appear to be 2 leaked semaphore objects')\n"
        "warnings.warn('another warning')\n"
    )
    args = [sys.executable, *subprocess._args_from_interpreter_flags(), "-c", code]
    err = subprocess.run(args, capture_output=True, text=True, check=True).stderr
    assert "leaked semaphore" not in err and "another warning" in err


def test_the_processes_a_command_starts_print_each_warning_once_in_one_line(tmp_path):
    """joblib's workers are fresh interpreters that would print the command's warnings again,
    raw, with code locations, once per worker. Three such processes (what a worker does:
    import the command's package, then warn from the user's file, and about a plugin the command
    has reported) print one line between them, naming the command and the user's file."""
    plugin = tmp_path / "user_plugin.py"
    plugin.write_text(
        "import warnings\n"
        "def build():\n"
        "    warnings.warn('built with an experimental kernel')\n"
        "    warnings.warn('attnbench: plugin p failed to load and is skipped: ImportError')\n"
    )
    code = f"import sys, attnbench.harness.cli; sys.path.insert(0, {str(tmp_path)!r}); "
    code += "import user_plugin; user_plugin.build()"
    shown = tmp_path / "shown"
    shown.mkdir()
    env = {**os.environ, cli.SHOWN: str(shown), cli.COMMAND: "attnbench"}
    workers = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    err = "".join(w.communicate()[1] for w in workers)
    assert err == f"attnbench: warning: built with an experimental kernel (from {plugin})\n"


def test_a_command_s_shared_warnings_end_with_it(tmp_path, monkeypatch):
    """The variables that make its processes share warnings are the command's alone: gone,
    with their folder, when it returns (tests run commands in one process)."""
    (tmp_path / "noting.py").write_text(
        "import os\ndef main(argv):\n    return os.environ['ATTNBENCH_WARNINGS_SHOWN']\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(cli.SHOWN, raising=False)
    before = warnings.showwarning
    try:
        folder = cli.launch("attnbench-x", "noting", [])
    finally:
        warnings.showwarning = before
    assert Path(folder).name.startswith("attnbench-warnings-") and not Path(folder).exists()
    assert cli.SHOWN not in os.environ and cli.COMMAND not in os.environ


def test_a_killed_command_s_warnings_folder_is_removed_by_the_next(tmp_path, monkeypatch):
    """A command killed (SIGKILL) cannot remove its folder; the next command removes the
    folders of commands no longer running, and only those."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    left = tmp_path / f"{cli.SHOWN_PREFIX}{dead.stdout.strip()}-abc123"
    alive = tmp_path / f"{cli.SHOWN_PREFIX}{os.getpid()}-def456"
    left.mkdir()
    alive.mkdir()
    (tmp_path / "doing_nothing.py").write_text("def main(argv):\n    return 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = warnings.showwarning
    try:
        assert cli.launch("attnbench-x", "doing_nothing", []) == 0
    finally:
        warnings.showwarning = before
    assert not left.exists() and alive.exists()
