"""What a task reports: declared metrics, measured points and a job's result.

Torch-free on purpose: the records, the collector and the leaderboard use these definitions and
must not import torch (the leaderboard builds where only pandas, Plotly and jinja2 are needed).
`POINT_FIELDS` is the one definition of a metric point's fields, from the record to the table.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Metric:
    """A metric a task reports.

    Attributes:
        name: Column value in ``results.parquet`` (e.g. "accuracy").
        higher_is_better: Direction; None where neither is better (e.g. a diagnostic).
        description: One line shown on hover in the leaderboard.
        unit: Unit for axis labels ("ms", "MiB", "" for ratios).
        label: A short name a reader understands, for chart titles, axes, legends and table
            headers (e.g. "state per sequence" for ``state_bytes``); "" leaves the title to the
            board, which words it from the description's lead or the identifier
            (`harness.leaderboard.tables.Words`). Every built-in task labels its metrics.
    """

    name: str
    higher_is_better: bool | None
    description: str
    unit: str = ""
    label: str = ""

    @property
    def title(self) -> str:
        """The label, or the name where none is declared."""
        return self.label or self.name

    @property
    def axis_title(self) -> str:
        """The title with its unit: "state per sequence (bytes)"."""
        return f"{self.title} ({self.unit})" if self.unit else self.title


@dataclass
class MetricPoint:
    """One measured value, optionally a point on a curve (``x_name`` = ``x_value``).

    Tasks create these with the first four fields; the harness fills ``higher_is_better`` from
    the task's declared `Metric` when it writes the record.
    """

    metric: str
    value: float
    x_name: str | None = None
    x_value: float | None = None
    higher_is_better: bool | None = None


DENSITY = Metric(
    "density",
    None,  # a property of the variant at this length, not a score: never ranked
    "Fraction of the allowed (causal) query–key pairs the variant scores at the task's sequence "
    "length (1: dense or linear-cost)",
    label="density",
)


POINT_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(MetricPoint))


@dataclass
class TaskResult:
    """What a task run returns: metric points plus free-form details kept in the record."""

    points: list[MetricPoint]
    details: dict[str, Any] = field(default_factory=dict)
