"""What is wrong with a path a user gave, in words, before a command reads or writes there.

Python's path checks (``Path.exists``, ``is_dir``) raise instead of answering for a name longer
than the filesystem allows (ENAMETOOLONG), and answer False for a path through a symbolic link
that leads back into itself (ELOOP) while ``Path.resolve`` raises RuntimeError there, so every
command asks `too_long` and `looping_link` about the paths on its command line first and refuses
in one sentence; `write_failure` turns the OSError of a write into the reason and the fix (a full
disk is not a permission problem). `not_a_file` says what stands where a file belongs: opening a
named pipe to read it waits for a writer forever.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

NAME_MAX = 255  # bytes of one file name on Linux, macOS and Windows filesystems alike
PATH_MAX = 4096  # bytes of a whole path on Linux


def too_long(path: str | os.PathLike) -> str | None:
    """Why ``path`` is too long for the filesystem (a part over `NAME_MAX` bytes, or the whole
    over `PATH_MAX`), or None."""
    absolute = Path(os.path.abspath(path))
    for part in absolute.parts:
        size = len(os.fsencode(part))
        if size > NAME_MAX:
            return (
                f"its part {part[:12]}… is {size} bytes, over the {NAME_MAX} a file name may have"
            )
    size = len(os.fsencode(str(absolute)))
    if size >= PATH_MAX:
        return f"it is {size} bytes, over the {PATH_MAX} a path may have"
    return None


def looping_link(path: str | os.PathLike) -> str | None:
    """Why ``path`` cannot be reached because a symbolic link on it leads back into itself
    (ELOOP: ``ln -s loop loop``, or a ``runs/`` linking to itself), naming that link; else None.

    Asked before anything else touches the path: Python's own checks would call such a path
    missing (``exists``) or raise RuntimeError (``resolve``), and Hydra's ``mkdir`` raises ELOOP.
    """
    if _stat_errno(path) != errno.ELOOP:
        return None
    parts = Path(path).parts
    for i in range(1, len(parts) + 1):
        prefix = Path(*parts[:i])
        if _stat_errno(prefix) == errno.ELOOP:
            return f"{prefix} is a symbolic link that leads back into itself"
    return "a symbolic link on it leads back into itself"


def _stat_errno(path: str | os.PathLike) -> int | None:
    """The errno of ``os.stat(path)``, or None where it succeeds."""
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno
    except ValueError:  # a NUL byte: not a path at all, which the callers' other checks say
        return None
    return None


def not_a_file(path: str | os.PathLike) -> str | None:
    """What ``path`` is, where a regular file belongs ("a named pipe", "a folder", …); None for a
    regular file (a link to one included) or nothing there. Asked before a file is opened to be
    read: a named pipe would block the reader until someone writes to it, silently."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def write_failure(exc: OSError, elsewhere: str = "") -> str:
    """The reason a write failed and what to do about it, as the end of a sentence.

    Args:
        elsewhere: How to write somewhere else instead (``results_dir=PATH``), offered beside
            freeing space or fixing permissions; by default "choose another".
    """
    reason = exc.strerror or str(exc)
    other = f"give another folder with {elsewhere}" if elsewhere else "choose another"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        if elsewhere:
            return f"{reason}: the disk is full; free some space or {other}"
        return f"{reason}: the disk is full; free some space and run it again"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"{reason}; make the folder writable or {other}"
    if exc.errno == errno.ENAMETOOLONG:
        return f"{reason}; choose a shorter path"
    if exc.errno == errno.ELOOP:
        return f"{reason}: a symbolic link on the path leads back into itself; fix it or {other}"
    return reason
