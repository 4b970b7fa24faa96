"""`fox`: Forgetting Attention, the attention of the Forgetting Transformer (Lin, Nikishin, He &
Courville, ICLR 2025, "Forgetting Transformer: Softmax Attention with a Forget Gate").

Softmax attention whose logit for query i and key j <= i carries the log of the product of the
forget gates written since key j::

    o_i = Σ_{j<=i} softmax_j(q_i·k_j/√D + Σ_{l=j+1..i} log f_l) v_j,    f_l = sigmoid(raw_l)

one scalar forget gate per key/value head and token (gate ``"forget"``, width ``"head"``,
projected by the shared layer from its input as the paper's ``fgate_proj``; log f in (−∞, 0),
computed as logsigmoid). With the cumulative sum c_i = Σ_{l<=i} log f_l the bias is c_i − c_j;
c_i is one constant per row, so the softmax sees a per-key bias −c_j under the causal mask. With
every f = 1 (raw gate → +∞) it is `softmax`; a gate near 0 cuts the keys before it off.

Precision: c falls without bound (about −0.8 per token for standard-normal raw gates), so a
per-key bias −c_j of a long sequence is a large number whose float32 rounding (6·10⁻⁸ of
|c|, 4·10⁻⁴ at 8k) would move every weight; c is therefore summed in float64 and each bias
c_i − c_j taken in float64 before it is rounded to the inputs' dtype, where it is small for the
keys that carry weight.

Two paths compute it. In float32 on the CPU without autograd (a timing, a decode prefill),
the compiled tile kernel (`variants.kernels.tile.compiled_forget`): each 16-query tile adds to
its keys' scores c_ref − c_p and per lane c_i − c_ref, each a float-float pair of the float64
value, so no bias is ever materialised and every pair's bias is exact to its own rounding.
Elsewhere (autograd, other dtypes, CUDA, a value width not a multiple of 16)
`F.scaled_dot_product_attention` with the bias as a float mask, causal rows in tiles of at most
`BIAS_TILE_BYTES` of float64 bias (−∞ past each row's position), memory bounded at any length.
Why the kernel where it serves: at causal 8k it takes about 0.8 of dense causal SDPA's time,
where SDPA over the mask takes 3.5–5× (building the float64 bias dominates; docs/variants.md
has the numbers), at the same float32 error (3.8·10⁻⁷ and 3.5·10⁻⁷ against float64 at 2048).
Why the lanes' halves: one shift per key referred to the tile's last row leaves each row's
constant (up to 16 log gates) to float32 rounding at its own size (2·10⁻⁶ to 5·10⁻⁶ measured).

``causal=False`` (the paper is causal only): as the gated recurrent mixers (`delta_net`, `gla`),
every query reads the view of the last key: the bias is c_{M−1} − c_j for every query, the
forgetting seen from the end of the sequence (one (B, H, 1, M) row, broadcast, no N×M mask).
Causal with N ≠ M follows the causal convention: query i sees keys j <= min(i, M − 1), its
bias c_{min(i, M−1)} − c_j.

**Deviations from the paper's layer** (the rest of its layer, not this core): no QK-norm,
output gate, output norm or data-dependent token shift ("FoX (Pro)"), and the forget gate is one
per key/value head (the gate contract: it governs what a key/value head forgets), where the
paper has one per (query) head; with as many key/value heads as query heads they coincide. The
paper's FoX uses no RoPE; attnbench's models encode positions as their task sets, the same for
every variant.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attnbench import AttentionVariant, register_variant
from attnbench.incremental import register_incremental
from attnbench.variant import allowed_pairs, check_gates
from attnbench.variants.decoding import KeyValueCache
from attnbench.variants.kernels.tile import compiled_forget

BIAS_TILE_BYTES = 64 * 1024 * 1024  # float64 bias materialised at once by a causal forward


@dataclass
class FoxParams:
    """Hyperparameters of `fox` (none: the forget gate comes from the layer's input)."""


def log_forget(gates: dict[str, torch.Tensor]) -> torch.Tensor:
    """log f = logsigmoid(raw forget gate) per key, (B, H_kv, M), in float64 (module
    docstring: why float64)."""
    return F.logsigmoid(gates["forget"].squeeze(-1).double())


def forgetting_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_f: torch.Tensor,
    causal: bool,
    start: int = 0,
) -> torch.Tensor:
    """Forgetting attention of queries q (B, H, n, D) at positions start … start + n − 1 over
    keys k (B, H, M, D) and values v (B, H, M, Dv) at positions 0 … M − 1, with the keys' log
    forget gates ``log_f`` (B, H, M): (B, H, n, Dv) in q's dtype (module docstring).

    Causal: query p sees keys j <= min(p, M − 1) with bias c_{min(p, M−1)} − c_j; else every
    query sees every key with bias c_{M−1} − c_j."""
    c = log_f.double().cumsum(-1)
    m, n = k.shape[-2], q.shape[-2]
    scale = q.shape[-1] ** -0.5
    if start == 0:  # the compiled kernel where it serves (module docstring)
        out = compiled_forget(q, k, v, c, causal, scale)
        if out is not None:
            return out
    if not causal or (n == 1 and start >= m - 1):  # one row for every query: broadcast
        bias = (c[..., -1:] - c).unsqueeze(-2).to(q.dtype)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)
    b, h = q.shape[:2]
    rows = max(1, BIAS_TILE_BYTES // (8 * b * h * m))
    outs = []
    for s in range(0, n, rows):
        e = min(n, s + rows)
        positions = torch.arange(start + s, start + e, device=q.device)
        end = min(m, start + e)  # keys any row of the tile sees
        refs = c[..., positions.clamp(max=m - 1)]
        bias = (refs[..., :, None] - c[..., None, :end]).to(q.dtype)
        future = torch.arange(end, device=q.device)[None, :] > positions[:, None]
        bias = bias.masked_fill(future, float("-inf"))
        outs.append(
            F.scaled_dot_product_attention(
                q[:, :, s:e], k[:, :, :end], v[:, :, :end], attn_mask=bias, scale=scale
            )
        )
    return torch.cat(outs, dim=2)


@register_variant("fox")
class ForgettingAttention(AttentionVariant):
    """softmax(QKᵀ/√D + (c_i − c_j))·V with c the cumulative log forget gate: the compiled tile
    kernel where it serves, else SDPA with the bias as a float mask (module docstring)."""

    family = "softmax"
    cost = "n²"
    supports_causal = True
    Params = FoxParams
    gates = {"forget": "head"}
    # measured as the throughput task does (max error over max(1, max |float64 output|)) at
    # n = 512 and 4096, H = 4, D = 64, unit-normal inputs and raw gates, causal and not,
    # 3 seeds at 512, 1 at 4096: worst 3.6e-7 in float32 (the tile kernel; 3.8e-7 on the SDPA
    # path), 7.7e-4 in float16, 5.7e-3 in bfloat16 (the inputs' and the bias's rounding);
    # declared with a factor of about 10
    # (tests/variants/test_fox.py checks n = 512)
    error_tolerance = {"float64": 1e-12, "float32": 3e-6, "float16": 1e-2, "bfloat16": 6e-2}

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        causal: bool = False,
        gates: dict[str, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        self.check_inputs(q, k, v, causal)
        gates = check_gates(self, gates, k, v)
        return forgetting_attention(q, k, v, log_forget(gates), causal)

    def attention_weights(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        causal: bool = False,
        gates: dict[str, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """The (B, H, N, M) weights; they depend on the forget gates, so without them refused."""
        if gates is None:
            raise NotImplementedError(
                f"variant '{self.name}' weighs keys by its forget gates: its attention weights "
                "need them."
            )
        gates = check_gates(self, gates, k)
        c = log_forget(gates).cumsum(-1)
        n, m = q.shape[-2], k.shape[-2]
        rows = torch.arange(n, device=q.device).clamp(max=m - 1) if causal else None
        refs = c[..., rows] if causal else c[..., -1:].expand(*c.shape[:-1], n)
        logits = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
        logits = logits + (refs[..., :, None] - c[..., None, :]).to(q.dtype)
        if causal:
            future = (
                torch.arange(m, device=q.device)[None, :]
                > torch.arange(n, device=q.device)[:, None]
            )
            logits = logits.masked_fill(future, float("-inf"))
        return torch.softmax(logits, dim=-1)

    def forward_flops(self, batch, heads, n, m, d, dv, causal) -> float:
        """The two products over the scored pairs, 2·(D + Dv) per pair, every allowed pair
        (`allowed_pairs`; causal with N = M: N(N + 1)/2, FlashAttention's halved count with
        the diagonal); the bias (a few operations per pair, like the softmax's exps) is not
        counted."""
        return 2.0 * batch * heads * allowed_pairs(n, m, causal) * (d + dv)


@register_incremental("fox")
class ForgettingAttentionIncremental(KeyValueCache):
    """`fox` with a KV cache and each cached key's log forget gate: a later query may weigh any
    earlier key, and the bias it gives key j is the sum of the log gates after j, so every gate
    is kept. A step is one SDPA call of one query over the cache with the bias row c_t − c_j,
    the cumulative sum recomputed in float64 from the kept log gates (O(t), as the scores):
    a cumulative sum kept in float32 would carry its rounding, 6·10⁻⁸ of |c|, into every bias.
    Keys, values and gates are kept per key/value head (grouped-query: shared by a group): the
    cache of `KeyValueCache`, and the gates beside it."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        lead = (self.batch, self.kv_heads, self.max_len)
        self.log_f = torch.zeros(*lead, device=self.device, dtype=self.dtype)

    def state_size(self, n: int) -> int:
        """n·(D + Dv + 1) per key/value head: each key, its value and its log forget gate."""
        return n * self.kv_heads * (self.head_dim + self.value_dim + 1)

    def state_tensors(self) -> list[torch.Tensor]:
        p = self.position
        return [self.keys[:, :, :p], self.values[:, :, :p], self.log_f[:, :, :p]]

    def _extend(self, q, k, v, gates):
        t, n = self.position, q.shape[-2]
        self.keys[:, :, t : t + n] = k
        self.values[:, :, t : t + n] = v
        log_f = log_forget(gates)
        self.log_f[:, :, t : t + n] = log_f.to(self.dtype)
        keys, values = (self.repeat_kv(x[:, :, : t + n]) for x in (self.keys, self.values))
        # the kept gates in the cache's dtype for the past, the new ones as computed: in
        # float64 both are the forward's values exactly
        history = torch.cat([self.log_f[:, :, :t].double(), log_f], dim=-1)
        return forgetting_attention(q, keys, values, self.repeat_kv(history), True, start=t)
