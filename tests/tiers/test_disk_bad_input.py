"""Bad calls and bad files: typed errors that name the file, and nothing changed.

A bad call (a slot out of range, a payload of the wrong size, metadata too long...) raises
its own :class:`StoreError` subclass and leaves the file's bytes, the index and the counters
exactly as they were. A bad file (empty, truncated, foreign, of another version, with a
corrupted header or padding, a malformed identity or a geometry that does not add up) is
refused by ``open`` with a :class:`StoreFormatError`, the file untouched. A bad *record*
inside a good file is left out and counted, never served: at open for a damaged header or
metadata (and left in the file: opening writes nothing, R-TIER-12), at read for a damaged
payload.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kachedb_radix.reference.tiers import (
    CorruptBlockError,
    DiskBlockStore,
    MetaError,
    PayloadError,
    SlotEmptyError,
    SlotOccupiedError,
    SlotRangeError,
    StoreError,
    StoreFormatError,
    StoreIOError,
    StoreNotFoundError,
    StoreVersionError,
)
from kachedb_radix.reference.tiers.disk_format import (
    FILE_HEADER_BYTES,
    PAGE,
    RECORD_HEADER_BYTES,
    checksum,
)
from tests.tiers import blocks

BLOCK = PAGE + 100
META = 64


@pytest.fixture
def store(tmp_path: Path) -> DiskBlockStore:
    """A store with blocks in slots 0 and 2 (slots 1 and 3 empty)."""
    made = DiskBlockStore.create(tmp_path / "kv.store", slots=4, block_bytes=BLOCK, meta_bytes=META)
    for slot in (0, 2):
        made.put(slot, blocks.meta(slot, slot, META), blocks.payload(slot, BLOCK))
    return made


def state(store: DiskBlockStore) -> tuple[bytes, list[tuple[int, bytes]], Any]:
    """Everything a bad call must leave alone: the file, the index, the counters."""
    return Path(store.path).read_bytes(), list(store.items()), store.stats()


BAD_CALLS: list[tuple[str, Callable[[Any], object], type[StoreError], str]] = [
    ("slot too big", lambda s: s.put(4, b"", bytes(BLOCK)), SlotRangeError, r"slot 4 .*0 \.\. 3"),
    ("slot negative", lambda s: s.get(-1), SlotRangeError, "slot -1 is out of range"),
    ("slot a float", lambda s: s.delete(1.0), SlotRangeError, "got float"),
    ("slot a bool", lambda s: s.read_into(True, bytearray(BLOCK)), SlotRangeError, "got bool"),
    ("slot a string", lambda s: s.record("0"), SlotRangeError, "got str"),
    ("occupied", lambda s: s.put(np.int64(2), b"", bytes(BLOCK)), SlotOccupiedError, "slot 2"),
    ("delete empty", lambda s: s.delete(1), SlotEmptyError, "slot 1 holds no block"),
    (
        "payload short",
        lambda s: s.put(1, b"", bytes(BLOCK - 1)),
        PayloadError,
        f"{BLOCK - 1} bytes",
    ),
    (
        "payload long",
        lambda s: s.put(1, b"", np.zeros(BLOCK + 8, np.uint8)),
        PayloadError,
        "blocks have",
    ),
    (
        "payload strided",
        lambda s: s.put(1, b"", np.zeros(2 * BLOCK, np.uint8)[::2]),
        PayloadError,
        "C-contiguous",
    ),
    (
        "payload strided view",
        lambda s: s.put(1, b"", memoryview(bytes(2 * BLOCK))[::2]),
        PayloadError,
        "C-contiguous",
    ),
    ("payload not a buffer", lambda s: s.put(1, b"", [0] * BLOCK), PayloadError, "got list"),
    (
        "meta too long",
        lambda s: s.put(1, bytes(META + 1), bytes(BLOCK)),
        MetaError,
        f"{META + 1} bytes",
    ),
    ("meta a string", lambda s: s.put(1, "name", bytes(BLOCK)), MetaError, "got str"),
    ("out read-only", lambda s: s.read_into(0, bytes(BLOCK)), PayloadError, "writable"),
    ("out frozen array", lambda s: s.read_into(0, _frozen()), PayloadError, "writable"),
    (
        "out short",
        lambda s: s.read_into(0, bytearray(BLOCK - 1)),
        PayloadError,
        f"{BLOCK - 1} bytes",
    ),
    (
        "out of an empty slot, short",
        lambda s: s.read_into(1, bytearray(3)),
        PayloadError,
        "3 bytes",
    ),
]


def _frozen() -> np.ndarray[Any, Any]:
    out = np.zeros(BLOCK, np.uint8)
    out.flags.writeable = False
    return out


@pytest.mark.parametrize(
    ("name", "call", "error", "message"), BAD_CALLS, ids=[c[0] for c in BAD_CALLS]
)
def test_a_bad_call_changes_nothing(
    store: DiskBlockStore,
    name: str,
    call: Callable[[DiskBlockStore], object],
    error: type[StoreError],
    message: str,
) -> None:
    before = state(store)
    with pytest.raises(error, match=message) as raised:
        call(store)
    assert str(raised.value).startswith(f"{store.path}: ")
    assert state(store) == before
    store.check_invariants(deep=True)


# -- bad files ------------------------------------------------------------------------


SUMMED = FILE_HEADER_BYTES - 16  # the header bytes its checksum covers


def _patch(path: Path, offset: int, fmt: str, value: Any, *, reseal: bool) -> None:
    """Write ``value`` into the file header at ``offset``; ``reseal`` recomputes its checksum
    (a header that is consistent with itself, yet wrong)."""
    with path.open("r+b") as file:
        raw = bytearray(file.read(PAGE))
        struct.pack_into(fmt, raw, offset, value)
        if reseal:
            raw[SUMMED:FILE_HEADER_BYTES] = checksum(bytes(raw[:SUMMED]))
        file.seek(0)
        file.write(raw)


def _into_directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _resize(path: Path, change: int) -> None:
    size = path.stat().st_size
    with path.open("r+b") as file:
        file.truncate(size + change)


BAD_FILES: list[tuple[str, Callable[[Path], object], type[StoreError], str]] = [
    ("empty", lambda p: p.write_bytes(b""), StoreFormatError, "truncated: 0 bytes, shorter than"),
    (
        "a few bytes",
        lambda p: p.write_bytes(b"kachedbS" + bytes(20)),
        StoreFormatError,
        "truncated: 28",
    ),
    (
        "foreign",
        lambda p: p.write_bytes(b"# notes\n" * 2000),
        StoreFormatError,
        "not a kachedb-radix disk store",
    ),
    (
        "version 3",
        lambda p: _patch(p, 8, "<I", 3, reseal=True),
        StoreVersionError,
        "format version 3; this code reads version 2 only",
    ),
    (
        "version 1 (no identity)",
        lambda p: _patch(p, 8, "<I", 1, reseal=False),
        StoreVersionError,
        r"format version 1, written before slab files recorded whose KV .* afresh",
    ),
    (
        "a flipped padding byte",
        lambda p: _patch(p, PAGE - 1, "<B", 1, reseal=False),
        StoreFormatError,
        "byte 4095 of the file header is 0x01, not zero",
    ),
    (
        "the first padding byte",
        lambda p: _patch(p, FILE_HEADER_BYTES, "<B", 0x80, reseal=True),
        StoreFormatError,
        f"byte {FILE_HEADER_BYTES} of the file header is 0x80",
    ),
    (
        "a flipped identity byte",
        lambda p: _patch(p, 64, "<I", 3, reseal=False),
        StoreFormatError,
        "fails its checksum",
    ),
    (
        "a model name too long",
        lambda p: _patch(p, 80, "<H", 257, reseal=True),
        StoreFormatError,
        "model field is bad: its length says 257 bytes",
    ),
    (
        "bytes after a text",
        lambda p: _patch(p, 82 + 200, "<B", 7, reseal=True),
        StoreFormatError,
        "model field is bad: bytes after its text are not zero",
    ),
    (
        "a text not UTF-8",
        lambda p: _patch(p, 468, "<I", 0xFEFF0002, reseal=True),  # length 2, bytes ff fe
        StoreFormatError,
        "dtype field is bad: its text is not UTF-8",
    ),
    (
        "version 7, no seal",
        lambda p: _patch(p, 8, "<I", 7, reseal=False),
        StoreVersionError,
        "version 7",
    ),
    (
        "a flipped byte",
        lambda p: _patch(p, 16, "<Q", 5, reseal=False),
        StoreFormatError,
        "fails its checksum",
    ),
    (
        "zero slots",
        lambda p: _patch(p, 16, "<Q", 0, reseal=True),
        StoreFormatError,
        "inconsistent geometry: slots = 0",
    ),
    (
        "wrong stride",
        lambda p: _patch(p, 40, "<Q", 4 * PAGE, reseal=True),
        StoreFormatError,
        r"inconsistent geometry: \(first_slot",
    ),
    (
        "one byte short",
        lambda p: _resize(p, -1),
        StoreFormatError,
        r"truncated: \d+ bytes, but 4 slots of 12288 bytes need",
    ),
    (
        "header only",
        lambda p: _resize(p, PAGE - p.stat().st_size),
        StoreFormatError,
        "truncated: 4096 bytes",
    ),
    ("a page too long", lambda p: _resize(p, PAGE), StoreFormatError, "too long"),
    ("missing", lambda p: p.unlink(), StoreNotFoundError, "no store there"),
    ("a directory", lambda p: _into_directory(p), StoreIOError, "Is a directory"),
]


@pytest.mark.parametrize("readonly", [False, True], ids=["writer", "reader"])
@pytest.mark.parametrize(
    ("name", "damage", "error", "message"), BAD_FILES, ids=[c[0] for c in BAD_FILES]
)
def test_a_bad_file_is_a_clear_error(
    store: DiskBlockStore,
    readonly: bool,
    name: str,
    damage: Callable[[Path], object],
    error: type[StoreError],
    message: str,
) -> None:
    store.close()
    path = Path(store.path)
    damage(path)
    before = path.read_bytes() if path.is_file() else None
    with pytest.raises(error, match=message) as raised:
        DiskBlockStore.open(path, readonly=readonly)
    assert str(raised.value).startswith(f"{path}: ") or f"{path}:" in str(raised.value)
    assert (path.read_bytes() if path.is_file() else None) == before  # refused, not repaired


# -- bad records inside a good file: dropped, counted, never served ---------------------

SLOT0 = PAGE  # where slot 0 begins
STRIDE = 3 * PAGE


def _flip(path: Path, offset: int) -> None:
    with path.open("r+b") as file:
        file.seek(offset)
        byte = file.read(1)
        file.seek(offset)
        file.write(bytes([byte[0] ^ 0x40]))


def _copy(source: Path, target: Path, from_slot: int, to_slot: int) -> None:
    with source.open("rb") as file:
        file.seek(SLOT0 + from_slot * STRIDE)
        region = file.read(STRIDE)
    with target.open("r+b") as file:
        file.seek(SLOT0 + to_slot * STRIDE)
        file.write(region)


def _reseal_record(path: Path, offset: int, fmt: str, value: int) -> None:
    """Change a field of slot 0's record header and recompute its header checksum."""
    with path.open("r+b") as file:
        file.seek(SLOT0)
        raw = bytearray(file.read(RECORD_HEADER_BYTES + META))
        struct.pack_into(fmt, raw, offset, value)
        meta_len = struct.unpack_from("<I", raw, 32)[0]
        raw[64:80] = checksum(bytes(raw[:64]), bytes(raw[80 : 80 + meta_len]))
        file.seek(SLOT0)
        file.write(raw)


def _foreign_record(path: Path) -> None:
    """Slot 0 of another store of the same geometry, copied over slot 0."""
    other = path.with_name("other")
    with DiskBlockStore.create(other, 4, BLOCK, META) as elsewhere:
        elsewhere.put(0, blocks.meta(0, 0, META), blocks.payload(0, BLOCK))
    _copy(other, path, 0, 0)


BAD_RECORDS: list[tuple[str, Callable[[Path], None], int, str]] = [
    ("magic", lambda p: _flip(p, SLOT0 + 1), 0, "bad record magic"),
    ("sequence number", lambda p: _flip(p, SLOT0 + 16), 0, "fails its checksum"),
    ("metadata", lambda p: _flip(p, SLOT0 + RECORD_HEADER_BYTES + 3), 0, "fails its checksum"),
    ("moved to slot 1", lambda p: _copy(p, p, 0, 1), 1, "the record says slot 0"),
    ("another store's", _foreign_record, 0, "belongs to store"),
    ("record version 3", lambda p: _reseal_record(p, 8, "<I", 3), 0, "record version 3"),
    ("meta_len too big", lambda p: _reseal_record(p, 32, "<I", META + 1), 0, "bad sizes"),
    ("flags set", lambda p: _reseal_record(p, 36, "<I", 1), 0, "bad sizes"),
]


@pytest.mark.parametrize(
    ("name", "damage", "slot", "why"), BAD_RECORDS, ids=[c[0] for c in BAD_RECORDS]
)
def test_a_damaged_record_is_dropped_at_open(
    store: DiskBlockStore, name: str, damage: Callable[[Path], None], slot: int, why: str
) -> None:
    store.close()
    path = Path(store.path)
    damage(path)
    damaged = path.read_bytes()
    with DiskBlockStore.open(path, readonly=True) as reader:  # drops, repairs nothing
        assert slot not in reader and reader.get(slot) is None
        (dropped,) = reader.stats().dropped
        assert dropped[0] == slot and why in dropped[1]
        reader.check_invariants(deep=True)
    assert path.read_bytes() == damaged
    with DiskBlockStore.open(path) as writer:  # leaves it as well: opening writes nothing
        stats = writer.stats()
        assert (stats.dropped_at_open, stats.unusable, stats.unsynced) == (1, 1, 0)
        assert slot not in writer
        writer.check_invariants(deep=True)
        kept = dict(writer.items())
    assert path.read_bytes() == damaged  # R-TIER-12
    with DiskBlockStore.open(path) as again:  # a put to its slot replaces it
        assert again.stats().unusable == 1
        again.put(slot, blocks.meta(slot, 9, META), blocks.payload(9, BLOCK))
        assert again.stats().unusable == 0
        again.check_invariants(deep=True)
    with DiskBlockStore.open(path) as last:
        assert last.stats().dropped_corrupt == 0 and dict(last.items()) == {
            **kept,
            slot: blocks.meta(slot, 9, META),
        }


@pytest.mark.parametrize("readonly", [False, True], ids=["writer", "reader"])
def test_a_damaged_payload_is_never_served(store: DiskBlockStore, readonly: bool) -> None:
    store.close()
    path = Path(store.path)
    _flip(path, SLOT0 + 2 * STRIDE + PAGE + 77)  # a byte of slot 2's payload
    with DiskBlockStore.open(path, readonly=readonly) as opened:
        assert 2 in opened  # open reads headers only: the damage shows at the read
        with pytest.raises(
            CorruptBlockError, match=r"slot 2 .* failed its payload checksum"
        ) as bad:
            opened.read_into(2, bytearray(BLOCK))
        assert bad.value.slot == 2 and 2 not in opened and opened.get(2) is None
        stats = opened.stats()
        assert (stats.dropped_at_read, stats.dropped_corrupt, stats.occupied) == (1, 1, 1)
        assert stats.dropped == ((2, "payload checksum mismatch"),)
        opened.check_invariants(deep=True)
    with DiskBlockStore.open(path, verify_payloads=True) as verified:
        assert verified.stats().dropped_at_open == (1 if readonly else 0)
        assert list(verified.slots()) == [0]
        verified.check_invariants(deep=True)


def test_verify_payloads_drops_at_open(store: DiskBlockStore) -> None:
    store.close()
    path = Path(store.path)
    _flip(path, SLOT0 + PAGE)  # the first byte of slot 0's payload
    with DiskBlockStore.open(path, readonly=True, verify_payloads=True) as reader:
        assert list(reader.slots()) == [2]
        assert reader.stats().dropped == ((0, "payload checksum mismatch"),)
        reader.check_invariants()


def test_a_corrupted_store_stays_replaceable(store: DiskBlockStore) -> None:
    store.close()
    path = Path(store.path)
    _patch(path, 16, "<Q", 9, reseal=False)
    with pytest.raises(StoreFormatError):
        DiskBlockStore.open(path)
    with DiskBlockStore.create(path, 4, BLOCK, META, overwrite=True) as fresh:
        assert len(fresh) == 0


def test_invariants_catch_a_file_changed_behind_the_index(store: DiskBlockStore) -> None:
    """check_invariants can fail: the file edited under an open handle."""
    path = Path(store.path)
    store.check_invariants(deep=True)
    _flip(path, SLOT0 + 2 * STRIDE + PAGE)  # slot 2's payload
    store.check_invariants()  # headers still agree
    with pytest.raises(AssertionError, match="slot 2: bad payload"):
        store.check_invariants(deep=True)
    _flip(path, SLOT0 + 2 * STRIDE + PAGE)
    with path.open("r+b") as file:
        file.seek(SLOT0 + STRIDE)
        file.write(bytes(range(1, 81)))  # garbage where slot 1 is empty
    with pytest.raises(AssertionError, match="slot 1: not in the index"):
        store.check_invariants()
    _patch(path, 56, "<Q", 1, reseal=True)
    with pytest.raises(AssertionError, match="the file header changed"):
        store.check_invariants()
    store.close()
