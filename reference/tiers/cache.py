"""One KV cache over device, host and disk: the tiered tree and the bytes it indexes.

:class:`KVCache` joins a :class:`~kachedb_radix.reference.tiers.tree.TieredTree` (which
blocks, in which tier) to the memory that holds them:

* the **device** tier is a :class:`~kachedb_radix.reference.blockpool.BlockPool` (NumPy
  here; the GPU twin, :class:`kachedb_radix.accel.KVCache`, a CuPy pool);
* the **host** tier is one array of ``host_blocks`` blocks from the pool's
  ``alloc_host_buffer`` (pinned memory on the GPU twin);
* the **disk** tier is a :class:`~kachedb_radix.reference.tiers.disk.DiskBlockStore`, each
  record's metadata naming its block (:mod:`kachedb_radix.reference.tiers.persist`), so
  that a restarted process reopens the cache warm (R-TIER-10).

Every call of the tree that moves blocks returns its moves in a safe order (R-TIER-8);
this class carries them out in that order, deleting first the disk records of blocks the
disk tier dropped, and writing a disk block only if the disk still holds it after the
call (one call can write a disk block, drop it and write it again: the last write wins).
The data path of a serving step::

    cache = KVCache(spec, model="llama-3-8b", host_blocks=..., disk_path="kv.slab",
                    disk_blocks=...)
    found = cache.lookup(prompt, pin=True)        # which tier; the disk blocks verified
    brought = cache.restore(prompt, pin=True)     # bytes up; .handle completes it
    cache.release(found.lease)
    ... compute the rest of the prompt's KV ...
    cache.store(prompt_and_output, kv)            # new blocks written, demotions made
    cache.release(brought.result.lease)

Guarantees:

* a block restored holds exactly the bytes stored for its prefix (the end-to-end test
  writes known bytes, forces them down to the host and the disk, brings them back and
  compares every byte, on both twins);
* a disk block whose payload fails its checksum is never served: a restore stops before
  it (its ``stopped`` says so), the block is counted lost and kept out of every later
  lookup until the disk tier evicts it (R-TIER-10);
* the disk tier's file records whose KV it holds -- the ``model`` and the layout -- and a
  file of other KV is refused whole, left as it is (R-TIER-11, R-TIER-12); a file is
  started afresh only when ``disk_afresh=True`` says so;
* opening deletes nothing: a record the reopen cannot use (an orphan, a duplicate) stays
  in the file until its slot is needed, after every free slot (R-TIER-12);
* :meth:`sync` is the power-loss barrier: a disk block held at a sync survives a power
  cut after it unless a later call removed it (R-TIER-13);
* a pinned lookup reads and verifies the disk blocks it pins, so a restore that follows
  delivers what it said (and reads them from the staging buffer, not twice); an unpinned
  lookup lists them as ``unverified`` (R-TIER-14);
* bad arguments raise before anything changes (the tree's errors, the pool's buffer
  errors, :class:`~kachedb_radix.reference.errors.InvalidArgumentError`).

Invariants (:meth:`check_invariants`): the tree's; the store's; the disk tier's ids and
the store's slots are a bijection under which the occupied slots are exactly the cached
disk blocks' (lost ones excepted) and the unusable records' (the slots of no cached
block), each record's metadata naming its block, each block's chained hash its own.

The bytes move through :class:`~kachedb_radix.reference.tiers.memory.TierMemory` (one
copy per move where the memory allows), the disk's system calls through the store's I/O
layer (``disk_io``). The twins differ only in the pool (``pool_type``) and the trees
(``tiers_type``).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby
from types import TracebackType
from typing import Any, ClassVar, Self

import numpy as np

from ..blockpool import BlockPool, PoolSpec
from ..blockpool.errors import BufferDTypeError, BufferShapeError
from ..blockpool.handles import CompletedTransfer, TransferHandle
from ..dump import dump_blocks
from ..errors import InvalidArgumentError, InvariantViolation
from ..events.schema import KVEventBatch
from ..policies import DEFAULT_POLICY
from ..tokens import as_token_list
from .disk import DiskBlockStore
from .disk_errors import StoreClosedError, StoreConfigError
from .disk_io import DiskIO
from .identity import ModelIdentity, SlabIdentity
from .levels import DEVICE, DISK, HOST
from .memory import Joined, TierMemory
from .persist import (
    HASH_SCHEME,
    ROOT,
    chained_hash,
    decode_meta,
    encode_meta,
    meta_size,
    rebuild,
)
from .results import (
    Move,
    RestoreResult,
    TieredStats,
    TierEvictResult,
    TierInsertResult,
    TierLease,
    TierMatch,
)
from .tree import TieredTree

#: The longest namespace (UTF-8 bytes) a disk tier records by default.
NAMESPACE_BYTES = 256
#: How far ahead of its reads a restore asks the kernel to read the disk.
PREFETCH_BYTES = 64 * 2**20


@dataclass(frozen=True, slots=True)
class CacheMatch(TierMatch):
    """What :meth:`KVCache.lookup` found: the tiered tree's match (R-TIER-5), cut before
    the first lost disk block, and what it vouches for (R-TIER-14).

    Attributes:
        unverified: positions (in ``blocks``) of the disk blocks whose bytes this lookup
            did not read and verify: a restore may stop before the first of them, and
            then says why (``Restored.stopped``). Empty after a verifying lookup (the
            default of a pinned one).
    """

    unverified: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Restored:
    """What :meth:`KVCache.restore` did: the tree's ``result``, the ``handle`` that
    completes when the restored bytes are on the device (already complete on the NumPy
    pool), and ``stopped``: why fewer blocks came up than the tiers hold for the prompt
    (a disk block failed its checksum: which), or None (R-TIER-14)."""

    result: RestoreResult
    handle: TransferHandle[None]
    stopped: str | None = None


@dataclass(frozen=True, slots=True)
class CacheStats:
    """The tree's counters, and the bytes layer's: ``bytes_moved`` into each tier (and
    ``read`` from disk), ``lost`` disk blocks (failed their checksum, never served),
    ``unusable`` records left out at reopen (``unusable_left`` of them still in the file,
    R-TIER-12) and ``reopened`` paths put back."""

    tree: TieredStats
    bytes_moved: Counter[str]
    lost: int
    unusable: int
    reopened: int
    unusable_left: int = 0


def slab_identity(spec: PoolSpec, model: ModelIdentity) -> SlabIdentity:
    """What a disk tier of ``model``'s KV in ``spec``'s layout records (R-TIER-11). O(1)."""
    return SlabIdentity(
        model=model.name,
        fingerprint=model.fingerprint,
        layers=spec.num_layers,
        kv_heads=spec.num_kv_heads,
        head_dim=spec.head_dim,
        dtype=spec.dtype.label,
        tokens_per_block=spec.block_size,
        hash_scheme=HASH_SCHEME,
    )


class KVCache:
    """A KV cache over device, host and disk memory (see the module docstring).

    Args:
        spec: the device pool's geometry (its ``num_blocks`` is the device tier's size).
        model: whose KV this is: a name, or a :class:`~kachedb_radix.reference.tiers.
            identity.ModelIdentity` (a name and a fingerprint, given or derived from the
            model's config by ``ModelIdentity.from_config``). Required with a disk tier,
            whose file records it with the layout (R-TIER-11).
        host_blocks: the host tier's size in blocks (0: none).
        disk_path: the disk tier's slab file; created when absent, reopened warm when
            present (its identity and geometry must be this cache's: another file is
            refused whole and left as it is). None: no disk tier.
        disk_blocks: the disk tier's size when the file is created (ignored on reopen).
        disk_afresh: start the file at ``disk_path`` afresh -- replace whatever is there
            by an empty slab of ``disk_blocks`` slots, discarding its blocks: the one way
            the cache removes a file's records (R-TIER-12).
        write_through, policy, policy_options, events: the tiered tree's.
        namespace_bytes: the longest namespace (UTF-8 bytes) the disk tier can record
            when the file is created; a reopened file's own limit replaces it.
        disk_io: the disk store's I/O layer (default: the real system calls; tests
            inject faults and power cuts there).

    Raises:
        InvalidArgumentError: a size, path, model or option is wrong, or a disk tier
            without ``model``. The file is created only once every argument was
            accepted.
        StoreIdentityError: the file holds other KV (another model, layout, hash scheme
            or block size); it names each field and both values.
        StoreVersionError: the file is of another format (a version-1 file records no
            identity: start it afresh).
        StoreConfigError: a reopened file's metadata is too small for ``spec``'s blocks.
        StoreError subclasses: the disk file cannot be created or opened.

    Cost: O(device + host bytes) to allocate; a reopen reads every record's header and
    rebuilds the disk tier, O(records * depth * B).
    """

    implementation: ClassVar[str] = "reference"
    pool_type: ClassVar[Any] = BlockPool
    tiers_type: ClassVar[Any] = TieredTree

    def __init__(
        self,
        spec: PoolSpec,
        *,
        model: str | ModelIdentity | None = None,
        host_blocks: int = 0,
        disk_path: str | os.PathLike[str] | None = None,
        disk_blocks: int = 0,
        disk_afresh: bool = False,
        write_through: bool = False,
        policy: str = DEFAULT_POLICY,
        policy_options: dict[str, object] | None = None,
        events: object = None,
        namespace_bytes: int = NAMESPACE_BYTES,
        disk_io: DiskIO | None = None,
    ) -> None:
        if not isinstance(spec, PoolSpec):
            raise InvalidArgumentError(f"spec must be a PoolSpec, got {type(spec).__name__}")
        if isinstance(namespace_bytes, bool) or not isinstance(namespace_bytes, int):
            raise InvalidArgumentError(f"namespace_bytes must be an int, got {namespace_bytes!r}")
        if not 0 <= namespace_bytes <= 65535:
            raise InvalidArgumentError(
                f"namespace_bytes must be in 0 .. 65535, not {namespace_bytes}"
            )
        if not isinstance(disk_afresh, bool):
            raise InvalidArgumentError(f"disk_afresh must be a bool, got {disk_afresh!r}")
        if disk_io is not None and not isinstance(disk_io, DiskIO):
            raise InvalidArgumentError(f"disk_io must be a DiskIO, got {type(disk_io).__name__}")
        self._spec = spec
        self._model = None if model is None else ModelIdentity.of(model)
        self._namespace_bytes = namespace_bytes
        store = None
        if disk_path is not None:
            if not isinstance(disk_path, (str, os.PathLike)):
                raise InvalidArgumentError(
                    f"disk_path must be a str or a path, got {type(disk_path).__name__}"
                )
            if self._model is None:
                raise InvalidArgumentError(
                    "a disk tier needs model=...: its file records whose KV it holds "
                    "(a name, or a ModelIdentity; R-TIER-11)"
                )
            identity = slab_identity(spec, self._model)
            if os.path.lexists(disk_path) and not disk_afresh:
                store = self._open_store(disk_path, identity, disk_io)
                disk_blocks = store.capacity
            elif (
                isinstance(disk_blocks, bool)
                or not isinstance(disk_blocks, int)
                or (disk_blocks < 1)
            ):
                raise InvalidArgumentError(f"disk_blocks must be an int >= 1, got {disk_blocks!r}")
        elif disk_blocks or disk_afresh:
            raise InvalidArgumentError("disk_blocks and disk_afresh need a disk_path")
        try:
            self._tiers = self.tiers_type(
                spec.num_blocks,
                host_blocks,
                disk_blocks,
                spec.block_size,
                policy=policy,
                policy_options=policy_options,
                write_through=write_through,
                events=events,
            )
            self._memory = TierMemory(self.pool_type(spec), host_blocks)
            if disk_path is not None and store is None:  # created last: nothing to undo
                meta = meta_size(spec.block_size, namespace_bytes)
                store = DiskBlockStore.create(
                    disk_path,
                    disk_blocks,
                    spec.bytes_per_block,
                    meta,
                    identity=identity,
                    overwrite=disk_afresh,
                    io=disk_io,
                )
        except BaseException:
            if store is not None:
                store.close()
            raise
        self._store = store
        self._slot_of: list[int] = list(range(disk_blocks))  # disk id -> slot
        self._hash_of: dict[int, bytes] = {}  # disk id -> chained hash
        self._lost: set[int] = set()  # disk ids whose payload failed its checksum
        self._unusable_slots: set[int] = set()  # records left out at reopen, still in the file
        # What the staging buffer's leading rows hold: (disk id, chained hash) per row a
        # verifying lookup read and verified, None where unknown; the next restore uses
        # them (and forgets them: the staging buffer is a handoff, not a cache).
        self._staged: list[tuple[int, bytes] | None] = []
        self._moved: Counter[str] = Counter()
        self._unusable = 0
        self._reopened = 0
        self._closed = False
        if store is not None and len(store):
            self._reopen(store)

    # ------------------------------------------------------------------ properties

    @property
    def tiers(self) -> TieredTree:
        """The tiered tree (read it; change the cache only through this class). O(1)."""
        return self._tiers  # type: ignore[no-any-return]

    @property
    def pool(self) -> Any:
        """The device tier's block pool. O(1)."""
        return self._memory.pool

    @property
    def memory(self) -> TierMemory:
        """The device, host and staging memory (read it; change it only through this
        class). O(1)."""
        return self._memory

    @property
    def spec(self) -> PoolSpec:
        """The device pool's geometry. O(1)."""
        return self._spec

    @property
    def model(self) -> ModelIdentity | None:
        """Whose KV this is, as given (None: not given, and no disk tier). O(1)."""
        return self._model

    @property
    def disk(self) -> DiskBlockStore | None:
        """The disk tier's store (read it; change it only through this class), or None.
        O(1)."""
        return self._store

    # ------------------------------------------------------------------ the data path

    def lookup(
        self,
        tokens: object,
        namespace: str | None = None,
        *,
        pin: bool = False,
        verify: bool | None = None,
    ) -> CacheMatch:
        """The tiered tree's ``lookup`` (R-TIER-5), cut before the first lost disk block.

        With ``verify`` (the default of a pinned lookup) the disk blocks of the match are
        read into the staging buffer and verified, and the match is cut before the first
        that fails its checksum (it is lost): a pinned plan is a promise (R-TIER-14),
        and a restore of the same prompt that follows takes the verified bytes from the
        staging buffer instead of reading them again. Without it the match lists its
        disk blocks as ``unverified``. With ``pin`` the lease pins exactly the prefix
        returned (R-TIER-7).

        Cost: O(n * t), twice that when pinned; with ``verify``, O(bytes of the disk
        blocks) -- the read a restore would make. Raises as :meth:`TieredTree.lookup`;
        InvalidArgumentError for a ``verify`` that is not a bool or None;
        ``StoreClosedError`` after :meth:`close`.
        """
        self._require_open()
        if verify is not None and not isinstance(verify, bool):
            raise InvalidArgumentError(f"verify must be a bool or None, got {verify!r}")
        token_list = as_token_list(tokens)
        found = self._cut(self._tiers.lookup(token_list, namespace))
        unverified = tuple(i for i, tier in enumerate(found.tiers) if tier == DISK)
        if unverified and (pin if verify is None else verify):
            found, _ = self._stage_disk(found)
            unverified = ()
        if pin:
            pinned: TierMatch = self._tiers.lookup(token_list[: found.length], namespace, pin=True)
            found = pinned
        return CacheMatch(found.length, found.tiers, found.blocks, found.lease, unverified)

    def restore(
        self, tokens: object, namespace: str | None = None, *, pin: bool = False
    ) -> Restored:
        """Bring the cached prefix of ``tokens`` to the device (R-TIER-6): the disk blocks
        it needs are read and verified first (or taken from the staging buffer, where a
        pinned lookup verified them; a restore stops before a block that fails its
        checksum, and ``stopped`` says so), then the tree restores, demotions run, and
        the host and disk sources are copied into their new device blocks (host rows
        straight into the pool: one copy).

        Cost: O(bytes moved) plus the tree's. Raises as :meth:`TieredTree.restore`;
        ``OutOfBlocksError`` with nothing changed; ``StoreClosedError`` after :meth:`close`.
        """
        self._require_open()
        stopped = None
        in_place: list[int] = []  # the device ids the disk blocks were read into
        if self._hash_of:  # the disk tier holds blocks (lost ones too): read them first
            token_list = as_token_list(tokens)
            found = self._cut(self._tiers.lookup(token_list, namespace))
            in_place = self._device_ids_ahead(found)
            into = [self._memory.device_row(block) for block in in_place]
            found, stopped = self._stage_disk(found, into or None)
            self._staged = []  # a restore uses what a lookup verified once, not as a cache
            tokens = token_list[: found.length]
        result: RestoreResult = self._tiers.restore(tokens, namespace, pin=pin)
        restored = result.restored
        disk = [move.target for move in restored if move.source_tier == DISK]
        landed = None  # read in place, but the tree gave other ids: moved once more
        if in_place and disk != in_place[: len(disk)]:
            landed = self._memory.read(in_place[: len(disk)])  # before anything writes them
        self._run(result.moves, result.dropped)
        handles: list[TransferHandle[None]] = []
        host = [move for move in restored if move.source_tier == HOST]
        if host:
            targets, rows = [move.target for move in host], [move.source for move in host]
            handles.append(self._memory.from_host(targets, rows))
        if disk and landed is not None:
            handles.append(self._memory.from_staging(disk, landed))
        elif disk and not in_place:  # the plan's disk run is last (R-TIER-5): staged in order
            handles.append(self._memory.from_staging(disk, self._memory.staging(len(disk))))
        self._moved[DEVICE] += len(restored) * self._spec.bytes_per_block
        handle: TransferHandle[None] = Joined(handles) if handles else CompletedTransfer(None)
        return Restored(result, handle, stopped)

    def store(
        self,
        tokens: object,
        kv: Any,
        namespace: str | None = None,
        *,
        pin: bool = False,
        priority: int | None = None,
        retain_for: int | None = None,
    ) -> TierInsertResult:
        """Cache every whole block of ``tokens`` with its KV data (R-TIER-2): ``kv`` holds
        one block per whole block of ``tokens`` (``spec.buffer_shape(n)``, the storage
        dtype; a host array, or a device array on the GPU twin); the blocks the tree
        allocates are written from it, after the demotions their ids need and before
        the write-through copies.

        Cost: O(bytes written and moved) plus the tree's insert.

        Raises:
            InvalidTokensError, InvalidArgumentError, OutOfBlocksError: as the tree's
                ``insert`` (also a namespace too long for the disk tier's records).
            BufferShapeError, BufferDTypeError: ``kv`` does not fit. Nothing changes.
            StoreClosedError: the cache was closed (:meth:`close`).
        """
        self._require_open()
        token_list = as_token_list(tokens)
        count = len(token_list) // self._spec.block_size
        self._check_kv(kv, count)
        self._check_namespace_fits(namespace)
        result: TierInsertResult = self._tiers.insert(
            token_list, namespace, pin=pin, priority=priority, retain_for=retain_for
        )
        self._run(result.moves, result.dropped)
        self._memory.write(list(result.allocated), kv[result.reused :])
        self._run(result.after, ())
        return result

    def read(self, tokens: object, namespace: str | None = None) -> Any:
        """The KV data of the device-resident prefix of ``tokens``, as a host array of
        ``spec.buffer_shape(n)`` (a query: nothing changes). O(bytes read).

        Raises:
            InvalidTokensError, InvalidArgumentError: as :meth:`TieredTree.lookup`.
            StoreClosedError: the cache was closed (:meth:`close`).
        """
        self._require_open()
        found = self._tiers.lookup(tokens, namespace)
        return self._memory.read(found.blocks[: found.on_device])

    def evict(self, count: int, tier: str = DEVICE) -> TierEvictResult:
        """Evict ``count`` blocks of ``tier``, demoting them (R-TIER-3). Raises as the
        tree's ``evict``, and ``StoreClosedError`` after :meth:`close`. Cost: the tree's
        plus O(bytes moved)."""
        self._require_open()
        result: TierEvictResult = self._tiers.evict(count, tier)
        self._run(result.moves, result.dropped)
        return result

    def release(self, lease: TierLease) -> None:
        """Release ``lease`` (the tree's ``release``). O(length * tiers). Raises as the
        tree's ``release``, and ``StoreClosedError`` after :meth:`close`."""
        self._require_open()
        self._tiers.release(lease)

    def take_events(self) -> list[KVEventBatch]:
        """The tree's KV event batches since the last call (R-TIER-9). O(1)."""
        batches: list[KVEventBatch] = self._tiers.take_events()
        return batches

    # ------------------------------------------------------------------ durability

    def sync(self) -> None:
        """The power-loss barrier (R-TIER-13): every disk block the disk tier holds now
        survives a power cut from here on, unless a later call removes it (the store's
        ``sync``: one ``fdatasync``). Cost: the device's flush."""
        if self._store is not None:
            self._store.sync()

    def close(self) -> None:
        """Sync and close the disk tier's file. Every later call of the data path
        (lookup, restore, store, read, evict, release) then raises ``StoreClosedError``
        before it changes anything; closing twice is harmless. Cost: the device's flush.
        """
        if not self._closed:
            self._memory.settle()
        if self._store is not None and not self._store.closed:
            self._store.close()
        self._closed = True

    def _require_open(self) -> None:
        if self._closed:
            raise StoreClosedError("this KV cache was closed")

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ inspection

    def stats(self) -> CacheStats:
        """Counters of the tree and of the bytes layer. O(tiers)."""
        return CacheStats(
            self._tiers.stats(),
            Counter(self._moved),
            len(self._lost),
            self._unusable,
            self._reopened,
            len(self._unusable_slots),
        )

    def check_invariants(self) -> None:
        """The tree's invariants, the store's, and the disk mapping's (module docstring).
        O(size of the tiers + records * B).

        Raises:
            InvariantViolation: one does not hold (a bug, never bad input).
        """
        self._tiers.check_invariants()
        store = self._store
        if store is None:
            return
        store.check_invariants()
        slots = self._slot_of
        if sorted(slots) != list(range(store.capacity)):
            raise InvariantViolation("the disk ids do not map one to one onto the slots")
        cached = dump_blocks(self._tiers.tree(DISK).dump())
        occupied = {block for block in cached if slots[block] in store}
        if occupied != cached - self._lost or not self._lost <= cached:
            raise InvariantViolation("the disk tier's blocks and the store's records disagree")
        unusable = self._unusable_slots
        if not all(slot in store for slot in unusable) or unusable & {slots[b] for b in cached}:
            raise InvariantViolation("an unusable record's slot is empty or a cached block's")
        if len(store) != len(occupied) + len(unusable):
            raise InvariantViolation(
                f"the store holds {len(store)} records, the tier {len(occupied)} "
                f"and {len(unusable)} unusable"
            )
        if set(self._hash_of) != cached:
            raise InvariantViolation("the chained hashes are not exactly the disk tier's blocks")
        for block in occupied:
            key = self._tiers.block_key(DISK, block)
            record = store.record(slots[block])
            assert record is not None
            decoded = decode_meta(record.meta, self._spec.block_size)
            parent = ROOT if key.parent is None else self._hash_of[key.parent]
            named = None if isinstance(decoded, str) else decoded
            if named is None or (named.namespace, named.parent, named.tokens) != (
                key.namespace,
                parent,
                key.tokens,
            ):
                raise InvariantViolation(f"disk block {block}'s record does not name it")
            if self._hash_of[block] != chained_hash(parent, key.namespace, key.tokens):
                raise InvariantViolation(f"disk block {block}'s chained hash is stale")

    # ------------------------------------------------------------------ the work

    def _device_ids_ahead(self, found: TierMatch) -> list[int]:
        """The device ids a restore of ``found`` will give its disk blocks, in path order,
        when they can be read straight into them: the device is host memory
        (:meth:`TierMemory.device_row`), no verifying lookup staged them (a restore takes
        what it verified, R-TIER-14), and the device has a free block for every block to
        bring up, so the insert evicts nothing and hands out the smallest free ids in
        path order (R-ALLOC-2, the tree's ``next_block_ids``). Empty otherwise: the disk
        blocks go through the staging rows. O(blocks).

        The restore checks the ids the tree gave against these; a difference costs a copy,
        never a wrong byte (the blocks read into are free until the tree takes them)."""
        if self._staged or DISK not in found.tiers or self._memory.device_row(0) is None:
            return []
        moving = [tier for tier in found.tiers if tier != DEVICE]  # the device's run leads
        ahead = self._tiers.tree(DEVICE).next_block_ids(len(moving))
        if len(ahead) < len(moving):
            return []  # the insert evicts first: its ids are not known before
        return [block for tier, block in zip(moving, ahead, strict=True) if tier == DISK]

    def _stage_disk(
        self, found: TierMatch, into: Sequence[Any] | None = None
    ) -> tuple[TierMatch, str | None]:
        """Read ``found``'s disk blocks (the last run of its plan, R-TIER-5), in order,
        verifying each, into ``into`` (one writable block-sized buffer per disk block:
        the device blocks the restore will give them) or else into the staging buffer's
        leading rows -- keeping a row that already holds that very block, verified (same
        id, same chained hash) -- and cut ``found`` before the first that fails its
        checksum (lost): the match and why it was cut, or None. O(bytes read)."""
        pairs = enumerate(zip(found.tiers, found.blocks, strict=True))
        disk = [(position, block) for position, (tier, block) in pairs if tier == DISK]
        if not disk:
            return found, None
        store = self._store
        assert store is not None
        hashes = self._hash_of
        staged: list[tuple[int, bytes] | None] = [] if into is not None else self._staged
        rows = self._memory.staging(len(disk)) if into is None else into
        unread = [row for row, (_, block) in enumerate(disk)
                  if row >= len(staged) or staged[row] != (block, hashes[block])]  # fmt: skip
        # The kernel reads a window of blocks ahead while each block is read and
        # verified: bounded, so that a long restore does not push its own pages out.
        window = max(1, PREFETCH_BYTES // self._spec.bytes_per_block)
        for row in unread:  # unknown until read and verified
            staged.extend([None] * (row + 1 - len(staged)))
            staged[row] = None
        slots = [self._slot_of[disk[row][1]] for row in unread]
        served = len(store.read_many_into(slots, [rows[row] for row in unread], ahead=window))
        for row in unread[:served]:
            staged[row] = (disk[row][1], hashes[disk[row][1]])
        self._moved["read"] += served * self._spec.bytes_per_block
        if served < len(unread):
            position, block = disk[unread[served]]
            self._lost.add(block)  # empty, or failed its checksum: never served
            cut = TierMatch(position * self._spec.block_size, found.tiers[:position],
                            found.blocks[:position])  # fmt: skip
            why = (
                f"disk block {block} (block {position} of the prefix) failed its payload "
                "checksum: it is lost, and the restore stops before it"
            )
            return cut, why
        return found, None

    def _run(self, moves: Sequence[Move], dropped: Sequence[tuple[str, int]]) -> None:
        """Carry out a call's moves in their order, after deleting the records of the
        disk blocks it dropped (their slots may be reused by these moves). O(bytes).

        One call can write a disk block, drop it and write it again (a demotion that
        pushes the disk tier's own blocks out): only the last write of a block the disk
        tier still holds after the call is made. An earlier write's data left the
        hierarchy within the call, and the keys known now are the call's final ones, so
        writing it would name the wrong prefix on the disk, even for a moment.
        """
        for tier, block in dropped:  # a block dropped twice: forgetting it again is a no-op
            if tier == DISK:
                self._forget_disk(block)
        last_write = {
            move.target: index for index, move in enumerate(moves) if move.target_tier == DISK
        }
        written = {  # disk block -> the move that writes it, for those the disk still holds
            block: index for block, index in last_write.items() if self._tiers.holds(DISK, block)
        }
        for (source_tier, target_tier), group in groupby(
            enumerate(moves), key=lambda item: (item[1].source_tier, item[1].target_tier)
        ):
            batch = list(group)
            # Demotions read the device or the host and write the host or the disk
            # (R-TIER-3): a restore's moves up are the caller's (restore), not these.
            assert (source_tier, target_tier) in _DEMOTIONS, batch[0]
            if target_tier == HOST:  # straight from the device blocks into the host rows
                self._memory.to_host([m.source for _, m in batch], [m.target for _, m in batch])
            else:
                batch = [(i, move) for i, move in batch if written.get(move.target) == i]
                if not batch:
                    continue
                if source_tier == DEVICE:  # one transfer off the device for the run
                    data = self._memory.read([move.source for _, move in batch])
                else:  # straight from the host rows: whole blocks
                    data = [self._memory.host[move.source] for _, move in batch]
                self._put_disk([move.target for _, move in batch], data)
            self._moved[target_tier] += len(batch) * self._spec.bytes_per_block

    def _put_disk(self, blocks: Sequence[int], payloads: Sequence[Any]) -> None:
        """Write the records of disk blocks ``blocks`` (their payloads in order) in one
        batch (``DiskBlockStore.put_many``: the hashing overlaps the writing); a record
        left unusable at reopen in one of their slots is deleted first (its slot is needed
        now, R-TIER-12). A block's key names the block before it by its chained hash,
        which may be one of this batch's."""
        store = self._store
        assert store is not None
        chained = self._hash_of
        puts = []
        for block, payload in zip(blocks, payloads, strict=True):
            key = self._tiers.block_key(DISK, block)
            parent = ROOT if key.parent is None else chained[key.parent]
            slot = self._slot_of[block]
            if slot in self._unusable_slots:
                store.delete(slot)
                self._unusable_slots.discard(slot)
            puts.append((slot, encode_meta(key.namespace, parent, key.tokens), payload))
            chained[block] = chained_hash(parent, key.namespace, key.tokens)
        try:
            store.put_many(puts)
        except BaseException:
            for block, (slot, _, _) in zip(blocks, puts, strict=False):
                if slot not in store:  # not written: no record names it
                    chained.pop(block, None)
            raise

    def _forget_disk(self, block: int) -> None:
        """Delete disk block ``block``'s record, if it has one: a block written and
        dropped within one call never got one (its slot may hold an unusable record,
        which stays), a lost block's was deleted when it failed."""
        store = self._store
        assert store is not None
        self._lost.discard(block)
        slot = self._slot_of[block]
        if slot in store and slot not in self._unusable_slots:
            store.delete(slot)
        self._hash_of.pop(block, None)

    def _cut(self, found: TierMatch) -> TierMatch:
        """``found`` cut before its first lost disk block. O(n)."""
        if not self._lost:
            return found
        for position, (tier, block) in enumerate(zip(found.tiers, found.blocks, strict=True)):
            if tier == DISK and block in self._lost:
                return TierMatch(
                    position * self._spec.block_size,
                    found.tiers[:position],
                    found.blocks[:position],
                )
        return found

    def _check_kv(self, kv: Any, count: int) -> None:
        wanted = self._spec.buffer_shape(count)
        shape = tuple(getattr(kv, "shape", ()))
        if shape != wanted:
            raise BufferShapeError(f"kv has shape {shape}, expected {wanted} for {count} blocks")
        dtype = getattr(kv, "dtype", None)
        if dtype is None or np.dtype(dtype) != np.dtype(self._spec.storage_dtype):
            raise BufferDTypeError(f"kv has dtype {dtype}, expected {self._spec.storage_dtype}")

    def _check_namespace_fits(self, namespace: object) -> None:
        if self._store is None or not isinstance(namespace, str):
            return
        try:
            size = len(namespace.encode("utf-8"))
        except UnicodeEncodeError:  # a lone surrogate: no UTF-8 record can name it
            raise InvalidArgumentError(
                f"namespace {namespace!r} is not valid UTF-8, which the disk tier records"
            ) from None
        if size > self._namespace_bytes:
            raise InvalidArgumentError(
                f"namespace of {size} UTF-8 bytes is longer than the disk tier records "
                f"({self._namespace_bytes}; see namespace_bytes)"
            )

    def _open_store(
        self, path: str | os.PathLike[str], identity: SlabIdentity, io: DiskIO | None
    ) -> DiskBlockStore:
        """Reopen the disk tier's file, refusing one of other KV (R-TIER-11: the store
        compares the identity and the block size before it reads a record) or too small
        metadata. O(records)."""
        spec = self._spec
        store = DiskBlockStore.open(
            path, identity=identity, block_bytes=spec.bytes_per_block, io=io
        )
        if store.meta_bytes < meta_size(spec.block_size, 0):
            store.close()
            raise StoreConfigError(
                f"{os.fspath(path)}: not this cache's disk tier: metadata of "
                f"{store.meta_bytes} bytes, too few for {spec.block_size} tokens"
            )
        self._namespace_bytes = store.meta_bytes - meta_size(spec.block_size, 0)
        return store

    def _reopen(self, store: DiskBlockStore) -> None:
        """Put back what the disk tier persisted (R-TIER-10): link the records, adopt
        each path into the disk tier oldest leaf first, map ids to slots. The records
        that cannot be used stay in the file (R-TIER-12): their slots go to the disk ids
        the allocator hands out last (it hands out the smallest free ids first), so one
        is overwritten only once every free slot is in use. O(records * depth * B)."""
        size = self._spec.block_size
        found = rebuild(((r.slot, r.seq, r.meta) for r in store.records()), size)
        self._unusable_slots = {slot for slot, _ in found.unusable}
        self._unusable = len(found.unusable)
        slot_of: dict[int, int] = {}
        for namespace, tokens, slots in found.paths:
            blocks, held = self._tiers.adopt(DISK, tokens, namespace)
            for position in range(held, len(blocks)):
                slot_of[blocks[position]] = slots[position]
            parent = ROOT
            for position, block in enumerate(blocks):
                chunk = tokens[position * size : (position + 1) * size]
                parent = chained_hash(parent, namespace, chunk)
                self._hash_of[block] = parent
        self._reopened = len(found.paths)
        taken = set(slot_of.values()) | self._unusable_slots
        free = sorted(set(range(store.capacity)) - taken)
        spare_slots = iter(free + sorted(self._unusable_slots))
        self._slot_of = [
            slot_of[block] if block in slot_of else next(spare_slots)
            for block in range(store.capacity)
        ]


#: The (source, target) tier pairs a call's own moves make: demotions (R-TIER-3).
_DEMOTIONS = {(DEVICE, HOST), (DEVICE, DISK), (HOST, DISK)}
