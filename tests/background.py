"""Tests marked ``background`` run in a second pytest process, started when the session's tests
are collected, while this one runs the rest.

CI has two cores and the suite mostly keeps one busy (one thread per test, or a subprocess this
process waits for). A long test that is pure computation (the attention system fitted at a
thousand points) runs as well on the idle core: the session's own test waits for its result
there, by then usually in, and passes or fails with it, the other run's output as the message.
Only tests that measure nothing of the machine belong here (no timing, no memory reading): two
processes share the cores while it runs. Run alone (or inside the background run, which sets
`INSIDE`), a marked test runs in place, as any other.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

MARK = "background"
INSIDE = "ATTNBENCH_BACKGROUND_RUN"
_RUN: dict[str, object] = {}


def start(items: list, root: Path) -> None:
    """Start one pytest process for the marked tests among ``items``, if the session has other
    tests to run beside them."""
    if os.environ.get(INSIDE) or "process" in _RUN:
        return
    marked = [item.nodeid for item in items if item.get_closest_marker(MARK)]
    if not marked or len(marked) == len(items):
        return
    out = tempfile.NamedTemporaryFile("w+", prefix="attnbench-bg-", suffix=".log")  # noqa: SIM115 (closed by stop)
    report = Path(tempfile.mkdtemp(prefix="attnbench-bg-")) / "report.xml"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    command += ["-o", "addopts=", f"--junit-xml={report}", *marked]
    _RUN.update(out=out, report=report, nodeids=set(marked))
    _RUN["process"] = subprocess.Popen(
        command, cwd=root, env={**os.environ, INSIDE: "1"}, stdout=out, stderr=subprocess.STDOUT
    )


def runs_elsewhere(nodeid: str) -> bool:
    """Whether the test ``nodeid`` runs in the background process."""
    return nodeid in _RUN.get("nodeids", set())


def outcome(nodeid: str) -> str | None:
    """Wait for the background run; None if ``nodeid`` passed there, else what to say."""
    process, out = _RUN["process"], _RUN["out"]
    process.wait()
    out.seek(0)
    tail = out.read()[-6000:]
    path, *scopes, name = nodeid.split("::")
    classname = ".".join([path.removesuffix(".py").replace("/", "."), *scopes])
    try:
        cases = ET.parse(_RUN["report"]).getroot().iter("testcase")
    except (OSError, ET.ParseError):
        return f"the background run wrote no report (exit status {process.returncode}):\n{tail}"
    for case in cases:
        if case.get("name") == name and case.get("classname") == classname:
            bad = [c for c in case if c.tag in ("failure", "error", "skipped")]
            if not bad:
                return None
            return f"{bad[0].tag} in the background run:\n{bad[0].text or bad[0].get('message')}"
    return f"{nodeid} is not in the background run's report:\n{tail}"


def stop() -> None:
    """End a background run no test waited for (the session stopped early)."""
    process = _RUN.pop("process", None)
    if process is not None and process.poll() is None:
        process.kill()
        process.wait()
    out = _RUN.pop("out", None)
    if out is not None:
        out.close()
    _RUN.clear()
