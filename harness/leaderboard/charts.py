"""Plotly figures of the leaderboard, returned as JSON text safe to embed in a <script> element.

Text: Plotly renders a subset of HTML in every text it draws (trace names, hover, titles, axis
titles and ticks, annotations, category values). The chart code here writes plain text, with
"\\n" for an intended line break, and never markup; `embeddable_json`, the one way a figure
leaves this module, escapes ``&``, ``<`` and ``>`` in every string of the figure (Plotly shows
the entities as the characters) and only then turns "\\n" into ``<br>``. A name from a plugin or a
record can therefore never become a tag, a link or a script, whatever chart it lands in.

Colours: one per variant, the same on every chart of a page (`variant_colours`); the lines or
markers of one variant's configurations differ by dash and marker symbol, not colour.
"""

from __future__ import annotations

import functools
import html
import itertools
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from attnbench.harness.leaderboard.tables import (
    SIZE_PARAMS,
    Words,
    config_labels,
    expand_params,
    key_columns,
    param_text,
    size_params_of,
    spelled,
    varying,
)

REFERENCE_DASHES = ("dash", "dot", "dashdot", "longdash")  # one style per reference line
REFERENCE_COLOUR = "#444"
CONFIG_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
MARKER_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "triangle-down", "star")
LONG_LEGEND = 11  # more entries than this: the legend goes below the plot, in rows
CHART_HEIGHT = 460  # px of the plot with a short legend; a legend below adds its rows
CHART_WIDTH = 1150  # px a chart is about wide on the page (for laying out legend rows)
TITLE_CHARS = 90  # a title wraps at this many characters (clear of Plotly's toolbar)
SUBTITLE_CHARS = 140
# one colour per variant: Plotly's ten first, then each chosen for the largest least distance
# (CIE76 ΔE, at least 25 between any two; `tests/harness/test_charts.py`) to those before it,
# none too light for a white page (L* at most 80); more variants get colours chosen the same
# way (`_generated_colours`)
PALETTE = (
    "#1f77b4",  # blue
    "#d62728",  # red
    "#2ca02c",  # green
    "#ff7f0e",  # orange
    "#9467bd",  # purple
    "#8c564b",  # brown
    "#e377c2",  # pink
    "#17becf",  # cyan
    "#7f7f7f",  # grey
    "#bcbd22",  # olive
    "#ff00ff",  # fuchsia
    "#00008b",  # dark blue
    "#000000",  # black
    "#005a32",  # dark green
    "#a6761d",  # ochre
    "#ff1493",  # deep pink
    "#8fbc8f",  # sage
    "#fb9a99",  # salmon
    "#0b2e6f",  # navy
    "#b03060",  # raspberry
    "#800080",  # plum
    "#cab2d6",  # lavender
    "#d2b48c",  # tan
    "#7a0019",  # maroon
    "#0000ff",  # blue
    "#00dd00",  # bright green
    "#9955ff",  # violet
    "#0077ff",  # azure
    "#440033",  # aubergine
    "#00dd99",  # jade
    "#556600",  # dark olive
    "#004455",  # dark teal
    "#443300",  # dark brown
    "#ee77ff",  # orchid
    "#eeaa00",  # amber
    "#88cc00",  # lime
    "#99aaff",  # periwinkle
    "#ee8855",  # coral
    "#ff0000",  # pure red
    "#ff22cc",  # hot pink
)
MAX_LIGHTNESS = 80  # L* of the lightest colour a line on a white page may have


@dataclass
class Chart:
    """A figure to draw: element id, embeddable JSON (`embeddable_json`) and height in px."""

    id: str
    json: str
    height: int = CHART_HEIGHT


def chart(chart_id: str, fig: go.Figure) -> Chart:
    """The `Chart` of ``fig`` (its JSON through `embeddable_json`, its height from its layout)."""
    return Chart(
        id=chart_id, json=embeddable_json(fig), height=int(fig.layout.height or CHART_HEIGHT)
    )


def plain_text(value: str) -> str:
    """``value`` as Plotly must get it: ``&``, ``<``, ``>`` as entities, then each "\\n" as
    ``<br>`` (the only markup a figure of this module holds)."""
    return html.escape(value, quote=False).replace("\n", "<br>")


def _escaped(node: object) -> object:
    """``node`` (parsed figure JSON) with every string passed through `plain_text`."""
    if isinstance(node, str):
        return plain_text(node)
    if isinstance(node, dict):
        return {key: _escaped(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_escaped(value) for value in node]
    return node


TEMPLATE = "plotly_white"


@functools.cache
def _template() -> dict:
    """Every chart's Plotly template as JSON, made once a build and set in each figure's JSON as
    it leaves (`embeddable_json`): set on the figure, Plotly validated its hundreds of properties
    once per figure, a tenth of a board's build."""
    figure = go.Figure(layout={"template": pio.templates[TEMPLATE]})
    return json.loads(pio.to_json(figure, validate=False))["layout"]["template"]


def embeddable_json(fig: go.Figure) -> str:
    """The figure as JSON, the one way a figure leaves this module (see the module docstring):
    every string escaped for Plotly (`plain_text`), then ``<``, ``>`` and ``&`` written as
    ``\\u`` escapes, so that no text in it can end the script element it is embedded in."""
    raw = json.loads(pio.to_json(fig, validate=False))
    raw.setdefault("layout", {})["template"] = _template()
    figure = _escaped(raw)
    text = json.dumps(figure, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def lab(colour: str) -> tuple[float, float, float]:
    """CIE L*a*b* (D65) of a "#rrggbb" colour: where distances match how far apart colours
    look (CIE76 ΔE is the plain distance)."""

    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    r, g, b = (linear(int(colour[i : i + 2], 16) / 255) for i in (1, 3, 5))
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883
    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


@functools.cache
def _generated_colours(n: int) -> tuple[str, ...]:
    """``n`` colours beyond the palette, each the one of a grid of 4096 (none lighter than
    `MAX_LIGHTNESS`) farthest from the palette and those generated before it: however many
    variants a page draws, no two share a colour or look alike where avoidable."""
    if n <= 0:  # the palette suffices: no grid to search (it costs a build half a second)
        return ()
    grid = [
        f"#{r:02x}{g:02x}{b:02x}"
        for r in range(0, 256, 17)
        for g in range(0, 256, 17)
        for b in range(0, 256, 17)
    ]
    labs = {c: lab(c) for c in grid}
    candidates = [c for c in grid if labs[c][0] <= MAX_LIGHTNESS and c not in PALETTE]
    nearest = {c: min(math.dist(labs[c], lab(p)) for p in PALETTE) for c in candidates}
    chosen: list[str] = []
    for _ in range(n):
        best = max(candidates, key=lambda c: (nearest[c], c))
        chosen.append(best)
        candidates.remove(best)
        for c in candidates:
            nearest[c] = min(nearest[c], math.dist(labs[c], labs[best]))
    return tuple(chosen)


def variant_colours(names: Iterable[object]) -> dict[str, str]:
    """variant → its colour, for every distinct name of ``names`` (the variants a page draws:
    one never drawn, such as a library not installed, takes no colour): the sorted names take
    the palette in order, then generated colours (`_generated_colours`), so every one has its
    own. Build it once per page, so that a variant has the same colour on every chart.

    Example:
        >>> variant_colours(["window", "softmax", "window"])
        {'softmax': '#1f77b4', 'window': '#d62728'}
    """
    distinct = sorted({str(n) for n in names})
    extra = _generated_colours(max(0, len(distinct) - len(PALETTE)))
    return dict(zip(distinct, (*PALETTE, *extra), strict=False))


def _colour(colours: dict[str, str], variant: str) -> str:
    return colours.get(variant) or variant_colours([variant])[variant]


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
    if log and len(distinct) > 1:
        distinct = _spread_on_log_axis(distinct)
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


LOG_STEPS_UP_TO = 3  # decades: up to this span a log axis has 1, 2, 5 of each; beyond, decades


def log_ticks(values: pd.Series) -> dict:
    """Tick settings for a log axis of ``values``: each label a whole number as written
    ("0.1", "0.2", "0.5", "1", …), never Plotly's bare mantissas ("5 2 0.1 5 2"): 1, 2 and 5 of
    each decade over a span of up to `LOG_STEPS_UP_TO` decades, the decades alone beyond."""
    values = pd.Series(values, dtype=float)
    values = values[(values > 0) & values.map(math.isfinite)]
    if values.empty:
        return {}
    low, high = float(values.min()), float(values.max())
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    steps = (1, 2, 5) if last - first <= LOG_STEPS_UP_TO else (1,)
    reach = 1.5 if len(steps) > 1 else 10.0  # the tick just beyond each end of the values
    ticks = [
        float(f"{m * 10.0**e:.12g}")
        for e in range(first, last + 1)
        for m in steps
        if low / reach <= m * 10.0**e <= high * reach
    ]
    return {"tickmode": "array", "tickvals": ticks, "ticktext": [f"{t:g}" for t in ticks]}


def axis_ticks(values: pd.Series, log: bool) -> dict:
    """The ticks of an axis of ``values``: `integer_ticks` where they are whole numbers (one per
    value where few), `log_ticks` on any other log axis, else Plotly's."""
    ticks = integer_ticks(values, log=log)
    if log and ticks.get("tickmode") != "array":
        return log_ticks(values)
    return ticks


def _spread_on_log_axis(values: list[float]) -> list[float]:
    """The values that get a tick on a log axis: none closer than 1/MAX_TICKS of the axis's
    span to another, round ones (powers of 2 or 10) chosen first, so that labels never overlap
    (values a few percent apart would print on top of each other)."""
    logs = {v: math.log10(v) for v in values}
    gap = (logs[values[-1]] - logs[values[0]]) / MAX_TICKS

    def round_first(v: float) -> tuple[int, float]:
        power = v >= 1 and (math.log2(v).is_integer() or math.log10(v).is_integer())
        return (0 if power else 1, v)

    kept: list[float] = []
    for v in sorted(values, key=round_first):
        if all(abs(logs[v] - logs[k]) >= gap for k in kept):
            kept.append(v)
    return sorted(kept)


def wrap(text: str, width: int) -> str:
    """``text`` with "\\n" at spaces so that no line is longer than ``width`` characters (where
    a word allows); its own "\\n" are kept."""
    lines = []
    for paragraph in text.split("\n"):
        line = ""
        for word in paragraph.split(" "):
            if line and len(line) + 1 + len(word) > width:
                lines.append(line)
                line = word
            else:
                line = f"{line} {word}" if line else word
        lines.append(line)
    return "\n".join(lines)


def _legend_rows(names: list[str]) -> int:
    """About how many rows a horizontal legend of ``names`` takes on a chart `CHART_WIDTH` wide
    (an entry: its symbol, then its text at about 6.5 px a character)."""
    rows, used = 1, 0.0
    for name in names:
        width = 50 + 6.5 * max(len(part) for part in name.split("\n"))
        if used and used + width > CHART_WIDTH:
            rows, used = rows + 1, 0.0
        used += width
    return rows


def finish_layout(
    fig: go.Figure, title: str, subtitle: str = "", legend_title: str = "", bottom: int = 50
) -> None:
    """Title (wrapped clear of the toolbar) with the subtitle under it (what is constant across
    the chart: machine, dtype, setting), margins that hold them, and the legend: at the right
    where it is short, else in rows below the plot, the figure growing by those rows so that
    the legend never scrolls."""
    title = wrap(title, TITLE_CHARS)
    subtitle = wrap(subtitle, SUBTITLE_CHARS) if subtitle else ""
    top = 30 + 20 * (title.count("\n") + 1) + (17 * (subtitle.count("\n") + 1) if subtitle else 0)
    names = [str(t.name) for t in fig.data if t.showlegend is not False and t.name]
    height = CHART_HEIGHT + top - 60
    legend: dict = {"font": {"size": 11}}
    if legend_title:
        legend["title"] = {"text": legend_title}
    if len(names) > LONG_LEGEND:
        rows = _legend_rows(names)
        legend.update(orientation="h", x=0, xanchor="left", y=0, yanchor="bottom", yref="container")
        legend.pop("title", None)
        bottom += 22 * rows + 12
        height += 22 * rows + 12
    title_layout: dict = {
        "text": title,
        "x": 0.01,
        "xanchor": "left",
        "yref": "container",
        "y": 1 - 12 / height,
        "yanchor": "top",
        "font": {"size": 15},
    }
    if subtitle:
        title_layout["subtitle"] = {"text": subtitle, "font": {"size": 12, "color": "#5b6475"}}
    fig.update_layout(
        title=title_layout,
        height=height,
        margin={"l": 60, "r": 20, "t": top, "b": bottom},
        legend=legend,
    )


def _missing(value: object) -> bool:
    return value is None or value != value or value == "–"


def _number(value: object) -> object:
    """``value``, a number where it is one written as text (a grouping key made text by
    `key_columns`: "0.3333333333333333"), so that labels round it."""
    if not isinstance(value, str):
        return value
    try:
        number = float(value)
    except ValueError:
        return value
    return int(number) if number.is_integer() else number


def _part(key: str, value: object, words: Words | None = None) -> str:
    """One part of a legend entry or subtitle: a task parameter as the task names it
    (`Words.setting`: "model width 16"), a variant parameter as name=value (its value rounded,
    "1/3"), anything else (a variant, machine, dtype) as its value."""
    value = _number(value)
    if key.startswith("task."):
        return (words or Words()).setting(key.removeprefix("task."), value)
    if key.startswith("variant."):
        return f"{spelled(key.removeprefix('variant.'))}={param_text(value)}"
    return param_text(value)


def split_keys(
    keys: list[str], entries: list[tuple], words: Words | None = None
) -> tuple[list[int], str]:
    """(positions of the keys whose values differ between ``entries``, the first key always;
    the constant rest as text for the subtitle, missing values left out)."""
    shown = [0] + [i for i in range(1, len(keys)) if len({repr(e[i]) for e in entries}) > 1]
    constant = [
        _part(keys[i], entries[0][i], words)
        for i in range(1, len(keys))
        if i not in shown and entries and not _missing(entries[0][i])
    ]
    return shown, " · ".join(constant)


def entry_label(keys: list[str], entry: tuple, shown: list[int], words: Words | None = None) -> str:
    """A legend entry: the parts of ``entry`` at ``shown`` positions, missing values left out
    (a parameter another variant has)."""
    return " · ".join(_part(keys[i], entry[i], words) for i in shown if not _missing(entry[i]))


def entry_labels(
    keys: list[str],
    groups: list[tuple[tuple, pd.DataFrame]],
    shown: list[int],
    words: Words | None = None,
) -> dict[tuple, str]:
    """Each group's legend entry (a line's, a bar's): its configuration as `config_labels`
    names it among the groups' configurations ("window window=0.2n", the variant alone where
    it has one), then the other parts at ``shown`` positions (`entry_label`): the one
    labelling of configurations, rounded, in every legend."""
    if not groups:
        return {}
    rows = pd.concat([group for _, group in groups])
    configs = config_labels(_configurations(rows), size_params_of(rows))
    others = [i for i in shown if i and not keys[i].startswith("variant.")]
    labels = {}
    for key, group in groups:
        first = group.iloc[0]
        config = configs.get((first["variant"], first["variant_params"]), str(key[0]))
        rest = entry_label(keys, key, others, words) if others else ""
        labels[key] = " · ".join(part for part in (config, rest) if part)
    return labels


def _configurations(rows: pd.DataFrame) -> pd.DataFrame:
    """The distinct configurations of ``rows``: variant, parameters (and the names of its
    pattern sizes, where the table has them)."""
    columns = [c for c in ("variant", "variant_params", SIZE_PARAMS) if c in rows.columns]
    return rows[columns].drop_duplicates()


def config_styles(entries: list[tuple]) -> dict[tuple, int]:
    """entry → the index of its style (dash, marker symbol) among its variant's entries (the
    first element of each entry is the variant): one variant's configurations differ by style,
    not colour."""
    styles: dict[tuple, int] = {}
    for _, group in itertools.groupby(sorted(entries, key=repr), key=lambda e: str(e[0])):
        for i, entry in enumerate(group):
            styles[entry] = i
    return styles


def clip_to(values: list[float], log: bool, margin: float = 0.08) -> list[float]:
    """An axis range (log10 units on a log axis) holding ``values`` with a margin each side."""
    values = [math.log10(v) if log else v for v in values if not log or v > 0]
    low, high = min(values), max(values)
    span = (high - low) or (abs(high) * 0.2 if high else 1.0)
    return [low - margin * span, high + margin * span]


def _beyond(values: list[float], inside: list[float], log: bool) -> bool:
    """Whether ``values`` reach well beyond the range of ``inside`` (a quarter of its span)."""
    if not values or not inside:
        return False
    low, high = clip_to(inside, log, margin=0.25)
    values = [math.log10(v) if log else v for v in values if not log or v > 0]
    return any(v < low or v > high for v in values)


def _off_axis(references: dict[str, pd.Series], inside: list[float], log: bool) -> list[str]:
    """ "least squares (up to 6.3)" for each reference line that reaches well beyond the range
    of ``inside`` (`_beyond`), naming how far."""
    low, high = (min(inside), max(inside)) if inside else (0.0, 0.0)
    off = []
    for name, ys in references.items():
        if not _beyond(list(ys), inside, log):
            continue
        reach = [f"up to {max(ys):.3g}"] if max(ys) > high else []
        reach += [f"down to {min(ys):.3g}"] if min(ys) < low else []
        off.append(f"{name} ({', '.join(reach)})")
    return off


@dataclass
class CurveExtras:
    """What a curve chart can show beside its lines.

    Attributes:
        notes: variant → text appended to its legend entries (e.g. the fitted exponent).
        failures: Unfinished runs to mark, with columns variant, status, x (their curve position).
        band: (low metric, high metric) drawn as a shaded band around each line (e.g. bootstrap).
        references: Metrics drawn once each as dashed lines, averaged over all runs (baselines,
            closed-form theory curves). Where they reach far beyond the variants' values, the
            y axis is clipped to the variants' range and the subtitle says so.
        companions: Metrics drawn once per line, from that line's own runs, dashed in the line's
            colour (a value that depends on the variant, e.g. its own closed form); a line whose
            runs do not report the metric at some x has no companion point there.
        steady_flag: The 0/1 metric saying whether the timing behind a value was steady
            (`TaskInfo.steadiness`): a point any of whose runs has it at 0 is drawn hollow,
            and its hover says so. Empty: nothing is judged.
        accuracy_flag: The 0/1 metric saying whether the timed kernel computed within its
            declared error (`TaskInfo.accuracy`): drawn hollow too, with its own hover line.
        x_title, y_title: The axes' titles, as a reader names them (`Words.axis`);
            "": the axis's name, and the metric with its unit.
        words: How the task names its metrics and parameters (`Words`): legends, the
            subtitle and the hover name them so.
    """

    notes: dict[str, str] = field(default_factory=dict)
    failures: pd.DataFrame | None = None
    band: tuple[str, str] | None = None
    references: dict[str, str] = field(default_factory=dict)  # metric → legend label
    companions: dict[str, str] = field(default_factory=dict)  # metric → label (hover, title)
    steady_flag: str = ""
    accuracy_flag: str = ""
    converge_flag: str = ""
    x_title: str = ""
    y_title: str = ""
    words: Words = field(default_factory=Words)


def curve_figure(
    ok: pd.DataFrame,
    metric: str,
    title: str,
    unit: str = "",
    extras: CurveExtras | None = None,
    colours: dict[str, str] | None = None,
    subtitle: str = "",
) -> go.Figure | None:
    """``metric`` against its curve axis, one line per variant and setting (log axes where the
    values span decades, see `axis_type`), with the `CurveExtras` given.

    A line is coloured by its variant (``colours``, see `variant_colours`); a variant's
    configurations differ by dash and marker. Legend entries name only what differs between
    the lines; what is the same for all (machine, dtype, a parameter) goes into the subtitle,
    after ``subtitle``.

    Only points along the first curve axis found are drawn (a metric may be reported along
    several, e.g. concentration by scale and by layer: call once per axis). Returns None when the
    task has no curve points for ``metric``.
    """
    extras = extras or CurveExtras()
    rows = ok[(ok["metric"] == metric) & ok["x_value"].notna()]
    if rows.empty:
        return None
    colours = colours or variant_colours(rows["variant"])
    lines = _curve_lines(rows, extras.words)
    fig = go.Figure()
    drawn = _Drawn()
    # what the lines' bands, companions, flags and references read: five columns, not the
    # table's forty (each line selects its runs' rows from these)
    points = ok[["run_id", "metric", "x_name", "x_value", "value"]]
    for line in lines.groups:
        _draw_line(fig, points, lines, line, extras, colours, drawn)
    references = _add_references(fig, points, lines.x_name, extras.references)
    _add_failures(fig, extras.failures, lines.rows)
    notes = _curve_notes(lines.constant, drawn)
    y_title = extras.y_title or (f"{metric} ({unit})" if unit else metric)
    yaxis = _curve_yaxis(lines.rows["value"], y_title, (references, drawn.ys), notes)
    xaxis = _curve_xaxis(lines.rows, extras.x_title or lines.x_name, extras.failures)
    fig.update_layout(xaxis=xaxis, yaxis=yaxis)
    finish_layout(fig, title, _subtitle(subtitle, notes))
    return fig


# layout keys that belong to one view of a merged chart (`merged_figure`), and their value
# where a view has none (so that switching clears the previous view's)
_VIEW_KEYS = {"title": None, "xaxis": {}, "yaxis": {}, "annotations": [], "shapes": []}


def merged_figure(views: list[tuple[str, go.Figure]]) -> go.Figure:
    """Figures of one axis and setting, one per metric, as one chart with a menu choosing the
    metric shown (the first at first): a task's near-duplicate charts (time and time ratio
    against length, the error on each input distribution) become one, so the page is shorter
    and a reader compares the views in place. Each view keeps its traces, title, axes and
    notes; the chart takes the tallest view's height (legends differ in rows)."""
    if len(views) == 1:
        return views[0][1]
    fig = go.Figure()
    spans = []
    for _, view in views:
        start = len(fig.data)
        fig.add_traces(list(view.data))
        spans.append((start, len(fig.data)))
    visible = [trace.visible if trace.visible is not None else True for trace in fig.data]
    height = max(int(view.layout.height or CHART_HEIGHT) for _, view in views)
    buttons = []
    for (label, view), (start, end) in zip(views, spans, strict=True):
        shown = [v if start <= j < end else False for j, v in enumerate(visible)]
        layout = view.layout.to_plotly_json()
        relayout = {key: layout.get(key, empty) for key, empty in _VIEW_KEYS.items()}
        buttons.append({"label": label, "method": "update", "args": [{"visible": shown}, relayout]})
    fig.update_layout(views[0][1].layout)
    fig.update_layout(
        height=height,
        updatemenus=[
            {
                "type": "dropdown",
                "buttons": buttons,
                "active": 0,
                "showactive": True,
                "x": 1,
                "xanchor": "right",
                "y": 1,
                "yanchor": "bottom",
                "pad": {"b": 4},
                "font": {"size": 12},
            }
        ],
    )
    for j, shown in enumerate(buttons[0]["args"][0]["visible"]):
        fig.data[j].visible = shown
    return fig


@dataclass
class _CurveLines:
    """The lines of a curve chart.

    Attributes:
        rows: The metric's points on the chart's axis, their key columns made safe.
        x_name: The axis.
        keys: The columns that tell lines apart.
        along: Parameters that move along the axis (`along_axis`): named in the hover instead.
        groups: (key, rows) of each line, sorted by key.
        labels: line key → its legend entry (`entry_labels`).
        constant: The keys that are the same on every line, as text for the subtitle.
        styles: line key → its style among its variant's lines (`config_styles`).
    """

    rows: pd.DataFrame
    x_name: str
    keys: list[str]
    along: list[str]
    groups: list[tuple[tuple, pd.DataFrame]]
    labels: dict[tuple, str]
    constant: str
    styles: dict[tuple, int]


def _curve_lines(rows: pd.DataFrame, words: Words | None = None) -> _CurveLines:
    """``rows`` (one metric's curve points) on their first curve axis, split into lines: one per
    variant, varying variant and task parameters, machine and dtype, but not per value of a
    parameter that moves along the axis."""
    x_name = rows["x_name"].dropna().iloc[0]
    rows = rows[rows["x_name"] == x_name]
    params = expand_params(rows, "task_params", "task")
    others = [c for c in varying(params) if c != f"task.{x_name}"]
    vparams = expand_params(rows, "variant_params", "variant")
    vothers = varying(vparams, within=rows["variant"])
    keys = ["variant", *vothers, "machine", "dtype", *others]
    rows = key_columns(pd.concat([rows, params[others], vparams[vothers]], axis=1), keys)
    along = along_axis(rows, others, keys)
    keys = [k for k in keys if k not in along]
    groups = [
        (key if isinstance(key, tuple) else (key,), group)
        for key, group in rows.groupby(keys, sort=True)
    ]
    shown, constant = split_keys(keys, [key for key, _ in groups], words)
    labels = entry_labels(keys, groups, shown, words)
    styles = config_styles([key for key, _ in groups])
    return _CurveLines(rows, x_name, keys, along, groups, labels, constant, styles)


@dataclass
class _Drawn:
    """What the lines of a curve chart drew, for its y axis and subtitle."""

    ys: list[float] = field(default_factory=list)  # the lines' values: what the y range must hold
    companions: list[str] = field(default_factory=list)  # companion labels drawn on some line
    hollow: bool = False  # whether a point is drawn hollow (an untrusted timing)


def _draw_line(
    fig: go.Figure,
    everything: pd.DataFrame,
    lines: _CurveLines,
    line: tuple[tuple, pd.DataFrame],
    extras: CurveExtras,
    colours: dict[str, str],
    drawn: _Drawn,
) -> None:
    """Draw one of ``lines`` (its key and rows) with its band and companions; ``drawn`` notes
    what the axes and subtitle must say of it."""
    key, group = line
    mean = group.groupby("x_value")["value"].mean().sort_index()
    drawn.ys += mean.tolist()
    label = lines.labels[key] + extras.notes.get(str(key[0]), "")
    colour = _colour(colours, str(key[0]))
    unsteady = _unsteady_xs(everything, group, (extras.steady_flag, lines.x_name))
    inaccurate = _unsteady_xs(everything, group, (extras.accuracy_flag, lines.x_name))
    learning = _unsteady_xs(everything, group, (extras.converge_flag, lines.x_name))
    flagged = (unsteady, inaccurate, learning)
    texts = _point_texts(group, lines.along, list(mean.index), flagged, extras.words)
    hollow = unsteady | inaccurate | learning
    trace = _line_trace(mean, label, colour, lines.styles[key], hollow, texts)
    drawn.hollow = drawn.hollow or bool(hollow)
    fig.add_trace(trace)
    if extras.band is not None:
        _add_band(fig, everything, group, extras.band, (label, colour), extras.words)
    for companion, companion_label in extras.companions.items():
        pair = (companion, lines.x_name)
        ys = _add_companion(fig, everything, group, pair, label, companion_label, colour)
        if ys:
            drawn.ys += ys
            drawn.companions += [] if companion_label in drawn.companions else [companion_label]


def _line_trace(
    mean: pd.Series, label: str, colour: str, style: int, untrusted: set, texts: list[str]
) -> go.Scatter:
    """One line: ``mean`` (value by x) in its variant's ``colour``, with the dash and marker of
    its ``style``; the markers at ``untrusted`` x values hollow and larger."""
    symbol = MARKER_SYMBOLS[style % len(MARKER_SYMBOLS)]
    return go.Scatter(
        x=mean.index.tolist(),
        y=mean.tolist(),
        mode="lines+markers",
        name=label,
        legendgroup=label,  # its band and companions show and hide with it
        line={"color": colour, "dash": CONFIG_DASHES[style % len(CONFIG_DASHES)]},
        marker={
            "color": colour,
            "symbol": [f"{symbol}-open" if x in untrusted else symbol for x in mean.index],
            "size": [9 if x in untrusted else 7 for x in mean.index],
        },
        text=texts,
    )


def _point_texts(
    line: pd.DataFrame,
    along: list[str],
    xs: list[float],
    flagged: tuple[set, set, set],
    words: Words | None = None,
) -> list[str]:
    """Each point's hover text: the `along_axis` parameters there (as the task names them),
    and whether its timing is unsteady or its kernel inaccurate (``flagged``: the x values of
    each), so not ranked."""
    unsteady, inaccurate, learning = flagged
    along_at = _along_texts(line, along, words or Words())
    notes: dict = {}
    if "annotation" in line:  # what the task declares beside the value (TaskInfo.annotations)
        noted = line[line["annotation"].fillna("").astype(str) != ""]
        notes = noted.groupby("x_value")["annotation"].agg(lambda s: sorted(set(s))).to_dict()
    return [
        "\n".join(
            [
                *along_at.get(x, []),
                *notes.get(x, []),
                *(["unsteady timing: not ranked"] * (x in unsteady)),
                *(["kernel error above its tolerance: not ranked"] * (x in inaccurate)),
                *(["still learning at the cap: not ranked"] * (x in learning)),
            ]
        )
        for x in xs
    ]


def _add_references(
    fig: go.Figure, everything: pd.DataFrame, x_name: str, references: dict[str, str]
) -> dict[str, pd.Series]:
    """Draw each reference metric (metric → label) once, dashed grey: its mean over all runs
    along ``x_name``; returns label → those values."""
    reference_ys: dict[str, pd.Series] = {}
    for dash, (ref_metric, ref_label) in zip(
        itertools.cycle(REFERENCE_DASHES), references.items(), strict=False
    ):
        ref = everything[(everything["metric"] == ref_metric) & (everything["x_name"] == x_name)]
        if not ref.empty:
            mean = ref.groupby("x_value")["value"].mean().sort_index()
            reference_ys[ref_label] = mean
            fig.add_trace(
                go.Scatter(
                    x=mean.index.tolist(),
                    y=mean.tolist(),
                    mode="lines+markers",
                    name=ref_label,
                    line={"dash": dash, "color": REFERENCE_COLOUR},
                    marker={"size": 4, "color": REFERENCE_COLOUR},
                )
            )
    return reference_ys


def _add_failures(fig: go.Figure, failures: pd.DataFrame | None, rows: pd.DataFrame) -> None:
    """Mark the unfinished runs ``failures`` at their curve position, at the height of the
    highest value of ``rows``."""
    if failures is None or failures.empty or not len(rows):
        return
    top = float(rows["value"].max())
    fig.add_trace(
        go.Scatter(
            x=failures["x"].tolist(),
            y=[top] * len(failures),
            mode="markers",
            marker={"symbol": "x", "size": 11, "color": "#c62828"},
            name="oom / timeout / failed (at the top)",
            text=[
                f"{v}: {st}" for v, st in zip(failures["variant"], failures["status"], strict=True)
            ],
            hoverinfo="text+x",
        )
    )


def _curve_notes(constant: str, drawn: _Drawn) -> list[str]:
    """The subtitle's notes: what is constant, what the dashed companions are, and what a hollow
    marker means (each only where the chart has it)."""
    notes = [constant] if constant else []
    if drawn.companions:
        notes.append("dashed, in a line's colour: " + ", ".join(drawn.companions))
    if drawn.hollow:
        notes.append("hollow: unsteady timing, inaccurate kernel or still learning (not ranked)")
    return notes


def _curve_yaxis(
    values: pd.Series,
    title: str,
    references_lines: tuple[dict[str, pd.Series], list[float]],
    notes: list[str],
) -> dict:
    """The y axis of ``values`` (log where they span decades), fitted to the lines' values where a
    reference line reaches far beyond them, with a line of ``notes`` naming how far."""
    references, ys = references_lines
    y_type = axis_type(values)
    log = y_type == "log"
    yaxis = {"title": title, "type": y_type, **(log_ticks(values) if log else {})}
    off = _off_axis(references, ys, log)
    if off:
        yaxis["range"] = clip_to(ys, log)
        notes.append("y axis fitted to the variants' lines; beyond it: " + ", ".join(off))
    return yaxis


def _curve_xaxis(rows: pd.DataFrame, title: str, failures: pd.DataFrame | None) -> dict:
    """The x axis: log where the points span decades, integer ticks where every position (the
    failures' too) is an integer."""
    xs = rows["x_value"]
    if failures is not None and not failures.empty:
        xs = pd.concat([xs, failures["x"].astype(float)])
    x_type = axis_type(rows["x_value"])
    return {"title": title, "type": x_type, **axis_ticks(xs, log=x_type == "log")}


def _subtitle(subtitle: str, notes: list[str]) -> str:
    """``subtitle`` and the first of ``notes`` on one line, each further note on its own."""
    subtitle = " · ".join(p for p in [subtitle, *notes[:1]] if p)
    return "\n".join([subtitle, *notes[1:]]) if subtitle else "\n".join(notes[1:])


def along_axis(rows: pd.DataFrame, candidates: list[str], line_keys: list[str]) -> list[str]:
    """The parameters among ``candidates`` that move along the curve axis rather than split
    lines: within every line they would otherwise split (rows grouped by ``line_keys`` without
    them), each of their values has one x value and each x value one of theirs, and some such
    line has two or more of them. E.g. recall's model width along an axis of state size: a
    variant's state is a function of its width, so its widths make one line (Zoology's figure),
    not one point per width. Such a parameter is named in each point's hover instead."""
    found = []
    for c in candidates:
        keys = [k for k in line_keys if k != c]
        spans = False
        for _, line in rows.groupby(keys, sort=False) if keys else [(None, rows)]:
            pairs = set(zip(line[c].map(repr), line["x_value"], strict=True))
            values = {v for v, _ in pairs}
            if len(values) != len(pairs) or len({x for _, x in pairs}) != len(pairs):
                break  # a value with two x positions, or an x with two values: not a function
            spans = spans or len(values) > 1
        else:
            if spans:
                found.append(c)
    return found


def axis_parameters(rows: pd.DataFrame, x_name: str) -> list[str]:
    """The task parameters (plain names) that move along the ``x_name`` axis in ``rows`` (one
    metric's points on that axis, with their ``machine``): `along_axis` over the lines
    `curve_figure` would draw. The page keeps such a parameter within one chart, not one chart
    per value."""
    params = expand_params(rows, "task_params", "task")
    others = [c for c in varying(params) if c != f"task.{x_name}"]
    if not others:
        return []
    keys = ["variant", "variant_params", "machine", "dtype", *others]
    framed = key_columns(pd.concat([rows, params[others]], axis=1), keys)
    return [c.removeprefix("task.") for c in along_axis(framed, others, keys)]


def _along_texts(line: pd.DataFrame, along: list[str], words: Words) -> dict[float, list[str]]:
    """x → "model width 32"-style lines naming the `along_axis` parameters at curve position x
    (`Words.setting`)."""
    if not along:
        return {}
    first = line.drop_duplicates("x_value")
    return {
        x: [_part(c, row[c], words) for c in along]
        for x, row in zip(first["x_value"], first[along].to_dict("records"), strict=True)
    }


def _unsteady_xs(everything: pd.DataFrame, line: pd.DataFrame, flag_axis: tuple[str, str]) -> set:
    """The curve positions at which a run behind ``line`` flagged its timing unsteady (its
    ``flag`` metric is 0 there); empty without a flag."""
    flag, x_name = flag_axis
    if not flag:
        return set()
    runs = everything[everything["run_id"].isin(set(line["run_id"]))]
    flags = runs[(runs["metric"] == flag) & (runs["x_name"] == x_name)]
    out = set(flags.loc[flags["value"] == 0, "x_value"])
    # a flag recorded without a curve position (a run's convergence) judges all its positions
    no_x = runs["x_name"].fillna("").astype(str) == ""
    whole = runs[(runs["metric"] == flag) & no_x & (runs["value"] == 0)]
    return out | set(line.loc[line["run_id"].isin(set(whole["run_id"])), "x_value"])


def _add_companion(
    fig: go.Figure,
    everything: pd.DataFrame,
    line: pd.DataFrame,
    metric_axis: tuple[str, str],
    label: str,
    companion_label: str,
    colour: str,
) -> list[float]:
    """Draw ``metric`` of the runs behind one line along the same axis, dashed in its colour;
    its values, empty where those runs do not report it."""
    metric, x_name = metric_axis
    runs = everything[everything["run_id"].isin(set(line["run_id"]))]
    runs = runs[(runs["metric"] == metric) & (runs["x_name"] == x_name)]
    if runs.empty:
        return []
    mean = runs.groupby("x_value")["value"].mean().sort_index()
    fig.add_trace(
        go.Scatter(
            x=mean.index.tolist(),
            y=mean.tolist(),
            mode="lines+markers",
            name=f"{label} · {companion_label}",
            legendgroup=label,
            showlegend=False,  # the subtitle says what the dashed lines are
            line={"dash": "dash", "color": colour, "width": 1.5},
            marker={"size": 4, "color": colour, "symbol": "circle-open"},
        )
    )
    return mean.tolist()


def _add_band(
    fig: go.Figure,
    everything: pd.DataFrame,
    line: pd.DataFrame,
    band: tuple[str, str],
    label_colour: tuple[str, str],
    words: Words,
) -> None:
    """Shade between the band metrics of the runs behind one line, in its colour (named, for
    Plotly's data, by the band's ends in words)."""
    label, colour = label_colour
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
            line={"width": 0, "color": colour},
            fillcolor=colour,
            opacity=0.12,
            name=f"{label} (from {words.metric(band[0])} to {words.metric(band[1])})",
            legendgroup=label,
            showlegend=False,
            hoverinfo="skip",
        )
    )


def _same_point(points: pd.DataFrame) -> pd.Series:
    """Each row's position as text, three significant figures (what the hover shows): rows
    sharing it are drawn on top of each other."""
    return points["x"].map(lambda v: f"{v:.3g}") + "," + points["y"].map(lambda v: f"{v:.3g}")


def scatter_figure(
    points: pd.DataFrame,
    x_title: str,
    y_title: str,
    title: str,
    colours: dict[str, str] | None = None,
    x_range: tuple[float, float] | None = None,
    subtitle: str = "",
) -> go.Figure:
    """One trace per row of ``points`` (columns label, x, y; optional variant, note): a marker
    named in the legend and no text on the plot, so labels can never overlap however close the
    points are (several variants often share one point: same quality, same cost). The hover
    names every entry drawn at the same point; clicking a legend entry hides that entry. A
    marker has its variant's colour (column ``variant``, else the label); entries of one
    variant differ by symbol. A row with a non-empty ``note`` (e.g. "from unsteady timings
    only") is drawn hollow, its note in the hover.

    Args:
        colours: variant → colour (`variant_colours`; default: from these points).
        x_range: Fixed x range (e.g. density, 0 to 1); default: Plotly's autorange.
        subtitle: What is constant across the chart (machine, dtype).
    """
    points = points.copy()
    points["variant"] = points["variant"] if "variant" in points else points["label"]
    points["variant"] = points["variant"].map(str)
    colours = colours or variant_colours(points["variant"])
    where = _same_point(points)
    entries = [(v, str(label)) for v, label in zip(points["variant"], points["label"], strict=True)]
    styles = config_styles(entries)
    fig = go.Figure()
    for i, row in points.sort_values("label").iterrows():
        label = str(row["label"])
        colour = _colour(colours, row["variant"])
        symbol = MARKER_SYMBOLS[styles[(row["variant"], label)] % len(MARKER_SYMBOLS)]
        others = sorted(str(o) for o in points.loc[where == where[i], "label"] if o != label)
        hover = f"{label}\n{x_title}: {row['x']:.3g}\n{y_title}: {row['y']:.3g}"
        if others:
            hover += "\nsame point: " + ", ".join(others)
        note = str(row.get("note", "") or "")
        if note:  # e.g. a value from unsteady timings: drawn hollow
            hover += "\n" + note
            symbol = f"{symbol}-open"
        fig.add_trace(
            go.Scatter(
                x=[row["x"]],
                y=[row["y"]],
                mode="markers",
                name=label,
                marker={"color": colour, "symbol": symbol, "size": 11, "opacity": 0.85},
                hovertext=[hover],
                hoverinfo="text",
            )
        )
    x_type, y_type = axis_type(points["x"]), axis_type(points["y"])
    xaxis = {
        "title": x_title,
        "type": x_type,
        **(log_ticks(points["x"]) if x_type == "log" else {}),
    }
    if x_range is not None:
        xaxis["range"] = list(x_range)
    yaxis = {
        "title": y_title,
        **({"type": "log", **log_ticks(points["y"])} if y_type == "log" else {}),
    }
    fig.update_layout(xaxis=xaxis, yaxis=yaxis, showlegend=True)
    finish_layout(fig, title, subtitle)
    return fig


def bar_figure(
    ok: pd.DataFrame,
    metric: str,
    title: str,
    unit: str = "",
    references: dict[str, str] | None = None,
    colours: dict[str, str] | None = None,
    subtitle: str = "",
    y_title: str = "",
    words: Words | None = None,
) -> go.Figure | None:
    """``metric``'s single values (points without a curve coordinate) as one bar per variant (and
    its varying parameters, machine, dtype): the mean over the runs behind it, in the variant's
    colour, with each run as a marker on the bar; each reference metric is a dashed horizontal
    level across all bars (its mean over the runs of ``ok``), so every variant is compared with
    the reference directly. A level far above the bars does not squash them: the axis then
    ends above the bars and the subtitle gives the level's value.

    Call it with one task setting at a time (references are averaged over ``ok``). The value axis
    is logarithmic where bars and levels span decades (`axis_type`). Bars are named by what
    differs between them; what is the same for all goes into the subtitle after ``subtitle``.
    Returns None when ``ok`` has no such values of ``metric``. ``y_title``: the value axis's
    title as a reader names it ("": the metric with its unit); ``words``: how the task names
    its metrics and parameters (`Words`).
    """
    scalar = ok[ok["x_value"].isna()]
    rows = scalar[scalar["metric"] == metric]
    if rows.empty:
        return None
    words = words or Words()
    bars, constant = _bars(rows, colours or variant_colours(rows["variant"]), words)
    fig = go.Figure(
        go.Bar(
            x=bars.labels,
            y=bars.means,
            name=f"{words.metric(metric)} (mean over runs)",
            marker={"color": bars.colours},
            opacity=0.85,
        )
    )
    fig.add_trace(
        go.Scatter(
            x=bars.run_x,
            y=bars.run_y,
            mode="markers",
            name="each run",
            marker={"color": "#1d2330", "size": 6},
            text=bars.run_text,
            hoverinfo="text+y",
        )
    )
    levels = _add_levels(fig, scalar, bars.labels, references or {})
    y_title = y_title or (f"{metric} ({unit})" if unit else metric)
    yaxis, constant = _bar_yaxis(y_title, bars, levels, constant)
    fig.update_layout(
        xaxis={"type": "category", "automargin": True},
        yaxis=yaxis,
    )
    finish_layout(fig, title, " · ".join(p for p in (subtitle, constant) if p), bottom=40)
    return fig


@dataclass
class _Bars:
    """The bars of a bar chart (label, mean, colour each) and the runs drawn on them."""

    labels: list[str] = field(default_factory=list)
    means: list[float] = field(default_factory=list)
    colours: list[str] = field(default_factory=list)
    run_x: list[str] = field(default_factory=list)  # the label of each run's bar
    run_y: list[float] = field(default_factory=list)
    run_text: list[str] = field(default_factory=list)


def _bars(rows: pd.DataFrame, colours: dict[str, str], words: Words) -> tuple[_Bars, str]:
    """One bar per variant, varying variant parameters, machine and dtype of ``rows``, named by
    what differs between the bars (`entry_labels`); and what is the same for all of them, as
    text."""
    vparams = expand_params(rows, "variant_params", "variant")
    vothers = varying(vparams, within=rows["variant"])
    keys = ["variant", *vothers, "machine", "dtype"]
    rows = key_columns(pd.concat([rows, vparams[vothers]], axis=1), keys)
    groups = [
        (key if isinstance(key, tuple) else (key,), group)
        for key, group in rows.groupby(keys, sort=True)
    ]
    shown, constant = split_keys(keys, [key for key, _ in groups], words)
    labels = entry_labels(keys, groups, shown, words)
    bars = _Bars()
    for key, group in groups:
        label = labels[key]
        bars.labels.append(label)
        bars.colours.append(_colour(colours, str(key[0])))
        bars.means.append(float(group["value"].mean()))
        bars.run_x += [label] * len(group)
        bars.run_y += group["value"].tolist()
        bars.run_text += [f"run {r}" for r in group["run_id"]]
    return bars, constant


def _add_levels(
    fig: go.Figure, scalar: pd.DataFrame, labels: list[str], references: dict[str, str]
) -> dict[str, float]:
    """Draw each reference metric (metric → label) of ``scalar`` as a dashed level across the
    bars ``labels``: its mean over the runs; returns label → level."""
    levels: dict[str, float] = {}
    for dash, (ref_metric, ref_label) in zip(
        itertools.cycle(REFERENCE_DASHES), references.items(), strict=False
    ):
        ref = scalar.loc[scalar["metric"] == ref_metric, "value"]
        if ref.empty:
            continue
        level = float(ref.mean())
        levels[ref_label] = level
        fig.add_trace(
            go.Scatter(
                x=labels if len(labels) > 1 else labels * 2,
                y=[level] * max(2, len(labels)),
                mode="lines",
                name=f"{ref_label} ({level:.3g})",
                line={"dash": dash, "width": 2, "color": REFERENCE_COLOUR},
                hoverinfo="name",
            )
        )
    return levels


def _bar_yaxis(
    title: str, bars: _Bars, levels: dict[str, float], constant: str
) -> tuple[dict, str]:
    """The value axis (log where bars and levels span decades) and ``constant``: on a linear axis
    a level far beyond the bars is left off it, the axis ending above the bars, and named in
    ``constant`` with its value."""
    y_type = axis_type(pd.Series(bars.means + list(levels.values())))
    log = y_type == "log"
    yaxis = {"title": title, "type": y_type}
    if log:
        yaxis.update(log_ticks(pd.Series(bars.means + bars.run_y + list(levels.values()))))
    values = bars.means + bars.run_y
    off = [f"{n} ({v:.3g})" for n, v in levels.items() if _beyond([v], [*values, 0.0], log)]
    if off and not log:
        yaxis["range"] = [min(0.0, *values) * 1.08, max(0.0, *values) * 1.12]
        constant = " · ".join([*(c for c in [constant] if c), "beyond the axis: " + ", ".join(off)])
    return yaxis, constant
