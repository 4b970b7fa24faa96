"""The gate contract (`attnbench.variant`, "Gates"): a variant declares per-token gates as data,
the shared layer projects them from its input, timed tasks feed them, and the contract suite
checks a gated variant as it checks any other.

A toy gated variant stands in for the real ones: per head, S_t = σ(a_t)·S_{t−1} + k_t v_tᵀ and
o_t = S_tᵀ q_t (σ(a_t) a data-dependent forgetting factor), small enough to be obviously right.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from attnbench import (
    AttentionVariant,
    IncrementalAttention,
    VariantShape,
    build_variant,
    random_gates,
    register_incremental,
    register_variant,
)
from attnbench.incremental import INCREMENTAL
from attnbench.testing import VariantContractTests, gates_of_keys
from attnbench.toolkit.layer import MultiHeadAttention
from attnbench.variant import VARIANTS

NAME = "test_gated_forget"


@dataclass
class _NoParams:
    pass


def _forget_scan(q, k, v, alpha, causal, state=None):
    """The toy's recurrence, token by token: outputs (B, H, N, Dv) and the final state."""
    b, h, n, d = k.shape
    s = state if state is not None else k.new_zeros(b, h, d, v.shape[-1])
    outs = []
    for t in range(n):
        s = torch.sigmoid(alpha[:, :, t, :, None]) * s + k[:, :, t, :, None] * v[:, :, t, None]
        outs.append((q[:, :, t, None] @ s) if causal else None)
    if causal:
        return torch.cat(outs, dim=2), s
    return q @ s, s  # every query reads the state after the last key


class GatedForget(AttentionVariant):
    family = "test"
    cost = "n"
    Params = _NoParams
    gates = {"alpha": "head"}

    def forward(self, q, k, v, causal=False, gates=None):
        self.check_inputs(q, k, v, causal)
        return _forget_scan(q, k, v, gates["alpha"], causal)[0]


class GatedForgetIncremental(IncrementalAttention):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        h, d, dv = self.heads, self.head_dim, self.value_dim
        self.s = torch.zeros(self.batch, h, d, dv, device=self.device, dtype=self.dtype)

    def state_size(self, n):
        return self.heads * self.head_dim * self.value_dim

    def state_tensors(self):
        return [self.s]

    def _extend(self, q, k, v, gates):
        out, self.s = _forget_scan(q, k, v, gates["alpha"], True, self.s)
        return out


@pytest.fixture(scope="module", autouse=True)
def registered():
    register_variant(NAME)(GatedForget)
    register_incremental(NAME)(GatedForgetIncremental)
    yield
    VARIANTS.unregister(NAME)
    INCREMENTAL.unregister(NAME)


class TestGatedContract(VariantContractTests):
    """The whole contract suite on the toy: it passes only if the suite feeds the gates (and
    feeds the same gates to the forward and to the incremental form)."""

    variant = NAME


def _qkv(b=2, h=2, n=9, d=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, n, d, generator=g, dtype=torch.float64) for _ in range(3)]


def test_a_missing_or_misshapen_gate_is_one_sentence():
    variant = build_variant(NAME, shape=VariantShape(2, 4, 16))
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="needs the gates alpha .*missing: alpha"):
        variant(q, k, v)
    with pytest.raises(ValueError, match=r"gate 'alpha' must have shape \(2, 2, 9, 1\)"):
        variant(q, k, v, gates={"alpha": torch.zeros(2, 2, 9, 4)})
    with pytest.raises(ValueError, match="unknown: beta"):
        variant(q, k, v, gates={"alpha": torch.zeros(2, 2, 9, 1), "beta": torch.zeros(1)})


def test_an_ungated_variant_refuses_gates():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="takes no gates"):
        build_variant("softmax")(q, k, v, gates={"alpha": torch.zeros(2, 2, 9, 1)})


def test_gate_widths_are_checked_at_registration():
    bad = type("BadGates", (GatedForget,), {"gates": {"alpha": "token"}})
    with pytest.raises(TypeError, match="gates must map gate names to a width"):
        register_variant("test_bad_gates")(bad)
    assert "test_bad_gates" not in VARIANTS


def test_random_gates_have_the_declared_shapes():
    keyed = type("Keyed", (GatedForget,), {"gates": {"alpha": "head", "decay": "key"}})
    gates = random_gates(keyed, 3, 11, head_dim=8, kv_heads=2)
    assert {n: tuple(g.shape) for n, g in gates.items()} == {
        "alpha": (3, 2, 11, 1),
        "decay": (3, 2, 11, 8),
    }
    assert random_gates(build_variant("softmax"), 3, 11, head_dim=8, kv_heads=2) == {}


def test_grouped_keys_repeat_their_gates():
    """Two key/value heads for four query heads: the call repeats k, v and the gates alike,
    so the output equals the forward on everything repeated (query head h reads kv head h//2)."""
    variant = build_variant(NAME, shape=VariantShape(4, 4, 16, n_kv_heads=2))
    q = _qkv(h=4)[0]
    _, k, v = _qkv(h=2, seed=1)
    alpha = torch.randn(2, 2, 9, 1, dtype=torch.float64)
    out = variant(q, k, v, causal=True, gates={"alpha": alpha})
    rep = [x.repeat_interleave(2, 1) for x in (k, v, alpha)]
    expected = _forget_scan(q, rep[0], rep[1], rep[2], True)[0]
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


def test_the_layer_projects_the_gates_from_its_input():
    """The shared layer has one linear map per declared gate, its output follows the map's
    weights, and training reaches them; an ungated layer has none (unchanged parameters)."""
    torch.manual_seed(0)
    layer = MultiHeadAttention(8, 2, NAME, causal=True).double()
    assert set(layer.gate_proj) == {"alpha"}
    assert layer.gate_proj["alpha"].weight.shape == (2, 8)  # H heads × width 1, from d_model
    x = torch.randn(3, 10, 8, dtype=torch.float64)
    out = layer(x)
    q, k, v = layer.split_heads(x)
    alpha = (x @ layer.gate_proj["alpha"].weight.T + layer.gate_proj["alpha"].bias).view(
        3, 10, 2, 1
    )
    mixed = _forget_scan(q, k, v, alpha.transpose(1, 2), True)[0]
    torch.testing.assert_close(out, layer.out(mixed.transpose(1, 2).reshape(3, 10, 8)))
    out.square().sum().backward()
    assert layer.gate_proj["alpha"].weight.grad.abs().sum() > 0
    assert len(MultiHeadAttention(8, 2, "softmax").gate_proj) == 0


def test_decoder_refuses_missing_gates_and_gates_for_an_ungated_form():
    from attnbench import incremental_form

    variant = build_variant(NAME, shape=VariantShape(2, 4, 16))
    decoder = incremental_form(variant, 2, 16, 4, dtype=torch.float64)
    q, k, v = _qkv(n=3)
    with pytest.raises(ValueError, match="missing: alpha"):
        decoder.prefill(q, k, v)
    out = decoder.prefill(q, k, v, gates_of_keys(variant, k))
    assert out.shape == (2, 2, 3, 4) and decoder.position == 3
    softmax = incremental_form(build_variant("softmax", shape=VariantShape(2, 4, 16)), 2, 16, 4)
    with pytest.raises(ValueError, match="takes no gates"):
        softmax.prefill(*(x.float() for x in (q, k, v)), gates={"alpha": torch.zeros(2, 2, 3, 1)})


@pytest.mark.parametrize("task", ["throughput", "decode"])
def test_timed_tasks_feed_the_gates(task, monkeypatch):
    """A timing of a gated variant runs (its inputs carry gates), passes the task's own checks
    (decode: the incremental form against the forward, both gated alike) and records its
    error against float64 (the same gates in both precisions). The memory probe runs in this
    process (its own process would not know the test's variant), so its gates are fed too."""
    import importlib

    from attnbench import build_task
    from attnbench.task import JobContext

    module = importlib.import_module(f"attnbench.tasks.{task}")
    monkeypatch.setattr(module, "isolated_cpu_peak", lambda probe, *args: probe(*args))

    params = {"seq_len": 32, "batch_size": 1, "n_heads": 2, "head_dim": 4, "min_run_time": 0.01}
    params |= {"max_timing_s": 0.5} if task == "throughput" else {"new_tokens": 4}
    ctx = JobContext(NAME, {}, torch.device("cpu"), torch.float32, 0, 1)
    result = build_task(task, params).measure(ctx)
    points = {p.metric: p.value for p in result.points}
    flag = "fwd_accurate" if task == "throughput" else "decode_accurate"
    assert points[flag] == 1.0
    if task == "decode":
        assert result.details["correctness_check"].startswith("prefill")
