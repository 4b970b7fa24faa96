"""`kda`: Kimi Delta Attention (Kimi Team 2025, "Kimi Linear: An Expressive, Efficient Attention
Architecture"), the attention core, with its incremental form.

The gated delta rule with one decay per key channel instead of one per head: a D×Dv state S
per key/value head, decayed channel by channel, then corrected towards the value::

    S_t = (I − β_t k_t k_tᵀ) Diag(α_t) S_{t−1} + β_t k_t v_tᵀ        out_t = S_tᵀ q_t

(flash-linear-attention's `fla/ops/kda/naive.py`: S ← e^{g_t} ⊙ S, then
S ← S + β k (v − Sᵀk)ᵀ). With α_t the same in every channel it is `gated_delta_net`.

As fla's layer (`fla/layers/kda.py`) applies it:

- q and k: SiLU, then L2-normalised per head (``qk_activation``, as `gated_delta_net`); q
  scaled by 1/√D.
- β_t = sigmoid(raw β gate) per key/value head and token (gate ``"beta"``, width ``"head"``);
  with ``negative_eigenvalues``, 2·sigmoid ∈ (0, 2) (fla's ``allow_neg_eigval``; Grazzi et al.
  2025): the transition's eigenvalue along k_t is then 1 − β_t ∈ (−1, 1).
- log α_t = g_t = −exp(A_log)·softplus(raw α gate + dt_bias), per key channel (gate
  ``"alpha"``, width ``"key"``): A_log one per key/value head, A ~ U(1, 16), A_log = log A;
  dt_bias one per key/value head and channel, dt log-uniform in [0.001, 0.1] (at least 1e-4),
  dt_bias = softplus⁻¹(dt). So a per-channel decay whose channels are tied (the same raw gate
  and dt_bias in every channel) is `gated_delta_net`'s decay with the same A_log and dt_bias,
  the reduction the tests check.
- each head's output divided by its RMS over the value channels (``output_norm``, on by
  default, `output_norm`), as fla's ``o_norm``.

**Deviations from fla's full layer** (the rest of the layer, not the core), the same as
`gated_delta_net`'s: no short causal convolution on q, k, v (nor its SiLU on v), the α gate a
projection of the layer's input by the shared layer's one linear map (fla's ``f_proj`` is a
rank-Dv bottleneck of two), the output norm without its learned weight (the output projection
absorbs it) and without the sigmoid gate fla multiplies in there. Not used: fla's optional
``lower_bound`` clamp of the gate (a kernel speed option).

``causal=False``: every query reads the state after the last key. Causal with N ≠ M: query i
reads S_min(i, M−1).

Computed chunk by chunk (`dplr_chunks`, with a = −β k, b = k, write key β k) in float32 or
float64, half precision in float32 and rounded back (`precision`). Grouped-query heads native:
a state per key/value head (per query head where the decay's parameters have a head per query
head, as `gated_delta_net`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attnbench import (
    VariantShape,
    per_query_head,
    register_incremental,
    register_variant,
)
from attnbench.variants.recurrent.dplr_chunks import (
    DEFAULT_CHUNK,
    dplr_chunked,
    dplr_flops,
    dplr_step,
    machine_chunk,
)
from attnbench.variants.recurrent.mixer import RuleIncremental, ValueLinearMixer

QK_ACTIVATIONS = ("silu", "identity")
NORM_EPS = 1e-6  # the L2 norm divides by max(‖x‖, eps): exact for any key not ~0


@dataclass
class KDAParams:
    """Hyperparameters of `kda`."""

    qk_activation: str = "silu"  # before the L2 norm of q and k: silu (the paper's) or identity
    # positions per chunk of the chunked form (`dplr_chunks`); 0: chosen on the machine
    chunk_size: int = 0
    # each head's output divided by its RMS over the value channels, as fla's o_norm (module
    # docstring); false: the bare rule
    output_norm: bool = True
    # β = 2·sigmoid(raw β) in (0, 2): the transition's eigenvalue along k is 1 − β in (−1, 1)
    # (Grazzi et al. 2025; fla's allow_neg_eigval); false: β = sigmoid(raw β) in (0, 1)
    negative_eigenvalues: bool = False


def raw_gate(gates: dict[str, torch.Tensor] | None, name: str, k: torch.Tensor, width: int):
    """The raw gate ``name`` as (B, H_kv, M, width) in k's dtype: zeros when no gates are given
    (what a gate projection gives a zero input)."""
    if gates is None:
        return k.new_zeros(*k.shape[:3], width)
    return gates[name].to(k.dtype)


@register_variant("kda")
class KimiDeltaAttention(ValueLinearMixer):
    """Kimi Delta Attention: the gated delta rule with a per-channel decay, chunked."""

    Params = KDAParams
    family = "delta"
    cost = "n"
    supports_causal = True
    grouped_query = True
    # packed documents in one pass: chunks laid out per document, the state reset at each
    # document's first chunk (`dplr_chunks`, "Packed documents")
    packing = "native"
    gates = {"alpha": "key", "beta": "head"}
    estimator = "online_gd"  # a gradient step per token on ½‖Sᵀk − v‖², after the decay
    # measured as the throughput task does (max error over max(1, max |float64 output|)) with
    # the default output norm, unit-normal inputs and gates, n = 512 and 1000, H = 4, D = 64,
    # 1 and 4 key/value heads, causal and not, 3 seeds, negative_eigenvalues off and on: worst
    # 6.0e-7 in float32, 1.7e-3 in float16, 1.5e-2 in bfloat16 (computed in float32: the
    # inputs' and parameters' rounding, which the norm shows relative to each row's own
    # scale); limits 4–5× those, for other CPUs' summation orders
    error_tolerance = {"float64": 1e-12, "float32": 3e-6, "float16": 8e-3, "bfloat16": 6e-2}

    def __init__(self, params: KDAParams, shape: VariantShape) -> None:
        super().__init__(params, shape)
        if params.qk_activation not in QK_ACTIVATIONS:
            raise ValueError(
                f"kda qk_activation {params.qk_activation!r} is not known; "
                f"valid: {', '.join(QK_ACTIVATIONS)}."
            )
        if params.chunk_size < 0:
            raise ValueError(
                f"kda chunk_size must be >= 1, or 0 to choose it on the machine; got "
                f"{params.chunk_size}."
            )
        self.last_chunk = params.chunk_size or DEFAULT_CHUNK  # what the last call ran with
        heads, d = shape.kv_heads, shape.head_dim  # one decay per state (module docstring)
        self.A_log = nn.Parameter(torch.log(torch.empty(heads).uniform_(1, 16)))
        dt_min, dt_max, floor = 0.001, 0.1, 1e-4  # fla's initialisation
        dt = torch.exp(torch.rand(heads, d) * (math.log(dt_max) - math.log(dt_min)))
        dt = (dt * dt_min).clamp(min=floor)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus⁻¹(dt)

    def features(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q and k as the rule reads them: activation, L2 norm per head; q scaled by 1/√D."""
        if self.params.qk_activation == "silu":
            q, k = F.silu(q), F.silu(k)
        q = F.normalize(q, dim=-1, eps=NORM_EPS) / math.sqrt(q.shape[-1])
        return q, F.normalize(k, dim=-1, eps=NORM_EPS)

    def rule_inputs(self, k, v, gates):
        """k, v (repeated where the decay has more heads than they), β (B, H_s, M, 1) and the
        log-decay g (B, H_s, M, D) per state head."""
        heads, have = self.A_log.shape[0], k.shape[1]
        a_log, dt_bias = self.A_log.to(k.dtype), self.dt_bias.to(k.dtype)
        raw_beta = raw_gate(gates, "beta", k, 1)
        raw_alpha = raw_gate(gates, "alpha", k, k.shape[-1])
        if have > heads and have % heads == 0:  # keys repeated past the decay's heads
            a_log = a_log.repeat_interleave(have // heads)
            dt_bias = dt_bias.repeat_interleave(have // heads, dim=0)
        elif heads > have and heads % have == 0:  # a decay per query head: a state each
            k, v, raw_beta, raw_alpha = (
                x.repeat_interleave(heads // have, dim=1) for x in (k, v, raw_beta, raw_alpha)
            )
        elif heads != have:
            raise ValueError(
                f"kda has a decay for {heads} heads; keys with {have} heads do not divide or "
                "repeat them."
            )
        log_alpha = -a_log.exp().view(-1, 1, 1) * F.softplus(raw_alpha + dt_bias.unsqueeze(1))
        beta = torch.sigmoid(raw_beta)
        return k, v, 2 * beta if self.params.negative_eigenvalues else beta, log_alpha

    def _scan(self, q, k, v, gates, causal, state=None, cu_seqlens=None):
        """The rule on inputs in the working dtype: outputs (B, H, N, Dv) and the final state;
        ``cu_seqlens``: documents packed along the sequence, in one pass (`dplr_chunks`)."""
        fq, fk = self.features(q, k)
        fk, v, beta, log_alpha = self.rule_inputs(fk, v, gates)
        n, m = q.shape[-2], k.shape[-2]
        if causal and n < m:  # query i reads S_i: the keys after the last query are never read
            fk, v, beta, log_alpha = (x[:, :, :n] for x in (fk, v, beta, log_alpha))
        head = fq[:, :, :m] if causal and n > m else fq
        written = beta * fk
        inputs = (head, written, v, -written, fk, log_alpha)
        c = self.last_chunk = machine_chunk(
            f"{self.name} chunks", self.params.chunk_size, inputs, causal
        )
        out, state = dplr_chunked(*inputs, c, state, causal, cu_seqlens)
        if causal and n > m:  # queries past the last key read S_M
            out = torch.cat([out, per_query_head(fq[:, :, m:], state)], dim=2)
        return out, state

    def forward_flops(self, batch, heads, n, m, d, dv, causal) -> float:
        """The matrix products of the chunked form at the last call's chunk (`dplr_flops`); the
        element-wise pairwise
        sums, gates, norms and decays are not counted. The backward is the default (two
        products per forward product)."""
        kv = heads * self.shape.kv_heads / self.shape.n_heads
        if causal and n != m:
            m = n = min(n, m)  # later queries read the final state: counted as n = m
        return batch * dplr_flops(heads, kv, n, m, d, dv, causal, self.last_chunk)


@register_incremental("kda")
class KDAIncremental(RuleIncremental):
    """`kda` token by token: the state S alone, D×Dv per state head (per key/value head, or per
    query head where the decay has a head per query head), the same at every length: all a
    sequence keeps (a token's gates enter at that token only). A step applies the recurrence;
    a prefill runs the chunked form from the state held."""

    head_parameter = "A_log"

    def _step(self, q, k, v, gates, state):
        fq, fk = self.variant.features(q, k)
        fk, v, beta, log_alpha = self.variant.rule_inputs(fk, v, gates)
        written = beta * fk
        return dplr_step(fq, written, v, -written, fk, log_alpha, state)
