"""In-context linear regression, measured against least squares and the classical baselines.

Three modes (theory.md §3–§4):

``mode=prompt`` — Garg et al. 2022: x ~ N(0, I_d) (or ``x_dist``), w ~ N(0, I_d), y = w·x
(+ noise); prompts x₁, (y₁, 0…0), x₂, (y₂, 0…0), …; a causal model (the shared model) predicts y_i
at x_i from the i earlier pairs. Curve: squared error / d (against the noiseless w·x) per number
of in-context examples, with a 5–95% bootstrap band over prompts; the baselines run on the same
prompts, among them one gradient step with the optimal step size for each number of examples
(`regression_baselines.gd_step_theory`; averaging is the step η = 1/s).

``mode=one_layer`` — von Oswald et al. 2023: tokens (x_i, y_i) ∈ R^{d+1} and a query token (x, 0);
one attention layer of the variant (`attnbench.toolkit.layer.MultiHeadAttention`: d_model = d + 1,
one head, projections W_q, W_k, W_v and the output projection, with biases) and its residual, no MLP
and no normalisation; the prediction is the y coordinate of the query's output. Non-causal: the
query attends to every example and to itself. Trained with fresh prompts each step (AdamW, no weight
decay) on the query's squared error; scored on ``layer_eval_prompts`` fresh prompts against one
gradient-descent step from w = 0 with the optimal step η* for the input distribution, n and σ
(derived exactly, `regression_baselines.gd_step_theory`), computed on the same prompts. Linear
self-attention can express that step exactly (theory.md §4: W_K = W_Q = [[I, 0], [0, 0]] and a value
projection that copies y_j into the y coordinate with weight η*·√D·M/n, cancelling `identity`'s
1/(√D·M), head width D = d + 1, M = n + 1 keys; the query's own value is 0). And no linear-attention
layer does better: its scores are bilinear and its values linear in the tokens, so its prediction is
a preconditioned step xᵀΓ·(1/n)Σ y_i x_i plus terms that are even in w or have zero mean over the
query x; those are uncorrelated with the target and with the step (w and the inputs are symmetric
about 0) and only add error, and with iid symmetric coordinates E[Σ̂²] is a multiple of I, so Γ =
η*·I is the best preconditioner. A well-trained `identity` layer therefore reaches
``loss_ratio_vs_gd`` ≈ 1; other variants may compute other functions, and their ratio says how far
they get.

``mode=attention_system`` — the single-layer "attention system": query x, keys X, values Y,
learnable W_q, W_k (d×d) and a scalar w_v, with the variant as the normalisation h:
ŷ = h((W_q x)ᵀ W_k Xᵀ)·(w_v Y). Trained (L-BFGS, full batch) with MSE on the n history points
(queries = keys = X); X ~ U[−10, 10] by default (``x_dist``, ``x_scale``), β ~ N(0, I),
y = Xβ + noise. Reported: the final loss over least squares' loss on the same points
(``loss_ratio_vs_ls``) for every variant and, where the trained system is linear in x
(h = identity), the error rate ‖β_eq − β_LS‖/‖β_LS‖ with β_eq read off the system's predictions;
``mse`` and the baselines' in-sample errors are single values per setting (no curve): least
squares, ridge, averaging divided by the sample second moment ŝ = mean of x_ik² over all points
and coordinates, and 3-NN leave-one-out (each point from its 3 nearest *other* points).
Repeated over ``system_runs`` seeds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from attnbench import (
    JobContext,
    Metric,
    MetricPoint,
    Task,
    TaskResult,
    Tuning,
    VariantShape,
    check_finite,
    register_task,
)
from attnbench.metrics import DENSITY
from attnbench.task import TEST_STREAM, VALIDATION_STREAM
from attnbench.tasks.icl_regression import baselines as rb
from attnbench.tasks.icl_regression import shifts as icl_shifts
from attnbench.tasks.icl_regression.curriculum import Curriculum
from attnbench.toolkit.convergence import StopRule
from attnbench.toolkit.layer import MultiHeadAttention
from attnbench.toolkit.model import ModelConfig, SequenceModel
from attnbench.toolkit.training import (
    CONVERGED,
    EXAMPLES_SEEN,
    LEARNING_CURVE,
    MS_PER_STEP,
    TrainConfig,
    train,
)
from attnbench.variant import gate_width, mean_density

MODES = ("prompt", "attention_system", "one_layer")
X_DISTS = ("auto", *rb.X_DISTS)
SYSTEM_BASELINES = ("least_squares", "ridge", "averaging", "knn3")
EVAL_CHUNK = 8192  # prompts per forward pass when scoring the one layer


@dataclass
class IclRegressionParams:
    """Parameters of the `icl_regression` task."""

    mode: str = "prompt"  # prompt (Garg et al.) | attention_system (theory §3) | one_layer (§4)
    n_dims: int = 5  # d
    n_points: int = 15  # examples per prompt (prompt, one_layer) or history points n (system)
    noise_std: float = 0.0  # σ of the noise added to observed y
    x_dist: str = "auto"  # gaussian | uniform; auto: uniform in attention_system, else gaussian
    x_scale: float = 0.0  # std (gaussian) or half-width (uniform) of x; 0: 10 (system), 1 (others)
    ridge_lambda: float = -1.0  # ridge baseline λ; negative: σ² (at least 1e-6)
    eval_prompts: int = 1280  # prompts for the error curves (prompt mode)
    val_prompts: int = 1024  # validation prompts, apart from the test ones (pick tuned lr)
    bootstrap: int = 1000  # bootstrap resamples of the prompts for the 5–95% band
    steps: int = 2000  # optimiser steps (prompt, one_layer) or L-BFGS iterations (system)
    batch_size: int = 64  # fresh prompts per step (prompt mode)
    lr: float = 1e-3  # peak AdamW learning rate (prompt mode)
    d_model: int = 64  # model width (prompt mode)
    n_layers: int = 3  # blocks (prompt mode)
    n_heads: int = 2  # heads (prompt mode)
    system_runs: int = 10  # independent systems (attention_system mode)
    layer_batch_size: int = 256  # fresh prompts per step (one_layer mode)
    layer_lr: float = 1e-2  # peak AdamW learning rate (one_layer mode)
    layer_eval_prompts: int = 50000  # scored prompts (one_layer; ratio's std error ~0.05%)
    curriculum_dims: int = 0  # prompt mode: Garg's curriculum starts at this many dims (0: off)
    curriculum_points: int = 0  # prompt mode: … and this many examples per prompt (0: off)
    curriculum_interval: int = 2000  # steps between increments (+1 dim, +2 examples; Garg's)
    shifts: str = "none"  # prompt mode: Garg's distribution shifts scored: all | none | a+b+…
    w_sparsity: int = 0  # prompt mode: k > 0 keeps k random non-zero weights (Garg's sparse task)
    lasso_alpha: float = 0.1  # α of the Lasso baseline, drawn when w_sparsity > 0 (Garg: 1e-4..1)


def paired_ratio(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """mean(a)/mean(b) over paired samples (the same prompts) and its standard error.

    Delta method: r̂ − r ≈ mean(a − r·b)/mean(b), so se = std(a − r̂·b)/(√P·mean(b)). Pairing makes
    it small when a and b move together (a trained layer and the GD step on the same prompts).
    """
    a, b = a.double(), b.double()
    ratio = a.mean() / b.mean()
    se = (a - ratio * b).std() / (math.sqrt(len(a)) * b.mean())
    return float(ratio), float(se)


SYSTEM_PLATEAU = 1e-3  # attention_system: converged when the last doubling gains less (relative)
# prompt and one_layer: a doubling of training that lowers the validation error by under half a
# percent of it is a plateau, however precisely the prompts measure it: the rank ties differences
# within 2·√2 pooled seed errors, 0.32 on the reference board's one_layer column (0.16 without
# mesa; ratios 0.85–1.9), so a change of 0.005 per doubling decides no contest
PLATEAU_RTOL = 5e-3


def plateau_noise(value: float, se: float) -> float:
    """The noise a doubling's gain is compared with: two standard errors of the difference of
    two measurements of standard error ``se`` (2·√2·se), at least `PLATEAU_RTOL` of ``value``.
    The two are on the same validation prompts; a paired difference of the two models' errors
    was no less noisy (measured: its spread over prompts is the models' own), so it is not used."""
    return max(2.0 * math.sqrt(2.0) * se, PLATEAU_RTOL * abs(value))


@register_task("icl_regression")
class IclRegression(Task):
    """In-context linear regression against least squares, ridge, averaging, 3-NN and one
    optimal gradient step."""

    Params = IclRegressionParams
    description = (
        "In-context linear regression vs least squares, classical baselines and one optimal "
        "gradient step."
    )
    headline = "mse_mean"
    label = "In-context regression"
    axes = (
        Metric(
            "n_examples", None, "In-context examples before the query", label="examples in context"
        ),
        Metric("mode", None, "What is trained and on which problem", label="mode"),
        Metric("n_dims", None, "Dimension d of the inputs", label="input dimension"),
        Metric(
            "n_points", None, "Examples per prompt (history points)", label="examples per prompt"
        ),
        Metric("x_dist", None, "Distribution of the inputs", label="input distribution"),
        Metric("noise_std", None, "σ of the noise added to observed y", label="noise σ"),
        Metric("shifts", None, "Garg's distribution shifts scored", label="distribution shifts"),
        Metric("d_model", None, "Model width (prompt mode)", label="model width"),
        Metric("lr", None, "Peak AdamW learning rate (prompt mode)", label="learning rate"),
        Metric(
            "layer_lr",
            None,
            "Peak AdamW learning rate (one_layer mode)",
            label="one-layer learning rate",
        ),
    )
    tuning = Tuning(["lr", "layer_lr"], "val_mse_mean")  # lr: prompt mode, layer_lr: one_layer
    # the three modes train different models on different problems: one overview column each,
    # showing what its paper compares (Garg: error / d; theory §3: loss relative to least
    # squares; von Oswald: loss relative to one optimal gradient step)
    column_by = "mode"
    column_headlines = {
        "prompt": "mse_mean",
        "attention_system": "loss_ratio_vs_ls",
        "one_layer": "loss_ratio_vs_gd",
    }
    # Garg's distribution shifts (`icl_shifts`): one chart each, least squares on the same prompts
    charts = ("mse", LEARNING_CURVE, *(f"mse_{name}" for name in icl_shifts.SHIFTS))
    chart_bands = {"mse": ("mse_q05", "mse_q95")}
    chart_references = {
        "mse": {
            "mse_least_squares": "least squares",
            "mse_ridge": "ridge",
            "mse_averaging": "averaging",
            "mse_knn3": "3-NN",
            "mse_gd_step": "one GD step (optimal η)",
            "mse_online_gd": "online GD (one pass, normalised steps)",
            "mse_zero": "zero predictor",
            "mse_lasso": "Lasso (sparse weights)",
        },
        **{
            f"mse_{name}": {f"mse_{name}_least_squares": "least squares, same prompts"}
            for name in icl_shifts.SHIFTS
        },
    }
    # attention_system and one_layer report one mse per job: a bar per variant, baselines as levels
    bar_charts = {
        "mse": {
            "mse_least_squares": "least squares",
            "mse_ridge": "ridge",
            "mse_averaging": "averaging (÷ sample second moment)",
            "mse_knn3": "3-NN (leave-one-out)",
            "mse_gd_step": "one GD step (optimal η)",
            "mse_zero": "zero predictor",
        }
    }
    metrics = (
        Metric(
            "mse",
            False,
            "Squared error / d of the model (prompt: by number of examples)",
            label="error / d",
        ),
        Metric(
            "mse_q05",
            None,
            "5% bootstrap quantile of the mean error (prompt mode)",
            label="error / d, 5% bootstrap quantile",
        ),
        Metric(
            "mse_q95",
            None,
            "95% bootstrap quantile of the mean error (prompt mode)",
            label="error / d, 95% bootstrap quantile",
        ),
        Metric(
            "mse_mean",
            False,
            "Model error / d averaged over the numbers of examples",
            label="error / d (mean over examples)",
        ),
        Metric(
            "val_mse_mean",
            False,
            "mse_mean on the validation prompts (picks tuned lr)",
            label="validation error / d (mean over examples)",
        ),
        Metric(
            "mse_least_squares",
            None,
            "Min-norm least squares on the same prompts",
            label="least squares error / d",
        ),
        Metric(
            "mse_ridge",
            None,
            "Ridge regression (λ = σ²) on the same prompts",
            label="ridge regression error / d",
        ),
        Metric(
            "mse_averaging",
            None,
            "Averaging w = mean(y·x)/s on the same prompts (s: E x_k², attention_system: the "
            "sample second moment)",
            label="averaging estimator error / d",
        ),
        Metric(
            "mse_knn3",
            None,
            "3-nearest-neighbours (attention_system: leave-one-out)",
            label="3-nearest-neighbours error / d",
        ),
        Metric(
            "mse_lasso",
            None,
            "Lasso (α = lasso_alpha) on the same prompts (w_sparsity > 0)",
            label="lasso error / d",
        ),
        Metric(
            "mse_gd_step",
            None,
            "One gradient step from w = 0 with the optimal step size",
            label="one gradient step error / d",
        ),
        Metric(
            "mse_online_gd",
            None,
            "One pass of online gradient descent, normalised steps (the delta rule's estimator)",
            label="online gradient descent error / d",
        ),
        Metric(
            "mse_vs_estimator",
            False,
            "mse_mean / the mean error of the estimator the variant implements in theory "
            "(AttentionVariant.estimator), on the same prompts (prompt mode)",
            label="error relative to the variant's estimator",
        ),
        Metric(
            "mse_zero",
            None,
            "The zero predictor, (w·x)²/d on the same prompts",
            label="zero predictor error / d",
        ),
        Metric(
            "error_rate_vs_ls",
            False,
            "‖β_eq − β_LS‖/‖β_LS‖, worst run (attention_system, where the system is linear)",
            label="distance of the solution from least squares",
        ),
        Metric(
            "loss_ratio_vs_ls",
            False,
            "Final training loss / least-squares loss, median run (attention_system)",
            label="loss relative to least squares",
        ),
        Metric(
            "loss_ratio_vs_gd",
            False,
            "mse / mse_gd_step on the same prompts (one_layer)",
            label="error relative to one gradient step",
        ),
        Metric(
            "loss_ratio_vs_gd_se",
            None,
            "Standard error of loss_ratio_vs_gd (paired)",
            label="error relative to one gradient step, standard error",
        ),
        Metric(
            "cosine_vs_gd",
            None,
            "Cosine similarity of the layer's and the GD step's predictions",
            label="cosine similarity to one gradient step",
        ),
        Metric(
            "gd_over_zero",
            None,
            "mse_gd_step / mse_zero on the same prompts (one_layer)",
            label="one gradient step relative to the zero predictor",
        ),
        Metric(
            "gd_over_zero_se",
            None,
            "Standard error of gd_over_zero (paired)",
            label="one gradient step relative to the zero predictor, standard error",
        ),
        Metric(
            "gd_over_zero_theory",
            None,
            "The exact expected value of gd_over_zero",
            label="one gradient step relative to the zero predictor, theory",
        ),
        Metric("final_loss", False, "Training loss at the end", label="final training loss"),
        *(
            Metric(
                f"mse_{name}",
                False,
                f"Model error / d, prompt mode, {text} (Garg et al.)",
                label=f"error / d, {text}",
            )
            for name, text in icl_shifts.SHIFTS.items()
        ),
        *(
            Metric(
                f"mse_{name}_least_squares",
                None,
                f"Least squares on the same prompts: {text}",
                label=f"least squares error / d, {text}",
            )
            for name, text in icl_shifts.SHIFTS.items()
        ),
        *(
            Metric(
                LEARNING_CURVE,
                False,
                "Validation error against the training examples seen, log-spaced (one_layer: "
                "relative to one gradient step on the same prompts; prompt: error / d averaged "
                "over the numbers of examples); the curve stops where it plateaued",
                label="validation error while training",
            ),
            Metric(
                CONVERGED,
                None,
                "1: the validation error plateaued (its last doubling of training gained less "
                f"than its noise or {PLATEAU_RTOL:.1%} of it, whichever is larger) or, in "
                "attention_system, every L-BFGS fit stopped on its tolerance or its last "
                f"doubling of evaluations lowered its loss by less than {SYSTEM_PLATEAU:g} of "
                "it; 0: still learning at the cap, so not ranked",
                label="converged",
            ),
            Metric(EXAMPLES_SEEN, None, "Prompts seen when training stopped", label="prompts"),
            Metric(
                MS_PER_STEP,
                None,
                "Mean wall time of an optimiser step, evaluations not counted (machine and "
                "load dependent: a cost figure)",
                "ms",
                label="time per training step",
            ),
        ),
        DENSITY,
    )
    # a trained value of a run still learning at its cap is left out of ranks (`converged`)
    convergence = {
        m: CONVERGED
        for m in ("mse", "mse_mean", "val_mse_mean", "loss_ratio_vs_gd", "loss_ratio_vs_ls")
    }

    def check(self) -> None:
        """Refuse impossible settings with one sentence."""
        p = self.params
        if p.mode not in MODES:
            raise ValueError(f"task.mode={p.mode!r} is not valid; use one of {', '.join(MODES)}.")
        if p.x_dist not in X_DISTS:
            raise ValueError(
                f"task.x_dist={p.x_dist!r} is not valid; use one of {', '.join(X_DISTS)}."
            )
        self.require_finite("x_scale", at_least=0)
        if p.mode != "prompt" and p.shifts.strip() != "none":  # a setting the mode would ignore
            raise ValueError(
                f"task.shifts={p.shifts!r} applies only to task.mode=prompt (Garg's shifts are "
                f"scored on the prompt model; task.mode={p.mode} scores none); leave task.shifts "
                "out."
            )
        if p.mode == "prompt":
            self.require_positive("d_model", "n_layers", "n_heads", "bootstrap")
            self.require_divides("n_heads", "d_model")
            self.require_finite("lr", above=0)
            self.curriculum()  # refuses an impossible curriculum (before w_sparsity reads it)
            if not 0 <= p.w_sparsity <= (p.curriculum_dims or p.n_dims):
                raise ValueError(
                    f"task.w_sparsity={p.w_sparsity} is not valid; use 0 (dense weights) or a "
                    f"number of non-zero weights from 1 to the input dimension "
                    f"({p.curriculum_dims or p.n_dims}, the curriculum's first if it has one)."
                )
            self.require_finite("lasso_alpha", above=0)
            self.shift_names()  # refuses an unknown shift
        elif p.mode == "one_layer":
            self.require_positive("layer_batch_size")
            self.require_finite("layer_lr", above=0)
            if p.layer_eval_prompts < 2:
                raise ValueError(
                    f"task.layer_eval_prompts must be >= 2 (a standard error needs two), got "
                    f"{p.layer_eval_prompts}."
                )
        self.require_positive(
            "n_dims",
            "n_points",
            "eval_prompts",
            "val_prompts",
            "steps",
            "batch_size",
            "system_runs",
        )
        self.require_finite("noise_std", at_least=0)
        self.require_finite("ridge_lambda")

    def curriculum(self) -> Curriculum:
        """The prompt-mode curriculum (Garg et al.'s, `icl_curriculum`): from
        (curriculum_dims, curriculum_points) up to (n_dims, n_points); a 0 start is no growth."""
        p = self.params
        for key, end, end_key in (
            ("curriculum_dims", p.n_dims, "n_dims"),
            ("curriculum_points", p.n_points, "n_points"),
        ):
            start = getattr(p, key)
            if not 0 <= start <= end:
                raise ValueError(
                    f"task.{key}={start} is not valid; use 0 (no curriculum) or a start between "
                    f"1 and task.{end_key}={end}."
                )
        self.require_positive("curriculum_interval")
        return Curriculum(
            start_dims=p.curriculum_dims or p.n_dims,
            end_dims=p.n_dims,
            start_points=p.curriculum_points or p.n_points,
            end_points=p.n_points,
            interval=p.curriculum_interval,
        )

    def shift_names(self) -> list[str]:
        """The distribution shifts to score (`icl_shifts.SHIFTS`): ``all``, ``none`` or names
        joined by ``+``."""
        value = self.params.shifts.strip()
        if value == "none":
            return []
        if value == "all":
            return list(icl_shifts.SHIFTS)
        names = [name.strip() for name in value.split("+")]
        unknown = [name for name in names if name not in icl_shifts.SHIFTS]
        if unknown or not all(names):
            raise ValueError(
                f"task.shifts={value!r} names an unknown shift {unknown[0] if unknown else ''!r}; "
                f"use all, none, or names joined by + from: {', '.join(icl_shifts.SHIFTS)}."
            )
        return names

    def inputs(self) -> tuple[str, float]:
        """(distribution, scale) of the inputs, with ``auto`` and 0 resolved for the mode."""
        p = self.params
        system = p.mode == "attention_system"
        dist = p.x_dist if p.x_dist != "auto" else ("uniform" if system else "gaussian")
        return dist, p.x_scale if p.x_scale > 0 else (10.0 if system else 1.0)

    def sample_x(self, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
        """Inputs of ``shape`` from the task's distribution."""
        return rb.sample_inputs(shape, *self.inputs(), gen)

    def gd_theory(self, n: int) -> rb.GdStepTheory:
        """The optimal one-step predictor from n examples for this task's inputs and noise."""
        s, m4 = rb.coordinate_moments(*self.inputs())
        return rb.gd_step_theory(n, self.params.n_dims, s, m4, self.params.noise_std**2)

    def ridge_lambda(self) -> float:
        """λ of the ridge baseline: the given one, or σ² (at least 1e-6)."""
        p = self.params
        return p.ridge_lambda if p.ridge_lambda >= 0 else max(p.noise_std**2, 1e-6)

    def baselines(self) -> dict:
        """Each prompt-mode baseline as predict(xs (P, n, d), ys (P, n), queries (P, d)) → (P,)."""
        lam = self.ridge_lambda()
        second_moment = rb.coordinate_moments(*self.inputs())[0]
        return {
            "least_squares": rb.least_squares,
            "ridge": lambda x, y, q: rb.ridge(x, y, q, lam),
            "averaging": lambda x, y, q: rb.averaging(x, y, q, second_moment),
            "knn3": rb.nearest_neighbours,
            "online_gd": rb.online_gd,
            "gd_step": lambda x, y, q: rb.gd_step(x, y, q, self.gd_theory(x.shape[1]).step),
            "zero": lambda x, y, q: q.new_zeros(q.shape[0]),  # the scale: no learning at all
            **(
                {"lasso": lambda x, y, q: rb.lasso(x, y, q, self.params.lasso_alpha)}
                if self.params.w_sparsity
                else {}
            ),
        }

    def baseline_errors(
        self, xs: torch.Tensor, ys: torch.Tensor, targets: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """(P, n) error / d of each baseline on the given prompts."""
        return {name: rb.prefix_errors(f, xs, ys, targets) for name, f in self.baselines().items()}

    def density_size(self) -> tuple[int, int, bool]:
        """The attention of each mode: prompt, 2·n_points tokens, causal; one_layer, the
        n_points examples and the query, not causal; attention_system, the n_points history
        points as queries and keys, not causal."""
        n = self.params.n_points
        if self.params.mode == "prompt":
            return 2 * n, 2 * n, True
        if self.params.mode == "one_layer":
            return n + 1, n + 1, False
        return n, n, False

    def measure(self, ctx: JobContext) -> TaskResult:
        if self.params.mode == "prompt":
            return self.run_prompt(ctx)
        if self.params.mode == "one_layer":
            return self.run_one_layer(ctx)
        return self.run_attention_system(ctx)

    # --- prompt mode -------------------------------------------------------------------------

    def sample_prompts(
        self, n: int, gen: torch.Generator, points: int | None = None, dims: int | None = None
    ):
        """x (n, k, d), w (n, d), noiseless y and observed y (n, k); k = ``points`` or n_points.

        ``dims`` < d zeroes the inputs' coordinates from ``dims`` on (a curriculum's truncated
        problem: the model's input keeps d coordinates)."""
        p = self.params
        xs = self.sample_x((n, points or p.n_points, p.n_dims), gen)
        if dims is not None and dims < p.n_dims:
            xs[..., dims:] = 0
        w = torch.randn(n, p.n_dims, generator=gen)
        if p.w_sparsity:  # Garg's sparse linear regression: k of the (active) coordinates
            active = dims or p.n_dims
            keys = torch.rand(n, active, generator=gen).argsort(dim=1)[:, : p.w_sparsity]
            keep = torch.zeros(n, p.n_dims, dtype=torch.bool).scatter_(1, keys, True)
            w = w * keep
        clean = (xs * w.unsqueeze(1)).sum(-1)
        observed = clean + p.noise_std * torch.randn(clean.shape, generator=gen)
        return xs, w, clean, observed

    @staticmethod
    def interleave(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        """Tokens x₁, (y₁, 0…0), x₂, (y₂, 0…0), … of shape (n, 2k, d)."""
        y_tokens = torch.zeros_like(xs)
        y_tokens[..., 0] = ys
        return torch.stack([xs, y_tokens], dim=2).flatten(1, 2)

    def run_prompt(self, ctx: JobContext) -> TaskResult:
        p = self.params
        torch.manual_seed(ctx.seed)
        cfg = ModelConfig(
            d_model=p.d_model,
            n_layers=p.n_layers,
            n_heads=p.n_heads,
            max_len=self.density_size()[0],
            input_dim=p.n_dims,
            output_dim=1,
        )
        model = SequenceModel(cfg, ctx.variant_name, ctx.variant_params).to(ctx.device, ctx.dtype)
        gen = ctx.generator(1)

        def predict(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
            tokens = self.interleave(xs, ys).to(ctx.device, ctx.dtype)
            return model(tokens)[:, 0::2, 0].float()  # read out at the x tokens

        curriculum = self.curriculum()

        def loss_on_batch(step: int) -> torch.Tensor:
            dims, points = curriculum.at(step)
            xs, _, _, observed = self.sample_prompts(p.batch_size, gen, points, dims)
            return (predict(xs, observed) - observed.to(ctx.device)).square().mean()

        @torch.no_grad()
        def predict_all(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
            """Predictions (P, k) at every x token of the prompts, 256 prompts per pass."""
            return torch.cat(
                [predict(xs[i : i + 256], ys[i : i + 256]).cpu() for i in range(0, len(xs), 256)]
            )

        def errors(size: int, stream: int):
            """The model's squared error / d (size, n_points) on fresh prompts of ``stream``."""
            xs, _, clean, observed = self.sample_prompts(size, ctx.generator(stream))
            return (predict_all(xs, observed) - clean).square() / p.n_dims, (xs, observed, clean)

        def evaluate() -> tuple[float, float]:
            """The validation prompts' mean error / d and its noise (`plateau_noise`)."""
            per_prompt = errors(p.val_prompts, VALIDATION_STREAM)[0].mean(dim=1)
            mean = float(per_prompt.mean())
            return mean, plateau_noise(mean, float(per_prompt.std() / len(per_prompt) ** 0.5))

        # no plateau stop before the curriculum reaches the full prompts (the error on them
        # cannot fall before), nor before half the cap; the zero predictor's error is chance
        growing = curriculum.start_dims < p.n_dims or curriculum.start_points < p.n_points
        full = curriculum.full_from() if growing else 0
        val_clean = self.sample_prompts(p.val_prompts, ctx.generator(VALIDATION_STREAM))[2]
        outcome = train(
            model,
            loss_on_batch,
            TrainConfig(steps=p.steps, batch_size=p.batch_size, lr=p.lr),
            desc=f"icl/{ctx.variant_name}",
            evaluate=evaluate,
            rule=StopRule(
                ceiling=0.0,
                higher_is_better=False,
                chance=float(val_clean.square().mean() / p.n_dims),
                min_fraction=max(0.5, full / max(1, p.steps)),
            ),
        )
        curve = outcome.curve

        model_err, (xs, observed, clean) = errors(p.eval_prompts, TEST_STREAM)
        val_err = errors(p.val_prompts, VALIDATION_STREAM)[0]
        lo, hi = bootstrap_band(model_err, p.bootstrap, ctx.generator(200))
        points = [
            MetricPoint("mse_mean", float(model_err.mean())),
            MetricPoint("val_mse_mean", float(val_err.mean())),
            MetricPoint("final_loss", curve[-1][1]),
            MetricPoint("density", model.density(self.density_size()[0])),
            *outcome.points(),
        ]
        for i in range(p.n_points):
            points += [
                MetricPoint("mse", float(model_err[:, i].mean()), "n_examples", i),
                MetricPoint("mse_q05", float(lo[i]), "n_examples", i),
                MetricPoint("mse_q95", float(hi[i]), "n_examples", i),
            ]
        baseline_errors = self.baseline_errors(xs, observed, clean)
        for name, err in baseline_errors.items():
            points += [
                MetricPoint(f"mse_{name}", float(v), "n_examples", i)
                for i, v in enumerate(err.mean(dim=0).tolist())
            ]
        # the regression view: the variant beside the estimator it implements in theory
        estimator = model.attention_layers()[0].attention.estimator
        if estimator in baseline_errors:
            ratio = float(model_err.mean() / baseline_errors[estimator].mean())
            points.append(MetricPoint("mse_vs_estimator", ratio))
        points += self.shift_points(predict_all, ctx)
        details = {**outcome.details(), "estimator": estimator}
        if curriculum.start_dims < p.n_dims or curriculum.start_points < p.n_points:
            details["curriculum_full_from_step"] = curriculum.full_from()
        return TaskResult(points=points, details=details)

    def shift_points(self, predict_all, ctx: JobContext) -> list[MetricPoint]:
        """The trained model and least squares on Garg's shifted prompts (`icl_shifts`), on the
        same prompts per shift: ``mse_<shift>`` and ``mse_<shift>_least_squares`` per number of
        examples. Each shift draws from its own generator stream (fixed by the job's seed), so
        adding a shift does not change the others' prompts."""
        p = self.params
        points: list[MetricPoint] = []
        wanted = self.shift_names()
        for k, name in enumerate(icl_shifts.SHIFTS):
            if name not in wanted:
                continue
            prompts = icl_shifts.sample_shift(
                name, p.eval_prompts, p.n_points, p.n_dims, ctx.generator(TEST_STREAM + 1000 + k)
            )

            model = icl_shifts.model_errors(predict_all, prompts)
            check_finite(f"the model's errors under the {name} shift", model)
            least_squares = icl_shifts.least_squares_errors(prompts)
            for j, i in enumerate(prompts.positions):
                points += [
                    MetricPoint(f"mse_{name}", float(model[:, j].mean()), "n_examples", i),
                    MetricPoint(
                        f"mse_{name}_least_squares",
                        float(least_squares[:, j].mean()),
                        "n_examples",
                        i,
                    ),
                ]
        return points

    # --- one_layer mode (von Oswald et al. 2023) ---------------------------------------------

    def run_one_layer(self, ctx: JobContext) -> TaskResult:
        p = self.params
        n, d = p.n_points, p.n_dims
        torch.manual_seed(ctx.seed)
        layer = OneLayer(ctx, d, n)
        gen = ctx.generator(1)

        def loss_on_batch(step: int) -> torch.Tensor:
            xs, _, _, observed = self.sample_prompts(p.layer_batch_size, gen, n + 1)
            pred = layer(xs[:, :n], observed[:, :n], xs[:, n])  # the last point is the query
            return (pred - observed[:, n].to(ctx.device)).square().mean()

        def prompts(size: int, stream: int):
            """(examples, labels, queries, noiseless targets) of ``size`` fresh prompts."""
            xs, _, clean, observed = self.sample_prompts(size, ctx.generator(stream), n + 1)
            return xs[:, :n], observed[:, :n], xs[:, n], clean[:, n]

        @torch.no_grad()
        def predict(examples, labels, queries) -> torch.Tensor:
            pred = torch.cat(
                [
                    layer(*(t[i : i + EVAL_CHUNK] for t in (examples, labels, queries))).cpu()
                    for i in range(0, len(queries), EVAL_CHUNK)
                ]
            ).double()
            check_finite("the layer's predictions", pred)
            return pred

        theory = self.gd_theory(n)
        *val_inputs, val_target = prompts(p.val_prompts, VALIDATION_STREAM)
        val_target = val_target.double()
        val_gd = rb.gd_step(*(t.double() for t in val_inputs), theory.step)
        val_err_gd = (val_gd - val_target).square() / d

        def evaluate() -> tuple[float, float]:
            """The validation prompts' error relative to one gradient step's on them (paired
            on the same prompts) and its noise (`plateau_noise`)."""
            ratio, se = paired_ratio((predict(*val_inputs) - val_target).square() / d, val_err_gd)
            return ratio, plateau_noise(ratio, se)

        cfg = TrainConfig(
            steps=p.steps, batch_size=p.layer_batch_size, lr=p.layer_lr, weight_decay=0.0
        )  # no weight decay: it would pull the layer off the GD step it should find
        # the zero predictor's ratio is chance; no ceiling short of 0 is reachable, so a run
        # stops early only where the ratio plateaued
        chance, _ = paired_ratio(val_target.square() / d, val_err_gd)
        rule = StopRule(ceiling=0.0, higher_is_better=False, chance=chance)
        outcome = train(
            layer, loss_on_batch, cfg, desc=f"icl1/{ctx.variant_name}", evaluate=evaluate, rule=rule
        )
        curve = outcome.curve

        examples, labels, queries, target = prompts(p.layer_eval_prompts, TEST_STREAM)
        pred = predict(examples, labels, queries)
        val_mse = (predict(*val_inputs) - val_target).square().mean() / d
        gd = rb.gd_step(examples.double(), labels.double(), queries.double(), theory.step)
        target = target.double()
        err, err_gd, err_zero = ((v - target).square() / d for v in (pred, gd, 0 * target))
        ratio, ratio_se = paired_ratio(err, err_gd)
        gd_zero, gd_zero_se = paired_ratio(err_gd, err_zero)
        cosine = torch.nn.functional.cosine_similarity(pred, gd, dim=0)
        points = [
            MetricPoint("mse", float(err.mean())),
            MetricPoint("mse_mean", float(err.mean())),
            MetricPoint("val_mse_mean", float(val_mse)),
            MetricPoint("mse_gd_step", float(err_gd.mean())),
            MetricPoint("mse_zero", float(err_zero.mean())),
            MetricPoint("loss_ratio_vs_gd", ratio),
            MetricPoint("loss_ratio_vs_gd_se", ratio_se),
            MetricPoint("cosine_vs_gd", float(cosine)),
            MetricPoint("gd_over_zero", gd_zero),
            MetricPoint("gd_over_zero_se", gd_zero_se),
            MetricPoint("gd_over_zero_theory", theory.ratio_to_zero),
            MetricPoint("final_loss", curve[-1][1]),
            MetricPoint("density", layer.attention.attention.density(*self.density_size())),
            *outcome.points(),
        ]
        dist, scale = self.inputs()
        details = {
            **outcome.details(),
            "gd_step_size": theory.step,  # exact (gd_step_theory), not estimated
            "mse_gd_step_theory": theory.mse,
            "mse_zero_theory": theory.mse_zero,
            "x_dist": dist,
            "x_scale": scale,
        }
        return TaskResult(points=points, details=details)

    # --- attention_system mode ---------------------------------------------------------------

    def run_attention_system(self, ctx: JobContext) -> TaskResult:
        p = self.params
        runs = [self.system_run(ctx, run) for run in range(p.system_runs)]
        ratios = [r.loss_ratio for r in runs]
        error_rates = [r.error_rate for r in runs]
        linear_everywhere = all(r.linear_in_x for r in runs)
        systems = [r.h for r in runs]
        curves = [r.curve for r in runs]
        stops = [f"run {i}: {r.stopped}" for i, r in enumerate(runs) if r.stopped]
        errors = {name: [r.errors[name] for r in runs] for name in ("mse", *SYSTEM_BASELINES)}
        points = [
            MetricPoint("loss_ratio_vs_ls", float(torch.tensor(ratios).median())),
            MetricPoint(CONVERGED, float(all(r.converged for r in runs))),
            MetricPoint("final_loss", float(torch.tensor([c[-1][1] for c in curves]).mean())),
            MetricPoint("mse_mean", sum(errors["mse"]) / len(errors["mse"])),
            MetricPoint("density", mean_density(systems, *self.density_size())),
        ]
        if linear_everywhere:
            points.append(MetricPoint("error_rate_vs_ls", max(error_rates)))
        for name, values in errors.items():  # one value per setting: a bar chart, not a curve
            metric = "mse" if name == "mse" else f"mse_{name}"
            points.append(MetricPoint(metric, sum(values) / len(values)))
        details = {
            "loss_ratios": ratios,
            "error_rates": error_rates,
            "linear_in_x": linear_everywhere,
            "loss_curves": curves,
            "fit_stopped": stops,  # runs whose L-BFGS stopped early, and why
        }
        return TaskResult(points=points, details=details)

    def system_run(self, ctx: JobContext, run: int) -> SystemRun:
        """One of the ``system_runs`` independent systems: its data drawn from the job's seed and
        ``run``, the system fitted, and its loss and β_eq compared with least squares'."""
        p = self.params
        n, d = p.n_points, p.n_dims
        gen = ctx.generator(1000 + run)
        x = self.sample_x((n, d), gen)
        beta = torch.randn(d, generator=gen)
        y = x @ beta + p.noise_std * torch.randn(n, generator=gen)
        system = AttentionSystem(ctx, d, n, gen)
        curve = system.fit(x, y, p.steps)
        with torch.no_grad():
            pred = system(x.to(ctx.device, ctx.dtype), y.to(ctx.device, ctx.dtype))
        pred = pred.double().cpu()
        beta_ls = torch.linalg.lstsq(
            x.double(), y.double().unsqueeze(-1), driver="gelsd"
        ).solution.flatten()
        ls_loss = (x.double() @ beta_ls - y.double()).square().mean()
        model_loss = (pred - y.double()).square().mean()
        beta_eq = torch.linalg.lstsq(x.double(), pred.unsqueeze(-1), driver="gelsd").solution
        residual = (x.double() @ beta_eq.flatten() - pred).norm() / pred.norm()
        return SystemRun(
            loss_ratio=float(model_loss / ls_loss),
            error_rate=float((beta_eq.flatten() - beta_ls).norm() / beta_ls.norm()),
            linear_in_x=bool(residual < 1e-4),  # ŷ = Xβ_eq exactly: h acts linearly
            errors={"mse": float(model_loss) / d, **self.in_sample_baselines(x, y)},
            curve=curve,
            stopped=system.stopped,
            h=system.h,
            converged=system.on_tolerance or fit_plateaued(curve),
        )

    def in_sample_baselines(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
        """Each baseline's error / d on the history points x (n, d), y (n,), the attention
        system's own setting: least squares, ridge and averaging fit on all n points and predict
        each of them; 3-NN predicts each point from the *other* n − 1 (in-sample it would find the
        point itself at distance 0); averaging divides by ŝ = mean of x_ik² over all points and
        coordinates (unbiased for E x_k² when the mean is known to be 0)."""
        xs = x.unsqueeze(0).expand(len(x), -1, -1)  # every point sees all n history points
        ys = y.unsqueeze(0).expand(len(x), -1)
        lam = self.ridge_lambda()
        preds = {
            "least_squares": rb.least_squares(xs, ys, x),
            "ridge": rb.ridge(xs, ys, x, lam),
            "averaging": rb.averaging(xs, ys, x, x.double().square().mean()),
            "knn3": rb.nearest_neighbours_leave_one_out(x, y, k=3),
        }
        return {
            name: float((pred.double() - y.double()).square().mean()) / x.shape[1]
            for name, pred in preds.items()
        }


def fit_plateaued(curve: list[tuple[int, float]]) -> bool:
    """Whether an L-BFGS fit that ran to its cap plateaued: its loss ``curve`` (evaluation, loss)
    fell by less than `SYSTEM_PLATEAU` of itself over the last doubling of evaluations (a
    deterministic full-batch fit has no noise to compare with; a thousandth is below the three
    digits a ratio shows). A fit that stopped on L-BFGS's own tolerance converged."""
    end = curve[-1][0]
    earlier = [loss for evaluation, loss in curve if evaluation <= end // 2]
    if not earlier:
        return False  # too short a fit to tell
    best = min(loss for _, loss in curve)
    return min(earlier) - best <= SYSTEM_PLATEAU * max(abs(best), 1e-300)


class OneLayer(nn.Module):
    """von Oswald et al.'s model: one attention layer of the variant (`MultiHeadAttention`,
    d_model = d + 1, one head, non-causal) with its residual, no MLP and no normalisation.

    Tokens (x_i, y_i) for the n examples, then the query token (x, 0); the prediction is the y
    coordinate of the query's output, token + layer(token). Only that prediction is trained and
    scored, so the examples' outputs are computed but unused.
    """

    def __init__(self, ctx: JobContext, d: int, n: int) -> None:
        super().__init__()
        self.attention = MultiHeadAttention(
            d + 1, 1, ctx.variant_name, ctx.variant_params, max_len=n + 1, causal=False
        )
        self.to(ctx.device, ctx.dtype)
        self.ctx = ctx

    def forward(self, xs: torch.Tensor, ys: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
        """xs (P, n, d), ys (P, n), queries (P, d) → predictions (P,)."""
        tokens = torch.cat([xs, ys.unsqueeze(-1)], dim=-1)
        query = torch.cat([queries, queries.new_zeros(len(queries), 1)], dim=-1).unsqueeze(1)
        seq = torch.cat([tokens, query], dim=1).to(self.ctx.device, self.ctx.dtype)
        out = seq + self.attention(seq)
        return out[:, -1, -1].float()


@dataclass
class SystemRun:
    """What one attention system's fit gave (`IclRegression.system_run`)."""

    loss_ratio: float  # its training MSE over least squares' on the same points
    error_rate: float  # ‖β_eq − β_ls‖ / ‖β_ls‖, β_eq the linear map that best explains ŷ
    linear_in_x: bool  # whether ŷ = X β_eq exactly (h acts linearly)
    errors: dict[str, float]  # its MSE / d and each baseline's ("mse", SYSTEM_BASELINES)
    curve: list[tuple[int, float]]  # the loss curve of its fit
    stopped: str  # why the fit stopped before its steps, if it did
    h: nn.Module  # the fitted variant
    converged: bool  # L-BFGS stopped on its own tolerance, or its loss plateaued at the cap


class AttentionSystem(torch.nn.Module):
    """ŷ_i = h((W_q x_i)ᵀ W_k Xᵀ)·(w_v Y) with the variant as h (theory.md §3)."""

    def __init__(self, ctx: JobContext, d: int, n: int, gen: torch.Generator) -> None:
        super().__init__()
        self.w_q = torch.nn.Parameter(torch.randn(d, d, generator=gen) / d**0.5)
        self.w_k = torch.nn.Parameter(torch.randn(d, d, generator=gen) / d**0.5)
        self.w_v = torch.nn.Parameter(torch.ones(()))
        self.h = ctx.build_variant(VariantShape(n_heads=1, head_dim=d, max_len=n))
        # a gated variant's gates come from the input, as q and k do: a learnable map each
        # (a "value" gate as wide as the values, one channel: y)
        self.w_gates = torch.nn.ParameterDict(
            {
                name: torch.nn.Parameter(
                    torch.randn(gate_width(width, d, 1), d, generator=gen) / d**0.5
                )
                for name, width in self.h.gates.items()
            }
        )
        self.ctx = ctx
        self.stopped = ""  # why `fit` stopped before its steps, if it did
        # whether `fit` ended on L-BFGS's own tolerance (not its iteration or evaluation cap,
        # nor an overflow of the line search)
        self.on_tolerance = False
        self.to(ctx.device, ctx.dtype)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Predictions (n,) at the history points x (n, d) themselves, with values y (n,)."""
        q = (x @ self.w_q.T).view(1, 1, *x.shape)
        k = (x @ self.w_k.T).view(1, 1, *x.shape)
        v = (y * self.w_v).view(1, 1, -1, 1)
        if not self.w_gates:
            return self.h(q, k, v).flatten()
        gates = {name: (x @ w.T).view(1, 1, len(x), -1) for name, w in self.w_gates.items()}
        return self.h(q, k, v, gates=gates).flatten()

    def fit(self, x: torch.Tensor, y: torch.Tensor, steps: int) -> list[tuple[int, float]]:
        """Full-batch L-BFGS on the MSE over the history points; returns the loss curve."""
        x = x.to(self.ctx.device, self.ctx.dtype)
        y = y.to(self.ctx.device, self.ctx.dtype)
        scale = y.square().mean().detach()  # a unit-free loss for the optimiser
        opt = torch.optim.LBFGS(
            self.parameters(),
            lr=1,
            max_iter=steps,
            history_size=50,
            tolerance_grad=1e-12,
            tolerance_change=1e-15,
            line_search_fn="strong_wolfe",
        )
        curve: list[tuple[int, float]] = []
        best: list = [math.inf, None]  # the lowest loss evaluated, and the parameters there

        def closure() -> torch.Tensor:
            opt.zero_grad()
            loss = (self(x, y) - y).square().mean() / scale
            loss.backward()
            curve.append((len(curve) + 1, float(loss.detach() * scale)))
            if curve[-1][1] < best[0]:
                best[:] = [curve[-1][1], [t.detach().clone() for t in self.parameters()]]
            return loss

        try:
            opt.step(closure)
            state = opt.state[next(iter(self.parameters()))]
            max_eval = opt.param_groups[0]["max_eval"]
            self.on_tolerance = state["n_iter"] < steps and state["func_evals"] < max_eval
        except RuntimeError as error:
            # the strong-Wolfe line search can extrapolate a step past the float range on a flat
            # stretch (a last-bit change of a gradient decides whether it does): the fit keeps
            # the best point it evaluated, and says so
            if "overflow" not in str(error) or best[1] is None:
                raise
            with torch.no_grad():
                for t, kept in zip(self.parameters(), best[1], strict=True):
                    t.copy_(kept)
            self.stopped = (
                f"L-BFGS stopped after {len(curve)} evaluations ({error}); best point kept"
            )
            curve.append((len(curve) + 1, best[0]))
        return curve[:: max(1, len(curve) // 50)] + curve[-1:]


def bootstrap_band(
    errors: torch.Tensor,
    n_resamples: int,
    gen: torch.Generator,
    quantiles: tuple[float, float] = (0.05, 0.95),
) -> tuple[torch.Tensor, torch.Tensor]:
    """5–95% bootstrap band of the mean over prompts (rows) of ``errors`` (P, n), per column."""
    rows = errors.shape[0]
    idx = torch.randint(0, rows, (n_resamples, rows), generator=gen)
    means = errors[idx].mean(dim=1)  # (resamples, n)
    q = torch.tensor(quantiles, dtype=means.dtype)
    lo, hi = torch.quantile(means, q, dim=0)
    return lo, hi
