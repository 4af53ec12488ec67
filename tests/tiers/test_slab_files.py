"""Whose bytes a slab holds, what opening one may change, what a killed creator leaves,
and what a pinned plan promises (R-TIER-11, R-TIER-12, R-TIER-14).

* **Identity** (R-TIER-11): a slab records the model and the KV layout; a cache of
  another model, layout, dtype or hash scheme is refused whole with a typed error naming
  each field and both values -- including the two geometries with the same bytes per
  block (16-token blocks of 2 layers, 32-token blocks of 1), which the old format opened
  and wiped.
* **Nothing deleted unasked** (R-TIER-12): a refused file is byte for byte what it was; a
  reopen that cannot use a record leaves it in the file; a version-1 file is refused with
  the way to start it afresh, and ``disk_afresh=True`` is that way.
* **Leftovers**: creators killed with SIGKILL at random moments inside ``create`` leave
  their temporary file about half the time; the next open or create removes every one.
  A live creator's temporary file is never touched.
* **A pinned plan is a promise** (R-TIER-14): a pinned lookup reads and verifies the disk
  blocks it pins (a restore then reads none again), an unpinned one says which it did not,
  and a restore that comes back short says why.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import IO, Any, ClassVar

import pytest

from kachedb_radix.reference.blockpool import BlockPool, KVDType, PoolSpec
from kachedb_radix.reference.blockpool.validation import runs
from kachedb_radix.reference.errors import InvalidArgumentError, InvariantViolation
from kachedb_radix.reference.tiers import (
    DiskBlockStore,
    KVCache,
    ModelIdentity,
    SlabIdentity,
    StoreConfigError,
    StoreIdentityError,
    StoreIOError,
    StoreVersionError,
)
from kachedb_radix.reference.tiers.disk_format import FILE_HEADER_BYTES, PAGE, checksum
from kachedb_radix.reference.tiers.disk_io import SYSTEM, remove_leftovers, temporary_name
from kachedb_radix.reference.tiers.memory import TierMemory
from tests.support.paths import ROOT
from tests.tiers.test_kv_cache import kv_of
from tests.tiers.zygote import kill_after

B = 16
#: 16-token blocks of 2 layers and 32-token blocks of 1: the same 16 KiB per block.
TWO_LAYERS = PoolSpec(num_blocks=8, block_size=B, num_layers=2, num_kv_heads=4, head_dim=32)
ONE_LAYER = PoolSpec(num_blocks=8, block_size=2 * B, num_layers=1, num_kv_heads=4, head_dim=32)
MODEL = "llama-test"
BF16 = PoolSpec(
    num_blocks=8, block_size=B, num_layers=2, num_kv_heads=4, head_dim=32, dtype=KVDType.BF16
)


def path_of(*blocks: int, size: int = B) -> list[int]:
    return [token for block in blocks for token in [block] * size]


def filled(slab: Path, spec: PoolSpec = TWO_LAYERS, model: Any = MODEL) -> list[list[int]]:
    """A slab holding three paths of ``spec``'s blocks on disk; the paths."""
    paths = [path_of(1, 2, size=spec.block_size), path_of(3, size=spec.block_size)]
    with KVCache(spec, model=model, host_blocks=2, disk_path=slab, disk_blocks=16) as cache:
        for tokens in paths:
            cache.store(tokens, kv_of(spec, tokens))
        cache.evict(8)
        cache.evict(8, "host")
        assert all(set(cache.lookup(tokens).tiers) == {"disk"} for tokens in paths)
    return paths


# -- identity ----------------------------------------------------------------------------


def test_the_same_bytes_per_block_in_another_geometry_is_refused_not_wiped(
    tmp_path: Path,
) -> None:
    """The crash campaign's finding: the old format marked every record unusable and
    deleted it, and the right configuration then reopened an empty tier."""
    assert TWO_LAYERS.bytes_per_block == ONE_LAYER.bytes_per_block
    slab = tmp_path / "kv.slab"
    paths = filled(slab)
    before = slab.read_bytes()
    with pytest.raises(StoreIdentityError) as raised:
        KVCache(ONE_LAYER, model=MODEL, disk_path=slab)
    fields = {field for field, _, _ in raised.value.mismatches}
    assert fields == {"layers", "tokens_per_block"}
    assert "layers is 2 in the file, 1 here" in str(raised.value)
    assert "tokens_per_block is 16 in the file, 32 here" in str(raised.value)
    assert slab.read_bytes() == before  # refused whole: not a byte changed
    with KVCache(TWO_LAYERS, model=MODEL, host_blocks=2, disk_path=slab) as again:
        again.check_invariants()
        for tokens in paths:  # the right configuration finds every block
            assert again.lookup(tokens).length == len(tokens)
            brought = again.restore(tokens)
            assert again.read(tokens).tobytes() == kv_of(TWO_LAYERS, tokens).tobytes()
            assert brought.stopped is None


@pytest.mark.parametrize(
    ("spec", "model", "field", "found", "expected"),
    [
        (TWO_LAYERS, "another-model", "model", MODEL, "another-model"),
        (TWO_LAYERS, ModelIdentity(MODEL, "rev-2"), "fingerprint", "", "rev-2"),
        (
            PoolSpec(num_blocks=8, block_size=B, num_layers=2, num_kv_heads=8, head_dim=16),
            MODEL,
            "kv_heads",
            4,
            8,
        ),
        (
            BF16,
            MODEL,
            "dtype",
            "fp16",
            "bf16",
        ),
    ],
    ids=["another model", "another fingerprint", "another heads split", "bf16 for fp16"],
)
def test_a_slab_of_other_kv_with_the_same_bytes_is_refused(
    tmp_path: Path, spec: PoolSpec, model: Any, field: str, found: object, expected: object
) -> None:
    """Every field of the identity decides (the bytes per block are the same in each)."""
    assert spec.bytes_per_block == TWO_LAYERS.bytes_per_block
    slab = tmp_path / "kv.slab"
    filled(slab)
    before = slab.read_bytes()
    with pytest.raises(StoreIdentityError) as raised:
        KVCache(spec, model=model, disk_path=slab)
    assert (raised.value.field, raised.value.found, raised.value.expected) == (
        field,
        found,
        expected,
    )
    assert slab.read_bytes() == before


def test_the_store_compares_identity_and_block_size_before_reading_a_record(
    tmp_path: Path,
) -> None:
    slab = tmp_path / "s"
    mine = SlabIdentity(model="m", layers=2, hash_scheme="h")
    with DiskBlockStore.create(slab, 2, 64, 8, identity=mine) as store:
        assert store.identity == mine
    with DiskBlockStore.open(slab) as anyone:  # no expectation: any identity opens
        assert anyone.identity == mine
    with pytest.raises(StoreIdentityError, match="block_bytes is 64 in the file, 128 here"):
        DiskBlockStore.open(slab, identity=mine, block_bytes=128)
    other = SlabIdentity(model="n", layers=2, hash_scheme="h")
    with pytest.raises(StoreIdentityError, match="model is 'm' in the file, 'n' here"):
        DiskBlockStore.open(slab, readonly=True, identity=other)
    with pytest.raises(StoreConfigError, match="identity must be a SlabIdentity"):
        DiskBlockStore.create(tmp_path / "t", 2, 64, 8, identity="m")  # type: ignore[arg-type]


def test_a_model_identity_is_a_name_and_a_fingerprint_derived_or_given() -> None:
    config = {"hidden_size": 4096, "num_hidden_layers": 32, "rope_theta": 500000.0}
    derived = ModelIdentity.from_config("llama", config)
    assert derived.fingerprint.startswith("sha256:") and len(derived.fingerprint) == 71
    noted = {**dict(reversed(config.items())), "_name_or_path": "/x", "transformers_version": "5"}
    assert ModelIdentity.from_config("llama", noted) == derived  # bookkeeping left out

    class Config:
        def to_dict(self) -> dict[str, object]:
            return dict(config)

    assert ModelIdentity.from_config("llama", Config()) == derived
    assert ModelIdentity.from_config("llama", {**config, "rope_theta": 1e4}) != derived
    assert ModelIdentity.of("llama") == ModelIdentity("llama")
    assert ModelIdentity.of(derived) is derived
    for bad_config in ([1, 2], {"x": float("nan")}, {"x": object()}):
        with pytest.raises(InvalidArgumentError, match="model config"):
            ModelIdentity.from_config("llama", bad_config)
    for bad_name in ("", "  ", 3, "x" * 257):
        with pytest.raises(InvalidArgumentError):
            ModelIdentity(bad_name)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="fingerprint"):
        ModelIdentity("llama", "f" * 129)
    with pytest.raises(InvalidArgumentError, match=r"a name \(str\) or a ModelIdentity"):
        ModelIdentity.of(7)
    with pytest.raises(InvalidArgumentError, match="slab identity layers"):
        SlabIdentity(layers=-1)
    with pytest.raises(InvalidArgumentError, match="slab identity dtype: must be a str"):
        SlabIdentity(dtype=None)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="not valid UTF-8"):
        SlabIdentity(model="\ud800")


def test_a_disk_tier_needs_the_model_and_records_it(tmp_path: Path) -> None:
    slab = tmp_path / "kv.slab"
    with pytest.raises(InvalidArgumentError, match="a disk tier needs model="):
        KVCache(TWO_LAYERS, disk_path=slab, disk_blocks=4)
    assert not slab.exists()
    identity = ModelIdentity.from_config(MODEL, {"layers": 2})
    with KVCache(TWO_LAYERS, model=identity, disk_path=slab, disk_blocks=4) as cache:
        assert cache.model == identity and cache.disk is not None
        recorded = cache.disk.identity
    assert (recorded.model, recorded.fingerprint) == (MODEL, identity.fingerprint)
    assert (recorded.layers, recorded.kv_heads, recorded.head_dim) == (2, 4, 32)
    assert (recorded.dtype, recorded.tokens_per_block) == ("fp16", B)
    assert recorded.hash_scheme.startswith("kachedb-radix chained xxh3-128")
    assert KVCache(TWO_LAYERS, model="no disk").model == ModelIdentity("no disk")
    for bad in ({"disk_afresh": "yes"}, {"disk_io": object()}):
        with pytest.raises(InvalidArgumentError):
            KVCache(TWO_LAYERS, model=MODEL, disk_path=slab, **bad)
    with pytest.raises(InvalidArgumentError, match="need a disk_path"):
        KVCache(TWO_LAYERS, disk_afresh=True)


# -- nothing deleted unasked ---------------------------------------------------------------


def _as_version_one(slab: Path) -> None:
    """Rewrite the header as the format-1 code would have had it (version field 1)."""
    with slab.open("r+b") as file:
        raw = bytearray(file.read(PAGE))
        raw[8:12] = (1).to_bytes(4, "little")
        summed = FILE_HEADER_BYTES - 16
        raw[summed:FILE_HEADER_BYTES] = checksum(bytes(raw[:summed]))
        file.seek(0)
        file.write(raw)


def test_an_old_format_file_is_refused_whole_and_started_afresh_only_when_asked(
    tmp_path: Path,
) -> None:
    slab = tmp_path / "kv.slab"
    filled(slab)
    _as_version_one(slab)
    before = slab.read_bytes()
    with pytest.raises(StoreVersionError, match=r"format version 1.*disk_afresh=True"):
        KVCache(TWO_LAYERS, model=MODEL, disk_path=slab)
    with pytest.raises(StoreVersionError):
        DiskBlockStore.open(slab, readonly=True)
    assert slab.read_bytes() == before
    with pytest.raises(InvalidArgumentError, match="disk_blocks must be an int >= 1"):
        KVCache(TWO_LAYERS, model=MODEL, disk_path=slab, disk_afresh=True)
    assert slab.read_bytes() == before
    with KVCache(TWO_LAYERS, model=MODEL, disk_path=slab, disk_blocks=5, disk_afresh=True) as new:
        assert new.disk is not None and len(new.disk) == 0 and new.disk.capacity == 5
        new.check_invariants()
    with KVCache(ONE_LAYER, model="other", disk_path=slab, disk_blocks=3, disk_afresh=True):
        pass  # afresh replaces a file of other KV too: the caller said so
    with KVCache(ONE_LAYER, model="other", disk_path=slab) as reopened:
        assert reopened.disk is not None and reopened.disk.capacity == 3


def test_opening_changes_no_byte_of_a_file_with_records_it_cannot_use(tmp_path: Path) -> None:
    """A torn record and an orphan: both left out of the index, both left in the file."""
    slab = tmp_path / "kv.slab"
    paths = filled(slab)
    with KVCache(TWO_LAYERS, model=MODEL, disk_path=slab) as cache:
        found = cache.lookup(paths[0])
        root = cache._slot_of[found.blocks[0]]
    with DiskBlockStore.open(slab) as store:
        offset = store._geometry.slot_offset(root) + 30  # the root's sequence number
    with slab.open("r+b") as file:
        file.seek(offset)
        file.write(b"\xff")
    before = slab.read_bytes()
    with KVCache(TWO_LAYERS, model=MODEL, disk_path=slab) as cache:
        assert cache.stats().unusable == 1  # the child of the torn root: an orphan
        assert cache.disk is not None and cache.disk.stats().dropped_at_open == 1
        assert cache.lookup(paths[0]).length == 0 and cache.lookup(paths[1]).length == B
        cache.check_invariants()
    assert slab.read_bytes() == before


# -- leftovers of killed creators ----------------------------------------------------------


def _leftovers(folder: Path) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.endswith(".new"))


class Creators:
    """The store campaign's zygote, forking creators that the test kills."""

    def __init__(self, folder: Path) -> None:
        self.errors = (folder / "zygote.err").open("w+b")
        self.zygote = subprocess.Popen(
            [sys.executable, "-m", "tests.tiers.crash_writer"],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errors,
            env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
        )  # fmt: skip

    def kill_one(self, slab: Path, delay: float) -> str:
        """Fork a creator of ``slab``, kill it ``delay`` s after its "begin"; how far it got."""
        stdin: IO[bytes] | None = self.zygote.stdin
        stdout: IO[bytes] | None = self.zygote.stdout
        assert stdin is not None and stdout is not None
        stdin.write(f"run create {slab} 16 1048576\n".encode())
        stdin.flush()
        pid, last = 0, ""
        while True:
            words = stdout.readline().decode().split()
            assert words, "the zygote died"
            if words[0] == "pid":
                pid = int(words[1])
            elif words[0] == "begin":
                kill_after(pid, delay)
            elif words[0] == "exit":
                assert words[1:] == ["signal", str(int(signal.SIGKILL))], words
                return last
            else:
                last = " ".join(words)

    def close(self) -> None:
        assert self.zygote.stdin is not None and self.zygote.stdout is not None
        self.zygote.stdin.write(b"quit\n")
        self.zygote.stdin.close()
        self.zygote.wait(timeout=30)
        self.zygote.stdout.close()
        self.errors.close()


def test_sigkilled_creators_leave_leftovers_that_the_next_open_removes(tmp_path: Path) -> None:
    """Creators of a 16 MiB slab (on the disk: the fsync takes time) killed at a random
    moment after they begin; each time the next create or open removes what was left,
    and the name holds a complete store or nothing."""
    runs = int(os.environ.get("KACHEDB_RADIX_CREATE_KILLS", "24"))
    rng = random.Random(35)
    slab = tmp_path / "kv.slab"
    started = time.perf_counter()
    DiskBlockStore.create(slab, 16, 2**20, 64).close()  # how long a creation takes here
    longest = 1.5 * (time.perf_counter() - started)
    tally: Counter[str] = Counter()
    creators = Creators(tmp_path)
    try:
        for _ in range(runs):
            slab.unlink(missing_ok=True)
            last = creators.kill_one(slab, rng.uniform(0, longest))
            tally["killed after create returned" if last else "killed inside create"] += 1
            left = _leftovers(tmp_path)
            tally["left a temporary file"] += bool(left)
            tally["left the store's name"] += slab.exists()
            if slab.exists():  # linked: a complete, empty store
                store = DiskBlockStore.open(slab)
            else:
                store = DiskBlockStore.create(slab, 16, 2**20, 64)
            assert store.stats().removed_leftovers == tuple(left)
            assert _leftovers(tmp_path) == [] and len(store) == 0
            store.check_invariants()
            store.close()
    finally:
        creators.close()
    print(f"\ncreators killed: {runs}; {dict(sorted(tally.items()))}")
    assert tally["left a temporary file"] > 0, "no kill left a leftover: nothing was tested"


PAUSED_CREATOR = """
import sys, time
from kachedb_radix.reference.tiers import DiskBlockStore
from kachedb_radix.reference.tiers.disk_io import DiskIO

class Paused(DiskIO):
    def allocate(self, fd, size):
        print("inside", flush=True)
        time.sleep(60)

DiskBlockStore.create(sys.argv[1], 4, 4096, 64, io=Paused())
"""


def test_a_live_creators_temporary_file_is_never_removed(tmp_path: Path) -> None:
    """A creator paused inside create (it holds its temporary file's lock): another
    process's open and create leave its file alone; once it is killed, the next open
    removes it. A file with a live pid whose lock is free (the instant between its
    creation and its lock) is left too, and names that are not a creator's are ignored."""
    slab = tmp_path / "kv.slab"
    creator = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(PAUSED_CREATOR), str(slab)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert creator.stdout is not None and creator.stdout.readline() == "inside\n"
        (live,) = _leftovers(tmp_path)
        assert live.startswith(f".kv.slab.{creator.pid}.")
        with DiskBlockStore.create(slab, 2, 64, 8) as mine:  # ours, beside it
            assert mine.stats().removed_leftovers == ()
        with DiskBlockStore.open(slab) as again:
            assert again.stats().removed_leftovers == ()
        assert _leftovers(tmp_path) == [live]
    finally:
        creator.kill()
        creator.wait()
        if creator.stdout is not None:
            creator.stdout.close()
    unlocked = temporary_name(slab, os.getpid(), "0123abcd")  # a live pid, no lock
    unlocked.write_bytes(b"")
    strangers = [".kv.slab.12.new", ".kv.slab.x.0123abcd.new", ".kv.slab.1.0123ABCD.new"]
    for name in strangers:
        (tmp_path / name).write_bytes(b"")
    with DiskBlockStore.open(slab) as store:
        assert store.stats().removed_leftovers == (live,)
    assert sorted(_leftovers(tmp_path)) == sorted([unlocked.name, *strangers])
    assert remove_leftovers(SYSTEM, tmp_path / "absent" / "kv.slab") == ()  # no folder


# -- a pinned plan is a promise -------------------------------------------------------------


def _corrupt_payload(cache: KVCache, block: int) -> None:
    store = cache.disk
    assert store is not None
    geometry = store._geometry
    offset = geometry.slot_offset(cache._slot_of[block]) + geometry.payload_offset + 5
    with open(store.path, "r+b") as file:
        file.seek(offset)
        byte = file.read(1)
        file.seek(offset)
        file.write(bytes([byte[0] ^ 0x55]))


def test_a_pinned_lookup_verifies_what_it_pins_and_the_restore_reads_nothing_again(
    tmp_path: Path,
) -> None:
    slab = tmp_path / "kv.slab"
    tokens = path_of(1, 2, 3, 4)
    with KVCache(TWO_LAYERS, model=MODEL, host_blocks=4, disk_path=slab, disk_blocks=8) as cache:
        cache.store(tokens, kv_of(TWO_LAYERS, tokens))
        cache.evict(8)
        cache.evict(8, "host")
        quick = cache.lookup(tokens)
        assert quick.unverified == (0, 1, 2, 3) and cache.stats().bytes_moved["read"] == 0
        pinned = cache.lookup(tokens, pin=True)
        assert pinned.length == len(tokens) and pinned.unverified == ()
        read = cache.stats().bytes_moved["read"]
        assert read == 4 * TWO_LAYERS.bytes_per_block  # verified by reading
        brought = cache.restore(tokens)
        assert brought.stopped is None and brought.result.length == len(tokens)
        assert cache.stats().bytes_moved["read"] == read  # taken from the staging rows
        assert cache.read(tokens).tobytes() == kv_of(TWO_LAYERS, tokens).tobytes()
        assert pinned.lease is not None
        cache.release(pinned.lease)
        cache.check_invariants()


def test_a_pinned_plan_never_promises_a_block_the_restore_cannot_deliver(tmp_path: Path) -> None:
    slab = tmp_path / "kv.slab"
    tokens = path_of(1, 2, 3, 4)
    with KVCache(TWO_LAYERS, model=MODEL, host_blocks=4, disk_path=slab, disk_blocks=8) as cache:
        cache.store(tokens, kv_of(TWO_LAYERS, tokens))
        cache.evict(8)
        cache.evict(8, "host")
        blocks = cache.lookup(tokens).blocks
        _corrupt_payload(cache, blocks[2])
        assert cache.lookup(tokens).length == len(tokens)  # a query reads nothing...
        assert cache.lookup(tokens).unverified == (0, 1, 2, 3)  # ...and says so
        pinned = cache.lookup(tokens, pin=True)  # reads, finds the bad block, pins less
        assert pinned.length == 2 * B and pinned.unverified == ()
        assert cache.stats().lost == 1
        brought = cache.restore(tokens)
        assert brought.result.length == 2 * B and brought.stopped is None  # as promised
        assert pinned.lease is not None
        cache.release(pinned.lease)
        cache.check_invariants()
    with KVCache(TWO_LAYERS, model=MODEL, host_blocks=4, disk_path=slab) as cache:
        # A restore without a pinned lookup before it: it says why it came back short.
        _corrupt_payload(cache, cache.lookup(tokens[: 2 * B]).blocks[1])
        brought = cache.restore(tokens)
        assert brought.result.length == B
        assert brought.stopped is not None and "failed its payload checksum" in brought.stopped
        with pytest.raises(InvalidArgumentError, match="verify must be a bool"):
            cache.lookup(tokens, verify=1)  # type: ignore[arg-type]
        cache.check_invariants()


def test_a_lost_block_is_never_restored_even_when_the_store_is_empty(tmp_path: Path) -> None:
    """The disk tier's only block fails its checksum: the store is then empty, yet the
    disk tree still holds the lost block, and no later restore serves it."""
    slab = tmp_path / "kv.slab"
    tokens = path_of(1)
    with KVCache(TWO_LAYERS, model=MODEL, disk_path=slab, disk_blocks=2) as cache:
        cache.store(tokens, kv_of(TWO_LAYERS, tokens))
        cache.evict(8)
        _corrupt_payload(cache, cache.lookup(tokens).blocks[0])
        for _ in range(2):
            brought = cache.restore(tokens)
            assert brought.result.length == 0 and cache.read(tokens).size == 0
        assert cache.disk is not None and len(cache.disk) == 0 and cache.stats().lost == 1
        cache.check_invariants()


def test_a_verified_row_is_read_again_once_its_block_changed(tmp_path: Path) -> None:
    """The staging rows a pinned lookup verified serve a restore only while the disk
    still holds that block in that id (same chained hash); otherwise it reads again."""
    slab = tmp_path / "kv.slab"
    spec = TWO_LAYERS.with_blocks(2)
    first, second = path_of(1, 2), path_of(5, 6)
    with KVCache(spec, model=MODEL, disk_path=slab, disk_blocks=2) as cache:
        cache.store(first, kv_of(spec, first))
        cache.evict(2)
        pinned = cache.lookup(first, pin=True)
        assert pinned.lease is not None
        cache.release(pinned.lease)
        cache.store(second, kv_of(spec, second))  # pushes `first` off the disk tier
        cache.evict(2)  # `second` takes its disk ids
        read = cache.stats().bytes_moved["read"]
        cache.restore(second)
        assert cache.stats().bytes_moved["read"] == read + 2 * spec.bytes_per_block
        assert cache.read(second).tobytes() == kv_of(spec, second).tobytes()
        cache.check_invariants()


def test_the_memory_seam_moves_runs_of_rows_in_one_call_each() -> None:
    """Host rows that are not consecutive split into runs, each one call of the pool; the
    bytes land where the moves say, both ways."""
    spec = TWO_LAYERS.with_blocks(5)
    memory = TierMemory(BlockPool(spec), host_blocks=6)
    assert runs([4, 1, 2, 3, 7]) == [(0, 1), (1, 4), (4, 5)] and runs([]) == []
    data = kv_of(spec, path_of(1, 2, 3, 4, 5, 6))
    memory.host[:] = data
    done = memory.from_host([3, 0, 1, 4], [5, 1, 2, 0])
    done.wait()
    assert done.done() and memory.staging(0).shape[0] == 0
    got = memory.read([3, 0, 1, 4])
    assert got.tobytes() == data[[5, 1, 2, 0]].tobytes()
    memory.to_host([0, 1, 4], [3, 4, 2])
    assert memory.host[[3, 4, 2]].tobytes() == got[[1, 2, 3]].tobytes()
    memory.write([], data[:0])  # nothing to write: no call
    memory.staging(2)[:] = data[:2]
    assert memory.staging(5)[:2].tobytes() == data[:2].tobytes()  # grown, rows kept


# -- the edges of the new layers -------------------------------------------------------------


def test_a_long_restore_reads_its_disk_blocks_a_window_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel is asked to read a bounded window ahead of the reads, block by block."""
    from kachedb_radix.reference.tiers import cache as cache_module

    monkeypatch.setattr(cache_module, "PREFETCH_BYTES", 2 * TWO_LAYERS.bytes_per_block)
    advised: list[int] = []
    slab, tokens = tmp_path / "kv.slab", path_of(1, 2, 3, 4, 5)
    with KVCache(TWO_LAYERS, model=MODEL, host_blocks=5, disk_path=slab, disk_blocks=8) as cache:
        cache.store(tokens, kv_of(TWO_LAYERS, tokens))
        cache.evict(8)
        cache.evict(8, "host")
        store = cache.disk
        assert store is not None
        real = store.prefetch

        def note(slots: Any) -> int:
            chosen = list(slots)
            advised.append(len(chosen))
            return real(chosen)

        monkeypatch.setattr(store, "prefetch", note)
        assert cache.restore(tokens).result.length == len(tokens)
        assert advised == [2, 1, 1, 1]  # the window, then one more per block read
        assert cache.read(tokens).tobytes() == kv_of(TWO_LAYERS, tokens).tobytes()
        assert cache.memory.pool is cache.pool


def test_a_failed_build_closes_the_reopened_file(tmp_path: Path) -> None:
    slab = tmp_path / "kv.slab"
    filled(slab)
    with pytest.raises(InvalidArgumentError):
        KVCache(TWO_LAYERS, model=MODEL, disk_path=slab, policy="nonesuch")
    with KVCache(TWO_LAYERS, model=MODEL, disk_path=slab) as again:  # the lock was released
        again.check_invariants()


def test_the_unusable_records_invariant_fires(tmp_path: Path) -> None:
    slab = tmp_path / "kv.slab"
    filled(slab)
    with KVCache(TWO_LAYERS, model=MODEL, disk_path=slab) as cache:
        store = cache.disk
        assert store is not None
        free = next(slot for slot in range(store.capacity) if slot not in store)
        cache._unusable_slots.add(free)  # a slot said to hold a record, empty
        with pytest.raises(InvariantViolation, match="unusable record's slot is empty"):
            cache.check_invariants()
        cache._unusable_slots.clear()
        used = next(iter(store.slots()))
        store_slots = cache._unusable_slots
        store_slots.add(used)  # a cached block's slot said to be unusable
        with pytest.raises(InvariantViolation, match="unusable record's slot"):
            cache.check_invariants()
        store_slots.clear()
        extra = next(slot for slot in range(store.capacity) if slot not in store)
        store.put(extra, b"", bytes(store.block_bytes))  # a record nobody accounts for
        with pytest.raises(InvariantViolation, match="the store holds"):
            cache.check_invariants()


class _Stub:
    """A pool that records what the memory seam asks of it."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def alloc_host_buffer(self, n: int) -> Any:
        return None

    def scatter(self, ids: list[int], data: Any) -> None:
        self.calls.append(f"scatter {ids}")


class _DeviceRows:
    __cuda_array_interface__: ClassVar[dict[str, object]] = {}


def test_device_rows_are_scattered_on_the_device_and_an_empty_copy_is_no_call() -> None:
    pool = _Stub()
    memory = TierMemory(pool, host_blocks=0)
    memory.write([3, 1], _DeviceRows())
    assert pool.calls == ["scatter [3, 1]"]
    assert memory.from_staging([], None).done()


def test_the_io_layer_edges(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process we may not signal is alive; a leftover that cannot be opened is left;
    a write failing inside create is its StoreIOError, nothing left behind."""

    def refused(pid: int, signal: int) -> None:
        raise PermissionError(1, "not permitted")

    with monkeypatch.context() as patch:
        patch.setattr(os, "kill", refused)
        assert SYSTEM.process_alive(1)
    slab = tmp_path / "kv.slab"
    dangling = temporary_name(slab, 999_999, "0123abcd")
    dangling.symlink_to(tmp_path / "nowhere")
    assert remove_leftovers(SYSTEM, slab) == ()

    class FailingWrites(type(SYSTEM)):  # type: ignore[misc]
        def pwrite(self, fd: int, data: Any, offset: int) -> int:
            raise OSError(5, "Input/output error")

    with pytest.raises(StoreIOError, match="write the file header: Input/output error"):
        DiskBlockStore.create(slab, 2, 64, 8, io=FailingWrites())
    assert not slab.exists() and _leftovers(tmp_path) == [dangling.name]  # its own: removed
