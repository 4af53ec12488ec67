"""The radix tree: longest cached full-block prefix, insertion, pinning, eviction.

This module is the heart of the executable spec. It composes the pieces defined
beside it -- tokens (R-TOK), the allocator (R-ALLOC), nodes and edges (R-EDGE),
leases (R-PIN), the eviction queue (R-EVICT) -- into the operations a serving
engine performs per request::

    tree = RadixTree(num_blocks=1024, block_size=16)
    hit = tree.match(prompt, pin=True)        # reuse hit.blocks, skip hit.length tokens
    done = tree.insert(prompt + output)       # cache the finished sequence
    hit.lease.release()                       # the request is over

Decisions (each a rule of ``spec/SPEC.md``; the id is cited where it is enforced):

* Only whole blocks are cached and matched; a match length is a multiple of B.
* A divergence inside an edge splits it at the block boundary; blocks, pins and
  stamps travel with their halves. Matching never splits.
* A logical clock advances by exactly one on every successful ``match``,
  ``insert`` and ``release``; the blocks those calls use are stamped with the new
  time. ``evict`` and read-only calls do not advance it. Failed calls change nothing.
* ``insert`` evicts only when the free pool is short, exactly the shortfall, never
  from the path it is inserting, and raises ``OutOfBlocksError`` before touching
  anything when even full eviction would not make room.
* Eviction frees single blocks from leaf tails, least recently used first, ties to
  the smaller block id.
* Each namespace has its own root; nothing matches across namespaces. An emptied
  namespace disappears.

Invariants: see :mod:`reference.invariants`, run by :meth:`RadixTree.check_invariants`.
"""

from __future__ import annotations

import itertools
from typing import Any

from .allocator import BlockAllocator
from .errors import (
    ForeignLeaseError,
    InvalidArgumentError,
    LeaseReleasedError,
    OutOfBlocksError,
)
from .eviction import EvictionQueue
from .lease import Lease
from .node import Node
from .results import InsertResult, MatchResult, TreeStats
from .tokens import as_token_list

# A walked path: each node on it with how many of its leading blocks the path uses.
_Path = list[tuple[Node, int]]


class RadixTree:
    """A radix tree of whole token blocks over a fixed pool of KV block ids.

    Args:
        num_blocks: the pool size, an int >= 1; block ids are ``0 .. num_blocks-1``.
        block_size: tokens per block B, an int >= 1 (default 16; 1 gives a
            token-level tree).

    Raises:
        InvalidArgumentError: either argument is not an int >= 1.

    Cost: O(num_blocks) to build. Not thread-safe: one caller at a time.
    """

    implementation = "reference"

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise InvalidArgumentError(f"block_size must be an int >= 1, got {block_size!r}")
        self._allocator = BlockAllocator(num_blocks)
        self._block_size = block_size
        self._roots: dict[str | None, Node] = {}
        self._queue = EvictionQueue()
        self._clock = 0
        self._cached = 0
        self._pinned = 0
        self._nodes = 0
        self._leases: dict[int, Lease] = {}
        self._lease_ids = itertools.count(1)

    # ------------------------------------------------------------------ properties

    @property
    def block_size(self) -> int:
        """Tokens per block. O(1)."""
        return self._block_size

    @property
    def num_blocks(self) -> int:
        """Pool size. O(1)."""
        return self._allocator.num_blocks

    @property
    def clock(self) -> int:
        """The logical clock: successful match, insert and release calls so far. O(1)."""
        return self._clock

    # ------------------------------------------------------------------ queries

    def match(
        self, tokens: object, namespace: str | None = None, *, pin: bool = False
    ) -> MatchResult:
        """Find the longest cached prefix of ``tokens`` made of whole blocks (R-MATCH-1).

        The matched blocks are stamped with the new clock time (R-LRU-1); with
        ``pin=True`` they are also pinned by the returned lease (R-PIN-1).

        Cost: O(n) for n tokens (validation, then one dict probe per node and one
        comparison per matched token; the key is never re-sliced per hop).

        Raises:
            InvalidTokensError: ``tokens`` is malformed (R-TOK-*).
            InvalidArgumentError: ``namespace`` is not None or a str.
        """
        token_list = as_token_list(tokens)
        _check_namespace(namespace)
        path, matched = self._walk(namespace, token_list, len(token_list) // self._block_size)
        now = self._tick()
        self._stamp(path, now)
        blocks = _path_blocks(path)
        lease = self._pin(namespace, token_list, matched, path) if pin else None
        return MatchResult(matched * self._block_size, blocks, lease)

    def insert(
        self, tokens: object, namespace: str | None = None, *, pin: bool = False
    ) -> InsertResult:
        """Cache every whole block of ``tokens``, reusing the cached prefix (R-INS-1).

        Blocks already cached are reused (R-INS-2); the rest get fresh ids from the
        allocator (R-ALLOC-2). A divergence inside an edge splits it (R-SPLIT-1).
        If the pool is short, exactly the shortfall is evicted first, never from the
        reused path (R-INS-5). The whole path is stamped (R-LRU-1) and, with
        ``pin=True``, pinned by the returned lease (R-PIN-1). A trailing partial
        block is ignored (R-INS-3).

        Cost: O(n + e log h) for n tokens and e evicted blocks.

        Raises:
            InvalidTokensError: ``tokens`` is malformed (R-TOK-*).
            InvalidArgumentError: ``namespace`` is not None or a str.
            OutOfBlocksError: the free blocks plus every evictable block off the
                path are fewer than the new blocks needed (R-INS-6). Nothing changes.
        """
        token_list = as_token_list(tokens)
        _check_namespace(namespace)
        size = self._block_size
        wanted = len(token_list) // size
        path, reused = self._walk(namespace, token_list, wanted)
        needed = wanted - reused

        evicted: list[int] = []
        shortfall = needed - self._allocator.free_count
        if shortfall > 0:
            # Pin the reused path while evicting, so room is never made by evicting
            # the prefix we are about to extend (R-INS-5).
            self._adjust_pins(path, +1)
            evictable = self._cached - self._pinned
            if shortfall > evictable:
                self._adjust_pins(path, -1)
                raise OutOfBlocksError(
                    f"insert needs {needed} new blocks: {self._allocator.free_count} are free "
                    f"and only {evictable} more can be evicted ({self._pinned} pinned)"
                )
            evicted = self._evict_blocks(shortfall)
            self._adjust_pins(path, -1)
            # Eviction may have trimmed the unpinned tail of the last edge we
            # reached; walk again so the split below sees the current shape.
            path, reused = self._walk(namespace, token_list, wanted)

        allocated: list[int] = []
        if needed > 0:
            allocated = self._allocator.allocate(needed)
            self._attach(namespace, path, token_list, reused, wanted, allocated)
            path, _ = self._walk(namespace, token_list, wanted)

        now = self._tick()
        self._stamp(path, now)
        lease = self._pin(namespace, token_list, wanted, path) if pin else None
        return InsertResult(
            length=wanted * size,
            blocks=_path_blocks(path),
            reused=reused,
            allocated=tuple(allocated),
            evicted=tuple(evicted),
            lease=lease,
        )

    def release(self, lease: Lease) -> None:
        """Release ``lease``: unpin its blocks and stamp them as just used (R-PIN-4, R-LRU-1).

        Cost: O(length of the lease).

        Raises:
            ForeignLeaseError: ``lease`` was not issued by this tree (R-PIN-5).
            LeaseReleasedError: ``lease`` was already released (R-PIN-4).
        """
        if not isinstance(lease, Lease) or lease._tree is not self:
            raise ForeignLeaseError(f"{lease!r} was not issued by this tree")
        if lease.released:
            raise LeaseReleasedError(f"lease {lease.id} was already released")
        count = len(lease.blocks)
        path, matched = self._walk(lease.namespace, list(lease.tokens), count)
        assert matched == count, "a pinned path can neither change nor disappear"
        self._adjust_pins(path, -1)
        self._stamp(path, self._tick())
        lease._released = True
        del self._leases[lease.id]

    def evict(self, count: int) -> tuple[int, ...]:
        """Free up to ``count`` blocks, least recently used leaf tail first (R-EVICT-1..3).

        Returns the freed ids in eviction order; fewer than ``count`` when fewer
        blocks are evictable (R-EVICT-4). The clock does not advance.

        Cost: O(count log h), h the eviction queue's size (O(number of nodes)).

        Raises:
            InvalidArgumentError: ``count`` is not an int >= 0.
        """
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise InvalidArgumentError(f"evict count must be an int >= 0, got {count!r}")
        return tuple(self._evict_blocks(count))

    # ------------------------------------------------------------------ introspection

    def stats(self) -> TreeStats:
        """Block counters (R-INV-1). O(1)."""
        return TreeStats(
            num_blocks=self.num_blocks,
            free=self._allocator.free_count,
            cached=self._cached,
            pinned=self._pinned,
            evictable=self._cached - self._pinned,
            leases=len(self._leases),
            clock=self._clock,
        )

    def namespaces(self) -> list[str | None]:
        """Namespaces holding at least one block, None first then by name. O(r log r)."""
        return sorted(self._roots, key=_namespace_order)

    def dump(self) -> dict[str, Any]:
        """The canonical, JSON-serialisable description of the whole state (R-DUMP-1).

        Two implementations in the same state return equal dumps. Cost: O(N) over
        all cached tokens and the pool.
        """
        from .dump import dump_state

        return dump_state(
            block_size=self._block_size,
            num_blocks=self.num_blocks,
            clock=self._clock,
            free_blocks=self._allocator.free_ids(),
            roots=[self._roots[name] for name in self.namespaces()],
        )

    def render(self) -> str:
        """The tree drawn as text, from :meth:`dump`. O(N)."""
        from .render import render_dump

        return render_dump(self.dump())

    def check_invariants(self) -> None:
        """Assert every structural invariant (R-INV-*). O(N + h + leases * length).

        Raises:
            InvariantViolation: an invariant is broken (a bug, never bad input).
        """
        from .invariants import check_tree

        check_tree(
            block_size=self._block_size,
            allocator=self._allocator,
            roots=self._roots,
            queue=self._queue,
            clock=self._clock,
            cached=self._cached,
            pinned=self._pinned,
            node_count=self._nodes,
            leases=list(self._leases.values()),
            walk=self._walk,
        )

    # ------------------------------------------------------------------ internals

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _walk(self, namespace: str | None, tokens: list[int], limit: int) -> tuple[_Path, int]:
        """Follow the cached path of ``tokens``' first ``limit`` blocks.

        Returns the nodes visited with how many blocks of each were matched, and
        the total blocks matched. O(limit * B): ``tokens`` is indexed by position,
        never re-sliced from the current hop to its end.
        """
        path: _Path = []
        node = self._roots.get(namespace)
        size = self._block_size
        matched = 0
        while node is not None and matched < limit:
            start = matched * size
            child = node.children.get(tuple(tokens[start : start + size]))
            if child is None:
                break
            # The first block matched through the dict key. Compare the rest of the
            # usable edge in one slice comparison; only on a mismatch look for the first
            # differing block.
            edge = child.tokens
            usable = min(len(child.blocks), limit - matched)
            span = usable * size
            if tokens[start : start + span] == edge[:span]:
                taken = usable
            else:
                taken = 1
                while (
                    tokens[start + taken * size : start + (taken + 1) * size]
                    == edge[taken * size : (taken + 1) * size]
                ):
                    taken += 1
            path.append((child, taken))
            matched += taken
            node = child if taken == len(child.blocks) else None
        return path, matched

    def _attach(
        self,
        namespace: str | None,
        path: _Path,
        tokens: list[int],
        reused: int,
        wanted: int,
        new_blocks: list[int],
    ) -> None:
        """Hang ``new_blocks`` (blocks ``reused .. wanted-1`` of ``tokens``) off the path."""
        size = self._block_size
        if not path:
            parent = self._roots.get(namespace)
            if parent is None:
                parent = self._roots[namespace] = Node.root(namespace)
        else:
            parent, used = path[-1]
            if used < len(parent.blocks):
                parent = parent.split(size, used)  # R-SPLIT-1
                self._nodes += 1
        new_tokens = tokens[reused * size : wanted * size]
        count = len(new_blocks)
        self._cached += count
        if not parent.is_root and not parent.children:
            # Extending a leaf in place (a chat's next turn) keeps the tree compact.
            parent.tokens.extend(new_tokens)
            parent.blocks.extend(new_blocks)
            parent.pins.extend([0] * count)
            parent.stamps.extend([0] * count)
            self._queue.offer(parent, self._nodes)
            return
        child = Node(parent, new_tokens, list(new_blocks), [0] * count, [0] * count)
        parent.children[child.first_block(size)] = child
        self._nodes += 1
        self._queue.offer(child, self._nodes)

    def _stamp(self, path: _Path, now: int) -> None:
        """Mark the path's blocks as used at ``now`` (R-LRU-1)."""
        for node, used in path:
            stamps = node.stamps
            for index in range(used):
                stamps[index] = now
        if path:
            # Only the last node can be a leaf whose tail moved in the LRU order.
            self._queue.offer(path[-1][0], self._nodes)

    def _adjust_pins(self, path: _Path, delta: int) -> None:
        """Add ``delta`` (+1 or -1) to the pin count of every block on the path."""
        for node, used in path:
            pins = node.pins
            for index in range(used):
                before = pins[index]
                pins[index] = before + delta
                if before == 0:
                    self._pinned += 1
                elif before + delta == 0:
                    self._pinned -= 1
        if path and delta < 0:
            self._queue.offer(path[-1][0], self._nodes)

    def _pin(self, namespace: str | None, tokens: list[int], count: int, path: _Path) -> Lease:
        self._adjust_pins(path, +1)
        lease = Lease(
            self,
            next(self._lease_ids),
            namespace,
            tuple(tokens[: count * self._block_size]),
            _path_blocks(path),
        )
        self._leases[lease.id] = lease
        return lease

    def _evict_blocks(self, count: int) -> list[int]:
        """Evict up to ``count`` leaf-tail blocks in LRU order; free and return them."""
        freed: list[int] = []
        size = self._block_size
        while len(freed) < count:
            leaf = self._queue.pop_lru()
            if leaf is None:
                break
            if len(leaf.blocks) == 1:
                self._remove_leaf(leaf)
            del leaf.tokens[-size:]
            freed.append(leaf.blocks.pop())
            leaf.pins.pop()
            leaf.stamps.pop()
            self._cached -= 1
            if leaf.blocks:
                self._queue.offer(leaf, self._nodes)
        self._allocator.free(freed)
        return freed

    def _remove_leaf(self, leaf: Node) -> None:
        """Unlink a leaf about to lose its last block; its parent may become a leaf."""
        parent = leaf.parent
        assert parent is not None
        del parent.children[leaf.first_block(self._block_size)]
        leaf.parent = None
        self._nodes -= 1
        if not parent.is_root:
            self._queue.offer(parent, self._nodes)
        elif not parent.children:
            del self._roots[parent.namespace]  # R-NS-3: an emptied namespace disappears


def _path_blocks(path: _Path) -> tuple[int, ...]:
    blocks: list[int] = []
    for node, used in path:
        blocks.extend(node.blocks[:used])
    return tuple(blocks)


def _check_namespace(namespace: object) -> None:
    if namespace is not None and not isinstance(namespace, str):
        raise InvalidArgumentError(
            f"namespace must be None or a str, got {type(namespace).__name__} {namespace!r}"
        )


def _namespace_order(namespace: str | None) -> tuple[bool, str]:
    return (namespace is not None, namespace or "")
