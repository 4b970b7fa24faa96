"""The documentation: the MkDocs site builds strictly (a broken link, anchor or nav entry fails
it), and the README stays short and links only to files that exist."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_LIMIT = 12 * 1024  # bytes: the README is the front page; the rest lives in docs/

# [text](target) and ![alt](target), with an optional "title"; fenced code is removed first
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def readme_targets() -> list[str]:
    text = FENCE.sub("", README.read_text(encoding="utf-8"))
    return [m.group(1) for m in LINK.finditer(text)]


def test_mkdocs_build_is_strict_and_clean(tmp_path: Path) -> None:
    """mkdocs (and mkdocs-material) are in the dev extra, which CI installs."""
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # no banner in the output
        timeout=300,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    assert (site / "index.html").is_file()
    assert (site / "reference-board.png").is_file()


def test_readme_is_short() -> None:
    size = len(README.read_bytes())
    assert size <= README_LIMIT, (
        f"README.md is {size} bytes, over {README_LIMIT}: move the detail into docs/ and link it."
    )


def test_readme_links_resolve() -> None:
    targets = readme_targets()
    assert targets, "no links found in README.md"
    broken = []
    for target in targets:
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL (http:, mailto:) or an anchor within the README
        path = unquote(target.split("#", 1)[0])
        if not (ROOT / path).exists():
            broken.append(target)
    assert not broken, f"README.md links to files that do not exist: {broken}"


def test_readme_starts_with_the_two_commands() -> None:
    head = README.read_text(encoding="utf-8")[:1500]
    assert "attnbench -m sweep=quick" in head and "attnbench-leaderboard" in head
    assert "editable_mode=strict" in head and "python -m pytest" in head


def test_ci_runs_exactly_the_readme_test_command() -> None:
    """CI must run what a user is told to run, in its own virtual environment (the main job's
    `.venv` holds a non-editable install and the peers, which would change the tests run)."""
    commands = [
        line
        for line in FENCE.findall(README.read_text(encoding="utf-8"))[0].splitlines()
        if line.startswith("python3 -m venv")
    ]
    assert len(commands) == 2
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert ci == commands[1]
    assert ".venv-test/bin/python -m pytest" in commands[1] and ".venv/" not in commands[1]
