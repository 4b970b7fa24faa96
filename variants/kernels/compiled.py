"""Building the compiled CPU kernels (`topk_kernel`, `tile_kernel`) on first use.

Each kernel's C++ source is a ``.cpp`` file beside the module that loads it (``tile.py`` ↔
``tile.cpp``), found from that module's file, so it works from a checkout and from an installed
wheel alike (package data ``attnbench.variants.kernels``: ``*.cpp``). The code fingerprint of the
variants that run a kernel covers it: `harness.jobs.fingerprint` hashes a module's ``.py`` together
with a ``.cpp`` of the same stem beside it. `build` reads the file and compiles its text with
``torch.utils.cpp_extension.load_inline`` (about 20 s, then torch's extension cache) under a
name that includes the CPU capability and torch's version: a cluster's nodes may share a home
directory but not an instruction set, and an extension built against one torch must not be
loaded by another. ``ninja``, which load_inline needs, is looked for next to the running Python
too (a virtual environment's ``bin`` is often not on the PATH). Where the build fails (no C++
compiler, no ninja, the source file missing), one warning names the path the variants fall back
to, and `build` returns False: the caller's torch path computes the same attention, slower.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from pathlib import Path

import torch

# torch's name for a CPU capability -> the compiler flags that build at::vec for it
CAPABILITY_FLAGS = {
    "AVX512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma"],
    "AVX2": ["-mavx2", "-mfma", "-mf16c"],
    "DEFAULT": [],
}


def capability() -> str:
    """The CPU capability torch dispatches to here, one of `CAPABILITY_FLAGS`."""
    found = torch.backends.cpu.get_cpu_capability()
    return found if found in CAPABILITY_FLAGS else "DEFAULT"


def capability_flags(cap: str) -> list[str]:
    """Compiler flags that build a kernel and at::vec for capability ``cap``."""
    flags = ["-O3", "-fopenmp", f"-DCPU_CAPABILITY={cap}", *CAPABILITY_FLAGS[cap]]
    return flags + ([f"-DCPU_CAPABILITY_{cap}"] if cap != "DEFAULT" else [])


def extension_name(stem: str, cap: str) -> str:
    """``stem`` with the capability and torch's version: one cache entry per pair."""
    version = re.sub(r"[^0-9a-zA-Z]+", "_", torch.__version__)
    return f"{stem}_{cap.lower()}_torch{version}"


def _ninja_on_path() -> None:
    """Put the running interpreter's ``bin`` on the PATH when ninja is there (a virtual
    environment run without activating it), so that load_inline finds it."""
    here = str(Path(sys.executable).parent)
    if (Path(here) / "ninja").exists() and here not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = here + os.pathsep + os.environ.get("PATH", "")


def build(stem: str, source: Path, cap: str, fallback: str) -> bool:
    """Build (or find in torch's extension cache) and load the C++ file ``source`` as a library
    of torch ops for capability ``cap``; False, with one warning that ends with ``fallback``
    (what runs instead), when it cannot be built here."""
    try:
        from torch.utils.cpp_extension import load_inline

        text = Path(source).read_text(encoding="utf-8")
        _ninja_on_path()
        load_inline(
            name=extension_name(stem, cap),
            cpp_sources=[text],
            extra_cflags=capability_flags(cap),
            extra_ldflags=["-fopenmp"],
            is_python_module=False,
            verbose=False,
        )
    except Exception as error:  # no compiler, no ninja, a failed build: the caller's torch path
        lines = str(error).strip().splitlines()
        warnings.warn(
            f"a compiled CPU kernel ({stem}) could not be built ({type(error).__name__}: "
            f"{lines[-1] if lines else ''}); {fallback}",
            RuntimeWarning,
            stacklevel=3,
        )
        return False
    return True
