"""`peer_fla_linear` and `peer_fla_decay`: flash-linear-attention's chunk kernels (Triton, CUDA).

- `peer_fla_linear`: `fla.ops.linear_attn.chunk_linear_attn` (normalised) on φ(q), φ(k) with
  our `linear`'s default feature map φ = elu + 1 (FLA's op takes features as given; its layers
  apply the map outside the kernel too): the same maths as `linear` with default parameters,
  except the normaliser's guard (FLA adds 1e-10 to scale·φ(q)·Σφ(k), ours 1e-6 to φ(q)·Σφ(k);
  with elu + 1 features the normaliser is ≥ the number of keys seen times a positive scale, so
  the difference is below float32 rounding for the sizes swept).
- `peer_fla_decay`: `fla.ops.retention.chunk_retention`, whose per-head decays
  λ_h = 1 − 2^(−5−h) and scale 1/√d are exactly our `decay`'s defaults.

FLA's chunk kernels are causal. The non-causal form is composed from them as our `decay` does:
the causal sums forwards, plus those of the reversed sequence, minus the diagonal counted twice
(linear: for the numerator with ``normalize=False``; its normaliser φ(q)·Σφ(k) is one matrix
product).

Install (CUDA; the CPU torch wheel has no Triton): ``pip install fla-core==0.6.0``: its base
dependencies are einops only, so it never replaces torch (its ``[cuda]`` extra asks for
torch >= 2.7 and triton >= 3.3, which the CUDA torch wheel already brings).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from attnbench import AttentionVariant, UnsupportedError, VariantShape, register_variant
from attnbench.peers.availability import PeerVariant
from attnbench.variant import build_variant  # ours, registered: the engine loads the plugins

INSTALL = "pip install fla-core==0.6.0 (CUDA, with the Triton your CUDA torch brings)"
# the chunk length (the Triton tile BT) of every FLA chunk kernel used here
FLA_CHUNK = 64


def _heads_last(x: torch.Tensor) -> torch.Tensor:
    """(B, H, N, D) → FLA's (B, N, H, D), contiguous for the Triton kernels."""
    return x.transpose(1, 2).contiguous()


def _per_token(x: torch.Tensor) -> torch.Tensor:
    """A gate or decay (B, H, N) → FLA's (B, N, H), contiguous."""
    return x.transpose(1, 2).contiguous()


def _bidirectional(causal_fn, q, k, v, scale: float) -> torch.Tensor:
    """All pairs from the causal kernel: forwards + reversed − diagonal, (B, H, N, Dv)."""
    fwd = causal_fn(q, k, v)
    bwd = causal_fn(*(t.flip(-2) for t in (q, k, v))).flip(-2)
    return fwd + bwd - (q * k).sum(-1, keepdim=True) * scale * v


class _FlaPeer(PeerVariant):
    """What the two FLA adapters share: library, device, install command."""

    family = "linear"
    cost = "n"
    supports_causal = True
    library = "fla-core"
    module = "fla.ops"
    install = INSTALL
    devices = ("cuda",)

    # dtypes the kernel refuses, each with the reason: FLA's Triton kernels have no float64
    # (their accumulators are float32, and Triton refuses a loop whose accumulator turns
    # float64, with a `CompilationError`, no torch error)
    refused_dtypes: dict[torch.dtype, str] = {torch.float64: "FLA's Triton kernels have no float64"}

    def check_inputs(self, q, k, v, causal) -> None:
        """As every variant's, and the kernel's `refused_dtypes` refused with
        `UnsupportedError`, so that such a call leaves the throughput task's timed error
        unmeasured instead of failing the job (the error check's reference is float64) and a
        test skips it with the reason."""
        if q.dtype in self.refused_dtypes:
            dtype = str(q.dtype).removeprefix("torch.")
            raise UnsupportedError(f"{self.name} refuses {dtype}: {self.refused_dtypes[q.dtype]}.")
        super().check_inputs(q, k, v, causal)

    @functools.cached_property
    def _counted(self) -> AttentionVariant:
        """Our variant of the same maths at FLA's chunk length, whose FLOP count is the kernel's:
        FLA's chunk kernels run the matrix products of the same chunked form. Without it a peer
        counted `AttentionVariant`'s dense default, all n² pairs: on an H200 that put
        `peer_fla_decay` at 151 % of the measured matrix-product peak."""
        return build_variant(self.peer_of, {"chunk_size": FLA_CHUNK}, self.shape)

    def forward_flops(self, batch, heads, n, m, d, dv, causal) -> float:
        """The causal chunked form's products (`_counted`); not causal, what the adapter
        composes from the causal kernel (`_noncausal_flops`)."""
        count = self._counted.forward_flops(batch, heads, n, m, d, dv, True)
        return count if causal else self._noncausal_flops(count, batch, heads, n, d, dv)

    def _noncausal_flops(self, causal_count, batch, heads, n, d, dv) -> float:
        """`_bidirectional`: the causal kernel twice (the diagonal's correction element-wise)."""
        return 2 * causal_count


@register_variant("peer_fla_linear")
class FlaLinearPeer(_FlaPeer):
    """FLA's chunkwise normalised linear attention on elu + 1 features (`linear`'s default)."""

    peer_of = "linear"

    def _causal_sums(self, q, k, v, normalize: bool) -> torch.Tensor:
        from fla.ops.linear_attn import chunk_linear_attn

        out, _ = chunk_linear_attn(
            _heads_last(q), _heads_last(k), _heads_last(v), normalize=normalize
        )
        return out.transpose(1, 2)

    def forward(self, q, k, v, causal=False):
        self.check_inputs(q, k, v, causal)
        fq, fk = F.elu(q) + 1.0, F.elu(k) + 1.0
        if causal:
            return self._causal_sums(fq, fk, v, normalize=True)
        scale = q.shape[-1] ** -0.5  # FLA's default scale: in numerator and normaliser alike
        num = _bidirectional(lambda a, b, c: self._causal_sums(a, b, c, False), fq, fk, v, scale)
        den = (fq @ fk.sum(-2, keepdim=True).transpose(-2, -1)) * scale
        return num / (den + 1e-10)


@register_variant("peer_fla_decay")
class FlaDecayPeer(_FlaPeer):
    """FLA's chunkwise retention: λ_h = 1 − 2^(−5−h), unnormalised, scale 1/√d."""

    family = "decay"
    requires_equal_lengths = True
    peer_of = "decay"

    def _causal_sums(self, q, k, v) -> torch.Tensor:
        from fla.ops.retention import chunk_retention

        out, _ = chunk_retention(_heads_last(q), _heads_last(k), _heads_last(v))
        return out.transpose(1, 2)

    def forward(self, q, k, v, causal=False):
        self.check_inputs(q, k, v, causal)
        if causal:
            return self._causal_sums(q, k, v)
        return _bidirectional(self._causal_sums, q, k, v, q.shape[-1] ** -0.5)


class _FlaRecurrentPeer(_FlaPeer):
    """What the recurrent mixers' adapters share: our variant of the same maths (`peer_of`,
    built from the registry with the same shape and its default parameters, its learned gate
    parameters included) turns q, k, v and the raw gates into the kernel's inputs; FLA's chunk
    kernel then runs the recurrence. So the two differ only in the kernel, which is what a
    peer is for. Causal: FLA's output. Not causal: every query reads the final state, which
    FLA's kernel returns (``output_final_state``), as ours does. Keys and values are repeated
    to the query heads (`grouped_query` False); FLA's layout is (B, N, H, ·)."""

    supports_causal = True
    requires_equal_lengths = True  # FLA's kernels take one sequence of keys per query

    def __init__(self, params, shape: VariantShape) -> None:
        super().__init__(params, shape)
        self.ours = build_variant(self.peer_of, {}, shape)  # its gates are declared alike

    def _noncausal_flops(self, causal_count, batch, heads, n, d, dv) -> float:
        """The causal kernel once (it returns the final state beside its outputs), then every
        query's read of the final state."""
        return causal_count + 2.0 * batch * heads * n * d * dv

    def _read(self, q, k, v, causal, kernel) -> torch.Tensor:
        """``kernel(q, k, v, final)`` on FLA's layout → the output (B, H, N, Dv)."""
        out, state = kernel(*(_heads_last(x) for x in (q, k, v)), not causal)
        if causal:
            return out.transpose(1, 2)
        return q @ state.to(q.dtype)  # (B, H, D, Dv) final state, read by every query


@register_variant("peer_fla_delta_net")
class FlaDeltaNetPeer(_FlaRecurrentPeer):
    """FLA's `chunk_delta_rule` on `delta_net`'s features (SiLU, L2 norm, q scaled 1/√D) and β."""

    family = "delta"
    peer_of = "delta_net"
    gates = {"beta": "head"}
    # chunk_delta_rule asserts "does not support float32" (fla-core 0.6.0: an AssertionError,
    # not a refusal); its gated sibling takes float32
    refused_dtypes = {
        **_FlaPeer.refused_dtypes,
        torch.float32: "FLA's chunk_delta_rule takes bfloat16 and float16 only",
    }

    def forward(self, q, k, v, causal=False, gates=None):
        self.check_inputs(q, k, v, causal)
        fq, fk = self.ours.features(q, k)
        fk, v, beta, log_alpha = self.ours.rule_inputs(fk, v, gates)
        from fla.ops.delta_rule import chunk_delta_rule

        def kernel(a, b, c, final):
            return chunk_delta_rule(a, b, c, _per_token(beta), scale=1.0, output_final_state=final)

        return self._read(fq, fk, v, causal, kernel)


@register_variant("peer_fla_gated_delta_net")
class FlaGatedDeltaNetPeer(FlaDeltaNetPeer):
    """FLA's `chunk_gated_delta_rule` on `gated_delta_net`'s features, β and log α."""

    peer_of = "gated_delta_net"
    gates = {"alpha": "head", "beta": "head"}
    refused_dtypes = _FlaPeer.refused_dtypes

    def forward(self, q, k, v, causal=False, gates=None):
        self.check_inputs(q, k, v, causal)
        fq, fk = self.ours.features(q, k)
        fk, v, beta, log_alpha = self.ours.rule_inputs(fk, v, gates)
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule

        def kernel(a, b, c, final):
            return chunk_gated_delta_rule(
                a,
                b,
                c,
                g=_per_token(log_alpha),
                beta=_per_token(beta),
                scale=1.0,
                output_final_state=final,
            )

        return self._read(fq, fk, v, causal, kernel)


@register_variant("peer_fla_gla")
class FlaGLAPeer(_FlaRecurrentPeer):
    """FLA's `chunk_gla` on `gla`'s scaled queries and per-channel log-decays."""

    family = "gated-linear"
    peer_of = "gla"
    gates = {"alpha": "key"}

    def forward(self, q, k, v, causal=False, gates=None):
        self.check_inputs(q, k, v, causal)
        q, k, v, log_decay = self.ours.decays(q, k, v, gates)
        from fla.ops.gla import chunk_gla

        def kernel(a, b, c, final):
            g = _heads_last(log_decay)
            return chunk_gla(a, b, c, g=g, scale=1.0, output_final_state=final)

        return self._read(q, k, v, causal, kernel)


@register_variant("peer_fla_mamba2")
class FlaMamba2Peer(_FlaRecurrentPeer):
    """FLA's `chunk_simple_gla` (a scalar decay per head and token: the SSD recurrence) on
    `mamba2`'s keys scaled by Δ and its log-decays −exp(A_log)·Δ."""

    family = "gated-linear"
    peer_of = "mamba2"
    gates = {"dt": "head"}

    def forward(self, q, k, v, causal=False, gates=None):
        self.check_inputs(q, k, v, causal)
        q, k, v, log_decay = self.ours.decays(q, k, v, gates)
        from fla.ops.simple_gla import chunk_simple_gla

        def kernel(a, b, c, final):
            g = _per_token(log_decay[..., 0])
            return chunk_simple_gla(a, b, c, g=g, scale=1.0, output_final_state=final)

        return self._read(q, k, v, causal, kernel)
