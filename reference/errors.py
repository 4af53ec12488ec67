"""The typed error hierarchy shared by every implementation of the tree.

Every error raised by a public call is a :class:`RadixError`. Each concrete class
carries a stable ``kind`` string; the conformance kit compares implementations by
that kind, never by message text, so messages are free to be as helpful as
possible: they name what was wrong and with which value.

Atomicity (rule R-ERR-2): a call that raises leaves the tree, its allocator and its
logical clock exactly as they were, so ``dump()`` before equals ``dump()`` after.

The C twin (``accel``) raises these same classes, so ``except`` clauses written
against the reference work unchanged against it.
"""

from __future__ import annotations


class RadixError(Exception):
    """Base class of every error raised by kachedb-radix."""

    kind: str = "error"


class InvalidTokensError(RadixError, ValueError):
    """A token sequence was rejected (R-TOK-*); a subclass says why."""

    kind = "invalid_tokens"


class TokenTypeError(InvalidTokensError, TypeError):
    """Not a token container, an element that is not an int, or a wrong dtype (R-TOK-2)."""

    kind = "token_type"


class TokenRangeError(InvalidTokensError):
    """A token id outside [0, 2**32) (R-TOK-3)."""

    kind = "token_range"


class TokenLayoutError(InvalidTokensError):
    """A buffer that is not one-dimensional and C-contiguous (R-TOK-4)."""

    kind = "token_layout"


class InvalidArgumentError(RadixError, ValueError):
    """A non-token argument was wrong: a size, a count or a namespace (R-ERR-1)."""

    kind = "invalid_argument"


class OutOfBlocksError(RadixError):
    """The pool cannot supply the blocks even after evicting all it may (R-ALLOC-3, R-INS-6)."""

    kind = "out_of_blocks"


class AllocatorError(RadixError):
    """Base of the allocator's own misuse errors."""

    kind = "allocator"


class DoubleFreeError(AllocatorError):
    """A block id freed while already free, or twice in one call (R-ALLOC-4)."""

    kind = "double_free"


class ForeignBlockError(AllocatorError):
    """A block id that does not belong to the pool (R-ALLOC-4)."""

    kind = "foreign_block"


class LeaseError(RadixError):
    """Base of the lease misuse errors (R-PIN-*)."""

    kind = "lease"


class LeaseReleasedError(LeaseError):
    """A lease released a second time (R-PIN-4)."""

    kind = "lease_released"


class ForeignLeaseError(LeaseError):
    """A lease handed to a tree that did not issue it (R-PIN-5)."""

    kind = "foreign_lease"


class ReaderLeftError(RadixError):
    """A reader left its epoch a second time (R-EPOCH-4)."""

    kind = "reader_left"


class InvariantViolation(RadixError, AssertionError):
    """``check_invariants()`` found a broken structural invariant: a bug, never bad input."""

    kind = "invariant"


#: Every concrete error class, by kind: the conformance kit maps names back to classes.
ERROR_KINDS: dict[str, type[RadixError]] = {
    cls.kind: cls
    for cls in (
        TokenTypeError,
        TokenRangeError,
        TokenLayoutError,
        InvalidArgumentError,
        OutOfBlocksError,
        DoubleFreeError,
        ForeignBlockError,
        LeaseReleasedError,
        ForeignLeaseError,
        ReaderLeftError,
        InvariantViolation,
    )
}
