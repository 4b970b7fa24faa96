"""The contract every registered variant meets: the shipped suite `attnbench.testing`, run over
the whole registry.

The checks themselves live in `attnbench.testing.VariantContractTests`, the same suite plugin
authors run in their own CI, so there is one copy of them. Here its ``variant_name`` fixture is
parametrized over every registered name (plugins load in conftest, at collection), so a new
variant is tested the moment it is registered; test ids carry the variant's name. A variant
whose hyperparameters include a setting that changes its maths on a switch (`SWITCHES`) runs
the whole suite a second time with it on (ids like ``delta_net-negative_eigenvalues``): the
setting is a declared hyperparameter, so it must meet the same contract.
"""

from __future__ import annotations

import dataclasses

import pytest

from attnbench.testing import VariantContractTests
from attnbench.variant import VARIANTS

# hyperparameters that, where a variant's Params has them, get the suite once more switched on:
# negative_eigenvalues (β or the decay in (−1, 1): Grazzi et al. 2025) changes the transition
# every chunked, recurrent and decoding path computes
SWITCHES = ("negative_eigenvalues",)


def contract_cases() -> list[pytest.param]:
    """(name, hyperparameters) for every registered variant with its defaults, then with each
    of `SWITCHES` that its Params declares set to True; ids: the name, or name-switch."""
    cases = [pytest.param((name, {}), id=name) for name in VARIANTS.names()]
    for name in VARIANTS.names():
        fields = {f.name for f in dataclasses.fields(VARIANTS.get(name).Params)}
        cases += [
            pytest.param((name, {switch: True}), id=f"{name}-{switch}")
            for switch in SWITCHES
            if switch in fields
        ]
    return cases


# Contract tests a variant fails for a known reason in code that is not ours (a peer's
# library), marked strict xfail: the day the library changes, the test says so.
EXPECTED_FAILURES = {
    ("peer_performer", "test_causality_is_a_leak_test"): (
        "performer-pytorch stabilises causal key features with the maximum over the whole "
        "sequence, future included, so the output at t moves (through its eps = 1e-4) when "
        "later tokens change; see attnbench.peers.performer"
    ),
}


class TestVariantContract(VariantContractTests):
    """`VariantContractTests` once per registered variant."""

    @pytest.fixture(params=contract_cases())
    def case(self, request) -> tuple[str, dict]:
        name = request.param[0]
        reason = EXPECTED_FAILURES.get((name, request.function.__name__))
        if reason:
            request.applymarker(pytest.mark.xfail(reason=reason, strict=True))
        return request.param

    @pytest.fixture
    def variant_name(self, case) -> str:
        return case[0]

    @pytest.fixture
    def variant_params(self, case) -> dict:
        return dict(case[1])


def test_every_registered_variant_is_covered():
    """The registry the suite is parametrized over is the real one, built-ins included.

    Guards against the parametrization silently shrinking (e.g. plugins not loaded before
    collection), which would make the contract suite pass by testing nothing.
    """
    names = set(VARIANTS.names())
    assert {"softmax", "linear", "window", "sinkhorn", "topk"} <= names
    switched = {case.id for case in contract_cases()} - names
    assert {"delta_net-negative_eigenvalues", "gated_delta_net-negative_eigenvalues"} <= switched
