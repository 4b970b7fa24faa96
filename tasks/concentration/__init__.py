"""Concentration diagnostics: does a variant's attention focus? (theory.md §2)

Per attention row a (a query's weights over the keys it may see: all M keys, or j ≤ i when
causal; a masked position is not part of the row's distribution):
- empty_rows: the fraction of rows with no non-zero weight (relu² with a negative bias, for
  instance). An empty row attends to nothing; it is not uniform, so it is left out of the
  statistics below rather than scored as S = 1, entropy log M;
- S(a) = E|a| / sqrt(E[a²]) over the row's allowed keys, in (0, 1]: 1 for uniform rows, 1/√n
  for one-hot; defined for signed or unnormalised rows too;
- entropy H = −Σ p log p and effective size exp(H), of p = |a| / Σ|a| (so they apply to any row);
- max weight max_j p_j;
- doubly-stochastic error: max over rows of |Σ_j a_ij − 1| and over columns of |Σ_i a_ij − N/M|
  (over every row, the empty ones included: their sums are 0);
- Sinkhorn divergence (gaussian source, not causal): how far the weight the plan gives each key
  is from the uniform weight of the entropic OT plan with both marginals, in the keys' geometry
  (`ot_divergence.key_marginal_divergence`; 0 for a converged Sinkhorn).
S, entropy, effective size and max weight are means over the non-empty rows (pooled over the
draws); where every row is empty they are not reported at that scale.

``source=gaussian`` (no training): keys k_j ~ N(0, I_d), queries q_i = scale·√d·u_i with unit
u_i, so the logits q·k/√d of every query are exactly N(0, γ²) with γ = scale (theory's setting
with β = 0, σ = 1); swept over ``scales`` (x axis "scale"). Where the variant is a built-in with
a closed form of its own family (`closed_form`, `tasks.concentration.theory`), it is reported as
``sparsity_s_theory`` at the scales where it applies at this N (and never for causal rows, the
first of which see a single key).
``source=recall``: the attention maps of a model trained on a small recall task (64 tokens,
8 pairs, vocabulary 64, width 32, ``recall_steps`` steps of 16 sequences), per layer (x axis
"layer").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

import torch

from attnbench import (
    JobContext,
    Metric,
    MetricPoint,
    Task,
    TaskResult,
    UnsupportedError,
    VariantShape,
    random_gates,
    register_task,
)
from attnbench.metrics import DENSITY
from attnbench.tasks.concentration import ot_divergence, theory
from attnbench.toolkit.contract import checked_weights

# The built-in variant classes that have a closed form, by qualified name. Named, not imported: a
# job's code fingerprint covers the modules its task imports, so importing every variant here
# would make a change to any variant re-run every concentration job of every other variant.
SOFTMAX = "attnbench.variants.softmax.SoftmaxAttention"
SINKHORN = "attnbench.variants.sinkhorn.SinkhornAttention"
IDENTITY = "attnbench.variants.linear.IdentityAttention"
LINEAR = "attnbench.variants.linear.LinearAttention"
RELU2 = "attnbench.variants.pointwise.Relu2Attention"
SIGMOID = "attnbench.variants.pointwise.SigmoidAttention"
DECAY = "attnbench.variants.decay.DecayAttention"

SOURCES = ("gaussian", "recall")
RECALL_SEQ_LEN = 64  # source=recall: length of the recall model's sequences (causal)
# the draw on which the weights are checked against the forward (`check_weights`): tokens, heads
# and head dimension, enough for several blocks of a sparse pattern and more than one head
CHECK_SHAPE = (32, 2, 16)
ROW_STATISTICS = ("sparsity_s", "entropy", "effective_size", "max_weight")  # over non-empty rows


def sparsity_s(rows: torch.Tensor, n_allowed: torch.Tensor | int | None = None) -> torch.Tensor:
    """S(x) = E|x| / sqrt(E x²) along the last dim, the means over ``n_allowed`` entries (default:
    all of them); NaN for an all-zero row, which has no S."""
    n = rows.shape[-1] if n_allowed is None else n_allowed
    return rows.abs().sum(-1) / (rows.square().sum(-1) * n).sqrt()


def allowed_keys(n: int, m: int, causal: bool) -> torch.Tensor:
    """(N, M) boolean: the keys each query may see (j ≤ i when causal, top-left aligned)."""
    allowed = torch.ones(n, m, dtype=torch.bool)
    return allowed.tril() if causal else allowed


def per_row_statistics(weights: torch.Tensor, causal: bool = False) -> dict[str, torch.Tensor]:
    """Per-row S, entropy, effective size and max weight of the non-empty rows (flattened over
    the leading dims), and a boolean ``empty`` per row.

    Args:
        weights: (…, N, M) attention weights (any sign, any normalisation).
        causal: Rows see only keys j ≤ i: S averages over those (masked zeros are not entries).
    """
    w = weights.double()
    n, m = w.shape[-2:]
    w = w.reshape(-1, n, m)
    n_allowed = allowed_keys(n, m, causal).sum(-1).double().expand(w.shape[0], n).reshape(-1)
    w = w.reshape(-1, m)
    empty = ~(w != 0).any(-1)
    w, n_allowed = w[~empty], n_allowed[~empty]
    p = w.abs() / w.abs().sum(-1, keepdim=True)
    entropy = -torch.special.xlogy(p, p).sum(-1)
    return {
        "empty": empty,
        "sparsity_s": sparsity_s(w, n_allowed),
        "entropy": entropy,
        "effective_size": entropy.exp(),
        "max_weight": p.amax(-1),
    }


def ds_error(weights: torch.Tensor) -> float:
    """max(|row sum − 1|, |column sum − N/M|) over all rows and columns."""
    w = weights.double()
    n, m = w.shape[-2:]
    row_err = (w.sum(-1) - 1).abs().amax()
    col_err = (w.sum(-2) - n / m).abs().amax()
    return float(torch.maximum(row_err, col_err))


def row_statistics(weights: torch.Tensor, causal: bool = False) -> dict[str, float]:
    """``empty_rows`` (fraction), ``ds_error``, and the means of S, entropy, effective size and
    max weight over the non-empty rows (absent when every row is empty)."""
    rows = per_row_statistics(weights, causal)
    out = {"empty_rows": float(rows["empty"].double().mean())}
    if not rows["empty"].all():
        out.update({k: float(rows[k].mean()) for k in ROW_STATISTICS})
    out["ds_error"] = ds_error(weights)
    return out


@dataclass
class ClosedForm:
    """A variant's closed-form S on the gaussian source (`closed_form`)."""

    label: str  # what it is, for the record's details (e.g. "softmax: exp(−γ²/2), γ = scale/ε")
    # (scale, queries (N, d), allowed (N, M)) → per-row (S, r): r is the relative standard error
    # of the key-average of f² that decides whether the n → ∞ form applies (concentration_theory)
    evaluate: Callable[[float, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def _constant(n_rows: int, s: float, r_of_n: Callable[[float], float], allowed: torch.Tensor):
    """Per-row (S, r) for a form whose S does not depend on the row and r only on its key count."""
    n_min = float(allowed.sum(-1).min())
    return torch.full((n_rows,), s, dtype=torch.float64), torch.full(
        (n_rows,), r_of_n(n_min), dtype=torch.float64
    )


def _softmax_form(temperature: float, what: str) -> ClosedForm:
    def evaluate(scale, q, allowed):
        gamma = scale / temperature
        s = theory.softmax_s_closed_form(gamma)
        return _constant(len(q), s, lambda n: theory.softmax_rel_se(gamma, n), allowed)

    return ClosedForm(f"{what}: exp(−γ²/2), γ = scale/{temperature:g}", evaluate)


def _identity_form(what: str) -> ClosedForm:
    def evaluate(scale, q, allowed):
        s = theory.identity_s_closed_form(0.0, 1.0)  # β = 0: S is free of γ
        return _constant(len(q), s, lambda n: theory.identity_rel_se(0.0, 1.0, n), allowed)

    return ClosedForm(f"{what}: identity form at β = 0, √(2/π)", evaluate)


@lru_cache
def _feature_cumulants(feature_map: str, phi) -> tuple[float, float, float, float]:
    """Cumulants of the variant's own feature map ``phi`` (named ``feature_map``: the cache key)."""
    return theory.feature_cumulants(lambda x: float(phi(torch.tensor(x, dtype=torch.float64))))


def closed_form(variant, n_keys: int) -> ClosedForm | None:
    """The closed form of S for this variant's own family on the gaussian source, or None.

    Keyed by the built-in class (its qualified name) and its params, not by ``family``: a plugin
    that declares family "softmax" may use other logits (the example plugin's cosine similarity),
    and a subclass may change the weights, so either gets no closed form rather than a wrong one.
    """
    p = variant.params
    kind = f"{type(variant).__module__}.{type(variant).__qualname__}"
    if kind == SOFTMAX:
        return _softmax_form(p.temperature, "softmax")
    if kind == SINKHORN and p.n_iters == 1:  # one half-step is softmax exactly
        return _softmax_form(p.temperature, "sinkhorn, 1 half-step = softmax")
    if kind == IDENTITY:
        return _identity_form("identity")
    if kind == LINEAR and p.feature_map == "identity":  # f = q·k, Gaussian, mean 0
        return _identity_form("linear, φ = identity")
    if kind == LINEAR:
        cumulants = _feature_cumulants(p.feature_map, variant.phi)

        def linear(scale, q, allowed):
            s, r = theory.linear_s_closed_form(variant.phi(q.double()), cumulants, 1)
            return s, r / allowed.sum(-1).double().sqrt()

        return ClosedForm(f"linear, φ = {p.feature_map}: 1/√(1 + q̃ᵀΣ̃q̃/(q̃ᵀμ̃)²), q̃ = φ(q)", linear)
    if kind == RELU2:

        def relu2(scale, q, allowed):
            t = p.bias / scale
            s = theory.relu2_s_closed_form(t)
            return _constant(len(q), s, lambda n: theory.relu2_rel_se(t, n), allowed)

        return ClosedForm("relu²: M₂(t)/√M₄(t), t = bias/scale", relu2)
    if kind == SIGMOID:
        bias = -math.log(n_keys) if p.bias is None else p.bias

        @lru_cache  # the same (scale, n) for every draw: integrate once
        def quadrature(scale: float, n: int) -> tuple[float, float]:
            return theory.pointwise_s(lambda x: theory.sigmoid(x + bias), 0.0, scale, n)

        def sigmoid(scale, q, allowed):
            s, r = quadrature(scale, int(allowed.sum(-1).min()))
            return torch.full((len(q),), s, dtype=torch.float64), torch.full(
                (len(q),), r, dtype=torch.float64
            )

        return ClosedForm(f"sigmoid: E σ/√E σ² by quadrature, bias {bias:g}", sigmoid)
    if kind == DECAY:
        lam = float(variant.decays()[0])  # the task builds one head

        def decay(scale, q, allowed):
            i = torch.arange(allowed.shape[0], dtype=torch.float64)[:, None]
            j = torch.arange(allowed.shape[1], dtype=torch.float64)[None, :]
            return theory.decay_pattern_s(lam ** (i - j).abs(), allowed)

        return ClosedForm(f"decay: √(2/π)·S(λ^|i−j|), λ = {lam:g}", decay)
    return None


@dataclass
class ConcentrationParams:
    """Parameters of the `concentration` task."""

    source: str = "gaussian"  # gaussian (no training) | recall (maps of a trained recall model)
    seq_len: int = 512  # N = M for gaussian inputs
    scale: float = 1.0  # single scale γ when `scales` is empty
    scales: list[float] = field(default_factory=lambda: [0.25, 0.5, 1.0, 2.0, 4.0])  # γ sweep
    head_dim: int = 64  # d of the gaussian queries and keys
    n_batches: int = 4  # independent draws (gaussian), their rows pooled per scale
    causal: bool = False  # diagnose the causal form
    recall_steps: int = 400  # training steps of the recall model (source=recall)


@register_task("concentration")
class Concentration(Task):
    """Empty rows, sparsity S(x), entropy, max weight, effective size, doubly-stochastic error."""

    Params = ConcentrationParams
    description = (
        "How concentrated each variant's attention is (theory.md §2): no training. Statistics are "
        "over non-empty rows; dashed: the variant's closed form where it applies at this N."
    )
    headline = "sparsity_s"
    label = "Attention concentration"
    axes = (
        Metric("scale", None, "Scale of the attention logits", label="logit scale"),
        Metric("layer", None, "Layer of the trained model", label="layer"),
        Metric("source", None, "Gaussian inputs or a trained recall model", label="source"),
        Metric("seq_len", None, "Sequence length", "tokens", label="sequence length"),
    )
    charts = ("sparsity_s", "entropy", "empty_rows", "sinkhorn_divergence")
    chart_companions = {"sparsity_s": {"sparsity_s_theory": "closed form"}}
    metrics = (
        Metric(
            "sparsity_s",
            None,
            "S(x) = E|a|/√E[a²] over a row's allowed keys, mean over non-empty rows: "
            "1 uniform, 1/√n one-hot",
            label="row sparsity S (1 uniform, 1/√n one-hot)",
        ),
        Metric(
            "entropy",
            None,
            "Entropy of |a|/Σ|a| (nats), mean over non-empty rows",
            label="attention entropy",
        ),
        Metric(
            "effective_size",
            None,
            "exp(entropy): keys effectively attended (non-empty rows)",
            label="keys effectively attended",
        ),
        Metric(
            "max_weight",
            None,
            "Largest weight of |a|/Σ|a|, mean over non-empty rows",
            label="largest weight",
        ),
        Metric(
            "empty_rows",
            None,
            "Fraction of rows whose weights are all zero",
            label="empty rows",
        ),
        Metric(
            "ds_error",
            None,
            "Doubly-stochastic error: max row/column sum deviation",
            label="doubly-stochastic error",
        ),
        Metric(
            "sinkhorn_divergence",
            None,
            "Sinkhorn divergence S_ε (ε = 0.5) between the weight the plan gives each key and the "
            "uniform weight entropic OT imposes, cost ‖k − k'‖²/d: 0 for a converged Sinkhorn "
            "plan (non-causal gaussian source)",
            label="Sinkhorn divergence",
        ),
        Metric(
            "sparsity_s_theory",
            None,
            "The variant's own closed-form S (theory.md §2), only where it applies at this N",
            label="row sparsity S, closed form",
        ),
        DENSITY,
    )

    def check(self) -> None:
        """Refuse impossible settings with one sentence."""
        p = self.params
        if p.source not in SOURCES:
            raise ValueError(
                f"task.source={p.source!r} is not valid; use one of {', '.join(SOURCES)}."
            )
        if p.seq_len < 2 or p.head_dim < 1 or p.n_batches < 1:
            raise ValueError(
                f"task.seq_len must be >= 2 and task.head_dim, task.n_batches >= 1; "
                f"got {p.seq_len}, {p.head_dim}, {p.n_batches}."
            )
        if not all(0 < s < math.inf for s in [*p.scales, p.scale]):
            raise ValueError(
                f"task.scale and task.scales must be finite and > 0, got {p.scale} and {p.scales}."
            )
        if p.scales and p.scale != 1.0:  # it would be ignored: the sweep over `scales` runs
            raise ValueError(
                f"task.scale={p.scale} is used only with task.scales=[] (the default sweeps "
                f"{list(p.scales)}); give task.scales=[{p.scale}] instead."
            )
        if p.source == "recall":
            self.require_positive("recall_steps")

    def density_size(self) -> tuple[int, int, bool]:
        """gaussian: seq_len queries and keys (``causal``); recall: the recall model's
        sequences (`RECALL_SEQ_LEN`, causal)."""
        if self.params.source == "recall":
            return RECALL_SEQ_LEN, RECALL_SEQ_LEN, True
        return self.params.seq_len, self.params.seq_len, self.params.causal

    def scale_values(self) -> list[float]:
        """The scales γ to sweep."""
        return list(self.params.scales) or [self.params.scale]

    def measure(self, ctx: JobContext) -> TaskResult:
        # before any training: a variant without weights is unsupported, one whose weights are
        # not its forward's fails
        checked = check_weights(ctx, causal=self.density_size()[2])
        if self.params.source == "gaussian":
            result = self.run_gaussian(ctx)
        else:
            result = self.run_recall(ctx)
        result.details["weights_check"] = checked
        return result

    def run_gaussian(self, ctx: JobContext) -> TaskResult:
        p = self.params
        variant = ctx.build_variant(VariantShape(1, p.head_dim, p.seq_len))
        form = closed_form(variant, p.seq_len)
        allowed = allowed_keys(p.seq_len, p.seq_len, p.causal)
        gen = ctx.generator(1)
        points, rel_se = [], {}
        for scale in self.scale_values():
            rows, theory_s, theory_r, ds, divergences = [], [], [], 0.0, []
            for _ in range(p.n_batches):
                k = torch.randn(1, 1, p.seq_len, p.head_dim, generator=gen)
                u = torch.randn(1, 1, p.seq_len, p.head_dim, generator=gen)
                q = scale * math.sqrt(p.head_dim) * u / u.norm(dim=-1, keepdim=True)
                q_on, k_on = q.to(ctx.device, ctx.dtype), k.to(ctx.device, ctx.dtype)
                with torch.no_grad():
                    w = variant.attention_weights(q_on, k_on, causal=p.causal)
                w = checked_weights(variant, w, q_on, k_on).cpu()
                stats = per_row_statistics(w, p.causal)
                rows.append(stats)
                ds = max(ds, ds_error(w))
                if not p.causal:  # a causal plan is not a transport plan between all the keys
                    divergences.append(ot_divergence.key_marginal_divergence(w[0, 0], k[0, 0]))
                if form is not None:
                    s, r = form.evaluate(scale, q[0, 0].to(ctx.dtype).double(), allowed)
                    theory_s.append(s[~stats["empty"]])
                    theory_r.append(r)
            empty = torch.cat([r["empty"] for r in rows])
            points.append(MetricPoint("empty_rows", float(empty.double().mean()), "scale", scale))
            if not empty.all():
                for name in ROW_STATISTICS:
                    value = float(torch.cat([r[name] for r in rows]).mean())
                    points.append(MetricPoint(name, value, "scale", scale))
            points.append(MetricPoint("ds_error", ds, "scale", scale))
            if divergences and None not in divergences:
                value = sum(divergences) / len(divergences)
                points.append(MetricPoint("sinkhorn_divergence", value, "scale", scale))
            if form is not None:
                r = float(torch.cat(theory_r).max())
                rel_se[str(scale)] = r
                if theory.applies(r) and not empty.all() and not p.causal:
                    value = float(torch.cat(theory_s).mean())
                    points.append(MetricPoint("sparsity_s_theory", value, "scale", scale))
        points.append(MetricPoint("density", variant.density(*self.density_size())))
        details = {
            "closed_form": form.label if form else None,
            "closed_form_rel_se": rel_se,  # r per scale; drawn where r <= APPLIES_MAX_REL_SE
            "closed_form_max_rel_se": theory.APPLIES_MAX_REL_SE,
        }
        return TaskResult(points=points, details=details)

    def run_recall(self, ctx: JobContext) -> TaskResult:
        from attnbench.tasks.recall import Recall, RecallParams

        recall = Recall(
            RecallParams(
                seq_len=RECALL_SEQ_LEN,
                n_kv_pairs=8,
                min_kv_pairs=8,
                test_doublings=0,
                vocab_size=64,
                train_size=5000,
                steps=self.params.recall_steps,
                batch_size=16,
                d_model=32,
                n_layers=2,
            )
        )
        model, outcome = recall.fit(ctx)
        x, _ = recall.data(64, (RECALL_SEQ_LEN, 8), ctx.generator(300))
        maps = attention_maps(model, x.to(ctx.device))
        points = []
        for layer, (w, causal) in enumerate(maps):
            for name, value in row_statistics(w.cpu(), causal).items():
                points.append(MetricPoint(name, value, "layer", layer))
        points.append(MetricPoint("density", model.density(RECALL_SEQ_LEN)))
        return TaskResult(points=points, details=outcome.details())


def check_weights(ctx: JobContext, causal: bool) -> str:
    """Before anything is trained or analysed: the variant's attention weights on one small
    unit-normal draw (`CHECK_SHAPE`, on the job's device) must have the contract's shape
    (`checked_weights`) and be its forward's, since the task analyses the weights in place of
    the forward: ``forward(q, k, v) == attention_weights(q, k) @ v`` within the variant's
    float32 tolerance (`AttentionVariant.within_tolerance`). Both sides are computed in float64,
    so that the check judges the operator, not rounding: linear attention with φ = identity
    divides by sums near zero, and its two paths differ by up to 10⁻⁴ of the output's scale in
    float32, 4·10⁻¹¹ in float64 (3000 draws). The forward is called as every task calls it
    (`AttentionVariant.__call__`), so an output of the wrong shape fails here too. The variant
    checked is an instance of its own, built without moving the job's random stream.

    Returns what was checked.

    Raises:
        UnsupportedError: the variant cannot give its weights without more than queries and
            keys (it raises NotImplementedError: a recurrent mixer, or one whose mixing matrix
            depends on per-token gates, is no distribution over keys to analyse).
        ValueError: in one sentence, the weights or the forward break the contract, or the
            forward is not the weights times the values.
        NonFiniteError: the weights have NaN or infinite entries.
    """
    n, heads, d = CHECK_SHAPE
    f64 = torch.float64
    with torch.random.fork_rng(devices=[]):  # parameters are drawn on the CPU, then moved
        variant = ctx.build_variant(VariantShape(heads, d, n)).to(f64)
    gen = ctx.generator(7)
    q, k, v = (torch.randn(1, heads, n, d, generator=gen, dtype=f64).to(ctx.device) for _ in "qkv")
    # a gated variant whose weights do not need its gates is run with random ones (as throughput)
    gates = random_gates(variant, 1, n, head_dim=d, kv_heads=heads, generator=gen, dtype=f64)
    gates = {name: g.to(ctx.device) for name, g in gates.items()}
    with torch.no_grad():
        try:
            weights = variant.attention_weights(q, k, causal=causal)
        except NotImplementedError as exc:
            raise UnsupportedError(
                f"the concentration task analyses attention weights, and variant "
                f"'{ctx.variant_name}' has none to give ({exc})"
            ) from None
        weights = checked_weights(variant, weights, q, k)
        out = variant(q, k, v, causal=causal, gates=gates)
    reference = weights @ v
    error = float((out - reference).abs().max()) / max(1.0, float(reference.abs().max()))
    if not variant.within_tolerance(error, torch.float32):
        limit = variant.error_tolerance.get("float32")
        raise ValueError(
            f"variant '{variant.name}': forward(q, k, v) differs from attention_weights(q, k) "
            f"@ v by {error:.3g} of the output's scale at n={n} in float64, beyond its float32 "
            f"tolerance {'(none declared)' if limit is None else f'{limit:g}'}; the task "
            "analyses the weights in place of the forward, so they must be the same operator."
        )
    return f"forward == weights·V at n={n} in float64 (relative error {error:.2g})"


@torch.no_grad()
def attention_maps(model, inputs: torch.Tensor) -> list[tuple[torch.Tensor, bool]]:
    """(the (B, H, N, N) attention weights, whether the layer is causal) for every layer of a
    trained `SequenceModel`."""
    maps: list[tuple[torch.Tensor, bool]] = []
    hooks = []
    for layer in model.attention_layers():

        def capture(module, args, _maps=maps):
            q, k, _ = module.split_heads(args[0])
            weights = module.attention.attention_weights(q, k, causal=module.causal)
            _maps.append((checked_weights(module.attention, weights, q, k), module.causal))

        hooks.append(layer.register_forward_pre_hook(capture))
    try:
        model(inputs)
    finally:
        for h in hooks:
            h.remove()
    return maps
