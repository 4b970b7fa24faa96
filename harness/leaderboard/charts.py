"""Plotly figures of the leaderboard, returned as JSON text safe to embed in a <script> element."""

from __future__ import annotations

import html
import itertools
import math
from dataclasses import dataclass, field

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from attnbench.harness.leaderboard.tables import expand_params, key_columns, varying

REFERENCE_DASHES = ("dash", "dot", "dashdot", "longdash")  # one style per reference line
LONG_LEGEND = 12  # more entries than this: the legend goes below the plot
LINE_COLOURS = (  # plotly's default qualitative colourway, assigned in line order
    "#636efa",
    "#EF553B",
    "#00cc96",
    "#ab63fa",
    "#FFA15A",
    "#19d3f3",
    "#FF6692",
    "#B6E880",
    "#FF97FF",
    "#FECB52",
)


@dataclass
class Chart:
    """A figure to draw: element id and embeddable JSON (`embeddable_json`)."""

    id: str
    json: str


def embeddable_json(fig: go.Figure) -> str:
    """The figure as JSON with ``<``, ``>`` and ``&`` escaped: no text in it can end the script."""
    text = pio.to_json(fig, validate=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def axis_type(values: pd.Series) -> str:
    """ "log" for positive values spanning at least a decade (scaling curves), else "linear"."""
    values = values.dropna()
    if values.empty or (values <= 0).any():
        return "linear"
    return "log" if values.max() / values.min() >= 10 else "linear"


MAX_TICKS = 12  # an integer axis with at most this many values gets a tick at each of them


def integer_ticks(values: pd.Series, log: bool = False) -> dict:
    """Tick settings for an axis whose values are all integers (layers, widths, lengths), so
    that it never shows 0.2, 0.4, …: a tick at each value where there are few, else integer
    ticks only. Empty for any other axis (Plotly's defaults).

    Args:
        values: The axis's values.
        log: Whether the axis is logarithmic (its ticks are then never fractional beyond the
            first decade, so many values only get integer formatting).
    """
    values = pd.Series(values, dtype=float).dropna()
    if values.empty or not values.map(lambda v: math.isfinite(v) and v.is_integer()).all():
        return {}
    distinct = sorted(values.unique())
    if len(distinct) <= MAX_TICKS:
        return {
            "tickmode": "array",
            "tickvals": distinct,
            "ticktext": [str(int(v)) for v in distinct],
        }
    if log:
        return {"tickformat": "d"}
    raw = (distinct[-1] - distinct[0]) / MAX_TICKS
    magnitude = 10 ** math.floor(math.log10(raw)) if raw >= 1 else 1
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    return {"tickmode": "linear", "tick0": distinct[0], "dtick": step, "tickformat": "d"}


@dataclass
class CurveExtras:
    """What a curve chart can show beside its lines.

    Attributes:
        notes: variant → text appended to its legend entries (e.g. the fitted exponent).
        failures: Unfinished runs to mark, with columns variant, status, x (their curve position).
        band: (low metric, high metric) drawn as a shaded band around each line (e.g. bootstrap).
        references: Metrics drawn once each as dashed lines, averaged over all runs (baselines,
            closed-form theory curves).
        companions: Metrics drawn once per line, from that line's own runs, dashed in the line's
            colour (a value that depends on the variant, e.g. its own closed form); a line whose
            runs do not report the metric at some x has no companion point there.
        steady_flag: The 0/1 metric saying whether the timing behind a value was steady
            (`TaskInfo.steadiness`): a point any of whose runs has it at 0 is drawn hollow,
            and its hover says so. Empty: nothing is judged.
    """

    notes: dict[str, str] = field(default_factory=dict)
    failures: pd.DataFrame | None = None
    band: tuple[str, str] | None = None
    references: dict[str, str] = field(default_factory=dict)  # metric → legend label
    companions: dict[str, str] = field(default_factory=dict)  # metric → label (hover, title)
    steady_flag: str = ""


def curve_figure(
    ok: pd.DataFrame, metric: str, title: str, unit: str = "", extras: CurveExtras | None = None
) -> go.Figure | None:
    """``metric`` against its curve axis, one line per variant and setting (log axes where the
    values span decades, see `axis_type`), with the `CurveExtras` given.

    Only points along the first curve axis found are drawn (a metric may be reported along
    several, e.g. concentration by scale and by layer: call once per axis). Returns None when the
    task has no curve points for ``metric``.
    """
    extras = extras or CurveExtras()
    everything = ok
    rows = ok[(ok["metric"] == metric) & ok["x_value"].notna()]
    if rows.empty:
        return None
    x_name = rows["x_name"].dropna().iloc[0]
    rows = rows[rows["x_name"] == x_name]
    params = expand_params(rows, "task_params", "task")
    others = [c for c in varying(params) if c != f"task.{x_name}"]
    vparams = expand_params(rows, "variant_params", "variant")
    vothers = varying(vparams, within=rows["variant"])
    line_keys = ["variant", *vothers, "machine", "dtype", *others]
    rows = key_columns(pd.concat([rows, params[others], vparams[vothers]], axis=1), line_keys)
    fig = go.Figure()
    colours = itertools.cycle(LINE_COLOURS)
    drawn: list[str] = []  # companion labels with at least one line drawn
    hollow = False  # whether a point is drawn hollow (unsteady)
    for key, group in rows.groupby(line_keys, sort=True):
        mean = group.groupby("x_value")["value"].mean().sort_index()
        key = key if isinstance(key, tuple) else (key,)
        label = " · ".join(str(k) for k in key) + extras.notes.get(str(key[0]), "")
        colour = next(colours)  # explicit, so that the line's companions can share it
        unsteady = _unsteady_xs(everything, group, (extras.steady_flag, x_name))
        line = go.Scatter(
            x=mean.index.tolist(),
            y=mean.tolist(),
            mode="lines+markers",
            name=label,
            legendgroup=label,  # its band and companions show and hide with it
            line={"color": colour},
            marker={
                "color": colour,
                "symbol": ["circle-open" if x in unsteady else "circle" for x in mean.index],
                "size": [9 if x in unsteady else 6 for x in mean.index],
            },
            text=["unsteady timing: not ranked" if x in unsteady else "" for x in mean.index],
        )
        hollow = hollow or bool(unsteady)
        fig.add_trace(line)
        if extras.band is not None:
            _add_band(fig, everything, group, extras.band, label)
        for companion, companion_label in extras.companions.items():
            pair = (companion, x_name)
            if _add_companion(fig, everything, group, pair, label, companion_label, colour):
                drawn += [] if companion_label in drawn else [companion_label]
    for dash, (ref_metric, ref_label) in zip(
        itertools.cycle(REFERENCE_DASHES), extras.references.items(), strict=False
    ):
        ref = everything[(everything["metric"] == ref_metric) & (everything["x_name"] == x_name)]
        if not ref.empty:
            mean = ref.groupby("x_value")["value"].mean().sort_index()
            fig.add_trace(
                go.Scatter(
                    x=mean.index.tolist(),
                    y=mean.tolist(),
                    mode="lines+markers",
                    name=ref_label,
                    line={"dash": dash, "color": "#444"},
                    marker={"size": 4, "color": "#444"},
                )
            )
    if extras.failures is not None and not extras.failures.empty and len(rows):
        top = float(rows["value"].max())
        failed = extras.failures
        fig.add_trace(
            go.Scatter(
                x=failed["x"].tolist(),
                y=[top] * len(failed),
                mode="markers",
                marker={"symbol": "x", "size": 11, "color": "#c62828"},
                name="oom / timeout / failed (at the top)",
                text=[
                    f"{v}: {st}" for v, st in zip(failed["variant"], failed["status"], strict=True)
                ],
                hoverinfo="text+x",
            )
        )
    if drawn:
        title += " — dashed, in a line's colour: " + ", ".join(drawn)
    if hollow:
        title += " — hollow: unsteady timing (not ranked)"
    xs = rows["x_value"]
    if extras.failures is not None and not extras.failures.empty:
        xs = pd.concat([xs, extras.failures["x"].astype(float)])
    fig.update_layout(
        title=title,
        xaxis={
            "title": x_name,
            "type": axis_type(rows["x_value"]),
            **integer_ticks(xs, log=axis_type(rows["x_value"]) == "log"),
        },
        yaxis={"title": f"{metric} ({unit})" if unit else metric, "type": axis_type(rows["value"])},
        template="plotly_white",
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
        legend={"title": {"text": " · ".join(line_keys)}},
    )
    if sum(1 for t in fig.data if t.showlegend is not False) > LONG_LEGEND:
        fig.update_layout(legend={"orientation": "h", "y": -0.2, "font": {"size": 10}})
    return fig


def _unsteady_xs(everything: pd.DataFrame, line: pd.DataFrame, flag_axis: tuple[str, str]) -> set:
    """The curve positions at which a run behind ``line`` flagged its timing unsteady (its
    ``flag`` metric is 0 there); empty without a flag."""
    flag, x_name = flag_axis
    if not flag:
        return set()
    runs = everything[everything["run_id"].isin(set(line["run_id"]))]
    flags = runs[(runs["metric"] == flag) & (runs["x_name"] == x_name)]
    return set(flags.loc[flags["value"] == 0, "x_value"])


def _add_companion(
    fig: go.Figure,
    everything: pd.DataFrame,
    line: pd.DataFrame,
    metric_axis: tuple[str, str],
    label: str,
    companion_label: str,
    colour: str,
) -> bool:
    """Draw ``metric`` of the runs behind one line along the same axis, dashed in its colour;
    False where those runs do not report it."""
    metric, x_name = metric_axis
    runs = everything[everything["run_id"].isin(set(line["run_id"]))]
    runs = runs[(runs["metric"] == metric) & (runs["x_name"] == x_name)]
    if runs.empty:
        return False
    mean = runs.groupby("x_value")["value"].mean().sort_index()
    fig.add_trace(
        go.Scatter(
            x=mean.index.tolist(),
            y=mean.tolist(),
            mode="lines+markers",
            name=f"{label} · {companion_label}",
            legendgroup=label,
            showlegend=False,  # the title says what the dashed lines are
            line={"dash": "dash", "color": colour, "width": 1.5},
            marker={"size": 4, "color": colour, "symbol": "circle-open"},
        )
    )
    return True


def _add_band(
    fig: go.Figure, everything: pd.DataFrame, line: pd.DataFrame, band: tuple[str, str], label: str
) -> None:
    """Shade between the band metrics of the runs behind one line."""
    runs = everything[everything["run_id"].isin(set(line["run_id"]))]
    low = runs[runs["metric"] == band[0]].groupby("x_value")["value"].mean().sort_index()
    high = runs[runs["metric"] == band[1]].groupby("x_value")["value"].mean().sort_index()
    if low.empty or high.empty:
        return
    xs = low.index.tolist() + high.index.tolist()[::-1]
    ys = low.tolist() + high.tolist()[::-1]
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=ys,
            fill="toself",
            mode="lines",
            line={"width": 0},
            opacity=0.2,
            name=f"{label} ({band[0]}–{band[1]})",
            legendgroup=label,
            showlegend=False,
            hoverinfo="skip",
        )
    )


MARKER_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "cross", "triangle-down", "star")


def marker_styles(labels: list[str]) -> dict[str, tuple[str, str]]:
    """label → (colour, marker symbol), distinct for up to 70 labels: the colours cycle first,
    then the symbol changes. Build it once from every label of the page's scatters, so that a
    variant looks the same in each of them."""
    names = sorted(dict.fromkeys(labels))
    return {
        name: (
            LINE_COLOURS[i % len(LINE_COLOURS)],
            MARKER_SYMBOLS[(i // len(LINE_COLOURS)) % len(MARKER_SYMBOLS)],
        )
        for i, name in enumerate(names)
    }


def plotly_text(text: object) -> str:
    """``text`` for a place where Plotly reads its HTML subset (names, hover, titles): ``&``,
    ``<`` and ``>`` as entities, which Plotly shows as the characters, so a name is shown as
    written and never becomes a tag."""
    return html.escape(str(text), quote=False)


def _same_point(points: pd.DataFrame) -> pd.Series:
    """Each row's position as text, three significant figures (what the hover shows): rows
    sharing it are drawn on top of each other."""
    return points["x"].map(lambda v: f"{v:.3g}") + "," + points["y"].map(lambda v: f"{v:.3g}")


def scatter_figure(
    points: pd.DataFrame,
    x_title: str,
    y_title: str,
    title: str,
    styles: dict[str, tuple[str, str]] | None = None,
    x_range: tuple[float, float] | None = None,
) -> go.Figure:
    """One trace per row of ``points`` (columns label, x, y): a marker named in the legend and
    no text on the plot, so labels can never overlap however close the points are (several
    variants often share one point: same quality, same cost). The hover names every entry
    drawn at the same point; clicking a legend entry hides that entry. A row with a non-empty
    ``note`` (optional column, e.g. "from unsteady timings only") is drawn hollow, its note in
    the hover.

    Args:
        styles: label → (colour, symbol), see `marker_styles` (default: from these labels).
        x_range: Fixed x range (e.g. density, 0 to 1); default: Plotly's autorange.
    """
    styles = styles or marker_styles(points["label"].tolist())
    where = _same_point(points)
    fig = go.Figure()
    for i, row in points.sort_values("label").iterrows():
        label = str(row["label"])
        colour, symbol = styles.get(label, (LINE_COLOURS[0], MARKER_SYMBOLS[0]))
        others = sorted(str(o) for o in points.loc[where == where[i], "label"] if o != label)
        hover = (
            f"<b>{plotly_text(label)}</b><br>{plotly_text(x_title)}: {row['x']:.3g}"
            f"<br>{plotly_text(y_title)}: {row['y']:.3g}"
        )
        if others:
            hover += "<br>same point: " + plotly_text(", ".join(others))
        note = str(row.get("note", "") or "")
        if note:  # e.g. a value from unsteady timings: drawn hollow
            hover += "<br>" + plotly_text(note)
            symbol = f"{symbol}-open"
        fig.add_trace(
            go.Scatter(
                x=[row["x"]],
                y=[row["y"]],
                mode="markers",
                name=plotly_text(label),
                marker={"color": colour, "symbol": symbol, "size": 11, "opacity": 0.85},
                hovertext=[hover],
                hoverinfo="text",
            )
        )
    xaxis = {"title": plotly_text(x_title), "type": axis_type(points["x"])}
    if x_range is not None:
        xaxis["range"] = list(x_range)
    fig.update_layout(
        title=plotly_text(title),
        xaxis=xaxis,
        yaxis={"title": plotly_text(y_title)},
        template="plotly_white",
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
        showlegend=True,
        legend={"title": {"text": "variant"}, "font": {"size": 11}},
    )
    return fig


def bar_figure(
    ok: pd.DataFrame,
    metric: str,
    title: str,
    unit: str = "",
    references: dict[str, str] | None = None,
) -> go.Figure | None:
    """``metric``'s single values (points without a curve coordinate) as one bar per variant (and
    its varying parameters, machine, dtype): the mean over the runs behind it, with each run as a
    marker on the bar; each reference metric is a dashed horizontal level across all bars (its
    mean over the runs of ``ok``), so every variant is compared with the reference directly.

    Call it with one task setting at a time (references are averaged over ``ok``). The value axis
    is logarithmic where bars and levels span decades (`axis_type`). Returns None when ``ok`` has
    no such values of ``metric``.
    """
    scalar = ok[ok["x_value"].isna()]
    rows = scalar[scalar["metric"] == metric]
    if rows.empty:
        return None
    vparams = expand_params(rows, "variant_params", "variant")
    vothers = varying(vparams, within=rows["variant"])
    keys = ["variant", *vothers, "machine", "dtype"]
    rows = key_columns(pd.concat([rows, vparams[vothers]], axis=1), keys)
    labels, means, run_x, run_y, run_text = [], [], [], [], []
    for key, group in rows.groupby(keys, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        label = " · ".join(str(k) for k in key)
        labels.append(label)
        means.append(float(group["value"].mean()))
        run_x += [label] * len(group)
        run_y += group["value"].tolist()
        run_text += [f"run {r}" for r in group["run_id"]]
    fig = go.Figure(go.Bar(x=labels, y=means, name=f"{metric} (mean over runs)", opacity=0.8))
    fig.add_trace(
        go.Scatter(
            x=run_x,
            y=run_y,
            mode="markers",
            name="each run",
            marker={"color": "#1d2330", "size": 6},
            text=run_text,
            hoverinfo="text+y",
        )
    )
    levels = []
    for dash, (ref_metric, ref_label) in zip(
        itertools.cycle(REFERENCE_DASHES), (references or {}).items(), strict=False
    ):
        ref = scalar.loc[scalar["metric"] == ref_metric, "value"]
        if ref.empty:
            continue
        level = float(ref.mean())
        levels.append(level)
        fig.add_trace(
            go.Scatter(
                x=labels if len(labels) > 1 else labels * 2,
                y=[level] * max(2, len(labels)),
                mode="lines",
                name=f"{ref_label} ({level:.3g})",
                line={"dash": dash, "width": 2},
                hoverinfo="name",
            )
        )
    fig.update_layout(
        title={"text": title, "font": {"size": 13}},  # the title names the whole setting
        xaxis={"title": " · ".join(keys), "type": "category"},
        yaxis={
            "title": f"{metric} ({unit})" if unit else metric,
            "type": axis_type(pd.Series(means + levels)),
        },
        template="plotly_white",
        margin={"l": 60, "r": 20, "t": 50, "b": 80},
    )
    if len(fig.data) > LONG_LEGEND:
        fig.update_layout(legend={"orientation": "h", "y": -0.3, "font": {"size": 10}})
    return fig
