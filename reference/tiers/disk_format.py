"""The disk block store's on-disk format: one slab file of fixed-size, self-describing slots.

The file *is* the index: every slot starts with a record header that says whether the slot
holds a block, which one (its slot number, a write sequence number, the store it belongs
to) and what its bytes must hash to. There is no second file to keep in step with the
first, so there is no window in which the two disagree. A reopened store reads each slot's
header once and has its index back.

File layout (all integers little-endian; ``PAGE`` = 4,096 bytes)::

    offset 0                      the file header (one page)
    offset PAGE + s * stride      slot s, for s in 0 .. slots - 1
    file size                     PAGE + slots * stride, exactly

File header (``FILE_HEADER_BYTES`` = 584 bytes used; every byte after them, to the end
of the page, must be zero):

    ====== ===== ================ =====================================================
    offset bytes field            meaning
    ====== ===== ================ =====================================================
    0      8     magic            ``b"kachedbS"``: a kachedb-radix disk store
    8      4     version          format version, :data:`FORMAT_VERSION`
    12     4     first_slot       offset of slot 0: ``PAGE``
    16     8     slots            number of slots (``1 .. 2**32 - 1``)
    24     8     block_bytes      payload size of every block (``>= 1``)
    32     4     meta_bytes       largest metadata record
    36     4     record_header    :data:`RECORD_HEADER_BYTES`
    40     8     stride           bytes per slot: ``payload_offset + align(block_bytes)``
    48     8     payload_offset   offset of the payload inside a slot:
                                  ``align(RECORD_HEADER_BYTES + meta_bytes)``
    56     8     store_id         random at creation; every record repeats it
    64     4     layers           the identity's counts
    68     4     kv_heads         (:mod:`~kachedb_radix.reference.tiers.identity`;
    72     4     head_dim         zero in a store made without an identity)
    76     4     tokens_per_block
    80     258   model            each text field: a 2-byte length, then that many
    338    130   fingerprint      UTF-8 bytes, then zeros to the field's end (capacity
    468    34    dtype            256, 128, 32 and 64 bytes)
    502    66    hash_scheme
    568    16    checksum         XXH3-128 of bytes ``0 .. 567``
    ====== ===== ================ =====================================================

A slot: the record header, then the metadata record, padding to a page boundary, then the
payload at ``payload_offset`` (page-aligned, so a payload read is page-aligned too), then
padding to the next page boundary. Record header (``RECORD_HEADER_BYTES`` = 80):

    ====== ===== ================ =====================================================
    offset bytes field            meaning
    ====== ===== ================ =====================================================
    0      8     magic            ``b"kachedbB"``
    8      4     version          :data:`FORMAT_VERSION`
    12     4     slot             this slot's number (a record read elsewhere is foreign)
    16     8     seq              write sequence: larger means written later
    24     8     store_id         the file header's ``store_id``
    32     4     meta_len         bytes of metadata that follow the header
    36     4     flags            reserved, zero
    40     8     payload_bytes    the file header's ``block_bytes``
    48     16    payload_sum      XXH3-128 of the payload
    64     16    head_sum         XXH3-128 of header bytes ``0 .. 63`` and the metadata
    ====== ===== ================ =====================================================

An **empty** slot's first 80 bytes are all zero (a fresh file is zeros; ``delete`` writes
zeros). Any other header is a record, and a record is **valid** when its magic, version,
slot number, store id and sizes are the expected ones and ``head_sum`` matches; its
payload is **intact** when ``payload_sum`` matches too. A record that is not valid is
left out of the index at open, and left as it is in the file (opening writes nothing,
R-TIER-12); one whose payload is not intact is dropped when it is read (or left out at
open with ``verify_payloads=True``).

Versions. Version 2 added the identity (the model and the KV layout the bytes are,
:mod:`~kachedb_radix.reference.tiers.identity`, R-TIER-11) and made the header's padding
part of what is checked. A version-1 file is refused whole with
:class:`StoreVersionError`, which says how to start it afresh: its blocks name no model,
so no cache can vouch that they are its own, and opening never rewrites a file.

Why XXH3-128: ``xxhash`` is already a dependency, it hashes at memory speed (tens of GB/s,
so the checksum costs a small fraction of a disk read; ``benchmarks/bench_disk.py``
measures it), and 128 bits make an undetected torn or rotted record a 2**-128 event. It
guards against accidents (torn writes, bit rot, stray writes), not against an attacker
who can write the file: such a person can write any block anyway.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import xxhash

from .disk_errors import StoreFormatError, StoreVersionError
from .identity import COUNT_FIELDS, TEXT_LIMITS, SlabIdentity

#: Every file offset and every slot boundary is a multiple of this.
PAGE = 4096
#: The format this code writes and the only one it reads (see "Versions" above).
FORMAT_VERSION = 2
FILE_MAGIC = b"kachedbS"
RECORD_MAGIC = b"kachedbB"

_FILE_FIELDS = struct.Struct("<8sIIQQIIQQQ")  # magic .. store_id: 64 bytes
_IDENTITY_COUNTS = struct.Struct("<IIII")  # layers, kv_heads, head_dim, tokens_per_block
_IDENTITY_TEXTS = struct.Struct("<" + "".join(f"H{limit}s" for limit in TEXT_LIMITS.values()))
_RECORD_FIELDS = struct.Struct("<8sIIQQIIQ16s")  # magic .. payload_sum: 64 bytes, then head_sum
CHECKSUM_BYTES = 16
#: The header bytes the checksum covers: the geometry and the identity.
_SUMMED_BYTES = _FILE_FIELDS.size + _IDENTITY_COUNTS.size + _IDENTITY_TEXTS.size
FILE_HEADER_BYTES = _SUMMED_BYTES + CHECKSUM_BYTES
RECORD_HEADER_BYTES = _RECORD_FIELDS.size + CHECKSUM_BYTES
EMPTY_HEADER = bytes(RECORD_HEADER_BYTES)
#: What ``delete`` (and a drop) writes at a slot: its whole first page, zeros. The header
#: needs only its 80 bytes zeroed, but a write of part of a page whose page is not in the
#: page cache makes the kernel read that page from the disk first, synchronously: a
#: whole-page write never waits for a read (see :func:`encode_record`).
EMPTY_PAGE = bytes(PAGE)

#: Limits of the geometry: the fields' widths, and metadata that fits a sane header.
MAX_SLOTS = 2**32 - 1
MAX_META_BYTES = 2**20
MAX_BLOCK_BYTES = 2**40


def checksum(*parts: bytes | memoryview) -> bytes:
    """XXH3-128 of the parts, concatenated. O(total bytes), no copy of the parts."""
    hasher = xxhash.xxh3_128()
    for part in parts:
        hasher.update(part)
    return hasher.digest()


def align(size: int) -> int:
    """``size`` rounded up to a whole number of pages. O(1)."""
    return -(-size // PAGE) * PAGE


@dataclass(frozen=True)
class Geometry:
    """Where everything lives in a store's file; fixed at creation.

    ``slot_offset(s)`` is where slot ``s`` begins, ``payload_offset`` where its payload
    begins inside the slot, ``file_bytes`` the exact size of the file.
    """

    slots: int
    block_bytes: int
    meta_bytes: int
    store_id: int

    @property
    def payload_offset(self) -> int:
        return align(RECORD_HEADER_BYTES + self.meta_bytes)

    @property
    def stride(self) -> int:
        return self.payload_offset + align(self.block_bytes)

    @property
    def file_bytes(self) -> int:
        return PAGE + self.slots * self.stride

    def slot_offset(self, slot: int) -> int:
        return PAGE + slot * self.stride

    @property
    def head_bytes(self) -> int:
        """What one read of a slot's header must cover: the header and the longest metadata."""
        return RECORD_HEADER_BYTES + self.meta_bytes


def geometry_problem(slots: object, block_bytes: object, meta_bytes: object) -> str | None:
    """Why ``(slots, block_bytes, meta_bytes)`` cannot be a store's geometry, or None. O(1)."""
    for name, value, low, high in (
        ("slots", slots, 1, MAX_SLOTS),
        ("block_bytes", block_bytes, 1, MAX_BLOCK_BYTES),
        ("meta_bytes", meta_bytes, 0, MAX_META_BYTES),
    ):
        if not isinstance(value, int) or isinstance(value, bool):
            return f"{name} must be an int, got {type(value).__name__}"
        if not low <= value <= high:
            return f"{name} = {value} is outside {low} .. {high}"
    return None


def encode_file_header(geometry: Geometry, identity: SlabIdentity) -> bytes:
    """The file header page for ``geometry`` and ``identity``: 4,096 bytes, checksum
    included, zeros after it. O(1)."""
    fields = _FILE_FIELDS.pack(
        FILE_MAGIC,
        FORMAT_VERSION,
        PAGE,
        geometry.slots,
        geometry.block_bytes,
        geometry.meta_bytes,
        RECORD_HEADER_BYTES,
        geometry.stride,
        geometry.payload_offset,
        geometry.store_id,
    )
    counts = _IDENTITY_COUNTS.pack(*(getattr(identity, name) for name in COUNT_FIELDS))
    texts: list[int | bytes] = []
    for name in TEXT_LIMITS:
        encoded = getattr(identity, name).encode()
        texts += [len(encoded), encoded]
    summed = fields + counts + _IDENTITY_TEXTS.pack(*texts)
    return (summed + checksum(summed)).ljust(PAGE, b"\0")


def decode_file_header(path: str, raw: bytes, file_bytes: int) -> tuple[Geometry, SlabIdentity]:
    """The geometry and identity that ``raw`` (the first page of the file at ``path``,
    whose size is ``file_bytes``) describes. O(PAGE): every byte of the page is checked.

    Raises :class:`StoreFormatError` naming the file and the first problem found, in the
    order that makes the message the most useful one: too short, not ours (magic), another
    version (magic and version keep their offsets in every version), a corrupted header
    (checksum), a byte after the header that is not zero, an identity text that is not
    what the format writes, a geometry that does not add up, a file size that does not
    match it. :class:`StoreVersionError` (a :class:`StoreFormatError`) for another format
    version.
    """

    def refuse(problem: str) -> StoreFormatError:
        return StoreFormatError(f"{path}: {problem}")

    if len(raw) < PAGE:
        raise refuse(f"truncated: {file_bytes} bytes, shorter than a store's file header")
    fields = _FILE_FIELDS.unpack_from(raw)
    magic, version, first_slot, slots, block_bytes, meta_bytes, record_header = fields[:7]
    stride, payload_offset, store_id = fields[7:]
    if magic != FILE_MAGIC:
        raise refuse(f"not a kachedb-radix disk store (magic {magic!r}, expected {FILE_MAGIC!r})")
    if version != FORMAT_VERSION:
        raise StoreVersionError(f"{path}: {version_problem(version)}")
    if raw[_SUMMED_BYTES:FILE_HEADER_BYTES] != checksum(raw[:_SUMMED_BYTES]):
        raise refuse("the file header fails its checksum (corrupted header)")
    padding = raw[FILE_HEADER_BYTES:PAGE]
    if padding.count(0) != len(padding):
        offset = FILE_HEADER_BYTES + next(i for i, byte in enumerate(padding) if byte)
        raise refuse(
            f"byte {offset} of the file header is {raw[offset]:#04x}, not zero "
            f"(bytes {FILE_HEADER_BYTES} .. {PAGE - 1} are padding; corrupted header)"
        )
    identity = _decode_identity(path, raw)
    problem = geometry_problem(slots, block_bytes, meta_bytes)
    if problem is not None:
        raise refuse(f"inconsistent geometry: {problem}")
    geometry = Geometry(slots, block_bytes, meta_bytes, store_id)
    declared = (first_slot, record_header, stride, payload_offset)
    derived = (PAGE, RECORD_HEADER_BYTES, geometry.stride, geometry.payload_offset)
    if declared != derived:
        raise refuse(
            "inconsistent geometry: (first_slot, record_header, stride, payload_offset) = "
            f"{declared}, but slots={slots}, block_bytes={block_bytes}, "
            f"meta_bytes={meta_bytes} give {derived}"
        )
    if file_bytes != geometry.file_bytes:
        what = "truncated" if file_bytes < geometry.file_bytes else "too long"
        raise refuse(
            f"{what}: {file_bytes} bytes, but {slots} slots of {geometry.stride} bytes "
            f"need exactly {geometry.file_bytes}"
        )
    return geometry, identity


def version_problem(version: int) -> str:
    """What a file of format ``version`` (not this code's) is, and what to do. O(1)."""
    if version == 1:
        return (
            "format version 1, written before slab files recorded whose KV they hold (the "
            f"model and layout); this code reads version {FORMAT_VERSION} only and cannot "
            "vouch for its blocks. The file is left as it is: start it afresh "
            "(KVCache(..., disk_afresh=True), or DiskBlockStore.create(..., overwrite=True)), "
            "which discards its blocks, or read it with the kachedb-radix that wrote it"
        )
    return f"format version {version}; this code reads version {FORMAT_VERSION} only"


def _decode_identity(path: str, raw: bytes) -> SlabIdentity:
    """The identity fields of header page ``raw`` (of the file at ``path``, its checksum
    already verified), each text field checked to be exactly what
    :func:`encode_file_header` writes. O(1)."""
    counts = _IDENTITY_COUNTS.unpack_from(raw, _FILE_FIELDS.size)
    unpacked = _IDENTITY_TEXTS.unpack_from(raw, _FILE_FIELDS.size + _IDENTITY_COUNTS.size)
    values: dict[str, object] = dict(zip(COUNT_FIELDS, counts, strict=True))
    for position, (name, limit) in enumerate(TEXT_LIMITS.items()):
        length, stored = unpacked[2 * position], unpacked[2 * position + 1]
        problem = None
        if length > limit:
            problem = f"its length says {length} bytes, more than the field's {limit}"
        elif stored[length:].count(0) != limit - length:
            problem = "bytes after its text are not zero"
        else:
            try:
                values[name] = stored[:length].decode("utf-8")
            except UnicodeDecodeError:
                problem = "its text is not UTF-8"
        if problem is not None:
            raise StoreFormatError(f"{path}: the file header's {name} field is bad: {problem}")
    return SlabIdentity(**values)  # type: ignore[arg-type]  # the fields' types were just made


@dataclass(frozen=True)
class Record:
    """A valid record header, decoded: what the index keeps of each occupied slot."""

    slot: int
    seq: int
    meta: bytes
    payload_sum: bytes


def encode_record(geometry: Geometry, record: Record) -> bytes:
    """The record header followed by its metadata and zeros up to the payload: the slot's
    whole header region (``payload_offset`` bytes, whole pages), ready to be written at
    the slot. O(meta_bytes).

    Whole pages because the header is written after the payload, into a page of its own:
    a write of part of a page that is not in the page cache (a large disk tier's usual
    case, or any slot after its pages were reclaimed) makes the kernel read the page from
    the disk before changing it, one synchronous read per put. A whole page replaces it
    without a read. The zeros after the metadata are never read as data (``meta_len``
    says where it ends)."""
    fields = _RECORD_FIELDS.pack(
        RECORD_MAGIC,
        FORMAT_VERSION,
        record.slot,
        record.seq,
        geometry.store_id,
        len(record.meta),
        0,
        geometry.block_bytes,
        record.payload_sum,
    )
    head = fields + checksum(fields, record.meta) + record.meta
    return head.ljust(geometry.payload_offset, b"\0")


def decode_record(geometry: Geometry, slot: int, raw: bytes) -> Record | str | None:
    """Read slot ``slot``'s header bytes ``raw`` (at least ``RECORD_HEADER_BYTES``, up to
    ``geometry.head_bytes``): None for an empty slot, the :class:`Record` for a valid one,
    else why it is not valid. O(meta)."""
    if raw[:RECORD_HEADER_BYTES] == EMPTY_HEADER:
        return None
    magic, version, own_slot, seq, store_id, meta_len, flags, payload_bytes, payload_sum = (
        _RECORD_FIELDS.unpack_from(raw)
    )
    if magic != RECORD_MAGIC:
        return f"bad record magic {magic!r}"
    if version != FORMAT_VERSION:
        return f"record version {version}, expected {FORMAT_VERSION}"
    if own_slot != slot:
        return f"the record says slot {own_slot}"
    if store_id != geometry.store_id:
        return f"the record belongs to store {store_id:#x}, not {geometry.store_id:#x}"
    if flags != 0 or payload_bytes != geometry.block_bytes or meta_len > geometry.meta_bytes:
        return (
            f"bad sizes: flags={flags}, payload_bytes={payload_bytes}, meta_len={meta_len} "
            f"(block_bytes={geometry.block_bytes}, meta_bytes={geometry.meta_bytes})"
        )
    meta = raw[RECORD_HEADER_BYTES : RECORD_HEADER_BYTES + meta_len]
    head_sum = raw[_RECORD_FIELDS.size : RECORD_HEADER_BYTES]
    if head_sum != checksum(raw[: _RECORD_FIELDS.size], meta):
        return "the record header fails its checksum (torn or corrupted)"
    return Record(slot, seq, bytes(meta), payload_sum)
