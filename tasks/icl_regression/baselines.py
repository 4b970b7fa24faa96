"""Classical in-context regression baselines (Garg et al. 2022), batched over prompts, and the
one-step gradient-descent predictor of von Oswald et al. 2023 with its optimal step in closed form.

Each predictor takes the examples seen so far, xs (P, n, d) and ys (P, n), and queries (P, d), and
returns predictions (P,). With n = 0 every baseline predicts 0. Expected error / d on isotropic
Gaussian data (theory.md §4): min-norm least squares (d − n)/d below d and 0 above (noiseless);
averaging (d + 1)/n; the optimal gradient step (d + 1)/(n + d + 1); ridge with λ = σ² is optimal
under noise. `gd_step_theory` gives the gradient step's step size and error for any input
distribution with iid, symmetric coordinates (its docstring derives them).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

X_DISTS = ("gaussian", "uniform")


def least_squares(xs: torch.Tensor, ys: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """Minimum-norm least squares (LAPACK gelsd, on CPU in float64)."""
    if xs.shape[1] == 0:
        return queries.new_zeros(queries.shape[0])
    w = torch.linalg.lstsq(
        xs.double().cpu(), ys.double().cpu().unsqueeze(-1), driver="gelsd"
    ).solution
    return (queries.double().cpu().unsqueeze(1) @ w).flatten().to(queries)


def ridge(xs: torch.Tensor, ys: torch.Tensor, queries: torch.Tensor, lam: float) -> torch.Tensor:
    """Ridge regression: w = (XᵀX + λI)⁻¹Xᵀy."""
    if xs.shape[1] == 0:
        return queries.new_zeros(queries.shape[0])
    x, y = xs.double(), ys.double().unsqueeze(-1)
    gram = x.transpose(1, 2) @ x + lam * torch.eye(x.shape[-1], dtype=torch.float64)
    w = torch.linalg.solve(gram, x.transpose(1, 2) @ y)
    return (queries.double().unsqueeze(1) @ w).flatten().to(queries)


def averaging(
    xs: torch.Tensor,
    ys: torch.Tensor,
    queries: torch.Tensor,
    second_moment: float | torch.Tensor = 1.0,
) -> torch.Tensor:
    """w = mean of y_i·x_i / s: prediction w·x.

    Garg et al.'s averaging estimator assumes E[xxᵀ] = I; for E[xxᵀ] = s·I, mean(y·x) estimates
    s·w, so it is divided by ``second_moment`` s (a number, or one per prompt (P,)). It is one
    gradient step from w = 0 on the loss of `gd_step` with step η = 1/s (`optimal_gd_step` gives
    the best η, which is smaller: η* → 1/s only as n → ∞).
    """
    if xs.shape[1] == 0:
        return queries.new_zeros(queries.shape[0])
    w = (xs * ys.unsqueeze(-1)).mean(dim=1)
    return (w * queries).sum(-1) / second_moment


def lasso(
    xs: torch.Tensor,
    ys: torch.Tensor,
    queries: torch.Tensor,
    alpha: float,
    tol: float = 1e-9,
    max_sweeps: int = 100_000,
) -> torch.Tensor:
    """Lasso without intercept, Garg et al.'s baseline for sparse weights (their `LassoModel`,
    scikit-learn's objective): w minimises (1/(2n))‖y − Xw‖² + α‖w‖₁; prediction w·x.

    Cyclic coordinate descent in float64, batched over prompts: coordinate j's exact minimiser
    with the others fixed is S(ρ_j, α)/(‖X_j‖²/n), ρ_j = X_jᵀ(r + X_j w_j)/n, S the soft
    threshold. The objective is convex and each update exact, so the sweeps converge to the
    minimum (its KKT conditions are tested to 1e-8); they stop when no weight moves by more than
    ``tol``. A zero column (a coordinate no example uses) keeps w_j = 0, the minimum-ℓ1 choice.
    """
    if xs.shape[1] == 0:
        return queries.new_zeros(queries.shape[0])
    x, y = xs.double().cpu(), ys.double().cpu()
    n = x.shape[1]
    col_sq = x.square().sum(1) / n  # (P, d)
    w = torch.zeros(x.shape[0], x.shape[2], dtype=torch.float64)
    residual = y.clone()
    for _ in range(max_sweeps):
        moved = torch.zeros(x.shape[0], dtype=torch.float64)
        for j in range(x.shape[2]):
            column = x[:, :, j]
            rho = (column * (residual + column * w[:, j : j + 1])).sum(1) / n
            shrunk = torch.sign(rho) * (rho.abs() - alpha).clamp(min=0)
            new = torch.where(col_sq[:, j] > 0, shrunk / col_sq[:, j].clamp(min=1e-300), 0.0)
            residual -= column * (new - w[:, j]).unsqueeze(1)
            moved = torch.maximum(moved, (new - w[:, j]).abs())
            w[:, j] = new
        if float(moved.max()) <= tol:
            break
    return (queries.double().cpu() * w).sum(-1).to(queries)


def nearest_neighbours(
    xs: torch.Tensor, ys: torch.Tensor, queries: torch.Tensor, k: int = 3
) -> torch.Tensor:
    """Mean y of the k examples nearest to the query (all of them when fewer than k)."""
    n = xs.shape[1]
    if n == 0:
        return queries.new_zeros(queries.shape[0])
    dist = (xs - queries.unsqueeze(1)).square().sum(-1)
    idx = dist.topk(min(k, n), dim=1, largest=False).indices
    return ys.gather(1, idx).mean(dim=1)


def nearest_neighbours_leave_one_out(x: torch.Tensor, y: torch.Tensor, k: int = 3) -> torch.Tensor:
    """Each of the n points (x (n, d), y (n,)) predicted by the mean y of its k nearest *other*
    points: in-sample k-NN would find the point itself at distance 0 and read its own label."""
    n = x.shape[0]
    if n < 2:
        return y.new_zeros(n)
    dist = torch.cdist(x.double(), x.double()).fill_diagonal_(float("inf"))
    idx = dist.topk(min(k, n - 1), dim=1, largest=False).indices
    return y[idx].mean(dim=1)


def gd_step(xs: torch.Tensor, ys: torch.Tensor, queries: torch.Tensor, step: float) -> torch.Tensor:
    """One gradient-descent step from w = 0 on L(w) = 1/(2n) Σ (w·x_i − y_i)², step ``step``:
    w₁ = (η/n) Σ y_i x_i; prediction w₁·x (0 with no examples)."""
    if xs.shape[1] == 0:
        return queries.new_zeros(queries.shape[0])
    w = step * (xs * ys.unsqueeze(-1)).mean(dim=1)
    return (w * queries).sum(-1)


def online_gd(xs: torch.Tensor, ys: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """One pass of online gradient descent from w = 0, one example at a time, each step the
    normalised one (η_i = 1/‖x_i‖², Kaczmarz's projection onto y_i = w·x_i):
    w ← w + (y_i − w·x_i)·x_i/‖x_i‖². It is the delta rule's estimator: the delta rule with
    β = 1, L2-normalised keys k_i = x_i/‖x_i‖ and values y_i/‖x_i‖ is exactly this update, and
    its state read by the query is the prediction w·x."""
    w = queries.new_zeros(queries.shape)
    for i in range(xs.shape[1]):
        x = xs[:, i]
        residual = ys[:, i] - (w * x).sum(-1)
        w = w + (residual / x.square().sum(-1).clamp_min(1e-30)).unsqueeze(-1) * x
    return (w * queries).sum(-1)


def coordinate_moments(x_dist: str, x_scale: float) -> tuple[float, float]:
    """(E x_k², E x_k⁴) of one input coordinate: N(0, x_scale²) or U[−x_scale, x_scale]."""
    import scipy.stats  # imported on use: it costs every process that loads the plugins 1 s

    if x_dist == "gaussian":
        dist = scipy.stats.norm(scale=x_scale)
    elif x_dist == "uniform":
        dist = scipy.stats.uniform(loc=-x_scale, scale=2 * x_scale)
    else:
        raise ValueError(f"x_dist={x_dist!r} is not known; use one of {', '.join(X_DISTS)}.")
    return float(dist.moment(2)), float(dist.moment(4))


def sample_inputs(
    shape: tuple[int, ...], x_dist: str, x_scale: float, gen: torch.Generator
) -> torch.Tensor:
    """Inputs of ``shape`` with iid coordinates, N(0, x_scale²) or U[−x_scale, x_scale]."""
    if x_dist == "gaussian":
        return torch.randn(shape, generator=gen) * x_scale
    if x_dist == "uniform":
        return (torch.rand(shape, generator=gen) * 2 - 1) * x_scale
    raise ValueError(f"x_dist={x_dist!r} is not known; use one of {', '.join(X_DISTS)}.")


@dataclass
class GdStepTheory:
    """The optimal one-step predictor of `gd_step_theory`.

    Attributes:
        step: η*, the step that minimises the expected error.
        mse: Its expected squared error / d against the noiseless target w·x.
        mse_zero: The zero predictor's, E(w·x)²/d = s.
    """

    step: float
    mse: float
    mse_zero: float

    @property
    def ratio_to_zero(self) -> float:
        """mse / mse_zero = 1 − n·d·s² / (E‖x‖⁴ + (n − 1)·d·s² + σ²·d·s)."""
        return self.mse / self.mse_zero


def gd_step_theory(
    n: int, d: int, second_moment: float, fourth_moment: float, noise_var: float = 0.0
) -> GdStepTheory:
    """The step size of `gd_step` that minimises the expected error, and that error, exactly.

    Setting: w ~ N(0, I_d); inputs x_i and the query x with iid coordinates, symmetric about 0,
    s = E x_k², m4 = E x_k⁴; y_i = w·x_i + ε_i, ε_i ~ N(0, σ²); error measured against w·x.

    Derivation. With Σ̂ = (1/n) Σ x_i x_iᵀ, one step from 0 gives w₁ = (η/n) Σ y_i x_i
    = η Σ̂ w + (η/n) Σ ε_i x_i. The query is independent of w₁ − w and E[x xᵀ] = s·I, so
    E(x·w₁ − x·w)² = s·E‖w₁ − w‖². Averaging over w (E w wᵀ = I) and the noise:

        E‖w₁ − w‖² = E tr (ηΣ̂ − I)² + (η²/n²) Σ σ² E‖x_i‖²
                   = η²·(E tr Σ̂² + σ²·d·s/n) − 2η·d·s + d      (E tr Σ̂ = d·s).

    E tr Σ̂² = (1/n²) Σ_ij E (x_iᵀx_j)²: n diagonal terms E‖x‖⁴ = d·m4 + d(d − 1)·s², and
    n(n − 1) off-diagonal ones E (x_iᵀx_j)² = tr (s·I)² = d·s². So, with
    T = (E‖x‖⁴ + (n − 1)·d·s²)/n + σ²·d·s/n, the quadratic in η is least at

        η* = d·s / T,   E‖w₁ − w‖² = d − (d·s)²/T,   error / d = s·(1 − d·s²/T),

    and the zero predictor's error / d is E(w·x)²/d = s. Gaussian inputs (m4 = 3s²), noiseless:
    T = d·s²·(n + d + 1)/n, η* = n/((n + d + 1)·s), error/d over zero's = (d + 1)/(n + d + 1)
    (theory.md §4; 11/21 at d = n = 10). Uniform on [−a, a] (s = a²/3, m4 = a⁴/5 = 1.8·s²):
    (d − 0.2)/(n + d − 0.2) (9.8/19.8 at d = n = 10). With n = 0 the step is 0 (nothing to
    step on) and the error that of the zero predictor.
    """
    s, m4 = second_moment, fourth_moment
    if n == 0:
        return GdStepTheory(step=0.0, mse=s, mse_zero=s)
    norm4 = d * m4 + d * (d - 1) * s * s
    t = (norm4 + (n - 1) * d * s * s) / n + noise_var * d * s / n
    return GdStepTheory(step=d * s / t, mse=s * (1 - d * s * s / t), mse_zero=s)


def prefix_errors(
    predict, xs: torch.Tensor, ys: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """Squared error / d at every prompt position i, predicting point i from points < i.

    Args:
        predict: baseline(xs_seen, ys_seen, query) → predictions.
        xs: (P, n, d) inputs; ys: (P, n) observed (possibly noisy) outputs.
        targets: (P, n) noiseless outputs w·x that errors are measured against.

    Returns:
        (P, n) squared errors divided by d.
    """
    d = xs.shape[-1]
    cols = [
        (predict(xs[:, :i], ys[:, :i], xs[:, i]) - targets[:, i]).square() / d
        for i in range(xs.shape[1])
    ]
    return torch.stack(cols, dim=1)
