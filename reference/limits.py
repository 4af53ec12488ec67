"""The sizes a pool accepts (R-LIMIT-*): one statement, for both twins.

A tree's pool (and each tier's, and a :class:`~kachedb_radix.reference.BlockAllocator`'s)
is sized by two numbers a caller chooses, ``num_blocks`` and ``block_size``. Both twins
reserve memory in proportion to them when they are built, so both refuse the same sizes
with the same error, :class:`~kachedb_radix.reference.errors.InvalidArgumentError`,
before reserving anything (R-ERR-2: a refused size costs nothing):

* R-LIMIT-1: ``num_blocks`` is at most :data:`MAX_NUM_BLOCKS` (2**24). The reference
  keeps about 60 bytes per block from the start (the free heap, pins, stamps), so at
  the cap it holds about 1 GB; the C twin about 12 bytes per block.
* R-LIMIT-2: ``block_size`` is at most :data:`MAX_BLOCK_SIZE` (2**16 tokens).
* R-LIMIT-3: ``num_blocks * block_size``, the tokens a full pool holds, is at most
  :data:`MAX_TOKEN_SLOTS` (2**32): the C twin keeps token offsets in 32 bits, and a full
  pool at the cap is 16 GiB of token ids there.

Every serving engine's pool we know of is far inside: vLLM's and SGLang's device pools
are 10**4 to a few 10**6 blocks of 1 to 256 tokens.

The checks are pure: they read their arguments and raise, nothing else. O(1).
"""

from __future__ import annotations

from typing import Final

from .errors import InvalidArgumentError


def _shown(value: object) -> str:
    """``value`` as a message shows it: an int with thousands separators; ``repr`` else,
    or a description where ``repr`` refuses (an int past Python's digit limit). O(1) for
    the ints and short values the checks see."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 10**30:
        return f"{value:,}"
    try:
        return repr(value)
    except ValueError:  # int digits over sys.get_int_max_str_digits()
        return "an int of more digits than repr() shows"


#: The largest pool, in blocks (R-LIMIT-1).
MAX_NUM_BLOCKS: Final = 2**24
#: The largest block, in tokens (R-LIMIT-2).
MAX_BLOCK_SIZE: Final = 2**16
#: The most tokens a pool holds, ``num_blocks * block_size`` (R-LIMIT-3).
MAX_TOKEN_SLOTS: Final = 2**32


def check_num_blocks(num_blocks: object, name: str = "num_blocks", least: int = 1) -> int:
    """``num_blocks`` if it is an int in ``[least, MAX_NUM_BLOCKS]`` (R-ERR-1, R-LIMIT-1);
    ``name`` is the argument's name in the message. O(1).

    Raises:
        InvalidArgumentError: not an int (``bool`` included), or out of range.
    """
    if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < least:
        raise InvalidArgumentError(f"{name} must be an int >= {least}, got {_shown(num_blocks)}")
    if num_blocks > MAX_NUM_BLOCKS:
        raise InvalidArgumentError(
            f"{name} must be at most {MAX_NUM_BLOCKS:,} (2**24, R-LIMIT-1), "
            f"got {_shown(num_blocks)}"
        )
    return num_blocks


def check_block_size(block_size: object) -> int:
    """``block_size`` if it is an int in ``[1, MAX_BLOCK_SIZE]`` (R-ERR-1, R-LIMIT-2). O(1).

    Raises:
        InvalidArgumentError: not an int (``bool`` included), or out of range.
    """
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise InvalidArgumentError(f"block_size must be an int >= 1, got {_shown(block_size)}")
    if block_size > MAX_BLOCK_SIZE:
        raise InvalidArgumentError(
            f"block_size must be at most {MAX_BLOCK_SIZE:,} (2**16, R-LIMIT-2), "
            f"got {_shown(block_size)}"
        )
    return block_size


def check_pool(num_blocks: object, block_size: object, name: str = "num_blocks") -> None:
    """Both sizes of a pool, then their product (R-LIMIT-1, R-LIMIT-2, R-LIMIT-3), in
    that order: the first refusal is the one raised, in both twins. O(1).

    Raises:
        InvalidArgumentError: a size is not an int in range, or the pool holds more than
            :data:`MAX_TOKEN_SLOTS` tokens.
    """
    blocks = check_num_blocks(num_blocks, name)
    size = check_block_size(block_size)
    if blocks * size > MAX_TOKEN_SLOTS:
        raise InvalidArgumentError(
            f"{name} * block_size must be at most {MAX_TOKEN_SLOTS:,} tokens (2**32, "
            f"R-LIMIT-3), got {blocks:,} * {size:,} = {blocks * size:,}"
        )
