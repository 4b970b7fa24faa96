"""The compiled kernels (`variants.kernels.tile`, `variants.kernels.topk`) under every CPU
capability this host has, not only the one torch picks here: ``ATEN_CPU_CAPABILITY`` lowers
torch's dispatch (AVX512 → AVX2 → DEFAULT), `compiled.capability` follows it, and each kernel is
built for it (its own build folder, at::vec's 16, 8 or scalar lanes) and checked against float64
by the kernel tests themselves, in a subprocess per capability.

The host's own capability is tested in this process by test_tile_kernel.py and
test_topk_kernel.py; here the others, with a chosen few of those tests (the definitions, rows
without keys, the thread count, the path a record names, the library loaded): a capability's
run costs its two builds once (torch's extension cache keeps them) and a few seconds after.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnbench.toolkit.kernel_path import recording
from attnbench.variants.kernels import compiled, tile, topk

pytestmark = pytest.mark.slow  # each capability builds the kernels in a subprocess (seconds each)
HAS_COMPILER = bool(shutil.which("c++") or shutil.which("g++"))
HERE = Path(__file__).parent
# the kernel tests a lowered capability runs: their float64 definitions and what a record says
SELECTED = (
    "(definition or without_a_key or thread_count or misleads or keeps_every_tie"
    " or names_its_capability or loads_the_build) and not every_capability_of_the_host"
)
NESTED = "ATTNBENCH_CAPABILITY_RUN"  # set in the subprocesses: they never start another


def host_has(cap: str) -> bool:
    """Whether torch can dispatch to ``cap`` on this CPU (DEFAULT: everywhere)."""
    probe = {"AVX512": "_is_avx512_supported", "AVX2": "_is_avx2_supported"}.get(cap)
    if probe is None:
        return True
    return bool(getattr(torch.cpu, probe, lambda: False)())


CAPABILITIES = ["AVX512", "AVX2", "DEFAULT"]
_runs: dict[str, subprocess.Popen] = {}


def _lowered() -> list[str]:
    """The capabilities of this host other than the one this process dispatches to."""
    return [c for c in CAPABILITIES if c != compiled.capability() and host_has(c)]


def _start(cap: str) -> subprocess.Popen:
    env = {**os.environ, "ATEN_CPU_CAPABILITY": cap.lower(), NESTED: "1"}
    files = [str(HERE / "test_tile_kernel.py"), str(HERE / "test_topk_kernel.py")]
    files.append(str(Path(__file__)))
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-n",
            "0",
            "-p",
            "no:cacheprovider",
            "-k",
            SELECTED,
            *files,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler on PATH")
@pytest.mark.parametrize("cap", CAPABILITIES)
def test_kernels_equal_float64_under_every_capability_of_the_host(cap):
    """The first of these starts every lowered capability's run at once: each is mostly one
    compiler building its kernels, a core each, and this process only waits."""
    if os.environ.get(NESTED):
        pytest.skip("inside a capability's run")
    if cap == compiled.capability():
        pytest.skip(f"{cap} is this process's: its kernel tests run here")
    if not host_has(cap):
        pytest.skip(f"this CPU has no {cap}")
    for lowered in _lowered():
        if lowered not in _runs:
            _runs[lowered] = _start(lowered)
    run = _runs[cap]
    try:
        output, _ = run.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        run.kill()
        raise
    tail = output[-3000:]
    assert run.returncode == 0, tail
    assert " passed" in tail and " skipped" not in tail, tail  # every selected test ran


def test_the_capability_is_torchs_dispatch():
    """What the kernels are built for is what torch dispatches to (a name the build knows)."""
    found = torch.backends.cpu.get_cpu_capability()
    assert compiled.capability() == (found if found in compiled.CAPABILITY_FLAGS else "DEFAULT")


@pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler on PATH")
def test_each_kernel_names_its_capability_in_the_record():
    """A record says which build ran: "tile kernel (AVX2)" under an AVX2 dispatch."""
    q, k, v = (torch.randn(1, 2, 64, 16, generator=torch.Generator().manual_seed(0)) for _ in "qkv")
    with recording() as paths:
        assert tile.compiled_banded(q, k, v, 7, 0, 0.25) is not None
        assert topk.compiled_topk_softmax(q @ k.transpose(-2, -1), 5, 0.25, None) is not None
    cap = compiled.capability()
    assert paths == {f"tile kernel ({cap})", f"topk kernel ({cap})"}


@pytest.mark.skipif(
    not HAS_COMPILER or not Path("/proc/self/maps").exists(), reason="no compiler or no /proc"
)
def test_each_kernel_loads_the_build_of_this_capability():
    """The library in this process is the capability's build (its own name and folder), so an
    AVX2 dispatch never runs an AVX-512 build left in the cache by another process."""
    assert tile._load() and topk._load()
    maps = Path("/proc/self/maps").read_text()
    cap = compiled.capability()
    for stem in ("attnbench_tiles", "attnbench_topk"):
        assert compiled.extension_name(stem, cap) in maps
        others = [c for c in compiled.CAPABILITY_FLAGS if c != cap]
        assert not any(compiled.extension_name(stem, c) + "." in maps for c in others)
