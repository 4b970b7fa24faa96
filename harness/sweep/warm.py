"""Build the compiled kernels a sweep's variants use before its clock starts.

A variant's C++ kernel is built on its first call on a machine (`variants/kernels/compiled.py`,
cached per CPU capability and torch installation): 20-25 s a kernel on two busy cores, about a minute
for the three. In a sweep those builds fell inside its first jobs, and the progress line's
estimate, the mean time per job so far, read them as the cost of every job (on a new machine
2.7 times the time left, from the first tenth). So before the first job, each variant the sweep
runs on the CPU makes one small call in the sweep's process: every kernel is built then, the
jobs find it built, and the estimate measures jobs. Where the kernels are built, the calls take
about a second for all 21 shipped variants. The engine names no variant: each variant's first
call builds what it needs.

The calls run on a thread each: a build is a compiler process (the thread only waits on it), so
every kernel starts building at once, where one call after another built them one after another
(31 s for the three on a new machine, at load ~2). Variants of one kernel take turns at its build
lock (`variants/kernels/compiled.py`), and each after the first loads what the first built.

The calls run as a timed region, where no kernel tunes itself: tuning belongs to the shapes the
jobs run (it took 20 s at this small one). Only the variants attnbench ships are called
(`SHIPPED`, their registry origin): they are the ones with kernels, and their first calls are
bounded, where a plugin's could be anything (one in the tests blocks for minutes) and belongs in
its job, under the job's time budget. A call that fails is ignored; its job says why.
"""

from __future__ import annotations

import logging
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import torch

from attnbench.toolkit.timing import timed_region
from attnbench.variant import VARIANTS, VariantShape, build_variant, random_gates

log = logging.getLogger(__name__)

SHIPPED = "attnbench"  # the registry origin of the variants this package ships

SIZE = (1, 2, 256, 64)  # (B, H, N, D) of the call: long enough to take every kernel path


def warm_kernels(variants: list[str]) -> float:
    """One small float32 CPU call of each named variant attnbench ships (causal, else not),
    without gradients, all at once (a thread each); the seconds it took."""
    start = time.monotonic()
    shipped = [name for name in variants if _shipped(name)]
    with warnings.catch_warnings(), timed_region():
        warnings.simplefilter("ignore")  # a variant's warnings belong to its jobs
        with ThreadPoolExecutor(max_workers=max(1, len(shipped))) as pool:
            list(pool.map(_first_call, shipped))
    return time.monotonic() - start


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
