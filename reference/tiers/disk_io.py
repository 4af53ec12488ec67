"""The system calls under the disk block store, each finishing completely or failing clearly.

Positional reads and writes (``pread``/``pwrite``, ``preadv`` into the caller's buffer), the
file lock, space allocation and the directory sync. Every ``OSError`` leaves as a
:class:`StoreIOError` that names the file and what was being done; a read that comes back
short (the file shrank under an open handle) is one too, rather than a silent short buffer.

Why ``pread``/``pwrite`` and not ``mmap``: safety, not speed. A mapped file that shrinks
under the process raises SIGBUS when touched -- a crash, where a read returns a short count
that this module turns into an error -- and an I/O error on a mapped page is a SIGBUS too.
Speed does not decide it: ``benchmarks/bench_disk.py`` measures a restore through a mapping
on par with ``preadv`` from a cold cache (both are bound by the disk) and faster from a warm
one (16.5 against 9.8-15 GB/s here), a gap that the payload checksum, which a restore
needs either way, hides (``read_into`` warm: 11 GB/s).
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

import numpy as np
import numpy.typing as npt

from .disk_errors import PayloadError, StoreIOError, StoreLockedError


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


def pread_exact(fd: int, path: str, size: int, offset: int, doing: str) -> bytes:
    """``size`` bytes at ``offset`` (a small read: a header). O(size).

    Raises StoreIOError if the read fails or the file ends before ``offset + size``.
    """
    try:
        raw = os.pread(fd, size, offset)
    except OSError as error:
        raise io_error(error, path, doing) from None
    if len(raw) != size:
        raise StoreIOError(errno.EIO, f"{path}: {doing} at byte {offset}: the file shrank")
    return raw


def preadv_exact(fd: int, path: str, view: memoryview, offset: int, doing: str) -> None:
    """Fill ``view`` with the bytes at ``offset``, read straight into it. O(len(view)).

    One system call, unless the kernel splits a read (it does above 2 GiB). Raises
    StoreIOError if a read fails or the file ends first.
    """
    done = 0
    while done < view.nbytes:
        try:
            got = os.preadv(fd, [view[done:]], offset + done)
        except OSError as error:
            raise io_error(error, path, doing) from None
        if got == 0:
            raise StoreIOError(errno.EIO, f"{path}: {doing}: the file ends at {offset + done}")
        done += got


def pwrite_all(fd: int, path: str, data: bytes | memoryview, offset: int, doing: str) -> None:
    """Write all of ``data`` at ``offset``, straight from its memory. O(len(data)).

    One system call, unless the kernel splits a write (it does above 2 GiB). Raises
    StoreIOError if a write fails (the bytes before the failure may have been written).
    """
    view = memoryview(data)
    done = 0
    while done < view.nbytes:
        try:
            done += os.pwrite(fd, view[done:], offset + done)
        except OSError as error:
            raise io_error(error, path, doing) from None


def allocate(fd: int, size: int) -> None:
    """Give the file ``size`` bytes of real space now (``posix_fallocate``), so that a full
    disk shows at creation, not in the middle of a put; on a file system that cannot
    allocate ahead, just set the size (``ftruncate``). O(1) system calls.

    Raises OSError (no space, ...).
    """
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as error:
        if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
        os.ftruncate(fd, size)


def lock(fd: int, path: str, *, shared: bool) -> None:
    """Take the file's ``flock`` without waiting: shared for a reader, exclusive for a
    writer. The kernel releases it when the descriptor closes or the process dies. O(1).

    Raises StoreLockedError if another handle holds a conflicting lock.
    """
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = "a writer holds it" if shared else "another handle holds it"
        raise StoreLockedError(f"{path}: the store is open elsewhere ({holder})") from None


def refuse_if_open_elsewhere(path: str) -> None:
    """Raise StoreLockedError if a handle holds the file at ``path``, whatever the file
    holds (replacing a corrupted store must stay possible). O(1).

    Raises StoreIOError if the file cannot be opened.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as error:
        raise io_error(error, path, "cannot open the file to replace") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise StoreLockedError(f"{path}: cannot replace a store that is open elsewhere") from None
    finally:
        os.close(fd)


def sync_directory(folder: Path) -> None:
    """Make a new name in ``folder`` durable (``fsync`` of the directory). O(1).

    Raises OSError.
    """
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
