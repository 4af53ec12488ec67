"""Where two implementations' states differ, block by block, for marking both trees.

Both sides of a recording intern their blocks in one key space
(:class:`~kachedb_radix.spec.explain.model.KeySpace`), so the same token path has the same
key -- and the same node id on the page -- on either side.
:func:`compare` walks the two indexes by key and says, per key, what differs: the block is
cached on one side only, or held in another block id, or has another pin count, or another
stamp (only when the recording compares recency). The view marks each node holding such a
block with the ``differs`` flag (``differs-stamp`` when its stamps alone differ) and a line
of text saying what the other side has, so a reader sees the differing node, block or stamp
in both trees at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .model import DumpIndex


@dataclass
class Contrast:
    """What differs per block key between this side and the other.

    Attributes:
        only: keys cached on this side and not the other.
        ids: keys held in another block id on the other side.
        pins: keys with another pin count on the other side.
        stamps: keys with another stamp on the other side.
        text: per key, what the other side has (``#6 there``, ``t=2 there``, ``not cached
            there``).
    """

    only: set[int] = field(default_factory=set)
    ids: set[int] = field(default_factory=set)
    pins: set[int] = field(default_factory=set)
    stamps: set[int] = field(default_factory=set)
    text: dict[int, str] = field(default_factory=dict)

    def marked(self) -> set[int]:
        """Every key that differs in anything. O(n)."""
        return self.only | self.ids | self.pins | self.stamps


def compare(mine: DumpIndex, other: DumpIndex, other_name: str, *, stamps: bool) -> Contrast:
    """What differs, for the blocks of ``mine``, from ``other`` (named ``other_name`` in
    the text). Stamps are compared only when ``stamps``. O(cached blocks)."""
    found = Contrast()
    for key, block in mine.blocks.items():
        there = other.blocks.get(key)
        if there is None:
            found.only.add(key)
            found.text[key] = f"#{block.block} not cached in {other_name}"
            continue
        said = []
        if there.block != block.block:
            found.ids.add(key)
            said.append(f"#{there.block}")
        if block.pin is not None and there.pin is not None and there.pin != block.pin:
            found.pins.add(key)
            said.append(f"pin {there.pin}")
        stamped = stamps and block.stamp is not None and there.stamp is not None
        if stamped and there.stamp != block.stamp:
            found.stamps.add(key)
            said.append(f"t={there.stamp}")
        if said:
            found.text[key] = f"#{block.block}: {' '.join(said)} in {other_name}"
    return found
