"""Snapshots and reader epochs: readers that never block, blocks never reused too early.

**Versions.** The tree is persistent (see :mod:`kachedb_radix.reference.node`): a change builds
new versions of the nodes on its path and leaves the old ones intact. At the end of
every successful ``match``, ``insert``, ``release`` and ``evict`` -- and once more
inside an ``insert`` that had to evict, right after the eviction -- the writer
*publishes* the new state by one assignment of a :class:`Version` (R-SNAP-1). A
reader that loads the published version sees all of one change or none of it.

**Snapshots.** ``tree.snapshot()`` returns that published version wrapped in a
:class:`Snapshot`, in O(1). It answers ``match`` and ``dump`` for its version
forever, whatever the writer does afterwards (R-SNAP-2). A snapshot match neither
stamps nor pins: readers do not disturb the LRU order.

**Reader epochs.** A snapshot's block ids stay *correct* for its version, but the
KV in those blocks is only safe to read if the blocks are not handed to a new
request meanwhile. ``tree.reader()`` gives a :class:`Reader` -- a snapshot that has
*entered* an epoch -- and ``leave()`` (or leaving its ``with`` block) ends it. A
block freed by eviction while readers are inside goes to a quarantine stamped with
a fresh epoch number, and returns to the allocator only once every reader that
entered before it has left (R-EPOCH-1, R-EPOCH-2). Epoch numbers come from one
counter shared by readers and frees, so "entered before" is a comparison of two
integers. A reader that never leaves keeps its quarantine visible in
``stats().quarantined`` and loses nothing (R-EPOCH-3); ``stats().oldest_reader_age``
says for how many versions the oldest one has been inside.

**Readers that cannot leak.** A reader nobody refers to any more leaves by itself
(R-EPOCH-5): forgetting ``leave()`` -- an exception path, a dropped request object
-- must not pin the quarantine for ever and shrink the pool until every insert
fails. The finalizer is :meth:`Reader.__del__`, and what it may do is narrow,
because of *when* it runs: in CPython, in whichever thread drops the last reference
(or in whichever thread the cyclic collector happens to run, at any allocation,
possibly in the middle of the writer's call), and at interpreter shutdown while
modules are being torn down. So it does exactly what ``leave()`` does, which is
already allowed from any thread at any moment: one atomic dict operation on the
tree this reader holds (``RadixTree._leave``). It takes no lock (the interrupted
thread might hold it), runs no code that could re-enter the tree, reads no module
global and cannot raise. The writer, for its part, only ever reads the registry in
single atomic steps (``len``, ``min``, a copy), so a reader may vanish between any
two of them -- as it may when another thread calls ``leave()``.

Ordering that makes this safe under threads (documented for implementers): a
reader takes its epoch number, registers, *then* loads the published version; the
writer publishes a version without the freed blocks, *then* takes the free's epoch
number and checks the registry. A reader racing with a free therefore either
registers in time to be waited for, or loads the version without the blocks.

Thread-safety contract: ``snapshot()``, ``reader()``, and every method of a
:class:`Snapshot` or :class:`Reader` may be called from any thread at any time and
never wait for the writer. All other tree methods belong to one writer thread at a
time. (The reference relies on CPython's atomic dict, list and attribute operations
under the GIL for the registry and the publication.)
"""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

from immutables import Map

from .dump import dump_shape
from .errors import ReaderLeftError
from .namespaces import check_namespace, namespace_order
from .node import Node
from .results import MatchResult
from .tokens import as_token_list
from .walk import path_blocks, walk

if TYPE_CHECKING:
    from .tree import RadixTree


@dataclass(frozen=True, slots=True)
class Version:
    """One published state of the tree's shape.

    Attributes:
        roots: each namespace's root (persistent: never changes).
        number: the version number; +1 per publication (R-SNAP-1).
        clock: the logical clock when it was published.
    """

    roots: Map[str | None, Node]
    number: int
    clock: int


class Snapshot:
    """An immutable view of one published version of a tree (R-SNAP-2).

    Cost to take: O(1). Safe to use from any thread.
    """

    __slots__ = ("_block_size", "_version")

    def __init__(self, version: Version, block_size: int) -> None:
        self._version = version
        self._block_size = block_size

    @property
    def version(self) -> int:
        """The version number this snapshot shows. O(1)."""
        return self._version.number

    @property
    def clock(self) -> int:
        """The tree's logical clock at this version. O(1)."""
        return self._version.clock

    @property
    def block_size(self) -> int:
        """Tokens per block. O(1)."""
        return self._block_size

    def match(self, tokens: object, namespace: str | None = None) -> MatchResult:
        """The longest whole-block prefix cached at this version (R-SNAP-2, R-MATCH-1).

        Stamps nothing and pins nothing; ``lease`` is always None. Cost: O(n).

        Raises:
            InvalidTokensError: ``tokens`` is malformed (R-TOK-*).
            InvalidArgumentError: ``namespace`` is not None or a str.
        """
        token_list = as_token_list(tokens)
        check_namespace(namespace)
        size = self._block_size
        path, matched = walk(
            self._version.roots, namespace, token_list, len(token_list) // size, size
        )
        return MatchResult(matched * size, path_blocks(path))

    def namespaces(self) -> list[str | None]:
        """Namespaces holding blocks at this version, None first. O(r log r)."""
        return sorted(self._version.roots, key=namespace_order)

    def dump(self) -> dict[str, Any]:
        """The canonical dump of this version's shape (R-SNAP-2, R-DUMP-2).

        Like ``RadixTree.dump()`` without the writer's bookkeeping (pins, stamps,
        free and quarantined blocks), plus the version number. O(cached tokens).
        """
        roots = self._version.roots
        return dump_shape(
            block_size=self._block_size,
            version=self._version.number,
            clock=self._version.clock,
            roots=[(name, roots[name]) for name in self.namespaces()],
        )


class Reader(Snapshot):
    """A snapshot inside a reader epoch: what it can see is not reused until it leaves.

    Use as a context manager, or call :meth:`leave` exactly once (R-EPOCH-1). A
    reader that is no longer referenced leaves by itself (R-EPOCH-5).
    """

    __slots__ = ("_left", "_tree", "epoch")

    def __init__(self, tree: RadixTree, epoch: int, version: Version) -> None:
        super().__init__(version, tree.block_size)
        self._tree = tree
        self.epoch = epoch
        self._left = False

    @property
    def left(self) -> bool:
        """Whether the reader has left. O(1)."""
        return self._left

    def leave(self) -> None:
        """Leave the epoch; quarantined blocks may return to the allocator. O(1).

        Raises:
            ReaderLeftError: the reader already left (R-EPOCH-4).
        """
        if self._left:
            raise ReaderLeftError(f"reader {self.epoch} already left")
        self._left = True
        self._tree._leave(self.epoch)

    def __del__(self) -> None:
        """Leave if still inside: an unreferenced reader cannot leak (R-EPOCH-5).

        Runs in any thread, possibly in the middle of a writer call or at interpreter
        shutdown (see the module docstring), so it only flips its own flag and makes
        the one atomic registry update ``leave()`` makes. ``getattr`` covers a reader
        whose construction never finished (a failed copy). O(1).
        """
        if not getattr(self, "_left", True):
            self._left = True
            self._tree._leave(self.epoch)

    def __enter__(self) -> Reader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if not self._left:
            self.leave()

    def __repr__(self) -> str:
        state = "left" if self._left else "inside"
        return f"<Reader epoch={self.epoch} version={self.version} {state}>"
