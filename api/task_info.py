"""A task's self-description: what the engine and the leaderboard need to know about a task.

A task declares its metrics, headline, charts, cost metric, scaling fits and which of its metrics
come from timings that may be unsteady as class attributes
(`attnbench.task.Task`). `Task.describe()` turns them into a `TaskInfo`, which every record
carries and collection writes into the results table's metadata. So the leaderboard and the
collector work from the results alone: they never import a task, and a board can be built where
the plugin that produced the results is not installed (the asv model: self-describing data).

Torch-free on purpose (the leaderboard must not import torch).
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from typing import Any

from attnbench.metrics import Metric

MIN_POINTS = 3  # fewer axis values leave no degree of freedom for an interval


@dataclass(frozen=True)
class ScalingFit:
    """A declared log-log fit of ``metric`` along the curve axis ``axis``.

    Attributes:
        metric: The fitted metric (positive values, lower is better: a cost such as latency).
        axis: The curve axis it is fitted along (the points' ``x_name``).
        reference_variant: Variant whose fitted line gives each other variant its crossover
            (empty: no crossover).
        name: Name of the exponent metric; the crossover is ``crossover_<axis>``.
    """

    metric: str
    axis: str
    reference_variant: str = ""
    name: str = "scaling_exponent"

    @property
    def crossover_name(self) -> str:
        return f"crossover_{self.axis}"

    def metrics(self) -> list[dict[str, Any]]:
        """Declarations (name, direction, description, unit) of the metrics this fit adds."""
        slope = f"Slope of log({self.metric}) vs log({self.axis}) over {MIN_POINTS}+ points"
        out = [
            {"name": self.name, "higher_is_better": False, "description": slope, "unit": ""},
            {
                "name": f"{self.name}_ci_low",
                "higher_is_better": None,
                "description": "95% confidence interval of the exponent, low end",
                "unit": "",
            },
            {
                "name": f"{self.name}_ci_high",
                "higher_is_better": None,
                "description": "95% confidence interval of the exponent, high end",
                "unit": "",
            },
        ]
        if self.reference_variant:
            out.append(
                {
                    "name": self.crossover_name,
                    "higher_is_better": False,
                    "description": f"{self.axis} above which the variant's fitted {self.metric} "
                    f"is below {self.reference_variant}'s",
                    "unit": "",
                }
            )
        return out

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScalingFit:
        return cls(**{k: str(v) for k, v in data.items() if k in cls.__dataclass_fields__})


@dataclass
class Tuning:
    """Task parameters tuned per variant, and the validation metric that picks their value.

    A preset sweeps several values of each parameter (e.g. ``task.lr: 0.001,0.003,0.01``); the
    leaderboard keeps, per variant and setting, the value whose seed-averaged ``select_by`` is
    best and shows which value won (`harness.leaderboard.tuning`). ``select_by`` must be measured
    on a validation split the task draws apart from its test data: choosing on the test split
    would report the maximum of several noisy test scores, a number biased upwards.

    Attributes:
        params: Names of the task parameters that are tuning axes (e.g. ``["lr"]``); a job's
            other parameters form its setting.
        select_by: A declared metric with a direction, measured on the validation split.
    """

    params: list[str] = field(default_factory=list)
    select_by: str = ""


@dataclass
class TaskInfo:
    """Everything the engine and the leaderboard know about one task.

    Attributes:
        name: Registered task name.
        description: One line shown above the task's section.
        label: The task's name for readers, in titles and headers (e.g. "Associative recall
            (MQAR)"); "" shows ``name``.
        axes: How to name the curve axes and task parameters the page shows (a `Metric` each:
            name, label, unit; direction None), e.g. ``Metric("seq_len", None, "…", "tokens",
            label="context length")``. A curve axis that is itself a declared metric (e.g. the
            state a sequence holds) needs no entry. The board titles a name left undeclared in
            words of its own (`harness.leaderboard.tables.Words`: "n_kv_pairs" as "number of
            key-value pairs"); the quality chooser names such a parameter by the label another
            task declares for it, else only counts it. Every built-in task labels what it
            declares; a declared parameter is also named when fixed (the chooser's "one
            setting: …"), so declare those a reader should see.
        headline: The metric the leaderboard ranks by.
        metrics: Declared metrics (direction, description, unit), in display order.
        charts: Metrics drawn against their curve axis (default: the headline).
        chart_bands: chart metric → (low metric, high metric) drawn as a shaded band.
        chart_references: chart metric → {metric: legend label} drawn as dashed lines.
        chart_companions: chart metric → {metric: label} drawn for each line from that line's
            own runs, dashed in its colour (e.g. a closed form that depends on the variant).
        bar_charts: metric → {reference metric: label}: the metric's single values (points
            without a curve coordinate) drawn as one bar per variant and setting, each reference
            as a horizontal level (e.g. a model's error beside the least-squares error).
        scatter_charts: y metric → x metric: the two single values (points without a curve
            coordinate) of the same runs drawn one against the other, one marker per variant
            configuration and setting at the seeds' means; two metrics of one unit also get the
            line where they are equal (e.g. a training step's time against its mixers' time:
            the horizontal gap between two variants is their kernels' speed ratio, the vertical
            gap their whole models').
        cost_metric: A metric of this task that measures cost (e.g. latency); the leaderboard
            plots the other tasks' quality against it. Empty: the task measures no cost.
        scaling_fits: Log-log fits computed at collection (`harness.results.scaling`).
        tuning: Tuning axes and the validation metric that picks them (None: nothing tuned).
        column_by: A task parameter whose values measure different things (e.g. a mode that
            trains another model on another problem): the overview shows one column per value
            and the quality charts one chart each, instead of averaging them. Empty: one column.
        column_headlines: Value of ``column_by`` (as text) → the headline metric of its column,
            where it differs from ``headline``; values not named use ``headline``. Columns come
            in sorted order of the values (the table's metadata does not keep a dict's order).
        steadiness: metric → the metric of the same run and curve position that says whether
            the timing behind it was steady: 1.0 steady, 0.0 not (e.g. ``{"fwd_ms":
            "fwd_steady"}``; `attnbench.toolkit.timing`). A value whose flag is 0 is marked on the
            leaderboard and enters no contest; a run without the flag (an older record) counts
            as unknown, which is not unsteady. Empty: nothing is judged.
        accuracy: metric → the 0/1 metric of the same run and curve position that says whether
            the kernel behind it computed within its declared error (e.g. ``{"fwd_ms":
            "fwd_accurate"}``; `AttentionVariant.within_tolerance`). Like an unsteady timing, a
            value whose flag is 0 is marked on the leaderboard and enters no contest: the time
            of a wrong result is no time. Empty: nothing is judged.
        convergence: trained metric → the 0/1 metric of the same run that says whether its
            training converged (e.g. ``{"accuracy": "converged"}``;
            `attnbench.toolkit.convergence`): 1 solved or plateaued, 0 still learning at the
            cap. A value whose flag is 0 is marked "still learning" on the leaderboard and, like
            an unsteady timing, enters no contest and no fit. A flag recorded without a curve
            position judges every position of its run. A run without the flag (an older
            record) is unknown, which is not unconverged.
        chance_metric: A metric of the same run holding the headline's chance level (e.g.
            ``"chance_accuracy"``); with ``ceiling``, what lets the board tell a column where
            every variant sits at chance or at the ceiling, which then casts no vote in the
            quality rank. Empty: no chance level.
        ceiling: The best value the headline can take (an accuracy: 1); None: unbounded.
        annotations: metric → a key of the run's details whose text the board shows beside
            the metric's values, in the task table and the charts' hover (e.g. ``{"fwd_ms":
            "fwd_kernel_path"}``: which kernel a timing ran). Name the key in ``axes`` to give
            its column a label.
        budgets: Lower-is-better metrics of this task, measured along its curve axis, on which
            a reader may set a budget in the board's "Which attention for my case" panel
            (e.g. the time per generated token and the state a sequence holds, by context
            length): the panel lists the variants within the budget at the chosen position.
        battery: The name of a battery of tasks the task belongs to (e.g. ``"mad"``: MAD's six
            synthetic tasks). Beside each task's column, the overview shows one column per
            battery: per variant, the mean of its member tasks' headline values, where the
            variant has all of them (`harness.leaderboard.columns.with_batteries`). Empty: in none.
    """

    name: str
    description: str = ""
    headline: str = ""
    metrics: list[Metric] = field(default_factory=list)
    label: str = ""
    axes: list[Metric] = field(default_factory=list)
    charts: list[str] = field(default_factory=list)
    chart_bands: dict[str, tuple[str, str]] = field(default_factory=dict)
    chart_references: dict[str, dict[str, str]] = field(default_factory=dict)
    chart_companions: dict[str, dict[str, str]] = field(default_factory=dict)
    bar_charts: dict[str, dict[str, str]] = field(default_factory=dict)
    scatter_charts: dict[str, str] = field(default_factory=dict)
    cost_metric: str = ""
    scaling_fits: list[ScalingFit] = field(default_factory=list)
    tuning: Tuning | None = None
    column_by: str = ""
    column_headlines: dict[str, str] = field(default_factory=dict)
    steadiness: dict[str, str] = field(default_factory=dict)
    accuracy: dict[str, str] = field(default_factory=dict)
    convergence: dict[str, str] = field(default_factory=dict)
    chance_metric: str = ""
    ceiling: float | None = None
    budgets: list[str] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)
    battery: str = ""

    def all_metrics(self) -> list[Metric]:
        """The declared metrics, then those the scaling fits add at collection."""
        derived = [Metric(**m) for fit in self.scaling_fits for m in fit.metrics()]
        return [*self.metrics, *derived]

    def metric(self, name: str) -> Metric | None:
        """The declared (or fit-derived) metric ``name``; None if the task has none such."""
        return next((m for m in self.all_metrics() if m.name == name), None)

    @property
    def title(self) -> str:
        """The task's label, or its name where none is declared."""
        return self.label or self.name

    def metric_title(self, name: str, unit: bool = False) -> str:
        """A declared metric's label (with its unit if ``unit``), else ``name`` itself."""
        metric = self.metric(name)
        if metric is None:
            return name
        return metric.axis_title if unit else metric.title

    def axis_title(self, name: str) -> str:
        """A curve axis or task parameter's label and unit (`axes`, else a metric of that
        name: an axis may be a measured quantity), else ``name`` itself."""
        declared = next((a for a in self.axes if a.name == name), None)
        if declared is not None:
            return declared.axis_title
        return self.metric_title(name, unit=True)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data (for records and the table's metadata)."""
        data = dataclasses.asdict(self)
        data["chart_bands"] = {k: list(v) for k, v in self.chart_bands.items()}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskInfo:
        """Read what `to_dict` wrote; unknown keys (from a newer attnbench) are ignored."""
        known = {f.name for f in dataclasses.fields(cls)}
        data = {k: v for k, v in data.items() if k in known}
        metric_fields = {f.name for f in dataclasses.fields(Metric)}
        for key in ("metrics", "axes"):
            data[key] = [
                Metric(**{k: v for k, v in m.items() if k in metric_fields})
                for m in data.get(key, [])
            ]
        data["chart_bands"] = {k: tuple(v) for k, v in data.get("chart_bands", {}).items()}
        data["scaling_fits"] = [ScalingFit.from_dict(f) for f in data.get("scaling_fits", [])]
        tuning = data.get("tuning")
        data["tuning"] = Tuning(**tuning) if tuning else None
        return cls(**data)
