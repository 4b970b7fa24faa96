"""The backward contract: a variant's float32 gradients (q, k, v and its raw gates) within its
declared `backward_tolerance` of its own float64 gradients. Shown failing for a backward that is
1 % off in float32 only (exact in float64, as a fast kernel's bug is absent from its reference),
through q and through a gate, and the declaration itself checked at registration."""

from __future__ import annotations

import pytest
import torch
from conftest import ScaledGradient

from attnbench import AttentionVariant, build_variant
from attnbench.testing import VariantContractTests
from attnbench.variant import VARIANTS, register_variant


def _planted(base: str, into: str) -> type[AttentionVariant]:
    """The registered variant ``base`` with `ScaledGradient` (×1.01) on its input ``into`` ("q" or a
    gate's name): its forward is exactly ``base``'s, its backward 1 % off there."""

    class Planted(VARIANTS.get(base)):
        def forward(self, q, k, v, causal=False, **kw):
            if into == "q":
                q = ScaledGradient.apply(q, 1.01)
            else:
                kw["gates"] = {**kw["gates"], into: ScaledGradient.apply(kw["gates"][into], 1.01)}
            return super().forward(q, k, v, causal=causal, **kw)

    return Planted


@pytest.fixture
def registered():
    """Registers classes under test names, unregistering them after the test."""
    names = []

    def register(name, cls):
        register_variant(name)(cls)
        names.append(name)
        return name

    yield register
    for name in names:
        VARIANTS.unregister(name)


@pytest.mark.parametrize(
    ("base", "into", "named"), [("softmax", "q", "q"), ("fox", "forget", "gate forget")]
)
def test_a_backward_off_by_one_percent_fails_the_contract_check(registered, base, into, named):
    """The contract suite's gradient test fails for the planted backward, naming the gradient
    (its error ~10⁻², a thousand times the declared 10⁻⁵), and passes for the variant it wraps
    (the built-ins' worst: 1.3·10⁻⁶, scripts/gradient-errors.py)."""
    suite = VariantContractTests()
    suite.test_gradients_match_float64_within_the_declared_tolerance(base, {})
    name = registered(f"test_planted_{base}_backward", _planted(base, into))
    with pytest.raises(AssertionError, match=f"the float32 gradient of {named} is"):
        suite.test_gradients_match_float64_within_the_declared_tolerance(name, {})


def test_within_tolerance_judges_gradients_by_the_declared_backward_tolerance(registered):
    class Loose(VARIANTS.get("softmax")):
        backward_tolerance = {"float32": 1e-3}

    variant = build_variant(registered("test_loose_backward", Loose))
    assert variant.within_tolerance(5e-4, torch.float32, backward=True)
    assert not variant.within_tolerance(5e-4, torch.float32)  # the forward's 10⁻⁵ still holds
    assert not variant.within_tolerance(2e-3, torch.float32, backward=True)
    assert not variant.within_tolerance(float("nan"), torch.float32, backward=True)
    assert variant.within_tolerance(1.0, torch.bfloat16, backward=True)  # undeclared: not judged


@pytest.mark.parametrize(
    "limits", [1e-5, {"float32": -1.0}, {"float32": "1e-5"}, {torch.float32: 1e-5}]
)
def test_a_malformed_backward_tolerance_is_refused_at_registration(limits):
    class Bad(VARIANTS.get("softmax")):
        backward_tolerance = limits

    with pytest.raises(TypeError, match="backward_tolerance must map dtype names to positive"):
        register_variant("test_bad_backward_tolerance")(Bad)
    assert "test_bad_backward_tolerance" not in VARIANTS.names()
