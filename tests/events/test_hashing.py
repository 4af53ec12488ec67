"""Block hashes (R-EVENT-2) against vLLM's own request block hasher from the pinned
wheel, Dynamo's documented algorithm, and the scheme's own properties."""

from __future__ import annotations

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from kachedb_radix.reference import InvalidArgumentError
from kachedb_radix.reference.events import SCHEMES, BlockHasher
from kachedb_radix.spec.peers.vllm import PINNED, load_vllm, vllm_block_hashes
from tests.support.vllm import require_vllm

VLLM_SCHEMES = ("sha256_cbor", "xxhash_cbor", "sha256", "xxhash")


def test_the_pinned_vllm_is_the_one_loaded() -> None:
    require_vllm()
    assert load_vllm().version == PINNED


@pytest.mark.parametrize("scheme", VLLM_SCHEMES)
@pytest.mark.parametrize("salt", [None, "tenant-a"])
@pytest.mark.parametrize(("seed", "block_size"), [("vllm-none-hash", 16), ("0", 1), ("42", 3)])
def test_hashes_equal_vllms_own(scheme: str, salt: str | None, seed: str, block_size: int) -> None:
    """R-EVENT-2: for every vLLM scheme, with and without a cache salt (our namespace),
    our chain equals what vLLM 0.33's request block hasher computes, digest for digest,
    and the external form equals its maybe_convert_block_hash."""
    require_vllm()
    tokens = [7, 0, 2**32 - 1, *range(100, 140)]
    theirs = vllm_block_hashes(tokens, block_size, scheme, seed, salt)
    hasher = BlockHasher(scheme, seed)
    ours = hasher.chain(tokens, block_size, salt)
    assert ours == theirs and len(ours) == len(tokens) // block_size
    convert = load_vllm().kv_cache_utils.maybe_convert_block_hash
    assert [hasher.external(h) for h in ours] == [convert(h) for h in theirs]
    assert [BlockHasher(scheme, seed, "bytes").external(h) for h in ours] == theirs


@settings(max_examples=40, deadline=None)
@given(
    tokens=st.lists(st.integers(0, 2**32 - 1), max_size=40),
    block_size=st.integers(1, 8),
    salt=st.none() | st.text(max_size=5),
)
def test_hashes_equal_vllms_own_for_any_tokens(
    tokens: list[int], block_size: int, salt: str | None
) -> None:
    """R-EVENT-2, generated: the default scheme agrees with vLLM on any input (an empty
    salt is no salt, in vLLM as here)."""
    require_vllm()
    salt = salt or None
    theirs = vllm_block_hashes(tokens, block_size, "sha256_cbor", "vllm-none-hash", salt)
    assert BlockHasher().chain(tokens, block_size, salt) == theirs


def test_dynamo_scheme_follows_its_documented_algorithm() -> None:
    """R-EVENT-2: xxh3_64 -- a local hash per block (XXH3-64, seed 1337, tokens as
    little-endian u32), the first block's hash its local hash, each deeper one XXH3-64
    (seed 1337) of the parent's hash and the local hash as little-endian u64s."""
    tokens = [1, 2, 3, 4, 5, 6]
    local = [
        xxhash.xxh3_64_intdigest(b"".join(t.to_bytes(4, "little") for t in tokens[i : i + 2]), 1337)
        for i in (0, 2, 4)
    ]
    expected = [local[0]]
    for block in local[1:]:
        data = expected[-1].to_bytes(8, "little") + block.to_bytes(8, "little")
        expected.append(xxhash.xxh3_64_intdigest(data, 1337))
    hasher = BlockHasher("xxh3_64")
    assert hasher.chain(tokens, 2) == expected and hasher.root is None
    assert hasher.external(expected[0]) == expected[0]
    salted = hasher.chain(tokens, 2, "tenant")
    assert salted[0] != expected[0] and len(set(salted) & set(expected)) == 0


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_hash_names_its_whole_prefix(scheme: str) -> None:
    """R-EVENT-2: the same block after different parents, or in different namespaces,
    has different hashes; the same prefix always the same -- but in SGLang's default
    format, which leaves the namespace out (what the kit finds on its stream)."""
    hasher = BlockHasher(scheme)
    a = hasher.chain([1, 1, 9, 9], 2)
    b = hasher.chain([2, 2, 9, 9], 2)
    assert a[1] != b[1] and hasher.chain([1, 1, 9, 9], 2) == a
    salted = hasher.external(hasher.chain([1, 1, 9, 9], 2, "ns")[1])
    assert (salted == hasher.external(a[1])) == (scheme == "sglang")
    assert hasher.chain([1, 1, 9], 2) == a[:1]  # a partial block is not hashed


def test_bad_hasher_arguments_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="unknown hash scheme 'md5'"):
        BlockHasher("md5")
    with pytest.raises(InvalidArgumentError, match="a hash seed is a str"):
        BlockHasher(seed=0)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="wire must be"):
        BlockHasher(wire="hex")  # type: ignore[arg-type]
