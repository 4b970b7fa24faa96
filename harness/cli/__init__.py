"""The command-line entry points: one module per console script, and what they share (``--strict``,
Ctrl-C handling). Each parses its arguments, calls the engine and turns bad input into one
sentence and exit status 2.

The console scripts start here (`start_attnbench`, `start_collect`, … below; not named after
the modules, whose names the package's attributes already are), not in their modules: importing
a command's module takes a second or two (torch, pandas, Hydra), and a Ctrl-C in that time would
otherwise print a ``KeyboardInterrupt`` traceback before the command's own handling exists. This
package imports nothing heavy. Here, too, warnings become one line that names the command and
says the sentence, not a location in attnbench's code.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
import re
import shutil
import signal
import sys
import sysconfig
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

INTERRUPTED = 130  # 128 + SIGINT, as `attnbench.harness.sweep.outcome.INTERRUPTED`


_TORCH_LOCATION = re.compile(r"\s*\(Triggered internally at [^)]*\)\.?$")
_LIBRARY_DIRS = ("site-packages", "dist-packages")


def _users_file(filename: str) -> str | None:
    """``filename`` when it is the user's own code (a script, a plugin on ``PYTHONPATH`` or
    installed editable), so the warning says where it came from; None for code the user did not
    write (attnbench's, the standard library's, an installed package's), whose location means
    nothing to them."""
    path = Path(filename)
    if not path.is_file() or any(part in _LIBRARY_DIRS for part in path.parts):
        return None
    ours, stdlib = Path(__file__).resolve().parents[2], Path(sysconfig.get_paths()["stdlib"])
    resolved = path.resolve()
    if resolved.is_relative_to(ours) or resolved.is_relative_to(stdlib.resolve()):
        return None
    return str(path)


# The folder where the processes of one command note each warning line they printed, and the
# command's name: set by `launch` and inherited by the processes a sweep starts (joblib's workers)
SHOWN = "ATTNBENCH_WARNINGS_SHOWN"
COMMAND = "ATTNBENCH_COMMAND"


def _first_time(line: str) -> bool:
    """Whether no process of this command has printed ``line`` yet (noting it now): a file per
    line, created exclusively, so two workers never both print it. True where no folder is
    set, or it cannot be written (a warning shown twice beats one lost)."""
    folder = os.environ.get(SHOWN)
    if not folder:
        return True
    note = os.path.join(folder, hashlib.sha1(line.encode()).hexdigest())
    try:
        os.close(os.open(note, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    except OSError:
        return True
    return True


def _one_line(prog: str):
    def show(message: Any, category: type, filename: str, lineno: int, file=None, line=None):
        text = _TORCH_LOCATION.sub("", str(message))  # torch's C++ source location
        where = _users_file(filename)
        suffix = f" (from {where})" if where else ""
        shown = f"{prog}: warning: {text}{suffix}"
        if _first_time(shown):
            print(shown, file=file or sys.stderr)

    return show


SHOWN_PREFIX = "attnbench-warnings-"  # then the command's pid


def _remove_folders_of_dead_commands() -> None:
    """The folders `_warnings_shared` left where its command was killed (SIGKILL, a second
    SIGTERM) and could not remove its own: each names its command's pid."""
    for folder in Path(tempfile.gettempdir()).glob(f"{SHOWN_PREFIX}*-*"):
        pid = folder.name.removeprefix(SHOWN_PREFIX).split("-", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except OSError:  # alive, another user's
            continue


@contextlib.contextmanager
def _warnings_shared(prog: str) -> Iterator[None]:
    """While the command runs, the processes it starts print warnings as it does, each line
    once in all: joblib's workers are fresh interpreters, which would print the command's
    warnings again, raw and with code locations, once per worker. The variables
    are the command's alone: removed, with the folder, when it ends."""
    _remove_folders_of_dead_commands()
    folder = tempfile.mkdtemp(prefix=f"{SHOWN_PREFIX}{os.getpid()}-")
    before = {name: os.environ.get(name) for name in (SHOWN, COMMAND)}
    os.environ[SHOWN], os.environ[COMMAND] = folder, prog
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(folder, ignore_errors=True)


def _in_a_command_s_worker() -> None:
    """In a process a command started (`_share_warnings`): the command's one-line warnings,
    and none about plugins that failed to load, which the command itself has reported."""
    if os.environ.get(SHOWN) and os.environ.get(COMMAND):
        warnings.showwarning = _one_line(os.environ[COMMAND])
        warnings.filterwarnings("ignore", message=r"attnbench: .* failed to load and is skipped")


_in_a_command_s_worker()


TRACKER_NOTE = "ignore:resource_tracker:UserWarning"


def quiet_resource_tracker() -> None:
    """Keep the standard library's resource tracker from printing a raw warning at exit.

    A parallel sweep's pool (joblib's) starts that tracker, a process of its own; when Ctrl-C or
    SIGTERM stops the pool, the tracker removes the semaphores it left and says so ("There
    appear to be 2 leaked semaphore objects to clean up at shutdown", with a code location),
    after our own last line. The clean-up is its job and nothing is lost, so the note is noise.
    The tracker is started with the interpreter's ``-W`` options (`sys.warnoptions`), the one
    way to reach its warnings from here."""
    if TRACKER_NOTE not in sys.warnoptions:
        sys.warnoptions.append(TRACKER_NOTE)


def launch(prog: str, module: str, argv: list[str] | None = None) -> Any:
    """Run ``module.main`` as the command ``prog``: a Ctrl-C while it loads is one line and exit
    status 130; its warnings are one line each, prefixed with ``prog``.

    While the command's modules load, a Ctrl-C is noted, not raised: a ``KeyboardInterrupt`` in
    the middle of an import leaves modules half-initialised (numpy without ``ma``, a registry
    imported twice), and code that guards a plugin's import turns it into a false "failed to
    load" warning and runs on. The command stops once the imports are done, before it does
    anything."""
    warnings.showwarning = _one_line(prog)
    quiet_resource_tracker()
    with _warnings_shared(prog):
        return _start(prog, module, argv)


def _start(prog: str, module: str, argv: list[str] | None) -> Any:
    """`launch`'s loading, Ctrl-C noted, then the command."""
    pressed: list[int] = []
    try:
        previous = signal.signal(signal.SIGINT, lambda signum, frame: pressed.append(signum))
    except ValueError:  # not the main thread (a test's runner): leave Ctrl-C as it is
        previous = None
    try:
        main = importlib.import_module(module).main
    except KeyboardInterrupt:  # raised by a handler the imports installed themselves
        pressed.append(signal.SIGINT)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    if pressed:
        print(f"{prog}: interrupted by Ctrl-C while starting; nothing was done.", file=sys.stderr)
        return INTERRUPTED
    return main() if argv is None else main(argv)


def start_attnbench() -> Any:
    return launch("attnbench", "attnbench.harness.cli.app")


def start_collect() -> Any:
    return launch("attnbench-collect", "attnbench.harness.cli.collect")


def start_leaderboard() -> Any:
    return launch("attnbench-leaderboard", "attnbench.harness.cli.leaderboard")


def start_variants() -> Any:
    return launch("attnbench-variants", "attnbench.harness.cli.variants")


def start_compare() -> Any:
    return launch("attnbench-compare", "attnbench.harness.cli.compare")


def start_speed() -> Any:
    """``attnbench-speed``: the speed targets the tasks declare (entry-point group
    ``attnbench.speed_targets``), measured as ratios from one run."""
    return launch("attnbench-speed", "attnbench.harness.cli.speed")
