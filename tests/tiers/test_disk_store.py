"""The disk block store's API on real files: put, get, restore into a buffer, delete, reopen warm.

A Hypothesis state machine drives a small store against a dictionary, closing and reopening
it at random, with ``check_invariants`` after every step; the other tests pin down one
behaviour each (buffers of any dtype, sequence numbers, locks, read-only handles, create's
refusals, failing system calls).
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from kachedb_radix.reference.tiers import (
    DiskBlockStore,
    ReadOnlyStoreError,
    SlotEmptyError,
    SlotOccupiedError,
    SlotRangeError,
    StoreClosedError,
    StoreConfigError,
    StoreError,
    StoreExistsError,
    StoreInvariantError,
    StoreIOError,
    StoreLockedError,
    disk_io,
)
from kachedb_radix.reference.tiers.disk_errors import MetaError, PayloadError
from kachedb_radix.reference.tiers.disk_format import PAGE, RECORD_HEADER_BYTES
from tests.tiers import blocks

BLOCK = 3 * PAGE + 123  # a payload that ends inside a page
META = 96


def make(path: Path, slots: int = 6) -> DiskBlockStore:
    return DiskBlockStore.create(path, slots=slots, block_bytes=BLOCK, meta_bytes=META)


def test_put_get_delete_and_reopen_warm(tmp_path: Path) -> None:
    path = tmp_path / "kv.store"
    with make(path) as store:
        assert store.capacity == 6 and len(store) == 0 and list(store.items()) == []
        seqs = [store.put(slot, blocks.meta(slot, slot, META), blocks.payload(slot, BLOCK))
                for slot in (4, 1, 2)]  # fmt: skip
        assert seqs == [1, 2, 3]
        store.delete(2)
        assert list(store.slots()) == [1, 4] and 2 not in store and 4 in store
        assert [record.slot for record in store.records()] == [4, 1]  # oldest write first
        found = store.get(4)
        assert found is not None
        meta, payload = found
        assert meta == blocks.meta(4, 4, META) and payload.dtype == np.uint8
        assert payload.flags.writeable and np.array_equal(payload, blocks.payload(4, BLOCK))
        assert store.get(0) is None and store.get(2) is None
        store.check_invariants(deep=True)
    with DiskBlockStore.open(path) as again:
        assert list(again.items()) == [(1, blocks.meta(1, 1, META)), (4, blocks.meta(4, 4, META))]
        assert again.stats().next_seq == 3  # continues after the largest live seq
        assert again.put(0, b"", bytes(BLOCK)) == 3
        again.check_invariants(deep=True)


EVEN = BLOCK - 3  # a multiple of 8, for wider dtypes


@pytest.mark.parametrize(
    "make_payload",
    [
        lambda data: data.tobytes(),
        lambda data: bytearray(data.tobytes()),
        lambda data: memoryview(data.tobytes()),
        lambda data: data,
        lambda data: data.view(np.float16),
        lambda data: data.reshape(2, EVEN // 2),
        lambda data: memoryview(data.view(np.uint16).reshape(2, EVEN // 4)),
    ],
    ids=["bytes", "bytearray", "memoryview", "uint8", "float16", "2d", "2d-uint16-memoryview"],
)
def test_any_c_contiguous_buffer_is_a_payload(tmp_path: Path, make_payload: Any) -> None:
    """bytes, NumPy arrays of any dtype and shape: the bytes go in and come out as they were."""
    data = blocks.payload(7, EVEN)
    with DiskBlockStore.create(tmp_path / "s", slots=1, block_bytes=EVEN, meta_bytes=0) as store:
        store.put(0, b"", make_payload(data))
        out = np.zeros(EVEN // 2, dtype=np.float16)  # any dtype receives, too
        assert store.read_into(0, out) == b""
        assert out.tobytes() == data.tobytes()


def test_read_into_fills_the_callers_buffer_in_place(tmp_path: Path) -> None:
    """Restore straight into a preallocated host buffer: a float16 array, a bytearray."""
    with make(tmp_path / "s") as store:
        store.put(3, b"m", blocks.payload(3, BLOCK))
        buffers: list[np.ndarray[Any, Any] | bytearray] = [
            np.full(BLOCK, 9, np.uint8),
            bytearray(BLOCK),
        ]
        for out in buffers:
            assert store.read_into(3, out) == b"m"
            assert bytes(out) == blocks.payload(3, BLOCK).tobytes()
        assert store.read_into(2, bytearray(BLOCK)) is None
        halves = np.zeros(BLOCK + 1, dtype=np.uint8)[1:]  # unaligned start: still fine
        assert store.read_into(3, halves) == b"m"
        assert np.array_equal(halves, blocks.payload(3, BLOCK))
        assert store.stats().reads == 3 and store.stats().bytes_read == 3 * BLOCK


@pytest.mark.parametrize(
    "block_bytes", [BLOCK, 2**16 + 123], ids=["read-inline", "read-on-helper-threads"]
)
def test_read_many_into_serves_the_leading_run_it_verifies(
    tmp_path: Path, block_bytes: int
) -> None:
    """``read_many_into`` reads as that many ``read_into`` calls would and stops at the
    first slot it cannot serve -- an empty one, or one whose payload fails its checksum
    (dropped) -- on either path (below 64 KiB each block is read and hashed inline; above,
    helper threads read and hash the next blocks while block i is looked at)."""
    path = tmp_path / "s"
    with DiskBlockStore.create(path, slots=6, block_bytes=block_bytes, meta_bytes=META) as store:
        for slot in range(5):
            store.put(slot, bytes([slot]), blocks.payload(slot, block_bytes))
        outs = [np.zeros(block_bytes, np.uint8) for _ in range(6)]
        assert store.read_many_into([4, 0, 2], outs[:3], ahead=2) == [b"\x04", b"\x00", b"\x02"]
        for out, slot in zip(outs, [4, 0, 2], strict=False):
            assert np.array_equal(out, blocks.payload(slot, block_bytes))
        assert store.read_many_into([1, 5, 3], outs[:3]) == [b"\x01"]  # slot 5 is empty
        assert store.read_many_into([], []) == []
        assert store.stats().reads == 4
        offset = store._geometry.slot_offset(3) + store._geometry.payload_offset
    with open(path, "r+b") as handle:  # one flipped byte in slot 3's payload
        handle.seek(offset + block_bytes // 2)
        byte = handle.read(1)
        handle.seek(offset + block_bytes // 2)
        handle.write(bytes([byte[0] ^ 0x01]))
    with DiskBlockStore.open(path) as store:
        assert store.read_many_into([0, 3, 1], outs[:3], ahead=1) == [b"\x00"]
        assert 3 not in store and 1 in store  # the bad block dropped, as read_into drops it
        store.check_invariants()


def test_a_failed_read_in_a_batch_is_a_store_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An I/O error on a helper thread's read reaches the caller as StoreIOError naming
    the slot; the store stays whole."""
    size = 2**16 + 123
    real_preadv = os.preadv
    with DiskBlockStore.create(tmp_path / "s", slots=4, block_bytes=size, meta_bytes=0) as store:
        for slot in range(4):
            store.put(slot, b"", blocks.payload(slot, size))
        failing_at = store._geometry.slot_offset(2) + store._geometry.payload_offset

        def flaky(fd: int, buffers: Any, offset: int) -> int:
            if offset == failing_at:
                raise OSError(errno.EIO, "Input/output error")
            return real_preadv(fd, buffers, offset)

        monkeypatch.setattr(os, "preadv", flaky)
        outs = [bytearray(size) for _ in range(4)]
        with pytest.raises(StoreIOError, match=r"read slot 2: .*Input/output error"):
            store.read_many_into([0, 1, 2, 3], outs)
        monkeypatch.setattr(os, "preadv", real_preadv)
        assert len(store) == 4
        store.check_invariants()


def test_read_many_into_checks_every_argument_before_reading(tmp_path: Path) -> None:
    with make(tmp_path / "s") as store:
        store.put(0, b"m", blocks.payload(0, BLOCK))
        out = bytearray(BLOCK)
        with pytest.raises(PayloadError, match="2 slots but 1 buffers"):
            store.read_many_into([0, 0], [out])
        with pytest.raises(SlotRangeError):
            store.read_many_into([0, 6], [out, bytearray(BLOCK)])
        with pytest.raises(PayloadError):
            store.read_many_into([0, 0], [out, bytearray(BLOCK - 1)])
        assert store.stats().reads == 0 and out == bytearray(BLOCK)


def test_put_never_overwrites_a_live_block(tmp_path: Path) -> None:
    with make(tmp_path / "s") as store:
        store.put(1, b"old", bytes(BLOCK))
        with pytest.raises(SlotOccupiedError, match="slot 1 holds a block"):
            store.put(1, b"new", bytes(BLOCK))
        store.delete(1)
        with pytest.raises(SlotEmptyError, match="slot 1 holds no block"):
            store.delete(1)
        store.put(1, b"new", bytes(BLOCK))
        found = store.get(1)
        assert found is not None and found[0] == b"new" and not found[1].any()


def test_stats_count_what_happened(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with make(path) as store:
        for slot in range(3):
            store.put(slot, b"x", bytes(BLOCK))
        store.delete(0)
        stats = store.stats()
        assert (stats.puts, stats.deletes, stats.unsynced, stats.syncs) == (3, 1, 4, 0)
        assert (stats.occupied, stats.free, stats.capacity) == (2, 4, 6)
        assert stats.bytes_written == 3 * BLOCK and stats.path == str(path)
        assert stats.file_bytes == path.stat().st_size == PAGE + 6 * stats.slot_stride
        store.sync()
        store.sync()  # nothing new: no second flush
        assert (store.stats().unsynced, store.stats().syncs) == (0, 1)
        assert "2/6 slots" in repr(store)
    assert "closed" in repr(store)


def test_one_writer_or_many_readers(tmp_path: Path) -> None:
    path = tmp_path / "s"
    writer = make(path)
    with pytest.raises(StoreLockedError, match="open elsewhere"):
        DiskBlockStore.open(path)
    with pytest.raises(StoreLockedError, match="a writer holds it"):
        DiskBlockStore.open(path, readonly=True)
    writer.put(0, b"w", bytes(BLOCK))
    writer.close()
    with DiskBlockStore.open(path, readonly=True) as one, DiskBlockStore.open(path, readonly=True):
        assert one.readonly and one.get(0) is not None
        with pytest.raises(StoreLockedError):
            DiskBlockStore.open(path)
        with pytest.raises(ReadOnlyStoreError, match="read-only"):
            one.put(1, b"", bytes(BLOCK))
        with pytest.raises(ReadOnlyStoreError):
            one.delete(0)
        one.sync()  # a reader has nothing to flush
        one.check_invariants(deep=True)
    DiskBlockStore.open(path).close()


def test_closed_store_refuses_every_call(tmp_path: Path) -> None:
    store = make(tmp_path / "s")
    store.close()
    store.close()  # twice is fine
    assert store.closed
    calls: list[Callable[[], object]] = [
        lambda: store.put(0, b"", bytes(BLOCK)),
        lambda: store.get(0),
        lambda: store.read_into(0, bytearray(BLOCK)),
        lambda: store.delete(0),
        lambda: store.sync(),
        lambda: store.stats(),
        lambda: store.check_invariants(),
        lambda: list(store.items()),
        lambda: list(store.slots()),
        lambda: list(store.records()),
        lambda: store.record(0),
    ]
    for call in calls:
        with pytest.raises(StoreClosedError, match="closed"):
            call()


def test_the_constructor_is_not_public(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="create"):
        DiskBlockStore(str(tmp_path), 0, None, None, None, readonly=False)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("slots", "block_bytes", "meta_bytes", "problem"),
    [
        (0, 10, 0, "slots = 0 is outside"),
        (2**32, 10, 0, "slots = 4294967296 is outside"),
        (1, 0, 0, "block_bytes = 0"),
        (1, 10, -1, "meta_bytes = -1"),
        (1, 10, 2**20 + 1, "meta_bytes"),
        (True, 10, 0, "slots must be an int, got bool"),
        (1, 10.0, 0, "block_bytes must be an int, got float"),
    ],
)
def test_create_refuses_impossible_geometry(
    tmp_path: Path, slots: Any, block_bytes: Any, meta_bytes: Any, problem: str
) -> None:
    with pytest.raises(StoreConfigError, match=problem):
        DiskBlockStore.create(tmp_path / "s", slots, block_bytes, meta_bytes)
    assert list(tmp_path.iterdir()) == []


def test_create_refuses_to_overwrite_unless_asked(tmp_path: Path) -> None:
    path = tmp_path / "s"
    make(path).close()
    with pytest.raises(StoreExistsError, match="overwrite=True"):
        make(path)
    held = DiskBlockStore.open(path)
    with pytest.raises(StoreLockedError, match="cannot replace"):
        DiskBlockStore.create(path, 2, 8, 0, overwrite=True)
    held.close()
    path.write_bytes(b"a damaged store must stay replaceable")
    with DiskBlockStore.create(path, 2, 8, 0, overwrite=True) as fresh:
        assert fresh.capacity == 2
    assert [p.name for p in tmp_path.iterdir()] == ["s"]  # no temporary file left behind


def test_create_reports_what_the_file_system_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(StoreIOError, match="No such file or directory") as missing:
        make(tmp_path / "missing" / "s")
    assert missing.value.errno == errno.ENOENT

    def full(fd: int, offset: int, size: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(StoreIOError, match="No space left") as nospace:
        make(tmp_path / "s")
    assert nospace.value.errno == errno.ENOSPC and list(tmp_path.iterdir()) == []
    with pytest.raises(StoreIOError, match="cannot open the file to replace"):
        disk_io.refuse_if_open_elsewhere(disk_io.SYSTEM, str(tmp_path / "absent"))


def test_create_without_fallocate_sets_the_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unsupported(fd: int, offset: int, size: int) -> None:
        raise OSError(errno.EOPNOTSUPP, "not supported")

    monkeypatch.setattr(os, "posix_fallocate", unsupported)
    with make(tmp_path / "s") as store:
        store.put(5, b"", bytes(BLOCK))
        store.check_invariants(deep=True)


def test_a_failed_write_leaves_the_slot_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The payload or the header write fails (an I/O error): the error names the file, the
    slot stays empty, the index still agrees with the file."""
    real_pwrite = os.pwrite
    with make(tmp_path / "s") as store:
        for failing_call in (1, 2):  # 1: the payload write, 2: the header write
            calls = 0

            def flaky(fd: int, data: Any, offset: int, failing: int = failing_call) -> int:
                nonlocal calls
                calls += 1
                if calls == failing:
                    raise OSError(errno.EIO, "Input/output error")
                return real_pwrite(fd, data, offset)

            monkeypatch.setattr(os, "pwrite", flaky)
            with pytest.raises(StoreIOError, match="Input/output error"):
                store.put(2, b"meta", blocks.payload(1, BLOCK))
            monkeypatch.setattr(os, "pwrite", real_pwrite)
            assert 2 not in store and store.stats().puts == 0
            store.check_invariants()


def test_failed_reads_and_flushes_are_store_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s"
    with make(path) as store:
        store.put(0, b"", bytes(BLOCK))

        def failing(*args: Any) -> Any:
            raise OSError(errno.EIO, "Input/output error")

        with monkeypatch.context() as patch:
            patch.setattr(os, "fdatasync", failing)
            with pytest.raises(StoreIOError, match="sync: Input/output error"):
                store.sync()
        with monkeypatch.context() as patch:
            patch.setattr(os, "preadv", failing)
            with pytest.raises(StoreIOError, match="read slot 0"):
                store.get(0)
        with monkeypatch.context() as patch:
            patch.setattr(os, "pread", failing)
            with pytest.raises(StoreIOError, match="read the file header"):
                store.check_invariants()
        store.put(5, b"", bytes(BLOCK))  # the last slot, whose last page goes next
        os.truncate(path, path.stat().st_size - PAGE)  # another program shrinks the file
        with pytest.raises(StoreIOError, match="the file ends"):
            store.get(5)
        with pytest.raises(StoreInvariantError, match="bytes, not"):
            store.check_invariants()
        os.truncate(path, PAGE + 100)
        with pytest.raises(StoreIOError, match="the file shrank"):
            disk_io.pread_exact(store.io, store._fd, str(path), 200, PAGE, "read")


def test_a_store_is_a_context_manager_that_syncs(tmp_path: Path) -> None:
    with make(tmp_path / "s") as store:
        store.put(0, b"", bytes(BLOCK))
        assert store.stats().unsynced == 1
    assert store.closed
    with pytest.raises(StoreError):
        store.get(0)


class StoreMachine(RuleBasedStateMachine):
    """A store against a dict of slot -> generation, reopened at random."""

    def __init__(self) -> None:
        super().__init__()
        self.model: dict[int, int] = {}
        self.gen = 0

    folder: Path  # set by the test, per run
    made = 0

    @initialize()
    def create(self) -> None:
        StoreMachine.made += 1
        self.path = self.folder / f"machine-{StoreMachine.made}"
        self.store = DiskBlockStore.create(self.path, slots=5, block_bytes=PAGE + 7, meta_bytes=40)

    @rule(slot=st.integers(0, 4))
    def put(self, slot: int) -> None:
        self.gen += 1
        meta, data = blocks.meta(slot, self.gen, 40), blocks.payload(self.gen, PAGE + 7)
        if slot in self.model:
            with pytest.raises(SlotOccupiedError):
                self.store.put(slot, meta, data)
        else:
            self.store.put(slot, meta, data)
            self.model[slot] = self.gen

    @rule(slot=st.integers(0, 4))
    def delete(self, slot: int) -> None:
        if slot in self.model:
            self.store.delete(slot)
            del self.model[slot]
        else:
            with pytest.raises(SlotEmptyError):
                self.store.delete(slot)

    @rule(slot=st.integers(0, 4), into=st.booleans())
    def read(self, slot: int, into: bool) -> None:
        if into:
            out = bytearray(PAGE + 7)
            meta = self.store.read_into(slot, out)
            data = bytes(out)
        else:
            found = self.store.get(slot)
            meta, data = (None, b"") if found is None else (found[0], found[1].tobytes())
        if slot not in self.model:
            assert meta is None
        else:
            gen = self.model[slot]
            assert meta == blocks.meta(slot, gen, 40)
            assert data == blocks.payload(gen, PAGE + 7).tobytes()

    @rule()
    def sync(self) -> None:
        self.store.sync()

    @precondition(lambda self: hasattr(self, "store"))
    @rule(readonly=st.booleans())
    def reopen(self, readonly: bool) -> None:
        self.store.close()
        self.store = DiskBlockStore.open(self.path, readonly=readonly)
        if readonly:  # a reader sees the same; then back to a writer for the next rules
            assert dict(self.store.items()).keys() == self.model.keys()
            self.store.close()
            self.store = DiskBlockStore.open(self.path)

    @invariant()
    def agrees(self) -> None:
        if hasattr(self, "store"):
            assert list(self.store.slots()) == sorted(self.model)
            self.store.check_invariants()

    def teardown(self) -> None:
        if hasattr(self, "store"):
            self.store.close()
            self.path.unlink()


def test_store_against_a_dict(tmp_path: Path) -> None:
    class InThisFolder(StoreMachine):
        folder = tmp_path

    run_state_machine_as_test(
        InThisFolder,
        settings=settings(
            max_examples=25,
            stateful_step_count=25,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


def test_prefetch_reads_ahead_into_the_page_cache(tmp_path: Path) -> None:
    """prefetch advises occupied slots only, refuses bad ids before advising any, and
    brings a payload into the page cache (seen with an RWF_NOWAIT read, which fails
    rather than wait for the disk)."""
    with make(tmp_path / "s") as store:
        for slot in (1, 3):
            store.put(slot, b"", blocks.payload(slot, BLOCK))
        with pytest.raises(SlotRangeError):
            store.prefetch([1, 6])
        assert store.prefetch(range(6)) == 2
        store.sync()
        offset = store._geometry.slot_offset(3) + store._geometry.payload_offset
        out = bytearray(BLOCK)

        def cached() -> bool:
            try:
                return os.preadv(store._fd, [out], offset, os.RWF_NOWAIT) == BLOCK
            except BlockingIOError:
                return False

        os.posix_fadvise(store._fd, 0, 0, os.POSIX_FADV_DONTNEED)
        if cached():
            pytest.skip("this file system keeps the pages (tmpfs?): nothing to observe")
        store.prefetch([3])
        deadline = time.monotonic() + 10
        while not cached() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert cached(), "the advised payload never reached the page cache"
        assert store.read_into(3, out) == b"" and bytes(out) == blocks.payload(3, BLOCK).tobytes()


def test_create_never_clobbers_a_file_that_appears_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process creates the path between the check and the link: create refuses,
    the other file is untouched, no temporary file is left."""
    path = tmp_path / "s"
    real_link = os.link

    def racing_link(source: Any, target: Any) -> None:
        Path(target).write_bytes(b"theirs")
        real_link(source, target)

    monkeypatch.setattr(os, "link", racing_link)
    with pytest.raises(StoreExistsError, match="appeared there while creating"):
        make(path)
    assert path.read_bytes() == b"theirs" and [p.name for p in tmp_path.iterdir()] == ["s"]


def test_a_failing_reopen_releases_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s"
    with make(path) as store:
        assert (store.capacity, store.block_bytes, store.meta_bytes) == (6, BLOCK, META)
    real_pread = os.pread

    def header_ok_then_fail(fd: int, size: int, offset: int) -> bytes:
        if offset:
            raise OSError(errno.EIO, "Input/output error")
        return real_pread(fd, size, offset)

    with monkeypatch.context() as patch:
        patch.setattr(os, "pread", header_ok_then_fail)
        with pytest.raises(StoreIOError, match="read a header: Input/output error"):
            DiskBlockStore.open(path)
    DiskBlockStore.open(path).close()  # the failed open left no lock behind


def test_put_many_writes_what_puts_write(tmp_path: Path) -> None:
    """A batch stores what the same puts one by one store (the hashing overlapped, the
    writes in order): the same records, payloads and sequence numbers, after a reopen."""
    items = [
        (slot, blocks.meta(slot, slot, META), blocks.payload(slot, BLOCK)) for slot in (3, 0, 5)
    ]
    with make(tmp_path / "one") as one:
        assert [one.put(*item) for item in items] == [1, 2, 3]
    with make(tmp_path / "many") as many:
        assert many.put_many(items) == [1, 2, 3]
        assert many.put_many([]) == [] and many.put_many([(1, b"m", bytes(BLOCK))]) == [4]
        many.check_invariants(deep=True)
    with (
        DiskBlockStore.open(tmp_path / "one") as one,
        DiskBlockStore.open(tmp_path / "many") as many,
    ):
        assert [r.seq for r in one.records()] == [r.seq for r in many.records()][:3]
        for slot, meta, payload in items:
            found, want = many.get(slot), one.get(slot)
            assert found is not None and want is not None and found[0] == want[0] == meta
            assert np.array_equal(found[1], payload) and np.array_equal(want[1], payload)


def test_a_header_is_written_as_whole_pages(tmp_path: Path) -> None:
    """A record's header region is written whole (zeros after its metadata up to the
    payload) and a delete zeroes the slot's first page: no write covers part of a page,
    which would make the kernel read that page first when it is not cached."""
    path = tmp_path / "s"
    with make(path) as store:
        geometry = store._geometry
        start = geometry.slot_offset(2)
        store.put(2, b"x" * META, bytes(BLOCK))
        store.delete(2)
        with path.open("rb") as file:
            file.seek(start)
            assert file.read(PAGE) == bytes(PAGE)  # the long metadata gone with the header
        store.put(2, b"short", bytes(BLOCK))
        with path.open("rb") as file:
            file.seek(start)
            region = file.read(geometry.payload_offset)
        assert region[RECORD_HEADER_BYTES : RECORD_HEADER_BYTES + 5] == b"short"
        assert region[RECORD_HEADER_BYTES + 5 :] == bytes(len(region) - RECORD_HEADER_BYTES - 5)
        store.check_invariants(deep=True)


def test_put_many_checks_every_block_before_writing_any(tmp_path: Path) -> None:
    with make(tmp_path / "s") as store:
        store.put(4, b"", bytes(BLOCK))
        good = (1, b"meta", blocks.payload(1, BLOCK))
        for bad, error in (
            ((4, b"", bytes(BLOCK)), SlotOccupiedError),  # held
            ((1, b"", bytes(BLOCK)), SlotOccupiedError),  # earlier in the batch
            ((9, b"", bytes(BLOCK)), SlotRangeError),
            ((2, bytes(META + 1), bytes(BLOCK)), MetaError),
            ((2, b"", bytes(BLOCK - 1)), PayloadError),
        ):
            with pytest.raises(error):
                store.put_many([good, bad])
            assert list(store.slots()) == [4] and store.stats().puts == 1
        store.check_invariants(deep=True)


def test_a_failed_write_in_a_batch_keeps_the_blocks_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_pwrite = os.pwrite
    calls = 0

    def flaky(fd: int, data: Any, offset: int) -> int:
        nonlocal calls
        calls += 1
        if calls == 3:  # the second block's payload
            raise OSError(errno.EIO, "Input/output error")
        return real_pwrite(fd, data, offset)

    with make(tmp_path / "s") as store:
        monkeypatch.setattr(os, "pwrite", flaky)
        with pytest.raises(StoreIOError, match="Input/output error"):
            store.put_many([(slot, b"m", blocks.payload(slot, BLOCK)) for slot in (0, 1, 2)])
        monkeypatch.setattr(os, "pwrite", real_pwrite)
        assert list(store.slots()) == [0] and store.stats().puts == 1
        store.check_invariants(deep=True)
