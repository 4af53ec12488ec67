"""Mutants of matching, inserting, splitting and edges (R-MATCH, R-INS, R-SPLIT, R-EDGE)."""

from __future__ import annotations

from dataclasses import replace

from kachedb_radix.reference.node import Node
from kachedb_radix.reference.results import InsertResult
from kachedb_radix.reference.walk import Path

from .base import MutantTree, mutant


@mutant("match_short_by_one_block", "R-MATCH-1")
class MatchShortByOneBlock(MutantTree):
    """A match whose length is a whole number of blocks stops one block early."""

    def _walk(self, namespace: str | None, tokens: list[int], limit: int) -> tuple[Path, int]:
        if self.calling == "match":
            limit = max(len(tokens) - 1, 0) // self._block_size
        return super()._walk(namespace, tokens, limit)


@mutant("partial_block_cached", "R-INS-3", "R-INS-1")
class PartialBlockCached(MutantTree):
    """A trailing partial block is padded with token 0 and cached."""

    def _validate(self, tokens: object, namespace: object) -> list[int]:
        token_list = super()._validate(tokens, namespace)
        if self.calling != "insert":
            return token_list
        short = -len(token_list) % self._block_size
        return token_list + [0] * short


@mutant("insert_length_counts_partial", "R-INS-1")
class InsertLengthCountsPartial(MutantTree):
    """Insert reports the input length instead of the cached whole-block length."""

    def insert(
        self,
        tokens: object,
        namespace: str | None = None,
        *,
        pin: bool = False,
        priority: int | None = None,
        retain_for: int | None = None,
    ) -> InsertResult:
        result = super().insert(
            tokens, namespace, pin=pin, priority=priority, retain_for=retain_for
        )
        return replace(result, length=len(self._validate(tokens, namespace)))


@mutant("reuse_trusts_first_block", "R-INS-2", "R-MATCH-1", "R-MATCH-3")
class ReuseTrustsFirstBlock(MutantTree):
    """Once an edge's first block matches, the rest of the edge is assumed to match."""

    def _walk(self, namespace: str | None, tokens: list[int], limit: int) -> tuple[Path, int]:
        path: Path = []
        node = self._roots.get(namespace)
        size = self._block_size
        matched = 0
        while node is not None and matched < limit:
            start = matched * size
            child = node.children.get(tuple(tokens[start : start + size]))
            if child is None:
                break
            taken = min(child.count, limit - matched)
            path.append((child, taken))
            matched += taken
            node = child if taken == child.count else None
        return path, matched


@mutant("first_token_key", "R-EDGE-2", "R-MATCH-3")
class FirstTokenKey(MutantTree):
    """Children are found by their first token, not their whole first block."""

    def _walk(self, namespace: str | None, tokens: list[int], limit: int) -> tuple[Path, int]:
        path: Path = []
        node = self._roots.get(namespace)
        size = self._block_size
        matched = 0
        while node is not None and matched < limit:
            start = matched * size
            child = next((c for key, c in node.children.items() if key[0] == tokens[start]), None)
            if child is None:
                break
            edge = child.tokens
            usable = min(child.count, limit - matched)
            taken = 1
            while taken < usable:
                offset = taken * size
                if tokens[start + offset : start + offset + size] != edge[offset : offset + size]:
                    break
                taken += 1
            path.append((child, taken))
            matched += taken
            node = child if taken == child.count else None
        return path, matched


@mutant("split_misplaces_blocks", "R-SPLIT-2", "R-MATCH-3")
class SplitMisplacesBlocks(MutantTree):
    """A split hands the upper half the edge's last block ids instead of its first."""

    def _split(self, node: Node, at: int) -> Node:
        ids = node.edge_blocks()
        rotated = ids[len(ids) - at :] + ids[: len(ids) - at]
        upper = super()._split(Node(node.nid, node.tokens, rotated, node.count, node.children), at)
        self._offer(node.nid)  # the lower half's tail is another block now
        return upper


@mutant("split_drops_pins", "R-SPLIT-2", "R-PIN-2")
class SplitDropsPins(MutantTree):
    """A split leaves the upper half's pins behind (it starts unpinned)."""

    def _split(self, node: Node, at: int) -> Node:
        upper = super()._split(node, at)
        for block in upper.edge_blocks():
            if self._pins[block]:
                self._pins[block] = 0
                self._pinned -= 1
        return upper


@mutant("split_drops_stamps", "R-SPLIT-2", "R-LRU-2")
class SplitDropsStamps(MutantTree):
    """A split resets the lower half's stamps to 0 (the upper half is restamped anyway)."""

    def _split(self, node: Node, at: int) -> Node:
        upper = super()._split(node, at)
        for block in self._nodes[node.nid].edge_blocks():
            self._stamps[block] = 0
        self._offer(node.nid)
        return upper
