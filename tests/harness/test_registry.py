from __future__ import annotations

from dataclasses import dataclass

import pytest

from attnbench.registry import DuplicateNameError, Registry, UnknownNameError
from attnbench.variant import (
    VARIANTS,
    AttentionVariant,
    build_variant,
    register_variant,
)


class Base:
    pass


def make_registry() -> Registry:
    reg = Registry("widget", base=Base)
    for name in ("softmax", "sinkhorn", "linear"):
        reg.register(name, type(name, (Base,), {}), origin="here")
    return reg


def test_register_get_and_list():
    reg = make_registry()
    assert reg.names() == ["linear", "sinkhorn", "softmax"]
    assert reg.names("s*") == ["sinkhorn", "softmax"]
    assert reg.get("linear").__name__ == "linear"
    assert reg.entry("linear").origin == "here"
    assert "softmax" in reg and len(reg) == 3


def test_unknown_name_suggests_close_matches_and_lists_all():
    reg = make_registry()
    with pytest.raises(LookupError) as info:
        reg.get("sofmax")
    assert isinstance(info.value, UnknownNameError)
    assert str(info.value) == (
        "Unknown widget 'sofmax'. Did you mean: softmax? Available: linear, sinkhorn, softmax"
    )


def test_unknown_name_without_close_match_has_no_suggestion():
    assert "Did you mean" not in make_registry().unknown_message("zzzz")


def test_duplicate_name_refused():
    reg = make_registry()
    with pytest.raises(DuplicateNameError, match="already registered"):
        reg.register("softmax", type("Other", (Base,), {}))


def test_reregistering_same_object_is_harmless():
    reg = make_registry()
    cls = reg.get("linear")
    assert reg.register("linear", cls) is cls


def test_wrong_type_and_bad_name_refused():
    reg = make_registry()
    with pytest.raises(TypeError, match="subclass"):
        reg.register("thing", object)
    with pytest.raises(TypeError, match="not valid"):
        reg.register("has-dash", type("X", (Base,), {}))


def test_register_variant_checks_the_contract():
    @dataclass
    class NoDefault:
        x: int

    with pytest.raises(TypeError, match="needs a default"):

        @register_variant("bad_params_variant")
        class Bad(AttentionVariant):
            family = "test"
            Params = NoDefault

    with pytest.raises(TypeError, match="cost"):

        @register_variant("bad_cost_variant")
        class BadCost(AttentionVariant):
            family = "test"
            cost = "n³"

    assert "bad_params_variant" not in VARIANTS and "bad_cost_variant" not in VARIANTS


def test_builtin_variant_duplicate_refused():
    with pytest.raises(DuplicateNameError):

        @register_variant("softmax")
        class AnotherSoftmax(AttentionVariant):
            family = "softmax"


def test_build_variant_rejects_unknown_hyperparameter():
    with pytest.raises(ValueError, match="no hyperparameter 'temprature'.*valid: .*temperature"):
        build_variant("softmax", {"temprature": 2.0})


def test_a_task_that_implements_run_measures_with_a_deprecation_warning():
    """0.3's task contract named its method ``run``; such a plugin keeps working as ``measure``
    (one name, one meaning: ``run`` is `attnbench.run`), and says so once, at class creation."""
    from attnbench.metrics import MetricPoint, TaskResult
    from attnbench.task import Task

    with pytest.warns(DeprecationWarning, match="rename it measure"):

        class Old(Task):
            def run(self, ctx):
                return TaskResult([MetricPoint("x", 1.0)])

    assert Old(None).measure(None).points[0].value == 1.0

    class New(Task):  # implements measure: no warning, no alias
        def measure(self, ctx):
            return TaskResult([])

    assert "run" not in vars(New)
    with pytest.raises(NotImplementedError):
        Task(None).measure(None)
