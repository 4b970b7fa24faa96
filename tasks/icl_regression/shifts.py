"""Garg et al.'s out-of-distribution evaluations of a trained in-context regression model.

Garg et al. 2022 (§4, "robustness"; `build_evals` in their `src/eval.py`) train on the standard
prompts (x ~ N(0, I_d), w ~ N(0, I_d), y = w·x) and evaluate the trained model on prompts that
leave that distribution, each time beside least squares on the *same* prompts — a model that
learned least squares degrades as least squares does, one that memorised the training
distribution does not. The shifts, applied at evaluation only:

- ``skewed``: x = z·T with T = U·diag(1, 1/2, …, 1/d)·Uᵀ (U a random rotation, one per job),
  rescaled so that E‖x‖² = d (their `sample_transformation(…, normalize=True)`);
- ``half_subspace``: the same with eigenvalues 1 on half the dimensions and 0 on the others, so
  every input lies in a random d/2-dimensional subspace;
- ``x_scale_<s>`` / ``y_scale_<s>``, s ∈ {1/3, 1/2, 2, 3}: inputs x → s·x (their T = U·(s·I)·Uᵀ
  is s·I), or weights w → s·w;
- ``noisy``: labels y + ε, ε ~ N(0, 1), renormalised to the training scale (Garg: y·√d/std(y)
  over the batch; here by its exact expectation √(d/(d + 1)), so that a prompt's labels do not
  depend on the rest of the batch); errors are against the renormalised *noiseless* target, as
  everywhere in this task (Garg scores against the noisy label, which adds σ²·d/(d + 1)/d to
  every curve, the model's and least squares' alike);
- ``one_orthant``: the in-context inputs all lie in one random orthant (|x|·signs, one sign
  pattern per prompt), the query does not (their ``random_quadrants``);
- ``orthogonal_query``: the query at position i is orthogonal to the i examples before it, with
  its norm kept (their ``orthogonal_train_test``; positions i < d, where such a query exists and is
  not determined by the examples);
- ``repeated_query``: the query at position i is one of the i examples before it, chosen
  uniformly (their ``overlapping_train_test``; positions i ≥ 1).

The first six change how prompts are drawn; the last three change which point is queried at each
position, so a causal model is run once per position on the prefix that ends at the query.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from attnbench.tasks.icl_regression import baselines as rb

SCALES = {"0p333": 0.333, "0p5": 0.5, "2": 2.0, "3": 3.0}  # Garg's, named without a dot
SHIFTS: dict[str, str] = {
    "skewed": "inputs with a skewed covariance (eigenvalues 1/k, rotated, trace d)",
    "half_subspace": "inputs in a random half-dimensional subspace (trace d)",
    **{f"x_scale_{k}": f"inputs scaled by {v}" for k, v in SCALES.items()},
    **{f"y_scale_{k}": f"weights (and so labels) scaled by {v}" for k, v in SCALES.items()},
    "noisy": "labels with N(0, 1) noise, renormalised to the training scale",
    "one_orthant": "in-context inputs in one random orthant, the query unconstrained",
    "orthogonal_query": "the query orthogonal to the examples before it",
    "repeated_query": "the query equal to one of the examples before it",
}


@dataclass
class ShiftedPrompts:
    """One shift's evaluation prompts.

    Attributes:
        examples: (P, n, d) the in-context inputs.
        labels: (P, n) their observed labels.
        queries: (P, n, d) the query at each position, or None: the examples themselves (a
            standard prompt, scored at every position by one forward pass).
        targets: (P, n) the noiseless value at each position's query.
        positions: The positions scored (a query needs at least one earlier example, or fewer
            than d of them).
    """

    examples: torch.Tensor
    labels: torch.Tensor
    queries: torch.Tensor | None
    targets: torch.Tensor
    positions: list[int]


def random_rotation(d: int, gen: torch.Generator) -> torch.Tensor:
    """A random orthogonal d×d matrix (QR of a Gaussian matrix, signs fixed: Haar-distributed)."""
    q, r = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=torch.float64))
    return (q * torch.sign(torch.diagonal(r))).float()


def covariance_transform(eigenvalues: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """T = U·diag(λ)·Uᵀ rescaled so that z·T (z ~ N(0, I)) has E‖x‖² = d: Σλ² = d."""
    u = random_rotation(len(eigenvalues), gen)
    t = u @ torch.diag(eigenvalues) @ u.T
    return t * math.sqrt(len(eigenvalues) / float(eigenvalues.square().sum()))


def sample_shift(name: str, size: int, n: int, d: int, gen: torch.Generator) -> ShiftedPrompts:
    """``size`` prompts of ``n`` examples in ``d`` dimensions under the shift ``name``."""
    if name not in SHIFTS:
        raise ValueError(f"shift {name!r} is not known; use one of {', '.join(SHIFTS)}.")
    x = torch.randn(size, n, d, generator=gen)
    w = torch.randn(size, d, generator=gen)
    queries = None
    positions = list(range(n))
    label_scale, noise_std = 1.0, 0.0
    if name in ("skewed", "half_subspace"):
        eig = 1 / torch.arange(1, d + 1, dtype=torch.float32)
        if name == "half_subspace":
            eig = (torch.arange(d) < max(1, d // 2)).float()
        x = x @ covariance_transform(eig, gen)
    elif name.startswith("x_scale_"):
        x = x * SCALES[name.removeprefix("x_scale_")]
    elif name.startswith("y_scale_"):
        w = w * SCALES[name.removeprefix("y_scale_")]
    elif name == "noisy":
        noise_std = 1.0
        label_scale = math.sqrt(d / (d + noise_std**2))
    elif name == "one_orthant":
        signs = torch.randn(size, 1, d, generator=gen).sign()
        queries = x
        x = x.abs() * signs
    elif name == "orthogonal_query":
        queries = orthogonal_queries(x)
        positions = list(range(min(n, d)))
    elif name == "repeated_query":
        queries = repeated_queries(x, gen)
        positions = list(range(1, n))
    noise = noise_std * torch.randn(size, n, generator=gen)
    labels = ((x * w.unsqueeze(1)).sum(-1) + noise) * label_scale
    at = x if queries is None else queries
    targets = (at * w.unsqueeze(1)).sum(-1) * label_scale
    return ShiftedPrompts(x, labels, queries, targets, positions)


def orthogonal_queries(x: torch.Tensor) -> torch.Tensor:
    """(P, n, d): the query at position i is x_i with its component in the span of x_1..x_{i−1}
    removed, rescaled to ‖x_i‖ (positions i ≥ d are left as x_i: no such direction exists)."""
    out = x.clone()
    d = x.shape[-1]
    for i in range(1, min(x.shape[1], d)):
        basis = torch.linalg.qr(x[:, :i].transpose(1, 2).double()).Q  # (P, d, i)
        q = x[:, i].double()
        q = q - (basis @ (basis.transpose(1, 2) @ q.unsqueeze(-1))).squeeze(-1)
        out[:, i] = (
            q * x[:, i].double().norm(dim=-1, keepdim=True) / q.norm(dim=-1, keepdim=True)
        ).float()
    return out


def repeated_queries(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """(P, n, d): the query at position i ≥ 1 is one of x_1..x_{i−1}, uniformly at random."""
    out = x.clone()
    size = x.shape[0]
    for i in range(1, x.shape[1]):
        pick = torch.randint(0, i, (size,), generator=gen)
        out[:, i] = x[torch.arange(size), pick]
    return out


def shifted_errors(
    predict: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    prompts: ShiftedPrompts,
) -> torch.Tensor:
    """(P, len(positions)) squared error / d of ``predict`` at each scored position.

    ``predict(examples (P, i, d), labels (P, i), queries (P, d)) → (P,)``: a baseline's form;
    `model_predictor` wraps a causal model into it.
    """
    d = prompts.examples.shape[-1]
    queries = prompts.examples if prompts.queries is None else prompts.queries
    cols = [
        (
            predict(prompts.examples[:, :i], prompts.labels[:, :i], queries[:, i]).double()
            - prompts.targets[:, i].double()
        ).square()
        / d
        for i in prompts.positions
    ]
    return torch.stack(cols, dim=1)


def least_squares_errors(prompts: ShiftedPrompts) -> torch.Tensor:
    """Least squares' (P, len(positions)) error / d on the same prompts."""
    return shifted_errors(rb.least_squares, prompts)


def model_errors(
    predict_all: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], prompts: ShiftedPrompts
) -> torch.Tensor:
    """(P, len(positions)) squared error / d of a causal prompt model at each scored position.

    ``predict_all(xs (P, k, d), ys (P, k)) → (P, k)`` reads the model at every x token; position
    i's prediction depends only on the i examples before it and x_i (the model is causal and reads
    out at the x token, before its label). A standard prompt is therefore scored by one pass; a
    shifted query at position i by a pass over the prefix of i examples followed by the query.
    """
    d = prompts.examples.shape[-1]
    pos = prompts.positions
    if prompts.queries is None:
        preds = predict_all(prompts.examples, prompts.labels)[:, pos]
    else:
        cols = []
        for i in pos:
            xs = torch.cat([prompts.examples[:, :i], prompts.queries[:, i : i + 1]], dim=1)
            ys = torch.cat([prompts.labels[:, :i], prompts.labels.new_zeros(len(xs), 1)], dim=1)
            cols.append(predict_all(xs, ys)[:, i])
        preds = torch.stack(cols, dim=1)
    return (preds.double() - prompts.targets[:, pos].double()).square() / d
