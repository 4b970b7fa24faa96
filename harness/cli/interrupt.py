"""A console script's endings that are not errors: the reader of its output leaving, and Ctrl-C.

A sweep's Ctrl-C (finish the running job, then stop) is the sweep stage's (`harness.sweep.stop`);
these wrap the other commands' ``main``, whose writes are atomic, so that stopping them prints one
line and leaves no traceback.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from attnbench.harness.sweep.outcome import INTERRUPTED


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


def on_ctrl_c(message: str) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """A command's ``main`` whose Ctrl-C is ``message`` on stderr and exit status 130 instead of
    a traceback; the message says what the command leaves behind (its writes are atomic)."""

    def decorate(main: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(main)
        def wrapped(*args: Any, **kwargs: Any) -> int:
            try:
                return main(*args, **kwargs)
            except KeyboardInterrupt:
                print(message, file=sys.stderr)
                return INTERRUPTED

        return wrapped

    return decorate
