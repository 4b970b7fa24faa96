"""The environment a job ran in: versions, source commit, machine, threads.

Everything here goes into each record so that a leaderboard number can be reproduced from it.
"""

from __future__ import annotations

import functools
import os
import platform
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

import torch

# harness/jobs/env.py in a checkout, attnbench/harness/jobs/env.py in an installed wheel: three
# levels up is the repository root or the installed package folder (a strict editable install
# links back into the checkout; resolve() follows the links).
SOURCE_DIR = Path(__file__).resolve().parents[2]


def attnbench_version() -> str:
    """The installed attnbench version ("unknown" when run from an uninstalled checkout), as
    ``attnbench.__version__`` reads it."""
    import attnbench

    return attnbench.__version__


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(SOURCE_DIR), *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    ).stdout.strip()


# What a job can run: the folders the wheel is built from (pyproject.toml's package-dir) and the
# file that builds it. A change anywhere else (results, the board, logs, docs, tests) is not code
# that ran, so it does not make a record's commit "dirty". tests/harness/test_provenance.py keeps
# this list equal to package-dir.
CODE_PATHS = (
    "api",
    "harness",
    "variants",
    "peers",
    "tasks",
    "conf",
    "hydra_plugins",
    "pyproject.toml",
)
DIRTY_FILES_KEPT = 20  # a record names at most this many of the changed code files


@dataclass(frozen=True)
class GitState:
    """The checkout a job's code runs from.

    Attributes:
        commit: HEAD's hash; None when the code does not run from a checkout of attnbench.
        dirty: Whether a code file (`CODE_PATHS`) differs from that commit: modified, staged,
            deleted, or untracked and not ignored. None with no commit.
        dirty_files: Those files (at most `DIRTY_FILES_KEPT`), relative to the checkout.
    """

    commit: str | None = None
    dirty: bool | None = None
    dirty_files: tuple[str, ...] = ()


@functools.lru_cache(maxsize=1)
def git_state() -> GitState:
    """The `GitState` of the attnbench checkout the code runs from (empty otherwise).

    Only a checkout counts: the source folder must be the top level of a git work tree that
    tracks this very file. An installed wheel inside some other repository (a virtualenv kept in
    a project folder) has no commit of its own, and the record then says so rather than
    borrowing that repository's. Only code counts as dirty (`CODE_PATHS`): a sweep writing its
    results into the checkout, or an edited README, leaves the code that ran equal to the commit.
    """
    try:
        toplevel = Path(_git("rev-parse", "--show-toplevel")).resolve()
        if toplevel != SOURCE_DIR:
            return GitState()
        _git("ls-files", "--error-unmatch", "harness/jobs/env.py")
        commit = _git("rev-parse", "HEAD")
        status = _git("status", "--porcelain", "--untracked-files=all", "--", *CODE_PATHS)
    except (OSError, subprocess.SubprocessError):
        return GitState()
    # "XY path" (or "R  old -> new"); the output's leading blank is stripped by `_git`
    files = [
        line.split(maxsplit=1)[1].split(" -> ")[-1].strip('"')
        for line in status.splitlines()
        if line.strip()
    ]
    return GitState(commit or None, bool(files), tuple(files[:DIRTY_FILES_KEPT]))


def code_source() -> str:
    """Where the running code comes from: "checkout" (git commit known) or "distribution"."""
    return "checkout" if git_state().commit is not None else "distribution"


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


def cpu_capability() -> str:
    """The vector ISA torch's CPU kernels dispatch to in this process ("AVX512", "AVX2",
    "DEFAULT", ...): the host's best, or lower where ``ATEN_CPU_CAPABILITY`` asks for it."""
    return torch.backends.cpu.get_cpu_capability()


def device_name(device: torch.device) -> str:
    """The machine ``device`` measures on: the GPU model, or for the CPU its model and the
    capability torch dispatches to, e.g. "AMD EPYC 9654 (AVX512)".

    The capability is part of the name because one CPU model name covers hosts whose kernels
    run AVX-512 on one and AVX2 on another (or are held to AVX2 by ``ATEN_CPU_CAPABILITY``), and
    their timings differ: this name is a record's ``hardware``, so those runs are other machines
    to the job identity, the board and ``attnbench-compare``.
    """
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{cpu_model()} ({cpu_capability()})"


def environment(device: torch.device) -> dict[str, object]:
    """The environment fields of a record (``device_name`` is the record's hardware)."""
    git = git_state()
    return {
        "attnbench_version": attnbench_version(),
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "cuda_version": torch.version.cuda,
        "code_source": code_source(),  # "distribution": no commit is known, see the version
        "git_commit": git.commit,
        "git_dirty": git.dirty,  # only code (CODE_PATHS) counts
        "git_dirty_files": list(git.dirty_files),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpu": cpu_model(),  # the model name alone; `device_name` adds the capability
        "cpu_capability": cpu_capability(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device_name": device_name(device),
    }
