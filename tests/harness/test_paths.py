"""harness.jobs.paths: the reason a path or a write fails, in words."""

from __future__ import annotations

import errno

from attnbench.harness.jobs.paths import NAME_MAX, PATH_MAX, too_long, write_failure


def test_a_name_is_too_long_from_one_byte_over_the_limit():
    assert too_long("/tmp/" + "x" * NAME_MAX) is None
    assert "256 bytes, over the 255" in too_long("/tmp/" + "x" * (NAME_MAX + 1))
    assert "over the 255" in too_long("/tmp/" + "é" * 128)  # 256 bytes in UTF-8, 128 characters


def test_a_path_is_too_long_from_the_system_limit():
    deep = "/tmp" + ("/" + "d" * 200) * (PATH_MAX // 201 + 1)
    assert f"over the {PATH_MAX} a path may have" in too_long(deep)
    assert too_long("/tmp" + ("/" + "d" * 200) * 10) is None


def test_a_full_disk_is_not_called_a_permission_problem():
    full = write_failure(OSError(errno.ENOSPC, "No space left on device"))
    assert full == "No space left on device: the disk is full; free some space and run it again"
    denied = write_failure(OSError(errno.EACCES, "Permission denied"))
    assert denied == "Permission denied; make the folder writable or choose another"
    assert write_failure(OSError(errno.EIO, "Input/output error")) == "Input/output error"
