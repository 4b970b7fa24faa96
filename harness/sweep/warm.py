"""Build the compiled kernels a sweep's variants use before its clock starts.

A variant's C++ kernel is built on its first call on a machine (`variants/kernels/compiled.py`,
cached per CPU capability and torch installation): 20-25 s a kernel on two busy cores, about a
minute for the three. In a sweep those builds fell inside its first jobs, and the progress line's
estimate, the mean time per job so far, read them as the cost of every job (on a new machine
2.7 times the time left, from the first tenth). So before the first job, each variant the sweep
runs on the CPU makes one small call in the sweep's process: every kernel is built then, the
jobs find it built, and the estimate measures jobs. Where the kernels are built, the calls take
about a second for all 21 shipped variants. The engine names no variant: each variant's first
call builds what it needs.

The calls run on threads of their own (`KernelWarmer`), each started as the sweep's job check
meets its variant: a build is a compiler process (the thread only waits on it), so the kernels
build at once, and beside the composing of the jobs (11 s of one core for the quick sweep's 123),
where one call after another, after the composing, built them one after another (31 s for the
three on a new machine). Variants of one kernel take turns at its build lock
(`variants/kernels/compiled.py`), and each after the first loads what the first built.

The calls run as a timed region, where no kernel tunes itself: tuning belongs to the shapes the
jobs run (it took 20 s at this small one). Only the variants attnbench ships are called
(`SHIPPED`, their registry origin): they are the ones with kernels, and their first calls are
bounded, where a plugin's could be anything (one in the tests blocks for minutes) and belongs in
its job, under the job's time budget. A call that fails is ignored; its job says why.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import warnings

import torch

from attnbench.toolkit.timing import timed_region
from attnbench.variant import VARIANTS, VariantShape, build_variant, random_gates

log = logging.getLogger(__name__)

SHIPPED = "attnbench"  # the registry origin of the variants this package ships

_THREAD_PREFIX = "attnbench-first-call"
SIZE = (1, 2, 256, 64)  # (B, H, N, D) of the call: long enough to take every kernel path


class KernelWarmer:
    """Variants' first calls on threads of their own, started as the sweep names the variants
    (`add`, while it composes its jobs: composing keeps one core busy, a build the other) and
    waited for before its first job (`finish`). From the start to `finish` a timed region is
    open (no kernel tunes itself), and a warning raised on one of these threads is not shown: a
    variant's warnings belong to its jobs (the sweep's own thread still shows its own). The
    threads are daemons: a sweep refused while it composes (exit 2) does not wait for a build
    (a build cut short leaves its lock, which the next build removes: `compiled`)."""

    THREADS = 8  # first calls at once: builds of different kernels overlap, one kernel's wait

    def __init__(self) -> None:
        self.first: float | None = None  # when the first call started
        self.last = 0.0  # when the last one ended
        self.seen: set[str] = set()
        self.threads: list[threading.Thread] = []
        self.turns = threading.BoundedSemaphore(self.THREADS)
        self._region: contextlib.AbstractContextManager | None = timed_region()
        self._region.__enter__()
        self._shown = warnings.showwarning
        warnings.showwarning = self._show

    def _show(self, message, category, filename, lineno, file=None, line=None) -> None:
        if not threading.current_thread().name.startswith(_THREAD_PREFIX):
            self._shown(message, category, filename, lineno, file, line)

    def add(self, name: str) -> None:
        """Start the first call of ``name`` (once per name; only variants attnbench ships)."""
        if name not in self.seen:
            self.seen.add(name)
            if _shipped(name):
                if self.first is None:
                    self.first = time.monotonic()
                thread = threading.Thread(
                    target=self._call, args=(name,), name=_THREAD_PREFIX, daemon=True
                )
                self.threads.append(thread)
                thread.start()

    def _call(self, name: str) -> None:
        with self.turns:
            _first_call(name)
        self.last = max(self.last, time.monotonic())

    def finish(self) -> float:
        """Wait for every first call; the seconds from the first one's start to the last one's
        end (0 where none ran)."""
        try:
            for thread in self.threads:
                thread.join()
        finally:
            self.abandon()
        return 0.0 if self.first is None else max(0.0, self.last - self.first)

    def abandon(self) -> None:
        """Close the timed region and show warnings again, without waiting for the calls (a
        sweep that stops while it composes its jobs); once."""
        if self._region is not None:
            if warnings.showwarning == self._show:
                warnings.showwarning = self._shown
            self._region.__exit__(None, None, None)
            self._region = None


def _shipped(name: str) -> bool:
    try:
        return VARIANTS.entry(name).origin == SHIPPED
    except Exception:  # noqa: BLE001 - not registered: its job says so
        return False


def _first_call(name: str) -> None:
    """The variant's first call (which builds its kernel); a failure is left to its job."""
    b, h, n, d = SIZE
    try:
        variant = build_variant(name, {}, VariantShape(h, d, n))
        q, k, v = (torch.randn(b, h, n, d) for _ in range(3))
        gates = random_gates(variant, b, n, head_dim=d, kv_heads=h) or None
    except Exception:  # noqa: BLE001 - the job that runs the variant says why
        return
    for causal in (True, False):
        try:
            with torch.no_grad():
                variant(q, k, v, causal=causal, gates=gates)
            return
        except Exception:  # noqa: BLE001, S112 - not causal: the other form; else none
            continue
