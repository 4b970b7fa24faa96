"""End a helper process once the process that started it is gone.

A sweep's joblib workers and the memory probe (`attnbench.toolkit.memory`) are processes a
parent starts and feeds through pipes. ``kill -9`` of that parent sends them nothing, and each
waits on a pipe whose other end it holds itself, so it never sees the end: after a killed quick
sweep a worker of 300 MB (torch imported) ran on until someone found it. Linux's parent-death
signal (``PR_SET_PDEATHSIG``) fires when the *thread* that started the child ends, which a
reused process outlives; so a daemon thread looks at the parent's id instead: an orphan is
adopted by another process (init, or a sub-reaper), and its parent's id changes.
"""

from __future__ import annotations

import os
import signal
import threading
import time

PARENT_POLL_S = 1.0  # how often a helper looks for its parent
_watch: threading.Thread | None = None


def end_with_parent(poll_s: float = PARENT_POLL_S) -> None:
    """In a helper process: end it (``os._exit``, status 128 + SIGTERM) within ``poll_s`` of its
    parent's end. The watching thread takes no lock a job holds (native calls release Python's),
    so it acts inside a long kernel too. Started once per process; later calls do nothing."""
    global _watch
    if _watch is not None:
        return
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(128 + signal.SIGTERM)

    _watch = threading.Thread(target=watch, name="attnbench-parent-watch", daemon=True)
    _watch.start()
