"""Zoology's figure from `sweep=zoology`'s records: accuracy against width, one chart (panel) per
(length, pairs) setting, each point at the learning rate best on validation (Zoology's best of
four)."""

from __future__ import annotations

import json
import re

from conftest import make_record

from attnbench.harness.jobs.records import write_record
from attnbench.harness.leaderboard import build_site
from attnbench.harness.results.collect import collect
from attnbench.tasks.recall import Recall

SETTINGS = [(64, 4), (128, 8)]
WIDTHS = [16, 32]
LRS = [0.001, 0.01]


def _accuracy(variant: str, length: int, width: int, lr: float) -> float:
    """Made up: the larger lr is better, softmax better than linear, longer sequences harder."""
    return (0.9 if variant == "softmax" else 0.5) - length / 1000 + width / 1000 + lr


def _point(metric, value, x_name=None, x=None):
    return {"metric": metric, "value": value, "x_name": x_name, "x_value": x}


def test_one_panel_per_length_with_the_best_learning_rate_on_validation(tmp_path):
    info = Recall.describe().to_dict()
    for variant in ("softmax", "linear"):
        for length, pairs in SETTINGS:
            for width in WIDTHS:
                for lr in LRS:
                    acc = _accuracy(variant, length, width, lr)
                    # validation prefers the *smaller* lr for linear: the panel must follow it
                    val = acc if variant == "softmax" else acc - 2 * lr
                    write_record(
                        tmp_path,
                        make_record(
                            f"{variant}-{length}-{width}-{lr}",
                            task="recall",
                            variant=variant,
                            task_params={
                                "seq_len": length,
                                "n_kv_pairs": pairs,
                                "d_model": width,
                                "lr": lr,
                            },
                            metrics=[
                                _point("accuracy", acc),
                                _point("val_accuracy", val),
                                _point("accuracy_by_d_model", acc, "d_model", width),
                            ],
                            task_info=info,
                        ),
                    )
    collect(tmp_path)
    html = build_site(tmp_path).read_text()
    figures = {
        m.group(1): json.loads(m.group(2))
        for m in re.finditer(r'data-chart="([^"]+)">(.*?)</script>', html, re.S)
    }
    panels = [f for key, f in figures.items() if "accuracy_by_d_model" in key]
    assert len(panels) == len(SETTINGS)  # one per (length, pairs)
    seen = set()
    for panel in panels:
        text = json.dumps(panel["layout"])
        # the panel's setting as the task names it (Recall declares seq_len's label and unit)
        ((length, _),) = [s for s in SETTINGS if f"sequence length {s[0]} tokens" in text]
        seen.add(length)
        lines = {t["name"]: t for t in panel["data"] if t.get("name") in ("softmax", "linear")}
        assert set(lines) == {"softmax", "linear"}
        for variant, lr in (("softmax", 0.01), ("linear", 0.001)):
            assert lines[variant]["x"] == WIDTHS
            expected = [_accuracy(variant, length, w, lr) for w in WIDTHS]
            assert [round(y, 9) for y in lines[variant]["y"]] == [round(y, 9) for y in expected]
    assert seen == {length for length, _ in SETTINGS}
