"""Build the leaderboard site from the results table (see the package docstring)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import jinja2
import pandas as pd
from plotly.offline import get_plotlyjs

from harness.collect import TABLE_NAME, collect
from harness.discovery import load_plugins
from harness.leaderboard.charts import curve_figure, embeddable_json
from harness.leaderboard.tables import Table, task_table, unfinished_table
from harness.records import atomic_write_text, runs_dir
from harness.task_api import TASKS

PLOTLY_JS = "plotly.min.js"
FIT_INFO = {
    "scaling_exponent": ("Slope of log(fwd_ms) vs log(seq_len): 2 dense, 1 linear", False),
    "scaling_exponent_ci_low": ("95% confidence interval of the exponent, low end", None),
    "scaling_exponent_ci_high": ("95% confidence interval of the exponent, high end", None),
    "crossover_seq_len": ("Length above which the variant beats dense softmax (fitted)", False),
}


@dataclass
class Chart:
    """A figure to draw: element id and embeddable JSON."""

    id: str
    json: str


@dataclass
class TaskSection:
    """One task's part of the page."""

    name: str
    description: str
    table: Table
    charts: list[Chart]
    n_runs: int
    fits: Table | None = None


def _metric_info(task: str) -> dict[str, tuple[str, bool | None]]:
    if task not in TASKS:
        return {}
    return {m.name: (m.description, m.higher_is_better) for m in TASKS.get(task).metrics}


def _sections(frame: pd.DataFrame) -> list[TaskSection]:
    sections = []
    ok = frame[(frame["status"] == "ok") & frame["metric"].notna()]
    for task in sorted(ok["task"].unique()):
        rows = ok[ok["task"] == task]
        cls = TASKS.get(task) if task in TASKS else None
        charts = []
        headline = getattr(cls, "headline", "") or rows["metric"].iloc[0]
        for metric in getattr(cls, "charts", ()) or (headline,):
            unit = next((m.unit for m in cls.metrics if m.name == metric), "") if cls else ""
            curve = rows[(rows["metric"] == metric) & rows["x_name"].notna()]
            for x_name in sorted(curve["x_name"].unique()):  # one chart per curve axis
                fig = curve_figure(
                    curve[curve["x_name"] == x_name], metric, f"{task}: {metric} vs {x_name}", unit
                )
                if fig is not None:
                    chart_id = f"chart-{task}-{metric}-{x_name}"
                    charts.append(Chart(id=chart_id, json=embeddable_json(fig)))
        fitted = rows["run_id"].str.startswith("fit-")
        sections.append(
            TaskSection(
                name=task,
                description=getattr(cls, "description", ""),
                table=task_table(rows[~fitted], _metric_info(task)),
                charts=charts,
                n_runs=rows.loc[~fitted, "run_id"].nunique(),
                fits=task_table(rows[fitted], FIT_INFO) if fitted.any() else None,
            )
        )
    return sections


def _provenance(frame: pd.DataFrame) -> dict[str, str]:
    def values(col: str) -> str:
        vals = sorted({str(v) for v in frame[col].dropna().unique()})
        return ", ".join(vals) if vals else "unknown"

    return {
        "generated": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machines": values("device_name"),
        "hosts": values("hostname"),
        "attnbench": values("attnbench_version"),
        "torch": values("torch_version"),
        "commits": ", ".join(sorted({str(c)[:12] for c in frame["git_commit"].dropna().unique()}))
        or "unknown",
        "dirty": "yes" if frame["git_dirty"].fillna(False).astype(bool).any() else "no",
        "runs_from": str(frame["created_at"].min()) if len(frame) else "",
        "runs_to": str(frame["created_at"].max()) if len(frame) else "",
    }


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("harness.leaderboard", "."),
        autoescape=True,  # every value from results is data, never markup
        undefined=jinja2.StrictUndefined,
    )


def build_site(
    results_dir: str | os.PathLike = "results", out_dir: str | os.PathLike | None = None
) -> Path:
    """Write the leaderboard for ``results_dir`` into ``out_dir`` (default RESULTS_DIR/leaderboard).

    Returns:
        The path of ``index.html``. With no results, the page says how to produce some.
    """
    load_plugins()
    results_dir = Path(results_dir)
    out = Path(out_dir) if out_dir is not None else results_dir / "leaderboard"
    out.mkdir(parents=True, exist_ok=True)
    table_path = results_dir / TABLE_NAME
    if not table_path.exists() and runs_dir(results_dir).is_dir():
        collect(results_dir)
    frame = pd.read_parquet(table_path) if table_path.exists() else pd.DataFrame()

    if not (out / PLOTLY_JS).exists():
        atomic_write_text(out / PLOTLY_JS, get_plotlyjs())
    if not frame.empty:
        shutil.copyfile(table_path, out / "results.parquet")
        frame.to_csv(out / "results.csv", index=False)
    html = (
        _environment()
        .get_template("index.html.j2")
        .render(
            empty=frame.empty,
            results_dir=str(results_dir),
            sections=_sections(frame) if not frame.empty else [],
            unfinished=unfinished_table(frame) if not frame.empty else None,
            provenance=_provenance(frame) if not frame.empty else None,
            n_runs=frame["run_id"].nunique() if not frame.empty else 0,
            plotly_js=PLOTLY_JS,
        )
    )
    index = out / "index.html"
    atomic_write_text(index, html)
    return index


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``attnbench-leaderboard [RESULTS_DIR] [-o OUT_DIR]``."""
    parser = argparse.ArgumentParser(
        prog="attnbench-leaderboard", description="Build the static leaderboard site."
    )
    parser.add_argument(
        "results_dir",
        nargs="?",
        default="results",
        help="folder with results.parquet / runs/ (default: results)",
    )
    parser.add_argument(
        "-o", "--out", default=None, help="output folder (default: RESULTS_DIR/leaderboard)"
    )
    args = parser.parse_args(argv)
    index = build_site(args.results_dir, args.out)
    if not (Path(args.results_dir) / TABLE_NAME).exists():
        print(
            f"attnbench-leaderboard: no results yet in {args.results_dir}; run "
            "`attnbench -m sweep=quick` first. Wrote an empty page:",
            file=sys.stderr,
        )
    print(index.resolve())
    return 0
