"""Building the compiled CPU kernels (`topk_kernel`, `tile_kernel`) on first use.

Each kernel's C++ source is a ``.cpp`` file beside the module that loads it (``tile.py`` ↔
``tile.cpp``), found from that module's file, so it works from a checkout and from an installed
wheel alike (package data ``attnbench.variants.kernels``: ``*.cpp``). The code fingerprint of the
variants that run a kernel covers it: `harness.jobs.fingerprint` hashes a module's ``.py`` together
with a ``.cpp`` of the same stem beside it. `build` compiles the file with
``torch.utils.cpp_extension.load`` (about 6 s, then torch's extension cache; ``load_inline``, which
prepends ``torch/extension.h`` and its Python bindings, took about 20 s) under a
name that includes the CPU capability, torch's version and a digest of where that torch is
installed: a cluster's nodes may share a home directory but not an instruction set, an extension
built against one torch must not be loaded by another, and two environments of one torch (the
README's `.venv` and `.venv-test`) each keep their build, where one shared folder was rebuilt at
every switch (its build file names the environment's include paths: ~30 s a time for the three).
``ninja``, which torch's build needs, is looked for next to the running Python too (a virtual
environment's ``bin`` is often not on the PATH). Where the build fails (no C++
compiler, no ninja, the source file missing), one warning names the path the variants fall back
to, and `build` returns False: the caller's torch path computes the same attention, slower.

A build killed midway (``kill -9``, a node lost) leaves torch's lock file (``lock``, its
`FileBaton`) in the extension's build folder, and torch waits for that file to go away, forever.
So builders of a kernel take turns on an exclusive ``flock`` of ``attnbench.owner`` beside it
(the kernel releases it when its holder dies, however it dies) and write there who is building:
host, process id and the process's start time. A ``lock`` found by the next builder is stale when
its recorded builder on this host is gone (or its id now names another process), or, with no
builder on record here (another host, an older attnbench), when it is older than
`STALE_LOCK_S`, which no build comes near. A stale lock is removed with one warning and the
kernel built again; a lock whose builder is alive is waited on, as torch does.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import socket
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch

# torch's name for a CPU capability -> the compiler flags that build at::vec for it
CAPABILITY_FLAGS = {
    "AVX512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma"],
    "AVX2": ["-mavx2", "-mfma", "-mf16c"],
    "DEFAULT": [],
}
STALE_LOCK_S = 600.0  # a build takes about 6 s; a lock this old with no live builder is stale
OWNER_FILE = "attnbench.owner"


def capability() -> str:
    """The CPU capability torch dispatches to here, one of `CAPABILITY_FLAGS`."""
    found = torch.backends.cpu.get_cpu_capability()
    return found if found in CAPABILITY_FLAGS else "DEFAULT"


def capability_flags(cap: str) -> list[str]:
    """Compiler flags that build a kernel and at::vec for capability ``cap``."""
    flags = ["-O3", "-fopenmp", f"-DCPU_CAPABILITY={cap}", *CAPABILITY_FLAGS[cap]]
    return flags + ([f"-DCPU_CAPABILITY_{cap}"] if cap != "DEFAULT" else [])


def extension_name(stem: str, cap: str) -> str:
    """``stem`` with the capability, torch's version and its installation's folder (a digest):
    one cache entry per capability and torch installation."""
    version = re.sub(r"[^0-9a-zA-Z]+", "_", torch.__version__)
    where = hashlib.sha256(str(Path(torch.__file__).resolve().parent).encode()).hexdigest()[:8]
    return f"{stem}_{cap.lower()}_torch{version}_{where}"


def _ninja_on_path() -> None:
    """Put the running interpreter's ``bin`` on the PATH when ninja is there (a virtual
    environment run without activating it), so that torch's build finds it."""
    here = str(Path(sys.executable).parent)
    if (Path(here) / "ninja").exists() and here not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = here + os.pathsep + os.environ.get("PATH", "")


def _process_start(pid: int) -> tuple[str, str] | None:
    """(state, start time in clock ticks since boot) of process ``pid`` from /proc; None where
    there is no such process or no /proc."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the name in parentheses may hold spaces
    return fields[0], fields[19]


def _alive(pid: int, start: str | None) -> bool:
    """Whether process ``pid`` of this host still runs and is the one that started at ``start``
    (an id is reused once its process is gone; a zombie has ended)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    now = _process_start(pid)
    if now is None:
        return True  # no /proc: the id exists, which is all that can be known
    return now[0] != "Z" and (start is None or now[1] == start)


@contextlib.contextmanager
def _builder(folder: Path | None) -> Iterator[dict | None]:
    """Hold the exclusive turn to build in ``folder``: yields the previous builder's record
    (None if there is none) and records this process as the builder until the block ends.
    Without a folder or ``fcntl`` the turn is not taken and None is yielded."""
    try:
        import fcntl
    except ImportError:
        fcntl = None
    if folder is None or fcntl is None:
        yield None
        return
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / OWNER_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # waits while a live builder holds it
        previous = os.read(fd, 4096).decode(errors="replace")
        me = {"host": socket.gethostname(), "pid": os.getpid()}
        me["start"] = (_process_start(os.getpid()) or (None, None))[1]
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        try:
            record = json.loads(previous) if previous.strip() else None
        except ValueError:
            record = None
        try:
            yield record if isinstance(record, dict) else None
        finally:
            os.ftruncate(fd, 0)  # finished (built or failed): no builder on record
    finally:
        os.close(fd)  # and the turn is released


def _stale(lock: Path, owner: dict | None) -> str | None:
    """Why torch's build lock ``lock`` is stale (its builder is gone), or None: there is none,
    or its builder may still be building and is waited on."""
    try:
        age = time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return None
    if owner and owner.get("host") == socket.gethostname() and isinstance(owner.get("pid"), int):
        if _alive(owner["pid"], owner.get("start")):
            return None
        return f"its builder, process {owner['pid']}, has ended"
    if age > STALE_LOCK_S:
        return f"it is {age / 60:.0f} minutes old and no builder here holds it"
    return None


def _build_folder(cpp_extension, name: str) -> Path | None:
    """The folder torch builds extension ``name`` in, or None where this torch has no function
    that says so (then the lock is left to torch)."""
    where = getattr(cpp_extension, "_get_build_directory", None)
    return None if where is None else Path(where(name, False))


def build(stem: str, source: Path, cap: str, fallback: str) -> bool:
    """Build (or find in torch's extension cache) and load the C++ file ``source`` as a library
    of torch ops for capability ``cap``; False, with one warning that ends with ``fallback``
    (what runs instead), when it cannot be built here. A build lock left by a killed build is
    removed first, with one warning (the module docstring)."""
    try:
        from torch.utils import cpp_extension

        if not Path(source).is_file():
            raise FileNotFoundError(f"no such file: {source}")
        _ninja_on_path()
        name = extension_name(stem, cap)
        folder = _build_folder(cpp_extension, name)
        with _builder(folder) as owner:
            if folder is not None and (reason := _stale(folder / "lock", owner)) is not None:
                (folder / "lock").unlink(missing_ok=True)
                warnings.warn(
                    f"a compiled CPU kernel ({stem}) was left mid-build: its build lock "
                    f"{folder / 'lock'} was removed ({reason}) and the kernel is built again.",
                    RuntimeWarning,
                    stacklevel=3,
                )
            cpp_extension.load(
                name=name,
                sources=[str(source)],
                extra_cflags=capability_flags(cap),
                extra_ldflags=["-fopenmp"],
                is_python_module=False,
                verbose=False,
                **({} if folder is None else {"build_directory": str(folder)}),
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


def forward_in_float32_cpu(*tensors: torch.Tensor) -> bool:
    """Whether a fused forward kernel may serve a call on ``tensors`` (q, k, v): float32 on the
    CPU, with no autograd to record (the kernels have no backward)."""
    if any(t.device.type != "cpu" or t.dtype != torch.float32 for t in tensors):
        return False
    return not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))


def heads_flat(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q (B, H, N, D), k (B, H, M, D), v (B, H, M, Dv) as the contiguous (B·H, ·, ·) a kernel
    indexes."""
    return tuple(x.reshape(-1, *x.shape[-2:]).contiguous() for x in (q, k, v))
