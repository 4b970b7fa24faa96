"""Headless Chromium driven over the DevTools protocol: the browser tests' and the docs
screenshots' one client (`docs/screenshots.py` puts this folder on its path).

Chromium comes from Debian's ``chromium`` package; `find_chromium` installs it when it is
missing and it can (root with apt-get), so that CI gets it from `.ci/run` or from here.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import time
import urllib.request


def find_chromium(install: bool = True) -> str | None:
    """The Chromium executable; installed with apt-get first where missing and possible (root,
    ``install``); None where there is none."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found or not install:
        return found
    if shutil.which("apt-get") and hasattr(os, "geteuid") and os.geteuid() == 0:
        for step in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "chromium"]):
            subprocess.run(step, capture_output=True, timeout=900, check=False)
    return shutil.which("chromium")


class Browser:
    """A headless Chromium with one page, driven over the DevTools protocol; a failed call
    raises `RuntimeError` with the protocol's reply."""

    def __init__(
        self, exe: str, profile, size: tuple[int, int] = (1300, 2000), *extra_flags: str
    ) -> None:
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
                *extra_flags,
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                f"--window-size={size[0]},{size[1]}",
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
        if port is None:
            self.proc.kill()
            raise RuntimeError("Chromium did not open its DevTools port")
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
                if "error" in reply:
                    raise RuntimeError(reply)
                return reply["result"]

    def eval(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(result)
        return result["result"].get("value")

    def open(self, url: str) -> None:
        self.call("Page.enable")
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.eval("document.readyState") == "complete":
                return
            time.sleep(0.1)
        raise RuntimeError(f"{url} did not finish loading")

    def viewport(self, width: int, height: int) -> None:
        """Make the page's viewport exactly ``width`` × ``height`` CSS pixels (a headless
        window's size includes no browser chrome, but this does not depend on it)."""
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def close(self) -> None:
        self.ws.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)
