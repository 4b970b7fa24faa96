"""The static leaderboard site (command line: `attnbench.harness.cli.leaderboard`).

Reads ``RESULTS_DIR/results.parquet`` (collecting the run records first if the table is missing)
and writes ``index.html`` with Plotly's JavaScript beside it (``plotly.min.js``), plus the raw
table as CSV and parquet and, in ``runs/``, the run records the page links (only valid records of
the table's runs: `publish`). The page opens from ``file://`` with no server and no network. All
text that comes from results (variant names, parameters, errors) is escaped.
"""

from __future__ import annotations

from attnbench.harness.leaderboard.site import build_site

__all__ = ["build_site"]
