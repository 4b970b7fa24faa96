"""The one-pass packed form (``packing = "native"``) of the chunked recurrent engines
(`attnbench.variants.recurrent.documents`): `gla`, `mamba2`, the delta family, `kda`, `rwkv7`.

The contract suite checks every variant's packed call against its documents run alone on three
documents. Here, the layout's hard cases: many documents shorter than a chunk (each padded to a
chunk of its own) beside one longer than several chunks (its state carried across them, then
dropped at the next document), causal and not, with grouped-query heads; outputs and gradients
against the split path (the base class's forward per document), float64.

Run as a script for the cost of one pass against one call per document (a same-process ratio,
printed, not asserted: timings on a shared machine are not a pass/fail criterion):

    .venv-test/bin/python tests/variants/test_packed_native.py
"""

from __future__ import annotations

import copy

import pytest
import torch

from attnbench.harness.discovery import load_plugins
from attnbench.variant import VariantShape, build_variant, random_gates
from attnbench.variants.recurrent.mixer import ONE_PASS_TOKENS

load_plugins()

CHUNK = 16
# (name, hyperparameters, gate scale): chunks of 16 positions (sub-steps for the product of
# two Householder steps: 32), the bare recurrence and the default output norm. Gates ×100
# (gla) and ×10 (mamba2) send chunks' log-decays below −FACTOR_SPAN: the engine's
# exact-difference path (unit gates keep both on the factored one)
CASES = [
    ("gla", {"chunk_size": CHUNK}, 1.0),
    ("gla", {"chunk_size": CHUNK, "output_norm": False}, 100.0),
    ("mamba2", {"chunk_size": CHUNK}, 10.0),
    ("mamba2", {"chunk_size": CHUNK, "negative_eigenvalues": True, "output_norm": False}, 1.0),
    ("delta_net", {"chunk_size": CHUNK, "output_norm": False}, 1.0),
    ("gated_delta_net", {"chunk_size": CHUNK, "negative_eigenvalues": True}, 1.0),
    ("gated_delta_product", {"chunk_size": 2 * CHUNK}, 1.0),
    ("kda", {"chunk_size": CHUNK}, 1.0),
    ("rwkv7", {"chunk_size": CHUNK, "output_norm": False}, 1.0),
]
IDS = [f"{name}-{i}" for i, (name, _, _) in enumerate(CASES)]
# short documents (under a chunk each), one of 70 (more than four chunks) among them
LENGTHS = (5, 1, 12, 70, 3, 15, 7, 2, 9)
SHAPE = VariantShape(n_heads=4, head_dim=8, max_len=256, n_kv_heads=2)
assert sum(LENGTHS) <= 256 and max(LENGTHS) <= ONE_PASS_TOKENS  # every document in the one pass
# the two paths add the same terms, grouped otherwise only where a short document alone gets
# a shorter chunk; measured worst 2.1e-14 (outputs: mamba2's steep case, whose output norm
# divides nearly cancelled rows) and 1.0e-14 (gradients: gla with its norm) relative to the
# largest value, limit about 50× that (a leak is of order 1: the last test)
TOLERANCE = 1e-12


def _bounds(lengths) -> list[int]:
    bounds = [0]
    for length in lengths:
        bounds.append(bounds[-1] + length)
    return bounds


def _pair(name: str, params: dict):
    """The variant (float64) and a copy of it that splits packed calls per document."""
    torch.manual_seed(0)
    native = build_variant(name, params, SHAPE).double()
    assert native.packing == "native"
    split = copy.deepcopy(native)
    split.packing = "split"  # the base class's path: forward once per document
    return native, split


def _inputs(variant, n: int, scale: float, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    kv = SHAPE.kv_heads
    q = torch.randn(2, SHAPE.n_heads, n, 8, generator=g, dtype=torch.float64)
    k, v = (torch.randn(2, kv, n, 8, generator=g, dtype=torch.float64) for _ in range(2))
    gates = random_gates(variant, 2, n, head_dim=8, kv_heads=kv, dtype=torch.float64, generator=g)
    return q, k, v, {name: scale * x for name, x in gates.items()}


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / max(1.0, b.abs().max().item())).item()


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "noncausal"])
@pytest.mark.parametrize(("name", "params", "scale"), CASES, ids=IDS)
def test_native_packing_equals_the_split_path(name, params, scale, causal):
    """Short documents and a long one, packed: the one-pass outputs equal each document's own
    (the split path), float64 to `TOLERANCE`."""
    native, split = _pair(name, params)
    bounds = _bounds(LENGTHS)
    q, k, v, gates = _inputs(native, bounds[-1], scale)
    with torch.no_grad():
        one_pass = native(q, k, v, causal, gates, cu_seqlens=bounds)
        per_document = split(q, k, v, causal, gates, cu_seqlens=bounds)
    assert torch.isfinite(per_document).all()
    assert _relative(one_pass, per_document) < TOLERANCE


@pytest.mark.parametrize(("name", "params", "scale"), CASES, ids=IDS)
def test_native_packing_has_the_split_paths_gradients(name, params, scale):
    """The gradients of a packed call (q, k, v, every gate and the variant's parameters) equal
    the split path's, float64 to `TOLERANCE` relative to each gradient's largest entry: the
    reset at a document's first chunk passes no gradient to the document before."""
    native, split = _pair(name, params)
    bounds = _bounds(LENGTHS)
    inputs = _inputs(native, bounds[-1], scale, seed=1)
    weight = torch.randn(2, SHAPE.n_heads, bounds[-1], 8, dtype=torch.float64)
    grads = []
    for variant in (native, split):
        q, k, v, gates = (
            {n: x.clone().requires_grad_() for n, x in t.items()}
            if isinstance(t, dict)
            else t.clone().requires_grad_()
            for t in inputs
        )
        out = variant(q, k, v, True, gates, cu_seqlens=bounds)
        leaves = [q, k, v, *gates.values(), *variant.parameters()]
        grads.append(torch.autograd.grad((out * weight).sum(), leaves, allow_unused=True))
    for one_pass, per_document in zip(*grads, strict=True):
        if per_document is None:
            assert one_pass is None
            continue
        assert _relative(one_pass, per_document) < TOLERANCE


@pytest.mark.parametrize(("name", "params", "scale"), CASES[::2], ids=IDS[::2])
def test_long_documents_run_alone_and_short_ones_in_one_pass(name, params, scale, monkeypatch):
    """Documents longer than `ONE_PASS_TOKENS` each get a call of their own (the one pass costs
    more for them), the short ones share one pass; the outputs, put back in order, equal the
    split path's."""
    native, split = _pair(name, params)
    lengths = (5, ONE_PASS_TOKENS + 1, 12, 3, 30)
    bounds = _bounds(lengths)
    q, k, v, gates = _inputs(native, bounds[-1], scale)
    calls = []
    run = native.scan
    monkeypatch.setattr(
        native, "scan", lambda *a, **kw: calls.append(a[0].shape[-2]) or run(*a, **kw)
    )
    with torch.no_grad():
        mixed = native(q, k, v, True, gates, cu_seqlens=bounds)
        per_document = split(q, k, v, True, gates, cu_seqlens=bounds)
    assert sorted(calls) == [5 + 12 + 3 + 30, ONE_PASS_TOKENS + 1]
    assert _relative(mixed, per_document) < TOLERANCE


def test_a_packed_call_without_chunk_alignment_would_leak():
    """The check above can fail: the same engine run over the packed sequence as one (no
    reset, chunks straddling boundaries) differs from the split path by far more than
    `TOLERANCE`."""
    native, split = _pair("gated_delta_net", {"chunk_size": CHUNK})
    bounds = _bounds(LENGTHS)
    q, k, v, gates = _inputs(native, bounds[-1], 1.0)
    with torch.no_grad():
        whole = native(q, k, v, True, gates)
        per_document = split(q, k, v, True, gates, cu_seqlens=bounds)
    assert _relative(whole, per_document) > 1e-3


def timing_ratios(rounds: int = 5) -> list[str]:
    """Native packed against split, forward, float32, H = 4, D = 64, B = 1, causal: for 32
    documents of 64 tokens and 4 of 1024 (torch.utils.benchmark, medians of ``rounds`` after
    one untimed call, which also settles any chunk tuning)."""
    from torch.utils import benchmark

    shape = VariantShape(n_heads=4, head_dim=64, max_len=4096)
    lines = []
    names = ["gla", "mamba2", "delta_net", "gated_delta_net", "gated_delta_product"]
    for name in [*names, "kda", "rwkv7"]:
        torch.manual_seed(0)
        native = build_variant(name, {}, shape)
        split = copy.deepcopy(native)
        split.packing = "split"
        for count, length in ((32, 64), (4, 1024)):
            n = count * length
            bounds = list(range(0, n + 1, length))
            g = torch.Generator().manual_seed(0)
            q, k, v = (torch.randn(1, 4, n, 64, generator=g) for _ in range(3))
            gates = random_gates(native, 1, n, head_dim=64, kv_heads=4, generator=g)
            medians = []
            for variant in (native, split):
                timer = benchmark.Timer(
                    "with torch.no_grad(): f(q, k, v, True, gates, cu_seqlens=bounds)",
                    globals={
                        "f": variant,
                        "q": q,
                        "k": k,
                        "v": v,
                        "gates": gates,
                        "bounds": bounds,
                        "torch": torch,
                    },
                    num_threads=torch.get_num_threads(),
                )
                with torch.no_grad():  # untimed: chunk tuning, caches
                    variant(q, k, v, True, gates, cu_seqlens=bounds)
                medians.append(timer.timeit(rounds).median)
            lines.append(
                f"{name:20s} {count:3d} × {length:4d}: native {medians[0] * 1e3:7.2f} ms, "
                f"split {medians[1] * 1e3:7.2f} ms, split / native {medians[1] / medians[0]:5.2f}"
            )
            print(lines[-1], flush=True)
    return lines


if __name__ == "__main__":
    timing_ratios()
