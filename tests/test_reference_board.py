"""The README's "no time to run?" command beside the test suite: building the committed
reference's board writes only what git ignores (the site folder), so the suite's guard
(conftest's `_the_committed_reference_is_only_read`) holds while a reader builds and browses it."""

from __future__ import annotations

import re

import pytest
from conftest import REFERENCE, REPO, _reference_state, reference_files, run_cli


@pytest.mark.slow
def test_the_readme_board_command_leaves_the_committed_reference_as_it_is():
    before = _reference_state()
    (command,) = re.findall(
        r"No time to run\? `(attnbench-leaderboard results/reference[^`]*)`",
        (REPO / "README.md").read_text(),
    )
    board = run_cli(*command.split())  # the README's, as it stands there, from the root
    assert board.returncode == 0, board.stderr
    site = REFERENCE / "leaderboard"
    assert (site / "index.html").is_file()
    assert _reference_state() == before
    guarded = set(reference_files())
    assert REFERENCE / "results.parquet" in guarded
    assert not any(path.is_relative_to(site) for path in guarded)
    assert len([p for p in guarded if p.parent.name == "runs"]) >= 1000
