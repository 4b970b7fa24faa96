"""A console script's endings that are not errors: the reader of its output leaving, Ctrl-C and
SIGTERM.

A sweep's Ctrl-C (finish the running job, then stop) is the sweep stage's (`harness.sweep.stop`);
these wrap the other commands' ``main``, whose writes are atomic, so that stopping them prints one
line and leaves no traceback. A command that asks for it handles SIGTERM the same way (exit
143): by default SIGTERM ends Python at once, leaving its temporary files and saying nothing.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from attnbench.harness.sweep.outcome import INTERRUPTED, TERMINATED


def quiet_when_the_reader_leaves(main: Callable[..., Any]) -> Callable[..., Any]:
    """A console script's ``main`` that ends quietly when the reader of its output has gone
    (``attnbench-collect | head -1``): Python turns SIGPIPE into ``BrokenPipeError`` at the next
    print, a traceback about nothing the user did wrong. What the command wrote (records, a
    table, a site) stays; stdout is pointed at /dev/null so that the interpreter's last flush
    does not raise again; the status is 141, a shell's for a process ended by SIGPIPE."""

    @functools.wraps(main)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            return main(*args, **kwargs)
        except BrokenPipeError:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return 128 + signal.SIGPIPE

    return wrapped


class Terminated(BaseException):  # noqa: N818 (a control-flow signal, like KeyboardInterrupt)
    """SIGTERM, raised where the command is (`on_ctrl_c` with ``sigterm``), so that its clean-up
    (``finally``: temporary files removed) runs as after Ctrl-C."""


def _raise_terminated(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
    raise Terminated


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """SIGTERM raises `Terminated` while the block runs: in the main thread, and only where
    SIGTERM has its default action (a caller's own handler is left alone)."""
    in_main = threading.current_thread() is threading.main_thread()
    if not in_main or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def on_ctrl_c(
    message: str, sigterm: str | None = None
) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """A command's ``main`` whose Ctrl-C is ``message`` on stderr and exit status 130 instead of
    a traceback; the message says what the command leaves behind (its writes are atomic). With
    ``sigterm``, SIGTERM is handled alike: that message, exit status 143."""

    def decorate(main: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(main)
        def wrapped(*args: Any, **kwargs: Any) -> int:
            handled = _sigterm_raises() if sigterm is not None else contextlib.nullcontext()
            with handled:
                try:
                    return main(*args, **kwargs)
                except KeyboardInterrupt:
                    print(message, file=sys.stderr)
                    return INTERRUPTED
                except Terminated:
                    print(sigterm, file=sys.stderr)
                    return TERMINATED

        return wrapped

    return decorate
