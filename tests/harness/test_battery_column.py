"""The overview's battery column (`TaskInfo.battery`, e.g. MAD's six tasks) on a hand-made table:
the mean of the member columns, each the mean over its task's settings, where a row has them all."""

from __future__ import annotations

import pandas as pd

from attnbench.harness.leaderboard.columns import overview_columns
from attnbench.harness.leaderboard.overview import overview
from attnbench.harness.leaderboard.ranking import with_machine
from attnbench.harness.leaderboard.steadiness import judge_steadiness
from attnbench.harness.results.collect import COLUMNS
from attnbench.metrics import Metric
from attnbench.task_info import TaskInfo

ACC = [Metric("acc", True, "accuracy")]
INFOS = {
    "a": TaskInfo("a", "task a", "acc", ACC, battery="mad"),
    "b": TaskInfo("b", "task b", "acc", ACC, battery="mad"),
    "c": TaskInfo("c", "task c", "acc", ACC),  # in no battery
}


def _row(task, variant, value, setting="s1", seed=0):
    row = dict.fromkeys(COLUMNS)
    row.update(
        run_id=f"{task}-{variant}-{setting}-{seed}",
        status="ok",
        task=task,
        variant=variant,
        variant_params="{}",
        task_params=f'{{"setting": "{setting}"}}',
        seed=seed,
        device="cpu",
        hardware="Some CPU",
        threads=1,
        dtype="float32",
        metric="acc",
        value=value,
    )
    return row


def _overview(rows):
    frame = pd.DataFrame(rows, columns=COLUMNS)
    columns = overview_columns(judge_steadiness(with_machine(frame), INFOS), INFOS)
    result = overview(columns.frame, columns.headlines, {})
    names = [c.key for c in result.table.columns]
    cells = {
        r[names.index("variant")].text: dict(zip(names, r, strict=True)) for r in result.table.rows
    }
    return names, cells, {c.key: c for c in result.table.columns}


def test_the_battery_column_is_the_mean_of_its_tasks_beside_them():
    names, cells, columns = _overview(
        [
            _row("a", "X", 0.6),
            _row("a", "X", 1.0, setting="s2"),  # a: mean over settings 0.8
            _row("b", "X", 0.4),
            _row("c", "X", 0.0),
            _row("a", "Y", 0.5),
            _row("b", "Y", 0.3),
            _row("c", "Y", 1.0),
        ]
    )
    battery = "mad (mean of 2)"
    assert names.index(battery) == names.index("b") + 1  # beside its last member, before c
    assert names.index(battery) < names.index("c")
    assert cells["X"][battery].text == f"{(0.8 + 0.4) / 2:.3g}"
    assert cells["Y"][battery].text == f"{(0.5 + 0.3) / 2:.3g}"
    assert "#" not in cells["X"][battery].text  # shown, not ranked
    assert "a, b" in columns[battery].description and "not ranked" in columns[battery].description
    # the quality rank is the members' and c's win rates: X wins a and b, Y wins c
    assert cells["X"]["win_rate"].text.startswith(f"{(1 + 1 + 0) / 3:.3f}")


def test_a_row_without_every_member_has_no_battery_value():
    _, cells, _ = _overview(
        [_row("a", "X", 0.6), _row("b", "X", 0.4), _row("a", "Y", 0.9), _row("c", "Y", 0.2)]
    )
    assert cells["X"]["mad (mean of 2)"].text == "0.5"
    assert cells["Y"]["mad (mean of 2)"].text == "–"  # Y ran a but not b


def test_one_member_alone_makes_no_battery_column():
    names, _, _ = _overview([_row("a", "X", 0.6), _row("c", "X", 0.4), _row("a", "Y", 0.2)])
    assert not any(n.startswith("mad") for n in names)
