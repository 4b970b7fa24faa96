"""A variant's output is checked against the contract on every call: a tensor of the wrong
shape, dtype or device is refused in one sentence, so that no task times or scores it (a slice
of the output is fast, and was once ranked cheapest)."""

from __future__ import annotations

import pytest
import torch

from attnbench import AttentionVariant, VariantShape
from attnbench.testing import random_qkv

SHAPE = VariantShape(n_heads=3, head_dim=8, max_len=64)


class _Returns(AttentionVariant):
    name = "planted_output"
    family = "softmax"

    def __init__(self, make):
        super().__init__(None, SHAPE)
        self.make = make

    def forward(self, q, k, v, causal=False):
        return self.make(q, k, v)


@pytest.mark.parametrize(
    ("make", "got"),
    [
        (lambda q, k, v: q[..., :3], "(2, 3, 16, 3) torch.float32"),
        (lambda q, k, v: v[:, :, :1], "(2, 3, 1, 8) torch.float32"),
        (lambda q, k, v: v.double(), "(2, 3, 16, 8) torch.float64"),
        (lambda q, k, v: v.tolist(), "list"),
    ],
    ids=["narrow", "one position", "float64", "not a tensor"],
)
def test_a_wrongly_shaped_output_is_refused_naming_what_came_back(make, got):
    q, k, v = random_qkv(b=2, n=16)
    with pytest.raises(ValueError, match="returned") as info:
        _Returns(make)(q, k, v)
    message = str(info.value)
    assert got in message and "(2, 3, 16, 8) torch.float32 on cpu" in message


def test_a_wrong_output_fails_a_throughput_job_before_timing():
    from attnbench.task import JobContext, build_task
    from attnbench.variant import VARIANTS, register_variant
    from attnbench.variants.softmax import SoftmaxAttention

    class Narrow(SoftmaxAttention):
        def forward(self, q, k, v, causal=False):
            return super().forward(q, k, v, causal=causal)[..., :3]

    register_variant("test_planted_narrow")(Narrow)
    try:
        ctx = JobContext("test_planted_narrow", {}, torch.device("cpu"), torch.float32, 0, 1)
        with pytest.raises(ValueError, match="the contract is"):
            build_task("throughput", {"seq_len": 32, "max_timing_s": 0.1}).measure(ctx)
    finally:
        VARIANTS.unregister("test_planted_narrow")
