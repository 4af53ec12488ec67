"""A node of the radix tree: one edge of whole blocks.

A non-root node owns an *edge*: ``k >= 1`` whole blocks of the same block size B,
stored as four parallel arrays (R-EDGE-1):

* ``tokens``  -- the ``k * B`` token ids of the edge, block after block;
* ``blocks``  -- the ``k`` physical block ids holding their KV;
* ``pins``    -- per block, how many live leases cover it (R-PIN-*);
* ``stamps``  -- per block, the logical time it was last used (R-LRU-*).

Children are keyed by the tokens of their first block (R-EDGE-2): two children of
one node never start with the same block, so a lookup needs one dict probe per node
plus a comparison of the rest of the edge.

Pins and stamps are kept per block, not per node, because a lease pins exactly the
blocks it matched (R-PIN-2) and a match refreshes exactly the blocks it used
(R-LRU-1), and both may end inside an edge. Keeping them per block means a match
never has to split a node (SGLang splits on match to get exact pins); the tree's
shape then depends only on which block paths are cached, and ``dump()`` can describe
it canonically (R-DUMP-2).

Every root-to-block path is monotone (R-PIN-3, R-LRU-2): pins and stamps never
increase going deeper, because whatever pins or touches a block also pins or touches
all of its ancestors.

A root node has no edge (all four arrays empty); there is one root per namespace
(R-NS-1), and it records its namespace so an emptied root can be dropped.
"""

from __future__ import annotations


class Node:
    """One node of the tree; see the module docstring for the meaning of each field."""

    __slots__ = ("blocks", "children", "namespace", "parent", "pins", "stamps", "tokens")

    def __init__(
        self,
        parent: Node | None,
        tokens: list[int],
        blocks: list[int],
        pins: list[int],
        stamps: list[int],
        namespace: str | None = None,
    ) -> None:
        self.parent = parent
        self.tokens = tokens
        self.blocks = blocks
        self.pins = pins
        self.stamps = stamps
        self.children: dict[tuple[int, ...], Node] = {}
        self.namespace = namespace

    @classmethod
    def root(cls, namespace: str | None) -> Node:
        """A fresh, empty root for ``namespace``. O(1)."""
        return cls(None, [], [], [], [], namespace)

    @property
    def is_root(self) -> bool:
        """Whether this node is a namespace root. O(1)."""
        return self.parent is None

    def first_block(self, block_size: int) -> tuple[int, ...]:
        """The key this node is filed under in its parent: its first block's tokens. O(B)."""
        return tuple(self.tokens[:block_size])

    def is_evictable_leaf(self) -> bool:
        """A non-empty leaf whose last block is unpinned: its tail may be evicted. O(1)."""
        return bool(self.blocks) and not self.children and self.pins[-1] == 0

    def split(self, block_size: int, at: int) -> Node:
        """Split this edge after its first ``at`` blocks (0 < at < k) (R-SPLIT-1).

        A new node takes the first ``at`` blocks and this node's place under the
        parent; this node keeps the rest, its children and its eviction-queue
        entries, and becomes the new node's only child. Pins and stamps travel with
        their blocks (R-SPLIT-2). Returns the new upper node. Cost: O(k * B).
        """
        assert self.parent is not None and 0 < at < len(self.blocks)
        cut = at * block_size
        upper = Node(
            self.parent,
            self.tokens[:cut],
            self.blocks[:at],
            self.pins[:at],
            self.stamps[:at],
        )
        self.parent.children[upper.first_block(block_size)] = upper
        del self.tokens[:cut]
        del self.blocks[:at]
        del self.pins[:at]
        del self.stamps[:at]
        self.parent = upper
        upper.children[self.first_block(block_size)] = self
        return upper
