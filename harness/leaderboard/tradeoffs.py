"""Quality against what it costs: each overview column's headline against latency and density.

Two views per ranked quality column (`harness.leaderboard.columns`):

- **against cost**: the headline against the cost metric a task declares (`TaskInfo.cost_metric`,
  e.g. throughput's latency), on the machine and dtype with the most cost points, at the curve
  position (e.g. sequence length) that the most variants were measured at. One point per
  configuration (variant and parameters) that has both: quality and cost of one setting only;
  timings the cost task flagged unsteady are left out where a variant has steady ones, else kept
  and drawn hollow with a note.
- **against density**: the headline against ``density``, the fraction of (causal) query–key
  pairs a variant scores at the task's sequence length, which every task records for every run
  as a scalar metric. Both come from the same runs (the column's, on the machine and dtype with
  the most of them), each averaged per run, then over the runs of an entry: one point per variant,
  or per variant and parameters where a variant ran with several (a window at two widths is two
  points). Tables of older code have no density rows: the view is then left out.
"""

from __future__ import annotations

import re

import pandas as pd

from attnbench.harness.leaderboard.charts import Chart, chart, scatter_figure, variant_colours
from attnbench.harness.leaderboard.columns import Columns, position_text, stated_position
from attnbench.harness.leaderboard.ranking import MACHINE, THREADS, Headline
from attnbench.harness.leaderboard.steadiness import untrusted
from attnbench.harness.leaderboard.tables import Words, config_labels, size_params_of
from attnbench.task_info import TaskInfo

DENSITY = "density"  # the scalar metric every task records (see the module docstring)
CONFIG = ["variant", "variant_params"]  # a configuration: quality and cost pair only within one
DENSITY_TITLE = "density (fraction of query–key pairs scored)"


def _cost_axis(frame: pd.DataFrame, infos: dict[str, TaskInfo]) -> tuple[str, str] | None:
    """(task, metric) of the cost the quality charts are drawn against: of the tasks that declare
    a cost metric and have results for it, the one measured for the most variants (a cost known
    for a few variants only, such as decoding, which non-causal variants cannot do, would leave
    the others off every chart), then the first by name."""
    measured = []
    for task, info in sorted(infos.items()):
        rows = frame[(frame["task"] == task) & (frame["metric"] == info.cost_metric)]
        if info.cost_metric and len(rows):
            measured.append((-rows["variant"].nunique(), task, info.cost_metric))
    return min(measured)[1:] if measured else None


def _latency(
    ok: pd.DataFrame, infos: dict[str, TaskInfo]
) -> tuple[pd.Series, str, tuple, dict[str, str]] | None:
    """(cost per variant, x-axis title, (machine, dtype, threads), variant → note) of the
    declared cost metric, or None. Untrusted timings (`steadiness.untrusted`: flagged unsteady,
    or of a kernel outside its tolerance) are left out of a variant's cost where it has others;
    a variant with only untrusted ones keeps them, and its note says so (its marker is drawn
    hollow)."""
    axis = _cost_axis(ok, infos)
    if axis is None:
        return None
    cost_task, cost_metric = axis
    mine = ok[ok["task"] == cost_task]
    cost = mine[mine["metric"] == cost_metric]
    # one machine, dtype and thread count for every variant's cost; quality from that machine
    machine, dtype, threads = cost.groupby([MACHINE, "dtype", THREADS]).size().idxmax()
    cost = cost[(cost[MACHINE] == machine) & (cost["dtype"] == dtype) & (cost[THREADS] == threads)]
    position = stated_position(cost)
    info = infos[cost_task]
    where = ""
    if position is not None:
        x_name, length = position
        cost = cost[(cost["x_name"] == x_name) & (cost["x_value"] == length)]
        where = f" at {position_text(info, x_name, length)}"
    declared = info.metric(cost_metric)
    unit = f" ({declared.unit})" if declared and declared.unit else ""
    named = Words(info).metric(cost_metric)
    title = (
        f"{named}{where}{unit}"
        if declared and declared.label
        else f"{info.title} {named}{where}{unit}"
    )
    steady = cost[~untrusted(cost)]
    only_unsteady = cost[~cost["variant"].isin(set(steady["variant"]))]
    notes = {str(v): f"{named} from unsteady timings only" for v in only_unsteady["variant"]}
    cost = pd.concat([steady, only_unsteady])
    per_config = cost.groupby(CONFIG)["value"].median()
    return per_config, title, (machine, dtype, threads), notes


def _cost_points(
    ok: pd.DataFrame, h: Headline, latency: pd.Series, where: tuple, notes: dict[str, str]
) -> pd.DataFrame:
    """One point per configuration (variant and parameters) with both a quality and a cost:
    never a variant's quality at one setting against its cost at another (top-k's accuracy at
    k = 0.2·n against its time at k = 32). A configuration timed but not trained, or trained
    but not timed, has no point."""
    machine, dtype = where[:2]
    quality = ok[
        (ok["task"] == h.task)
        & (ok["metric"] == h.metric)
        & (ok[MACHINE] == machine)
        & (ok["dtype"] == dtype)
    ]
    quality = quality.groupby(CONFIG)["value"].mean()
    table = pd.DataFrame({"x": latency, "y": quality})
    # labelled among every configuration of the variant on either axis, as the overview's rows
    # are: "topk k=0.2" where a "topk k=32" was timed too
    labels = config_labels(table.index.to_frame(index=False), size_params_of(ok))
    both = table.dropna().reset_index()
    both["label"] = [labels[key] for key in zip(*(both[c] for c in CONFIG), strict=True)]
    both = both.drop(columns="variant_params")
    return both.assign(note=both["variant"].map(lambda v: notes.get(str(v), "")))


def density_points(rows: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Columns label, variant, x (density), y (``metric``) from one column's ok run rows
    ``rows``: see the module docstring and `pair_points`. Empty where the runs record no
    density."""
    return pair_points(rows, DENSITY, metric)


def pair_points(rows: pd.DataFrame, x_metric: str, metric: str) -> pd.DataFrame:
    """Columns label, variant, x (``x_metric``), y (``metric``) from ok run rows ``rows``: each
    run's mean of both (a run lacking either is left out), then their mean per configuration,
    on the machine and dtype with the most ``metric`` rows. A variant with several
    configurations is labelled with the parameters that differ between them ("window
    window=0.2"). Empty where no run records both."""
    empty = pd.DataFrame(columns=["label", "variant", "x", "y"])
    quality = rows[rows["metric"] == metric]
    if quality.empty or not (rows["metric"] == x_metric).any():
        return empty
    machine, dtype = quality.groupby([MACHINE, "dtype"]).size().idxmax()
    here = rows[(rows[MACHINE] == machine) & (rows["dtype"] == dtype)]
    per_run = pd.DataFrame(
        {
            "y": here[here["metric"] == metric].groupby("run_id")["value"].mean(),
            "x": here[here["metric"] == x_metric].groupby("run_id")["value"].mean(),
        }
    ).dropna()
    if per_run.empty:
        return empty
    entries = here.drop_duplicates("run_id").set_index("run_id")[["variant", "variant_params"]]
    per_run = per_run.join(entries)
    labels = config_labels(
        per_run[["variant", "variant_params"]].drop_duplicates(), size_params_of(here)
    )
    per_run["label"] = [
        labels[(v, p)] for v, p in zip(per_run["variant"], per_run["variant_params"], strict=True)
    ]
    return per_run.groupby(["label", "variant"])[["x", "y"]].mean().reset_index()


def _chart_id(kind: str, column: str, index: int) -> str:
    """An element id from a column name (which may hold spaces and parentheses)."""
    return f"chart-{kind}-{index}-" + re.sub(r"[^A-Za-z0-9_-]+", "-", column).strip("-")


def _ok(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of finished runs (no fit rows) that hold a metric."""
    done = (frame["status"] == "ok") & ~frame["derived"].astype(bool)
    return frame[done & frame["metric"].notna()]


def tradeoff_charts(
    frame: pd.DataFrame,
    columns: Columns,
    infos: dict[str, TaskInfo],
    colours: dict[str, str] | None = None,
) -> list[Chart]:
    """The charts above, per ranked quality column of ``columns``: against cost, then against
    density, each where it has points. The cost comes from ``frame`` (the rows as recorded);
    the quality from the columns' rows. ``colours``: variant → colour (`variant_colours`,
    default: from ``frame``), the page's."""
    axis = _cost_axis(frame, infos)
    cost_task = axis[0] if axis else None
    latency = _latency(_ok(frame), infos)
    ok = _ok(columns.frame)
    colours = colours or variant_colours(frame["variant"])
    plans = []  # (kind, headline, points, x title, x range, subtitle)
    for h in columns.headlines:
        if h.higher_is_better is None or columns.task_of.get(h.task) == cost_task:
            continue
        if latency is not None:
            points = _cost_points(ok, h, latency[0], latency[2], latency[3])
            machine, dtype, threads = latency[2]
            where = f"{machine} · {threads:g} thread{'s' if threads != 1 else ''} · {dtype}"
            plans.append(("cost", h, points, latency[1], None, where))
        mine = ok[ok["task"] == h.task]
        points = density_points(mine, h.metric)
        where = _where(mine[mine["metric"] == h.metric]) if not points.empty else ""
        plans.append(("density", h, points, DENSITY_TITLE, (-0.02, 1.05), where))
    plans = [p for p in plans if not p[2].empty]
    charts = []
    for i, (kind, h, points, x_title, x_range, where) in enumerate(plans):
        arrow = "↑" if h.higher_is_better else "↓"
        against = "cost" if kind == "cost" else "density"
        info = infos.get(columns.task_of.get(h.task, h.task)) or TaskInfo(h.task)
        fig = scatter_figure(
            points,
            x_title,
            f"{Words(info).metric_unit(h.metric)} {arrow}",
            f"{h.label or f'{h.task}: {h.metric}'} against {against}",
            colours=colours,
            x_range=x_range,
            subtitle=where,
        )
        charts.append(chart(_chart_id(kind, h.task, i), fig))
    return charts


def _where(quality: pd.DataFrame) -> str:
    """ "machine · dtype" of the rows `density_points` draws (the most frequent pair)."""
    machine, dtype = quality.groupby([MACHINE, "dtype"]).size().idxmax()
    return f"{machine} · {dtype}"
