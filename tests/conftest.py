"""Shared fixtures. Plugins load at collection time, so tests can parametrize over the registry."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnbench.harness.discovery import load_plugins
from attnbench.testing import random_qkv  # noqa: F401  (one helper: the tests import it from here)

load_plugins()

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def run_cli(*args: str, env: dict | None = None, cwd: Path | None = None, timeout: float = 300):
    """Run one of attnbench's console scripts from this environment; returns CompletedProcess."""
    exe = shutil.which(args[0], path=str(BIN)) or args[0]
    full_env = {**os.environ, "HYDRA_FULL_ERROR": "0", **(env or {})}
    return subprocess.run(
        [exe, *args[1:]],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=cwd or REPO,
        timeout=timeout,
    )


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    yield
