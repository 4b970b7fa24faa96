"""Which kernel a timed call ran: a compiled kernel built for which vector ISA, or PyTorch's own
operators.

A variant's timing means different things on different paths: the same call runs a compiled
AVX-512 kernel on one host and falls back to SDPA tiles on another (no compiler, another ISA,
another dtype). So a compiled kernel says so when it runs (`note`), and a timed task records what
was said during one untimed call (`recording`) beside the timing. Nothing said means PyTorch's
operators ran (`TORCH_OPERATORS`), dispatched for the record's ``cpu_capability`` on a CPU.
A kernel whose configuration was chosen on this machine (`attnbench.variants.kernels.autotune`)
says which one ran (`note_tuned`), so that the record names it (`Ran.tuned`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

TORCH_OPERATORS = "torch operators"


class Ran(set):
    """The paths noted in a `recording` block, and ``tuned``: per tuned kernel, the
    configuration it ran (e.g. ``{"pointwise kernel": "query tile 128, key tile 512 (tuned)"}``)."""

    def __init__(self) -> None:
        super().__init__()
        self.tuned: dict[str, str] = {}


_active: list[Ran] = []


def note(path: str) -> None:
    """Say that ``path`` (e.g. "tile kernel (AVX512)") is running; free when nobody records."""
    for paths in _active:
        paths.add(path)


def note_tuned(kernel: str, configuration: str) -> None:
    """Say that ``kernel`` runs ``configuration`` (its words); free when nobody records."""
    for paths in _active:
        paths.tuned[kernel] = configuration


@contextlib.contextmanager
def recording() -> Iterator[Ran]:
    """Collect the paths noted inside the block (empty: only PyTorch's operators ran) and the
    configurations of tuned kernels (`Ran.tuned`)."""
    paths = Ran()
    _active.append(paths)
    try:
        yield paths
    finally:  # by identity: two blocks' sets may be equal
        del _active[next(i for i, ran in enumerate(_active) if ran is paths)]


def described(paths: set[str]) -> str:
    """One line for a record: the noted paths, sorted, or `TORCH_OPERATORS`."""
    return ", ".join(sorted(paths)) if paths else TORCH_OPERATORS
