"""A router's subscriber: workers' KV-event streams into one router index.

One SUB socket per worker (so every frame is known to come from its worker) and, when
the worker has one, a DEALER socket to its replay socket.  Each frame is handed to
:meth:`~kachedb_radix.reference.router.RouterIndex.apply`; when the index reports a gap
(R-ROUTE-1) the subscriber asks the replay socket for the missing batches, applies what
comes back in order, and tells the index which batches are gone for good
(:meth:`~kachedb_radix.reference.router.RouterIndex.lost`, R-ROUTE-2): none left in the
buffer, no replay socket, or ``replay_timeout_ms`` without a frame of the answer (a long
replay that keeps coming is waited for).  A frame that is
not ``(topic, 8-byte seq, payload)`` is counted and dropped; if it carried a batch, the
next frame shows the gap.  A worker added late asks for a replay from 0 at once, so a
router that starts after its workers catches up without waiting for their next batch.

**A restart whose first batches were lost.**  A publisher that restarts numbers from 0
again, and the index clears the worker when batch 0 arrives (R-ROUTE-1).  But a SUB
socket reconnecting to a restarted publisher loses what was sent before the connection
was up, so batch 0 may never arrive, and the next ones, numbered below what the index
expects, would be ignored as repeats while the worker's cache is new.  A healthy live
stream's numbers only grow (PUB/SUB drops, never repeats), so a live batch numbered at
or below the last live one (and not 0) is that restart: the subscriber asks the replay
socket for everything from 0 and, whatever the replay has, clears the worker before
applying it (a replay that no longer has batch 0 leaves the worker stale, R-ROUTE-2).
Without a replay socket the worker is stale from that batch on.

**Nothing waits.**  A replay is a request sent and an answer read as it arrives, by the
same :meth:`EventSubscriber.poll` that reads the live streams: while a worker's replay
is out, its live batches are held (up to :data:`HELD_CAP`) and applied after the
replayed ones, and every other worker's stream goes on.  So one loop can serve lookups
between batches (:mod:`.service` runs ``poll`` on an asyncio loop, a time budget at a
time), and a dead replay socket costs its worker a timeout, not the router a stall.

**The lock.**  The index is touched only inside ``with lock:`` (the caller's, or none),
one batch at a time: socket I/O, waiting and decoding frames never hold it, so a lookup
in another thread waits at most for one batch's apply.

Cost: O(frames + their events) per poll; a replay O(batches returned).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import zmq

from kachedb_radix.reference.errors import InvalidArgumentError
from kachedb_radix.reference.router import GAP, RouterIndex

from .publisher import END_SEQ, seq_bytes

#: The subscriber's own counters per worker.
SUBSCRIBER_COUNTERS = (
    "frames",
    "bad_frames",
    "replays",
    "replayed",
    "replay_timeouts",
    "held",
    "dropped",
    "missed_restarts",
)
#: The most live batches held for one worker while its replay is out; later ones are
#: dropped (counted), and the gap they leave is asked for again.
HELD_CAP = 65_536


@dataclass
class _Replay:
    """A replay request out: from ``first``; what came back; the live batches held."""

    first: int
    deadline: float
    got: int = 0  # batches of the answer read so far (each applied as it came)
    held: list[tuple[int, bytes]] = field(default_factory=list)
    restart: bool = False  # the publisher restarted: clear before applying
    retried: bool = False  # asked again for a hole the first answer left


@dataclass
class _Feed:
    endpoint: str
    replay_endpoint: str | None
    topic: bytes
    sub: zmq.Socket[bytes]
    dealer: zmq.Socket[bytes] | None = None
    replay: _Replay | None = None
    last_live: int = -1  # the number of the last live batch read
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SUBSCRIBER_COUNTERS, 0))


class EventSubscriber:
    """Keep ``index`` up to date from the workers added.

    Args:
        index: the router index fed.
        replay_timeout_ms: how long a replay may take before its batches count as lost.
        context: the ZeroMQ context (default: the process's shared one).
        lock: held around each call into the index (None: no lock).
        inspect: called as ``inspect(worker, outcome, payload)`` after each batch is
            handed to the index (outside the lock): the router's hash check.
    """

    def __init__(
        self,
        index: RouterIndex,
        *,
        replay_timeout_ms: int = 1000,
        context: zmq.Context[zmq.Socket[bytes]] | None = None,
        lock: contextlib.AbstractContextManager[Any] | None = None,
        inspect: Callable[[Hashable, str, bytes], None] | None = None,
    ) -> None:
        self.index = index
        self.replay_timeout_ms = replay_timeout_ms
        self._context = context or zmq.Context.instance()
        self._lock: contextlib.AbstractContextManager[Any] = lock or contextlib.nullcontext()
        self._inspect = inspect
        self._feeds: dict[Hashable, _Feed] = {}
        self._by_socket: dict[zmq.Socket[bytes], tuple[Hashable, bool]] = {}  # (worker, replay?)
        self._poller = zmq.Poller()
        #: Bumped whenever the set of sockets changes (a loop watching them re-reads it).
        self.generation = 0
        #: Whether the last budgeted :meth:`poll` stopped with frames still waiting.
        self.more = False

    @property
    def context(self) -> zmq.Context[zmq.Socket[bytes]]:
        """The ZeroMQ context the sockets are made in."""
        return self._context

    def add_worker(
        self,
        worker: Hashable,
        endpoint: str,
        replay_endpoint: str | None = None,
        topic: str = "",
        *,
        wait: bool = True,
    ) -> None:
        """Subscribe to ``worker``'s publisher; with a replay endpoint, catch up from
        batch 0 at once (``wait``: before returning; else as :meth:`poll` runs). O(1)
        plus the replay.

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
                self._dealer(worker, feed)
        except zmq.ZMQError:  # a bad endpoint: nothing is left open or registered
            sub.close(linger=0)  # (the replay socket closes itself when it cannot connect)
            raise
        self._feeds[worker] = feed
        self._watch(sub, worker, False)
        if feed.dealer is not None:
            self._watch(feed.dealer, worker, True)
        if replay_endpoint is not None:
            self._ask(worker, feed, 0)
            while wait and feed.replay is not None:
                self.poll(20)

    def remove_worker(self, worker: Hashable) -> None:
        """Stop listening to ``worker`` and drop its entries from the index. O(its entries).

        Raises:
            InvalidArgumentError: ``worker`` is not subscribed to.
        """
        feed = self._feeds.pop(worker, None)
        if feed is None:
            raise InvalidArgumentError(f"worker {worker!r} is not subscribed to")
        self._unwatch(feed.sub)
        feed.sub.close(linger=0)
        self._drop_dealer(feed)
        with self._lock:
            if worker in self.index.workers():
                self.index.remove_worker(worker)

    def counts(self, worker: Hashable) -> dict[str, int]:
        """The subscriber's counters for ``worker`` (:data:`SUBSCRIBER_COUNTERS`).

        Raises:
            InvalidArgumentError: ``worker`` is not subscribed to.
        """
        return dict(self._feed(worker).counts)

    def replaying(self, worker: Hashable) -> bool:
        """Whether a replay for ``worker`` is out (it is catching up). O(1).

        Raises:
            InvalidArgumentError: ``worker`` is not subscribed to.
        """
        return self._feed(worker).replay is not None

    def sockets(self) -> list[zmq.Socket[bytes]]:
        """Every socket a frame can arrive on now (for a loop that watches their file
        descriptors; re-read when :attr:`generation` changes). O(sockets)."""
        return list(self._by_socket)

    def poll(self, timeout_ms: int = 0, *, budget_s: float | None = None) -> int:
        """Handle every frame that arrives within ``timeout_ms`` (0: those waiting now),
        and expire overdue replays; returns how many frames. With ``budget_s``, stop once
        that much time has been spent and set :attr:`more` when frames may be waiting.
        O(frames + their events)."""
        handled = 0
        started = time.perf_counter()
        self.more = False
        ready = dict(self._poller.poll(timeout_ms))
        while True:
            for sock in ready:
                if sock not in self._by_socket:
                    continue  # a replay socket dropped by an earlier frame of this round
                worker, is_replay = self._by_socket[sock]
                feed = self._feeds[worker]
                while True:
                    try:
                        frames = sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    handled += 1
                    if is_replay:
                        self._replay_frame(worker, feed, frames)
                    else:
                        self._frame(worker, feed, frames)
                    if budget_s is not None and time.perf_counter() - started > budget_s:
                        self._expire()
                        self.more = True
                        return handled
            self._expire()
            ready = dict(self._poller.poll(0))
            if not ready:
                return handled

    def close(self) -> None:
        """Close every socket. Idempotent."""
        for worker in list(self._feeds):
            feed = self._feeds.pop(worker)
            feed.sub.close(linger=0)
            if feed.dealer is not None:
                feed.dealer.close(linger=0)
        self._by_socket.clear()
        self._poller = zmq.Poller()
        self.generation += 1

    def __enter__(self) -> EventSubscriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _feed(self, worker: Hashable) -> _Feed:
        feed = self._feeds.get(worker)
        if feed is None:
            raise InvalidArgumentError(f"worker {worker!r} is not subscribed to")
        return feed

    def _watch(self, sock: zmq.Socket[bytes], worker: Hashable, is_replay: bool) -> None:
        self._by_socket[sock] = (worker, is_replay)
        self._poller.register(sock, zmq.POLLIN)
        self.generation += 1

    def _unwatch(self, sock: zmq.Socket[bytes]) -> None:
        del self._by_socket[sock]
        self._poller.unregister(sock)
        self.generation += 1

    def _expected(self, worker: Hashable) -> int:
        with self._lock:
            try:
                return self.index.expected(worker)
            except InvalidArgumentError:  # not seen yet
                return 0

    def _lost(self, worker: Hashable, resume_at: int) -> None:
        with self._lock:
            self.index.lost(worker, resume_at)

    def _apply(self, worker: Hashable, seq: int, payload: bytes) -> str:
        with self._lock:
            outcome = self.index.apply(worker, seq, payload).outcome
        if self._inspect is not None:
            self._inspect(worker, outcome, payload)
        return outcome

    def _frame(self, worker: Hashable, feed: _Feed, frames: list[bytes]) -> None:
        """A live frame: applied, or held while a replay is out, or the start of one."""
        feed.counts["frames"] += 1
        if len(frames) != 3 or len(frames[1]) != 8:
            feed.counts["bad_frames"] += 1
            return
        seq = int.from_bytes(frames[1], "big")
        restarted = 0 < seq <= feed.last_live
        feed.last_live = seq
        if restarted:
            feed.counts["missed_restarts"] += 1
            if feed.replay_endpoint is None:
                self._lost(worker, seq)
            elif feed.replay is None or not feed.replay.restart:
                # What was held belongs to the cache before the restart: dropped with it.
                self._ask(worker, feed, 0, [(seq, frames[2])], restart=True)
                return
        if feed.replay is not None:
            if len(feed.replay.held) >= HELD_CAP:
                feed.counts["dropped"] += 1  # its gap is asked for again later
                return
            feed.counts["held"] += 1
            feed.replay.held.append((seq, frames[2]))
            return
        if self._apply(worker, seq, frames[2]) == GAP:
            if feed.replay_endpoint is None:
                self._lost(worker, seq)  # nothing can fill the gap (R-ROUTE-2)
                self._apply(worker, seq, frames[2])
            else:
                self._ask(worker, feed, self._expected(worker), [(seq, frames[2])])

    def _ask(
        self,
        worker: Hashable,
        feed: _Feed,
        first: int,
        held: list[tuple[int, bytes]] | None = None,
        *,
        restart: bool = False,
        retried: bool = False,
    ) -> None:
        """Send a replay request from ``first``; ``held`` the live batches waiting on it
        (any earlier request's answer is then ignored: the dealer is new)."""
        feed.counts["replays"] += 1
        if feed.replay is not None:
            self._drop_dealer(feed)
        dealer = self._dealer(worker, feed)
        deadline = time.monotonic() + self.replay_timeout_ms / 1000
        feed.replay = _Replay(first, deadline, held=held or [], restart=restart, retried=retried)
        dealer.send_multipart((b"", seq_bytes(first)))

    def _replay_frame(self, worker: Hashable, feed: _Feed, frames: list[bytes]) -> None:
        """A frame of a replay's answer, ``(b"", topic, seq, payload)``: applied as it
        comes (so a long replay is spread over the loop's turns), a hole in it lost
        (R-ROUTE-2); at the end marker, the live batches held are applied."""
        replay = feed.replay
        if replay is None or len(frames) != 4 or len(frames[2]) != 8:
            return  # a stray or garbled frame: skipped up to the end marker
        if frames[2] == END_SEQ:
            feed.counts["replayed"] += replay.got
            feed.replay = None
            self._finish(worker, feed, True, replay.held, replay.restart, replay.retried)
            return
        replay.deadline = time.monotonic() + self.replay_timeout_ms / 1000  # it is coming
        seq = int.from_bytes(frames[2], "big")
        if replay.restart and replay.got == 0 and seq != 0:
            self._lost(worker, seq)  # the restarted publisher's batch 0 is gone
        replay.got += 1
        if seq > self._expected(worker):
            self._lost(worker, seq)  # the buffer moved on (or the answer lost a frame)
        self._apply(worker, seq, frames[3])

    def _expire(self) -> None:
        """Replays past their deadline: their missing batches are lost (R-ROUTE-2)."""
        now = time.monotonic()
        for worker, feed in list(self._feeds.items()):
            replay = feed.replay
            if replay is not None and now > replay.deadline:
                feed.counts["replay_timeouts"] += 1
                feed.replay = None
                self._drop_dealer(feed)  # late answers must not be read as the next replay's
                self._finish(worker, feed, False, replay.held, replay.restart, replay.retried)

    def _finish(
        self,
        worker: Hashable,
        feed: _Feed,
        answered: bool,
        held: list[tuple[int, bytes]],
        restart: bool = False,
        retried: bool = False,
    ) -> None:
        """After a replay (``answered``: its end marker came; else it timed out), apply
        the live batches held. A hole before one after an answer (the live stream
        resumed past the answer's end: the subscription came up late; or a batch was
        dropped on the way meanwhile) is asked for once more; a hole no replay fills is
        lost (R-ROUTE-2). A missed restart whose replay timed out clears the worker
        (as lost from the first live batch)."""
        if restart and not answered and held:
            self._lost(worker, held[0][0])
        for position, (seq, payload) in enumerate(held):
            expected = self._expected(worker)
            if answered and seq < expected:
                continue  # the replay had it: a copy, not a restart (batch 0 included)
            if seq > expected:
                if answered and not retried:
                    self._ask(worker, feed, expected, held[position:], retried=True)
                    return
                self._lost(worker, seq)
            self._apply(worker, seq, payload)

    def _dealer(self, worker: Hashable, feed: _Feed) -> zmq.Socket[bytes]:
        """The feed's replay socket, connected on first use (and after a timeout)."""
        if feed.dealer is None:
            assert feed.replay_endpoint is not None
            dealer = self._context.socket(zmq.DEALER)
            dealer.setsockopt(zmq.LINGER, 0)
            # No cap on the answer queued here: a ROUTER drops what a full peer's pipe
            # cannot take, and a replay is thousands of batches sent at once.
            dealer.setsockopt(zmq.RCVHWM, 0)
            try:
                dealer.connect(feed.replay_endpoint)
            except zmq.ZMQError:
                dealer.close(linger=0)
                raise
            feed.dealer = dealer
            if worker in self._feeds:
                self._watch(dealer, worker, True)
        return feed.dealer

    def _drop_dealer(self, feed: _Feed) -> None:
        if feed.dealer is not None:
            self._unwatch(feed.dealer)
            feed.dealer.close(linger=0)
            feed.dealer = None
