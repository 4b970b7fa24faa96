"""Write tests/slow_tests.json from a JUnit XML report of a pytest run: the tests over `SLOW_S`,
and tests/file_seconds.json: each test file's seconds in all.

    python -m pytest -o addopts="" --junitxml=/tmp/run.xml
    python scripts/slow-tests.py /tmp/run.xml

tests/conftest.py marks each listed test ``slow``, so that ``pytest -m "not slow"`` is the quick
subset (docs/index.md), and hands the files to pytest-xdist's workers longest first, so that no
long file starts last and leaves a core idle at the end. Measure on a quiet 2-core machine, one
process (``-o addopts=""``); a test marked ``slow`` in its file needs no entry.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SLOW_S = 1.0  # seconds of one test (call, set-up and tear-down) from which it is slow


def node_id(classname: str, name: str) -> str:
    """pytest's node id of a JUnit test case (``tests.harness.test_x.TestY`` + ``name``)."""
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        path = REPO.joinpath(*parts[:cut]).with_suffix(".py")
        if path.is_file():
            return "::".join([path.relative_to(REPO).as_posix(), *parts[cut:], name])
    raise ValueError(f"no test file for {classname}")


def main(report: str) -> None:
    root = ET.parse(report).getroot()
    seconds = {
        node_id(case.get("classname", ""), case.get("name", "")): round(float(case.get("time")), 1)
        for case in root.iter("testcase")
        if case.get("classname") and float(case.get("time", 0)) > SLOW_S
    }
    out = REPO / "tests" / "slow_tests.json"
    out.write_text(json.dumps(dict(sorted(seconds.items())), indent=1) + "\n", encoding="utf-8")
    print(f"{out}: {len(seconds)} tests over {SLOW_S:g} s")
    files: dict[str, float] = {}
    for case in root.iter("testcase"):
        if case.get("classname"):
            name = node_id(case.get("classname", ""), case.get("name", "")).split("::")[0]
            files[name] = files.get(name, 0.0) + float(case.get("time", 0))
    out = REPO / "tests" / "file_seconds.json"
    rounded = {name: round(t) for name, t in sorted(files.items())}
    out.write_text(json.dumps(rounded, indent=1) + "\n", encoding="utf-8")
    print(f"{out}: {len(files)} files, {sum(files.values()):.0f} s in all")


if __name__ == "__main__":
    main(sys.argv[1])
