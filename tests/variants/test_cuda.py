"""Every registered variant on a CUDA device: the same maths as on the CPU, in float32 and
bfloat16, forward and backward, and its incremental form. Skipped where there is no GPU (CI);
run on a GPU machine with ``pytest tests/variants/test_cuda.py``.

The CPU contract suite (`attnbench.testing`) checks each variant against its definition; this
checks that the CUDA paths (SDPA's and flex_attention's kernels, the engines' device branches,
the pointwise and top-k paths) compute the same function: the CUDA output against the variant's
own float64 output on the CPU for the same inputs and parameters. Tolerances are each variant's
declared ``error_tolerance`` for the dtype (relative to max(1, max |reference|)), as the
throughput task judges its timings; a variant unavailable on CUDA skips with its sentence.
"""

from __future__ import annotations

import pytest
import torch

from attnbench import VariantShape, build_variant, incremental_form, why_no_incremental_form
from attnbench.testing import _call, gates_of_keys  # the contract suite's call: gates fed alike
from attnbench.variant import VARIANTS, UnsupportedError

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

N, H, D = 300, 4, 64  # 300: no multiple of a chunk (64) or a block (32, 64)


def _variant(name: str) -> torch.nn.Module:
    variant_cls = VARIANTS.get(name)
    reason = variant_cls.unavailable("cuda")
    if reason:
        pytest.skip(reason)
    torch.manual_seed(0)
    return build_variant(name, {}, VariantShape(H, D, N))


def _inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, H, N, D, generator=g, dtype=torch.float64) for _ in range(3)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("name", VARIANTS.names())
def test_cuda_forward_equals_the_cpu_float64_forward(name, causal, dtype):
    variant = _variant(name)
    if causal and not variant.supports_causal:
        pytest.skip("not causal")
    q, k, v = _inputs()
    # the CPU reference in float64; a peer without a CPU path: the variant it computes (its
    # `ours`, same parameters) in float64, else its own CUDA float32
    try:
        reference = _call(variant.double(), q, k, v, causal)
    except Exception:  # noqa: BLE001 - a CUDA-only library
        ours = getattr(variant, "ours", None)
        reference = None if ours is None else _call(ours.double(), q, k, v, causal)
    cuda = variant.to("cuda")
    try:
        if reference is None:
            cuda_q, cuda_k, cuda_v = (x.float().cuda() for x in (q, k, v))
            reference = _call(cuda.float(), cuda_q, cuda_k, cuda_v, causal).double()
        out = _call(cuda.to(dtype), *(x.to("cuda", dtype) for x in (q, k, v)), causal)
    except UnsupportedError as err:  # a dtype the kernel refuses, with its sentence
        pytest.skip(str(err))
    assert out.dtype == dtype and out.device.type == "cuda"
    scale = max(1.0, float(reference.abs().max()))
    error = float((out.double().cpu() - reference.cpu()).abs().max()) / scale
    name_of = str(dtype).removeprefix("torch.")
    limit = variant.error_tolerance.get(name_of, 1e-1)
    assert error <= limit, f"{name} {name_of} causal={causal}: error {error:.3g} > {limit:g}"


@pytest.mark.parametrize("name", VARIANTS.names())
def test_cuda_backward_is_finite_and_reaches_every_input(name):
    variant = _variant(name).cuda()
    q, k, v = (x.float().cuda().requires_grad_(True) for x in _inputs(1))
    _call(variant, q, k, v, variant.supports_causal).square().mean().backward()
    for t in (q, k, v):
        assert t.grad is not None and torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0


@pytest.mark.parametrize("name", VARIANTS.names())
def test_cuda_incremental_form_equals_the_causal_forward(name):
    variant = _variant(name)
    if why_no_incremental_form(variant):
        pytest.skip(why_no_incremental_form(variant))
    variant = variant.cuda()
    q, k, v = (x.float().cuda() for x in _inputs(2))
    with torch.no_grad():
        expected = _call(variant, q, k, v, True)
        decoder = incremental_form(variant, 2, N, D, D, device="cuda", dtype=torch.float32)
        gates = gates_of_keys(variant, k) if variant.gates else {}
        cut = {n: g[:, :, :250] for n, g in gates.items()}
        outs = [decoder.prefill(q[:, :, :250], k[:, :, :250], v[:, :, :250], cut)]
        for t in range(250, N):
            token = (x[:, :, t : t + 1] for x in (q, k, v))
            outs.append(decoder.step(*token, {n: g[:, :, t : t + 1] for n, g in gates.items()}))
    error = float((torch.cat(outs, dim=2) - expected).abs().max())
    assert error <= 1e-4 * max(1.0, float(expected.abs().max())), f"{name}: {error:.3g}"


@pytest.mark.parametrize(
    "name", [n for n in VARIANTS.names() if VARIANTS.get(n).peer_of and VARIANTS.get(n).gates]
)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_a_recurrent_peer_computes_what_our_variant_computes(name, causal):
    """A library's recurrent kernel (FLA's chunk kernels) against our variant holding the same
    parameters (the adapter's own instance of it), in float32 on the same inputs and gates:
    they differ only in the kernel. Within 2e-3 of the output's scale: the libraries' Triton
    kernels multiply in TF32 where we do not."""
    peer = _variant(name).cuda()
    q, k, v = (x.float().cuda() for x in _inputs(3))
    with torch.no_grad():
        try:
            theirs = _call(peer, q, k, v, causal)
        except UnsupportedError as err:  # no float32 kernel: the forward test compares its bf16
            pytest.skip(str(err))
        ours = _call(peer.ours, q, k, v, causal)
    scale = max(1.0, float(ours.abs().max()))
    error = float((theirs - ours).abs().max()) / scale
    assert error <= 2e-3, f"{name} causal={causal}: {error:.3g}"


# the variants whose forward was captured and replayed equal to eager on an H200 (2026-11-29;
# docs/speed.md, "On CUDA"): one of them refused later is a regression, not a skip
CAPTURED = {"decay", "delta_net", "fox", "gated_delta_net", "identity", "linear", "mesa"}


@pytest.mark.parametrize("name", VARIANTS.names())
def test_a_cuda_graph_replay_recomputes_the_eager_forward(name):
    """The throughput task's ``cuda_graph`` timing (`attnbench.toolkit.timed.graphed`) replays a
    captured forward: the replay must compute what the eager call computes, on new inputs
    copied into the captured ones (a replay that kept the capture's values, or skipped work,
    fails). A variant whose call needs the host at each run is refused with torch's reason."""
    from attnbench.toolkit.timed import graphed

    variant = _variant(name).cuda()
    causal = variant.supports_causal
    q, k, v = (x.float().cuda() for x in _inputs(4))
    out: list[torch.Tensor] = []

    def forward() -> None:
        with torch.no_grad():
            out[:] = [_call(variant, q, k, v, causal)]

    try:
        replay = graphed("the forward", forward, q.device)
    except UnsupportedError as err:
        assert name not in CAPTURED, f"{name} was captured on an H200 and is refused now: {err}"
        pytest.skip(str(err))
    for x, fresh in zip((q, k, v), _inputs(5), strict=True):
        x.copy_(fresh)
    replay()
    with torch.no_grad():
        expected = _call(variant, q, k, v, causal)
    error = float((out[0] - expected).abs().max())
    assert error <= 1e-5 * max(1.0, float(expected.abs().max())), f"{name}: {error:.3g}"
