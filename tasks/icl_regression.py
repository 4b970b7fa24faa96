"""In-context linear regression, measured against least squares and the classical baselines.

Two modes (theory.md §3–§4):

``mode=attention_system`` — the single-layer "attention system": query x, keys X, values Y,
learnable W_q, W_k (d×d) and a scalar w_v, with the variant as the normalisation h:
ŷ = h((W_q x)ᵀ W_k Xᵀ)·(w_v Y). Trained (L-BFGS, full batch) with MSE on the n history points
(queries = keys = X); X ~ U[−r, r], β ~ N(0, I), y = Xβ + noise. Reported: the final loss over
least squares' loss on the same points (``loss_ratio_vs_ls``) for every variant and, where the
trained system is linear in x (h = identity), the error rate ‖β_eq − β_LS‖/‖β_LS‖ with β_eq
read off the system's predictions. Repeated over ``system_runs`` seeds.

``mode=prompt`` — Garg et al. 2022: x ~ N(0, I_d), w ~ N(0, I_d), y = w·x (+ noise); prompts
x₁, (y₁, 0…0), x₂, (y₂, 0…0), …; a causal model (the shared model) predicts y_i at x_i from the
i earlier pairs. Curve: squared error / d (against the noiseless w·x) per number of in-context
examples, with a 5–95% bootstrap band over prompts; the baselines run on the same prompts.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnbench import JobContext, Metric, MetricPoint, Task, TaskResult, VariantShape, register_task
from attnbench.harness.model import ModelConfig, SequenceModel
from attnbench.harness.training import TrainConfig, train
from attnbench.tasks import regression_baselines as rb

MODES = ("prompt", "attention_system")
BASELINES = ("least_squares", "ridge", "averaging", "knn3")


@dataclass
class IclRegressionParams:
    """Parameters of the `icl_regression` task."""

    mode: str = "prompt"  # prompt (Garg et al.) | attention_system (theory.md §3)
    n_dims: int = 5  # d
    n_points: int = 15  # examples per prompt (prompt) or history points n (attention_system)
    noise_std: float = 0.0  # σ of the noise added to observed y
    ridge_lambda: float = -1.0  # ridge baseline λ; negative: σ² (at least 1e-6)
    eval_prompts: int = 1280  # prompts for the error curves (prompt mode)
    bootstrap: int = 1000  # bootstrap resamples of the prompts for the 5–95% band
    steps: int = 2000  # optimiser steps (prompt) or L-BFGS iterations (attention_system)
    batch_size: int = 64  # fresh prompts per step (prompt mode)
    lr: float = 1e-3  # peak AdamW learning rate (prompt mode)
    d_model: int = 64  # model width (prompt mode)
    n_layers: int = 3  # blocks (prompt mode)
    n_heads: int = 2  # heads (prompt mode)
    system_runs: int = 10  # independent systems (attention_system mode)
    x_range: float = 10.0  # X ~ U[−x_range, x_range] (attention_system mode)


@register_task("icl_regression")
class IclRegression(Task):
    """In-context linear regression against least squares, ridge, averaging and 3-NN."""

    Params = IclRegressionParams
    description = "In-context linear regression vs least squares and classical baselines."
    headline = "mse_mean"
    charts = ("mse",)
    chart_bands = {"mse": ("mse_q05", "mse_q95")}
    chart_references = {
        "mse": {
            "mse_least_squares": "least squares",
            "mse_ridge": "ridge",
            "mse_averaging": "averaging",
            "mse_knn3": "3-NN",
        }
    }
    metrics = (
        Metric("mse", False, "Squared error / d of the model, by number of in-context examples"),
        Metric("mse_q05", None, "5% bootstrap quantile of the mean error (prompt mode)"),
        Metric("mse_q95", None, "95% bootstrap quantile of the mean error (prompt mode)"),
        Metric("mse_mean", False, "Model error / d averaged over the numbers of examples"),
        Metric("mse_least_squares", None, "Min-norm least squares on the same prompts"),
        Metric("mse_ridge", None, "Ridge regression (λ = σ²) on the same prompts"),
        Metric("mse_averaging", None, "Averaging estimator w = mean(y·x) on the same prompts"),
        Metric("mse_knn3", None, "3-nearest-neighbours on the same prompts"),
        Metric(
            "error_rate_vs_ls",
            False,
            "‖β_eq − β_LS‖/‖β_LS‖, worst run (attention_system, where the system is linear)",
        ),
        Metric(
            "loss_ratio_vs_ls",
            False,
            "Final training loss / least-squares loss, median run (attention_system)",
        ),
        Metric("final_loss", False, "Training loss at the end"),
    )

    def check(self) -> None:
        """Refuse impossible settings with one sentence."""
        p = self.params
        if p.mode not in MODES:
            raise ValueError(f"task.mode={p.mode!r} is not valid; use one of {', '.join(MODES)}.")
        if p.mode == "prompt":
            self.require_positive("d_model", "n_layers", "n_heads", "bootstrap")
            self.require_divides("n_heads", "d_model")
            self.require_finite("lr", above=0)
        else:
            self.require_finite("x_range", above=0)
        self.require_positive(
            "n_dims", "n_points", "eval_prompts", "steps", "batch_size", "system_runs"
        )
        self.require_finite("noise_std", at_least=0)
        self.require_finite("ridge_lambda")

    def ridge_lambda(self) -> float:
        """λ of the ridge baseline: the given one, or σ² (at least 1e-6)."""
        p = self.params
        return p.ridge_lambda if p.ridge_lambda >= 0 else max(p.noise_std**2, 1e-6)

    def baselines(self) -> dict:
        """Each baseline as predict(xs (P, n, d), ys (P, n), queries (P, d)) → (P,), by name."""
        lam = self.ridge_lambda()
        return {
            "least_squares": rb.least_squares,
            "ridge": lambda x, y, q: rb.ridge(x, y, q, lam),
            "averaging": rb.averaging,
            "knn3": rb.nearest_neighbours,
        }

    def baseline_errors(
        self, xs: torch.Tensor, ys: torch.Tensor, targets: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """(P, n) error / d of each baseline on the given prompts."""
        return {name: rb.prefix_errors(f, xs, ys, targets) for name, f in self.baselines().items()}

    def run(self, ctx: JobContext) -> TaskResult:
        if self.params.mode == "prompt":
            return self.run_prompt(ctx)
        return self.run_attention_system(ctx)

    # --- prompt mode -------------------------------------------------------------------------

    def sample_prompts(self, n: int, gen: torch.Generator):
        """x (n, k, d), w (n, d), noiseless y and observed y (n, k)."""
        p = self.params
        xs = torch.randn(n, p.n_points, p.n_dims, generator=gen)
        w = torch.randn(n, p.n_dims, generator=gen)
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
            max_len=2 * p.n_points,
            input_dim=p.n_dims,
            output_dim=1,
        )
        model = SequenceModel(cfg, ctx.variant_name, ctx.variant_params).to(ctx.device, ctx.dtype)
        gen = ctx.generator(1)

        def predict(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
            tokens = self.interleave(xs, ys).to(ctx.device, ctx.dtype)
            return model(tokens)[:, 0::2, 0].float()  # read out at the x tokens

        def loss_on_batch(step: int) -> torch.Tensor:
            xs, _, _, observed = self.sample_prompts(p.batch_size, gen)
            return (predict(xs, observed) - observed.to(ctx.device)).square().mean()

        curve = train(
            model,
            loss_on_batch,
            TrainConfig(steps=p.steps, batch_size=p.batch_size, lr=p.lr),
            desc=f"icl/{ctx.variant_name}",
        )
        xs, _, clean, observed = self.sample_prompts(p.eval_prompts, ctx.generator(100))
        with torch.no_grad():
            preds = torch.cat(
                [
                    predict(xs[i : i + 256], observed[i : i + 256]).cpu()
                    for i in range(0, p.eval_prompts, 256)
                ]
            )
        model_err = (preds - clean).square() / p.n_dims
        lo, hi = bootstrap_band(model_err, p.bootstrap, ctx.generator(200))
        points = [
            MetricPoint("mse_mean", float(model_err.mean())),
            MetricPoint("final_loss", curve[-1][1]),
        ]
        for i in range(p.n_points):
            points += [
                MetricPoint("mse", float(model_err[:, i].mean()), "n_examples", i),
                MetricPoint("mse_q05", float(lo[i]), "n_examples", i),
                MetricPoint("mse_q95", float(hi[i]), "n_examples", i),
            ]
        for name, err in self.baseline_errors(xs, observed, clean).items():
            points += [
                MetricPoint(f"mse_{name}", float(v), "n_examples", i)
                for i, v in enumerate(err.mean(dim=0).tolist())
            ]
        return TaskResult(points=points, details={"loss_curve": curve})

    # --- attention_system mode ---------------------------------------------------------------

    def run_attention_system(self, ctx: JobContext) -> TaskResult:
        p = self.params
        n, d = p.n_points, p.n_dims
        ratios, error_rates, linear_everywhere = [], [], True
        errors = {name: [] for name in ("mse", *BASELINES)}
        curves = []
        for run in range(p.system_runs):
            gen = ctx.generator(1000 + run)
            x = (torch.rand(n, d, generator=gen) * 2 - 1) * p.x_range
            beta = torch.randn(d, generator=gen)
            y = x @ beta + p.noise_std * torch.randn(n, generator=gen)
            system = AttentionSystem(ctx, d, n, gen)
            curve = system.fit(x, y, p.steps)
            curves.append(curve)
            with torch.no_grad():
                pred = system(x.to(ctx.device, ctx.dtype)).double().cpu()
            beta_ls = torch.linalg.lstsq(
                x.double(), y.double().unsqueeze(-1), driver="gelsd"
            ).solution.flatten()
            ls_loss = (x.double() @ beta_ls - y.double()).square().mean()
            model_loss = (pred - y.double()).square().mean()
            ratios.append(float(model_loss / ls_loss))
            beta_eq = torch.linalg.lstsq(x.double(), pred.unsqueeze(-1), driver="gelsd").solution
            residual = (x.double() @ beta_eq.flatten() - pred).norm() / pred.norm()
            linear_everywhere &= bool(residual < 1e-4)  # ŷ = Xβ_eq exactly: h acts linearly
            error_rates.append(float((beta_eq.flatten() - beta_ls).norm() / beta_ls.norm()))
            errors["mse"].append(float(model_loss) / d)
            for name, err in self.in_sample_baselines(x, y).items():
                errors[name].append(err)
        points = [
            MetricPoint("loss_ratio_vs_ls", float(torch.tensor(ratios).median())),
            MetricPoint("final_loss", float(torch.tensor([c[-1][1] for c in curves]).mean())),
            MetricPoint("mse_mean", sum(errors["mse"]) / len(errors["mse"])),
        ]
        if linear_everywhere:
            points.append(MetricPoint("error_rate_vs_ls", max(error_rates)))
        for name, values in errors.items():
            metric = "mse" if name == "mse" else f"mse_{name}"
            points.append(MetricPoint(metric, sum(values) / len(values), "n_examples", n))
        details = {
            "loss_ratios": ratios,
            "error_rates": error_rates,
            "linear_in_x": linear_everywhere,
            "loss_curves": curves,
        }
        return TaskResult(points=points, details=details)

    def in_sample_baselines(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
        """Each baseline's in-sample error / d on the history points (fit on all n, then predict
        each of them), the attention system's own setting."""
        xs = x.unsqueeze(0).expand(len(x), -1, -1)  # every point sees all n history points
        ys = y.unsqueeze(0).expand(len(x), -1)
        return {
            name: float((predict(xs, ys, x) - y).square().mean()) / x.shape[1]
            for name, predict in self.baselines().items()
        }


class AttentionSystem(torch.nn.Module):
    """ŷ_i = h((W_q x_i)ᵀ W_k Xᵀ)·(w_v Y) with the variant as h (theory.md §3)."""

    def __init__(self, ctx: JobContext, d: int, n: int, gen: torch.Generator) -> None:
        super().__init__()
        self.w_q = torch.nn.Parameter(torch.randn(d, d, generator=gen) / d**0.5)
        self.w_k = torch.nn.Parameter(torch.randn(d, d, generator=gen) / d**0.5)
        self.w_v = torch.nn.Parameter(torch.ones(()))
        self.h = ctx.build_variant(VariantShape(n_heads=1, head_dim=d, max_len=n))
        self.ctx = ctx
        self.to(ctx.device, ctx.dtype)
        self.y: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = (x @ self.w_q.T).view(1, 1, *x.shape)
        k = (x @ self.w_k.T).view(1, 1, *x.shape)
        v = (self.y * self.w_v).view(1, 1, -1, 1)
        return self.h(q, k, v).flatten()

    def fit(self, x: torch.Tensor, y: torch.Tensor, steps: int) -> list[tuple[int, float]]:
        """Full-batch L-BFGS on the MSE over the history points; returns the loss curve."""
        x = x.to(self.ctx.device, self.ctx.dtype)
        self.y = y.to(self.ctx.device, self.ctx.dtype)
        scale = self.y.square().mean().detach()  # a unit-free loss for the optimiser
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

        def closure() -> torch.Tensor:
            opt.zero_grad()
            loss = (self(x) - self.y).square().mean() / scale
            loss.backward()
            curve.append((len(curve) + 1, float(loss.detach() * scale)))
            return loss

        opt.step(closure)
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
