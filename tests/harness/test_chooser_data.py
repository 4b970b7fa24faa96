"""`views.chooser.chooser_data` on small hand-made frames (issue 64 item 4): the budgets a task
declares or times, every variant left out named with its reason, the quality column's settings
in words and the column the panel opens on, and a busy machine that removed a timing said so."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from attnbench.harness.leaderboard.columns import overview_columns
from attnbench.harness.leaderboard.ranking import MACHINE
from attnbench.harness.leaderboard.steadiness import judge_steadiness
from attnbench.harness.leaderboard.views.chooser import budget_metrics, chooser_data
from attnbench.harness.leaderboard.views.length_ranks import cost_ranks
from attnbench.harness.results.collect import COLUMNS
from attnbench.metrics import Metric
from attnbench.task_info import TaskInfo, Tuning

TIMED = TaskInfo(  # a throughput-like task: it declares no budget, it times two things
    name="timed",
    label="Speed",
    headline="ratio",
    cost_metric="ratio",
    metrics=[
        Metric("ratio", False, "Time over a reference", "×", "time relative to SDPA"),
        Metric("fwd_ms", False, "Forward time", "ms", "forward latency"),
        Metric("train_ms", False, "Forward and backward time", "ms", "training step"),
        Metric("rate", True, "Tokens per second", "tokens/s", "rate"),
        Metric("mem", False, "Peak memory", "MiB", "peak memory"),
        Metric("steady", None, "1: the forward timing settled"),
        Metric("train_steady", None, "1: the training timing settled"),
        Metric("accurate", None, "1: within tolerance"),
    ],
    axes=[Metric("seq_len", None, "Sequence length", "tokens", "sequence length")],
    steadiness={
        "ratio": "steady",
        "fwd_ms": "steady",
        "rate": "steady",
        "train_ms": "train_steady",
    },
    accuracy={"fwd_ms": "accurate", "train_ms": "accurate"},
)
RECALL = TaskInfo(
    name="recall",
    label="Recall",
    headline="accuracy",
    metrics=[Metric("accuracy", True, "Accuracy", label="recall accuracy")],
    axes=[Metric("d_model", None, "Model width", label="model width")],
    tuning=Tuning(["lr"], "val_accuracy"),
)
AARDVARK = TaskInfo(  # a one-setting quality column, first in the overview's order
    name="aardvark",
    label="Aardvark",
    headline="accuracy",
    metrics=[Metric("accuracy", True, "Accuracy", label="accuracy")],
)
INFOS = {"timed": TIMED, "recall": RECALL, "aardvark": AARDVARK}
FWD, TRAIN = 0, 1  # the budgets, in the task's declared order
SPARSE_FRACTION = '{"window": 0.2}'  # trained at a fraction of n
SPARSE_TOKENS = '{"window": 256}'  # timed at its paper's size
_runs = iter(range(10**6))


def _row(task, variant, metric, value, params="{}", task_params=None, x=None, run="", seed=0):
    row = dict.fromkeys(COLUMNS)
    row.update(
        run_id=run or f"r{next(_runs)}",
        derived=False,
        status="ok",
        task=task,
        variant=variant,
        variant_params=params,
        task_params=json.dumps(task_params or {}),
        seed=seed,
        device="cpu",
        dtype="float32",
        threads=1,
        metric=metric,
        value=value,
        x_name="seq_len" if x is not None else None,
        x_value=float(x) if x is not None else None,
        **{MACHINE: "cpu0"},
    )
    return row


def timed(
    variant,
    x,
    fwd=1.0,
    train=3.0,
    params="{}",
    steady=1.0,
    train_steady=1.0,
    accurate=1.0,
    batch=None,
):
    """One timing run at sequence length ``x`` (and batch size ``batch``, where given): its
    values and their flags."""
    setting = {"seq_len": x} if batch is None else {"seq_len": x, "batch_size": batch}
    run = f"t{next(_runs)}"
    values = {
        "ratio": fwd / 2,
        "fwd_ms": fwd,
        "train_ms": train,
        "rate": 1000 / fwd,
        "mem": 1.0,
        "steady": steady,
        "train_steady": train_steady,
        "accurate": accurate,
    }
    return [_row("timed", variant, m, v, params, setting, x, run) for m, v in values.items()]


def trained(variant, accuracy, params="{}", d_model=64, seed=0, lr=0.01, task="recall"):
    """One training run's headline, at a model width, its tuned learning rate beside it."""
    setting = {"d_model": d_model, "lr": lr, "vocab": 16} if task == "recall" else {}
    return [_row(task, variant, "accuracy", accuracy, params, setting, seed=seed)]


def data(*runs, infos=INFOS):
    frame = pd.DataFrame([r for run in runs for r in run], columns=[*COLUMNS, MACHINE])
    frame = judge_steadiness(frame, infos)
    return chooser_data(frame, overview_columns(frame, infos), infos)


def column(d, label):
    return next(i for i, q in enumerate(d["qualities"]) if q["label"] == label)


def why(d, budget, x, quality="Recall: recall accuracy"):
    """variant → (kind, reason) of the variants not listed at ``x``."""
    q = column(d, quality)
    return {
        e[4]: (e[5], e[6])
        for e in d["left_out"]
        if e[0] == budget and e[1] == "cpu0" and e[2] == x and q in e[3]
    }


def listed(d, budget, x, quality="Recall: recall accuracy"):
    """The configurations the page lists at ``x`` (no limit): a cost and a quality in the
    column."""
    values = d["quality"][column(d, quality)]
    return sorted(
        d["configs"][c[3]]
        for c in d["cost"]
        if c[0] == budget and c[2] == x and str(c[3]) in values
    )


# --- item 1: a training or throughput budget -----------------------------------------------------


def test_a_task_that_declares_no_budget_offers_its_timings_in_milliseconds():
    # lower is better and timed, in ms: not the ratio (relative), the rate (higher is better)
    # or the memory (no timing)
    assert budget_metrics(TIMED) == ["fwd_ms", "train_ms"]
    declared = TaskInfo("decode", metrics=TIMED.metrics, steadiness=TIMED.steadiness)
    declared.budgets = ["mem"]
    assert budget_metrics(declared) == ["mem"]  # a task's declaration wins
    assert budget_metrics(RECALL) == []  # nothing timed, nothing declared


def test_a_training_budget_at_a_sequence_length():
    d = data(
        timed("softmax", 4096, fwd=10.0, train=40.0),
        timed("linear", 4096, fwd=2.0, train=9.0),
        trained("softmax", 0.9),
        trained("linear", 0.6),
    )
    assert [b["label"] for b in d["budgets"]] == ["Speed: forward latency", "Speed: training step"]
    assert d["budgets"][TRAIN]["unit"] == "ms"
    assert d["budgets"][TRAIN]["axis"] == "sequence length (tokens)"
    costs = {(c[0], d["configs"][c[3]]): c[4] for c in d["cost"] if c[2] == 4096.0}
    assert costs[(TRAIN, "softmax")] == 40.0 and costs[(FWD, "linear")] == 2.0
    assert listed(d, TRAIN, 4096.0) == ["linear", "softmax"]


# --- item 2: every variant left out, named with its reason ---------------------------------------


def test_every_variant_left_out_is_named_with_its_reason():
    d = data(
        timed("softmax", 1024),
        timed("softmax", 4096),
        timed("mesa", 4096, steady=0.0),  # a busy machine: unsteady
        timed("wrong", 4096, accurate=0.0),  # a kernel outside its tolerance
        timed("window", 4096, params=SPARSE_TOKENS),  # timed as another configuration
        timed("short", 1024),  # timed at 1024 only
        timed("peer", 4096),  # a library's kernel: never trained
        trained("softmax", 0.9),
        trained("mesa", 0.8),
        trained("wrong", 0.7),
        trained("window", 0.6, params=SPARSE_FRACTION),
        trained("short", 0.5),
        trained("untimed", 0.4),  # trained, never timed
    )
    assert listed(d, FWD, 4096.0) == ["softmax"]
    reasons = why(d, FWD, 4096.0)
    assert {v: kind for v, (kind, _) in reasons.items()} == {
        "mesa": "unsteady",
        "wrong": "inaccurate",
        "window": "mismatch",
        "short": "not_here",
        "untimed": "no_cost",
        "peer": "no_quality",
    }
    assert "busy" in reasons["mesa"][1]
    assert reasons["window"][1] == (
        "timed here as “window window=256”, but its quality is of “window window=0.2”: "
        "another configuration"
    )
    assert reasons["short"][1] == "its forward latency was not measured here (only at 1024 tokens)"
    assert reasons["untimed"][1] == "its forward latency was not measured on this machine"
    # and where each was measured, none is left out that is listed
    assert "softmax" not in reasons and "short" not in why(d, FWD, 1024.0)


def test_a_variant_measured_in_some_of_the_columns_settings_is_named_not_averaged():
    d = data(
        timed("softmax", 4096),
        timed("linear", 4096),
        timed("mesa", 4096),
        trained("softmax", 0.9, d_model=32),
        trained("softmax", 0.9, d_model=64),
        trained("linear", 0.6, d_model=64),  # never at width 32
        trained("mesa", 0.6, d_model=32),  # never at width 64
    )
    assert listed(d, FWD, 4096.0) == ["softmax"]
    assert why(d, FWD, 4096.0) == {
        v: ("partial", "its quality was measured in 1 of this column's 2 settings")
        for v in ("linear", "mesa")
    }


def test_a_setting_fewer_configurations_ran_is_left_out_of_every_mean():
    d = data(
        timed("softmax", 4096),
        timed("linear", 4096),
        trained("softmax", 0.9, d_model=64),
        trained("softmax", 0.1, d_model=512),  # softmax alone at width 512
        trained("linear", 0.6, d_model=64),
    )
    assert listed(d, FWD, 4096.0) == ["linear", "softmax"]
    recall = column(d, "Recall: recall accuracy")
    assert d["quality"][recall][str(d["configs"].index("softmax"))] == 0.9
    assert d["qualities"][recall]["setting"] == "one setting: model width 64"


def test_the_left_out_entries_of_the_columns_with_one_reason_are_one_entry():
    d = data(
        timed("softmax", 4096),
        timed("peer", 4096),
        trained("softmax", 0.9),
        trained("softmax", 0.5, task="aardvark"),
    )
    peer = [e for e in d["left_out"] if e[4] == "peer" and e[0] == FWD]
    assert [e[3] for e in peer] == [[0, 1]]  # both quality columns, once


# --- item 3: the quality column's settings, stated -----------------------------------------------


def test_the_quality_column_states_the_settings_its_values_are_a_mean_over():
    d = data(
        timed("softmax", 4096),
        trained("softmax", 0.9, d_model=32, lr=0.01),
        trained("softmax", 0.7, d_model=64, lr=0.003),  # the tuned lr is no setting
        trained("softmax", 0.5, d_model=64, lr=0.003, seed=1),
        trained("softmax", 0.5, d_model=64, lr=0.003, seed=2),
    )
    recall = d["qualities"][column(d, "Recall: recall accuracy")]
    # the two widths named; the other parameter that is the same in both (vocab) is not named
    assert recall["setting"] == "mean over 2 settings: model width 32, 64"
    # each setting weighs the same: (0.9 + mean(0.7, 0.5, 0.5)) / 2, not the mean of 4 runs
    value = d["quality"][column(d, "Recall: recall accuracy")]["0"]
    assert value == pytest.approx((0.9 + 0.7 / 3 + 1.0 / 3) / 2)


def test_a_setting_is_named_by_the_label_another_task_declares_for_its_parameter():
    plain = TaskInfo("plain", label="Plain", headline="accuracy", metrics=AARDVARK.metrics)
    infos = {**INFOS, "plain": plain}
    row = _row("plain", "softmax", "accuracy", 0.5, task_params={"d_model": 16, "steps": 9})
    d = data(timed("softmax", 4096), [row], infos=infos)
    # plain declares no axes; recall names d_model "model width"; steps is named by nobody
    assert d["qualities"][column(d, "Plain: accuracy")]["setting"] == "one setting: model width 16"


# --- item 4: the default quality column ----------------------------------------------------------


def test_the_panel_opens_on_the_column_of_the_most_listed_variants_then_of_most_settings():
    runs = [timed(v, 4096) for v in ("softmax", "linear")]
    # aardvark comes first, one setting; recall has two: recall is the default
    both = [trained(v, 0.5, task="aardvark") for v in ("softmax", "linear")]
    widths = [trained(v, 0.5, d_model=w) for v in ("softmax", "linear") for w in (32, 64)]
    d = data(*runs, *both, *widths)
    assert d["default_quality"] == column(d, "Recall: recall accuracy")
    # a column that lists more variants wins over one of more settings
    d = data(*runs, *both, *[trained("softmax", 0.5, d_model=w) for w in (32, 64)])
    assert d["default_quality"] == column(d, "Aardvark: accuracy")


# --- item 5: a busy machine that removed a variant or a budget -----------------------------------


def test_a_budget_whose_every_timing_was_unsteady_is_kept_and_marked_busy():
    d = data(
        timed("softmax", 4096, train_steady=0.0),
        timed("linear", 4096, train_steady=0.0),
        trained("softmax", 0.9),
        trained("linear", 0.6),
    )
    assert [b["busy"] for b in d["budgets"]] == [False, True]  # offered, not dropped
    assert [p[3] for p in d["positions"] if p[0] == TRAIN] == [True]
    assert listed(d, TRAIN, 4096.0) == []
    assert {k for k, _ in why(d, TRAIN, 4096.0).values()} == {"unsteady"}
    assert listed(d, FWD, 4096.0) == ["linear", "softmax"]  # its forward timings were steady


def test_a_position_whose_every_timing_was_unsteady_is_still_offered():
    d = data(
        timed("softmax", 1024),
        timed("softmax", 4096, steady=0.0),
        trained("softmax", 0.9),
    )
    assert [p[2] for p in d["positions"] if p[0] == FWD] == [[1024.0, 4096.0]]
    assert why(d, FWD, 4096.0)["softmax"][0] == "unsteady"
    assert not d["budgets"][FWD]["busy"]  # it has a steady timing elsewhere


def test_no_panel_without_a_budget_or_a_quality():
    assert data(trained("softmax", 0.9)) is None
    assert data(timed("softmax", 4096)) is None


# --- issue 61: costs at the shapes people run ---------------------------------------------------


def test_a_time_per_call_at_two_batch_sizes_is_two_budgets_never_one_median():
    """The standard preset times 512 tokens at batch 1 and at batch 64: one median of the two
    would be neither."""
    d = data(
        timed("softmax", 512, fwd=1.0, batch=1),
        timed("softmax", 512, fwd=50.0, batch=64),
        timed("softmax", 128, fwd=9.0, batch=64),
        trained("softmax", 0.9),
    )
    labels = [b["label"] for b in d["budgets"]]
    assert labels[:2] == [
        "Speed: forward latency (batch size 1)",
        "Speed: forward latency (batch size 64)",
    ]
    costs = sorted((c[0], c[2], c[4]) for c in d["cost"])
    assert (0, 512.0, 1.0) in costs and (1, 512.0, 50.0) in costs
    assert all(c[4] != 25.5 for c in d["cost"])  # never the median of the two settings
    positions = {(p[0], tuple(p[2])) for p in d["positions"]}
    assert (0, (512.0,)) in positions and (1, (128.0, 512.0)) in positions


def _ranks(*runs):
    frame = pd.DataFrame([r for run in runs for r in run], columns=[*COLUMNS, MACHINE])
    return cost_ranks(judge_steadiness(frame, INFOS), INFOS)


def test_the_cost_ranks_at_the_smallest_and_largest_size_show_a_flip():
    tables = _ranks(
        timed("softmax", 128, fwd=1.0),  # cheapest short
        timed("softmax", 4096, fwd=40.0),
        timed("linear", 128, fwd=3.0),
        timed("linear", 4096, fwd=6.0),  # cheapest long
        timed("window", 128, fwd=2.0),
        timed("window", 4096, fwd=6.0),  # tied with linear
        timed("mesa", 4096, fwd=1.0),  # one end only: not ranked
        timed("busy", 128, fwd=0.5, steady=0.0),  # unsteady at one end: not ranked
        timed("busy", 4096, fwd=0.5),
    )
    forward = next(t for t in tables if t.title == "Speed: forward latency")
    rows = {r[0].text: [c.text for c in r[1:]] for r in forward.table.rows}
    assert rows == {
        "linear": ["3", "#3", "6", "#1", "↑ 2"],
        "window": ["2", "#2", "6", "#1", "↑ 1"],
        "softmax": ["1", "#1", "40", "#3", "↓ 2"],
    }
    assert [r[0].text for r in forward.table.rows][-1] == "softmax"  # by the largest size
    assert forward.table.columns[1].header == "sequence length 128 tokens (ms)"


def test_no_rank_table_where_a_budget_has_one_size():
    assert _ranks(timed("softmax", 4096), timed("linear", 4096)) == []
