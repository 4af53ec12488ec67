"""The disk tier's storage: :class:`DiskBlockStore`, a file-backed store of fixed-size KV blocks.

A store is one preallocated slab file of ``capacity`` slots (the format, field by field, is
in :mod:`kachedb_radix.reference.tiers.disk_format`). Slot ids are chosen by the caller
(the tier layer keeps its own allocator; the store never allocates). A slot holds one block:
a payload of exactly ``block_bytes`` bytes and an opaque metadata record of up to
``meta_bytes`` bytes, in which the tier layer keeps what it needs to rebuild its tree after
a restart (namespace, chained hash, parent hash, tokens).

**The index is the file.** Each slot carries a self-describing record header with two
checksums (header + metadata, and payload). ``open`` reads every slot's header once and
rebuilds the in-memory index from the valid ones; nothing else is persisted, so nothing
else can disagree with the file.

**Whose bytes.** The file header records whose KV the slots hold -- the model identity and
the KV layout (:mod:`~kachedb_radix.reference.tiers.identity`, R-TIER-11) -- and ``open``
given the identity it expects refuses a file of any other, whole, before reading a record.

**Nothing deleted unasked** (R-TIER-12). Opening writes nothing to the file: a record it
cannot use is left out of the index and left as it is, until a ``put`` to its slot
replaces it. A file is discarded only by ``create(..., overwrite=True)``. What a creator
killed mid-creation leaves -- its temporary file, never the store's name -- is removed by
the next writable open or create, once its lock is free and its process gone.

**Durability.**

* ``put`` and ``delete`` return once their bytes are in the operating system's page cache.
  From then on they survive the death of the process -- SIGKILL included, at any point
  (``tests/tiers/test_disk_crash.py`` kills a writer many times and checks it).
* ``sync()`` is the power-loss barrier: ``fdatasync``, after which everything put or
  deleted before it survives an operating-system crash or a power cut as well. Between two
  syncs, a power cut may persist any subset of the unsynced writes, torn at any sector; the
  checksums turn every such torn record into a drop, never into a served block (simulated,
  sector by sector, through the I/O layer, by ``tests/tiers/test_disk_powerloss.py``: the
  store's writes, its creation, and a whole KV cache; a real power cut needs hardware or
  root). Syncing once per batch of puts is the usual group commit; ``close()`` syncs.
  ``create`` syncs the new file before linking it and the directory after, so a power cut
  leaves the name absent or a complete store.

**Write order inside put.** The payload is written first, then the record header with the
metadata (the commit record: the slot's whole header region, zeros after the metadata,
one ``pwrite`` of whole pages -- a write of part of a page the page cache does not hold
would first read that page from the disk, synchronously). A process that dies during a
put therefore leaves the slot's header as it was -- empty -- and the half-written payload
bytes behind it are never looked at. Under power loss the order is not kept; the header's
``payload_sum`` catches a header that landed without its payload.

**Overwrite.** ``put`` refuses an occupied slot (:class:`SlotOccupiedError`): delete first.
An in-place overwrite would open a window in which the slot holds neither the old block
(acknowledged) nor the new one, i.e. a crash there would lose an acknowledged block. With
delete-then-put, a crash between the two leaves the slot empty, which is exactly the state
the (issued) delete describes, so an acknowledged block is lost only to an operation that
was issued to remove it. The tier layer never needs more: a block's content is fixed by its
chained hash, and a slot is reused only after its block left the disk tier.

**Reads verify.** ``get`` and ``read_into`` hash the payload they read and compare it with
the header's ``payload_sum``; a mismatch drops the slot (its header is zeroed, the drop is
counted in :meth:`stats`) and raises :class:`CorruptBlockError`: a corrupted block is never
served. ``open`` checks headers only (one small read per slot); ``verify_payloads=True``
also reads and checks every payload, so that ``items()`` lists only intact blocks.

**I/O.** ``pread``/``pwrite`` (``os.preadv`` straight into the caller's buffer: the
kernel's copy out of the page cache is the only copy), not ``mmap`` (a file that shrinks
under a mapping is a SIGBUS, a crash). Every system call goes through one layer,
:class:`~kachedb_radix.reference.tiers.disk_io.DiskIO` (``io=``), where the tests inject
faults and record what a power cut could leave.

**Concurrency.** A writable handle holds an exclusive ``flock`` on the file and a read-only
one a shared lock, so two writers (or a writer and a reader) never share a store; the kernel
drops the lock when the process dies. One handle is used by one thread at a time.

Invariants: the index is exactly the file's valid records, and the counters add up; the
list, and the checks, are in :mod:`kachedb_radix.reference.tiers.disk_invariants`.

Errors: a bad call raises before anything is written (the file, the index and the counters
are unchanged); see :mod:`kachedb_radix.reference.tiers.disk_errors`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import weakref
from collections.abc import Container, Iterable, Iterator, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor, wait
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import numpy as np
import numpy.typing as npt

from .disk_errors import (
    CorruptBlockError,
    MetaError,
    PayloadError,
    ReadOnlyStoreError,
    SlotEmptyError,
    SlotOccupiedError,
    SlotRangeError,
    StoreClosedError,
    StoreConfigError,
    StoreExistsError,
    StoreIdentityError,
    StoreIOError,
    StoreNotFoundError,
)
from .disk_format import (
    EMPTY_PAGE,
    PAGE,
    Geometry,
    Record,
    checksum,
    decode_file_header,
    decode_record,
    encode_file_header,
    encode_record,
    geometry_problem,
)
from .disk_invariants import check_store
from .disk_io import (
    SYSTEM,
    DiskIO,
    array_view,
    byte_view,
    io_error,
    lock,
    pread_exact,
    preadv_exact,
    pwrite_all,
    refuse_if_open_elsewhere,
    remove_leftovers,
    temporary_name,
)
from .disk_stats import DiskStoreStats
from .identity import SlabIdentity

Payload = npt.NDArray[np.uint8]


class DiskBlockStore:
    """A file of ``capacity`` fixed-size block slots with metadata and checksums.

    Make one with :meth:`create`, reopen it with :meth:`open` (the constructor is not
    public). Use it as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        path: str,
        fd: int,
        geometry: Geometry,
        identity: SlabIdentity,
        io: DiskIO,
        *,
        readonly: bool,
        _token: object = None,
    ) -> None:
        if _token is not _OPEN_TOKEN:
            raise TypeError("use DiskBlockStore.create(...) or DiskBlockStore.open(...)")
        self._path = path
        self._fd = fd
        self._geometry = geometry
        self._identity = identity
        self._io = io
        self._readonly = readonly
        self._closer = weakref.finalize(self, io.close, fd)
        self._index: dict[int, Record] = {}
        self._next_seq = 1
        self._dropped: list[tuple[int, str]] = []  # (slot, why), in the order found
        # Slots whose header is a record left out of the index and left as it is in the
        # file: every record found unusable at open (opening writes nothing, R-TIER-12),
        # and those a read-only handle dropped at read. A put may replace one.
        self._unusable: set[int] = set()
        self._dropped_at_open = 0
        self._dropped_at_read = 0
        self._counts = {"puts": 0, "deletes": 0, "reads": 0, "syncs": 0}
        self._bytes_written = 0
        self._bytes_read = 0
        self._unsynced = 0
        self._removed_leftovers: tuple[str, ...] = ()

    # -- making and opening -------------------------------------------------------------

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        slots: int,
        block_bytes: int,
        meta_bytes: int,
        *,
        identity: SlabIdentity | None = None,
        overwrite: bool = False,
        io: DiskIO | None = None,
    ) -> DiskBlockStore:
        """Make a new, empty store at ``path`` and open it for writing.

        The file is written under a temporary name beside ``path``
        (``.NAME.PID.TAG.new``, locked while it exists), its space allocated up front
        (``posix_fallocate``: a full disk shows now, not in the middle of a put), its
        header written and synced, and then linked into place -- atomically, so ``path``
        is either absent (or, with ``overwrite``, the old file) or a complete empty
        store, whenever the process dies or the power fails; the directory is synced
        last. Temporary files that dead creators of ``path`` left behind are removed
        first (:func:`~kachedb_radix.reference.tiers.disk_io.remove_leftovers`; a live
        creator's never).

        Args:
            slots: number of block slots, ``1 .. 2**32 - 1``.
            block_bytes: bytes of every payload (``>= 1``).
            meta_bytes: the longest metadata record (``0 .. 1 MiB``).
            identity: whose KV the file holds (R-TIER-11); None: an empty identity.
            overwrite: replace a file already at ``path`` (refused while another
                handle holds it open): the one way a store discards a file.
            io: the I/O layer (:class:`~kachedb_radix.reference.tiers.disk_io.DiskIO`;
                default the real system calls).

        Cost: O(1) system calls, plus one per file in the folder for the leftovers; the
        allocation itself is the file system's (fast on ext4 and XFS, which allocate
        extents without writing them).

        Raises:
            StoreConfigError: an impossible geometry, or ``identity`` not a SlabIdentity.
            StoreExistsError: ``path`` exists and ``overwrite`` is false.
            StoreLockedError: ``overwrite`` of a store that is open elsewhere.
            StoreIOError: the file system refused (no space, no permission...); nothing
                is left behind.
        """
        layer = SYSTEM if io is None else io
        problem = geometry_problem(slots, block_bytes, meta_bytes)
        if problem is None and not isinstance(identity, SlabIdentity | None):
            problem = f"identity must be a SlabIdentity, got {type(identity).__name__}"
        if problem is not None:
            raise StoreConfigError(f"{os.fspath(path)}: cannot create a store: {problem}")
        target = Path(path)
        name = str(target)
        if layer.exists(target):
            if not overwrite:
                raise StoreExistsError(
                    f"{name}: a file is already there (pass overwrite=True to replace it)"
                )
            refuse_if_open_elsewhere(layer, name)
        removed = remove_leftovers(layer, target)
        geometry = Geometry(slots, block_bytes, meta_bytes, secrets.randbits(64))
        header = encode_file_header(geometry, identity or SlabIdentity())
        temporary = temporary_name(target, os.getpid(), secrets.token_hex(4))
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        try:
            fd = layer.open(temporary, flags, 0o644)
        except OSError as error:
            raise io_error(error, name, "cannot create the store's file") from None
        try:
            lock(layer, fd, str(temporary), shared=False)  # a new file: never held elsewhere
            layer.allocate(fd, geometry.file_bytes)
            pwrite_all(layer, fd, name, header, 0, "write the file header")
            layer.fsync(fd)
            if overwrite:
                layer.replace(temporary, target)
            else:
                layer.link(temporary, target)  # fails if path appeared meanwhile: never clobbers
                layer.unlink(temporary)
            layer.sync_directory(target.parent)
        except FileExistsError:
            raise StoreExistsError(f"{name}: a file appeared there while creating") from None
        except OSError as error:  # a StoreIOError too
            if isinstance(error, StoreIOError):
                raise
            raise io_error(error, name, "cannot create the store") from None
        finally:
            with contextlib.suppress(OSError):
                layer.unlink(temporary)  # absent once linked or replaced
            with contextlib.suppress(OSError):
                layer.close(fd)
        store = cls.open(target, io=layer)
        store._removed_leftovers = removed + store._removed_leftovers
        return store

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        readonly: bool = False,
        verify_payloads: bool = False,
        identity: SlabIdentity | None = None,
        block_bytes: int | None = None,
        io: DiskIO | None = None,
    ) -> DiskBlockStore:
        """Reopen the store at ``path``: every intact record is back, with its metadata.

        Reads the file header -- every byte of its page checked -- and, when ``identity``
        or ``block_bytes`` is given, refuses a file whose identity or block size is
        another (R-TIER-11) before reading any record. Then reads each slot's header (one
        read of ``80 + meta_bytes`` bytes per slot). A record that is torn or corrupted
        (wrong magic, slot, store id, sizes, or header checksum) is left out of the index,
        counted in ``stats().dropped_at_open`` with its reason, and never served; it is
        left as it is in the file (opening writes nothing, R-TIER-12), and a later
        ``put`` to its slot replaces it. ``verify_payloads`` also reads every payload and
        leaves out those that fail their checksum. A writable open first removes the
        temporary files dead creators of ``path`` left behind (as :meth:`create` does).

        Cost: O(capacity) reads of a header each, plus O(occupied * block_bytes) with
        ``verify_payloads``.

        Raises:
            StoreNotFoundError: no file at ``path``.
            StoreFormatError: a file that is not a store (too short, bad magic, corrupted
                header, a byte of its padding not zero, a geometry that does not add up,
                a size that does not match it).
            StoreVersionError: a store of another format version (a version-1 file: the
                message says how to start it afresh).
            StoreIdentityError: a store of other KV (its ``mismatches`` name each field
                with both values). The file is left as it is.
            StoreLockedError: another handle holds it (a writer, or any handle when
                opening for writing).
            StoreIOError: the file cannot be opened or read.
        """
        layer = SYSTEM if io is None else io
        name = os.fspath(path)
        removed = () if readonly else remove_leftovers(layer, Path(name))
        flags = (os.O_RDONLY if readonly else os.O_RDWR) | os.O_CLOEXEC
        try:
            fd = layer.open(name, flags)
        except FileNotFoundError:
            raise StoreNotFoundError(f"{name}: no store there (no such file)") from None
        except OSError as error:
            raise io_error(error, name, "cannot open the store") from None
        try:
            lock(layer, fd, name, shared=readonly)
            try:
                size, raw = layer.size(fd), layer.pread(fd, PAGE, 0)
            except OSError as error:
                raise io_error(error, name, "cannot read the file header") from None
            geometry, found = decode_file_header(name, raw, size)
            _refuse_other_kv(name, found, identity, geometry.block_bytes, block_bytes)
            store = cls(name, fd, geometry, found, layer, readonly=readonly, _token=_OPEN_TOKEN)
        except BaseException:
            layer.close(fd)
            raise
        store._removed_leftovers = removed
        try:
            store._scan(verify_payloads)
        except BaseException:
            store._close_fd()
            raise
        return store

    def _scan(self, verify_payloads: bool) -> None:
        """Rebuild the index from the slots' headers (see :meth:`open`); write nothing.
        O(capacity)."""
        geometry = self._geometry
        payload = np.empty(geometry.block_bytes if verify_payloads else 0, dtype=np.uint8)
        for slot in range(geometry.slots):
            raw = self._pread(geometry.head_bytes, geometry.slot_offset(slot), "read a header")
            found = decode_record(geometry, slot, raw)
            if isinstance(found, Record) and verify_payloads:
                self._read_payload(slot, array_view(payload))
                if checksum(array_view(payload)) != found.payload_sum:
                    found = "payload checksum mismatch"
            if isinstance(found, Record):
                self._index[slot] = found
                self._next_seq = max(self._next_seq, found.seq + 1)
            elif found is not None:
                self._drop(slot, found, at_open=True)

    # -- writing ------------------------------------------------------------------------

    def put(self, slot: int, meta: bytes, payload: object) -> int:
        """Store a block in the empty slot ``slot``; return its sequence number.

        ``payload`` is any C-contiguous buffer of exactly ``block_bytes`` bytes (bytes, a
        NumPy array of any dtype...); it is written straight from the caller's memory.
        A slot whose record was left out at open (unusable) counts as empty: the put
        replaces that record.
        The payload goes first, then the header with ``meta`` (see the module's "Write
        order"). Survives a process crash once it returns; a power loss after the next
        :meth:`sync`.

        Cost: O(block_bytes) -- one hash pass and one write -- plus O(meta_bytes).

        Raises (nothing written):
            StoreClosedError, ReadOnlyStoreError: the handle cannot write.
            SlotRangeError: ``slot`` is not a slot id.
            SlotOccupiedError: the slot holds a block (delete it first).
            MetaError: ``meta`` is not bytes-like or longer than ``meta_bytes``.
            PayloadError: ``payload`` is not a C-contiguous buffer of ``block_bytes``.
        Raises StoreIOError if the write fails; the slot then stays empty.
        """
        self._check_writable()
        slot, meta, view = self._check_put(slot, meta, payload, ())
        return self._write(slot, meta, view, checksum(view))

    def put_many(self, blocks: Sequence[tuple[int, bytes, object]]) -> list[int]:
        """Store each ``(slot, meta, payload)`` of ``blocks``, in their order, as that many
        :meth:`put` calls would; return their sequence numbers.

        Every block is checked before the first is written. Each is then written as
        ``put`` writes it (payload, then header), in order; a helper thread hashes the
        next payloads meanwhile (the hash and the write both run outside the GIL), so a
        batch costs about its writes instead of its writes plus its hashes. Durability is
        each ``put``'s: a block survives a process crash once the next one is being
        written, and a power loss after the next :meth:`sync`.

        Cost: O(len(blocks) * block_bytes), the hashing overlapped with the writing.

        Raises (nothing written): as :meth:`put` for any block, and SlotOccupiedError
        for a slot given twice. StoreIOError if a write fails: the blocks before it are
        stored, that one and those after it are not.
        """
        self._check_writable()
        taken: set[int] = set()
        checked = []
        for slot, meta, payload in blocks:
            found = self._check_put(slot, meta, payload, taken)
            taken.add(found[0])
            checked.append(found)
        if len(checked) < 2:
            return [self._write(slot, meta, view, checksum(view)) for slot, meta, view in checked]
        with ThreadPoolExecutor(1, thread_name_prefix="kachedb-slab-hash") as hasher:
            sums = [hasher.submit(checksum, view) for _, _, view in checked]
            try:
                return [
                    self._write(slot, meta, view, summed.result())
                    for (slot, meta, view), summed in zip(checked, sums, strict=True)
                ]
            finally:
                for summed in sums:
                    summed.cancel()  # after a failed write: hash no further

    def _check_put(
        self, slot: object, meta: object, payload: object, taken: Container[int]
    ) -> tuple[int, bytes, memoryview]:
        """A put's arguments, checked (see :meth:`put`'s errors); ``taken``: slots the
        same batch fills before this one."""
        slot = self._check_slot(slot)
        if slot in self._index or slot in taken:
            held = f"seq {self._index[slot].seq}" if slot in self._index else "earlier in the batch"
            raise SlotOccupiedError(
                f"{self._path}: slot {slot} holds a block ({held}); "
                "delete it before putting another there"
            )
        data = self._check_meta(meta)
        view = byte_view(payload, f"{self._path}: payload", self.block_bytes, writable=False)
        return slot, data, view

    def _write(self, slot: int, meta: bytes, view: memoryview, payload_sum: bytes) -> int:
        """Write one checked block: its payload, then its header (the commit record)."""
        record = Record(slot, self._next_seq, meta, payload_sum)
        start = self._geometry.slot_offset(slot)
        self._pwrite(view, start + self._geometry.payload_offset, "write a payload")
        try:
            self._pwrite(encode_record(self._geometry, record), start, "write a header")
        except StoreIOError:
            with contextlib.suppress(OSError):  # undo a partial header; the error says enough
                self._io.pwrite(self._fd, EMPTY_PAGE, start)
                self._unusable.discard(slot)  # the slot is empty now
            raise
        self._index[slot] = record
        self._unusable.discard(slot)  # a record left out at open, now replaced
        self._next_seq += 1
        self._counts["puts"] += 1
        self._bytes_written += view.nbytes
        self._unsynced += 1
        return record.seq

    def delete(self, slot: int) -> None:
        """Empty the slot ``slot`` (one write of a page: its header becomes zeros).

        Survives a process crash once it returns; a power loss after the next
        :meth:`sync`. Cost: O(1).

        Raises (nothing written): StoreClosedError, ReadOnlyStoreError, SlotRangeError,
        SlotEmptyError (the slot holds no block). StoreIOError if the write fails.
        """
        self._check_writable()
        slot = self._check_slot(slot)
        if slot not in self._index:
            raise SlotEmptyError(f"{self._path}: slot {slot} holds no block to delete")
        self._pwrite(EMPTY_PAGE, self._geometry.slot_offset(slot), "delete")
        del self._index[slot]
        self._counts["deletes"] += 1
        self._unsynced += 1

    def sync(self) -> None:
        """The durability barrier: everything put or deleted so far survives a power loss.

        One ``fdatasync`` (the file's size never changes, so its data is all there is to
        flush); nothing to do when nothing was written since the last sync. Cost: the
        device's flush of the dirty pages, O(bytes written since the last sync).

        Raises StoreClosedError; StoreIOError if the flush fails -- then the durability of
        the writes since the last good sync is unknown (the kernel may have dropped the
        failed pages): close the store and reopen it.
        """
        self._check_open()
        if self._readonly or not self._unsynced:
            return
        try:
            self._io.fdatasync(self._fd)
        except OSError as error:
            raise io_error(error, self._path, "sync") from None
        self._unsynced = 0
        self._counts["syncs"] += 1

    # -- reading ------------------------------------------------------------------------

    def get(self, slot: int) -> tuple[bytes, Payload] | None:
        """The block in ``slot`` as ``(meta, payload)``, or None if the slot is empty.

        ``payload`` is a new, writable one-dimensional ``uint8`` array the file was read
        straight into (use :meth:`read_into` to fill a buffer of your own). Its checksum is
        verified before it is returned. Cost: O(block_bytes) -- one read, one hash pass.

        Raises:
            StoreClosedError, SlotRangeError: a bad call.
            CorruptBlockError: the payload failed its checksum; the slot was dropped.
            StoreIOError: the read failed or the file shrank under the handle.
        """
        self._check_open()
        slot = self._check_slot(slot)
        if slot not in self._index:
            return None
        payload = np.empty(self._geometry.block_bytes, dtype=np.uint8)
        meta = self._read_verified(slot, array_view(payload))
        return meta, payload

    def read_into(self, slot: int, out: object) -> bytes | None:
        """Read the block in ``slot`` into ``out``; return its metadata, or None if empty.

        ``out`` is a writable, C-contiguous buffer of exactly ``block_bytes`` bytes (a
        NumPy array of any dtype, a pinned host buffer, a ``bytearray``); the file is read
        straight into it, with no copy of ours. The restore path of the tier layer.
        Cost: O(block_bytes) -- one read, one hash pass.

        Raises:
            StoreClosedError, SlotRangeError, PayloadError: a bad call (nothing read).
            CorruptBlockError: the payload failed its checksum; the slot was dropped and
                ``out`` holds the bad bytes (use none of them).
            StoreIOError: the read failed or the file shrank under the handle.
        """
        self._check_open()
        slot = self._check_slot(slot)
        view = byte_view(out, f"{self._path}: out", self.block_bytes, writable=True)
        if slot not in self._index:
            return None
        return self._read_verified(slot, view)

    def read_many_into(
        self, slots: Sequence[int], outs: Sequence[object], *, ahead: int = 0
    ) -> list[bytes]:
        """Read the blocks in ``slots`` into ``outs`` (one buffer each, as
        :meth:`read_into` takes it), in order, as that many ``read_into`` calls would,
        up to the first that cannot be served; return the metadata of those served.

        The read stops at the first slot that is empty or whose payload fails its
        checksum (that slot is dropped, as ``read_into`` drops it): the result is then
        shorter than ``slots``, and ``outs[len(result)]`` holds bytes to use none of.
        Blocks of 64 KiB and more are read and verified by a few helper threads side by
        side, four blocks in flight (the reads and the hashes run outside the GIL: a
        batch costs about its reads, spread over the cores, rather than its reads plus
        its hashes); up to three blocks past a failing one may then have been read for
        nothing. Smaller blocks are read one at a time, and with ``ahead`` > 0 the
        kernel is asked to read that many blocks ahead of the one being read
        (:meth:`prefetch`'s advice). The helper threads take no advice: their reads in
        flight keep a cold disk as busy (the same GB/s measured), and the advice costs
        about a sixth of a warm read (it walks every page, cached or not).

        Cost: O(len(slots) * block_bytes), the hashing overlapped with the reading.

        Raises (nothing read): StoreClosedError; SlotRangeError or PayloadError for any
        slot or buffer, and PayloadError when ``slots`` and ``outs`` differ in length.
        StoreIOError if a read fails (the blocks before it were read, none is served).
        """
        self._check_open()
        if len(slots) != len(outs):
            raise PayloadError(
                f"{self._path}: {len(slots)} slots but {len(outs)} buffers to read them into"
            )
        where = f"{self._path}: out"
        checked = [
            (self._check_slot(slot), byte_view(out, where, self.block_bytes, writable=True))
            for slot, out in zip(slots, outs, strict=True)
        ]
        empty = next((i for i, (slot, _) in enumerate(checked) if slot not in self._index), None)
        checked = checked[:empty]  # the read stops at the first empty slot
        if len(checked) >= 2 and self.block_bytes >= _PARALLEL_BYTES:
            with ThreadPoolExecutor(_READERS, thread_name_prefix="kachedb-slab-read") as readers:
                return self._read_in_order(checked, 0, readers, 2 * _READERS)
        if ahead > 0:
            self.prefetch([slot for slot, _ in checked[:ahead]])
        return self._read_in_order(checked, ahead, _Inline(), 1)

    def _read_in_order(
        self, checked: list[tuple[int, memoryview]], ahead: int, readers: Executor, depth: int
    ) -> list[bytes]:
        """:meth:`read_many_into`'s loop over occupied slots: ``readers`` read and hash up
        to ``depth`` blocks at a time (on helper threads, or inline), and each block is
        served, in order, once its hash matches its record. Every read made is counted,
        those past a failing block too."""

        def read(index: int, slot: int, view: memoryview) -> bytes:
            if ahead > 0 and index + ahead < len(checked):
                self.prefetch([checked[index + ahead][0]])
            self._read_payload(slot, view)
            return checksum(view)

        served: list[bytes] = []
        started: list[Future[bytes]] = []
        try:
            for index, (slot, _) in enumerate(checked):
                while len(started) < min(index + depth, len(checked)):
                    more = len(started)
                    started.append(readers.submit(read, more, *checked[more]))
                summed = started[index].result()
                record = self._index[slot]
                if summed != record.payload_sum:
                    self._drop(slot, "payload checksum mismatch", at_open=False)
                    break
                served.append(record.meta)
        finally:
            for future in started:
                future.cancel()  # not begun: nothing to count
            wait(started)
            reads = sum(1 for f in started if not f.cancelled() and f.exception() is None)
            self._counts["reads"] += reads
            self._bytes_read += reads * self.block_bytes
        return served

    def prefetch(self, slots: Iterable[int]) -> int:
        """Ask the kernel to start reading these slots' payloads now, in the background
        (``posix_fadvise(WILLNEED)``), so that the reads that follow find them in the page
        cache; return how many occupied slots were advised (empty ones are skipped).

        For a restore of scattered blocks: a lone ``read_into`` waits for one block at a
        time, while the kernel reads advised blocks side by side (``bench_disk.py``
        measures the gain). Nothing is waited for and nothing is verified here; the read
        verifies. Cost: O(len(slots)) system calls, none of which waits for the disk.

        Raises (nothing advised): StoreClosedError, SlotRangeError.
        """
        self._check_open()
        wanted = [self._check_slot(slot) for slot in slots]
        advised = 0
        for slot in wanted:
            if slot in self._index:
                offset = self._geometry.slot_offset(slot) + self._geometry.payload_offset
                with contextlib.suppress(OSError):  # advice the kernel cannot take is no error
                    self._io.advise(self._fd, offset, self.block_bytes, os.POSIX_FADV_WILLNEED)
                advised += 1
        return advised

    def _read_verified(self, slot: int, view: memoryview) -> bytes:
        """Read ``slot``'s payload into ``view``, verify it, return the metadata. O(block)."""
        record = self._index[slot]
        self._read_payload(slot, view)
        self._counts["reads"] += 1
        self._bytes_read += view.nbytes
        if checksum(view) != record.payload_sum:
            self._drop(slot, "payload checksum mismatch", at_open=False)
            raise CorruptBlockError(
                f"{self._path}: slot {slot} (seq {record.seq}) failed its payload checksum "
                "(torn or corrupted); it was dropped",
                slot,
            )
        return record.meta

    # -- the index ----------------------------------------------------------------------

    def record(self, slot: int) -> Record | None:
        """The index's record of ``slot`` (seq, metadata, payload checksum), or None if
        the slot is empty. No I/O; O(1). Raises StoreClosedError, SlotRangeError."""
        self._check_open()
        return self._index.get(self._check_slot(slot))

    def slots(self) -> Iterator[int]:
        """The occupied slots, in increasing order (a snapshot: the store may change while
        iterating). O(occupied log occupied). Raises StoreClosedError."""
        self._check_open()
        return iter(sorted(self._index))

    def items(self) -> Iterator[tuple[int, bytes]]:
        """``(slot, meta)`` of each occupied slot, in increasing slot order (a snapshot).
        O(occupied log occupied). Raises StoreClosedError."""
        self._check_open()
        return iter([(slot, self._index[slot].meta) for slot in sorted(self._index)])

    def records(self) -> Iterator[Record]:
        """Every record, oldest write first (by sequence number): the order in which the
        blocks were stored, e.g. to rebuild recency after a restart. O(occupied log
        occupied). Raises StoreClosedError."""
        self._check_open()
        return iter(sorted(self._index.values(), key=lambda record: record.seq))

    def __len__(self) -> int:
        """The number of occupied slots. O(1)."""
        return len(self._index)

    def __contains__(self, slot: object) -> bool:
        """Whether ``slot`` holds a block (False for anything that is not a slot id). O(1)."""
        return slot in self._index

    @property
    def path(self) -> str:
        return self._path

    @property
    def capacity(self) -> int:
        return self._geometry.slots

    @property
    def block_bytes(self) -> int:
        return self._geometry.block_bytes

    @property
    def meta_bytes(self) -> int:
        return self._geometry.meta_bytes

    @property
    def readonly(self) -> bool:
        return self._readonly

    @property
    def identity(self) -> SlabIdentity:
        """Whose KV the file holds, as its header records it (R-TIER-11). O(1)."""
        return self._identity

    @property
    def io(self) -> DiskIO:
        """The I/O layer this handle makes its system calls through. O(1)."""
        return self._io

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def stats(self) -> DiskStoreStats:
        """Geometry, occupancy and counters since open. O(dropped). Raises StoreClosedError."""
        self._check_open()
        geometry = self._geometry
        return DiskStoreStats(
            path=self._path,
            readonly=self._readonly,
            capacity=geometry.slots,
            block_bytes=geometry.block_bytes,
            meta_bytes=geometry.meta_bytes,
            slot_stride=geometry.stride,
            file_bytes=geometry.file_bytes,
            occupied=len(self._index),
            free=geometry.slots - len(self._index),
            dropped_corrupt=self._dropped_at_open + self._dropped_at_read,
            dropped_at_open=self._dropped_at_open,
            dropped_at_read=self._dropped_at_read,
            dropped=tuple(self._dropped),
            unusable=len(self._unusable),
            removed_leftovers=self._removed_leftovers,
            bytes_written=self._bytes_written,
            bytes_read=self._bytes_read,
            unsynced=self._unsynced,
            next_seq=self._next_seq,
            **self._counts,
        )

    def check_invariants(self, *, deep: bool = False) -> None:
        """Assert the module's invariants against the file itself.

        Reads the file header and every slot's header; with ``deep``, every payload too,
        and checks it against its checksum. Cost: O(capacity * meta_bytes), plus
        O(occupied * block_bytes) with ``deep``.

        Raises StoreInvariantError naming the first broken invariant; StoreClosedError.
        """
        self._check_open()
        check_store(self, deep=deep)

    # -- closing ------------------------------------------------------------------------

    def close(self) -> None:
        """Sync (see :meth:`sync`), release the lock and close the file. Closing twice is
        allowed. Cost: that of :meth:`sync`. Raises StoreIOError if the sync fails (the
        file is closed all the same)."""
        if self.closed:
            return
        try:
            self.sync()
        finally:
            self._close_fd()

    def _close_fd(self) -> None:
        self._closer()  # closes the descriptor (and with it the lock) exactly once
        self._fd = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self._index)}/{self._geometry.slots} slots"
        return f"DiskBlockStore({self._path!r}, {state}, block_bytes={self._geometry.block_bytes})"

    # -- helpers ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self.closed:
            raise StoreClosedError(f"{self._path}: the store is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self._readonly:
            raise ReadOnlyStoreError(f"{self._path}: the store was opened read-only")

    def _check_slot(self, slot: object) -> int:
        if isinstance(slot, bool) or not isinstance(slot, int | np.integer):
            raise SlotRangeError(f"{self._path}: a slot id is an int, got {type(slot).__name__}")
        value = int(slot)
        if not 0 <= value < self._geometry.slots:
            raise SlotRangeError(
                f"{self._path}: slot {value} is out of range (0 .. {self._geometry.slots - 1})"
            )
        return value

    def _check_meta(self, meta: object) -> bytes:
        if not isinstance(meta, bytes | bytearray | memoryview):
            raise MetaError(f"{self._path}: meta must be bytes, got {type(meta).__name__}")
        data = bytes(meta)
        if len(data) > self._geometry.meta_bytes:
            raise MetaError(
                f"{self._path}: meta has {len(data)} bytes; "
                f"this store's records hold at most {self._geometry.meta_bytes}"
            )
        return data

    def _drop(self, slot: int, why: str, *, at_open: bool) -> None:
        """Forget a torn or corrupted record and count it. At open its header is left as it
        is (opening writes nothing, R-TIER-12); a read that proves a payload corrupt on a
        writable handle zeroes that record's header, so no later open serves it."""
        self._index.pop(slot, None)
        self._dropped.append((slot, why))
        if at_open:
            self._dropped_at_open += 1
        else:
            self._dropped_at_read += 1
        if at_open or self._readonly:
            self._unusable.add(slot)
        else:
            self._pwrite(EMPTY_PAGE, self._geometry.slot_offset(slot), "drop a record")
            self._unsynced += 1

    def _read_payload(self, slot: int, view: memoryview) -> None:
        offset = self._geometry.slot_offset(slot) + self._geometry.payload_offset
        preadv_exact(self._io, self._fd, self._path, view, offset, f"read slot {slot}")

    def _pread(self, size: int, offset: int, doing: str) -> bytes:
        return pread_exact(self._io, self._fd, self._path, size, offset, doing)

    def _pwrite(self, data: bytes | memoryview, offset: int, doing: str) -> None:
        pwrite_all(self._io, self._fd, self._path, data, offset, doing)


def _refuse_other_kv(
    path: str,
    found: SlabIdentity,
    identity: SlabIdentity | None,
    block_bytes: int,
    expected_bytes: int | None,
) -> None:
    """Raise StoreIdentityError naming every field in which the file's identity ``found``
    and block size ``block_bytes`` differ from the expected ones (None: not compared).
    O(1)."""
    mismatches = [] if identity is None else found.differences(identity)
    if expected_bytes is not None and block_bytes != expected_bytes:
        mismatches.append(("block_bytes", block_bytes, expected_bytes))
    if mismatches:
        named = "; ".join(f"{field} is {mine!r} in the file, {theirs!r} here"
                          for field, mine, theirs in mismatches)  # fmt: skip
        raise StoreIdentityError(
            f"{path}: the file holds other KV than expected: {named}. Refused whole; the "
            "file is left as it is (start it afresh to discard its blocks: "
            "KVCache(..., disk_afresh=True), DiskBlockStore.create(..., overwrite=True))",
            mismatches,
        )


_OPEN_TOKEN = object()


class _Inline(Executor):
    """An executor that runs each call at once, in the caller's thread."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        done: Future[Any] = Future()
        done.set_result(fn(*args, **kwargs))
        return done


#: The block size from which ``read_many_into`` reads on helper threads: below it a
#: block's read and hash take less time than handing them to a thread.
_PARALLEL_BYTES = 64 * 1024
#: The helper threads of ``read_many_into`` (it keeps twice as many blocks in flight, so
#: that no reader waits to be handed its next block): a read from the page cache is the
#: kernel's copy, one core's worth, so two side by side use two cores (three or more
#: measured no faster on two cores, ``docs/tiers.md``); a cold read waits on the disk,
#: which serves a short queue faster than one request at a time.
_READERS = 2
