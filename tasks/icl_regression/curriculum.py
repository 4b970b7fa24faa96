"""Garg et al.'s training curriculum for in-context regression.

Garg et al. 2022 (§3; `curriculum.py` and the `curriculum:` block of their configs) train on
prompts that start small and grow: the input dimension from 5 to 20 by 1 and the number of
examples from 11 to 41 by 2, every 2000 steps. A smaller problem is learned first and the model
then extends it; they report that it speeds training up markedly, without changing the final
model. Inputs keep their full dimension d throughout: the coordinates beyond the current one are
zero (their ``n_dims_truncated``), so the weights that matter are the current ones' and the model's
input layer never changes shape.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Curriculum:
    """Dimensions and examples per prompt at each training step.

    Attributes:
        start_dims, end_dims: The input dimension at step 0 and the one it grows to.
        start_points, end_points: Examples per prompt at step 0 and the number they grow to.
        interval: Steps between increments.
        dims_inc, points_inc: Growth per interval (Garg's: 1 dimension, 2 examples).
    """

    start_dims: int
    end_dims: int
    start_points: int
    end_points: int
    interval: int
    dims_inc: int = 1
    points_inc: int = 2

    def at(self, step: int) -> tuple[int, int]:
        """(dimensions, examples) of the prompts trained on at ``step`` (counted from 0)."""
        k = step // self.interval
        return (
            min(self.end_dims, self.start_dims + self.dims_inc * k),
            min(self.end_points, self.start_points + self.points_inc * k),
        )

    def full_from(self) -> int:
        """The first step that trains on the full problem (end_dims, end_points)."""
        dims = -(-(self.end_dims - self.start_dims) // self.dims_inc)
        points = -(-(self.end_points - self.start_points) // self.points_inc)
        return max(dims, points, 0) * self.interval


def plain(dims: int, points: int) -> Curriculum:
    """No curriculum: the full problem from the first step."""
    return Curriculum(dims, dims, points, points, interval=1)
