"""kachedb-radix reference: the executable specification of a KV prefix-cache radix tree.

Pure Python, written to be read. Start at :mod:`kachedb_radix.reference.tree`; each module states
its invariants and the spec rules (``R-...``) it implements. The tree needs nothing beyond the
standard library and ``immutables``; its KV events (:mod:`kachedb_radix.reference.events`) hash
blocks with ``cbor2`` and ``xxhash`` and encode them with ``msgspec``; the router index is
:mod:`kachedb_radix.reference.router`; the block pool (:mod:`kachedb_radix.reference.blockpool`)
is NumPy.

Every class here has a fast twin of the same name in :mod:`kachedb_radix.accel`: ``RadixTree`` (C),
``BlockPool`` (CuPy on a GPU), ``RouterIndex`` (C), ``TieredTree`` (the tier layer over
the C tree), ``KVCache`` (the tiers over the block pool), with the same API and behaviour.
"""

from ._version import __version__
from .allocator import BlockAllocator
from .blockpool import BlockPool
from .dump import DUMP_FORMAT
from .errors import (
    ERROR_KINDS,
    AllocatorError,
    DoubleFreeError,
    ForeignBlockError,
    ForeignLeaseError,
    InvalidArgumentError,
    InvalidTokensError,
    InvariantViolation,
    LeaseError,
    LeaseReleasedError,
    OutOfBlocksError,
    RadixError,
    ReaderLeftError,
    TokenLayoutError,
    TokenRangeError,
    TokenTypeError,
)
from .lease import Lease
from .render import render_dump
from .results import InsertResult, MatchResult, TreeStats
from .router import RouterIndex
from .snapshot import Reader, Snapshot
from .tiers import KVCache, TieredTree
from .tokens import TOKEN_LIMIT, TokenInput, as_token_list
from .tree import RadixTree

__all__ = [
    "DUMP_FORMAT",
    "ERROR_KINDS",
    "TOKEN_LIMIT",
    "AllocatorError",
    "BlockAllocator",
    "BlockPool",
    "DoubleFreeError",
    "ForeignBlockError",
    "ForeignLeaseError",
    "InsertResult",
    "InvalidArgumentError",
    "InvalidTokensError",
    "InvariantViolation",
    "KVCache",
    "Lease",
    "LeaseError",
    "LeaseReleasedError",
    "MatchResult",
    "OutOfBlocksError",
    "RadixError",
    "RadixTree",
    "Reader",
    "ReaderLeftError",
    "RouterIndex",
    "Snapshot",
    "TieredTree",
    "TokenInput",
    "TokenLayoutError",
    "TokenRangeError",
    "TokenTypeError",
    "TreeStats",
    "__version__",
    "as_token_list",
    "render_dump",
]
