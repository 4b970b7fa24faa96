"""Tuning axes on the board: the value picked on validation, per variant and setting."""

from __future__ import annotations

import json

import pandas as pd

from attnbench.harness.leaderboard.ranking import machine_labels
from attnbench.harness.leaderboard.tuning import TUNED, select_tuned, tuning_table
from attnbench.harness.results.collect import COLUMNS
from attnbench.metrics import Metric
from attnbench.task_info import TaskInfo, Tuning


def _train_info(higher_is_better: bool = True) -> TaskInfo:
    """A trained task tuning ``lr`` by ``val_acc``, its metrics in the direction given."""
    return TaskInfo(
        name="train",
        headline="acc",
        metrics=[Metric("acc", higher_is_better, ""), Metric("val_acc", higher_is_better, "")],
        tuning=Tuning(["lr"], "val_acc"),
    )


INFOS = {
    "train": _train_info(),
    "speed": TaskInfo(name="speed", headline="ms", metrics=[Metric("ms", False, "")]),
}


def _rows(variant, lr, val, test, seed=0, size=8, status="ok"):
    base = dict.fromkeys(COLUMNS)
    base.update(
        run_id=f"{variant}-{lr}-{size}-{seed}",
        status=status,
        task="train",
        variant=variant,
        variant_params="{}",
        task_params=json.dumps({"lr": lr, "size": size}, sort_keys=True),
        seed=seed,
        device="cpu",
        hardware="Some CPU",
        threads=1,
        dtype="float32",
        derived=False,
    )
    if status != "ok":
        return [{**base, "metric": None, "value": None}]
    return [{**base, "metric": "val_acc", "value": val}, {**base, "metric": "acc", "value": test}]


def _frame(rows):
    frame = pd.DataFrame([r for group in rows for r in group], columns=COLUMNS)
    return frame.assign(machine=machine_labels(frame))


def _choices(grids: dict, infos: dict) -> dict:
    """Each variant's tuning choice, from ``{variant: [(lr, (validation score per seed, …))]}``
    (the test metric equal to the validation one)."""
    rows = [
        _rows(name, lr, val, val, seed=seed)
        for name, grid in grids.items()
        for lr, values in grid
        for seed, val in enumerate(values)
    ]
    _, choices = select_tuned(_frame(rows), infos)
    return {c.variant: c for c in choices}


def test_the_validation_metric_picks_the_value_never_the_test_metric():
    frame = _frame(
        [
            # A: lr 0.01 is best on validation (mean of two seeds) though 0.001 tests higher
            _rows("A", 0.001, 0.60, 0.99, seed=0),
            _rows("A", 0.001, 0.60, 0.99, seed=1),
            _rows("A", 0.01, 0.90, 0.80, seed=0),
            _rows("A", 0.01, 0.86, 0.80, seed=1),
            # B: 0.001 wins; its 0.01 run failed and cannot win
            _rows("B", 0.001, 0.50, 0.50),
            _rows("B", 0.01, 0.0, 0.0, status="failed"),
        ]
    )
    kept, choices = select_tuned(frame, INFOS)
    tests = kept[kept["metric"] == "acc"].groupby("variant")["value"].mean()
    assert tests.to_dict() == {"A": 0.80, "B": 0.50}
    assert set(kept[kept["variant"] == "A"][TUNED]) == {"lr=0.01"}
    # the tuning axis left task_params, so A and B meet in one setting
    assert set(kept["task_params"]) == {json.dumps({"size": 8})}
    winners = {c.variant: c.candidates[c.winner].values for c in choices}
    assert winners == {"A": {"lr": 0.01}, "B": {"lr": 0.001}}
    table = tuning_table(choices, "train")
    # two values tried: either winner sits at an edge of the grid, and the table says so
    assert [row[2].text.split(" ⚠")[0] for row in table.rows] == ["lr=0.01", "lr=0.001"]
    assert all("grid edge" in row[2].text for row in table.rows)
    assert "lr=0.001: 0.6 (2)" in table.rows[0][3].text


def test_each_setting_is_tuned_apart_and_other_tasks_pass_unchanged():
    speed = _frame([_rows("A", 0.1, 1.0, 1.0)]).assign(task="speed", metric="ms")
    frame = pd.concat(
        [
            _frame(
                [
                    _rows("A", 0.001, 0.9, 0.9, size=8),
                    _rows("A", 0.01, 0.1, 0.1, size=8),
                    _rows("A", 0.001, 0.1, 0.1, size=16),
                    _rows("A", 0.01, 0.9, 0.9, size=16),
                ]
            ),
            speed,
        ],
        ignore_index=True,
    )
    kept, choices = select_tuned(frame, INFOS)
    assert {c.setting: c.candidates[c.winner].label for c in choices} == {
        json.dumps({"size": 8}): "lr=0.001",
        json.dumps({"size": 16}): "lr=0.01",
    }
    passed = kept[kept["task"] == "speed"]
    assert passed["task_params"].tolist() == speed["task_params"].tolist()
    assert (passed[TUNED] == "").all()


def test_a_group_without_any_score_keeps_its_runs_and_lower_is_better_is_respected():
    infos = {
        "train": TaskInfo(
            name="train",
            metrics=[Metric("acc", False, ""), Metric("val_acc", False, "")],
            tuning=Tuning(["lr"], "val_acc"),
        )
    }
    frame = _frame([_rows("A", 0.001, 0.2, 0.2), _rows("A", 0.01, 0.1, 0.1)])
    kept, _ = select_tuned(frame, infos)
    assert set(kept[TUNED]) == {"lr=0.01"}  # lower validation error wins
    failed = _frame(
        [_rows("A", 0.001, 0, 0, status="failed"), _rows("A", 0.01, 0, 0, status="failed")]
    )
    kept, choices = select_tuned(failed, infos)
    assert len(kept) == 2 and choices[0].winner is None  # both failures stay visible
    assert tuning_table(choices, "train").rows[0][2].text == "none (no scores)"


def test_tuning_survives_the_tables_metadata():
    info = INFOS["train"]
    assert TaskInfo.from_dict(json.loads(json.dumps(info.to_dict()))).tuning == info.tuning


def test_the_label_names_only_the_axes_a_group_varies():
    infos = {
        "train": TaskInfo(
            name="train",
            metrics=[Metric("val_acc", True, "")],
            tuning=Tuning(["lr", "layer_lr"], "val_acc"),
        )
    }
    frame = _frame([_rows("A", 0.001, 0.2, 0.2), _rows("A", 0.01, 0.9, 0.9)])
    frame["task_params"] = frame["task_params"].map(
        lambda t: json.dumps({**json.loads(t), "layer_lr": 0.5}, sort_keys=True)
    )
    kept, _ = select_tuned(frame, infos)
    assert set(kept[TUNED]) == {"lr=0.01"}


def test_a_winner_at_the_grid_edge_is_flagged_and_an_interior_one_is_not():
    """A winner at the lowest or highest value tried may have its optimum outside the grid."""
    rows = [
        *[_rows("edge", lr, val, 0.5) for lr, val in ((1e-3, 0.2), (3e-3, 0.4), (1e-2, 0.9))],
        *[_rows("inner", lr, val, 0.5) for lr, val in ((1e-3, 0.2), (3e-3, 0.9), (1e-2, 0.4))],
        *[_rows("low", lr, val, 0.5) for lr, val in ((1e-3, 0.9), (3e-3, 0.4), (1e-2, 0.2))],
    ]
    _, choices = select_tuned(_frame(rows), INFOS)
    edges = {c.variant: c.at_edge() for c in choices}
    assert edges == {
        "edge": ["lr at the highest tried (0.01)"],
        "inner": [],
        "low": ["lr at the lowest tried (0.001)"],
    }
    cells = {row[0].text: row[2].text for row in tuning_table(choices, "train").rows}
    assert "⚠ grid edge: lr at the highest tried" in cells["edge"]
    assert "⚠" not in cells["inner"]


def test_an_edge_winner_level_with_its_neighbour_within_its_seeds_spread_is_not_flagged():
    """Tuned at seed 0, the winner run at seeds 1 and 2: where its lead over the value next to
    it is within one standard deviation of its three seeds' scores (0.02 against 0.04 here), the
    edge is a plateau, named as level; a lead beyond it (0.3 against 0.01) is flagged."""
    plateau = [(1e-3, 0.50, 0), (3e-3, 0.48, 0), (1e-2, 0.47, 0), (1e-3, 0.46, 1), (1e-3, 0.54, 2)]
    rising = [(1e-3, 0.2, 0), (3e-3, 0.6, 0), (1e-2, 0.9, 0), (1e-2, 0.89, 1), (1e-2, 0.91, 2)]
    rows = [
        *[_rows("plateau", lr, val, val, seed=seed) for lr, val, seed in plateau],
        *[_rows("rising", lr, val, val, seed=seed) for lr, val, seed in rising],
    ]
    _, choices = select_tuned(_frame(rows), INFOS)
    by_variant = {c.variant: c for c in choices}
    assert by_variant["plateau"].at_edge() == []
    assert by_variant["plateau"].level_at_edge() == [
        "lr at the lowest tried (0.001), level with lr=0.003"
    ]
    assert by_variant["rising"].at_edge() == ["lr at the highest tried (0.01)"]
    assert by_variant["rising"].level_at_edge() == []
    cells = {row[0].text: row[2].text for row in tuning_table(choices, "train").rows}
    assert cells["plateau"] == "lr=0.001 (lr at the lowest tried (0.001), level with lr=0.003)"
    assert "⚠ grid edge: lr at the highest tried (0.01)" in cells["rising"]


def test_an_edge_winner_whose_neighbour_ran_its_seeds_too_is_judged_on_both_means():
    """A winner that moved after its first seeds ran (the reference's parity for kda without
    negative eigenvalues, at chance at every value: 0.530, 0.516, 0.516 at 3e-4 against 0.516,
    0.516, 0.484 at 1e-3) leads by 0.014 on the tuning seed, more than its own seeds' spread
    (0.008), yet its mean is 0.015 above the neighbour's, within the ranks' tie margin
    (2·√2 pooled standard errors of a mean: 0.023): level. Means 0.2 apart (seed spreads 0.01)
    are beyond it: flagged. A winner behind its neighbour over their seeds (compression's
    delta_net: 0.401 against 0.399 at the tuning seed, means 0.347 against 0.425) is level too:
    its edge is no sign of an optimum outside the grid."""
    chance = [(3e-4, (0.530, 0.516, 0.516)), (1e-3, (0.516, 0.516, 0.484)), (3e-3, (0.484,))]
    moved = [(3e-4, (0.90, 0.91, 0.89)), (1e-3, (0.70, 0.71, 0.69)), (3e-3, (0.5,))]
    behind = [(1e-1, (0.401, 0.292, 0.348)), (3e-2, (0.399, 0.467, 0.409)), (1e-2, (0.376,))]
    by_variant = _choices({"chance": chance, "moved": moved, "behind": behind}, INFOS)
    assert by_variant["chance"].at_edge() == []
    assert by_variant["chance"].level_at_edge() == [
        "lr at the lowest tried (0.0003), level with lr=0.001"
    ]
    assert by_variant["moved"].at_edge() == ["lr at the lowest tried (0.0003)"]
    assert by_variant["behind"].at_edge() == []
    assert by_variant["behind"].level_at_edge() == [
        "lr at the highest tried (0.1), level with lr=0.03"
    ]


def test_values_are_compared_on_the_seeds_they_share():
    """Tuned at seed 0, then seeds 1 and 2 run at the winner only (a ``seeds_at_best`` grid):
    the comparison stays on seed 0, so the winner's weaker later seeds cannot hand the win to
    a value that never had them; every seed of the winner is kept for its test number."""
    frame = _frame(
        [
            _rows("A", 0.001, 0.70, 0.70, seed=0),
            _rows("A", 0.01, 0.90, 0.90, seed=0),
            _rows("A", 0.01, 0.50, 0.40, seed=1),
            _rows("A", 0.01, 0.40, 0.50, seed=2),
        ]
    )
    kept, choices = select_tuned(frame, INFOS)
    (choice,) = choices
    assert choice.candidates[choice.winner].values == {"lr": 0.01}
    assert [(c.score, c.n_seeds) for c in choice.candidates] == [(0.70, 1), (0.90, 1)]
    assert sorted(kept[kept["metric"] == "acc"]["seed"]) == [0, 1, 2]
    # the table says what the score averages and what ran
    (row,) = tuning_table(choices, "train").rows
    assert row[3].text == "lr=0.001: 0.7 (1); lr=0.01: 0.9 (1 of 3)"
    # with the plain mean over each value's own seeds (0.60 against 0.70), 0.001 would have won


def test_a_value_missing_a_seed_is_compared_on_what_both_have():
    """A sweep stopped part-way: 0.01 has seeds 0 and 1, 0.001 only seed 0; seed 1's lucky
    score must not decide (compared on seed 0: 0.001 wins, 0.8 against 0.6)."""
    frame = _frame(
        [
            _rows("A", 0.001, 0.80, 0.80, seed=0),
            _rows("A", 0.01, 0.60, 0.60, seed=0),
            _rows("A", 0.01, 1.00, 1.00, seed=1),
        ]
    )
    _, (choice,) = select_tuned(frame, INFOS)
    assert choice.candidates[choice.winner].values == {"lr": 0.001}


def test_the_means_comparison_follows_the_metric_s_direction():
    """A lower-is-better validation metric (a loss, scored here in the ``val_acc`` column): the
    edge winner whose mean loss over its seeds is well below its neighbour's is flagged; one
    whose mean loss is above its neighbour's (it won on the tuning seed only) is level; seeds
    without any spread are compared by the ranks' floor (equal means: level, never flagged)."""
    infos = {"train": _train_info(higher_is_better=False)}
    lower = [(1e-1, (0.20, 0.21, 0.19)), (3e-2, (0.40, 0.41, 0.39)), (1e-2, (0.6,))]
    lucky = [(1e-1, (0.39, 0.60, 0.55)), (3e-2, (0.40, 0.41, 0.42)), (1e-2, (0.6,))]
    flat = [(1e-1, (0.5, 0.5, 0.5)), (3e-2, (0.5, 0.5, 0.5)), (1e-2, (0.6,))]
    by_variant = _choices({"lower": lower, "lucky": lucky, "flat": flat}, infos)
    assert by_variant["lower"].at_edge() == ["lr at the highest tried (0.1)"]
    assert by_variant["lucky"].at_edge() == []
    assert by_variant["lucky"].level_at_edge() == [
        "lr at the highest tried (0.1), level with lr=0.03"
    ]
    assert by_variant["flat"].at_edge() == []
