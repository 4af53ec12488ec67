"""The router's remembered block hashes (spec/router/hashes.py): exactly what the
scheme's own chain gives, whatever was remembered and forgotten before."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kachedb_radix.reference.errors import InvalidArgumentError, InvalidTokensError
from kachedb_radix.reference.events import ENGINES, SCHEMES, BlockHasher
from kachedb_radix.spec.router.hashes import ChainMemo
from tests.conftest import TreeFactory

#: Each example builds its own index from the (stateless) factory.
FACTORY_OK = [HealthCheck.function_scoped_fixture]

_PROMPTS = st.lists(
    st.tuples(
        st.lists(st.integers(0, 3), max_size=24),  # few token values: prefixes are shared
        st.sampled_from([None, "", "tenant"]),
    ),
    min_size=1,
    max_size=12,
)


#: Every engine preset's hasher, and every scheme with each wire form and each reading
#: of an empty salt.
_HASHERS = st.one_of(
    st.sampled_from([preset.hasher() for preset in ENGINES.values()]),
    st.builds(
        BlockHasher,
        st.sampled_from(SCHEMES),
        wire=st.sampled_from(["int", "bytes"]),
        empty_is_none=st.booleans(),
    ),
)


@settings(max_examples=80, deadline=None)
@given(
    hasher=_HASHERS,
    block_size=st.integers(1, 5),
    generation=st.integers(1, 12),
    prompts=_PROMPTS,
)
def test_the_memo_answers_what_the_chain_answers(
    hasher: BlockHasher,
    block_size: int,
    generation: int,
    prompts: list[tuple[list[int], str | None]],
) -> None:
    """Any preset, scheme, wire form and salt rule (``""`` as no salt or a salt of its
    own; Dynamo's seed on every block), any generation size (so entries are dropped and
    moved back), prompts that share prefixes in and across namespaces."""
    memo = ChainMemo(hasher, generation)
    largest = 0  # the most blocks of one request: the old generation may hold that more
    for tokens, namespace in prompts * 2:  # each again: answered from memory or not
        want = [hasher.external(h) for h in hasher.chain(tokens, block_size, namespace)]
        assert memo.external_chain(tokens, block_size, namespace) == want
        largest = max(largest, len(tokens) // block_size)
        assert len(memo) <= 2 * generation + largest


@settings(max_examples=60, deadline=None, suppress_health_check=FACTORY_OK)
@given(
    hasher=_HASHERS,
    block_size=st.integers(1, 5),
    generation=st.integers(1, 12),
    prompts=_PROMPTS,
)
def test_the_memo_over_an_index_answers_what_the_chain_answers(
    hasher: BlockHasher,
    block_size: int,
    generation: int,
    prompts: list[tuple[list[int], str | None]],
    make_index: TreeFactory,
) -> None:
    """The same over each twin's ``RouterIndex.hash_chain`` (the C twin's hashes in C),
    as the router builds it: from the root and from a remembered block."""
    index = make_index(hasher, block_size)
    memo = ChainMemo(hasher, generation, index=index)
    for tokens, namespace in prompts * 2:
        want = [hasher.external(h) for h in hasher.chain(tokens, block_size, namespace)]
        assert memo.external_chain(tokens, block_size, namespace) == want
        pairs = index.hash_chain(tokens, hasher.salt(namespace))
        assert [external for _, external in pairs] == want
        if pairs:  # from the first block on: the rest of the chain
            rest = index.hash_chain(tokens[block_size:], "ignored", pairs[0][0])
            assert rest == pairs[1:]


def test_a_memo_hashes_with_its_index_s_own_hasher(make_index: TreeFactory) -> None:
    with pytest.raises(ValueError, match="its index's own hasher"):
        ChainMemo(BlockHasher("sha256"), index=make_index(BlockHasher("sha256"), 16))


def test_a_chain_refuses_a_bad_namespace_or_parent(make_index: TreeFactory) -> None:
    """R-TOK-*, and the index's errors: nothing hashed, nothing changed."""
    index = make_index(BlockHasher("sha256"), 2)
    with pytest.raises(InvalidTokensError):
        index.hash_chain([1, -1])
    with pytest.raises(InvalidArgumentError):
        index.hash_chain([1, 2], 3)
    with pytest.raises(TypeError):
        index.hash_chain([1, 2], None, 12)
    with pytest.raises(TypeError):
        make_index(BlockHasher("xxh3_64"), 2).hash_chain([1, 2], None, b"x" * 8)
    assert index.workers() == []


def test_a_prompt_seen_before_is_not_hashed_again() -> None:
    memo = ChainMemo(BlockHasher("sha256"))
    prompt = list(range(64))
    memo.external_chain(prompt, 16)
    assert (memo.hits, memo.misses) == (0, 4)
    memo.external_chain(prompt, 16)
    assert (memo.hits, memo.misses) == (4, 4)
    memo.external_chain([*prompt, *range(100, 116)], 16)  # one block more: one hashed
    assert (memo.hits, memo.misses) == (8, 5)
    memo.external_chain(prompt, 16, "t")  # another namespace: a new chain
    assert memo.misses == 9
    assert memo.external_chain(prompt[:15], 16) == []


@pytest.mark.parametrize("engine", ["vllm", "dynamo"])
def test_an_empty_salt_shares_the_unsalted_chain_where_the_engine_says_so(engine: str) -> None:
    """vLLM and Dynamo read a salt of "" as none: the memo answers it from the unsalted
    chain it already holds, hashing nothing."""
    memo = ChainMemo(ENGINES[engine].hasher())
    prompt = list(range(48))
    unsalted = memo.external_chain(prompt, 16)
    assert memo.external_chain(prompt, 16, "") == unsalted
    assert (memo.hits, memo.misses) == (3, 3)
    assert memo.external_chain(prompt, 16, "t") != unsalted


def test_an_empty_salt_is_a_salt_of_its_own_for_this_project() -> None:
    memo = ChainMemo(ENGINES["kachedb"].hasher())
    prompt = list(range(32))
    assert memo.external_chain(prompt, 16, "") != memo.external_chain(prompt, 16)
    assert memo.misses == 4
