"""The environment a job ran in: versions, source commit, machine, threads.

Everything here goes into each record so that a leaderboard number can be reproduced from it.
"""

from __future__ import annotations

import functools
import os
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path

import torch

SOURCE_DIR = Path(__file__).resolve().parent.parent


def attnbench_version() -> str:
    """The installed attnbench version ("unknown" when run from an uninstalled checkout)."""
    try:
        return metadata.version("attnbench")
    except metadata.PackageNotFoundError:
        return "unknown"


@functools.lru_cache(maxsize=1)
def git_state() -> tuple[str | None, bool | None]:
    """(commit, dirty) of the attnbench source tree, or (None, None) outside a git checkout.

    Untracked files count as dirty only if git would track them (results/ is ignored).
    """
    try:
        commit = subprocess.run(
            ["git", "-C", str(SOURCE_DIR), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", str(SOURCE_DIR), "status", "--porcelain"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    return commit or None, bool(status.strip())


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU model name (from /proc/cpuinfo on Linux, `platform.processor()` elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_name(device: torch.device) -> str:
    """A human-readable name of ``device`` (the GPU model, or the CPU model)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpu_model()


def environment(device: torch.device) -> dict[str, object]:
    """The environment fields of a record."""
    commit, dirty = git_state()
    return {
        "attnbench_version": attnbench_version(),
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "cuda_version": torch.version.cuda,
        "git_commit": commit,
        "git_dirty": dirty,
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device_name": device_name(device),
    }
