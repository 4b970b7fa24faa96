"""The delta family: `delta_net` (Yang et al. 2024, "Parallelizing Linear Transformers with the
Delta Rule over Sequence Length") and `gated_delta_net` (Yang, Kautz & Hatamizadeh 2025, "Gated
Delta Networks"), the attention cores, with their incremental forms.

Both keep a D×Dv state S per key/value head and, at every token, correct what S predicts for the
key towards the value (one online gradient step on ½‖Sᵀk_t − v_t‖² with step β_t, theory.md §7)::

    delta_net:        S_t = S_{t−1} + β_t k_t (v_t − S_{t−1}ᵀ k_t)ᵀ
    gated_delta_net:  S_t = α_t S_{t−1} + β_t k_t (v_t − α_t S_{t−1}ᵀ k_t)ᵀ
    out_t = S_tᵀ q_t

The papers' defaults, as flash-linear-attention's layers (`fla/layers/delta_net.py`,
`fla/layers/gated_deltanet.py`) apply them:

- q and k: SiLU, then L2-normalised per head (``qk_activation="silu"``; "identity": the L2 norm
  alone). SiLU is kept because it is what fla's layers apply before the normalisation (inside
  their short convolution, or after the projection without it) and the DeltaNet paper's ablation
  chose it; the rule itself needs ‖k‖ = 1, which makes I − β k kᵀ non-expansive for
  β ∈ [0, 1] (eigenvalues 1 and 1 − β: a write never amplifies what the state holds) and β the
  step of the gradient step exactly. q is then scaled by 1/√D, fla's default scale.
- β_t = sigmoid(raw β gate), per key/value head and token.
- gated: α_t = exp(g_t) with g_t = −exp(A_log)·softplus(raw α gate + dt_bias) (Mamba-2's
  parametrisation, the gated paper's), A_log and dt_bias learned per head and initialised as
  fla does: A ~ U(0, 16), A_log = log A; dt log-uniform in [0.001, 0.1] (at least 1e-4),
  dt_bias = softplus⁻¹(dt).

The gates come from the layer's input (`AttentionVariant.gates`: one scalar per head and token,
"head"): ``forward(q, k, v, causal, gates={"beta": (B, H_kv, M, 1), "alpha": …})``, with as
many heads as the keys. Without gates a forward uses raw gates of 0 (what a gate projection
gives a zero input: β = ½ and g = −exp(A_log)·softplus(dt_bias)); `attention_weights` needs them.

Each head's output is then divided by its root mean square over the value channels
(``output_norm``, on by default; `attnbench.variants.recurrent.output_norm`), as fla's layers
normalise it (``o_norm``, an RMSNorm per head) before their output projection. Without it the
output carries the state's scale, which the decay sets: issue #58 measured `gated_delta_net` at
chance on MQAR (128 tokens, 8 pairs, width 64, one head; 4 of 4 seeds) at the initialisation
below, where the same seeds learn with the decay switched off (0.53 to 0.87) and with the norm
(0.98 at each); `delta_net` learned later, and not at every seed, without it (0.01 to 0.89;
0.98 with it). ``output_norm=False``
gives the bare rule (the exactness tests' reference, and what `attention_weights` needs: the
norm is no linear map of the values). A single value channel is left as it is (its norm would
be its sign; `output_norm`'s docstring).

**Deviations from the papers' full layers** (the rest of their layer, not the core): no short
causal convolution on q, k and v, no SiLU on v, an output norm without its learned weight (the
output projection absorbs it) and without the gate Gated DeltaNet multiplies in (SiLU of a
projection of the input), no allow_neg_eigval (β ∈ [0, 1] only). attnbench's shared layer
(`attnbench.toolkit.layer`) does the projections and the output projection for every variant
alike.

``causal=False``: every query reads the state after the last key, S_Mᵀ q (the recurrence is
ordered; there is no bidirectional form in the papers). Causal with N ≠ M follows the causal
convention (query i reads S_min(i, M−1)).

Computed chunk by chunk in the WY/UT form (`delta_chunks`); float32 and float64 natively,
bfloat16 and float16 in float32 (a chain of C×C products and an inverted triangular matrix
per chunk: reduced precision would compound over the chunk and the hand-overs) and rounded
back. Grouped-query heads native: a state per key/value head, except where the gated variant's
learned decay has a head per query head (built without ``n_kv_heads``), whose query heads then
decay differently and keep a state each, as `decay` does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attnbench import (
    IncrementalAttention,
    VariantShape,
    per_query_head,
    register_incremental,
    register_variant,
)
from attnbench.variants.kernels import autotune
from attnbench.variants.recurrent.delta_chunks import (
    DEFAULT_CHUNK,
    delta_rule_chunked,
    products_flops,
)
from attnbench.variants.recurrent.mixer import GatedMixer
from attnbench.variants.recurrent.output_norm import normalise_output
from attnbench.variants.recurrent.precision import compute_dtype

QK_ACTIVATIONS = ("silu", "identity")
NORM_EPS = 1e-6  # the L2 norm divides by max(‖x‖, eps): exact for any key not ~0


@dataclass
class DeltaNetParams:
    """Hyperparameters of `delta_net`."""

    qk_activation: str = "silu"  # before the L2 norm of q and k: silu (the papers') or identity
    # positions per chunk of the WY/UT form; 0: chosen on the machine (`CHUNKS`, `DeltaRule.chunk`)
    chunk_size: int = 0
    # each head's output divided by its RMS over the value channels, as fla's o_norm (module
    # docstring); false: the bare rule
    output_norm: bool = True


@dataclass
class GatedDeltaNetParams:
    """Hyperparameters of `gated_delta_net`."""

    qk_activation: str = "silu"  # before the L2 norm of q and k: silu (the papers') or identity
    # positions per chunk of the WY/UT form; 0: chosen on the machine (`CHUNKS`, `DeltaRule.chunk`)
    chunk_size: int = 0
    # each head's output divided by its RMS over the value channels, as fla's o_norm (module
    # docstring); false: the bare rule
    output_norm: bool = True


# chunk lengths a machine chooses among (`autotune.choose`); the first is the default (the best
# on the AMD EPYC it was measured on, delta_chunks.DEFAULT_CHUNK), the one a call too small to
# tune runs
CHUNKS = (DEFAULT_CHUNK, 16, 64, 128)
TUNE_FROM = 16384  # positions × state heads × batch from which a call's class is tuned
PROBE_POSITIONS = 2048  # a tuning times the forward on this many positions, without autograd


def _gate(gates: dict[str, torch.Tensor] | None, name: str, k: torch.Tensor) -> torch.Tensor:
    """The raw gate ``name`` as (B, H_kv, M) in k's dtype: zeros when no gates are given."""
    b, h, m, _ = k.shape
    if gates is None:
        return k.new_zeros(b, h, m)
    if name not in gates:
        raise ValueError(f"gate '{name}' is missing; got {sorted(gates)}.")
    raw = gates[name]
    if raw.dim() == 4 and raw.shape[-1] == 1:
        raw = raw.squeeze(-1)
    if tuple(raw.shape) != (b, h, m):
        raise ValueError(
            f"gate '{name}' must have shape (B={b}, H_kv={h}, M={m}, 1) like the keys; "
            f"got {tuple(gates[name].shape)}."
        )
    return raw.to(k.dtype)


class DeltaRule(GatedMixer):
    """What the two variants share: features, gates, the chunked forward (module docstring)."""

    family = "delta"
    cost = "n"
    supports_causal = True
    grouped_query = True
    gates = {"beta": "head"}
    estimator = "online_gd"  # one gradient step per token on ½‖Sᵀk − v‖² (theory.md)
    # measured as the throughput task does (max error over max(1, max |float64 output|)) at
    # n = 512 and 4096, H = 4, D = 64, unit-normal inputs and gates, causal and not, 3 seeds, both
    # variants: worst 1.8e-7 in float32 (3.1e-7 with chunks of 64: the inverse and the chunk
    # hand-overs round like any float32 product chain), 2.5e-4 in float16 and 2.1e-3 in
    # bfloat16 (the inputs' rounding; computed in float32); declared with a factor of about 10
    # for other CPUs' summation orders (tests/variants/test_delta_rule.py checks n = 1000).
    # With the output norm (the default), delta_net at n = 512 (8 seeds, 1 and 4 key/value
    # heads, causal and not) and 1000: worst 4.9e-7, 8.0e-4 and 6.1e-3, within these limits;
    # gated_delta_net's own are below
    error_tolerance = {"float64": 1e-12, "float32": 3e-6, "float16": 3e-3, "bfloat16": 2e-2}

    def __init__(self, params, shape: VariantShape) -> None:
        super().__init__(params, shape)
        if params.qk_activation not in QK_ACTIVATIONS:
            raise ValueError(
                f"{self.name} qk_activation {params.qk_activation!r} is not known; "
                f"valid: {', '.join(QK_ACTIVATIONS)}."
            )
        if params.chunk_size < 0:
            raise ValueError(
                f"{self.name} chunk_size must be >= 1, or 0 to choose it on the machine; got "
                f"{params.chunk_size}."
            )
        self.last_chunk = params.chunk_size or DEFAULT_CHUNK  # what the last call ran with

    def features(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q and k as the rule reads them: activation, L2 norm per head; q scaled by 1/√D."""
        if self.params.qk_activation == "silu":
            q, k = F.silu(q), F.silu(k)
        q = F.normalize(q, dim=-1, eps=NORM_EPS) / math.sqrt(q.shape[-1])
        return q, F.normalize(k, dim=-1, eps=NORM_EPS)

    def rule_inputs(
        self, k: torch.Tensor, v: torch.Tensor, gates: dict[str, torch.Tensor] | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """k, v (repeated where the state has more heads than they), β and log α (None: α = 1)
        per state head, (B, H_state, M) each."""
        return k, v, torch.sigmoid(_gate(gates, "beta", k)), None

    def _run(self, q, k, v, gates, causal, state=None):
        """The rule on inputs in the working dtype: outputs (B, H, N, Dv) and the final state."""
        fq, fk = self.features(q, k)
        fk, v, beta, log_alpha = self.rule_inputs(fk, v, gates)
        c = self.last_chunk = self.chunk(fq, fk, v, beta, log_alpha)
        n, m = q.shape[-2], k.shape[-2]
        if not causal or n == m:
            return delta_rule_chunked(fq, fk, v, beta, log_alpha, c, state, causal)
        if n < m:  # query i reads S_i: the keys after the last query are never read
            cut = (fk[:, :, :n], v[:, :, :n], beta[:, :, :n])
            la = None if log_alpha is None else log_alpha[:, :, :n]
            return delta_rule_chunked(fq, *cut, la, c, state, causal)
        head, state = delta_rule_chunked(fq[:, :, :m], fk, v, beta, log_alpha, c, state, causal)
        tail = per_query_head(fq[:, :, m:], state)  # queries past the last key read S_M
        return torch.cat([head, tail], dim=2), state

    def chunk(self, fq, fk, v, beta, log_alpha) -> int:
        """The chunk length C of this call: the parameter where it is set, else the machine's
        choice for the call's class (`autotune.choose` among `CHUNKS`, timed on the forward
        without autograd over the first `PROBE_POSITIONS` positions): the products inside
        chunks grow with C, the hand-overs of the loop with N / C, and where they balance
        depends on the machine (32 on the AMD EPYC the default was measured on)."""
        if self.params.chunk_size:
            return self.params.chunk_size
        b, kv, m, d = fk.shape
        shape_class = {
            "gated": log_alpha is not None,
            "d": d,
            "dv": v.shape[-1],
            "state_heads": kv,
            "group": fq.shape[1] // kv,
            "dtype": str(fk.dtype).removeprefix("torch."),
            "long": m >= PROBE_POSITIONS,
        }
        end = min(m, PROBE_POSITIONS)

        def probe(config):
            parts = (fq[:, :, :end], fk[:, :, :end], v[:, :, :end], beta[:, :, :end])
            la = None if log_alpha is None else log_alpha[:, :, :end]

            def call():
                with torch.no_grad():
                    delta_rule_chunked(*(t.detach() for t in parts), la, config["chunk"])

            return call

        candidates = [{"chunk": c} for c in CHUNKS]
        worth = b * kv * m >= TUNE_FROM and fk.device.type == "cpu"
        return int(autotune.choose(f"{self.name} chunks", shape_class, candidates, probe, worth)["chunk"])

    def run(self, q, k, v, gates, causal, state=None):
        """`_run` on inputs and gates widened to `compute_dtype`, its output through `finish`:
        (out, final state), which `GatedMixer.forward` reads."""
        work = compute_dtype(q.dtype)
        if gates is not None:
            gates = {name: g.to(work) for name, g in gates.items()}
        out, state = self._run(q.to(work), k.to(work), v.to(work), gates, causal, state)
        return self.finish(out), state

    def finish(self, out: torch.Tensor) -> torch.Tensor:
        """The rule's output as the variant gives it: RMS-normalised per head and position
        where ``output_norm`` is set (`normalise_output`), else as it is."""
        return normalise_output(out) if self.params.output_norm else out

    def attention_weights(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        causal: bool = False,
        gates: dict[str, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """The (B, H, N, M) matrix A with forward(q, k, v) = A v: the output is linear in the
        values for given q, k and gates, so A is the forward of the identity as values (each
        key's value a unit vector). The weights depend on the gates: without them, refused; so is a
        variant with ``output_norm``, whose output is no linear map of the values."""
        if gates is None:
            raise NotImplementedError(
                f"variant '{self.name}' weighs keys by its gates: its attention weights need them."
            )
        if self.params.output_norm:
            raise NotImplementedError(
                f"variant '{self.name}' normalises its output per position (output_norm), which "
                "no matrix of weights applied to the values reproduces; output_norm=false gives "
                "the rule's weights."
            )
        b, kv, m, _ = k.shape
        eye = torch.eye(m, dtype=k.dtype, device=k.device).expand(b, kv, m, m)
        return self.forward(q, k, eye, causal=causal, gates=gates)

    def forward_flops(self, batch, heads, n, m, d, dv, causal) -> float:
        """The matrix products of the chunked form at the chunk length of the last call (the
        default before any), the flop counter's count (`products_flops`); the element-wise gates, norms, decays and base blocks of the inverse are not counted.
        ``heads`` query heads share key/value heads as the instance's shape does. The backward
        is the default, two products per forward product (autograd; every step is one)."""
        kv = heads * self.shape.kv_heads / self.shape.n_heads
        if causal and n != m:
            m = n = min(n, m)  # later queries read the final state: counted as n = m
        return batch * products_flops(heads, kv, n, m, d, dv, causal, self.last_chunk)


@register_variant("delta_net")
class DeltaNet(DeltaRule):
    """The delta rule (DeltaNet): S_t = S_{t−1} + β_t k_t (v_t − S_{t−1}ᵀ k_t)ᵀ, chunked."""

    Params = DeltaNetParams


@register_variant("gated_delta_net")
class GatedDeltaNet(DeltaRule):
    """The gated delta rule: S_t = α_t S_{t−1} + β_t k_t (v_t − α_t S_{t−1}ᵀ k_t)ᵀ, chunked."""

    Params = GatedDeltaNetParams
    gates = {"alpha": "head", "beta": "head"}
    # with the output norm (the default), measured as `DeltaRule`'s at n = 512 (16 seeds, 1 and
    # 4 key/value heads, causal and not: 64 draws) and 1000: worst 1.3e-6 in float32, 2.3e-3 in
    # float16, 2.2e-2 in bfloat16 (without it: 2.8e-7, 2.4e-4, 2.1e-3). The norm divides each
    # row by its own scale, so a row whose output nearly cancels (a strong decay leaves one
    # or two terms) shows its rounding relative to itself; limits about 4× the worst
    error_tolerance = {"float64": 1e-12, "float32": 1e-5, "float16": 1e-2, "bfloat16": 1e-1}

    def __init__(self, params: GatedDeltaNetParams, shape: VariantShape) -> None:
        super().__init__(params, shape)
        heads = shape.kv_heads  # one decay per state (module docstring)
        self.A_log = nn.Parameter(torch.log(torch.empty(heads).uniform_(0, 16)))
        dt_min, dt_max, floor = 0.001, 0.1, 1e-4  # fla's (and Mamba-2's) initialisation
        dt = torch.exp(torch.rand(heads) * (math.log(dt_max) - math.log(dt_min)))
        dt = (dt * dt_min).clamp(min=floor)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus⁻¹(dt)

    def rule_inputs(self, k, v, gates):
        heads, have = self.A_log.shape[0], k.shape[1]
        a_log, dt_bias = self.A_log.to(k.dtype), self.dt_bias.to(k.dtype)
        raw_beta, raw_alpha = _gate(gates, "beta", k), _gate(gates, "alpha", k)
        if have > heads and have % heads == 0:  # keys repeated past the decay's heads
            a_log = a_log.repeat_interleave(have // heads)
            dt_bias = dt_bias.repeat_interleave(have // heads)
        elif heads > have and heads % have == 0:  # a decay per query head: a state each
            k, v, raw_beta, raw_alpha = (
                x.repeat_interleave(heads // have, dim=1) for x in (k, v, raw_beta, raw_alpha)
            )
        elif heads != have:
            raise ValueError(
                f"gated_delta_net has a decay for {heads} heads; keys with {have} heads do not "
                "divide or repeat them."
            )
        log_alpha = -a_log.exp().view(-1, 1) * F.softplus(raw_alpha + dt_bias.view(-1, 1))
        return k, v, torch.sigmoid(raw_beta), log_alpha


@register_incremental("delta_net")
class DeltaRuleIncremental(IncrementalAttention):
    """The (gated) delta rule token by token: the state S alone, D×Dv per state head (per
    key/value head; per query head for a gated variant whose decay has a head per query head),
    the same at every length. A step applies the recurrence; a prefill runs the chunked form
    from the state held."""

    grouped_query = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        decay = getattr(self.variant, "A_log", None)
        heads = 0 if decay is None else decay.shape[0]
        self.state_heads = heads if heads > self.kv_heads else self.kv_heads
        self.state = torch.zeros(
            self.batch,
            self.state_heads,
            self.head_dim,
            self.value_dim,
            device=self.device,
            dtype=self.dtype,
        )

    def state_size(self, n: int) -> int:
        """D·Dv per state head: what a sequence of any length keeps (nothing else: the gates of
        a token enter at that token only)."""
        return self.state_heads * self.head_dim * self.value_dim

    def state_tensors(self) -> list[torch.Tensor]:
        return [self.state]

    def _extend(self, q, k, v, gates=None):
        variant, work = self.variant, compute_dtype(self.dtype)
        q, k, v = q.to(work), k.to(work), v.to(work)
        if gates is not None:
            gates = {name: g.to(work) for name, g in gates.items()}
        state = self.state.to(work)
        if q.shape[-2] > 1:
            out, state = variant._run(q, k, v, gates, causal=True, state=state)
        else:  # one token: the recurrence itself
            fq, fk = variant.features(q, k)
            fk, v, beta, log_alpha = variant.rule_inputs(fk, v, gates)
            if log_alpha is not None:
                state = state * log_alpha.exp().unsqueeze(-1)
            write = beta.unsqueeze(-1) * (v - fk @ state)  # β (v − Sᵀk), (B, H_s, 1, Dv)
            state = state + fk.transpose(-1, -2) @ write
            out = per_query_head(fq, state)
        self.state.copy_(state)
        return variant.finish(out).to(self.dtype)


@register_incremental("gated_delta_net")
class GatedDeltaRuleIncremental(DeltaRuleIncremental):
    """`gated_delta_net` token by token: `DeltaRuleIncremental`, decaying S by α_t first."""
