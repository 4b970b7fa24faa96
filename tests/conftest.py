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

load_plugins()

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def random_qkv(b=2, h=3, n=16, m=None, d=8, dv=None, seed=0, dtype=torch.float32):
    """Gaussian q (B,H,N,D), k (B,H,M,D), v (B,H,M,Dv) from a fixed seed."""
    m = n if m is None else m
    dv = d if dv is None else dv
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, n, d, generator=g, dtype=dtype)
    k = torch.randn(b, h, m, d, generator=g, dtype=dtype)
    v = torch.randn(b, h, m, dv, generator=g, dtype=dtype)
    return q, k, v


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
