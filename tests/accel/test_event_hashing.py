"""The C twin's KV events are the reference's, bit for bit (R-EVENT-2, R-EVENT-6).

The C twin hashes blocks itself, for every scheme of ``kachedb_radix.reference.events.hashing``
(``accel/hashing.c``: SHA-256 of canonical CBOR or of a pickle, XXH3-128 of either,
Dynamo's XXH3-64, SGLang's SHA-256), and encodes its batches as vLLM's msgpack itself
(``accel/events.c``). Held to the reference here:

* one block's hashes, internal and external, through the ``_event_block_hash`` hook,
  under Hypothesis over schemes, wire forms, root seeds, tokens (every width of their
  encodings), salts (the very ``"cache_salt"`` object pickle writes as a memo reference
  among them) and parents;
* pickle's framing, at the token counts and salt lengths where its 64 KiB frames end;
* whole event streams: random operations on both twins (clears among them), the C
  twin's payloads equal to the reference's batches encoded, byte for byte, and its
  structs equal to the reference's.
"""

from __future__ import annotations

import os
import struct
import sys
from typing import Any

import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kachedb_radix import reference
from kachedb_radix.reference.events import SCHEMES, BlockHasher, BlockStored, encode_batch
from kachedb_radix.reference.events.hashing import DYNAMO_SEED, Hash

if os.environ.get("KACHEDB_RADIX_PURE") == "1":
    pytest.skip("KACHEDB_RADIX_PURE=1: the C twin is not under test", allow_module_level=True)

import kachedb_radix.accel._radix as radix
from kachedb_radix import accel

#: The interned ``"cache_salt"``: the reference's extra key tags the salt with this very
#: object, so a salt that *is* it pickles as a memo reference.
TAG = sys.intern("cache_salt")
#: An equal string that is another object.
NOT_TAG = "".join(["cache", "_salt"])

#: Token values at every boundary of the CBOR, pickle and msgpack integer forms.
EDGES = [0, 23, 24, 127, 128, 255, 256, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1]
tokens = st.one_of(st.integers(0, 2**32 - 1), st.sampled_from(EDGES))
salts = st.one_of(st.none(), st.text(max_size=40), st.sampled_from([TAG, NOT_TAG, "é" * 300]))
hashers = st.builds(
    BlockHasher,
    scheme=st.sampled_from(SCHEMES),
    seed=st.one_of(st.just("vllm-none-hash"), st.text(max_size=12)),
    wire=st.sampled_from(["int", "bytes"]),
)


def c_hash(hasher: BlockHasher, parent: Hash | None, block: list[int], salt: str | None) -> Any:
    return radix._event_block_hash(hasher, parent, block, salt)


def reference_hash(
    hasher: BlockHasher, parent: Hash | None, block: list[int], salt: str | None
) -> Any:
    internal = hasher.block_hash(parent, block, salt)
    return internal, hasher.external(internal)


@st.composite
def parents(draw: st.DrawFn, hasher: BlockHasher) -> Hash | None:
    """None, a hash the scheme gives some block (salted or not), or any value of the
    parent's type: every digest of the scheme's length is a parent some chain can reach."""
    kind = draw(st.sampled_from(["none", "made", "any"]))
    if kind == "none":
        return None
    if kind == "made":
        block = draw(st.lists(tokens, min_size=1, max_size=4))
        return hasher.block_hash(None, block, draw(st.sampled_from([None, "ns"])))
    if hasher.scheme == "xxh3_64":
        return draw(st.integers(0, 2**64 - 1))
    size = 16 if hasher.scheme.startswith("xxhash") else 32
    if hasher.scheme == "sglang_dynamo":
        size = draw(st.sampled_from([32, 64]))  # a digest, and the seed a namespace carries
    return draw(st.binary(min_size=size, max_size=size))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hasher=hashers, data=st.data())
def test_a_block_hashes_as_the_reference_hashes_it(
    hasher: BlockHasher, data: st.DataObject
) -> None:
    parent = data.draw(parents(hasher))
    block = data.draw(st.lists(tokens, min_size=1, max_size=40))
    salt = data.draw(salts)
    assert c_hash(hasher, parent, block, salt) == reference_hash(hasher, parent, block, salt)


#: Token counts about the first frame's end (36 bytes before the tokens, seven a token of
#: 2**31 or more: the 9,358th crosses 64 KiB), and past a second frame.
FRAMED = [9357, 9358, 9359, 9364, 18730, 20000]


@pytest.mark.parametrize("scheme", ["sha256", "xxhash"])
@pytest.mark.parametrize("count", FRAMED)
def test_pickles_frames_end_where_cpythons_do(scheme: str, count: int) -> None:
    hasher = BlockHasher(scheme)
    for value in (2**31, 300):  # seven bytes a token, and three
        block = [value] * count
        for salt in (None, "ns", TAG):
            assert c_hash(hasher, None, block, salt) == reference_hash(hasher, None, block, salt)


@pytest.mark.parametrize("scheme", ["sha256", "xxhash", "sha256_cbor"])
@pytest.mark.parametrize("length", [255, 256, 65535, 65536, 70000])
def test_a_long_salt_is_written_as_the_reference_writes_it(scheme: str, length: int) -> None:
    """A salt of 64 KiB or more goes outside pickle's frames; CBOR's heads widen."""
    hasher = BlockHasher(scheme)
    salt = "x" * length
    for block in ([1, 2, 3], [2**31] * 9358):
        assert c_hash(hasher, None, block, salt) == reference_hash(hasher, None, block, salt)


def _patched(scheme: str = "sha256_cbor", **fields: object) -> BlockHasher:
    """A BlockHasher with fields the reference of this checkout may not have yet (issue 34:
    engine presets): set past its frozen dataclass, as a later reference would set them."""
    hasher = BlockHasher()
    for name, value in {"scheme": scheme, **fields}.items():
        object.__setattr__(hasher, name, value)
    return hasher


@pytest.mark.parametrize("scheme", [s for s in SCHEMES if s != "dynamo"])
def test_an_empty_namespace_can_be_no_namespace(scheme: str) -> None:
    """``empty_is_none`` (vLLM's and Dynamo's reading of an empty salt): "" hashes as no
    namespace at all; without it "" is a namespace of its own."""
    reading = _patched(scheme, empty_is_none=True)
    plain = BlockHasher(scheme)
    block = [1, 70_000, 2**31]
    assert c_hash(reading, None, block, "") == reference_hash(plain, None, block, None)
    assert c_hash(plain, None, block, "") == reference_hash(plain, None, block, "")


def _dynamo_local(block: list[int], seed: int) -> int:
    return xxhash.xxh3_64_intdigest(struct.pack(f"<{len(block)}I", *block), seed=seed)


def test_dynamos_sequence_hashes() -> None:
    """Dynamo's scheme (``ai-dynamo-runtime`` 1.6.1, as issue 34's reference module states
    it): a path's seed 1337 + XXH3-64(namespace, seed 1) -- "" is none -- for every block;
    a first block's sequence hash its local hash, a deeper one's XXH3-64 (seed 1337) of
    the parent's and its local hash as little-endian u64s; internal (sequence, seed)."""
    hasher = _patched("dynamo")
    first, second = [1, 2, 3, 4], [5, 70_000, 2**31, 2**32 - 1]
    for namespace in (None, "", "tenant"):
        named = xxhash.xxh3_64_intdigest(namespace.encode(), seed=1) if namespace else 0
        seed = DYNAMO_SEED + named
        local = _dynamo_local(first, seed % 2**64)
        internal, external = c_hash(hasher, None, first, namespace)
        assert internal == struct.pack("<QQ", local, seed % 2**64) and external == local
        deeper = xxhash.xxh3_64_intdigest(
            struct.pack("<QQ", local, _dynamo_local(second, seed % 2**64)), seed=DYNAMO_SEED
        )
        assert c_hash(hasher, internal, second, None) == (
            struct.pack("<QQ", deeper, seed % 2**64),
            deeper,
        )
    tree = accel.RadixTree(8, 4, events=hasher)
    tree.insert(first + second, "tenant")
    tree.check_invariants()
    (batch,) = tree.take_events()
    (stored,) = batch.events
    assert isinstance(stored, BlockStored) and stored.extra_keys == [("tenant",), None]


def test_the_hook_refuses_what_is_not_a_block() -> None:
    hasher = BlockHasher()
    with pytest.raises(ValueError, match="a block has 1"):
        c_hash(hasher, None, [], None)
    with pytest.raises(TypeError, match="32 bytes"):
        c_hash(hasher, b"short", [1], None)
    with pytest.raises(TypeError, match="an int"):
        c_hash(BlockHasher("xxh3_64"), -1, [1], None)
    with pytest.raises(TypeError, match="salt"):
        radix._event_block_hash(hasher, None, [1], 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="4 arguments"):
        radix._event_block_hash(hasher, None, [1])  # type: ignore[call-arg]
    with pytest.raises(reference.TokenRangeError):
        c_hash(hasher, None, [-1], None)


def test_a_hasher_the_c_twin_cannot_run_is_refused() -> None:
    """The C twin hashes BlockHasher's schemes itself: a subclass (whose own code the
    reference would run), a scheme it does not know, or a root that is not the scheme's
    digest is refused, never silently hashed some other way."""

    class Own(BlockHasher):
        def block_hash(self, parent: Any, tokens: Any, salt: str | None = None) -> Any:
            return super().block_hash(parent, tokens, salt)

    with pytest.raises(reference.InvalidArgumentError, match="BlockHasher itself"):
        accel.RadixTree(8, 2, events=Own("xxh3_64"))
    assert reference.RadixTree(8, 2, events=Own("xxh3_64")).events == Own("xxh3_64")
    unknown = BlockHasher()
    object.__setattr__(unknown, "scheme", "blake3")  # a scheme added to the reference only
    with pytest.raises(reference.InvalidArgumentError, match="no hash scheme 'blake3'"):
        accel.RadixTree(8, 2, events=unknown)
    rootless = BlockHasher()
    rootless.__dict__["root"] = b"short"  # the cached property, broken
    with pytest.raises(SystemError, match="not 32 bytes"):
        accel.RadixTree(8, 2, events=rootless)


def test_the_event_hash_hook() -> None:
    tree = accel.RadixTree(8, 2, events=BlockHasher("sglang_dynamo"))
    theirs = reference.RadixTree(8, 2, events=BlockHasher("sglang_dynamo"))
    for t in (tree, theirs):
        t.insert([1, 2, 3, 4], "ns")
    assert theirs._events is not None
    assert [tree._event_hash(b) for b in range(8)] == [theirs._events.hash_of(b) for b in range(8)]
    for bad in (-1, 8, True, 2**70, "0"):
        with pytest.raises(reference.ForeignBlockError):
            tree._event_hash(bad)  # type: ignore[arg-type]
    with pytest.raises(reference.InvalidArgumentError, match="emits no events"):
        accel.RadixTree(8, 2)._event_hash(0)


def test_a_long_insert_and_a_long_name_widen_their_heads() -> None:
    """A store of 65,536 tokens (msgpack's array32) in a namespace of 70,000 bytes (str32)."""
    hasher = BlockHasher("xxh3_64")
    ours = accel.RadixTree(4200, 16, events=hasher)
    theirs = reference.RadixTree(4200, 16, events=hasher)
    tokens = list(range(70_000, 70_000 + 65_536))
    for tree in (ours, theirs):
        tree.insert(tokens, "w" * 70_000)
    assert ours.take_event_payloads() == [encode_batch(b) for b in theirs.take_events()]
    ours.check_invariants()


# ---------------------------------------------------------------------------- whole streams

#: Namespaces: none, short, the tag object, and names whose msgpack and CBOR heads widen.
NAMESPACES = [None, "a", TAG, "é", "n" * 40, "é" * 200, "w" * 70000]
OPS = st.lists(
    st.tuples(
        st.sampled_from(["insert", "insert", "insert", "match", "evict", "clear"]),
        st.lists(st.integers(0, 5), min_size=1, max_size=12),
        st.sampled_from(NAMESPACES),
        st.integers(0, 3),
    ),
    max_size=25,
)


def drive(tree: Any, ops: list[tuple[str, list[int], str | None, int]]) -> None:
    """The same calls on either twin; a call's error (a full pool) changes nothing."""
    for op, tokens_, namespace, count in ops:
        try:
            if op == "insert":
                tree.insert([t * 70001 for t in tokens_], namespace)
            elif op == "match":
                tree.match([t * 70001 for t in tokens_], namespace)
            elif op == "clear":  # one AllBlocksCleared, every hash forgotten (R-EVENT-7)
                assert tree.reset_prefix_cache()
            else:
                tree.evict(count)
        except reference.OutOfBlocksError:
            pass


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hasher=hashers, ops=OPS, block_size=st.sampled_from([1, 2, 3, 16]))
def test_a_stream_is_the_references_byte_for_byte(
    hasher: BlockHasher, ops: list[tuple[str, list[int], str | None, int]], block_size: int
) -> None:
    ours = accel.RadixTree(6, block_size, events=hasher)
    theirs = reference.RadixTree(6, block_size, events=hasher)
    drive(ours, ops)
    drive(theirs, ops)
    ours.check_invariants()
    assert ours.take_event_payloads() == [encode_batch(b) for b in theirs.take_events()]
    assert ours.dump() == theirs.dump()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hasher=hashers, ops=OPS)
def test_the_structs_are_the_references(
    hasher: BlockHasher, ops: list[tuple[str, list[int], str | None, int]]
) -> None:
    ours, theirs = accel.RadixTree(6, 2, events=hasher), reference.RadixTree(6, 2, events=hasher)
    drive(ours, ops)
    drive(theirs, ops)
    assert ours.take_events() == theirs.take_events()
    assert ours.take_events() == [] and ours.take_event_payloads() == []
    for block in range(6):
        assert theirs._events is not None
        assert ours._event_hash(block) == theirs._events.hash_of(block)
