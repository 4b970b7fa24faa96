"""The tests' console-script runs, forked from a process that has already imported their libraries.

A console script spends about two seconds of CPU importing torch, numpy, pandas and Hydra before it
reads its command line, and the suite runs over a hundred of them. `run` forks each from a
*zygote*: a process of this interpreter that imported those libraries once and has run nothing
since (no OpenMP region: a fork after one leaves the child's thread pool unusable). The child then
is the command's process: its arguments, environment, working folder and standard streams (stdin
empty, stdout and stderr to files), the console script executed as the interpreter executes a
script (`runpy.run_path` as ``__main__``), and its end as the interpreter's: non-daemon threads
joined, ``atexit`` handlers run, streams flushed, the status ``sys.exit`` gave (an uncaught
KeyboardInterrupt ends it by SIGINT, as Python does).

What a fork cannot reproduce runs as a real subprocess instead: a program that is not a console
script of this environment, an environment that changes a variable the libraries read when they
load (OpenMP's, BLAS's, torch's, Python's own, the locale), and any run once the zygote is gone;
every run, where ``ATTNBENCH_TESTS_NO_FORK`` is set.
Tests of signals and of the installed wheel start their processes themselves, as a user does.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import subprocess
import sys
from pathlib import Path

NO_FORK = "ATTNBENCH_TESTS_NO_FORK"  # set: every command a real subprocess (to compare, or debug)
# what the zygote imports: the libraries every console script of ours loads first, and
# torch._dynamo, which torch.optim imports at a process's first optimizer (1.3-1.5 s of CPU in
# every command that trains)
PRELOADED = (
    "torch", "numpy", "pandas", "pyarrow", "pyarrow.parquet", "hydra", "omegaconf", "torch._dynamo",
)  # fmt: skip
# environment variables read when those libraries (or the interpreter) load: a command whose
# environment gives one of them another value than the zygote's runs as a real subprocess
LOAD_TIME_PREFIXES = (
    "OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_", "GOTO", "BLIS_", "ATEN_", "TORCH", "PYTORCH_",
    "PYTHON", "LD_", "MALLOC_", "ARROW_", "CUDA", "LANG", "LC_",
)  # fmt: skip


def _load_time_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(LOAD_TIME_PREFIXES)}


class _Zygote:
    """The zygote process of this (pytest worker) process, and its two pipes."""

    def __init__(self) -> None:
        self.env = dict(os.environ)
        self.proc = subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=self.env,
            cwd=Path(__file__).parent,
        )
        atexit.register(self.close)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.alive():
            self.proc.stdin.close()  # its loop ends at end of input
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def _reply(self, timeout: float | None) -> dict | None:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = self.proc.stdout.readline()
        if not line:
            raise EOFError("the zygote ended")
        return json.loads(line)

    def run(self, argv: list[str], env: dict, cwd: Path, timeout: float, out: Path, err: Path):
        request = {"argv": argv, "env": env, "cwd": str(cwd), "out": str(out), "err": str(err)}
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        self.proc.stdin.flush()
        pid = self._reply(30)["pid"]
        reply = self._reply(timeout)
        if reply is None:  # as subprocess.run: the process killed, then TimeoutExpired
            os.kill(pid, 9)
            self._reply(30)
            raise subprocess.TimeoutExpired(argv, timeout)
        return os.waitstatus_to_exitcode(reply["status"])


_zygote: _Zygote | None = None


def run(argv: list[str], *, env: dict, cwd: Path, timeout: float, scripts: Path):
    """`subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)`,
    forked from the zygote where ``argv[0]`` is a script in ``scripts`` (the module docstring)."""
    global _zygote
    forkable = Path(argv[0]).parent == scripts and Path(argv[0]).is_file()
    forkable = forkable and not os.environ.get(NO_FORK)
    if forkable and (_zygote is None or not _zygote.alive()):
        _zygote = _Zygote()
    if not forkable or _load_time_env(env) != _load_time_env(_zygote.env):
        return subprocess.run(
            argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout
        )
    import tempfile

    with tempfile.TemporaryDirectory(prefix="attnbench-forked-") as folder:
        out, err = Path(folder, "stdout"), Path(folder, "stderr")
        try:
            code = _zygote.run(argv, env, cwd, timeout, out, err)
        except (EOFError, OSError, TypeError, ValueError):  # the zygote died: a real process
            _zygote = None
            return subprocess.run(
                argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout
            )
        return subprocess.CompletedProcess(argv, code, out.read_text(), err.read_text())


# ----- the zygote's side ------------------------------------------------------------------------


def _child(request: dict, channels: tuple[int, int]) -> None:
    """The command's process: never returns (the module docstring)."""
    import runpy
    import threading
    import traceback

    for fd in channels:
        os.close(fd)
    code: object = 0
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        for fd, (path, mode) in enumerate(
            [(os.devnull, os.O_RDONLY), (request["out"], flags), (request["err"], flags)]
        ):
            opened = os.open(path, mode, 0o644)
            os.dup2(opened, fd)
            os.close(opened)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 (the process's own streams)
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")  # noqa: SIM115
        script = request["argv"][0]
        sys.argv = list(request["argv"])
        sys.path[0] = os.path.dirname(script)
        runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        code = stop.code
    except KeyboardInterrupt:
        traceback.print_exc()
        code = "SIGINT"
    except BaseException:  # noqa: BLE001 (what the interpreter does with it: print, status 1)
        traceback.print_exc()
        code = 1
    try:
        threading._shutdown()  # type: ignore[attr-defined]  (the interpreter's own exit steps)
        atexit._run_exitfuncs()
    finally:
        if code is None:
            code = 0
        elif not isinstance(code, int) and code != "SIGINT":
            print(code, file=sys.stderr)
            code = 1
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a stream the command closed
                stream.flush()
        if code == "SIGINT":
            import signal

            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        os._exit(code & 0xFF)


def _serve() -> None:
    """Read requests (JSON lines) on stdin; for each, fork the command, reply its pid, then its
    wait status; end at end of input."""
    import importlib

    for name in PRELOADED:
        importlib.import_module(name)
    requests, replies = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    reader = os.fdopen(requests, "rb")
    for line in reader:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request, (requests, replies))
        os.write(replies, json.dumps({"pid": pid}).encode() + b"\n")
        _, status = os.waitpid(pid, 0)
        os.write(replies, json.dumps({"status": status}).encode() + b"\n")


if __name__ == "__main__":
    _serve()
