"""A power cut, simulated through the store's one I/O layer (SQLite's crash-test VFS model).

:class:`RecordingIO` is a :class:`~kachedb_radix.reference.tiers.disk_io.DiskIO` that makes
every call for real, on a real folder, and records each one that changes what a disk
would keep: a write (its file, offset and bytes), a size change, a file's flush
(``fsync``/``fdatasync``), a name made, linked, renamed or removed, a flush of the folder.
Files are followed by inode (a number of ours), names separately, as a file system keeps
them.

:meth:`RecordingIO.image` then builds, for a power cut after any recorded call, a folder a
restarted machine could find:

* **names**: those the last flush of the folder made durable, then a random prefix of the
  name changes since (a journaling file system commits its metadata in order, so a later
  rename never lands without an earlier one);
* **each named file's bytes**: per 512-byte sector, any version the sector had since the
  file's last flush -- writes reach the platter in any order, and a write of several
  sectors may stop anywhere -- and a size among those since that flush. That is more
  than real devices do (they keep a sector's versions in order, and many keep whole 4 KiB
  pages), so passing it is the stronger claim;
* **processes**: none survives a power cut, so :class:`Rebooted` -- the I/O layer the
  checks reopen the image with -- reports every creator dead (the leftover files of
  creators are then removed at the next open, as after a real reboot).

The tests in ``test_disk_powerloss.py`` drive a store, a creation and a whole KV cache
through it and hold every image to what ``sync()`` promises.
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from kachedb_radix.reference.tiers.disk_io import DiskIO

SECTOR = 512
Bytes = npt.NDArray[np.uint8]


@dataclass(frozen=True)
class Write:
    inode: int
    offset: int
    data: bytes


@dataclass(frozen=True)
class Resize:
    inode: int
    size: int


@dataclass(frozen=True)
class Flush:
    inode: int


@dataclass(frozen=True)
class Name:
    """A directory change: ``name`` now names ``inode`` (None: ``name`` is gone)."""

    name: str
    inode: int | None


@dataclass(frozen=True)
class FlushFolder:
    pass


Event = Write | Resize | Flush | Name | FlushFolder


class Rebooted(DiskIO):
    """The real system calls, after a power cut: every process recorded before is gone."""

    def process_alive(self, pid: int) -> bool:
        return False


@dataclass
class RecordingIO(DiskIO):
    """The real calls on ``folder``, each change recorded (see the module docstring).

    The files already in ``folder`` are the starting state, durable. ``skip_fsync``
    plants a bug for the simulation's own test: ``fsync`` does nothing (``fdatasync``
    still flushes), so a creator links a file whose bytes may not be on the disk.
    """

    folder: Path
    skip_fsync: bool = False
    events: list[Event] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._names: dict[str, int] = {}  # live names -> inode
        self._base: dict[int, bytes] = {}  # inode -> its bytes when recording began
        self._fds: dict[int, int] = {}  # open descriptor -> inode
        for number, name in enumerate(sorted(os.listdir(self.folder))):
            self._names[name] = number
            self._base[number] = (self.folder / name).read_bytes()
        self._next = len(self._base)
        self._durable_names = dict(self._names)

    # -- the recorded calls ---------------------------------------------------------

    def _name(self, path: str | os.PathLike[str]) -> str:
        where = Path(path)
        assert where.parent == self.folder, f"{where} is outside the recorded folder"
        return where.name

    def open(self, path: str | os.PathLike[str], flags: int, mode: int = 0o644) -> int:
        name = self._name(path)
        fd = super().open(path, flags, mode)
        if name not in self._names:  # made by this open
            self._names[name] = self._next
            self._base[self._next] = b""
            self.events.append(Name(name, self._next))
            self._next += 1
        self._fds[fd] = self._names[name]
        return fd

    def close(self, fd: int) -> None:
        super().close(fd)
        self._fds.pop(fd, None)

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        done = super().pwrite(fd, data, offset)
        self.events.append(Write(self._fds[fd], offset, bytes(memoryview(data)[:done])))
        return done

    def allocate(self, fd: int, size: int) -> None:
        super().allocate(fd, size)
        self.events.append(Resize(self._fds[fd], os.fstat(fd).st_size))

    def fsync(self, fd: int) -> None:
        if self.skip_fsync:
            return
        super().fsync(fd)
        self.events.append(Flush(self._fds[fd]))

    def fdatasync(self, fd: int) -> None:
        super().fdatasync(fd)
        self.events.append(Flush(self._fds[fd]))

    def link(self, source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
        super().link(source, target)
        inode = self._names[self._name(source)]
        self._names[self._name(target)] = inode
        self.events.append(Name(self._name(target), inode))

    def replace(self, source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
        super().replace(source, target)
        inode = self._names.pop(self._name(source))
        self._names[self._name(target)] = inode
        self.events += [Name(self._name(target), inode), Name(self._name(source), None)]

    def unlink(self, path: str | os.PathLike[str]) -> None:
        super().unlink(path)
        self._names.pop(self._name(path))
        self.events.append(Name(self._name(path), None))

    def sync_directory(self, folder: str | os.PathLike[str]) -> None:
        super().sync_directory(folder)
        self.events.append(FlushFolder())

    # -- what a power cut leaves -------------------------------------------------------

    def image(self, cut: int, rng: random.Random, into: Path) -> dict[str, int]:
        """Write into the empty folder ``into`` a state the disk could be in after a power
        cut once the first ``cut`` recorded events had happened; return its names and
        their inodes. O(events + bytes)."""
        events = self.events[:cut]
        names = self._names_after(events, rng)
        for name, inode in names.items():
            (into / name).write_bytes(self._bytes_after(events, inode, rng).tobytes())
        return names

    def _names_after(self, events: Sequence[Event], rng: random.Random) -> dict[str, int]:
        flushed = max((i for i, e in enumerate(events) if isinstance(e, FlushFolder)), default=-1)
        changes = [(i, e) for i, e in enumerate(events) if isinstance(e, Name)]
        durable = [e for i, e in changes if i < flushed]
        pending = [e for i, e in changes if i > flushed]
        names = dict(self._durable_names)
        for change in durable + pending[: rng.randint(0, len(pending))]:
            if change.inode is None:
                names.pop(change.name, None)
            else:
                names[change.name] = change.inode
        return names

    def _bytes_after(self, events: Sequence[Event], inode: int, rng: random.Random) -> Bytes:
        """Inode ``inode``'s bytes after the cut: each sector at any version since the
        file's last flush, at one of the sizes since then (reservoir choices: each version
        equally likely)."""
        mine = [e for e in events if not isinstance(e, Name | FlushFolder) and e.inode == inode]
        flushed = max((i for i, e in enumerate(mine) if isinstance(e, Flush)), default=-1)
        live = bytearray(self._base[inode])
        for event in mine[: flushed + 1]:
            _apply(live, event)
        sizes = [len(live)]
        chosen = bytearray(live)
        seen: dict[int, int] = {}  # sector -> versions seen so far
        for event in mine[flushed + 1 :]:
            _apply(live, event)
            if isinstance(event, Resize):
                sizes.append(event.size)
                if len(chosen) < event.size:
                    chosen.extend(bytes(event.size - len(chosen)))
                continue
            assert isinstance(event, Write)
            end = event.offset + len(event.data)
            if len(chosen) < end:
                chosen.extend(bytes(end - len(chosen)))
            for sector in range(event.offset // SECTOR, -(-end // SECTOR)):
                seen[sector] = seen.get(sector, 1) + 1
                if rng.randrange(seen[sector]) == 0:  # this version, with chance 1/versions
                    low, high = sector * SECTOR, min((sector + 1) * SECTOR, len(live))
                    chosen[low:high] = live[low:high]
        size = rng.choice(sizes)
        return np.frombuffer(bytes(chosen[:size]).ljust(size, b"\0"), np.uint8)


def _apply(live: bytearray, event: Event) -> None:
    if isinstance(event, Resize):
        if len(live) < event.size:
            live.extend(bytes(event.size - len(live)))
        else:
            del live[event.size :]
    elif isinstance(event, Write):
        end = event.offset + len(event.data)
        if len(live) < end:
            live.extend(bytes(end - len(live)))
        live[event.offset : end] = event.data


def fresh_folder(path: Path) -> Path:
    """``path`` as an empty folder. O(files in it)."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path
