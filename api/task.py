"""The contract every task meets, and the task registry.

A task declares its metrics (with direction and description) and a hyperparameter dataclass, and
``measure(ctx)`` returns metric points. One job = one task × one variant × one setting; the harness
builds the `JobContext`, catches failures and writes the record.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from attnbench.metrics import Metric, TaskResult
from attnbench.registry import Registry
from attnbench.task_info import ScalingFit, TaskInfo, Tuning
from attnbench.variant import AttentionVariant, VariantShape, build_variant

# Generator offsets of a job's data splits (`JobContext.generator`): tasks draw their test data
# from TEST_STREAM (+ a per-configuration offset) and their validation split, which picks tuned
# parameters (`Tuning`), from VALIDATION_STREAM, far enough apart that the two never share a seed.
TEST_STREAM = 100
VALIDATION_STREAM = 50_000


@dataclass
class JobContext:
    """Everything a task needs to run one job.

    Attributes:
        variant_name: Registered name of the variant under test.
        variant_params: Its hyperparameters (without ``name``).
        device: Resolved torch device.
        dtype: Resolved torch dtype.
        seed: Seed for every random draw of the job.
        threads: CPU threads the job runs (and times) with.
    """

    variant_name: str
    variant_params: dict[str, Any]
    device: torch.device
    dtype: torch.dtype
    seed: int
    threads: int

    def build_variant(self, shape: VariantShape) -> AttentionVariant:
        """A fresh instance of the variant under test, on this job's device and dtype."""
        variant = build_variant(self.variant_name, self.variant_params, shape)
        return variant.to(device=self.device, dtype=self.dtype)

    def generator(self, offset: int = 0) -> torch.Generator:
        """A CPU generator seeded from the job seed (``offset`` separates independent streams)."""
        return torch.Generator().manual_seed(self.seed * 1_000_003 + offset)


class Task:
    """Base class of every task: it sets ``Params`` and ``metrics`` and implements ``measure``."""

    name: ClassVar[str] = ""
    Params: ClassVar[type] = object
    metrics: ClassVar[tuple[Metric, ...]] = ()
    description: ClassVar[str] = ""
    # the task's name for readers ("" shows ``name``) and how to name its curve axes and
    # parameters (label, unit: TaskInfo.axes)
    label: ClassVar[str] = ""
    axes: ClassVar[tuple[Metric, ...]] = ()
    headline: ClassVar[str] = ""  # the metric the leaderboard ranks by
    charts: ClassVar[
        tuple[str, ...]
    ] = ()  # metrics drawn against their curve axis (default: headline)
    chart_bands: ClassVar[dict[str, tuple[str, str]]] = {}  # chart metric → (low, high) metrics
    chart_references: ClassVar[dict[str, dict[str, str]]] = {}  # chart metric → {metric: label}
    chart_companions: ClassVar[
        dict[str, dict[str, str]]
    ] = {}  # chart metric → {metric: label} drawn per line, dashed, in the line's colour
    # metric → {reference metric: label}: one bar per variant, the references as levels
    bar_charts: ClassVar[dict[str, dict[str, str]]] = {}
    # y metric → x metric: single values of the same runs drawn against each other
    scatter_charts: ClassVar[dict[str, str]] = {}
    cost_metric: ClassVar[str] = (
        ""  # a metric measuring cost: other tasks' quality is drawn against it
    )
    scaling_fits: ClassVar[tuple[ScalingFit, ...]] = ()  # log-log fits computed at collection
    # parameters a preset may sweep as tuning axes, and the validation metric that picks them
    tuning: ClassVar[Tuning | None] = None
    # a parameter whose values measure different things: one overview column per value
    column_by: ClassVar[str] = ""
    column_headlines: ClassVar[dict[str, str]] = {}  # value of column_by → its column's headline
    # timed metric → its run's 0/1 metric saying the timing was steady (TaskInfo.steadiness)
    steadiness: ClassVar[dict[str, str]] = {}
    # metric → its run's 0/1 metric saying the kernel was within its error (TaskInfo.accuracy)
    accuracy: ClassVar[dict[str, str]] = {}
    # trained metric → its run's 0/1 metric saying training converged (TaskInfo.convergence)
    convergence: ClassVar[dict[str, str]] = {}
    # the metric holding the headline's chance level, and its best value (TaskInfo.chance_metric)
    chance_metric: ClassVar[str] = ""
    ceiling: ClassVar[float | None] = None
    # lower-is-better metrics along the curve axis a reader may cap (TaskInfo.budgets)
    budgets: ClassVar[tuple[str, ...]] = ()
    # metric → a key of the run's details shown beside its values (TaskInfo.annotations)
    annotations: ClassVar[dict[str, str]] = {}
    # a battery of tasks whose headlines the board also averages into one column (TaskInfo.battery)
    battery: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A task written for 0.3 implements ``run``: it keeps working, with a warning, as its
        ``measure`` (the name ``run`` now means only `attnbench.run`, which runs jobs)."""
        super().__init_subclass__(**kwargs)
        if "run" in vars(cls) and "measure" not in vars(cls):
            warnings.warn(
                f"task class {cls.__qualname__} implements run(ctx); rename it measure(ctx) "
                "(the task contract's name since 0.4; run is used as measure until 0.5).",
                DeprecationWarning,
                stacklevel=2,
            )
            cls.measure = vars(cls)["run"]

    def __init__(self, params: Any) -> None:
        self.params = params

    def measure(self, ctx: JobContext) -> TaskResult:
        """Measure one variant (one job) and return its metric points."""
        raise NotImplementedError

    def density_size(self) -> tuple[int, int, bool] | None:
        """(queries, keys, causal) of the attention a job's variant runs at, where the task
        records its ``density`` (`attnbench.metrics.DENSITY`); None: the task records none.

        Declared apart from `measure` so that a config check can compute every job's density from
        its parameters alone, without running it (tests/conf/test_presets_density.py).
        """
        return None

    def check(self) -> None:
        """Refuse impossible parameters with a `ValueError` of one sentence (none by default).

        Called when the task is built, so a bad value is refused before any job of a sweep runs.
        """

    def require_divides(self, divisor: str, width: str) -> None:
        """Raise one clear ValueError unless ``params.divisor`` divides ``params.width``."""
        a, b = getattr(self.params, divisor), getattr(self.params, width)
        if a >= 1 and b % a:
            divisors = [d for d in range(1, b + 1) if b % d == 0]
            raise ValueError(
                f"task.{divisor}={a} must divide task.{width}={b}; "
                f"valid: {', '.join(map(str, divisors))}."
            )

    def require_batch_fits(self) -> None:
        """Raise one clear ValueError unless ``params.batch_size <= params.train_size``: every
        step trains on a full batch of distinct sequences, so examples seen is steps × batch."""
        batch, size = self.params.batch_size, self.params.train_size
        if batch > size:
            raise ValueError(
                f"task.batch_size={batch} exceeds task.train_size={size}, the sequences a batch "
                f"is drawn from; use a batch_size of at most {size} or a larger train_size."
            )

    def require_positive(self, *keys: str) -> None:
        """Raise one clear ValueError for the first of ``keys`` whose value is below 1."""
        for key in keys:
            value = getattr(self.params, key)
            if value < 1:
                raise ValueError(f"task.{key} must be >= 1, got {value}.")

    def require_finite(
        self, *keys: str, above: float | None = None, at_least: float | None = None
    ) -> None:
        """Raise one clear ValueError for the first of ``keys`` that is NaN or infinite, or not
        above ``above`` / not at least ``at_least`` (a learning rate: ``above=0``).

        NaN compares false with everything, so ``if lr <= 0`` lets it through; this does not.
        """
        for key in keys:
            value = float(getattr(self.params, key))
            low_ok = (above is None or value > above) and (at_least is None or value >= at_least)
            if not (math.isfinite(value) and low_ok):
                bound = f" > {above:g}" if above is not None else ""
                bound += f" >= {at_least:g}" if at_least is not None else ""
                raise ValueError(f"task.{key} must be a finite number{bound}, got {value}.")

    @classmethod
    def describe(cls) -> TaskInfo:
        """The task's self-description (`attnbench.task_info`), stored in every record so that
        collection and the leaderboard work without importing the task."""
        return TaskInfo(
            name=cls.name,
            description=cls.description,
            headline=cls.headline,
            metrics=list(cls.metrics),
            label=cls.label,
            axes=list(cls.axes),
            charts=list(cls.charts),
            chart_bands=dict(cls.chart_bands),
            chart_references={k: dict(v) for k, v in cls.chart_references.items()},
            chart_companions={k: dict(v) for k, v in cls.chart_companions.items()},
            bar_charts={k: dict(v) for k, v in cls.bar_charts.items()},
            scatter_charts=dict(cls.scatter_charts),
            cost_metric=cls.cost_metric,
            scaling_fits=list(cls.scaling_fits),
            tuning=Tuning(list(cls.tuning.params), cls.tuning.select_by) if cls.tuning else None,
            column_by=cls.column_by,
            column_headlines=dict(cls.column_headlines),
            steadiness=dict(cls.steadiness),
            accuracy=dict(cls.accuracy),
            convergence=dict(cls.convergence),
            chance_metric=cls.chance_metric,
            ceiling=cls.ceiling,
            budgets=list(cls.budgets),
            annotations=dict(cls.annotations),
            battery=cls.battery,
        )

    @classmethod
    def metric(cls, name: str) -> Metric:
        """The declared `Metric` called ``name``."""
        for m in cls.metrics:
            if m.name == name:
                return m
        raise KeyError(f"task '{cls.name}' declares no metric '{name}'")


TASKS: Registry[type[Task]] = Registry("task", base=Task)


def register_task(name: str):
    """Class decorator: register a `Task` subclass under ``name``."""

    def decorate(cls: type[Task]) -> type[Task]:
        if isinstance(cls, type) and issubclass(cls, Task):
            if not dataclasses.is_dataclass(cls.Params):
                raise TypeError(f"task '{name}': Params must be a dataclass.")
            cls.name = name
        return TASKS.register(name, cls)

    return decorate


def build_task(name: str, params: dict[str, Any] | None = None) -> Task:
    """Instantiate task ``name`` with ``params`` (defaults for the rest) and check them.

    Raises:
        UnknownNameError: no such task.
        ValueError: a parameter value the task refuses (its `Task.check`).
    """
    cls = TASKS.get(name)
    params = dict(params or {})
    params.pop("name", None)
    task = cls(cls.Params(**params))
    task.check()
    return task


class NonFiniteError(RuntimeError):
    """A job produced NaN or infinite values; recorded as ``failed: non-finite``."""


def check_finite(what: str, tensor: torch.Tensor) -> None:
    """Raise `NonFiniteError` if ``tensor`` has NaN or infinite entries."""
    if not bool(torch.isfinite(tensor).all()):
        raise NonFiniteError(f"non-finite values in {what}")
