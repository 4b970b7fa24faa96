"""The leaderboard in a real browser: headless Chromium driven over the DevTools protocol.

Builds the site from a real small sweep (plus one record whose variant name is an HTML injection),
opens it from file://, and checks: a row per variant in the overview, sorting by a header reorders
the rows, every chart was drawn by Plotly (its SVG exists), the hostile name is shown as text and
ran nothing. A screenshot is saved next to the site (``leaderboard/screenshot.png``).

Chromium comes from Debian's ``chromium`` package; the test installs it when it is missing and it
can (root with apt-get), and is skipped, saying why, only where it cannot.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import shutil
import subprocess
import time
import urllib.request

import pytest
from conftest import run_cli

HOSTILE = '<img src=x onerror="window.__pwned = 1">'
FAST = ["task.backward=false", "task.min_run_time=0.01", "task.min_samples=2"]
VARIANTS = ["softmax", "linear", "window"]


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if shutil.which("apt-get") and hasattr(os, "geteuid") and os.geteuid() == 0:
        for step in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "chromium"]):
            subprocess.run(step, capture_output=True, timeout=900, check=False)
        found = shutil.which("chromium")
    if not found:
        pytest.skip(
            "headless Chromium is not installed and could not be installed here "
            "(needs root and apt-get: `apt-get install chromium`)"
        )
    return found


class Browser:
    """A headless Chromium with one page, driven over the DevTools protocol."""

    def __init__(self, exe: str, profile) -> None:
        import websocket

        self.proc = subprocess.Popen(
            [
                exe,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                "--window-size=1300,2000",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        port = None
        deadline = time.monotonic() + 60
        while port is None and time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            match = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            port = int(match.group(1)) if match else None
        assert port, "Chromium did not open its DevTools port"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            page = next(t for t in json.load(r) if t["type"] == "page")
        self.ws = websocket.create_connection(
            page["webSocketDebuggerUrl"], timeout=60, suppress_origin=True
        )
        self.ids = itertools.count(1)

    def call(self, method: str, **params):
        msg_id = next(self.ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == msg_id:
                assert "error" not in reply, reply
                return reply["result"]

    def eval(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

    def open(self, url: str) -> None:
        self.call("Page.enable")
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.eval("document.readyState") == "complete":
                return
            time.sleep(0.1)
        raise AssertionError(f"{url} did not finish loading")

    def close(self) -> None:
        self.ws.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    results = root / "results"
    for task in (
        ["task=throughput", "task.seq_len=64,128,256", *FAST],
        ["task=concentration", "task.source=gaussian", "task.seq_len=64"],
    ):
        proc = run_cli(
            "attnbench", "-m", f"variant={','.join(VARIANTS)}", *task, f"results_dir={results}"
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
    record_file = next((results / "runs").glob("*.json"))
    record = json.loads(record_file.read_text())
    record.update(variant=HOSTILE, run_id="0" * 16)
    (results / "runs" / f"{'0' * 16}.json").write_text(json.dumps(record))
    assert run_cli("attnbench-collect", str(results)).returncode == 0
    proc = run_cli("attnbench-leaderboard", str(results))
    assert proc.returncode == 0, proc.stderr
    return results / "leaderboard"


@pytest.fixture(scope="module")
def page(site, tmp_path_factory):
    browser = Browser(_chromium(), tmp_path_factory.mktemp("profile"))
    browser.open((site / "index.html").as_uri())
    time.sleep(1.0)  # Plotly draws after load
    yield browser
    browser.close()


OVERVIEW_NAMES = (
    "[...document.querySelectorAll('#overview-table tbody tr')].map(tr => tr.cells[1].textContent)"
)


def test_overview_has_a_row_per_variant(page):
    names = page.eval(OVERVIEW_NAMES)
    assert sorted(names) == sorted([*VARIANTS, HOSTILE])


def test_sorting_by_a_header_reorders_the_rows(page):
    before = page.eval(OVERVIEW_NAMES)
    page.eval("document.querySelector('#overview-table th[data-col=\"1\"]').click()")
    ascending = page.eval(OVERVIEW_NAMES)
    page.eval("document.querySelector('#overview-table th[data-col=\"1\"]').click()")
    descending = page.eval(OVERVIEW_NAMES)
    assert ascending == sorted(before) and descending == ascending[::-1]
    assert ascending != descending
    sort = page.eval("document.querySelector('#overview-table th[data-col=\"1\"]').ariaSort")
    assert sort == "descending"


def test_every_chart_was_drawn_by_plotly(page):
    charts = page.eval("document.querySelectorAll('div.chart').length")
    drawn = page.eval("document.querySelectorAll('div.chart svg.main-svg').length")
    traces = page.eval("document.querySelectorAll('div.chart g.trace').length")
    assert charts >= 4  # throughput fwd_ms / peak memory / fwd_bwd…, concentration, …
    assert drawn >= charts and traces > 0


def test_hostile_variant_name_is_text_and_ran_nothing(page):
    assert page.eval("window.__pwned === undefined")
    assert page.eval(
        f"[...document.querySelectorAll('td')].some(td => td.textContent === {json.dumps(HOSTILE)})"
    )
    assert page.eval("document.querySelectorAll('td img').length") == 0


def test_screenshot_is_saved_next_to_the_site(page, site):
    png = page.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
    (site / "screenshot.png").write_bytes(base64.b64decode(png["data"]))
    assert (site / "screenshot.png").read_bytes().startswith(b"\x89PNG")
