"""The one I/O layer under the disk block store: every system call it makes, one method each.

:class:`DiskIO` is the store's whole contact with the operating system -- opening, reading,
writing, flushing and locking files, naming them in a directory, asking whether a process
lives. The store and its invariant checker call nothing else, so a subclass that overrides a
method sees (and may fail, delay or record) every such call: the model is SQLite's test VFS,
where faults are injected through the one layer every byte passes. The power-loss
simulation (``tests/tiers/powerloss.py``) records every call through it and rebuilds the
directory a power cut could leave at any point; the fault tests fail chosen calls. The
default, :data:`SYSTEM`, makes the real calls.

Every method raises ``OSError`` as the system call does; the helpers below turn it into a
:class:`StoreIOError` that names the file and what was being done, and a read that comes
back short (the file shrank under an open handle) into one too, rather than a silent short
buffer.

Why ``pread``/``pwrite`` and not ``mmap``: safety, not speed. A mapped file that shrinks
under the process raises SIGBUS when touched -- a crash, where a read returns a short count
that this module turns into an error -- and an I/O error on a mapped page is a SIGBUS too.
Speed does not decide it: ``benchmarks/bench_disk.py`` measures a restore through a mapping
on par with ``preadv`` from a cold cache (both are bound by the disk) and faster from a warm
one (16.5 against 9.8-15 GB/s here), a gap that the payload checksum, which a restore
needs either way, hides (``read_into`` warm: 11 GB/s).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from .disk_errors import PayloadError, StoreIOError, StoreLockedError


class DiskIO:
    """The system calls of the disk block store (see the module docstring).

    Each method is the call of the same name, O(1) system calls; ``allocate`` and
    ``sync_directory`` are the two that are more than one call. Every method may raise
    ``OSError``.
    """

    def open(self, path: str | os.PathLike[str], flags: int, mode: int = 0o644) -> int:
        """``os.open``: a descriptor for the file at ``path``."""
        return os.open(path, flags, mode)

    def close(self, fd: int) -> None:
        """``os.close``."""
        os.close(fd)

    def size(self, fd: int) -> int:
        """The file's size in bytes (``fstat``)."""
        return os.fstat(fd).st_size

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        """``os.pread``: up to ``size`` bytes at ``offset``."""
        return os.pread(fd, size, offset)

    def preadv(self, fd: int, buffers: Sequence[memoryview], offset: int) -> int:
        """``os.preadv``: read into ``buffers`` at ``offset``; the bytes read."""
        return os.preadv(fd, buffers, offset)

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        """``os.pwrite``: write ``data`` at ``offset``; the bytes written."""
        return os.pwrite(fd, data, offset)

    def fsync(self, fd: int) -> None:
        """``os.fsync``: the file's data and metadata durable."""
        os.fsync(fd)

    def fdatasync(self, fd: int) -> None:
        """``os.fdatasync``: the file's data durable (its size never changes after creation)."""
        os.fdatasync(fd)

    def allocate(self, fd: int, size: int) -> None:
        """Give the file ``size`` bytes of real space now (``posix_fallocate``), so that a
        full disk shows at creation, not in the middle of a put; on a file system that
        cannot allocate ahead, just set the size (``ftruncate``)."""
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as error:
            if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            os.ftruncate(fd, size)

    def flock(self, fd: int, operation: int) -> None:
        """``fcntl.flock`` (``BlockingIOError`` when a non-blocking lock is held elsewhere)."""
        fcntl.flock(fd, operation)

    def advise(self, fd: int, offset: int, length: int, advice: int) -> None:
        """``os.posix_fadvise``: a hint about the reads to come."""
        os.posix_fadvise(fd, offset, length, advice)

    def exists(self, path: str | os.PathLike[str]) -> bool:
        """Whether a name ``path`` exists (``lstat``)."""
        return os.path.lexists(path)

    def link(self, source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
        """``os.link``: a second name; ``FileExistsError`` if ``target`` exists."""
        os.link(source, target)

    def replace(self, source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
        """``os.replace``: rename, atomically replacing ``target``."""
        os.replace(source, target)

    def unlink(self, path: str | os.PathLike[str]) -> None:
        """``os.unlink``."""
        os.unlink(path)

    def listdir(self, folder: str | os.PathLike[str]) -> list[str]:
        """``os.listdir``: the names in ``folder``."""
        return os.listdir(folder)

    def sync_directory(self, folder: str | os.PathLike[str]) -> None:
        """Make the names in ``folder`` durable (``fsync`` of the directory)."""
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def process_alive(self, pid: int) -> bool:
        """Whether a process ``pid`` exists (signal 0; one we may not signal exists too)."""
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


#: The real system calls: what every store uses unless given another layer.
SYSTEM = DiskIO()


def io_error(error: OSError, path: str, doing: str) -> StoreIOError:
    """``error`` as a :class:`StoreIOError` naming the file and what was being done. O(1)."""
    reason = error.strerror or str(error)
    return StoreIOError(error.errno or errno.EIO, f"{path}: {doing}: {reason}")


def array_view(array: npt.NDArray[np.uint8]) -> memoryview:
    """A byte array's memory as a ``memoryview`` (no copy). O(1)."""
    return memoryview(array)  # type: ignore[arg-type]  # NumPy's stubs declare the buffer protocol from 3.12


def byte_view(buffer: object, role: str, size: int, *, writable: bool) -> memoryview:
    """``buffer`` as a flat, C-contiguous ``memoryview`` of bytes, without copying. O(1).

    A NumPy array of any dtype (bf16 and fp8 included, whose buffer format Python may not
    know) is reinterpreted as bytes. Raises :class:`PayloadError` naming ``role`` if
    ``buffer`` is not a buffer, not C-contiguous, read-only when ``writable`` is asked, or
    not exactly ``size`` bytes.
    """
    if isinstance(buffer, np.ndarray):
        contiguous, readonly = buffer.flags.c_contiguous, not buffer.flags.writeable
        nbytes = buffer.nbytes
    else:
        try:
            view = memoryview(buffer)  # type: ignore[arg-type]  # any buffer; see the except
        except TypeError:
            raise PayloadError(
                f"{role} must be bytes, a NumPy array or another buffer, "
                f"got {type(buffer).__name__}"
            ) from None
        contiguous, readonly, nbytes = view.c_contiguous, view.readonly, view.nbytes
    if not contiguous:
        raise PayloadError(f"{role} must be C-contiguous (a copy would hide a cost)")
    if writable and readonly:
        raise PayloadError(f"{role} must be writable")
    if nbytes != size:
        raise PayloadError(f"{role} has {nbytes} bytes; the store's blocks have {size}")
    if isinstance(buffer, np.ndarray):
        return array_view(buffer.reshape(-1).view(np.uint8))
    return view if view.ndim == 1 and view.format == "B" else view.cast("B")


def pread_exact(io: DiskIO, fd: int, path: str, size: int, offset: int, doing: str) -> bytes:
    """``size`` bytes at ``offset`` (a small read: a header). O(size).

    Raises StoreIOError if the read fails or the file ends before ``offset + size``.
    """
    try:
        raw = io.pread(fd, size, offset)
    except OSError as error:
        raise io_error(error, path, doing) from None
    if len(raw) != size:
        raise StoreIOError(errno.EIO, f"{path}: {doing} at byte {offset}: the file shrank")
    return raw


def preadv_exact(io: DiskIO, fd: int, path: str, view: memoryview, offset: int, doing: str) -> None:
    """Fill ``view`` with the bytes at ``offset``, read straight into it. O(len(view)).

    One system call, unless the kernel splits a read (it does above 2 GiB). Raises
    StoreIOError if a read fails or the file ends first.
    """
    done = 0
    while done < view.nbytes:
        try:
            got = io.preadv(fd, [view[done:]], offset + done)
        except OSError as error:
            raise io_error(error, path, doing) from None
        if got == 0:
            raise StoreIOError(errno.EIO, f"{path}: {doing}: the file ends at {offset + done}")
        done += got


def pwrite_all(
    io: DiskIO, fd: int, path: str, data: bytes | memoryview, offset: int, doing: str
) -> None:
    """Write all of ``data`` at ``offset``, straight from its memory. O(len(data)).

    One system call, unless the kernel splits a write (it does above 2 GiB). Raises
    StoreIOError if a write fails (the bytes before the failure may have been written).
    """
    view = memoryview(data)
    done = 0
    while done < view.nbytes:
        try:
            done += io.pwrite(fd, view[done:], offset + done)
        except OSError as error:
            raise io_error(error, path, doing) from None


def lock(io: DiskIO, fd: int, path: str, *, shared: bool) -> None:
    """Take the file's ``flock`` without waiting: shared for a reader, exclusive for a
    writer. The kernel releases it when the descriptor closes or the process dies. O(1).

    Raises StoreLockedError if another handle holds a conflicting lock.
    """
    try:
        io.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = "a writer holds it" if shared else "another handle holds it"
        raise StoreLockedError(f"{path}: the store is open elsewhere ({holder})") from None


def refuse_if_open_elsewhere(io: DiskIO, path: str) -> None:
    """Raise StoreLockedError if a handle holds the file at ``path``, whatever the file
    holds (replacing a corrupted store must stay possible). O(1).

    Raises StoreIOError if the file cannot be opened.
    """
    try:
        fd = io.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as error:
        raise io_error(error, path, "cannot open the file to replace") from None
    try:
        io.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise StoreLockedError(f"{path}: cannot replace a store that is open elsewhere") from None
    finally:
        io.close(fd)


def temporary_name(target: Path, pid: int, tag: str) -> Path:
    """The name a creator writes ``target`` under before linking it into place:
    ``.NAME.PID.TAG.new`` beside it (``PID`` the creator's, ``TAG`` 8 random hex digits).
    O(1)."""
    return target.with_name(f".{target.name}.{pid}.{tag}.new")


def remove_leftovers(io: DiskIO, target: Path) -> tuple[str, ...]:
    """Remove the temporary files (:func:`temporary_name`) that dead creators of ``target``
    left behind; return their names. O(files in the folder) system calls.

    A creator holds an exclusive ``flock`` on its temporary file from the moment it exists
    until it is linked into place, and the kernel drops that lock when the creator dies,
    however it dies. A leftover is removed only when its lock is free *and* the process its
    name records is gone: a live creator keeps its lock (and, in the instant between
    creating the file and locking it, is a live process), so its file is never touched. A
    dead creator whose pid was reused by another process keeps its leftover until that
    process ends too (the cautious side). A file that cannot be listed, opened or locked
    is left alone: cleaning up is a courtesy, never a reason to fail.
    """
    prefix, suffix = f".{target.name}.", ".new"
    try:
        names = io.listdir(target.parent)
    except OSError:
        return ()
    removed: list[str] = []
    for name in sorted(names):
        middle = name[len(prefix) : -len(suffix)] if name.startswith(prefix) else ""
        pid, dot, tag = middle.partition(".")
        if not (name.endswith(suffix) and dot and pid.isdigit() and _is_tag(tag)):
            continue
        leftover = target.with_name(name)
        try:
            fd = io.open(leftover, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            io.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if not io.process_alive(int(pid)):
                io.unlink(leftover)
                removed.append(name)
        except OSError:  # locked by its live creator (BlockingIOError), or not ours to remove
            pass
        finally:
            with contextlib.suppress(OSError):
                io.close(fd)
    return tuple(removed)


def _is_tag(tag: str) -> bool:
    return len(tag) == 8 and all(char in "0123456789abcdef" for char in tag)
