"""The eviction queue: evictable leaves ordered by their tails' eviction keys.

Eviction frees one block at a time from the tail of a leaf (R-EVICT-1): only a
leaf's last block has no cached descendant, so "deeper blocks before their
ancestors" holds by construction. The victim is the evictable leaf tail with the
smallest *key*, which the tree's eviction policy computes
(:mod:`kachedb_radix.reference.policies`, R-POL-1): a tuple of ints ending with the
tail's block id, so the order is total for any state. Under the default policy,
``lru``, the key is ``(stamp, block_id)``: oldest first, and among equal stamps the
smallest block id (R-EVICT-2, R-EVICT-3).

The queue is an **indexed binary min-heap**: one entry per evictable leaf, found by
the node's stable id (``nid``, shared by every version of a node), so an entry can
be re-keyed or withdrawn where it stands. The tree calls :meth:`EvictionQueue.file`
whenever a leaf's key may have changed (new stamp, pin dropped to zero, tail evicted,
edge extended, last child removed, the policy's state of the tail changed) and
:meth:`EvictionQueue.withdraw` when a node stops being an evictable leaf (pinned,
given a child, removed).

Invariants (checked by :meth:`EvictionQueue.check` and ``RadixTree.check_invariants``):

1. the entries are exactly the evictable leaves, each under its tail's current key;
2. heap order: no entry's key is smaller than its parent's (``heap[(i - 1) // 2]``);
3. ``position[nid]`` is the index of ``nid``'s entry;
4. ``owner[block_id]`` is the node whose entry is keyed by that tail block (so a
   victim named by its block, :meth:`RadixTree.choose_victims`, and a tail whose
   policy state changed, are found in O(1)).

Cost: every operation is O(log h) for h queued leaves, worst case -- there are no
stale entries to skip, so the first ``evict`` after a long fill costs what any other
does, under every policy. (A lazy-deletion heap -- push a new entry on every change,
skip the stale ones when popping -- is O(log h) only amortised: one call may pop a
whole history of stale entries. SGLang's first tree heapified every leaf per call;
the seed sorted them.)
"""

from __future__ import annotations

from collections.abc import Iterator

#: ``(*key, nid)``: the tail's eviction key, whose last item is the tail's block id,
#: then the node; block ids of leaf tails are distinct, so ``nid`` never decides.
Entry = tuple[int, ...]


class EvictionQueue:
    """Indexed min-heap of evictable leaf tails keyed by their eviction keys."""

    __slots__ = ("_heap", "_owner", "_position")

    def __init__(self) -> None:
        self._heap: list[Entry] = []
        self._position: dict[int, int] = {}  # nid -> index of its entry in _heap
        self._owner: dict[int, int] = {}  # tail block id -> nid of the entry keyed by it

    def __len__(self) -> int:
        """Queued leaves. O(1)."""
        return len(self._heap)

    def __contains__(self, nid: object) -> bool:
        """Whether node ``nid`` is queued. O(1)."""
        return nid in self._position

    def file(self, nid: int, key: tuple[int, ...]) -> None:
        """Queue node ``nid`` under ``key`` (its tail's id last), or re-key its entry.

        O(log h)."""
        entry = (*key, nid)
        index = self._position.get(nid)
        if index is None:
            index = len(self._heap)
            self._heap.append(entry)
        else:
            del self._owner[self._heap[index][-2]]  # its tail may have moved
            self._heap[index] = entry
        self._owner[key[-1]] = nid
        self._restore(index)

    def withdraw(self, nid: int) -> None:
        """Take node ``nid`` out of the queue, if it is queued. O(log h)."""
        index = self._position.pop(nid, None)
        if index is None:
            return
        del self._owner[self._heap[index][-2]]
        last = self._heap.pop()
        if index < len(self._heap):
            # The last entry fills the hole, then moves up or down to its place.
            self._heap[index] = last
            self._restore(index)

    def pop_first(self) -> int | None:
        """Remove and return the nid of the tail with the smallest key, or None. O(log h)."""
        if not self._heap:
            return None
        nid = self._heap[0][-1]
        self.withdraw(nid)
        return nid

    def first(self) -> int | None:
        """The tail block with the smallest key, left in the queue; None when empty. O(1)."""
        return self._heap[0][-2] if self._heap else None

    def owner(self, block_id: int) -> int | None:
        """The nid of the queued leaf whose tail is ``block_id``, or None. O(1)."""
        return self._owner.get(block_id)

    def copy(self) -> EvictionQueue:
        """An independent queue with the same entries, of the same class. O(h)."""
        twin = type(self).__new__(type(self))
        twin._heap = list(self._heap)
        twin._position = dict(self._position)
        twin._owner = dict(self._owner)
        return twin

    def entries(self) -> Iterator[Entry]:
        """Every entry, in heap order (not sorted). O(h); for ``check_invariants``."""
        return iter(self._heap)

    def check(self) -> str | None:
        """The first broken heap invariant (2 or 3 above), or None. O(h)."""
        heap = self._heap
        if len(self._position) != len(heap):
            return f"{len(self._position)} positions for {len(heap)} entries"
        if self._owner != {entry[-2]: entry[-1] for entry in heap}:
            return "the owners of tail blocks are not the queued entries"
        for index, entry in enumerate(heap):
            nid = entry[-1]
            if self._position.get(nid) != index:
                return f"node {nid}'s position is not {index}"
            if index and heap[(index - 1) // 2][:-1] > entry[:-1]:
                return f"entry {index} of node {nid} is smaller than its parent"
        return None

    def _restore(self, index: int) -> None:
        """Move the entry at ``index`` up or down until heap order holds again."""
        heap = self._heap
        entry = heap[index]
        # Up: while the parent is larger, it moves down into the hole.
        while index > 0:
            parent = (index - 1) // 2
            if heap[parent] <= entry:
                break
            self._put(index, heap[parent])
            index = parent
        # Down: while the smaller child is smaller, it moves up into the hole.
        size = len(heap)
        while (child := 2 * index + 1) < size:
            if child + 1 < size and heap[child + 1] < heap[child]:
                child += 1
            if heap[child] >= entry:
                break
            self._put(index, heap[child])
            index = child
        self._put(index, entry)

    def _put(self, index: int, entry: Entry) -> None:
        self._heap[index] = entry
        self._position[entry[-1]] = index
