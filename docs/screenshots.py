"""Screenshots of the leaderboard for the docs: the overview and one chart of each type.

Builds the board of a results folder (``attnbench-leaderboard``'s `build_site`, into a temporary
folder), opens it in headless Chromium at 1400 px wide and saves PNGs into ``docs/img/``:
``overview.png``, ``chart-curve.png``, ``chart-bar.png``, ``chart-scatter.png``, and the two
state-size figures the README shows, ``recall-state.png`` (recall against the state a sequence
holds: Zoology's figure) and ``decode-latency.png`` (the time per generated token against context).

    .venv/bin/python docs/screenshots.py results/reference

``--installed-descriptions`` draws the folder's numbers with the task descriptions of the
installed code (labels, units, budgets) in place of those its records carry: a preview of how
records of today's tasks read, for a reference measured by older code. Nothing measured changes.

Needs Debian's ``chromium`` (``apt-get install chromium``) and ``websocket-client`` (a dev
dependency). Not part of the package.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from chromium import Browser, find_chromium  # noqa: E402 (the tests' DevTools client)

WIDTH = 1400
HEIGHT = 1000
MAX_HEIGHT = 2400  # an element taller than this is cut at this height
SHOTS = {  # file name → CSS selectors: the shot holds the first match of each
    "first-screen.png": "h1, #summary .table-box",
    "overview.png": "#overview h2, #overview .table-box",
    "chooser.png": "#chooser",
    "chart-curve.png": 'div.chart[id^="chart-throughput-"]:not([id*="-bars"])',
    "chart-bar.png": 'div.chart[id*="-bars"]',
    "chart-scatter.png": 'div.chart[id^="chart-cost-"]',
    "recall-state.png": 'div.chart[id^="chart-recall-accuracy_by_state_bytes-"]',
    "decode-latency.png": 'div.chart[id^="chart-decode-decode_ms_per_token-"]',
}


def shot(browser: Browser, selector: str, path: Path) -> bool:
    """Save a PNG of the box holding the first element matching each selector of
    ``selector`` (comma-separated); False where one matches nothing."""
    rect = browser.eval(
        f"""(() => {{
          const els = {json.dumps(selector.split(","))}.map(s => document.querySelector(s));
          if (els.some(e => !e)) return null;
          const rs = els.map(e => e.getBoundingClientRect());
          const left = Math.min(...rs.map(r => r.left)), top = Math.min(...rs.map(r => r.top));
          const right = Math.max(...rs.map(r => r.right));
          const bottom = Math.max(...rs.map(r => r.bottom));
          return [left + window.scrollX, top + window.scrollY, right - left, bottom - top];
        }})()"""
    )
    if rect is None:
        return False
    _, y, _, height = rect
    pad = 8
    clip = {  # the page's full width, as a reader at 1400 px sees it
        "x": 0,
        "y": max(0, y - pad),
        "width": WIDTH,
        "height": min(MAX_HEIGHT, height + 2 * pad),
        "scale": 1,
    }
    png = browser.call(
        "Page.captureScreenshot", format="png", clip=clip, captureBeyondViewport=True
    )
    path.write_bytes(base64.b64decode(png["data"]))
    return True


def with_installed_descriptions(results_dir: Path, tmp: Path) -> Path:
    """A copy of ``results_dir``'s table (no records beside it: the board shows it as it is)
    whose metadata describes each task as the installed code does; returns its folder."""
    import pyarrow.parquet as pq

    from attnbench.harness.discovery import load_plugins
    from attnbench.harness.results.collect import METADATA_KEY, TABLE_NAME
    from attnbench.task import TASKS

    load_plugins()
    table = pq.read_table(results_dir / TABLE_NAME)
    meta = json.loads(table.schema.metadata[METADATA_KEY])
    for name in meta.get("tasks", {}):
        if name in TASKS.names():
            meta["tasks"][name] = TASKS.get(name).describe().to_dict()
    metadata = {**table.schema.metadata, METADATA_KEY: json.dumps(meta).encode()}
    folder = tmp / "described"
    folder.mkdir()
    pq.write_table(table.replace_schema_metadata(metadata), folder / TABLE_NAME)
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results_dir", nargs="?", default="results/reference")
    parser.add_argument("-o", "--out", default=str(Path(__file__).parent / "img"))
    parser.add_argument(
        "--installed-descriptions",
        action="store_true",
        help=__doc__.split("``--installed-descriptions`` ")[1].split(".")[0],
    )
    args = parser.parse_args(argv)
    from attnbench.harness.leaderboard import build_site

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(args.results_dir)
        if args.installed_descriptions:
            results = with_installed_descriptions(results, Path(tmp))
        index = build_site(results, Path(tmp) / "site")
        exe = find_chromium(install=False)
        if exe is None:
            sys.exit("screenshots: chromium is not installed (apt-get install chromium)")
        browser = Browser(exe, Path(tmp) / "profile", (WIDTH, HEIGHT), "--hide-scrollbars")
        try:
            browser.viewport(WIDTH, HEIGHT)
            browser.open(index.as_uri())
            time.sleep(2.0)  # Plotly draws after load
            browser.eval(
                "document.querySelectorAll('details.charts').forEach(d => { d.open = true; })"
            )
            time.sleep(2.0)  # each group of charts is drawn when opened
            for name, selector in SHOTS.items():
                if shot(browser, selector, out / name):
                    print(out / name)
                else:
                    print(f"screenshots: no {selector} on this board, {name} not written")
        finally:
            browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
