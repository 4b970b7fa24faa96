"""Classical in-context regression baselines (Garg et al. 2022), batched over prompts.

Each function takes the examples seen so far, xs (P, n, d) and ys (P, n), and queries (P, d), and
returns predictions (P,). With n = 0 every baseline predicts 0. Expected error / d on isotropic
Gaussian data (theory.md §4): min-norm least squares (d − n)/d below d and 0 above (noiseless);
averaging (d + 1)/n; ridge with λ = σ² is optimal under noise.
"""

from __future__ import annotations

import torch


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


def averaging(xs: torch.Tensor, ys: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """w = mean of y_i·x_i (one gradient step from 0 with step 1/n): prediction w·x."""
    if xs.shape[1] == 0:
        return queries.new_zeros(queries.shape[0])
    w = (xs * ys.unsqueeze(-1)).mean(dim=1)
    return (w * queries).sum(-1)


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
