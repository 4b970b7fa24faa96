"""Plotly figures of the leaderboard, returned as JSON text safe to embed in a <script> element."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from harness.leaderboard.tables import expand_params, key_columns, varying


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


def curve_figure(ok: pd.DataFrame, metric: str, title: str, unit: str = "") -> go.Figure | None:
    """``metric`` against its curve axis, one line per variant and setting (log axes where the
    values span decades, see `axis_type`).

    Only points along the first curve axis found are drawn (a metric may be reported along
    several, e.g. concentration by scale and by layer: call once per axis). Returns None when the
    task has no curve points for ``metric``.
    """
    rows = ok[(ok["metric"] == metric) & ok["x_value"].notna()]
    if rows.empty:
        return None
    x_name = rows["x_name"].dropna().iloc[0]
    rows = rows[rows["x_name"] == x_name]
    params = expand_params(rows, "task_params", "task")
    others = [c for c in varying(params) if c != f"task.{x_name}"]
    vparams = expand_params(rows, "variant_params", "variant")
    vothers = varying(vparams, within=rows["variant"])
    line_keys = ["variant", *vothers, "device", "dtype", *others]
    rows = key_columns(pd.concat([rows, params[others], vparams[vothers]], axis=1), line_keys)
    fig = go.Figure()
    for key, group in rows.groupby(line_keys, sort=True):
        mean = group.groupby("x_value")["value"].mean().sort_index()
        label = " · ".join(str(k) for k in (key if isinstance(key, tuple) else (key,)))
        fig.add_trace(
            go.Scatter(x=mean.index.tolist(), y=mean.tolist(), mode="lines+markers", name=label)
        )
    fig.update_layout(
        title=title,
        xaxis={"title": x_name, "type": axis_type(rows["x_value"])},
        yaxis={"title": f"{metric} ({unit})" if unit else metric, "type": axis_type(rows["value"])},
        template="plotly_white",
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
        legend={"title": {"text": " · ".join(line_keys)}},
    )
    return fig
