"""The file operations the metadata log performs, behind one seam.

:class:`OsFiles` is the real thing (``os`` calls on file descriptors and paths).
The directory store (:mod:`metadata.directory`) does every open, write, fsync,
rename, unlink and directory listing through an instance of it, so a test can put
a simulated disk in its place, one that keeps only what was fsynced (file contents
and directory entries) and can lose power at any operation.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

__all__ = ["OsFiles", "OS_FILES"]


class OsFiles:
    """File operations on the real file system."""

    O_APPEND = os.O_APPEND
    O_CREAT = os.O_CREAT
    O_EXCL = os.O_EXCL
    O_TRUNC = os.O_TRUNC

    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        """``flags``: os.O_RDONLY/O_WRONLY/O_RDWR plus the O_* above; O_CLOEXEC is always added."""
        return os.open(path, flags | os.O_CLOEXEC, mode)

    def write(self, fd: int, data: bytes | bytearray | memoryview) -> int:
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def close(self, fd: int) -> None:
        os.close(fd)

    def ftruncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def pread(self, fd: int, n: int, offset: int) -> bytes:
        return os.pread(fd, n, offset)

    def pwrite(self, fd: int, data: bytes, offset: int) -> None:
        os.pwrite(fd, data, offset)

    def lock(self, fd: int) -> None:
        """An exclusive, non-blocking lock (OSError EWOULDBLOCK when another process holds it)."""
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def read_bytes(self, path: Path) -> bytes:
        return path.read_bytes()

    def listdir(self, path: Path) -> list[str]:
        return os.listdir(path)

    def exists(self, path: Path) -> bool:
        return path.exists()

    def mkdir(self, path: Path) -> None:
        path.mkdir(parents=True)

    def rename(self, src: Path, dst: Path) -> None:
        os.rename(src, dst)

    def unlink(self, path: Path) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    def fsync_dir(self, path: Path) -> None:
        """Make the directory's entries (created, renamed, removed names) durable."""
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


OS_FILES = OsFiles()
