"""Kernel configurations chosen on the machine that runs them: measured the first time a shape
class is seen, cached per machine, reused afterwards.

Why: tile sizes, the choice between a compiled kernel and torch's operators, a chunk length, are
constants that are best on the machine they were measured on. Tuned on one 2-core AMD EPYC, the
kernels met every speed target there and missed 11 on an Intel Xeon of the same capability
(issue #57). The GPU world chooses them where they run (Triton's autotune, FlashAttention's
heuristics by architecture); so does this module, on the CPU.

`choose(kernel, shape_class, candidates, probe)`:

- The first time a (kernel, shape class) is seen on a machine, each candidate configuration is
  timed on a probe call (`probe(config)` returns the call; the caller sizes it to a fraction of a
  second) in `ROUNDS` interleaved rounds, each candidate's time the fastest of its rounds (a
  neighbour that slows one round does not decide), and the fastest candidate wins. About a second,
  once per machine.
- The winner is cached in a JSON file per machine (`cache_file`): beside torch's extension build
  cache by default (``ATTNBENCH_TUNING_CACHE`` names another folder), named by the CPU capability
  and a digest of the machine's identity (`machine`: its id, CPU model, capability, torch's
  version). A file whose recorded machine is not this one is never read for choices; a file that
  cannot be parsed is tuned over again, with one warning. Writes are atomic (a temporary file
  renamed into place, under an exclusive lock), so two processes tuning at once lose nothing.
- Inside a timed region (`attnbench.toolkit.timing.timed_region`) nothing is measured: an uncached
  class runs the default configuration (the first candidate) and is tuned at its next call
  outside, so that no timing ever includes a tuning.
- Each call says which configuration ran (`attnbench.toolkit.kernel_path.note_tuned`), so that a
  record names it.

``ATTNBENCH_TUNING=off`` runs every kernel's default configuration and measures nothing (for a
comparison against the defaults, or a machine where a second of tuning matters).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import platform
import socket
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import torch

from attnbench.toolkit.kernel_path import note_tuned
from attnbench.toolkit.timing import in_timed_region
from attnbench.variants.kernels import compiled

CACHE_ENV = "ATTNBENCH_TUNING_CACHE"  # a folder for the tuning files (default: `default_folder`)
SWITCH_ENV = "ATTNBENCH_TUNING"  # "off": default configurations, nothing measured
ROUNDS = 3  # interleaved rounds per tuning; a candidate's time is its fastest round
MIN_ROUND_S = 0.01  # a candidate's round repeats its probe call until this long
FORMAT = 1  # version of the cache file's layout

Config = Mapping[str, object]

_memory: dict[str, dict] = {}  # this process's choices, by entry key
_file: dict[str, dict] | None = None  # the machine's file as this process last read or wrote it
_warned: set[str] = set()


@functools.cache
def machine() -> dict[str, str]:
    """What identifies this machine for a tuning: a choice measured under any other value of
    any of these is not used here (fixed for a process: the capability is read at start)."""
    ident = ""
    for where in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        with contextlib.suppress(OSError):
            ident = Path(where).read_text().strip()
            break
    return {
        "machine": ident or socket.gethostname(),
        "cpu": _cpu_model(),
        "capability": compiled.capability(),
        "torch": torch.__version__,
    }


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def default_folder() -> Path:
    """Beside torch's extension build cache (``TORCH_EXTENSIONS_DIR`` or its default)."""
    from torch.utils import cpp_extension

    root = os.environ.get("TORCH_EXTENSIONS_DIR") or cpp_extension.get_default_build_root()
    return Path(root) / "attnbench-tuning"


def cache_file() -> Path:
    """This machine's tuning file."""
    who = machine()
    digest = hashlib.sha256(json.dumps(who, sort_keys=True).encode()).hexdigest()[:16]
    folder = Path(os.environ.get(CACHE_ENV) or default_folder())
    return folder / f"{who['capability'].lower()}-{digest}.json"


def enabled() -> bool:
    """Whether kernels tune themselves (``ATTNBENCH_TUNING`` is not "off")."""
    return os.environ.get(SWITCH_ENV, "").strip().lower() not in ("off", "0", "false", "no")


def describe(config: Config) -> str:
    """A configuration in words: "query_tile=128, key_tile=512"."""
    return ", ".join(f"{k}={v}" for k, v in config.items())


def choose(
    kernel: str,
    shape_class: Mapping[str, object],
    candidates: Sequence[Config],
    probe: Callable[[Config], Callable[[], object]],
    worth_tuning: bool = True,
) -> Config:
    """The configuration of ``kernel`` to run for ``shape_class`` on this machine (the module
    docstring): cached, or measured now among ``candidates`` (the first is the default) on
    ``probe(config)`` calls. Says which one runs (`note_tuned`). ``worth_tuning`` False (a call
    too small for a second of tuning to pay): the default, nothing measured or cached."""
    if not candidates:
        raise ValueError(f"{kernel}: no candidate configurations to choose from")
    if not worth_tuning:
        note_tuned(kernel, f"{describe(candidates[0])} (default: too small to tune)")
        return candidates[0]
    key = _entry_key(kernel, shape_class)
    entry = _memory.get(key)
    if entry is None and enabled():
        entry = _file_entries().get(key)
        if entry is not None and _config_index(entry, candidates) is None:
            entry = None  # the candidates changed since: tune again
        if entry is None and not in_timed_region():
            entry = _tune(candidates, probe)
            _write_entry(key, entry)
        if entry is not None:
            _memory[key] = entry
    if entry is None:
        config, how = candidates[0], "default" if enabled() else "default, tuning off"
    else:
        config, how = candidates[_config_index(entry, candidates)], "tuned"
    note_tuned(kernel, f"{describe(config)} ({how})")
    return config


CHUNK_TUNE_FROM = 16384  # batch × state heads × positions from which a chunked call is tuned
CHUNK_PROBE_POSITIONS = 2048  # a chunk tuning times the forward on this many positions


def choose_chunk(
    kernel: str,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    chunks: Sequence[int],
    run: Callable[[int], object],
    **flags: object,
) -> int:
    """The chunk length of a chunked form to run on this machine (`choose` among ``chunks``, the
    first the default) for the class of a call on queries ``q`` (B, H, N, D), keys ``k``
    (B, H_kv, M, D) and values ``v``: their widths, heads, dtype, whether M reaches
    `CHUNK_PROBE_POSITIONS`, and the caller's ``flags`` (its form's variants). ``run(chunk)`` is
    the probe call at that length (the caller's tensors cut to `CHUNK_PROBE_POSITIONS`), made
    without autograd. A call of fewer than `CHUNK_TUNE_FROM` positions over batch and state heads,
    or off the CPU, runs the default."""
    b, kv, m, d = k.shape
    shape_class = {
        **flags,
        "d": d,
        "dv": v.shape[-1],
        "state_heads": kv,
        "group": q.shape[1] // kv,
        "dtype": str(k.dtype).removeprefix("torch."),
        "long": m >= CHUNK_PROBE_POSITIONS,
    }

    def probe(config: Config) -> Callable[[], object]:
        def call() -> object:
            with torch.no_grad():
                return run(int(config["chunk"]))  # type: ignore[call-overload]

        return call

    candidates = [{"chunk": c} for c in chunks]
    worth = b * kv * m >= CHUNK_TUNE_FROM and k.device.type == "cpu"
    return int(choose(kernel, shape_class, candidates, probe, worth)["chunk"])  # type: ignore[call-overload]


def _entry_key(kernel: str, shape_class: Mapping[str, object]) -> str:
    threads = torch.get_num_threads()
    parts = [f"{k}={v}" for k, v in sorted(shape_class.items())] + [f"threads={threads}"]
    return f"{kernel}|{'|'.join(parts)}"


def _config_index(entry: Mapping, candidates: Sequence[Config]) -> int | None:
    choice = entry.get("choice")
    for i, config in enumerate(candidates):
        if dict(config) == choice:
            return i
    return None


def _tune(candidates: Sequence[Config], probe: Callable[[Config], Callable[[], object]]) -> dict:
    """Time each candidate in `ROUNDS` interleaved rounds; the fastest round of each decides."""
    calls = [probe(config) for config in candidates]
    for call in calls:
        call()  # warm: first-call costs are not the configuration's
    best = [float("inf")] * len(calls)
    for _ in range(ROUNDS):
        for i, call in enumerate(calls):
            reps, start = 0, time.perf_counter()
            while True:
                call()
                reps += 1
                elapsed = time.perf_counter() - start
                if elapsed >= MIN_ROUND_S:
                    break
            best[i] = min(best[i], elapsed / reps)
    winner = min(range(len(calls)), key=best.__getitem__)
    return {
        "choice": dict(candidates[winner]),
        "ms": {describe(c): round(t * 1e3, 4) for c, t in zip(candidates, best, strict=True)},
        "tuned_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _file_entries() -> dict[str, dict]:
    """The machine's file's entries, read once per process (a class not in it is tuned here and
    written, re-reading the file under its lock): a call that finds no choice, as inside a timed
    region, reads no file."""
    global _file
    if _file is None:
        _file = _read_entries()
    return _file


def _read_entries() -> dict[str, dict]:
    """The entries of this machine's tuning file ({} where there is none, it is another
    machine's, or it cannot be read: one warning, and the file is replaced at the next write)."""
    path = cache_file()
    try:
        text = path.read_text()
    except (FileNotFoundError, NotADirectoryError):
        return {}
    except OSError as error:
        _warn_once(path, f"cannot be read ({error})")
        return {}
    try:
        found = json.loads(text)
        if not isinstance(found, dict) or not isinstance(found.get("entries"), dict):
            raise ValueError("no entries")
    except ValueError as error:
        _warn_once(path, f"is not a tuning file ({error})")
        return {}
    if found.get("machine") != machine() or found.get("format") != FORMAT:
        return {}  # another machine's (a shared home folder) or layout: never used here
    return {k: v for k, v in found["entries"].items() if isinstance(v, dict)}


def _warn_once(path: Path, why: str) -> None:
    if str(path) not in _warned:
        _warned.add(str(path))
        warnings.warn(
            f"the kernel tuning cache {path} {why}; the kernels are tuned again and the file "
            "rewritten.",
            RuntimeWarning,
            stacklevel=4,
        )


def _write_entry(key: str, entry: dict) -> None:
    """Add ``entry`` to this machine's file, atomically, under an exclusive lock (a failed write
    warns once: the choice still holds for this process)."""
    global _file
    path = cache_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(path.with_suffix(".lock")):
            entries = _read_entries()
            entries[key] = entry
            _file = entries
            body = {"format": FORMAT, "machine": machine(), "entries": entries}
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
            try:
                with os.fdopen(fd, "w") as out:
                    json.dump(body, out, indent=1, sort_keys=True)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
    except OSError as error:
        _warn_once(path, f"could not be written ({error}); this process keeps its choices")


@contextlib.contextmanager
def _locked(lock: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # no flock here: the rename alone keeps the file whole
        yield
        return
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def forget() -> None:
    """Drop this process's remembered choices (the file stays): the next `choose` reads the
    file again. For tests, and after ``ATTNBENCH_TUNING_CACHE`` changes."""
    global _file
    _file = None
    _memory.clear()
    _warned.clear()
