"""Build the leaderboard site from the results table (see the package docstring).

Everything shown comes from the table and the task descriptions in its metadata, read once per
results folder by `harness.results.freshness.fresh_table` (which collects the folder again first
where its table is not fresh for the installed code): no task or variant is imported, so the page
builds where the plugins that produced the results are not installed, and without torch.

Bad input is refused before anything is written, in one sentence with exit status 2: a missing
results folder, a site folder that cannot or must not be written (`publish.check_paths`), and a
table that is corrupt or of an older layout (`harness.results.table_file`). A results folder with no
records yet still gets a page that says how to produce some.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import jinja2
import pandas as pd
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from attnbench.harness.jobs.records import atomic_file, atomic_write_text
from attnbench.harness.leaderboard.charts import (
    Chart,
    CurveExtras,
    axis_parameters,
    bar_figure,
    chart,
    curve_figure,
    merged_figure,
    scatter_figure,
    variant_colours,
)
from attnbench.harness.leaderboard.columns import overview_columns
from attnbench.harness.leaderboard.overview import overview
from attnbench.harness.leaderboard.peers import labelled, peer_section, unavailable
from attnbench.harness.leaderboard.publish import (
    SITE_MARK,
    RecordSnapshot,
    SiteError,
    check_paths,
    copy_records,
    remove_orphans,
    remove_stale_records,
)
from attnbench.harness.leaderboard.ranking import MACHINE, count_stale, shown_rows
from attnbench.harness.leaderboard.steadiness import (
    count_still_learning,
    count_unsteady,
    judge_steadiness,
)
from attnbench.harness.leaderboard.tables import (
    IDENTIFIER,
    UNSTEADY_MARK,
    Column,
    Table,
    Words,
    differing_keys,
    distinct_headers,
    map_distinct,
    setting_label,
    spelled,
    task_table,
    unfinished_table,
    unsupported_line,
)
from attnbench.harness.leaderboard.tradeoffs import pair_points, tradeoff_charts
from attnbench.harness.leaderboard.tuning import Choice, select_tuned, tuning_table
from attnbench.harness.leaderboard.views.chooser import chooser_data, embeddable
from attnbench.harness.leaderboard.views.length_ranks import cost_ranks
from attnbench.harness.leaderboard.views.summary import best_per_column, cost_regimes
from attnbench.harness.results.fit_quality import EXPONENT_RANGE, MAX_HALF_WIDTH, RELIABLE_SUFFIX
from attnbench.harness.results.freshness import FreshnessError, fresh_table
from attnbench.task_info import TaskInfo

WHO = "attnbench-leaderboard"  # first on each line the board says while reading a folder
INDEX = "index.html"
PLOTLY_JS = "plotly.min.js"
TABLES = ("results.parquet", "results.csv")  # the table beside the page (`_publish_table`)
MAX_LABEL_PARAMS = 3  # a chart title names at most this many of the parameters that differ
RUN_LINK = "runs/{run_id}.json"  # each run's record, copied beside the page (`publish`)


@dataclass
class TaskSection:
    """One task's part of the page."""

    name: str
    description: str
    table: Table
    charts: list[Chart]
    n_runs: int
    title: str = ""  # the task's label (`TaskInfo.label`), "" where it declares none
    fits: Table | None = None
    fits_note: str = ""  # what the fits are, from the task's declarations
    tuned: Table | None = None  # tuning axes: the value each variant's validation picked
    notes: list[str] = field(default_factory=list)  # charts left out, and why (one line each)


def _metric_info(info: TaskInfo | None) -> dict[str, tuple[str, bool | None]]:
    """metric → (description, higher_is_better), declared metrics first, then fit metrics and
    each fit's reliability mark (`harness.results.fit_quality`)."""
    if info is None:
        return {}
    described = {m.name: (m.description, m.higher_is_better) for m in info.all_metrics()}
    low, high = EXPONENT_RANGE
    for fit in info.scaling_fits:
        described[fit.name + RELIABLE_SUFFIX] = (
            f"yes: the exponent is believable (its 95% interval meets [{low:g}, {high:g}] and is "
            f"within ±{MAX_HALF_WIDTH:g}, steady points only); no: unreliable, shown in no legend",
            None,
        )
    return described


def _fit_notes(rows: pd.DataFrame, info: TaskInfo | None, metric: str, x_name: str) -> dict:
    """variant → " · ∝ sequence length^1.02": the fitted exponent of ``metric`` along ``x_name``
    (the axis in words), for the legend of its curve chart (only where a variant has one such
    fit), or " · fit unreliable" where `harness.results.fit_quality` marked it so: a legend
    never states an exponent nobody should believe."""
    axis = Words(info).axis(x_name, unit=False)
    notes: dict[str, str] = {}
    for fit in info.scaling_fits if info else []:
        if (fit.metric, fit.axis) != (metric, x_name):
            continue
        derived = rows[rows["derived"]]
        fits = derived[derived["metric"] == fit.name]
        marks = derived[derived["metric"] == fit.name + RELIABLE_SUFFIX]
        unreliable = set(marks.loc[marks["value"] == 0, "run_id"])
        counts = fits["variant"].value_counts()
        for _, r in fits.iterrows():
            if counts[r["variant"]] == 1:
                note = (
                    " · fit unreliable"
                    if r["run_id"] in unreliable
                    else f" · ∝ {axis}^{round(r['value'], 2) + 0.0:.2f}"  # no "-0.00"
                )
                notes[str(r["variant"])] = note
    return notes


def _setting_key(task_params: pd.Series, x_name: str, along: tuple[str, ...] = ()) -> pd.Series:
    """Each run's task parameters other than the curve axis ``x_name`` and the parameters that
    move along it (``along``, `charts.axis_parameters`), as canonical JSON."""
    skip = {x_name, *along}
    return map_distinct(
        task_params,
        lambda text: json.dumps(
            {k: v for k, v in json.loads(text).items() if k not in skip}, sort_keys=True
        ),
    )


def _settings(
    rows: pd.DataFrame, x_name: str, along: tuple[str, ...] = (), words: Words | None = None
) -> list[tuple[str, str, pd.DataFrame]]:
    """``rows`` split by task setting (parameters other than ``x_name`` and ``along``): (setting
    key, label of the parameters that differ between settings, in ``words``, rows); the label
    is empty when there is one."""
    keys = _setting_key(rows["task_params"], x_name, along)
    groups = list(rows.groupby(keys, sort=True))
    params = [json.loads(key) for key, _ in groups]
    differing = differing_keys(params)

    def label(p: dict) -> str:
        named = [k for k in differing if p.get(k) is not None]
        text = setting_label(p, named[:MAX_LABEL_PARAMS], words or Words())
        return text + (", …" if len(named) > MAX_LABEL_PARAMS else "")

    return [(key, label(p), group) for (key, group), p in zip(groups, params, strict=True)]


def _constant(points: pd.DataFrame) -> float | None:
    """The one value of ``points`` where all are the same (a chart of it would say nothing the
    one line under the task does not), else None."""
    values = points["value"].dropna().unique()
    return float(values[0]) if len(values) == 1 else None


def _constant_note(metric: str, where: str, value: float) -> str:
    return f"{metric}{where} is {value:g} in every run: not charted."


def _failures(
    frame: pd.DataFrame, task: str, x_name: str, along: tuple[str, ...] = ()
) -> pd.DataFrame:
    """Unfinished runs of ``task`` with their ``x_name`` task parameter as curve position, and
    their setting key (see `_setting_key`)."""
    marked = frame["status"].isin(["oom", "timeout", "failed"])  # not `unsupported`: by design
    bad = frame[(frame["task"] == task) & marked].drop_duplicates("run_id")
    xs = map_distinct(bad["task_params"], lambda text: json.loads(text).get(x_name))
    keep = xs.map(lambda x: isinstance(x, int | float)).astype(bool)
    bad = bad.loc[keep]
    return pd.DataFrame(
        {
            "variant": bad["variant"],
            "status": bad["status"],
            "x": xs[keep],
            "setting": _setting_key(bad["task_params"], x_name, along),
        }
    )


def _task_charts(
    frame: pd.DataFrame,
    task: str,
    rows: pd.DataFrame,
    info: TaskInfo | None,
    colours: dict[str, str],
    notes: list[str],
) -> list[Chart]:
    """One chart per curve axis and task setting (so that baselines and theory curves are never
    averaged across settings), its chart metrics the views of a menu (`merged_figure`), where
    the setting has at least two points on the axis (e.g. accuracy by model width only where the
    sweep varied the width) and its values are not all the same (then a line of ``notes`` says
    so instead)."""
    runs = rows[~rows["derived"]]
    headline = (info.headline if info else "") or runs["metric"].iloc[0]
    views: dict[tuple[str, int, str], list[tuple[str, str, go.Figure]]] = {}
    info = info or TaskInfo(task)  # undeclared names are spelled out in words
    words = Words(info)
    for metric in info.charts or [headline]:
        declared = info.metric(metric)
        unit = declared.unit if declared else ""
        curve = runs[(runs["metric"] == metric) & runs["x_name"].notna()]
        for x_name in sorted(curve["x_name"].unique()):  # one chart per curve axis
            on_axis = runs[runs["x_name"] == x_name]
            value = _constant(on_axis[on_axis["metric"] == metric])
            if value is not None:
                where = f" against {words.axis(x_name)}"
                notes.append(_constant_note(words.metric(metric), where, value))
                continue
            along = tuple(axis_parameters(curve[curve["x_name"] == x_name], x_name))
            failures = _failures(frame, task, x_name, along)
            settings = _settings(on_axis, x_name, along, words)
            for i, (setting, label, group) in enumerate(settings):
                points = group[(group["metric"] == metric) & group["x_value"].notna()]
                if points["x_value"].nunique() < 2:
                    continue  # a curve over one x value says nothing the task table does not
                extras = CurveExtras(
                    notes=_fit_notes(rows, info, metric, x_name),
                    failures=failures[failures["setting"] == setting],
                    band=info.chart_bands.get(metric),
                    references=info.chart_references.get(metric, {}),
                    companions=info.chart_companions.get(metric, {}),
                    steady_flag=info.steadiness.get(metric, ""),
                    accuracy_flag=info.accuracy.get(metric, ""),
                    converge_flag=info.convergence.get(metric, ""),
                    x_title=words.axis(x_name),
                    y_title=words.metric_unit(metric),
                    words=words,
                )
                title = f"{info.title}: {words.metric(metric)} against {extras.x_title}"
                fig = curve_figure(group, metric, title, unit, extras, colours, label)
                if fig is not None:
                    chart_id = f"chart-{task}-{metric}-{x_name}" + (f"-{i}" if label else "")
                    menu = words.metric(metric)
                    views.setdefault((x_name, i, label), []).append((menu, chart_id, fig))
    charts = []
    for found in views.values():
        merged = merged_figure([(menu, fig) for menu, _, fig in found])
        charts.append(chart(found[0][1], merged))
    return charts


def _bar_settings(rows: pd.DataFrame, words: Words) -> list[tuple[str, pd.DataFrame]]:
    """``rows`` split by task setting, each with a label naming, in ``words``, *every* parameter
    that differs between the settings (a bar chart is one setting: its title must say which,
    and the parameter that tells two charts apart may sort late, e.g. an input distribution)."""
    keys = _setting_key(rows["task_params"], "")
    groups = list(rows.groupby(keys, sort=True))
    params = [json.loads(key) for key, _ in groups]
    differing = differing_keys(params)
    return [
        (setting_label(p, differing, words), group)
        for (_, group), p in zip(groups, params, strict=True)
    ]


def _bar_charts(
    task: str, rows: pd.DataFrame, info: TaskInfo | None, colours: dict[str, str], notes: list[str]
) -> list[Chart]:
    """One bar chart per declared bar metric (`TaskInfo.bar_charts`) and task setting: the
    metric's single values per variant, its references as levels (never averaged across
    settings); none for a metric whose values are all the same (a line of ``notes`` says so)."""
    runs = rows[~rows["derived"] & rows["x_value"].isna()]
    charts = []
    info = info or TaskInfo(task)
    words = Words(info)
    for metric, references in info.bar_charts.items():
        declared = info.metric(metric)
        unit = declared.unit if declared else ""
        having = runs[runs["metric"] == metric]["run_id"].unique()
        mine = runs[runs["run_id"].isin(having)]  # the runs that report the metric as a value
        if mine.empty:
            continue
        value = _constant(mine[mine["metric"] == metric])
        if value is not None:
            notes.append(_constant_note(words.metric(metric), "", value))
            continue
        for i, (label, group) in enumerate(_bar_settings(mine, words)):
            title = f"{info.title}: {words.metric(metric)} per variant"
            y_title = words.metric_unit(metric)
            fig = bar_figure(group, metric, title, unit, references, colours, label, y_title, words)
            if fig is not None:
                chart_id = f"chart-{task}-{metric}-bars" + (f"-{i}" if label else "")
                charts.append(chart(chart_id, fig))
    return charts


def _scatter_charts(
    task: str, rows: pd.DataFrame, info: TaskInfo | None, colours: dict[str, str]
) -> list[Chart]:
    """One chart per declared pair (`TaskInfo.scatter_charts`) and task setting: each
    configuration's y against its x (`pair_points`: single values of the same runs, seeds
    averaged); two metrics of one unit get the line where they are equal, dashed, so that a
    point's distance from it reads as what the rest of the run adds to the x quantity."""
    runs = rows[~rows["derived"] & rows["x_value"].isna()]
    charts = []
    info = info or TaskInfo(task)
    words = Words(info)
    for y_metric, x_metric in info.scatter_charts.items():
        having = set(runs.loc[runs["metric"] == y_metric, "run_id"])
        having &= set(runs.loc[runs["metric"] == x_metric, "run_id"])
        mine = runs[runs["run_id"].isin(having)]
        for i, (label, group) in enumerate(_bar_settings(mine, words) if having else []):
            points = pair_points(group, x_metric, y_metric)
            if points.empty:
                continue
            x_title, y_title = words.metric_unit(x_metric), words.metric_unit(y_metric)
            title = f"{info.title}: {words.metric(y_metric)} against {words.metric(x_metric)}"
            drawn = group[group["metric"] == y_metric]  # pair_points's machine and dtype
            where = " · ".join(map(str, drawn.groupby([MACHINE, "dtype"]).size().idxmax()))
            subtitle = f"{label} · {where}" if label else where
            fig = scatter_figure(points, x_title, y_title, title, colours, subtitle=subtitle)
            x_declared, y_declared = info.metric(x_metric), info.metric(y_metric)
            if x_declared and y_declared and x_declared.unit == y_declared.unit:
                ends = [float(min(points[["x", "y"]].min())), float(max(points[["x", "y"]].max()))]
                name = f"{words.metric(y_metric)} = {words.metric(x_metric)}"
                line = {"color": "#888888", "dash": "dash", "width": 1}
                fig.add_trace(go.Scatter(x=ends, y=ends, mode="lines", name=name, line=line))
            chart_id = f"chart-{task}-{y_metric}-{x_metric}" + (f"-{i}" if label else "")
            charts.append(chart(chart_id, fig))
    return charts


def _fits_note(info: TaskInfo | None) -> str:
    """One line saying what a task's scaling fits are, from its declarations, in words."""
    parts = []
    words = Words(info)
    for fit in info.scaling_fits if info else []:
        believable = words.metric(fit.name + RELIABLE_SUFFIX)
        text = (
            f"the log of {words.metric(fit.metric)} against the log of "
            f"{words.axis(fit.axis, unit=False)}, per variant and setting (95% CI), steady "
            f"points only; an exponent whose interval lies outside [{EXPONENT_RANGE[0]:g}, "
            f"{EXPONENT_RANGE[1]:g}] or is wider than ±{MAX_HALF_WIDTH:g} is unreliable "
            f"(“{believable}” no) and stated in no legend"
        )
        if fit.reference_variant:
            text += f"; crossover: where the fitted line meets {fit.reference_variant}'s"
        parts.append(text)
    return "; ".join(parts)


def _sections(
    frame: pd.DataFrame,
    infos: dict[str, TaskInfo],
    published: set[str],
    choices: list[Choice] | None = None,
    colours: dict[str, str] | None = None,
) -> list[TaskSection]:
    colours = colours or variant_colours(_drawn(frame))
    sections = []
    ok = frame[(frame["status"] == "ok") & frame["metric"].notna()]
    for task in sorted(ok["task"].unique()):
        rows = ok[ok["task"] == task]
        info = infos.get(task)
        derived = rows["derived"]
        notes: list[str] = []
        charts = _task_charts(frame, task, rows, info, colours, notes)
        charts += _bar_charts(task, rows, info, colours, notes)
        charts += _scatter_charts(task, rows, info, colours)
        sections.append(
            TaskSection(
                name=task,
                title=info.label if info else "",
                description=info.description if info else "",
                table=_runs_table(rows[~derived], info, published),
                charts=charts,
                n_runs=rows.loc[~derived, "run_id"].nunique(),
                fits=_fits_table(rows[derived], info) if derived.any() else None,
                fits_note=_fits_note(info),
                tuned=_tuned_table(choices or [], task, info),
                notes=notes,
            )
        )
    return sections


def _runs_table(rows: pd.DataFrame, info: TaskInfo | None, published: set[str]) -> Table:
    """A task's table of its runs' values (`task_table`), headers in words, its timings' 0/1
    steadiness and accuracy flags as yes and no."""
    flags = (
        {*info.steadiness.values(), *info.accuracy.values(), *info.convergence.values()}
        if info
        else set()
    )
    table = task_table(
        rows,
        _metric_info(info),
        RUN_LINK,
        published,
        steadiness=info.steadiness if info else None,
        accuracy=info.accuracy if info else None,
        convergence=info.convergence if info else None,
        annotations=_annotation_headers(info),
        flags=flags,
    )
    return readable_headers(table, info)


def _fits_table(rows: pd.DataFrame, info: TaskInfo | None) -> Table:
    """A task's table of scaling fits, headers in words, believability as yes and no."""
    flags = {fit.name + RELIABLE_SUFFIX for fit in info.scaling_fits} if info else set()
    return readable_headers(task_table(rows, _metric_info(info), flags=flags), info)


def _tuned_table(choices: list[Choice], task: str, info: TaskInfo | None) -> Table | None:
    """The values each variant's validation picked (`tuning_table`), headers in words."""
    table = tuning_table(choices, task)
    return readable_headers(table, info) if table is not None else None


def _annotation_headers(info: TaskInfo | None) -> dict[str, str]:
    """metric → the header of the column of its annotation (`TaskInfo.annotations`): the
    detail key's label where the task names it in ``axes``, else the key in words."""
    words = Words(info)
    return {m: words.axis(key) for m, key in info.annotations.items()} if info else {}


def readable_headers(table: Table, info: TaskInfo | None) -> Table:
    """``table`` (a task's table, its fits or its comparison with peers) with the headers of its
    metric and parameter columns in words (`tables.Words`: what the task declares, else words
    for the identifier), each identifier kept in the header's hover; no two columns share a
    header (`distinct_headers`: a value at the row's own curve position says which axis)."""
    words = Words(info)
    for col in table.columns:
        header = _header_words(col.key, words) if col.header == col.key else None
        if header is None:  # its own text, a metric it names in words ("<metric> per value")
            header = IDENTIFIER.sub(lambda m: words.metric(m.group()), col.header)
        if header != col.header:
            col.description = f"{col.key}: {col.description}" if col.description else col.key
            col.header = header
    distinct_headers(table.columns, lambda col: _told_apart(col, words))
    return table


def _header_words(key: str, words: Words) -> str | None:
    """The header of a task table's column ``key`` in words: a metric ("metric (mean over
    x)" too), a task parameter ("task.x") or a variant parameter ("variant.x"); None for the
    rest (variant, machine, dtype, runs), whose headers are words already."""
    metric, _, over = key.partition(" (mean over ")
    if key.startswith("task."):
        return words.axis(key.removeprefix("task."))
    if key.startswith("variant."):
        return spelled(key.removeprefix("variant."))
    if key in _PLAIN_KEYS:
        return None
    header = words.metric(metric)
    if over:
        header += f" (mean over {words.axis(over.removesuffix(')'), unit=False)})"
    return header


_PLAIN_KEYS = {"variant", "machine", "dtype", "runs"}


def _told_apart(col: Column, words: Words) -> list[str]:
    """What tells a column apart from another of the same header: the curve axis its values
    sit at (the row's own setting of it), then its identifier in words."""
    at = f" at the row's {words.axis(col.axis, unit=False)}" if col.axis else ""
    metric = col.key.partition(" (mean over ")[0]
    return [at, f" ({spelled(metric.split('.', 1)[-1])})"]


def _drawn(frame: pd.DataFrame) -> pd.Series:
    """The variants a chart may draw: those with a finished run's value (a library that could
    not run here, listed with the peers, takes no colour from those drawn)."""
    return frame.loc[(frame["status"] == "ok") & frame["metric"].notna(), "variant"]


def _provenance(frame: pd.DataFrame) -> dict[str, str]:
    def values(col: str) -> str:
        vals = sorted({str(v) for v in frame[col].dropna().unique()})
        return ", ".join(vals) if vals else "unknown"

    return {
        "generated": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machines": values(MACHINE if MACHINE in frame else "device_name"),  # hardware identity
        "hosts": values("hostname"),
        "attnbench": values("attnbench_version"),
        "torch": values("torch_version"),
        "code": _code(frame),
        "runs_from": str(frame["created_at"].min()) if len(frame) else "",
        "runs_to": str(frame["created_at"].max()) if len(frame) else "",
    }


def _code(frame: pd.DataFrame) -> str:
    """Which code measured the runs, for the footer: the commits, and whether a tree was dirty;
    or that they were not run from a git checkout (an installed package)."""
    commits = sorted({str(c)[:12] for c in frame["git_commit"].dropna().unique() if str(c)})
    if not commits:
        return "not from a git checkout"
    dirty = frame["git_dirty"].fillna(False).astype(bool).any()
    text = f"commit{'s' if len(commits) > 1 else ''} {', '.join(commits)}"
    return text + (" (some runs: code that differed from its commit)" if dirty else "")


def plural(n: int, word: str) -> str:
    """ "1 run", "2 runs"."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("attnbench.harness.leaderboard", "."),
        autoescape=True,  # every value from results is data, never markup
        undefined=jinja2.StrictUndefined,
    )
    env.filters["plural"] = plural
    return env


def _shown(frame: pd.DataFrame, include_stale: bool) -> tuple[pd.DataFrame, int]:
    """The rows the page shows, with their machine, and how many runs of older code it leaves
    out (`ranking.shown_rows`, the rule `attnbench.results` reads a table by too)."""
    return shown_rows(frame, include_stale), count_stale(frame)


@dataclass
class Source:
    """One results folder of a board: its rows (all, and those shown) and its provenance."""

    folder: Path
    table: Path  # its table file, as `fresh_table` read it
    frame: pd.DataFrame  # the table's rows, runs an earlier folder holds left out
    infos: dict[str, TaskInfo]
    shown: pd.DataFrame = field(default_factory=pd.DataFrame)
    n_stale: int = 0
    n_elsewhere: int = 0  # runs an earlier folder of the board holds too (shown once, from it)
    n_unjudged: int = 0  # runs marked current whose code the table does not record

    def header(self) -> dict[str, object]:
        """What the page's header says of the folder (`_provenance` and the counts)."""
        runs = self.shown.loc[~self.shown["derived"], "run_id"].nunique() if len(self.shown) else 0
        return {
            "folder": str(self.folder),
            "n_runs": runs,
            "n_stale": self.n_stale,
            "n_elsewhere": self.n_elsewhere,
            "n_unjudged": self.n_unjudged,
            **(_provenance(self.shown) if len(self.shown) else {}),
        }


def _folders(results_dirs: object) -> list[Path]:
    """The results folders of a board: one path, or several (each once).

    Raises:
        SiteError: none given, or one given twice.
    """
    if isinstance(results_dirs, (str, os.PathLike)):
        return [Path(results_dirs)]
    folders = [Path(d) for d in results_dirs]  # type: ignore[union-attr]
    if not folders:
        raise SiteError("no results folder given; name one or more (e.g. results).")
    seen: dict[Path, Path] = {}
    for folder in folders:
        key = folder.resolve()
        if key in seen:
            raise SiteError(f"{folder} is given twice (as {seen[key]} too); name each folder once.")
        seen[key] = folder
    return folders


def site_folder(
    results_dir: str | os.PathLike | Sequence[str | os.PathLike] = "results",
    out_dir: str | os.PathLike | None = None,
) -> Path:
    """The folder `build_site` writes the board of ``results_dir`` into: ``out_dir``, by
    default RESULTS_DIR/leaderboard (see `build_site` for the errors)."""
    folders = _folders(results_dir)
    if len(folders) > 1 and out_dir is None:
        raise SiteError("a board of several results folders needs its own folder: give -o SITE.")
    return Path(out_dir) if out_dir is not None else folders[0] / "leaderboard"


def build_site(
    results_dir: str | os.PathLike | Sequence[str | os.PathLike] = "results",
    out_dir: str | os.PathLike | None = None,
    include_stale: bool = False,
) -> Path:
    """Write the leaderboard of one results folder, or of several on one page, into ``out_dir``.

    Several folders (a CPU reference, a GPU reference, a colleague's machine) make one board:
    machines stay apart by their hardware identity, as within one folder; each folder's
    provenance and stale runs are stated in the header, staleness judged per folder; a run
    that two folders hold (a copied record: the same identity) is shown once, from the first.

    The folder is written so that no moment leaves a file in part or a page linking a record
    that is gone: each file goes to a temporary file beside it, renamed into place (the record
    copies, then the table, then the page), and only then are the previous board's files that
    this one lacks removed. A build that stops part-way (Ctrl-C, SIGTERM, a full disk) leaves
    every file either the previous build's or this one's, whole; the page may then sit beside
    the other build's table or records until the next build.

    Args:
        results_dir: A results folder, or a list of them.
        out_dir: The site folder (default RESULTS_DIR/leaderboard; required for several): one
            that does not exist yet, is empty, or was written by a build (`publish.SITE_MARK`).
        include_stale: Show the records of older code too (history; default: only current ones,
            and the page says how many it left out). The published table holds all of them.

    Returns:
        The path of ``index.html``. With no results, the page says how to produce some.

    Raises:
        SiteError: no results folder, one given twice, several without ``out_dir``, or
            ``out_dir`` cannot or must not be written.
        TableError: a results table is corrupt or of an older layout.
        OSError: writing the site failed (a full disk); what was written is whole, see above.
    """
    folders = _folders(results_dir)
    out = site_folder(folders, out_dir)
    for folder in folders:
        check_paths(folder, out)
    sources = [_read_source(folder) for folder in folders]
    _start_site(out)
    snapshot = RecordSnapshot(out / "runs")  # put back if the build fails before its page
    try:
        published = _publish_sources(sources, out)
        for source in sources:
            if not source.frame.empty:
                source.shown, source.n_stale = _shown(source.frame, include_stale)
        shown = [s.shown for s in sources if not s.shown.empty]
        frame = pd.concat(shown, ignore_index=True) if shown else pd.DataFrame()
        infos: dict[str, TaskInfo] = {}
        for source in reversed(sources):  # the first folder's description of a task wins
            infos.update(source.infos)
        frame = judge_steadiness(frame, infos)  # once: every view reads the verdicts
        html = (
            _environment()
            .get_template("index.html.j2")
            .render(
                results_dir=str(folders[0]),
                **_page(frame, infos, published),
                n_stale=sum(s.n_stale for s in sources),
                n_unjudged=sum(s.n_unjudged for s in sources),
                sources=[s.header() for s in sources] if len(sources) > 1 else [],
                unsteady_mark=UNSTEADY_MARK,
                include_stale=include_stale,
                plotly_js=PLOTLY_JS,
            )
        )
        # the page rendered first: the table and the page are then renamed into place back to back
        tabled = _publish_table(sources, out, several=len(folders) > 1)
        index = out / INDEX
        atomic_write_text(index, html)
    except BaseException:
        snapshot.restore()
        raise
    remove_stale_records(out / "runs", published)  # the new page is in place: now the old go
    if not tabled:
        for name in TABLES:
            (out / name).unlink(missing_ok=True)  # an earlier build's table is not this board's
    return index


def _read_source(folder: Path) -> Source:
    """A results folder's table, fresh for the installed code (`fresh_table`: collected again
    first where it is not, each step said in one line).

    Raises:
        SiteError: the folder has records but no table, and collecting them failed.
    """
    try:
        fresh = fresh_table(folder, WHO)
    except FreshnessError as exc:
        raise SiteError(str(exc)) from None
    return Source(folder, fresh.path, fresh.frame, fresh.infos, n_unjudged=fresh.n_unjudged)


def _publish_sources(sources: list[Source], out: Path) -> set[str]:
    """Publish each folder's records (`publish.copy_records`: nothing removed yet); a run an
    earlier folder holds is left out of the later one's rows (counted in its ``n_elsewhere``).
    Returns the run_ids whose records were published."""
    published: set[str] = set()
    seen: set[str] = set()
    for source in sources:
        if source.frame.empty:
            continue
        again = source.frame["run_id"].isin(seen)
        source.n_elsewhere = source.frame.loc[again, "run_id"].nunique()
        source.frame = source.frame[~again]
        seen |= set(source.frame["run_id"].dropna())
        runs = set(source.frame.loc[~source.frame["derived"].astype(bool), "run_id"].dropna())
        published |= copy_records(source.folder, out / "runs", runs, keep=published)
    return published


def _start_site(out: Path) -> None:
    """Create the site folder with its mark (`publish.SITE_MARK`, first of all its files) and
    Plotly's JavaScript; remove what a build killed outright left (`publish.remove_orphans`)."""
    out.mkdir(parents=True, exist_ok=True)
    remove_orphans(out, (INDEX, PLOTLY_JS, SITE_MARK, *TABLES))
    if not (out / SITE_MARK).is_file():
        atomic_write_text(out / SITE_MARK, "Written by attnbench-leaderboard: its site folder.\n")
    if not (out / PLOTLY_JS).exists():
        atomic_write_text(out / PLOTLY_JS, get_plotlyjs())


def _publish_table(sources: list[Source], out: Path, several: bool) -> bool:
    """The table beside the page, as parquet and CSV, each renamed over the previous one: one
    folder's table file as it is; the rows of ``several`` (the board was given several folders,
    whatever rows each has left), each with its ``results_folder``. Returns whether there was a
    table to write (False: no folder has rows)."""
    if not several:
        (source,) = sources
        if source.frame.empty:
            return False
        with atomic_file(out / TABLES[0]) as tmp:
            shutil.copyfile(source.table, tmp)
        with atomic_file(out / TABLES[1]) as tmp:
            source.frame.to_csv(tmp, index=False)
        return True
    having = [s for s in sources if not s.frame.empty]
    if not having:
        return False
    frame = pd.concat(
        [s.frame.assign(results_folder=str(s.folder)) for s in having], ignore_index=True
    )
    with atomic_file(out / TABLES[0]) as tmp:
        frame.to_parquet(tmp, index=False)
    with atomic_file(out / TABLES[1]) as tmp:
        frame.to_csv(tmp, index=False)
    return True


def _page(frame: pd.DataFrame, infos: dict[str, TaskInfo], published: set[str]) -> dict:
    """The template's values that come from the shown rows ``frame`` (see `_shown`), judged
    for steadiness (`steadiness.judge_steadiness`)."""
    every_run = frame  # before tuning keeps only the winning values: failures of all are listed
    frame, choices = select_tuned(frame, infos) if not frame.empty else (frame, [])
    # ours vs theirs from the plain names; then every library variant is named with its library
    peers = peer_section(frame, infos) if not frame.empty else None
    for pair_table in peers.tables if peers else []:
        readable_headers(pair_table.table, infos.get(pair_table.task))
    frame = labelled(frame)
    page = {"empty": frame.empty, "peers": peers}
    if frame.empty:
        return {
            **page,
            "sections": [],
            "chooser": None,
            "summary": [],
            "length_ranks": [],
            "overview": None,
            "cost_charts": [],
            "unfinished": None,
            "unsupported": "",
            "provenance": None,
            "n_runs": 0,
            "n_unsteady": count_unsteady(frame),
            "n_still_learning": count_still_learning(frame),
            "n_tuned_out": 0,
        }
    return {**page, **_contents(frame, every_run, infos, published, choices)}


def _contents(
    frame: pd.DataFrame,
    every_run: pd.DataFrame,
    infos: dict[str, TaskInfo],
    published: set[str],
    choices: list[Choice],
) -> dict:
    """The template's values of a page with results: ``frame`` the rows shown after tuning,
    ``every_run`` the rows before it."""
    colours = variant_colours(_drawn(frame))  # one per variant a chart may draw
    columns = overview_columns(frame, infos)
    families = frame.groupby("variant")["variant_family"].first().dropna().to_dict()
    # a library that cannot run here is listed with the peers as unavailable, not here
    not_unavailable = labelled(every_run)[~unavailable(every_run)]
    n_runs = frame.loc[~frame["derived"], "run_id"].nunique()
    chooser = chooser_data(frame, columns, infos)
    table = overview(columns.frame, columns.headlines, families)
    return {
        "chooser": embeddable(chooser) if chooser else None,
        "summary": [*best_per_column(table), *cost_regimes(chooser)],
        "length_ranks": cost_ranks(frame, infos),
        "sections": _sections(frame, infos, published, choices, colours),
        "overview": table,
        "cost_charts": tradeoff_charts(frame, columns, infos, colours),
        "unfinished": unfinished_table(not_unavailable),
        "unsupported": unsupported_line(not_unavailable),
        "provenance": _provenance(frame),
        "n_runs": n_runs,
        "n_unsteady": count_unsteady(frame),
        "n_still_learning": count_still_learning(frame),
        "n_tuned_out": every_run.loc[~every_run["derived"], "run_id"].nunique() - n_runs,
    }
