"""Which kernel a timed call ran: a compiled kernel built for which vector ISA, or PyTorch's own
operators.

A variant's timing means different things on different paths: the same call runs a compiled
AVX-512 kernel on one host and falls back to SDPA tiles on another (no compiler, another ISA,
another dtype). So a compiled kernel says so when it runs (`note`), and a timed task records what
was said during one untimed call (`recording`) beside the timing. Nothing said means PyTorch's
operators ran (`TORCH_OPERATORS`), dispatched for the record's ``cpu_capability`` on a CPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

TORCH_OPERATORS = "torch operators"
_active: list[set[str]] = []


def note(path: str) -> None:
    """Say that ``path`` (e.g. "tile kernel (AVX512)") is running; free when nobody records."""
    for paths in _active:
        paths.add(path)


@contextlib.contextmanager
def recording() -> Iterator[set[str]]:
    """Collect the paths noted inside the block (empty: only PyTorch's operators ran)."""
    paths: set[str] = set()
    _active.append(paths)
    try:
        yield paths
    finally:
        _active.remove(paths)


def described(paths: set[str]) -> str:
    """One line for a record: the noted paths, sorted, or `TORCH_OPERATORS`."""
    return ", ".join(sorted(paths)) if paths else TORCH_OPERATORS
