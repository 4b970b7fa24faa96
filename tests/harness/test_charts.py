"""The leaderboard's charts: one escaping point for every text Plotly draws, one colour per
variant, legends that name only what differs, axes that references do not squash."""

from __future__ import annotations

import itertools
import json
import math

import pandas as pd
import plotly.graph_objects as go

from attnbench.harness.leaderboard.charts import (
    PALETTE,
    CurveExtras,
    bar_figure,
    curve_figure,
    embeddable_json,
    merged_figure,
    scatter_figure,
    variant_colours,
)
from attnbench.harness.results.collect import COLUMNS

LINK = '<a href="https://evil.example/q">x</a>'
IMG = "<img src=x onerror=alert(1)>"
AMP = "R&D"


def _hostile_figure() -> go.Figure:
    """A figure with a hostile string in every place Plotly draws text."""
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=[LINK, IMG],
            y=[IMG, LINK],
            name=LINK,
            legendgroup=IMG,
            text=[LINK, IMG],
            hovertext=[IMG, LINK],
            legendgrouptitle={"text": LINK},
        )
    )
    fig.add_trace(go.Bar(x=[LINK], y=[1.0], name=IMG, text=[AMP]))
    fig.update_layout(
        title={"text": LINK + "\nsecond line", "subtitle": {"text": IMG}},
        xaxis={"title": {"text": IMG}, "tickvals": [0, 1], "ticktext": [LINK, IMG]},
        yaxis={"title": {"text": LINK}},
        legend={"title": {"text": IMG}},
        annotations=[{"text": LINK, "x": 0, "y": 0}, {"text": IMG, "x": 1, "y": 1}],
    )
    return fig


def _strings(node: object) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for v in node.values() for s in _strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in _strings(v)]
    return []


def test_every_text_of_a_figure_is_escaped_in_one_place():
    text = embeddable_json(_hostile_figure())
    # nothing in the embedded text can end its script element or open a tag
    assert "<" not in text and ">" not in text and "&" not in text.replace("\\u0026", "")
    strings = _strings(json.loads(text))
    # the only markup Plotly gets is the line break the chart code asked for
    assert [s for s in strings if "<" in s.replace("<br>", "")] == []
    assert '&lt;a href="https://evil.example/q"&gt;x&lt;/a&gt;<br>second line' in strings
    assert "&lt;img src=x onerror=alert(1)&gt;" in strings
    assert "R&amp;D" in strings  # an ampersand is shown as written, never as an entity
    # every text place kept its text, escaped
    layout = json.loads(text)["layout"]
    assert layout["xaxis"]["ticktext"] == [
        '&lt;a href="https://evil.example/q"&gt;x&lt;/a&gt;',
        "&lt;img src=x onerror=alert(1)&gt;",
    ]
    assert layout["annotations"][1]["text"] == "&lt;img src=x onerror=alert(1)&gt;"
    assert layout["legend"]["title"]["text"] == "&lt;img src=x onerror=alert(1)&gt;"


def _rows(lines: dict[tuple[str, str], list[float]], xs=(1.0, 2.0, 4.0), machine="cpu0"):
    """Tidy rows: (variant, params JSON) → its values at ``xs``."""
    rows = []
    for (variant, params), values in lines.items():
        for x, value in zip(xs, values, strict=True):
            rows.append(
                {
                    **dict.fromkeys(COLUMNS),
                    "run_id": f"{variant}{params}",
                    "variant": variant,
                    "variant_params": params,
                    "task_params": "{}",
                    "device": "cpu",
                    "dtype": "float32",
                    "metric": "mse",
                    "value": value,
                    "x_name": "n",
                    "x_value": x,
                }
            )
    return pd.DataFrame(rows, columns=COLUMNS).assign(machine=machine)


def test_a_variant_has_one_colour_and_its_configurations_differ_by_dash():
    frame = _rows(
        {
            ("window", '{"window": 16}'): [1.0, 2.0, 3.0],
            ("window", '{"window": 32}'): [1.5, 2.5, 3.5],
            ("softmax", "{}"): [1.2, 2.2, 3.2],
        }
    )
    colours = variant_colours(["softmax", "window", "decay"])
    fig = curve_figure(frame, "mse", "t: mse", colours=colours, subtitle="mode=a")
    by_name = {t.name: t for t in fig.data}
    # the legend names what differs, a configuration as the overview labels it; machine and
    # dtype are said once, in the subtitle
    assert set(by_name) == {"softmax", "window window=16", "window window=32"}
    assert fig.layout.title.subtitle.text == "mode=a · cpu0 · float32"
    windows = [by_name["window window=16"], by_name["window window=32"]]
    assert {t.line.color for t in windows} == {colours["window"]}
    assert len({t.line.dash for t in windows}) == 2
    assert by_name["softmax"].line.color == colours["softmax"]


def test_colours_are_distinct_and_the_same_on_every_chart():
    names = [f"variant_{i:02d}" for i in range(30)]
    colours = variant_colours(names + names[:3])
    assert len(colours) == 30 and len(set(colours.values())) == 30
    assert variant_colours(reversed(names)) == colours  # by sorted name, not order of arrival
    assert [colours[n] for n in names] == list(PALETTE[:30])

    def lab(colour: str) -> tuple[float, float, float]:
        def linear(c: float) -> float:
            return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

        r, g, b = (linear(int(colour[i : i + 2], 16) / 255) for i in (1, 3, 5))
        x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
        y = 0.2126 * r + 0.7152 * g + 0.0722 * b
        z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

        def f(t: float) -> float:
            return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

        return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))

    # every variant of the reference board (about 30 with the peers) gets a colour of its own,
    # told apart at a glance
    closest = min(math.dist(lab(a), lab(b)) for a, b in itertools.combinations(PALETTE, 2))
    assert len(PALETTE) >= 36 and closest >= 25
    # beyond the palette, colours are chosen as far from those before as the grid allows: none
    # repeats, none is a near twin (the golden-angle hues once gave strided linear's cyan)
    many = list(variant_colours(f"v{i:02d}" for i in range(len(PALETTE) + 20)).values())
    assert len(set(many)) == len(many)
    assert min(math.dist(lab(a), lab(b)) for a, b in itertools.combinations(many, 2)) >= 20


def test_a_reference_far_off_the_variants_does_not_squash_them():
    frame = _rows({("softmax", "{}"): [0.9, 0.8, 0.7], ("linear", "{}"): [0.95, 0.9, 0.85]})
    spike = frame[frame["variant"] == "softmax"].assign(metric="mse_ls", variant="ls")
    spike["value"] = [6.3, 0.5, 0.01]
    frame = pd.concat([frame, spike])
    extras = CurveExtras(references={"mse_ls": "least squares"})
    fig = curve_figure(frame, "mse", "t: mse", extras=extras)
    low, high = fig.layout.yaxis.range
    assert 0.6 < low < 0.7 and 0.95 < high < 1.1  # the variants' lines, with a margin
    assert "least squares (up to 6.3, down to 0.01)" in fig.layout.title.subtitle.text
    near = CurveExtras(references={"mse_ls": "least squares"})
    spike["value"] = [0.9, 0.85, 0.8]
    fig = curve_figure(pd.concat([frame[frame["metric"] == "mse"], spike]), "mse", "t", extras=near)
    assert fig.layout.yaxis.range is None  # nothing to clip


def test_a_long_legend_goes_below_the_plot_and_the_chart_grows():
    many = {(f"v{i:02d}", "{}"): [1.0 + i, 2.0 + i, 3.0 + i] for i in range(20)}
    fig = curve_figure(_rows(many), "mse", "t: mse")
    assert fig.layout.legend.orientation == "h" and fig.layout.legend.yref == "container"
    assert fig.layout.height > 460 and fig.layout.margin.b > 100
    short = curve_figure(_rows(dict(list(many.items())[:3])), "mse", "t: mse")
    assert short.layout.legend.orientation is None and short.layout.height <= 480


def test_titles_wrap_clear_of_the_toolbar():
    frame = _rows({("softmax", "{}"): [1.0, 2.0, 3.0]})
    title = "a_task_with_a_long_name: its_metric against its_axis " * 3
    fig = curve_figure(frame, "mse", title.strip())
    lines = fig.layout.title.text.split("\n")
    assert len(lines) >= 2 and max(len(line) for line in lines) <= 90
    assert fig.layout.margin.t >= 30 + 20 * len(lines)


def test_bar_chart_keeps_a_far_reference_level_off_the_axis():
    frame = _rows({("softmax", "{}"): [0.9, 0.8, 0.7]}).assign(x_value=None, x_name=None)
    frame = frame.iloc[:1]
    level = frame.assign(metric="mse_ls", value=6.3, variant="ls")
    fig = bar_figure(pd.concat([frame, level]), "mse", "t: mse per variant", "", {"mse_ls": "ls"})
    assert fig.layout.yaxis.range[1] < 1.2
    assert "beyond the axis: ls (6.3)" in fig.layout.title.subtitle.text


def test_scatter_colours_each_variant_and_gives_its_configurations_their_own_symbol():
    points = pd.DataFrame(
        {
            "label": ["window window=16", "window window=32", "softmax"],
            "variant": ["window", "window", "softmax"],
            "x": [0.2, 0.4, 1.0],
            "y": [0.5, 0.6, 0.9],
        }
    )
    colours = variant_colours(["softmax", "window"])
    fig = scatter_figure(points, "density", "accuracy", "t", colours=colours, subtitle="cpu0")
    by_name = {t.name: t.marker for t in fig.data}
    assert by_name["window window=16"].color == by_name["window window=32"].color
    assert by_name["window window=16"].symbol != by_name["window window=32"].symbol
    assert by_name["softmax"].color == colours["softmax"] != colours["window"]


def _width_rows(points: dict[str, list[tuple[int, float, float]]], extra: str = "") -> pd.DataFrame:
    """One run per (variant, width): its accuracy at the state size that width gives."""
    rows = []
    for variant, runs in points.items():
        for width, state, accuracy in runs:
            rows.append(
                {
                    **dict.fromkeys(COLUMNS),
                    "run_id": f"{variant}{width}{extra}",
                    "variant": variant,
                    "variant_params": "{}",
                    "task_params": json.dumps({"d_model": width, "lr": 0.01}),
                    "device": "cpu",
                    "dtype": "float32",
                    "metric": "accuracy_by_state_bytes",
                    "value": accuracy,
                    "x_name": "state_bytes",
                    "x_value": float(state),
                }
            )
    return pd.DataFrame(rows, columns=COLUMNS).assign(machine="cpu0")


def test_a_parameter_that_sets_the_axis_runs_along_one_line_per_variant():
    """Zoology's figure: a variant's widths give its state sizes, so they are one line (the width
    named in each point's hover), not one single-point line per width."""
    frame = _width_rows(
        {
            "softmax": [(16, 16384, 0.02), (32, 32768, 0.99), (64, 65536, 1.0)],
            "linear": [(16, 1088, 0.01), (32, 4224, 0.05), (64, 16640, 0.8)],
        }
    )
    fig = curve_figure(frame, "accuracy_by_state_bytes", "recall")
    assert sorted(t.name for t in fig.data) == ["linear", "softmax"]
    softmax = next(t for t in fig.data if t.name == "softmax")
    assert list(softmax.x) == [16384, 32768, 65536] and list(softmax.y) == [0.02, 0.99, 1.0]
    # the width in words (no task declares it here: its name spelled out)
    assert list(softmax.text) == ["d model 16", "d model 32", "d model 64"]
    assert fig.layout.xaxis.type == "log"  # 1 KB to 64 KB


def test_a_parameter_with_several_positions_per_value_still_splits_lines():
    """Two widths that each reach two state sizes (another length, say) are not a function of
    the axis: each width keeps its own line."""
    frame = pd.concat(
        [
            _width_rows({"softmax": [(16, 100, 0.1), (32, 200, 0.2)]}),
            _width_rows({"softmax": [(16, 300, 0.3), (32, 400, 0.4)]}, extra="b"),
        ]
    )
    fig = curve_figure(frame, "accuracy_by_state_bytes", "recall")
    assert sorted(t.name for t in fig.data) == ["softmax · d model 16", "softmax · d model 32"]


def test_a_merged_chart_shows_one_view_at_a_time_and_escapes_its_menu():
    """`merged_figure`: each view's traces, title and axes behind one button of a menu; the
    first shown at first; the labels escaped like every text of a figure; one view: unchanged."""
    views = []
    for name, log in (("time <b>x</b>", True), ("ratio", False)):
        fig = go.Figure([go.Scatter(x=[1, 2], y=[1, 2], name=f"{name} a"), go.Scatter(name="b")])
        fig.update_layout(title=name, yaxis={"type": "log" if log else "linear"}, height=300)
        views.append((name, fig))
    views[1][1].update_layout(height=420, annotations=[{"text": "note"}])
    merged = merged_figure(views)
    assert merged_figure(views[:1]) is views[0][1]
    assert [t.visible for t in merged.data] == [True, True, False, False]
    (menu,) = merged.layout.updatemenus
    first, second = (b.to_plotly_json() for b in menu.buttons)
    assert first["args"][0]["visible"] == [True, True, False, False]
    assert second["args"][0]["visible"] == [False, False, True, True]
    assert (
        first["args"][1]["yaxis"]["type"] == "log"
        and second["args"][1]["yaxis"]["type"] == "linear"
    )
    assert first["args"][1]["annotations"] == []  # switching back clears the other view's notes
    assert second["args"][1]["annotations"][0]["text"] == "note"
    assert merged.layout.height == 420  # the tallest view's
    text = embeddable_json(merged)
    label = json.loads(text)["layout"]["updatemenus"][0]["buttons"][0]["label"]
    assert "<b>" not in text and label == "time &lt;b&gt;x&lt;/b&gt;"
