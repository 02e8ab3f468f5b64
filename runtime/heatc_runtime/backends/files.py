"""Reading input files without trusting them: a regular file (not a device, a FIFO or a
directory), of a bounded size, checked before a byte is read — so that `/dev/zero`, a
FIFO nobody writes, or a 2 GB sparse file is refused at once instead of exhausting memory
or hanging. Used by the runtime's loader and by the compiler for heatmaps, rule files and
tokenizers.

Public surface: `read_file(path, limit, size=None, follow_links=True)`, `plain_name(name)`,
`UnreadableFile`, `WrongSize`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class UnreadableFile(Exception):  # noqa: N818 (reads as what it says)
    """A file refused before (or while) reading it. The message, without the path, is the
    reason alone: "a FIFO, not a regular file", "No such file or directory"."""


class WrongSize(UnreadableFile):
    """A file whose size is not the one it should have."""


def read_file(path: str | Path, limit: int, size: int | None = None, follow_links: bool = True) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (exactly `size`, when given).
    With `follow_links` false a symbolic link is refused."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)  # (non-blocking: a FIFO opens at once)
    if not follow_links:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if not follow_links and os.path.islink(path):
            raise UnreadableFile("a symbolic link, not a regular file") from None
        raise UnreadableFile(e.strerror or str(e)) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnreadableFile(f"{_kind(info.st_mode)}, not a regular file")
        if size is not None and info.st_size != size:
            raise WrongSize(f"size mismatch ({info.st_size:,} bytes, its manifest says {size:,})")
        if info.st_size > limit:
            raise UnreadableFile(f"{info.st_size:,} bytes, more than the {limit:,} it may have")
        os.set_blocking(fd, True)
        with open(fd, "rb", closefd=False) as f:
            data = f.read(info.st_size + 1)  # one byte past the size: a file that grows is noticed
        if len(data) != info.st_size:
            raise UnreadableFile("changed size while it was read")
        return data
    except OSError as e:
        raise UnreadableFile(e.strerror or str(e)) from None
    finally:
        os.close(fd)


def plain_name(name: object) -> bool:
    """A file name alone — no directory part, no `..` — as a manifest names its artifacts."""
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and not any(c in name for c in "/\\\0")
        and Path(name).name == name
    )


def _kind(mode: int) -> str:
    for test, what in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return what
    return "a special file"
