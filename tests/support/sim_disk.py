"""A simulated disk for the metadata log's file seam: only what was fsynced survives power loss.

:class:`SimDisk` implements :class:`metadata.files.OsFiles` in memory with the
guarantees POSIX gives and nothing more:

* file contents become durable at ``fsync(fd)`` of that file;
* directory entries (a created, renamed or removed name) become durable at
  ``fsync_dir`` of their directory, whatever was done to the file's data;
* ``crash_at=N`` makes the N-th mutating operation raise :class:`PowerLoss` before
  it happens (the machine is gone: nothing after it runs);
* ``capacity=N`` is the size of the disk in bytes (file data; names are free): a write
  that does not fit writes what fits and returns the count, one with no room at all
  raises ``ENOSPC``, as ``write(2)`` does.  Assign :attr:`SimDisk.capacity` to free or
  fill the disk.

:meth:`SimDisk.after_power_loss` is the disk the machine finds when it boots
again: the durable directory entries, and in each file its durable bytes plus
``unsynced`` of the bytes written after them ("none": none of them; "half": the
first half, a torn write; "all": every one, as when the page cache happened to
reach the platter).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

__all__ = ["PowerLoss", "SimDisk"]


class PowerLoss(BaseException):
    """The machine lost power (a BaseException: nothing may catch it as an error)."""


class _Inode:
    __slots__ = ("data", "durable")

    def __init__(self) -> None:
        self.data = bytearray()
        self.durable = b""


class _Dir:
    __slots__ = ("entries", "durable")

    def __init__(self) -> None:
        self.entries: dict[str, object] = {}  # name -> _Inode or _Dir
        self.durable: dict[str, object] = {}


class SimDisk:
    O_APPEND = os.O_APPEND
    O_CREAT = os.O_CREAT
    O_EXCL = os.O_EXCL
    O_TRUNC = os.O_TRUNC

    def __init__(self, root: Path, *, crash_at: int | None = None, capacity: int | None = None) -> None:
        self.root = Path(root)
        self.capacity = capacity
        self.dirs: dict[Path, _Dir] = {self.root: _Dir()}
        self.crash_at = crash_at
        self.ops = 0
        self._fds: dict[int, tuple[_Inode, bool]] = {}
        self._next_fd = 100

    # -- power -----------------------------------------------------------------

    def _step(self) -> None:
        self.ops += 1
        if self.crash_at is not None and self.ops >= self.crash_at:
            raise PowerLoss(f"power lost at operation {self.ops}")

    def after_power_loss(self, unsynced: str = "none") -> "SimDisk":
        disk = SimDisk(self.root)
        disk.dirs = {}
        copies: dict[int, _Inode] = {}

        def inode_after(node: _Inode) -> _Inode:
            if id(node) not in copies:
                copy = _Inode()
                durable = node.durable
                extra = bytes(node.data[len(durable):]) if bytes(node.data[:len(durable)]) == durable else b""
                kept = {"none": b"", "half": extra[: len(extra) // 2], "all": extra}[unsynced]
                copy.data = bytearray(durable + kept)
                copy.durable = bytes(copy.data)
                copies[id(node)] = copy
            return copies[id(node)]

        def dir_after(path: Path, node: _Dir) -> None:
            copy = _Dir()
            disk.dirs[path] = copy
            for name, child in node.durable.items():
                if isinstance(child, _Dir):
                    dir_after(path / name, child)
                    copy.entries[name] = copy.durable[name] = disk.dirs[path / name]
                else:
                    copy.entries[name] = copy.durable[name] = inode_after(child)

        dir_after(self.root, self.dirs[self.root])
        return disk

    # -- paths -----------------------------------------------------------------

    def _parent(self, path: Path) -> _Dir:
        parent = self.dirs.get(Path(path).parent)
        if parent is None:
            raise FileNotFoundError(errno.ENOENT, "no such directory", str(Path(path).parent))
        return parent

    def _inode(self, path: Path) -> _Inode:
        node = self._parent(path).entries.get(Path(path).name)
        if not isinstance(node, _Inode):
            raise FileNotFoundError(errno.ENOENT, "no such file", str(path))
        return node

    # -- the OsFiles interface -----------------------------------------------------

    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        parent = self._parent(path)
        name = Path(path).name
        node = parent.entries.get(name)
        if node is None:
            if not flags & os.O_CREAT:
                raise FileNotFoundError(errno.ENOENT, "no such file", str(path))
            self._step()
            node = parent.entries[name] = _Inode()
        elif flags & os.O_CREAT and flags & os.O_EXCL:
            raise FileExistsError(errno.EEXIST, "file exists", str(path))
        if flags & os.O_TRUNC:
            self._step()
            del node.data[:]
        fd = self._next_fd
        self._next_fd += 1
        self._fds[fd] = (node, bool(flags & os.O_APPEND))
        return fd

    def used(self) -> int:
        """Bytes of file data held: every file with a name, and unlinked ones still open."""
        nodes = {id(n): n for d in self.dirs.values() for n in d.entries.values() if isinstance(n, _Inode)}
        nodes.update((id(n), n) for n, _ in self._fds.values())
        return sum(len(n.data) for n in nodes.values())

    def _room(self, wanted: int) -> int:
        if self.capacity is None:
            return wanted
        room = max(self.capacity - self.used(), 0)
        if room == 0 and wanted:
            raise OSError(errno.ENOSPC, "No space left on device")
        return min(room, wanted)

    def write(self, fd: int, data) -> int:
        self._step()
        node, _append = self._fds[fd]
        fits = self._room(len(data))
        node.data += bytes(data[:fits])
        return fits

    def fsync(self, fd: int) -> None:
        self._step()
        node, _ = self._fds[fd]
        node.durable = bytes(node.data)

    def close(self, fd: int) -> None:
        self._fds.pop(fd)

    def ftruncate(self, fd: int, size: int) -> None:
        self._step()
        node, _ = self._fds[fd]
        del node.data[size:]

    def pread(self, fd: int, n: int, offset: int) -> bytes:
        return bytes(self._fds[fd][0].data[offset:offset + n])

    def pwrite(self, fd: int, data: bytes, offset: int) -> None:
        self._step()
        node, _ = self._fds[fd]
        node.data[offset:offset + len(data)] = data

    def lock(self, fd: int) -> None:
        pass

    def read_bytes(self, path: Path) -> bytes:
        return bytes(self._inode(path).data)

    def listdir(self, path: Path) -> list[str]:
        return sorted(self.dirs[Path(path)].entries)

    def exists(self, path: Path) -> bool:
        path = Path(path)
        if path in self.dirs:
            return True
        parent = self.dirs.get(path.parent)
        return parent is not None and path.name in parent.entries

    def mkdir(self, path: Path) -> None:
        self._step()
        path = Path(path)
        node = self.dirs[path] = _Dir()
        self._parent(path).entries[path.name] = node

    def rename(self, src: Path, dst: Path) -> None:
        self._step()
        node = self._parent(src).entries.pop(Path(src).name)
        self._parent(dst).entries[Path(dst).name] = node

    def unlink(self, path: Path) -> None:
        self._step()
        self._parent(path).entries.pop(Path(path).name, None)

    def fsync_dir(self, path: Path) -> None:
        self._step()
        directory = self.dirs[Path(path)]
        directory.durable = dict(directory.entries)
