"""Blocks whose content proves itself: the payload and metadata of generation ``gen``.

The crash and power-loss tests write blocks made here and, after a crash, check each block
they get back against what its own metadata says it is -- so a torn or mixed block can
never pass for a good one, whatever the store's checksums say. Every generation has its
own 64-byte pattern (BLAKE2b of the number), repeated over the payload, so two
generations differ in every page.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np
import numpy.typing as npt

META = re.compile(rb"slot=(\d+) gen=(\d+) ")


def payload(gen: int, size: int) -> npt.NDArray[np.uint8]:
    """The payload of generation ``gen``: ``size`` bytes. O(size)."""
    pattern = np.frombuffer(hashlib.blake2b(gen.to_bytes(8, "little")).digest(), np.uint8)
    return np.tile(pattern, -(-size // len(pattern)))[:size]


def meta(slot: int, gen: int, limit: int) -> bytes:
    """The metadata of generation ``gen`` in ``slot``: names both, padded to a length that
    depends on ``gen`` (up to ``limit`` bytes), so records differ in length too."""
    head = b"slot=%d gen=%d " % (slot, gen)
    assert len(head) <= limit, (head, limit)
    return head + bytes([gen % 251]) * ((gen * 7919) % (limit - len(head) + 1))


def parse(slot: int, data: bytes, limit: int) -> int:
    """The generation ``data`` (a block's metadata read back from ``slot``) claims,
    after checking that it is exactly what :func:`meta` makes for it."""
    found = META.match(data)
    assert found is not None, f"slot {slot}: metadata {data[:40]!r} is not ours"
    gen = int(found.group(2))
    assert int(found.group(1)) == slot, f"slot {slot} holds metadata of slot {found.group(1)!r}"
    assert data == meta(slot, gen, limit), f"slot {slot}: metadata of gen {gen} is damaged"
    return gen
