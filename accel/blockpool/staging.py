"""The pinned staging ring that carries block ids to the device without synchronizing.

A batch of more than :data:`kachedb_radix.accel.blockpool.kernels.INLINE_PAIRS` pairs needs its ids
in device memory.  Copying them from ordinary (pageable) host memory makes the CUDA driver stage
them itself and wait; from page-locked (pinned) memory the copy is a plain asynchronous DMA queued
on the stream, ahead of the launch that reads the ids.

:class:`StagingRing` hands out spans of one pinned host array, mirrored span for span by one
device array: the caller writes a batch's ids into the host span, queues the host-to-device
copy and the launch, then :meth:`StagingRing.retire` the span with an event recorded after
the launch.  Spans are handed out in ring order; before a span is handed out again, the
events of the launches that last used any part of it are waited for (in practice long
finished: the ring holds many batches), so neither the host copy nor the device copy of an
id is overwritten while a queued copy or launch may still read it.

Nothing here imports CuPy: the ring works on a NumPy array, a device address and event
objects with ``done`` and ``synchronize()``, so its logic is tested on the CPU with fakes.

Invariants:

* in-flight spans are listed in the order they were handed out;
* a span handed out never overlaps a span still in flight (waited for first), so the
  in-flight spans are disjoint.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt


class Event(Protocol):
    """What the ring needs of a CUDA event (``cupy.cuda.Event`` has both)."""

    @property
    def done(self) -> bool: ...

    def synchronize(self) -> None: ...


@dataclass(frozen=True)
class Span:
    """Entries ``start .. start + count - 1`` of the ring."""

    start: int
    count: int

    @property
    def end(self) -> int:
        return self.start + self.count

    def overlaps(self, other: Span) -> bool:
        return self.start < other.end and other.start < self.end


class StagingRing:
    """Spans of a pinned host array of ids, mirrored by a device array of the same size.

    Args:
        host: the pinned host array (int32; its length is the ring's capacity).
        device_address: the address of the device array's first entry.

    Cost: :meth:`take` is O(1) plus the spans it waits for; nothing allocates.
    """

    def __init__(self, host: npt.NDArray[np.int32], device_address: int) -> None:
        self.host = host
        self.device_address = device_address
        self._head = 0
        self._inflight: deque[tuple[Span, Event]] = deque()
        self.waits = 0  # spans waited for because the ring came round (a statistic)

    @property
    def capacity(self) -> int:
        return len(self.host)

    def take(self, count: int) -> Span:
        """The next ``count`` entries in ring order, free to write (at most
        :attr:`capacity`).  O(spans in flight): finished ones are dropped, and the
        unfinished ones it overlaps are waited for.

        Raises:
            ValueError: ``count`` is larger than the ring.
        """
        if count > self.capacity:
            raise ValueError(f"a batch of {count} ids does not fit a ring of {self.capacity}")
        if self._head + count > self.capacity:
            self._head = 0
        span = Span(self._head, count)
        kept: deque[tuple[Span, Event]] = deque()
        for old, event in self._inflight:
            if event.done:
                continue
            if old.overlaps(span):
                self.waits += 1
                event.synchronize()
                continue
            kept.append((old, event))
        self._inflight = kept
        self._head += count
        return span

    def write(self, span: Span, lists: Sequence[npt.NDArray[np.integer[Any]]]) -> list[int]:
        """Copy the id lists one after the other into the host span (their lengths must add
        up to its size); return the device address of each list's mirror.  O(total)."""
        at, out = span.start, []
        for ids in lists:
            self.host[at : at + len(ids)] = ids
            out.append(self.device_address + at * self.host.itemsize)
            at += len(ids)
        if at != span.end:
            raise ValueError(f"{at - span.start} ids written into a span of {span.count}")
        return out

    def host_address(self, span: Span, host_base: int) -> int:
        """The host address of the span, given the host array's base address."""
        return host_base + span.start * self.host.itemsize

    def retire(self, span: Span, event: Event) -> None:
        """Record that the launches reading ``span`` complete when ``event`` does."""
        self._inflight.append((span, event))

    def in_flight(self) -> list[Span]:
        """Spans not yet known to be finished, oldest first (for checks)."""
        return [span for span, _ in self._inflight]
