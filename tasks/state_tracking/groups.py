"""The finite groups of the word problems: symmetric groups S_n and alternating groups A_n, built
as permutations, with their multiplication tables.

An element is a permutation of {0, …, n−1}, a tuple p with p[i] the image of i. The product
follows the order in which a word is read, left to right: ``a·b`` applies a first, then b, so
(a·b)[i] = b[a[i]]. A word x₁ x₂ … x_t then multiplies to x₁·x₂·…·x_t, the state after applying
its letters in turn (Merrill et al. 2024, "The Illusion of State in State-Space Models": the
prefix product at every position). Either order of composition gives a group isomorphic to the
other; this one makes the running product a left-to-right scan.

S_n holds all n! permutations in lexicographic order; A_n the even ones (an even number of
inversions), in the same order, so A_n's indices are not S_n's. The identity is index 0 in both.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from functools import cache

import torch

MAX_DEGREE = 6  # S6 has 720 elements: a 720×720 table; larger groups would be slow to tabulate


def compose(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """The product a·b: apply a, then b."""
    return tuple(b[a[i]] for i in range(len(a)))


def is_even(p: tuple[int, ...]) -> bool:
    """Whether p has an even number of inversions (pairs i < j with p[i] > p[j])."""
    inversions = sum(p[i] > p[j] for i in range(len(p)) for j in range(i + 1, len(p)))
    return inversions % 2 == 0


@dataclass(frozen=True)
class Group:
    """A finite permutation group with its multiplication table.

    Attributes:
        name: "S5", "A5", …
        elements: The permutations, identity first.
        table: (|G|, |G|) long: ``table[i, j]`` is the index of elements[i]·elements[j].
    """

    name: str
    elements: tuple[tuple[int, ...], ...]
    table: torch.Tensor

    @property
    def order(self) -> int:
        """|G|: the number of elements."""
        return len(self.elements)

    def index(self, p: tuple[int, ...]) -> int:
        """The index of permutation p (ValueError if p is not in the group)."""
        return self.elements.index(tuple(p))


def _tabulate(name: str, elements: list[tuple[int, ...]]) -> Group:
    where = {p: i for i, p in enumerate(elements)}
    table = torch.tensor([[where[compose(a, b)] for b in elements] for a in elements])
    return Group(name, tuple(elements), table)


@cache
def group(name: str) -> Group:
    """The group called ``name``: "S<n>" (symmetric) or "A<n>" (alternating), 2 <= n <= 6.

    Raises:
        ValueError: another name.
    """
    match = re.fullmatch(r"([SA])([2-9])", name)
    if not match or int(match.group(2)) > MAX_DEGREE:
        raise ValueError(
            f"group '{name}' is not available; use S<n> or A<n> with 2 <= n <= {MAX_DEGREE} "
            "(the papers use S3, A5 and S5)."
        )
    kind, n = match.group(1), int(match.group(2))
    perms = list(itertools.permutations(range(n)))  # lexicographic: the identity first
    if kind == "A":
        perms = [p for p in perms if is_even(p)]
    return _tabulate(name, perms)
