"""Every task that declares tuning axes declares them soundly (looped over the registry)."""

from __future__ import annotations

import dataclasses

import pytest

from attnbench.harness.discovery import load_plugins
from attnbench.task import TASKS

load_plugins()
TUNED = [name for name in TASKS.names() if TASKS.get(name).tuning]


def test_the_training_tasks_declare_tuning():
    assert {"recall", "copy", "icl_regression"} <= set(TUNED)


@pytest.mark.parametrize("name", TUNED)
def test_axes_are_parameters_and_the_selector_is_a_validation_metric(name):
    cls = TASKS.get(name)
    fields = {f.name for f in dataclasses.fields(cls.Params)}
    assert set(cls.tuning.params) <= fields
    metric = cls.metric(cls.tuning.select_by)
    assert metric.higher_is_better is not None  # a selector needs a direction
    assert metric.name != cls.headline  # chosen on validation, never on the reported metric
    assert "validation" in metric.description
