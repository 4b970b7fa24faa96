"""`mesa`: the mesa layer (von Oswald et al. 2025, "MesaNet: Sequence Modeling by Locally Optimal
Test-Time Training"): at every token, the exact regularised least-squares read-out.

Per key/value head it keeps two states,

    H_t = γ_t H_{t−1} + β_t k_t k_tᵀ   (D×D),        G_t = γ_t G_{t−1} + β_t k_t v_tᵀ   (D×Dv),

and answers o_t = G_tᵀ (H_t + Λ)⁻¹ q_t: the prediction at q_t of the ridge regression of the
values on the keys seen so far (weighted by β, forgotten by γ), with regulariser Λ. With γ = β = 1
this is exactly ridge regression on the prefix (the theory test). The gates and Λ follow the
paper's layer as flash-linear-attention implements it (``fla/layers/mesa_net.py``): γ_t =
sigmoid(raw) (log γ = logsigmoid(raw)), β_t = sigmoid(raw), one each per key/value head and token
(gates ``"gamma"`` and ``"beta"``, width ``"head"``); Λ = diag(λ) with λ = softplus(p) + 0.25 per
query head and key channel (a learnable parameter, so always above the lower bound 0.25),
initialised to λ = 1; q and k L2-normalised inside the layer (fla's
``use_qk_l2norm_in_kernel=True``), which bounds H_t's spectrum by the β-weighted count of keys.
Not here: the short convolutions on q and k and the output RMSNorm of the paper's block (the
shared layer makes q, k, v).

The solve. Causal: every token has its own system (H_t + Λ) x_t = q_t; they are solved together
by conjugate gradient, as in the paper, ``cg_steps`` iterations (30, fla's default) from x = 0,
batched over all tokens: an iteration applies every H_t at once, which is one causal pass of
decayed linear attention with the search directions as queries, keys β_s k_s and values k_s,
H_t p_t = Σ_{s ≤ t} e^{b_t − b_s} β_s k_s (k_s·p_t) (b the cumulative log γ): within a chunk of
C positions a masked C×C product, the past through H at the chunk's start, computed once before
the iterations (chunk states as in `attnbench.variants.recurrent.gla`, decays only as exp of
differences ≤ 0). CG on a symmetric positive definite D×D system is exact after D steps in exact
arithmetic and converges as ((√κ − 1)/(√κ + 1))^i; H_t + Λ has κ ≤ 1 + (Σ β-weighted keys)/λ_min,
so 30 steps reach float32 rounding for the gates of a trained layer (tests: the float64 error
against a direct solve). ``cg_tol`` > 0 stops earlier once every token's residual
‖q_t − (H_t + Λ) x_t‖ is at most cg_tol·‖q_t‖. Non-causal (every query reads the state after the
last key) and a decoding step (one new system) solve directly by Cholesky: one D×D
factorisation per head, cheaper there than 30 matrix-vector products.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from attnbench import AttentionVariant, VariantShape, register_variant
from attnbench.incremental import IncrementalAttention, register_incremental
from attnbench.variants.kernels import autotune
from attnbench.variants.recurrent.mixer import GatedMixer
from attnbench.variants.recurrent.precision import compute_dtype

BLOCK_CHUNKS = 32  # chunks whose tokens are solved together (bounds the memory of the CG)
# chunk lengths a machine chooses among (`autotune.choose_chunk`); the first is the default (the
# one set before the tuning), which a call too small to tune, or solved directly, runs
DEFAULT_CHUNK = 32
CHUNKS = (DEFAULT_CHUNK, 16, 64, 128)
# λ below which 1/λ, the solve's first step size, is a normal float32 (`Mesa.__init__`)
LAMBDA_LIMIT = 1.0 / torch.finfo(torch.float32).tiny


@dataclass
class MesaParams:
    """Hyperparameters of `mesa` (defaults: flash-linear-attention's MesaNet layer)."""

    cg_steps: int = 30  # conjugate-gradient iterations of the causal solve (fla: 30)
    cg_tol: float = 0.0  # stop once every residual ≤ cg_tol·‖q‖; 0: always cg_steps (as fla)
    lambda_min: float = 0.25  # λ = softplus(p) + lambda_min > 0 (fla lambda_lower_bound)
    lambda_init: float = 1.0  # λ at initialisation (fla: 1)
    normalise_qk: bool = True  # L2-normalise q and k (fla use_qk_l2norm_in_kernel)
    # positions per chunk of the causal passes; 0: chosen on the machine (`CHUNKS`, `Mesa.chunk`)
    chunk_size: int = 0


def _chunk_weights(b: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """W[t, s] = e^{b_t − b_s}·β_s for s ≤ t within each chunk, else 0 (b, β: (…, C, 1)); the
    exponent masked to −inf above the diagonal before the exp, so every factor is ≤ 1."""
    c = b.shape[-2]
    upper = torch.ones(c, c, dtype=torch.bool, device=b.device).triu(1)
    diff = (b - b.transpose(-1, -2)).masked_fill(upper, float("-inf"))
    return torch.exp(diff) * beta.transpose(-1, -2)


def mesa_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_gamma: torch.Tensor,
    beta: torch.Tensor,
    lam: torch.Tensor,
    params: MesaParams,
    causal: bool,
    state: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Outputs o_t = G_tᵀ (H_t + Λ)⁻¹ q_t and the final (H, G) (module docstring).

    Args:
        q: Queries (B, H, N, D) (normalised by the caller if the layer does).
        k: Keys (B, H_kv, M, D); v: values (B, H_kv, M, Dv).
        log_gamma, beta: log γ_t ≤ 0 and β_t, (B, H_kv, M, 1).
        lam: Λ's diagonal per query head, (H, D), all > 0.
        params: the cg_steps, cg_tol and chunk_size used.
        causal: Query i solves with (H_i, G_i) (with N ≠ M: those after key min(i, M − 1));
            else every query with the state after the last key.
        state: (H, G) before the first key, (B, H_kv, D, D) and (B, H_kv, D, Dv); None: zeros.
    """
    bsz, heads, n, d = q.shape
    kv, m, dv = k.shape[1], k.shape[-2], v.shape[-1]
    group = heads // kv
    qg = q.reshape(bsz, kv, group, n, d)
    k, v, g, beta = (x.unsqueeze(2) for x in (k, v, log_gamma, beta))
    lam = lam.to(q.dtype).reshape(1, kv, group, 1, d)
    if state is None:
        hs, gs = q.new_zeros(bsz, kv, 1, d, d), q.new_zeros(bsz, kv, 1, d, dv)
    else:
        hs, gs = (x.unsqueeze(2).to(q.dtype) for x in state)
    if not causal:
        after = g.flip(-2).cumsum(-2).flip(-2) - g  # Σ_{r > s} log γ_r
        through = torch.exp(g.sum(-2)).unsqueeze(-1)
        written = (k * beta * torch.exp(after)).transpose(-1, -2)
        hs, gs = hs * through + written @ k, gs * through + written @ v
        return _solve_and_read(qg, hs, gs, lam).reshape(bsz, heads, n, dv), (
            hs.squeeze(2),
            gs.squeeze(2),
        )
    if m > n:
        k, v, g, beta = (x[..., :n, :] for x in (k, v, g, beta))
    if _solves_directly(params, state, qg.shape, m):
        return _direct(qg, k, v, g, beta, lam)
    c = min(params.chunk_size, n)
    padded = n + (-n) % c
    qg = F.pad(qg, (0, 0, 0, padded - n))  # zero queries: zero residual, zero output
    k, v, g, beta = (F.pad(x, (0, 0, 0, padded - x.shape[-2])) for x in (k, v, g, beta))
    outs = []
    for start in range(0, padded, c * BLOCK_CHUNKS):
        qc, kc, vc, gc, bc = (
            x[..., start : start + c * BLOCK_CHUNKS, :].unflatten(-2, (-1, c))
            for x in (qg, k, v, g, beta)
        )  # (B, H_kv, G or 1, K, C, ·)
        b = gc.cumsum(-2)
        last = b[..., -1:, :]
        weights = _chunk_weights(b, bc)  # (…, K, C, C)
        written = (kc * bc * torch.exp(last - b)).transpose(-1, -2)  # to the chunk's end
        own_h, own_g = written @ kc, written @ vc
        through = torch.exp(last)  # (…, K, 1, 1)
        starts_h, starts_g = [], []
        # each chunk's pieces taken apart once (`unbind`): indexing one in the loop gives each
        # index a backward that writes a gradient of the whole block
        pieces = zip(*(x.unbind(-3) for x in (through, own_h, own_g)), strict=True)
        for through_u, own_h_u, own_g_u in pieces:
            starts_h.append(hs)
            starts_g.append(gs)
            hs = hs * through_u + own_h_u
            gs = gs * through_u + own_g_u
        h0, g0 = torch.stack(starts_h, dim=3), torch.stack(starts_g, dim=3)
        decay_in = torch.exp(b)  # from the chunk's start to each position, ≤ 1

        system = (kc, weights, decay_in, h0, lam.unsqueeze(3))
        with torch.no_grad():
            # contiguous once (kc is a slice across heads, and its transpose a view): the
            # iterations' batched products would otherwise copy both at every step
            fixed = (kc.detach().contiguous(), kc.detach().transpose(-1, -2).contiguous())
            fixed += tuple(t.detach() for t in system[1:])
            x = conjugate_gradient(
                lambda p, fixed=fixed: _apply(p, *fixed), qc, params.cg_steps, params.cg_tol
            )
        if torch.is_grad_enabled() and any(t.requires_grad for t in (qc, *system)):
            # implicit differentiation: x + A⁻¹(q − A x) has x's value and the exact gradient
            # A⁻¹(dq − dA·x), the A⁻¹ applied by CG in the backward (`_ImplicitSolve`)
            residual = qc - _apply(x, kc, kc.transpose(-1, -2), *system[1:])
            x = x + _ImplicitSolve.apply(residual, fixed, params.cg_steps, params.cg_tol)
        out = ((x @ kc.transpose(-1, -2)) * weights) @ vc + (x * decay_in) @ g0
        outs.append(out.flatten(-3, -2))
    out = torch.cat(outs, dim=-2)[..., :n, :].reshape(bsz, heads, n, dv)
    return out, (hs.squeeze(2), gs.squeeze(2))


# a causal call whose per-token systems (B·H·N·D² entries) fit in this many is solved directly
DIRECT_MAX_ENTRIES = 1 << 22  # 16 MiB of float32 systems
# ... and whose length is at most this: the direct form weighs every pair of positions (an N×N
# matrix per head), which must not make a linear-cost layer quadratic in memory at long lengths
DIRECT_MAX_POSITIONS = 512


def _solves_directly(params: MesaParams, state, shape: torch.Size, m: int) -> bool:
    """Whether a causal call solves each token's system directly (`_direct`) rather than by the
    batched conjugate gradient: the answer CG converges to, computed exactly, where that is
    cheap. CG on a D×D system is exact after D steps in exact arithmetic, so with ``cg_steps``
    >= D and no early stop (``cg_tol`` 0) both compute the same solution up to rounding; the
    direct one builds every token's H_t (N·D² per head) and weighs every pair of positions
    (N² per head), so only where those fit in `DIRECT_MAX_ENTRIES` and `DIRECT_MAX_POSITIONS`
    and the sequence starts from zero state (training's and a prefill's
    case). Training at short lengths is where it pays: 30 CG iterations of about ten small
    operations each, forward and backward, made mesa 4× the cost of the other mixers' jobs in
    the quick sweep."""
    bsz, kv, group, n, d = shape
    return (
        state is None
        and params.cg_tol == 0.0
        and params.cg_steps >= d
        and n == m
        and n <= DIRECT_MAX_POSITIONS
        and bsz * kv * group * n * d * d <= DIRECT_MAX_ENTRIES
    )


def _direct(qg, k, v, g, beta, lam):
    """Causal mesa by one batched solve: H_t = Σ_{s≤t} W[t, s] k_s k_sᵀ with W[t, s] =
    e^{b_t − b_s}·β_s, x_t = (H_t + Λ)⁻¹ q_t by Cholesky (H_t + Λ is symmetric positive
    definite: Λ > 0), o_t = Σ_{s≤t} W[t, s] (k_s·x_t) v_s. Returns the outputs and the final
    state, as `mesa_attention`."""
    bsz, kv, group, n, d = qg.shape
    weights = _chunk_weights(g.cumsum(-2), beta)  # (B, H_kv, 1, N, N): the whole sequence
    outer = (k.unsqueeze(-1) * k.unsqueeze(-2)).flatten(-2)  # k_s k_sᵀ: (…, N, D²)
    systems = (weights @ outer).unflatten(-1, (d, d))  # H_t: (…, 1, N, D, D)
    regularised = systems + torch.diag_embed(lam.squeeze(-2)).unsqueeze(-3)  # (…, G, N, D, D)
    factor = torch.linalg.cholesky(regularised)
    x = torch.cholesky_solve(qg.unsqueeze(-1), factor).squeeze(-1)  # (B, H_kv, G, N, D)
    out = ((x @ k.transpose(-1, -2)) * weights) @ v
    last = weights[..., -1:, :].transpose(-1, -2)  # W[N−1, s]: (…, N, 1)
    gs = (k * last).transpose(-1, -2) @ v  # G_N: (B, H_kv, 1, D, Dv)
    return out.reshape(bsz, kv * group, n, -1), (systems[..., -1, :, :].squeeze(2), gs.squeeze(2))


def _apply(p, kc, kt, weights, decay_in, h0, lam) -> torch.Tensor:
    """(H_t + Λ) p_t for every token t of a block at once: the masked C×C pass within each chunk
    (``weights`` = e^{b_t − b_s} β_s; ``kt`` is ``kc`` transposed), the chunk-start H for the
    past, and Λ."""
    if torch.is_grad_enabled():  # the residual's graph: out of place
        within = ((p @ kt) * weights) @ kc
        return torch.addcmul(torch.addcmul(within, decay_in, p @ h0), lam, p)
    # the solve's iterations: every temporary updated in place
    within = (p @ kt).mul_(weights) @ kc
    return within.addcmul_(decay_in, p @ h0).addcmul_(lam, p)  # e^{b}·(p H₀) + Λp


class _ImplicitSolve(torch.autograd.Function):
    """0 in the forward, A⁻¹·grad in the backward (A = H_t + Λ, symmetric, by CG on the detached
    system): added to the solution x as A⁻¹ applied to the residual q − A(θ)x, it gives x the
    gradient of the exact solve, A⁻¹(dq − dA·x), by implicit differentiation, instead of the
    gradient of the unrolled iterations (whose ratios of vanishing residuals overflow once CG
    has converged, and whose graph holds every iteration)."""

    @staticmethod
    def forward(ctx, residual, system, steps, tol):
        ctx.system, ctx.steps, ctx.tol = system, steps, tol
        return torch.zeros_like(residual)

    @staticmethod
    def backward(ctx, grad):
        with torch.no_grad():
            solved = conjugate_gradient(lambda p: _apply(p, *ctx.system), grad, ctx.steps, ctx.tol)
        return solved, None, None, None


def conjugate_gradient(apply, rhs: torch.Tensor, steps: int, tol: float = 0.0) -> torch.Tensor:
    """x with apply(x) ≈ rhs, each row (…, D) its own symmetric positive definite system, by
    ``steps`` conjugate-gradient iterations from x = 0, batched over the rows; earlier once
    every row's residual is at most tol·‖rhs‖ (tol > 0). A converged row (residual exactly 0,
    e.g. a zero right-hand side) takes steps of 0, never 0/0. Updates in place: call it
    without autograd (the gradient is implicit, `_ImplicitSolve`)."""
    x = torch.zeros_like(rhs)
    r = rhs.clone()
    p = r.clone()
    rr = _squared_norm(r)
    limit = tol * tol * rr if tol > 0 else None
    for _ in range(steps):
        ap = apply(p)
        alpha = _ratio(rr, torch.linalg.vecdot(p, ap).unsqueeze(-1))
        x.addcmul_(alpha, p)
        r.addcmul_(alpha, ap, value=-1.0)
        rr_new = _squared_norm(r)
        torch.addcmul(r, _ratio(rr_new, rr), p, out=p)  # p ← r + (rr_new / rr)·p, one pass
        rr = rr_new
        if limit is not None and bool((rr <= limit).all()):
            break
    return x


def _squared_norm(r: torch.Tensor) -> torch.Tensor:
    """Each row's r·r, (…, 1): one reduction pass (a dot product multiplies into a temporary
    first, and the solve is bound by its passes over memory)."""
    return torch.linalg.vector_norm(r, dim=-1, keepdim=True).square()


def _ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """num / den for den ≥ 0, with 0 / 0 = 0: CG's ratios where a row has converged exactly
    (a zero right-hand side: r = p = 0). The denominator is raised to the least normal number,
    never to a value that changes a ratio of a row still iterating."""
    return num / den.clamp_min(torch.finfo(den.dtype).tiny)


def _solve_and_read(
    qg: torch.Tensor, hs: torch.Tensor, gs: torch.Tensor, lam: torch.Tensor
) -> torch.Tensor:
    """(H + Λ)⁻¹ and G read at every query, for one state per key/value head: queries
    (B, H_kv, G, n, D), hs (B, H_kv, 1, D, D), gs (B, H_kv, 1, D, Dv), Λ (1, H_kv, G, 1, D).
    The inverse by Cholesky (H + Λ is symmetric positive definite: Λ > 0), then one product
    W = (H + Λ)⁻¹ G per query head, read by q·W."""
    system = hs + torch.diag_embed(lam.squeeze(-2))
    inverse = torch.cholesky_inverse(torch.linalg.cholesky(system))
    return qg @ (inverse @ gs)


def _mesa_flops(
    variant: AttentionVariant, b: int, h: int, n: int, m: int, d: int, dv: int, causal: bool
) -> float:
    """The matrix products of `mesa_attention` (what ``torch.utils.flop_counter`` sees); a causal
    call it solves directly (`_solves_directly`) counts `_direct`'s.

    Per key/value head, the states: 2·M·D·(D + Dv). Non-causal, per query head: W = (H + Λ)⁻¹G,
    2·D²·Dv, and q·W, 2·N·D·Dv. Causal, per query head and token: each of the ``cg_steps``
    iterations 4·C·D (the masked C×C pass) + 2·D² (the chunk-start H), the read-out
    2·C·(D + Dv) + 2·D·Dv. Not counted: the Cholesky factorisation and inverse (D³ per head,
    independent of N), the CG's dot products and updates (O(D) per token and step), the decay
    weights; with ``cg_tol`` > 0 a run that stops early does fewer steps than counted here.
    """
    kv = h * variant.shape.kv_heads / variant.shape.n_heads
    grouped = (b, int(kv), h // max(int(kv), 1), n, d)
    if causal and _solves_directly(variant.params, None, grouped, m):
        # `_direct`: every H_t (2·N²·D² per key/value head), the read-out's two N×N products
        # per query head, the final G (2·N·D·Dv); not counted: the Cholesky solves
        return 2.0 * b * kv * n * (n * d * d + d * dv) + 2.0 * b * h * n * n * (d + dv)
    states = 2.0 * b * kv * m * d * (d + dv)
    if not causal:
        return states + 2.0 * b * h * (d * d * dv + n * d * dv)
    c = min(variant.last_chunk, n)
    step = 4 * c * d + 2 * d * d
    readout = 2 * c * (d + dv) + 2 * d * dv
    return states + b * h * n * (variant.params.cg_steps * step + readout)


@register_variant("mesa")
class MesaAttention(GatedMixer):
    """The mesa layer: ridge regression of values on keys at every token (module docstring)."""

    family = "mesa"
    estimator = "ridge"  # the regularised least-squares solution on the prefix (theory.md)
    cost = "n"
    supports_causal = True
    grouped_query = True  # H and G per key/value head; Λ per query head
    gates = {"gamma": "head", "beta": "head"}
    Params = MesaParams
    # measured (tests/variants/test_mesa.py::test_error_in_each_dtype_…) over 1024 causal
    # positions, H = 4, D = 64, standard-normal inputs and gates, λ = 1, against the float64
    # forward (itself a direct solve to 1e-10), relative to the output's scale: float32 2.6e-7
    # after 30 CG steps, float16 2.8e-4, bfloat16 2.3e-3 (inputs rounded, computed in float32)
    error_tolerance = {"float64": 1e-10, "float32": 1e-5, "float16": 2e-2, "bfloat16": 5e-2}

    def __init__(self, params: MesaParams, shape: VariantShape) -> None:
        super().__init__(params, shape)
        p = params
        self.last_chunk = p.chunk_size or DEFAULT_CHUNK  # what the last call ran with
        if p.cg_steps < 1 or p.chunk_size < 0 or not p.cg_tol >= 0:
            raise ValueError(
                f"mesa needs cg_steps >= 1, chunk_size >= 1 (or 0 to choose it on the machine) "
                f"and cg_tol >= 0; got cg_steps="
                f"{p.cg_steps}, chunk_size={p.chunk_size}, cg_tol={p.cg_tol}."
            )
        if not 0 < p.lambda_min < p.lambda_init:
            raise ValueError(
                f"mesa needs 0 < lambda_min < lambda_init; got {p.lambda_min}, {p.lambda_init}."
            )
        # softplus⁻¹(y) = log(eᵞ − 1) = y + log(1 − e⁻ᵞ), written so that it holds for every y > 0:
        # eᵞ overflows a float from y ≈ 710, where softplus⁻¹(y) is y to the last digit
        # the solve's first step is 1/λ: a subnormal in float32 from λ = 1/tiny (8.5e37), which
        # a job flushes to zero, and the causal read came out non-finite there
        if not p.lambda_init < LAMBDA_LIMIT:
            raise ValueError(
                f"mesa lambda_init={p.lambda_init} is too large: its solve divides by λ, whose "
                f"inverse must be a normal float32; give lambda_init below {LAMBDA_LIMIT:.3g}."
            )
        y = p.lambda_init - p.lambda_min
        init = y + math.log(-math.expm1(-y))
        self.lambda_params = nn.Parameter(torch.full((shape.n_heads, shape.head_dim), init))

    def regulariser(self) -> torch.Tensor:
        """Λ's diagonal, (H, D): softplus(p) + lambda_min."""
        return F.softplus(self.lambda_params) + self.params.lambda_min

    def prepare(
        self, q: torch.Tensor, k: torch.Tensor, gates: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(q, k normalised as the layer does, log γ, β) from the raw gates."""
        if self.params.normalise_qk:
            q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        return q, k, F.logsigmoid(gates["gamma"]), torch.sigmoid(gates["beta"])

    def scan(self, q, k, v, gates, causal, state=None):
        """`mesa_attention` on the parametrised gates, in `compute_dtype`: (out, (H, G))."""
        dtype = compute_dtype(q.dtype)
        q, k, v = (x.to(dtype) for x in (q, k, v))
        q, k, log_gamma, beta = self.prepare(q, k, {n: g.to(dtype) for n, g in gates.items()})
        lam = self.regulariser().to(dtype)
        c = self.last_chunk = self.chunk(q, k, v, log_gamma, beta, lam, causal, state)
        params = replace(self.params, chunk_size=c)
        return mesa_attention(q, k, v, log_gamma, beta, lam, params, causal, state)

    def chunk(self, q, k, v, log_gamma, beta, lam, causal: bool, state) -> int:
        """The chunk length C of this call: the parameter where it is set, else the machine's
        choice for the call's class (`autotune.choose_chunk` among `CHUNKS`, timed on the
        forward without autograd over its first positions): the masked C×C
        pass of each solver step grows with C, the chunk-start states with N / C."""
        if self.params.chunk_size:
            return self.params.chunk_size
        b, kv, m, d = k.shape
        grouped = (b, kv, q.shape[1] // kv, q.shape[2], d)
        if not causal or _solves_directly(self.params, state, grouped, m):
            return DEFAULT_CHUNK  # no chunks
        end = autotune.CHUNK_PROBE_POSITIONS
        parts = [x[:, :, :end].detach() for x in (q, k, v, log_gamma, beta)]
        cut = lam.detach()

        def run(c: int) -> object:
            params = replace(self.params, chunk_size=c)
            return mesa_attention(*parts, cut, params, True)

        steps = self.params.cg_steps
        return autotune.choose_chunk(f"{self.name} chunks", q, k, v, CHUNKS, run, cg_steps=steps)

    def forward_flops(self, batch, heads, n, m, d, dv, causal) -> float:
        return _mesa_flops(self, batch, heads, n, m, d, dv, causal)

    def backward_flops(self, batch, heads, n, m, d, dv, causal) -> float:
        """Non-causal: twice the forward (autograd through the states, the Cholesky inverse
        uncounted, and the read-out). Causal, the gradient is implicit (`_ImplicitSolve`), not
        twice the unrolled iterations: one more solve of ``cg_steps`` steps, the products of
        the residual pass that reach the states (6·C·D + 2·D² per query head and token: no
        gradient for the detached x), and twice the read-out and the states."""
        kv = heads * self.shape.kv_heads / self.shape.n_heads
        shape = (batch, int(kv), heads // max(int(kv), 1), n, d)
        if not causal or _solves_directly(self.params, None, shape, m):  # autograd throughout
            return super().backward_flops(batch, heads, n, m, d, dv, causal)
        c = min(self.last_chunk, n)
        step = 4 * c * d + 2 * d * d
        readout = 2 * c * (d + dv) + 2 * d * dv
        residual = 6 * c * d + 2 * d * d
        states = 2.0 * batch * kv * m * d * (d + dv)
        per_token = self.params.cg_steps * step + residual + 2 * readout
        return 2 * states + batch * heads * n * per_token


@register_incremental("mesa")
class MesaIncremental(IncrementalAttention):
    """Decoding `mesa`: H (D×D) and G (D×Dv) per key/value head, the same size at every length.
    A step updates both and solves its one system directly (Cholesky); a prefill of n > 1 tokens
    runs the causal conjugate-gradient form from the state."""

    grouped_query = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        b, kv, d, dv = self.batch, self.kv_heads, self.head_dim, self.value_dim
        self.h = torch.zeros(b, kv, d, d, device=self.device, dtype=self.dtype)
        self.g = torch.zeros(b, kv, d, dv, device=self.device, dtype=self.dtype)

    def state_size(self, n: int) -> int:
        """kv_heads·(D² + D·Dv) whatever n: H and G are all a later token reads of the past."""
        return self.kv_heads * self.head_dim * (self.head_dim + self.value_dim)

    def state_tensors(self) -> list[torch.Tensor]:
        return [self.h, self.g]

    def _extend(self, q, k, v, gates):
        variant, out_dtype = self.variant, q.dtype
        if q.shape[-2] > 1:
            out, (h, g) = variant.scan(q, k, v, gates, causal=True, state=(self.h, self.g))
        else:
            dtype = compute_dtype(q.dtype)
            q, k, v = (x.to(dtype) for x in (q, k, v))
            q, k, log_gamma, beta = variant.prepare(
                q, k, {n: x.to(dtype) for n, x in gates.items()}
            )
            gamma = torch.exp(log_gamma)  # (B, H_kv, 1, 1)
            written = (k * beta).transpose(-1, -2)  # (B, H_kv, D, 1)
            h = self.h.to(dtype) * gamma + written @ k
            g = self.g.to(dtype) * gamma + written @ v
            b, heads, _, d = q.shape
            qg = q.reshape(b, self.kv_heads, self.group, 1, d)
            lam = variant.regulariser().to(dtype).reshape(1, self.kv_heads, self.group, 1, d)
            out = _solve_and_read(qg, h.unsqueeze(2), g.unsqueeze(2), lam)
            out = out.reshape(b, heads, 1, -1)
        self.h.copy_(h)
        self.g.copy_(g)
        return out.to(out_dtype)
