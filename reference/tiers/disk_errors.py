"""Typed errors of the disk block store (:mod:`kachedb_radix.reference.tiers.disk`).

Every error the store raises on purpose is a :class:`StoreError`, so a caller catches the
whole family with one ``except`` clause. Where a builtin type fits, the class derives from
it too (``ValueError`` for bad arguments, ``FileExistsError`` for a store that is already
there, ``OSError`` for an I/O failure), so generic handlers keep working.

Each message names the file and what was wrong with it. Two kinds of error differ in what
they leave behind:

* **A bad call** (:class:`SlotRangeError`, :class:`PayloadError`, :class:`MetaError`,
  :class:`SlotOccupiedError`, :class:`SlotEmptyError`, :class:`StoreClosedError`,
  :class:`ReadOnlyStoreError`) is refused before anything is written: the file, the index
  and the counters are exactly as they were.
* **A bad file** (:class:`StoreFormatError` and its subclass :class:`StoreVersionError`),
  or a good one of other KV (:class:`StoreIdentityError`), is refused whole by ``open``
  before the store is usable, and the file is left as it was; a bad *record* inside a
  good file is not an error but a drop (counted in ``stats()``), except when the caller
  asked to read that very block: then :class:`CorruptBlockError` says the block is gone.
"""

from __future__ import annotations


class StoreError(Exception):
    """Base class of every error the disk block store raises on purpose."""


class StoreConfigError(StoreError, ValueError):
    """``create`` was given an impossible geometry (slot count, block or metadata size)."""


class StoreExistsError(StoreError, FileExistsError):
    """``create`` found a file at the path and was not asked to overwrite it."""


class StoreNotFoundError(StoreError, FileNotFoundError):
    """``open`` found no file at the path."""


class StoreLockedError(StoreError):
    """Another open handle (in this process or another) holds the store.

    A writable handle holds an exclusive lock (``flock``), a read-only one a shared lock;
    the kernel releases the lock when the holder exits, however it exits.
    """


class StoreFormatError(StoreError, ValueError):
    """The file is not a usable store: truncated, not ours (bad magic), a corrupted file
    header, or a geometry that does not add up."""


class StoreVersionError(StoreFormatError):
    """The file is a store of another format version than this code reads (a version-1
    file, which records no identity, among them: the message says how to start it
    afresh)."""


class StoreIdentityError(StoreError, ValueError):
    """The file is a good store of *other* KV than the caller's: another model, layout,
    hash scheme or block size (R-TIER-11). Refused whole, before a record is read; the
    file is left as it is (R-TIER-12).

    Attributes:
        mismatches: ``(field, value in the file, value expected)`` of every field that
            differs, in the header's order.
        field, found, expected: the first of them.
    """

    def __init__(self, message: str, mismatches: list[tuple[str, object, object]]) -> None:
        super().__init__(message)
        self.mismatches = tuple(mismatches)
        self.field, self.found, self.expected = mismatches[0]


class StoreIOError(StoreError, OSError):
    """The operating system refused an operation (no space, permission, an I/O error),
    or the file changed size under an open handle. ``errno`` is kept when there is one."""


class StoreClosedError(StoreError, ValueError):
    """A call on a store that was closed (like a closed file: ``ValueError``)."""


class ReadOnlyStoreError(StoreError):
    """A write (``put``, ``delete``) on a store opened with ``readonly=True``."""


class SlotRangeError(StoreError, ValueError):
    """A slot id that is not an ``int`` in ``0 .. capacity - 1`` (``bool`` is refused)."""


class SlotOccupiedError(StoreError):
    """``put`` to a slot that holds a block: delete it first (see the module's
    "Overwrite" section for why the store never overwrites a live record in place)."""


class SlotEmptyError(StoreError):
    """``delete`` of a slot that holds no block (a double delete is a caller's bug)."""


class PayloadError(StoreError, ValueError):
    """A payload or an output buffer that is not a C-contiguous buffer of exactly
    ``block_bytes`` bytes (an output buffer must also be writable)."""


class MetaError(StoreError, ValueError):
    """A metadata record that is not bytes-like, or longer than the store's ``meta_bytes``."""


class CorruptBlockError(StoreError):
    """The block asked for failed its checksum: it was dropped (never served) and counted.

    Attributes:
        slot: the slot that held it, now empty.
    """

    def __init__(self, message: str, slot: int) -> None:
        super().__init__(message)
        self.slot = slot


class StoreInvariantError(StoreError, AssertionError):
    """``check_invariants()`` found the index and the file disagreeing: a bug, never bad input."""
