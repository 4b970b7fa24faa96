"""The sequences of the state-tracking tasks, drawn from a ``torch.Generator`` (same seed, same
sequences). Each batch is (inputs, targets), (n, length) long; targets are −100 where nothing is
scored.

* **parity** (Deletang et al. 2023; Grazzi et al. 2025): uniform bits 0/1; the target at position
  t is the parity of bits 0…t (the running parity).
* **word problem** (Merrill et al. 2024; Siems et al. 2025): uniform elements of a group G
  (`attnbench.tasks.state_tracking.groups`, token = element index, identity included); the target
  at position t is the index of the product x₀·x₁·…·x_t (the prefix product).
* **modular arithmetic without brackets** (Deletang's "simple" version; Grazzi's from xLSTM's
  generator): numbers of {0, …, p−1} at even positions, operators at odd ones, drawn uniformly;
  ``*`` binds tighter than ``+`` and ``−``. The target at every number is the value modulo p of
  the expression up to it (−100 at the operators).
* **modular arithmetic with brackets** (Deletang's, used by Grazzi): a random expression of
  exactly ``length`` tokens, built top-down as Deletang's generator does: lengths 1 to 4 are d,
  −d, (d), (−d); a longer one is (left op right) with the left length uniform in
  [1, length − 4]. The target is the value modulo p, at the last token only (a prefix of a
  bracketed expression has no value); shorter expressions are padded with PAD after their end.

Token ids of modular arithmetic: the numbers 0…p−1, then ``+ − * ( )`` and PAD
(`arithmetic_vocabulary`).
"""

from __future__ import annotations

import random

import torch

from attnbench.tasks.state_tracking.groups import Group

IGNORE = -100  # target of unscored positions (PyTorch's cross-entropy ignore_index)
SYMBOLS = ("+", "-", "*", "(", ")", "PAD")  # after the p numbers, in this order
OPERATORS = "+-*"


def arithmetic_vocabulary(modulus: int) -> dict[str, int]:
    """Token id of every symbol of modular arithmetic: "0" … "p−1", then `SYMBOLS`."""
    vocab = {str(d): d for d in range(modulus)}
    vocab.update({s: modulus + i for i, s in enumerate(SYMBOLS)})
    return vocab


def parity_batch(n: int, length: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` bit strings of ``length``; targets: the running parity at every position."""
    bits = torch.randint(0, 2, (n, length), generator=gen)
    return bits, bits.cumsum(1) % 2


def word_problem_batch(
    n: int, length: int, g: Group, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` words of ``length`` uniform elements of ``g``; targets: the prefix products."""
    x = torch.randint(0, g.order, (n, length), generator=gen)
    y = torch.empty_like(x)
    state = x[:, 0]
    y[:, 0] = state
    for t in range(1, length):
        state = g.table[state, x[:, t]]
        y[:, t] = state
    return x, y


def arithmetic_batch(
    n: int, length: int, modulus: int, operators: str, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` expressions without brackets of ``length`` tokens (number, op, number, …); targets:
    the value of the expression so far at every number, −100 at the operators."""
    vocab = arithmetic_vocabulary(modulus)
    ops = torch.tensor([vocab[o] for o in operators])
    x = torch.randint(0, modulus, (n, length), generator=gen)
    n_ops = length // 2
    x[:, 1::2] = ops[torch.randint(0, len(ops), (n, n_ops), generator=gen)]
    y = torch.full_like(x, IGNORE)
    total = torch.zeros(n, dtype=torch.long)  # the finished additive terms
    term = x[:, 0].clone()  # the signed product being built
    y[:, 0] = term % modulus
    for t in range(2, length, 2):
        op, d = x[:, t - 1], x[:, t]
        times = op == vocab["*"]
        sign = torch.where(op == vocab["-"], -1, 1)
        total = torch.where(times, total, (total + term) % modulus)
        term = torch.where(times, term * d, sign * d) % modulus
        y[:, t] = (total + term) % modulus
    return x, y


def bracket_expression(
    length: int, modulus: int, operators: str, rng: random.Random
) -> tuple[list[str], int]:
    """One expression of exactly ``length`` symbols and its value modulo ``modulus``."""
    if length < 1:
        raise ValueError(f"an expression needs at least one token, got length {length}")
    if length <= 4:
        d = rng.randrange(modulus)
        value = -d % modulus if length in (2, 4) else d
        body = ["-", str(d)] if length in (2, 4) else [str(d)]
        return (["(", *body, ")"] if length >= 3 else body), value
    left_length = rng.randint(1, length - 4)
    left, a = bracket_expression(left_length, modulus, operators, rng)
    right, b = bracket_expression(length - 3 - left_length, modulus, operators, rng)
    op = operators[rng.randrange(len(operators))]
    value = {"+": a + b, "-": a - b, "*": a * b}[op] % modulus
    return ["(", *left, op, *right, ")"], value


def bracket_batch(
    n: int,
    lengths: torch.Tensor | int,
    width: int,
    modulus: int,
    operators: str,
    gen: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` bracketed expressions, the i-th of ``lengths[i]`` tokens (or all of ``lengths``),
    padded with PAD to ``width``; the target (the value) at each expression's last token."""
    vocab = arithmetic_vocabulary(modulus)
    if isinstance(lengths, int):
        lengths = torch.full((n,), lengths, dtype=torch.long)
    rng = random.Random(int(torch.randint(0, 2**62, (1,), generator=gen)))
    x = torch.full((n, width), vocab["PAD"], dtype=torch.long)
    y = torch.full((n, width), IGNORE, dtype=torch.long)
    for i, m in enumerate(lengths.tolist()):
        symbols, value = bracket_expression(m, modulus, operators, rng)
        x[i, :m] = torch.tensor([vocab[s] for s in symbols])
        y[i, m - 1] = value
    return x, y
