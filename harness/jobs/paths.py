"""What is wrong with a path a user gave, in words, before a command reads or writes there.

Python's path checks (``Path.exists``, ``is_dir``) raise instead of answering for a name longer
than the filesystem allows (ENAMETOOLONG), so every command asks `too_long` about the paths on
its command line first and refuses in one sentence; `write_failure` turns the OSError of a write
into the reason and the fix (a full disk is not a permission problem).
"""

from __future__ import annotations

import errno
import os
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


def write_failure(exc: OSError) -> str:
    """The reason a write failed and what to do about it, as the end of a sentence."""
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"{reason}: the disk is full; free some space and run it again"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"{reason}; make the folder writable or choose another"
    if exc.errno == errno.ENAMETOOLONG:
        return f"{reason}; choose a shorter path"
    return reason
