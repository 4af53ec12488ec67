"""A worker's KV-event publisher on vLLM's wire (R-EVENT-6, R-ROUTE-1).

Frames, as vLLM 0.33's ``ZmqEventPublisher`` sends them: on a PUB socket each batch is
one multipart message ``(topic, seq, payload)``, ``seq`` the batch's number as 8 bytes
big-endian (0, 1, 2, ... from the publisher's start) and ``payload`` the msgpack
``KVEventBatch``.  A ROUTER *replay* socket answers a request ``(b"", start)`` (a
DEALER's empty delimiter, ``start`` 8 bytes big-endian) with every buffered batch
numbered ``start`` or later, each ``(b"", topic, seq, payload)``, then the end marker
``(b"", b"", -1, b"")`` (``-1`` as 8 signed bytes).  The buffer keeps the last
``buffer_steps`` batches: older ones are gone, and a subscriber that needs them must
treat them as lost (R-ROUTE-2).

The replay socket is served by a thread of its own (ZeroMQ sockets are used by one
thread each; the buffer is shared under a lock); :meth:`EventPublisher.publish` sends
from the caller's thread.

High-water marks, as vLLM 0.33's publisher sets them: a ZeroMQ socket drops what its
peer's queue cannot take, so the PUB socket queues :data:`PUB_HWM` batches for a slow
subscriber, and the replay socket room for a whole buffer twice over (it acknowledges
reads only every half-queue), so that a full replay and its end marker always fit.
"""

from __future__ import annotations

import threading
from collections import deque

import zmq

from kachedb_radix.reference.errors import InvalidArgumentError
from kachedb_radix.reference.events import KVEventBatch, encode_batch

#: Batches the PUB socket queues for a subscriber that reads slowly.
PUB_HWM = 100_000

#: The replay's end marker: -1 as 8 signed big-endian bytes.
END_SEQ = (-1).to_bytes(8, "big", signed=True)


def seq_bytes(seq: int) -> bytes:
    """A sequence number as the wire carries it. O(1)."""
    return seq.to_bytes(8, "big")


def _bound(
    context: zmq.Context[zmq.Socket[bytes]], kind: int, endpoint: str, hwm: int
) -> zmq.Socket[bytes]:
    """A socket of ``kind`` bound to ``endpoint``, queueing ``hwm`` messages a peer;
    closed again if the bind fails."""
    sock = context.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, hwm)
    try:
        sock.bind(endpoint)
    except zmq.ZMQError:
        sock.close(linger=0)
        raise
    return sock


class EventPublisher:
    """Publish batches on ``endpoint`` and serve replays on ``replay_endpoint``.

    Args:
        endpoint: where the PUB socket binds (``tcp://127.0.0.1:0`` picks a port; the
            bound address is :attr:`endpoint` afterwards).
        replay_endpoint: where the ROUTER replay socket binds, or None for none.
        buffer_steps: how many recent batches a replay can return (>= 1).
        topic: the first frame of every message.
        context: the ZeroMQ context (default: the process's shared one).

    Raises:
        InvalidArgumentError: ``buffer_steps`` < 1.
        zmq.ZMQError: an endpoint cannot be bound.
    """

    def __init__(
        self,
        endpoint: str,
        replay_endpoint: str | None = None,
        *,
        buffer_steps: int = 10_000,
        topic: str = "",
        context: zmq.Context[zmq.Socket[bytes]] | None = None,
    ) -> None:
        if isinstance(buffer_steps, bool) or not isinstance(buffer_steps, int) or buffer_steps < 1:
            raise InvalidArgumentError(f"buffer_steps must be an int >= 1, got {buffer_steps!r}")
        self._context = context or zmq.Context.instance()
        self._topic = topic.encode("utf-8")
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=buffer_steps)
        self._lock = threading.Lock()
        self._next = 0
        self._pub = _bound(self._context, zmq.PUB, endpoint, PUB_HWM)
        self.endpoint: str = self._pub.getsockopt_string(zmq.LAST_ENDPOINT)
        self.replay_endpoint: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if replay_endpoint is not None:
            try:
                replay = _bound(self._context, zmq.ROUTER, replay_endpoint, 2 * (buffer_steps + 1))
            except zmq.ZMQError:
                self._pub.close(linger=0)
                raise
            self.replay_endpoint = replay.getsockopt_string(zmq.LAST_ENDPOINT)
            self._thread = threading.Thread(
                target=self._serve_replays, args=(replay,), name="kv-replay", daemon=True
            )
            self._thread.start()

    @property
    def next_seq(self) -> int:
        """The number the next batch will have."""
        return self._next

    def publish(self, batch: KVEventBatch, *, send: bool = True) -> int:
        """Number ``batch``, keep it for replays and send it; returns its number. O(size).

        ``send=False`` keeps and numbers it without sending: a batch lost on the way, as
        a test or a fault injector needs one.
        """
        payload = encode_batch(batch)
        with self._lock:
            seq = self._next
            self._next += 1
            self._buffer.append((seq, payload))
        if send:
            self._pub.send_multipart((self._topic, seq_bytes(seq), payload))
        return seq

    def send_raw(self, *frames: bytes) -> None:
        """Send arbitrary frames on the PUB socket (malformed input for tests). O(size)."""
        self._pub.send_multipart(frames)

    def _serve_replays(self, replay: zmq.Socket[bytes]) -> None:
        poller = zmq.Poller()
        poller.register(replay, zmq.POLLIN)
        try:
            while not self._stop.is_set():
                if not dict(poller.poll(50)):
                    continue
                frames = replay.recv_multipart()
                if len(frames) != 3 or len(frames[2]) != 8:
                    continue  # not a replay request: ignored, as vLLM's publisher does
                client, _empty, start = frames
                first = int.from_bytes(start, "big")
                with self._lock:
                    wanted = [(seq, payload) for seq, payload in self._buffer if seq >= first]
                for seq, payload in wanted:
                    replay.send_multipart((client, b"", self._topic, seq_bytes(seq), payload))
                replay.send_multipart((client, b"", b"", END_SEQ, b""))
        finally:
            replay.close(linger=0)

    def close(self) -> None:
        """Stop the replay thread and close the sockets. Idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._pub.close(linger=0)

    def __enter__(self) -> EventPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
