"""A hand-made board for the chooser ("Which attention for my case"): a decode-like task declaring
two budgets (time per token and state per sequence, along the context length), a training-like
task declaring none but timing a step (the chooser offers it as a budget), a recall-like quality
task at two model widths and a one-setting quality task before it in the overview's order, on
one machine; one variant's name is an HTML injection. Used by
`tests/harness/test_leaderboard_chooser.py` and the browser test."""

from __future__ import annotations

import json
import re

from conftest import make_record

from attnbench.harness.jobs.records import write_record
from attnbench.harness.leaderboard import build_site
from attnbench.harness.results.collect import collect
from attnbench.metrics import Metric
from attnbench.task_info import TaskInfo

HOSTILE = '<img src=x onerror="window.__pwned = 1">'
COST = TaskInfo(
    name="gen",
    label="Generation",
    headline="ratio",
    cost_metric="ratio",
    metrics=[
        Metric("ratio", False, "Time over a reference", "×", "time relative to SDPA"),
        Metric("ms_per_token", False, "Time per token", "ms", "per-token latency"),
        Metric("state_bytes", False, "State per sequence", "B", "state per sequence"),
        Metric("steady", None, "1: steady"),
    ],
    axes=[Metric("seq_len", None, "Context", "tokens", "context length")],
    steadiness={"ms_per_token": "steady"},
    budgets=["ms_per_token", "state_bytes"],
)
TRAINING = TaskInfo(
    name="train",
    label="Training",
    metrics=[
        Metric("step_ms", False, "Forward and backward time", "ms", "step time"),
        Metric("step_steady", None, "1: steady"),
    ],
    axes=[Metric("seq_len", None, "Sequence", "tokens", "sequence length")],
    steadiness={"step_ms": "step_steady"},
)
QUALITY = TaskInfo(
    name="mqar",
    label="Recall",
    headline="accuracy",
    metrics=[Metric("accuracy", True, "Accuracy", label="recall accuracy")],
    axes=[Metric("d_model", None, "Model width", label="model width")],
)
ONE_SETTING = TaskInfo(
    name="copying",
    label="Copying",
    headline="accuracy",
    metrics=[Metric("accuracy", True, "Accuracy", label="copy accuracy")],
)
WIDTHS = (32, 64)  # the recall task's settings (each with the same accuracy)
STEP_MS = {"softmax": 8.0, "linear": 3.0}  # the training task's step at 4096 tokens
# variant, its parameters → (ms per token at 1k, at 32k; state bytes at 1k, at 32k)
COSTS = {
    ("softmax", "{}"): ((0.10, 2.0), (2**17, 2**22)),
    ("linear", "{}"): ((0.20, 0.20), (2**16, 2**16)),
    ("window", '{"window": 64}'): ((0.15, 0.15), (2**15, 2**15)),
    (HOSTILE, "{}"): ((0.50, 0.50), (2**10, 2**10)),
}
QUALITIES = {
    ("softmax", "{}"): 0.95,
    ("linear", "{}"): 0.60,
    ("window", '{"window": 0.2}'): 0.80,  # another configuration than the one timed
    (HOSTILE, "{}"): 0.30,
}


def _point(metric, value, x=None):
    point = {"metric": metric, "value": value, "higher_is_better": None}
    return {**point, "x_name": "seq_len", "x_value": x} if x is not None else point


def write_chooser_board(folder, unsteady_softmax_at_32k=False, busy_training=False):
    """The records of the hand-made board, collected; returns the site's index.html path.
    ``busy_training``: every training step timing flagged unsteady."""
    i = 0
    for (variant, params), (ms, state) in COSTS.items():
        for n, t, s in zip((1024, 32768), ms, state, strict=True):
            steady = 0.0 if unsteady_softmax_at_32k and variant == "softmax" and n == 32768 else 1.0
            points = [
                _point("ratio", t, n),
                _point("ms_per_token", t, n),
                _point("state_bytes", s, n),
                _point("steady", steady, n),
            ]
            i += 1
            write_record(folder, _record(f"g{i}", COST, variant, params, {"seq_len": n}, points))
    for (variant, params), accuracy in QUALITIES.items():
        for width in WIDTHS:
            i += 1
            points = [_point("accuracy", accuracy)]
            setting = {"d_model": width}
            write_record(folder, _record(f"q{i}", QUALITY, variant, params, setting, points))
        i += 1
        points = [_point("accuracy", accuracy / 2)]
        write_record(folder, _record(f"c{i}", ONE_SETTING, variant, params, {}, points))
    for variant, ms in STEP_MS.items():
        i += 1
        points = [
            _point("step_ms", ms, 4096),
            _point("step_steady", 0.0 if busy_training else 1.0, 4096),
        ]
        write_record(folder, _record(f"t{i}", TRAINING, variant, "{}", {"seq_len": 4096}, points))
    collect(folder)
    return build_site(folder)


def _record(name, info, variant, params, task_params, points):
    return make_record(
        name,
        task=info.name,
        variant=variant,
        variant_params=json.loads(params),
        task_params=task_params,
        metrics=points,
        task_info=info.to_dict(),
        details={"variant_family": "f"},
    )


def chooser_data(html):
    text = re.search(r'<script type="application/json" id="chooser-data">(.*?)</script>', html)
    return json.loads(text.group(1))
