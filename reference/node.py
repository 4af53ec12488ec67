"""A node of the radix tree: one version of one edge of whole blocks.

Nodes are **persistent**: once a node is reachable from a published version of the
tree (see :mod:`kachedb_radix.reference.snapshot`), nothing a reader can see in it ever changes.
A change makes a new version of the node instead -- and, since the parent must
point at the new version, a new version of the parent, and so on up to the root
("path copying"). Everything below the changed path is shared between the old and
the new version, so a snapshot costs O(1) and a change O(depth * log fan-out).

A node holds (R-EDGE-1):

* ``nid`` -- a stable identity shared by all versions of the node; the writer's
  side tables (parent links, the eviction queue) refer to nodes by it;
* ``tokens`` and ``blocks`` -- lists whose first ``count`` blocks (``count * B``
  tokens) are this version's edge: k >= 1 whole blocks and their physical ids;
* ``children`` -- a persistent map (:class:`immutables.Map`, a hash array mapped
  trie with O(log n) updates that leave the old map intact) from a child's first
  block's tokens to the child (R-EDGE-2).

Versions of one node share the ``tokens`` and ``blocks`` lists: a version only
reads its first ``count`` entries, so dropping the last block (eviction) is a new
version with a smaller ``count`` and no copy, and appending (a chat's next turn) may
extend the list in place when no newer version has cut it shorter. Any other change
copies.

A root node has no edge (``count == 0``); there is one per namespace (R-NS-1).

Per-block pins and stamps are not here: they change on every match and release,
which would copy paths for no structural change. The tree keeps them in side
tables indexed by block id, which only the writer reads.
"""

from __future__ import annotations

from collections.abc import Sequence

from immutables import Map

Children = Map[tuple[int, ...], "Node"]

EMPTY_CHILDREN: Children = Map()


class Node:
    """One version of one node; see the module docstring. Never mutated once shared."""

    __slots__ = ("blocks", "children", "count", "nid", "tokens")

    def __init__(
        self, nid: int, tokens: list[int], blocks: list[int], count: int, children: Children
    ) -> None:
        self.nid = nid
        self.tokens = tokens
        self.blocks = blocks
        self.count = count
        self.children = children

    def first_block(self, block_size: int) -> tuple[int, ...]:
        """The key this node is filed under in its parent: its first block's tokens. O(B)."""
        return tuple(self.tokens[:block_size])

    def edge_blocks(self) -> list[int]:
        """This version's block ids. O(count)."""
        return self.blocks[: self.count]

    def tail(self) -> int:
        """The id of this version's last block (a non-root node). O(1)."""
        return self.blocks[self.count - 1]

    def with_children(self, children: Children) -> Node:
        """The same edge with other children. O(1)."""
        return Node(self.nid, self.tokens, self.blocks, self.count, children)

    def without_tail(self) -> Node:
        """The same node with its last block dropped; shares the lists. O(1)."""
        return Node(self.nid, self.tokens, self.blocks, self.count - 1, self.children)

    def extended(self, block_size: int, tokens: Sequence[int], blocks: Sequence[int]) -> Node:
        """The edge with ``blocks`` (holding ``tokens``) appended. O(len(tokens)).

        Appends to the shared lists in place when this version owns their ends
        (older versions read only their own ``count`` entries); copies otherwise.
        """
        if self.count == len(self.blocks):
            own_tokens, own_blocks = self.tokens, self.blocks
        else:
            own_tokens = self.tokens[: self.count * block_size]
            own_blocks = self.blocks[: self.count]
        own_tokens.extend(tokens)
        own_blocks.extend(blocks)
        return Node(self.nid, own_tokens, own_blocks, self.count + len(blocks), self.children)
