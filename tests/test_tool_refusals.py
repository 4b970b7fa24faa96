"""Bad input to the other console scripts: one sentence naming the value and the fix, exit 2.

A table of cases, one row each (the command's entry point, its arguments, a fragment of the
sentence), run in-process through the function the console script calls, so that the next case
found is one line here. `attnbench` itself has its table in test_bad_input.py.
"""

from __future__ import annotations

import pytest

from attnbench.harness.cli.collect import main as collect_main
from attnbench.harness.cli.compare import main as compare_main
from attnbench.harness.cli.leaderboard import main as leaderboard_main
from attnbench.harness.cli.variants import main as variants_main

MAINS = {
    "attnbench-collect": collect_main,
    "attnbench-compare": compare_main,
    "attnbench-leaderboard": leaderboard_main,
    "attnbench-variants": variants_main,
}
LONG = "/tmp/" + "x" * 300  # one name over the 255 bytes a file name may have (ENAMETOOLONG)

REFUSALS = [
    # a threshold that lets every regression pass: the gate would be open
    ("attnbench-compare", ["a", "b", "--threshold", "inf", "--fail"], "--threshold inf is not"),
    ("attnbench-compare", ["a", "b", "--threshold", "nan"], "--threshold nan is not"),
    ("attnbench-compare", ["a", "b", "--threshold", "-0.1"], "give a number from 0 to 1e300"),
    ("attnbench-compare", ["a", "b", "--threshold", "1e308"], "--threshold 1e+308 is not"),
    # a pattern that matches nothing printed a bare header and exited 0
    ("attnbench-variants", ["zzz"], "no registered variant matches 'zzz'."),
    ("attnbench-variants", ["softmx"], "matches 'softmx'. Did you mean: softmax?"),
    ("attnbench-variants", ["--json", "lin*x"], "no registered variant matches 'lin*x'."),
    # a name longer than the filesystem allows: Python's path checks raised a traceback
    ("attnbench-collect", [LONG], "is too long (its part xxxxxxxxxxxx… is 300 bytes"),
    ("attnbench-compare", [LONG, LONG], "is too long"),
    ("attnbench-leaderboard", [LONG], "the results folder /tmp/xxx"),
    ("attnbench-leaderboard", ["results", "-o", LONG], "the site folder /tmp/xxx"),
    # an empty name is the working folder to pathlib: not what was meant
    ("attnbench-leaderboard", ["results", "-o", ""], "-o is empty; give a folder."),
    ("attnbench-leaderboard", [""], "the results folder is empty; give a folder."),
    ("attnbench-collect", [""], "the results folder is empty; give a folder."),
    # a folder that is not there, or a file: named as such, like the leaderboard does
    ("attnbench-collect", ["/nonexistent"], "no results folder /nonexistent; give the folder"),
    ("attnbench-collect", ["/etc/hostname"], "no results folder /etc/hostname;"),
    # what argparse refuses: its usage text (2-9 lines) before the problem; one sentence now
    ("attnbench-leaderboard", ["--bogus"], "unrecognized arguments: --bogus; see attnbench-lead"),
    ("attnbench-collect", ["a", "b"], "unrecognized arguments: b; see attnbench-collect --help."),
    ("attnbench-compare", ["a", "b", "--threshold", "lots"], "invalid float value: 'lots'; see"),
    ("attnbench-variants", ["--bogus"], "unrecognized arguments: --bogus; see attnbench-variants"),
]


@pytest.mark.parametrize(
    "command, args, message", REFUSALS, ids=[f"{c} {' '.join(a)}"[:60] for c, a, _ in REFUSALS]
)
def test_refused_in_one_sentence(command, args, message, capsys):
    try:
        status = MAINS[command](args)
    except SystemExit as stop:  # argparse's refusals exit
        status = stop.code
    assert status == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert line.startswith(f"{command}: ") and message in line, line
    assert captured.out == ""


@pytest.mark.parametrize("command", ["attnbench-collect", "attnbench-leaderboard"])
def test_a_runs_that_is_a_file_is_named_as_one(command, tmp_path, capsys):
    """Collect called it "no run records" with exit 1 and the board wrote an empty page saying
    "no results yet" (the adversarial pre-round of issue #63); nothing is written."""
    (tmp_path / "runs").write_text("")
    assert MAINS[command]([str(tmp_path)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        f"{command}: {tmp_path / 'runs'} is a file, not the folder of run records a sweep "
        "writes; move it aside or give another results folder."
    )
    assert [p.name for p in tmp_path.iterdir()] == ["runs"]
