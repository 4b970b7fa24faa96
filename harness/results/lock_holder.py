"""Who holds a results folder's collection lock, and for how long, in words.

The lock itself is an advisory file lock (``.collect.lock``, `harness.results.collect`): the
system releases it when its holder ends, however it ends, so a collector never waits on a dead
one. It does wait on a live one, and a live one may never finish: a collector stopped with Ctrl-Z
or SIGSTOP, or hung on a network folder, holds the lock until it is resumed or ended. A collector
that has waited longer than a collection takes says so, naming the holder and since when, so that
the user can resume or end it, rather than wait in silence.

The lock file says nothing of its holder, so each holder leaves a note beside it once it has the
lock (`note_holder`: ``.collect.lock.holder``, a small JSON object: process id, host name,
command, start of the hold) and removes it on release (`clear_note`). A note whose process is gone
(its holder killed before it could remove it) or of another host whose processes this one cannot
see is said as what it is.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

NOTE_SUFFIX = ".holder"


def note_path(lock: Path) -> Path:
    """The holder's note beside the lock file ``lock``."""
    return lock.with_name(lock.name + NOTE_SUFFIX)


def note_holder(lock: Path) -> None:
    """Leave this process's note beside ``lock``, which it now holds (written to a temporary file
    and renamed, so a reader sees a whole note). A folder that cannot take it (read-only) gets
    none: the note is for a waiting collector's message, never a reason to fail."""
    command = Path(sys.argv[0]).name if sys.argv else ""
    note = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": command if command and not command.startswith("-") else "python",  # -c
        "since": time.time(),
    }
    with contextlib.suppress(OSError):
        fd, tmp = tempfile.mkstemp(dir=lock.parent, prefix=f".{lock.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(note, f)
            os.replace(tmp, note_path(lock))
        finally:
            Path(tmp).unlink(missing_ok=True)


def clear_note(lock: Path) -> None:
    """Remove this process's note beside ``lock`` before releasing it (another's is left)."""
    with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
        if json.loads(note_path(lock).read_text(encoding="utf-8")).get("pid") == os.getpid():
            note_path(lock).unlink()


def _duration(seconds: float) -> str:
    """``42 s``, ``3 min 5 s``, ``2 h 4 min``."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def _process_state(pid: int) -> str | None:
    """The state letter of process ``pid`` on this host (Linux's /proc: R, S, D, T stopped, …);
    None where it cannot be read (no /proc, another OS) or the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = text.rpartition(")")[2].split()  # after the command name, which may hold spaces
    return fields[0] if fields else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # exists, another user's (or a pid this system cannot hold: not ours to say)
    return True


def describe_holder(lock: Path, now: float | None = None) -> str:
    """Who holds ``lock``, as the end of a sentence: "held by process 1234 (attnbench-collect)
    on host h for 2 min 5 s, stopped (…)", or what is known where its holder left no note."""
    now = time.time() if now is None else now
    try:
        note = json.loads(note_path(lock).read_text(encoding="utf-8"))
        pid, host, command = int(note["pid"]), str(note["host"]), str(note["command"])
        since = float(note["since"])
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return (
            f"held by a process that left no note of itself ({note_path(lock).name}: an older "
            "attnbench, or another tool); find it with `fuser` or `lsof` on the lock file"
        )
    here = host == socket.gethostname()
    if here and not _alive(pid):
        return (
            f"held by a process that left no note of itself (the note names process {pid}, "
            "which has ended); find it with `fuser` or `lsof` on the lock file"
        )
    holder = f"held by process {pid} ({command}) on host {host} for {_duration(now - since)}"
    if here and _process_state(pid) in ("T", "t"):
        return (
            f"{holder}, which is stopped (Ctrl-Z or SIGSTOP): resume it (`fg` in its shell, or "
            f"kill -CONT {pid}) or end it (kill {pid})"
        )
    return f"{holder}; it ends when that collection does (or end it: kill {pid})"
