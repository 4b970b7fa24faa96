"""The three state-tracking tasks (`attnbench.tasks.state_tracking` holds their protocol, its
``data`` module their sequences).

==================  ==========================================  =================================
task                the papers' setting                         here (defaults; CPU size)
==================  ==========================================  =================================
parity              Grazzi: bits, train lengths 3-40, test      bits, train 32 (every prefix),
                    40-256, the end scored; chance 1/2           test 32-256, the end scored
modular_arithmetic  Deletang/Grazzi: numbers mod 5 and + − *    the same (``operators``,
                    (no brackets, * first) or + − (brackets),   ``modulus``, ``brackets``); the
                    train up to 40 tokens, test longer          end of each test length scored
word_problem        Merrill/DeltaProduct: uniform elements of   the same, train 32 (every
                    S3, A5 or S5, the prefix product at every   prefix), test 32-256; chance
                    position, train 128, test 512               1/|G| per position
==================  ==========================================  =================================
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnbench import Metric, register_task
from attnbench.tasks.state_tracking import StateParams, StateTrackingTask
from attnbench.tasks.state_tracking.data import (
    OPERATORS,
    SYMBOLS,
    arithmetic_batch,
    bracket_batch,
    parity_batch,
    word_problem_batch,
)
from attnbench.tasks.state_tracking.groups import group

MAX_BRACKET_LENGTH = 4096  # the recursive generator's depth stays far below Python's limit


@register_task("parity")
class Parity(StateTrackingTask):
    """Is the number of ones even: the running parity of a bit string."""

    Params = StateParams
    label = "Parity (length extrapolation)"
    description = (
        "Parity of a bit string (Grazzi et al. 2025): trained on strings up to train_length, "
        "scored at the end of longer ones; chance 1/2."
    )

    def vocab_size(self) -> int:
        return 2

    def classes(self) -> int:
        return 2

    def batch(self, n, length, gen, training=False):
        return parity_batch(n, length, gen)


@dataclass
class ModularArithmeticParams(StateParams):
    """Parameters of `modular_arithmetic`."""

    modulus: int = 5  # p: numbers and results in {0, …, p−1} (Deletang's 5)
    # the operators drawn (a subset of "+-*"); without brackets * binds tighter than + and −
    operators: str = "+-*"
    brackets: bool = False  # Deletang's bracketed expressions (the papers use operators "+-")


@register_task("modular_arithmetic")
class ModularArithmetic(StateTrackingTask):
    """The value modulo p of an arithmetic expression, with or without brackets."""

    Params = ModularArithmeticParams
    label = "Modular arithmetic (length extrapolation)"
    description = (
        "Value modulo p of an expression of + − * (Deletang et al. 2023, Grazzi et al. 2025), "
        "with or without brackets: trained up to train_length tokens, scored at the end of longer "
        "ones; chance 1/p."
    )

    @property
    def dense(self) -> bool:
        """Without brackets every number ends an expression; with them only the last token."""
        return not self.params.brackets

    def vocab_size(self) -> int:
        return self.params.modulus + len(SYMBOLS)

    def classes(self) -> int:
        return self.params.modulus

    def end_position(self, length: int) -> int:
        """Without brackets an expression has an odd length: an even one is scored at its last
        number (Deletang's rule, one token shorter)."""
        if self.params.brackets:
            return length - 1
        return length - 1 if length % 2 else length - 2

    def check_task(self) -> None:
        p = self.params
        if p.modulus < 2:
            raise ValueError(f"task.modulus={p.modulus} must be >= 2.")
        if (
            not p.operators
            or set(p.operators) - set(OPERATORS)
            or len(set(p.operators)) < len(p.operators)
        ):
            raise ValueError(
                f"task.operators='{p.operators}' must be distinct symbols of '{OPERATORS}', "
                "e.g. '+-*' (Deletang's) or '+-'."
            )
        if p.brackets and max(p.test_lengths) > MAX_BRACKET_LENGTH:
            raise ValueError(
                f"task.test_lengths up to {max(p.test_lengths)} are too long for bracketed "
                f"expressions; use lengths up to {MAX_BRACKET_LENGTH}."
            )

    def batch(self, n, length, gen, training=False):
        p = self.params
        if not p.brackets:
            return arithmetic_batch(n, length, p.modulus, p.operators, gen)
        lengths = torch.randint(1, length + 1, (n,), generator=gen) if training else length
        return bracket_batch(n, lengths, length, p.modulus, p.operators, gen)


@dataclass
class WordProblemParams(StateParams):
    """Parameters of `word_problem`."""

    group: str = "S3"  # S<n> or A<n>, n <= 6 (the papers: S3, A5, S5)


@register_task("word_problem")
class WordProblem(StateTrackingTask):
    """The running product of a word of group elements (the group's word problem)."""

    Params = WordProblemParams
    label = "Group word problem (length extrapolation)"
    axes = (*StateTrackingTask.axes, Metric("group", None, "The group of the word", label="group"))
    description = (
        "Prefix products of uniform elements of S3, A5 or S5 (Merrill et al. 2024, Siems et al. "
        "2025): trained on words up to train_length, the product scored at position n of longer "
        "words; chance 1/|G| per position."
    )

    def check_task(self) -> None:
        group(self.params.group)  # an unknown name: its one sentence

    def vocab_size(self) -> int:
        return group(self.params.group).order

    def classes(self) -> int:
        return group(self.params.group).order

    def batch(self, n, length, gen, training=False):
        return word_problem_batch(n, length, group(self.params.group), gen)
