"""Screenshots of the leaderboard for the docs: the overview and one chart of each type.

Builds the board of a results folder (``attnbench-leaderboard``'s `build_site`, into a temporary
folder), opens it in headless Chromium at 1400 px wide and saves PNGs into ``docs/img/``:
``overview.png``, ``chart-curve.png``, ``chart-bar.png``, ``chart-scatter.png``.

    .venv/bin/python docs/screenshots.py results/reference

Needs Debian's ``chromium`` (``apt-get install chromium``) and ``websocket-client`` (a dev
dependency). Not part of the package.
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

WIDTH = 1400
HEIGHT = 1000
MAX_HEIGHT = 2400  # an element taller than this is cut at this height
SHOTS = {  # file name → CSS selectors: the shot holds the first match of each
    "overview.png": "#overview h2, #overview .table-box",
    "chart-curve.png": 'div.chart[id^="chart-throughput-"]:not([id*="-bars"])',
    "chart-bar.png": 'div.chart[id*="-bars"]',
    "chart-scatter.png": 'div.chart[id^="chart-cost-"]',
}


class Chromium:
    """Headless Chromium with one page, driven over the DevTools protocol."""

    def __init__(self, profile: Path) -> None:
        import websocket

        exe = shutil.which("chromium") or shutil.which("chromium-browser")
        if exe is None:
            sys.exit("screenshots: chromium is not installed (apt-get install chromium)")
        self.proc = subprocess.Popen(
            [
                exe,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                f"--window-size={WIDTH},{HEIGHT}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        port = None
        deadline = time.monotonic() + 60
        while port is None and time.monotonic() < deadline:
            found = re.search(
                r"DevTools listening on ws://[^:]+:(\d+)/", self.proc.stderr.readline()
            )
            port = int(found.group(1)) if found else None
        if port is None:
            sys.exit("screenshots: Chromium did not open its DevTools port")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as reply:
            page = next(t for t in json.load(reply) if t["type"] == "page")
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
                if "error" in reply:
                    raise RuntimeError(reply["error"])
                return reply["result"]

    def eval(self, expression: str):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)[
            "result"
        ].get("value")

    def open(self, url: str) -> None:
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=WIDTH,
            height=HEIGHT,
            deviceScaleFactor=1,
            mobile=False,
        )
        self.call("Page.enable")
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + 60
        while self.eval("document.readyState") != "complete" and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(2.0)  # Plotly draws after load

    def shot(self, selector: str, path: Path) -> bool:
        """Save a PNG of the box holding the first element matching each selector of
        ``selector`` (comma-separated); False where one matches nothing."""
        rect = self.eval(
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
        png = self.call(
            "Page.captureScreenshot", format="png", clip=clip, captureBeyondViewport=True
        )
        path.write_bytes(base64.b64decode(png["data"]))
        return True

    def close(self) -> None:
        self.ws.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results_dir", nargs="?", default="results/reference")
    parser.add_argument("-o", "--out", default=str(Path(__file__).parent / "img"))
    args = parser.parse_args(argv)
    from attnbench.harness.leaderboard import build_site

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        index = build_site(args.results_dir, Path(tmp) / "site")
        browser = Chromium(Path(tmp) / "profile")
        try:
            browser.open(index.as_uri())
            for name, selector in SHOTS.items():
                if browser.shot(selector, out / name):
                    print(out / name)
                else:
                    print(f"screenshots: no {selector} on this board, {name} not written")
        finally:
            browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
