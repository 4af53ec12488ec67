"""A router's subscriber: workers' KV-event streams into one router index.

One SUB socket per worker (so every frame is known to come from its worker) and, when
the worker has one, a DEALER socket to its replay socket.  Each frame is handed to
:meth:`~kachedb_radix.reference.router.RouterIndex.apply`; when the index reports a gap
(R-ROUTE-1) the subscriber asks the replay socket for the missing batches, applies what
comes back in order, and tells the index which batches are gone for good
(:meth:`~kachedb_radix.reference.router.RouterIndex.lost`, R-ROUTE-2): none left in the
buffer, no replay socket, or no answer within ``replay_timeout_ms``.  A frame that is
not ``(topic, 8-byte seq, payload)`` is counted and dropped; if it carried a batch, the
next frame shows the gap.  A worker added late asks for a replay from 0 at once, so a
router that starts after its workers catches up without waiting for their next batch.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

import zmq

from kachedb_radix.reference.errors import InvalidArgumentError
from kachedb_radix.reference.router import GAP, RouterIndex

from .publisher import END_SEQ, seq_bytes

#: The subscriber's own counters per worker.
SUBSCRIBER_COUNTERS = ("frames", "bad_frames", "replays", "replayed", "replay_timeouts")


@dataclass
class _Feed:
    endpoint: str
    replay_endpoint: str | None
    topic: bytes
    sub: zmq.Socket[bytes]
    dealer: zmq.Socket[bytes] | None = None
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SUBSCRIBER_COUNTERS, 0))


class EventSubscriber:
    """Keep ``index`` up to date from the workers added.

    Args:
        index: the router index fed.
        replay_timeout_ms: how long a replay may take before its batches count as lost.
        context: the ZeroMQ context (default: the process's shared one).
    """

    def __init__(
        self,
        index: RouterIndex,
        *,
        replay_timeout_ms: int = 1000,
        context: zmq.Context[zmq.Socket[bytes]] | None = None,
    ) -> None:
        self.index = index
        self.replay_timeout_ms = replay_timeout_ms
        self._context = context or zmq.Context.instance()
        self._feeds: dict[Hashable, _Feed] = {}
        self._by_socket: dict[zmq.Socket[bytes], Hashable] = {}
        self._poller = zmq.Poller()

    def add_worker(
        self, worker: Hashable, endpoint: str, replay_endpoint: str | None = None, topic: str = ""
    ) -> None:
        """Subscribe to ``worker``'s publisher; with a replay endpoint, catch up from
        batch 0 at once. O(1) plus the replay.

        Raises:
            InvalidArgumentError: ``worker`` is already subscribed to.
            zmq.ZMQError: an endpoint ZeroMQ cannot connect to (nothing is kept).
        """
        if worker in self._feeds:
            raise InvalidArgumentError(f"worker {worker!r} is already subscribed to")
        sub = self._context.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SUBSCRIBE, topic.encode("utf-8"))
        feed = _Feed(endpoint, replay_endpoint, topic.encode("utf-8"), sub)
        try:
            sub.connect(endpoint)
            if replay_endpoint is not None:
                self._dealer(feed)
        except zmq.ZMQError:  # a bad endpoint: nothing is left open or registered
            sub.close(linger=0)  # (the replay socket closes itself when it cannot connect)
            raise
        self._feeds[worker] = feed
        self._by_socket[sub] = worker
        self._poller.register(sub, zmq.POLLIN)
        if replay_endpoint is not None:
            self._replay(worker, feed, 0, None)

    def remove_worker(self, worker: Hashable) -> None:
        """Stop listening to ``worker`` and drop its entries from the index. O(its entries).

        Raises:
            InvalidArgumentError: ``worker`` is not subscribed to.
        """
        feed = self._feeds.pop(worker, None)
        if feed is None:
            raise InvalidArgumentError(f"worker {worker!r} is not subscribed to")
        self._poller.unregister(feed.sub)
        del self._by_socket[feed.sub]
        feed.sub.close(linger=0)
        if feed.dealer is not None:
            feed.dealer.close(linger=0)
        if worker in self.index.workers():
            self.index.remove_worker(worker)

    def counts(self, worker: Hashable) -> dict[str, int]:
        """The subscriber's counters for ``worker`` (:data:`SUBSCRIBER_COUNTERS`).

        Raises:
            InvalidArgumentError: ``worker`` is not subscribed to.
        """
        feed = self._feeds.get(worker)
        if feed is None:
            raise InvalidArgumentError(f"worker {worker!r} is not subscribed to")
        return dict(feed.counts)

    def poll(self, timeout_ms: int = 0) -> int:
        """Handle every frame that arrives within ``timeout_ms`` (0: those waiting now);
        returns how many. O(frames + their events)."""
        handled = 0
        ready = dict(self._poller.poll(timeout_ms))
        while ready:
            for sock in ready:
                worker = self._by_socket[sock]
                while True:
                    try:
                        frames = sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._frame(worker, self._feeds[worker], frames)
                    handled += 1
            ready = dict(self._poller.poll(0))
        return handled

    def close(self) -> None:
        """Close every socket. Idempotent."""
        for worker in list(self._feeds):
            feed = self._feeds.pop(worker)
            feed.sub.close(linger=0)
            if feed.dealer is not None:
                feed.dealer.close(linger=0)
        self._by_socket.clear()

    def __enter__(self) -> EventSubscriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _frame(self, worker: Hashable, feed: _Feed, frames: list[bytes]) -> None:
        feed.counts["frames"] += 1
        if len(frames) != 3 or len(frames[1]) != 8:
            feed.counts["bad_frames"] += 1
            return
        seq = int.from_bytes(frames[1], "big")
        applied = self.index.apply(worker, seq, frames[2])
        if applied.outcome == GAP:
            assert applied.missing is not None
            self._replay(worker, feed, applied.missing[0], (seq, frames[2]))

    def _replay(
        self, worker: Hashable, feed: _Feed, first: int, live: tuple[int, bytes] | None
    ) -> None:
        """Fill the gap from batch ``first`` from the replay socket, then apply ``live``
        (the batch that showed the gap, None when catching up): a hole the replay cannot
        fill is lost (R-ROUTE-2)."""
        got = self._ask_replay(feed, first) if feed.replay_endpoint is not None else None
        if got is None and live is None:
            return  # nothing to catch up with yet: the next live batch shows any gap
        for seq, payload in [*(got or ()), *([live] if live is not None else [])]:
            known = worker in self.index.workers()
            if seq > (self.index.expected(worker) if known else 0):
                self.index.lost(worker, seq)
            self.index.apply(worker, seq, payload)

    def _dealer(self, feed: _Feed) -> zmq.Socket[bytes]:
        """The feed's replay socket, connected on first use (and after a timeout)."""
        if feed.dealer is None:
            assert feed.replay_endpoint is not None
            dealer = self._context.socket(zmq.DEALER)
            dealer.setsockopt(zmq.LINGER, 0)
            try:
                dealer.connect(feed.replay_endpoint)
            except zmq.ZMQError:
                dealer.close(linger=0)
                raise
            feed.dealer = dealer
        return feed.dealer

    def _ask_replay(self, feed: _Feed, first: int) -> list[tuple[int, bytes]] | None:
        feed.counts["replays"] += 1
        dealer = self._dealer(feed)
        dealer.send_multipart((b"", seq_bytes(first)))
        got: list[tuple[int, bytes]] = []
        while True:
            if not dealer.poll(self.replay_timeout_ms):
                feed.counts["replay_timeouts"] += 1
                dealer.close(linger=0)  # late answers must not be read as the next replay's
                feed.dealer = None
                return None
            frames = dealer.recv_multipart()  # (b"", topic, seq, payload)
            if len(frames) != 4 or len(frames[2]) != 8:
                continue
            if frames[2] == END_SEQ:
                feed.counts["replayed"] += len(got)
                return got
            got.append((int.from_bytes(frames[2], "big"), frames[3]))
