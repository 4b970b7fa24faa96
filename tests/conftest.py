"""Shared fixtures. Plugins load at collection time, so tests can parametrize over the registry."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path

# OpenMP threads waiting at a barrier sleep instead of spinning (libgomp spins by default): the
# suite runs two pytest-xdist workers on two cores, and the commands they start use torch's two
# threads each, so a spinning thread held a core that another process's thread needed. Beside
# other work, a 12-step training job took 6.2 s spinning and 1.3 s passive; three of
# test_grids_sweeper.py's sweeps 145 s and 30 s. Set before torch loads libgomp, in this process
# and so in every worker and command the tests start; tests that time something compare ratios
# measured under the same policy. A value the user set is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import forkserver
import pytest
import torch

from attnbench.harness.discovery import load_plugins
from attnbench.harness.jobs.fingerprint import combined_digest, module_digest
from attnbench.harness.jobs.records import Record, make_run_id
from attnbench.testing import random_qkv  # noqa: F401  (one helper: the tests import it from here)

load_plugins()

# One torch thread in the AVX2 rerun (tests/test_theory_on_avx2.py sets ONE_THREAD): it runs
# beside the two pytest-xdist workers on two cores, and a second OpenMP thread made its parallel
# regions wait at their barriers for cores the workers held (a concentration test took 2.7 s in
# a worker and 70 s there). The workers keep torch's default: a job run in-process takes its
# thread count from it, and tests compare those jobs' identities with the command line's.
ONE_THREAD = "ATTNBENCH_TESTS_ONE_THREAD"
if os.environ.get(ONE_THREAD):
    torch.set_num_threads(1)

# kernels tune themselves into a folder of this session's own (inherited by the commands the
# tests run, and by pytest-xdist's workers), not into the user's cache beside torch's
# extensions; the process that made it removes it when it ends
if "ATTNBENCH_TUNING_CACHE" not in os.environ:
    import atexit
    import tempfile

    os.environ["ATTNBENCH_TUNING_CACHE"] = tempfile.mkdtemp(prefix="attnbench-test-tuning-")
    atexit.register(shutil.rmtree, os.environ["ATTNBENCH_TUNING_CACHE"], ignore_errors=True)

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
# a throughput job quick on a busy machine too, for tests where its timing is not the point: at
# most a second of sampling per timing
FAST = [
    "task.seq_len=32",
    "task.backward=false",
    "task.min_run_time=0.01",
    "task.min_samples=4",
    "task.max_timing_s=1",
]


# the code of hand-made records: one real module of the installed package, as it is now, so that
# collection counts them as current (records of other code are history, left off the board)
CURRENT_MODULES = {"attnbench.metrics": module_digest("attnbench.metrics")}


def test_run_id(name: str) -> str:
    """A valid run_id for a readable name in a test."""
    return make_run_id({"test": name})


test_run_id.__test__ = False  # a helper, not a test


def make_record(name: str, **fields) -> Record:
    """A hand-made record of the installed code: run_id from ``name``, throughput on one CPU
    thread unless ``fields`` say otherwise; ``code_modules`` (default `CURRENT_MODULES`) sets the
    code fingerprint."""
    modules = fields.pop("code_modules", CURRENT_MODULES)
    defaults = {
        "status": "ok",
        "task": "throughput",
        "variant": "softmax",
        "task_params": {},
        "variant_params": {},
        "seed": 0,
        "device": "cpu",
        "dtype": "float32",
        "threads": 1,
        "hardware": "cpu0",
        "created_at": datetime.now(timezone.utc).isoformat(timespec="microseconds"),
    }
    return Record(
        run_id=test_run_id(name),
        code_modules=modules,
        code_fingerprint=combined_digest(modules) if modules else "",
        **{**defaults, **fields},
    )


def wait_for_ci_services(timeout: float = 900) -> None:
    """Where `.ci/run` installs Chromium and starts Slurm in the background (it names a file in
    ``ATTNBENCH_CI_SERVICES_READY`` and creates it when done), wait for it: a test's own install
    would race that apt-get for its lock and skip. Elsewhere, nothing to wait for."""
    ready = os.environ.get("ATTNBENCH_CI_SERVICES_READY")
    deadline = time.monotonic() + timeout
    while ready and not os.path.exists(ready) and time.monotonic() < deadline:
        time.sleep(1)


SERVICE_MODULES = ("test_leaderboard_browser.py", "test_slurm.py")  # they wait for them


def _services_last(items: list) -> None:
    """The modules that wait for `.ci/run`'s background services (`wait_for_ci_services`) run
    last: the apt-get of Chromium and the Slurm start-up overlap the rest of the suite instead of
    holding it up part-way (the browser tests, alphabetically at a third, waited 20 s there)."""
    items.sort(key=lambda item: item.path.name in SERVICE_MODULES)  # stable: order kept within


FILE_SECONDS = Path(__file__).with_name("file_seconds.json")  # scripts/slow-tests.py writes it


def _longest_files_first(items: list) -> None:
    """Under pytest-xdist (``--dist loadfile --no-loadscope-reorder``: a file's tests stay on one
    worker, handed out in this order) the files go longest first (`FILE_SECONDS`, measured), so
    that no long file starts last while the other core idles; the AVX2 rerun's file before all
    (its minute and a half of one core, `pytest_collection_finish`, overlaps the other worker's
    tests) and the service modules after all (`_services_last`). A file not measured yet counts
    as short."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    seconds = json.loads(FILE_SECONDS.read_text(encoding="utf-8"))

    def order(item) -> tuple:
        name = item.nodeid.split("::")[0]
        return (
            not name.endswith(AVX2_RERUN.split("::")[0]),
            item.path.name in SERVICE_MODULES,
            -seconds.get(name, 0),
            name,
        )

    items.sort(key=order)  # stable: the tests of one file keep their order


def run_cli(*args: str, env: dict | None = None, cwd: Path | None = None, timeout: float = 300):
    """Run one of attnbench's console scripts from this environment; returns CompletedProcess.
    Forked from a process that has imported torch (`forkserver`): the same run, two seconds
    of imports fewer."""
    exe = shutil.which(args[0], path=str(BIN)) or args[0]
    full_env = {**os.environ, "HYDRA_FULL_ERROR": "0", **(env or {})}
    return forkserver.run(
        [exe, *args[1:]], env=full_env, cwd=cwd or REPO, timeout=timeout, scripts=BIN
    )


@contextlib.contextmanager
def failed_build(monkeypatch, load):
    """A compiled kernel whose build fails (torch's ``load`` raises, as without a compiler):
    ``load()`` must warn once, naming the error, and return False; the body then runs with
    warnings as errors, so a second warning fails it. ``load`` is the kernel's cached loader,
    cleared before and after."""
    import torch.utils.cpp_extension as cpp_extension

    def fail(**_):
        raise RuntimeError("no compiler here")

    load.cache_clear()
    monkeypatch.setattr(cpp_extension, "load", fail)
    try:
        with pytest.warns(RuntimeWarning, match="no compiler here"):
            assert not load()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no second warning
            yield
    finally:
        load.cache_clear()


@pytest.fixture(params=["tile kernel", "torch path"])
def tile_kernel_or_not(request, monkeypatch):
    """Runs a test twice: with the compiled tile kernel where this machine builds it, and with
    it declined, so that the SDPA and flash paths it replaces stay tested too."""
    if request.param == "torch path":
        from attnbench.variants.kernels import tile as tile_kernel

        monkeypatch.setattr(tile_kernel, "_load", lambda: False)
    return request.param


@pytest.fixture(autouse=True)
def _deterministic():
    """Each test starts as a CPU job does (`harness.jobs.job`): the global seed set and denormal
    floats flushed to zero. Unflushed, a peaked softmax's probabilities and gradients fall into
    the denormal range and run many times slower (an MQAR test's softmax trained in 16.8 s
    against 9.3 flushed; the attention system at d = 100, 24 times), which no job ever sees."""
    torch.manual_seed(0)
    torch.set_flush_denormal(True)
    yield
    torch.set_flush_denormal(False)  # a fresh process's setting


REFERENCE = REPO / "results" / "reference"


def reference_files() -> list[Path]:
    """The committed reference's files: what git tracks under ``results/reference`` (its records
    and table) and any file there git does not ignore (a record a test would add); outside a git
    checkout, the table and the records. Not the board that ``attnbench-leaderboard
    results/reference`` builds beside them, which git ignores: a reader may build it while the
    suite runs."""
    try:
        listed = subprocess.run(
            [
                "git",
                "-C",
                str(REPO),
                "ls-files",
                "-zco",
                "--exclude-standard",
                "--",
                "results/reference",
            ],
            capture_output=True,
            check=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        listed = b""
    if listed:
        return [REPO / name for name in listed.decode().split("\0") if name]
    return [REFERENCE / "results.parquet", *sorted((REFERENCE / "runs").glob("*.json"))]


def _reference_state() -> dict[str, tuple[int, int] | None]:
    def stamp(path: Path) -> tuple[int, int] | None:
        try:
            stat = path.stat()
        except OSError:
            return None
        return stat.st_size, stat.st_mtime_ns

    return {str(p): stamp(p) for p in reference_files()}


@pytest.fixture(scope="session", autouse=True)
def _the_committed_reference_is_only_read():
    """No test writes into the committed reference (reading it must not re-collect it): the run
    fails at its end, naming the files, if one did. Only the committed files count
    (`reference_files`)."""
    before = _reference_state()
    yield
    after = _reference_state()
    changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
    assert not changed, f"the tests changed the committed reference: {changed[:5]}"


@pytest.fixture(scope="session")
def reference_as_current(tmp_path_factory) -> Path:
    """A copy of the committed reference whose records claim the installed code (each record's
    module digests restamped with the installed modules', its fingerprint recombined), collected:
    every run current. For the tests of what the board does with a full sweep (its words, colours,
    ranks), which must not lose their subject when a change of code leaves the committed records
    history until the reference is regenerated; the committed folder itself is only read."""
    folder = tmp_path_factory.mktemp("reference-as-current")
    (folder / "runs").mkdir()
    digests: dict[str, str | None] = {}

    def installed(module: str) -> str | None:
        if module not in digests:
            try:
                digests[module] = module_digest(module)
            except Exception:
                digests[module] = None
        return digests[module]

    for path in sorted((REFERENCE / "runs").glob("*.json")):
        record = json.loads(path.read_text())
        modules = record.get("code_modules") or {}
        if modules:  # a module of the record's code that is gone (moved, merged) is dropped
            now = {m: installed(m) for m in modules}
            record["code_modules"] = {m: d for m, d in now.items() if d is not None}
            record["code_fingerprint"] = combined_digest(record["code_modules"])
        (folder / "runs" / path.name).write_text(json.dumps(record))
    from attnbench.harness.results.collect import collect

    collect(folder)
    return folder


def chart_view(figure: dict, label: str) -> list[dict]:
    """The traces a merged chart (`harness.leaderboard.charts.merged_figure`) shows when its
    menu picks the view whose label contains ``label``; every trace of a chart without a menu."""
    menus = figure.get("layout", {}).get("updatemenus") or []
    if not menus:
        return list(figure["data"])
    (button,) = [b for b in menus[0]["buttons"] if label in b["label"]]
    shown = button["args"][0]["visible"]
    return [t for t, v in zip(figure["data"], shown, strict=True) if v]


AVX2_RERUN = "test_theory_on_avx2.py::test_every_theory_claim_holds_on_avx2_kernels_too"


SLOW_TESTS = Path(__file__).with_name("slow_tests.json")  # scripts/slow-tests.py writes it


def _mark_measured_slow(items: list) -> None:
    """Mark ``slow`` the tests measured over a second (`SLOW_TESTS`), besides those marked in
    their files, so that ``pytest -m "not slow"`` is the quick subset (docs/index.md)."""
    measured = json.loads(SLOW_TESTS.read_text(encoding="utf-8"))
    for item in items:
        if item.nodeid in measured or item.path.name in SERVICE_MODULES:
            item.add_marker(pytest.mark.slow)  # SERVICE_MODULES: a browser, a cluster


def pytest_collection_modifyitems(config, items):
    _mark_measured_slow(items)  # before -m deselects (pytest's own hook runs after conftest's)
    _services_last(items)
    _longest_files_first(items)


def pytest_collection_finish(session):
    """Start the theory tests' AVX2 rerun in the background when it is among the tests this
    session runs (`test_theory_on_avx2.start`): a minute and a half of one core that the suite
    leaves idle, instead of a minute and a half at its end."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # every worker collects every test: the one that runs it starts the rerun
    if any(item.nodeid.endswith(AVX2_RERUN) for item in session.items):
        import test_theory_on_avx2

        test_theory_on_avx2.start()


def pytest_sessionfinish(session):
    """A rerun that no test waited for (the session stopped early) is ended."""
    module = sys.modules.get("test_theory_on_avx2")
    if module is not None:
        module.stop()


def counted_flops(
    variant,
    causal: bool,
    backward: bool,
    math: bool = True,
    kv_heads: int = 4,
    *,
    heads: int = 4,
    n: int = 1024,
    d: int = 32,
    seed: int = 0,
) -> tuple[float, float]:
    """Products `FlopCounterMode` counts in one forward (and backward) of ``variant``, batch 1,
    ``heads`` query heads, keys and values of ``kv_heads``, n positions of width d, unit-normal
    inputs (and raw gates, `attnbench.variant.random_gates`, which run no products) from
    ``seed``; with ``math``, SDPA restricted to its math backend, whose products the counter
    sees (its flash kernel's it does not)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from attnbench.variant import random_gates

    def backends():  # a fresh context each time: the default backends, or the math one
        return sdpa_kernel(SDPBackend.MATH) if math else contextlib.nullcontext()

    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, heads, n, d, generator=gen).requires_grad_(True)
    k, v = (torch.randn(1, kv_heads, n, d, generator=gen).requires_grad_(True) for _ in range(2))
    gated = {}
    if variant.gates:
        gated["gates"] = random_gates(variant, 1, n, head_dim=d, kv_heads=kv_heads, generator=gen)
    with backends(), FlopCounterMode(display=False) as forward_count:
        out = variant(q, k, v, causal=causal, **gated)
    if not backward:
        return forward_count.get_total_flops(), 0.0
    with backends(), FlopCounterMode(display=False) as backward_count:
        out.backward(torch.ones_like(out))
    return forward_count.get_total_flops(), backward_count.get_total_flops()


class ScaledGradient(torch.autograd.Function):
    """The identity forward; a backward scaled by ``factor`` in float32 only, exact in float64,
    as a fast kernel's bug is absent from its reference: ``ScaledGradient.apply(x, 1.01)``."""

    @staticmethod
    def forward(ctx, x, factor):
        ctx.factor = factor if x.dtype == torch.float32 else 1.0
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.factor, None
