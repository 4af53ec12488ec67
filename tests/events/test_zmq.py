"""KV events over real ZeroMQ loopback sockets (R-EVENT-6, R-ROUTE-1, R-ROUTE-2): our
trees behind our publisher, vLLM's own publisher, and our subscriber and index, with
dropped batches, late joiners, restarts, a moved-on replay buffer and bad frames."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator

import msgspec
import pytest
import zmq

from kachedb_radix.reference import RadixTree
from kachedb_radix.reference.events import (
    BlockHasher,
    KVEventBatch,
    decode_batch,
    dump_hashes,
    encode_batch,
)
from kachedb_radix.reference.router import RouterIndex
from kachedb_radix.spec.router.publisher import END_SEQ, EventPublisher, seq_bytes
from kachedb_radix.spec.router.subscriber import EventSubscriber
from tests.support.vllm import require_vllm

LOOPBACK = "tcp://127.0.0.1:0"


@pytest.fixture
def context() -> Iterator[zmq.Context[zmq.Socket[bytes]]]:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)  # closes what a failed test left open, instead of waiting on it


def _until(
    condition: Callable[[], bool], subscriber: EventSubscriber, seconds: float = 5.0
) -> None:
    """Poll until ``condition`` holds (PUB/SUB connects asynchronously)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting on the sockets"
        subscriber.poll(20)


def _connected(publisher: EventPublisher, subscriber: EventSubscriber, worker: str) -> None:
    """Publish empty batches until one arrives: the subscription is then live."""
    start = (
        subscriber.index.counts(worker)["batches"] if worker in subscriber.index.workers() else 0
    )
    deadline = time.monotonic() + 5
    while (
        subscriber.index.counts(worker)["batches"] if worker in subscriber.index.workers() else 0
    ) == start:
        assert time.monotonic() < deadline
        publisher.publish(KVEventBatch(0.0, []))
        subscriber.poll(20)


def _holds(index: RouterIndex, worker: str) -> set[object]:
    return {h for h, _medium in index.holdings(worker)} if worker in index.workers() else set()


def test_trees_behind_publishers_feed_one_index(context: zmq.Context[zmq.Socket[bytes]]) -> None:
    """Three workers' trees publish over loopback; the index holds exactly each tree's
    blocks and routes a request to the worker with the longest prefix."""
    hasher = BlockHasher()
    index = RouterIndex(hasher, 4)
    trees = {f"w{i}": RadixTree(32, 4, events=hasher) for i in range(3)}
    with contextlib.ExitStack() as stack:
        publishers = {
            name: stack.enter_context(EventPublisher(LOOPBACK, LOOPBACK, context=context))
            for name in trees
        }
        subscriber = stack.enter_context(EventSubscriber(index, context=context))
        for name, pub in publishers.items():
            subscriber.add_worker(name, pub.endpoint, pub.replay_endpoint)
            _connected(pub, subscriber, name)
        trees["w0"].insert(list(range(16)))
        trees["w1"].insert(list(range(8)))
        trees["w2"].insert(list(range(16)), namespace="tenant")
        trees["w0"].evict(1)
        for name, tree in trees.items():
            for batch in tree.take_events():
                publishers[name].publish(batch)
        want = {name: set(dump_hashes(tree.dump(), hasher)) for name, tree in trees.items()}
        _until(lambda: all(_holds(index, name) == want[name] for name in trees), subscriber)
        assert index.query_tokens(list(range(16))) == {"w0": 3, "w1": 2}
        assert index.query_tokens(list(range(16)), namespace="tenant") == {"w2": 4}


def test_a_dropped_batch_is_replayed_and_nothing_is_lost(
    context: zmq.Context[zmq.Socket[bytes]],
) -> None:
    """R-ROUTE-1: batch 2 never arrives; batch 3 shows the gap; the replay fills it."""
    tree = RadixTree(32, 2, events=True)
    index = RouterIndex(block_size=2)
    with (
        EventPublisher(LOOPBACK, LOOPBACK, context=context) as pub,
        EventSubscriber(index, context=context) as sub,
    ):
        sub.add_worker("w", pub.endpoint, pub.replay_endpoint)
        _connected(pub, sub, "w")
        for tokens, send in (([1, 2, 3, 4], True), ([5, 6], False), ([7, 8], True)):
            tree.insert(tokens)
            (batch,) = tree.take_events()
            pub.publish(batch, send=send)
        _until(
            lambda: (
                _holds(index, "w") == set(dump_hashes(tree.dump(), tree.events or BlockHasher()))
            ),
            sub,
        )
        assert sub.counts("w")["replays"] >= 1 and not index.is_stale("w")
        assert index.counts("w")["gaps"] == 1 and index.counts("w")["lost"] == 0


def test_a_late_subscriber_catches_up_from_the_replay_buffer(
    context: zmq.Context[zmq.Socket[bytes]],
) -> None:
    """R-ROUTE-1: batches published before the router started come from the replay."""
    tree = RadixTree(32, 2, events=True)
    with EventPublisher(LOOPBACK, LOOPBACK, context=context) as pub:
        tree.insert([1, 2, 3, 4])
        tree.insert([1, 2, 9, 9])
        for batch in tree.take_events():
            pub.publish(batch)  # nobody listens yet
        index = RouterIndex(block_size=2)
        with EventSubscriber(index, context=context) as sub:
            sub.add_worker("w", pub.endpoint, pub.replay_endpoint)
            assert _holds(index, "w") == set(dump_hashes(tree.dump(), BlockHasher()))
            assert index.expected("w") == 2 and sub.counts("w")["replayed"] == 2


def test_a_moved_on_buffer_makes_the_worker_stale(context: zmq.Context[zmq.Socket[bytes]]) -> None:
    """R-ROUTE-2: the replay starts after the missing batches: stale, a subset, never wrong."""
    tree = RadixTree(32, 2, events=True)
    index = RouterIndex(block_size=2)
    with (
        EventPublisher(LOOPBACK, LOOPBACK, buffer_steps=1, context=context) as pub,
        EventSubscriber(index, context=context) as sub,
    ):
        sub.add_worker("w", pub.endpoint, pub.replay_endpoint)
        _connected(pub, sub, "w")
        for tokens in ([1, 2], [3, 4], [5, 6]):
            tree.insert(tokens)
            pub.publish(tree.take_events()[0], send=False)  # lost on the way
        tree.insert([7, 8])
        pub.publish(tree.take_events()[0])
        _until(lambda: index.expected("w") == pub.next_seq, sub)
        assert index.is_stale("w")
        held = _holds(index, "w")
        assert held and held < set(dump_hashes(tree.dump(), BlockHasher()))


def _lose_one_batch(pub: EventPublisher, sub: EventSubscriber, index: RouterIndex) -> None:
    """One batch numbered but never sent, then one sent: wait until the index is past both."""
    pub.publish(KVEventBatch(0.0, []), send=False)
    pub.publish(KVEventBatch(0.0, []))
    _until(lambda: index.expected("w") == pub.next_seq, sub)


def test_without_a_replay_socket_a_gap_is_a_loss(context: zmq.Context[zmq.Socket[bytes]]) -> None:
    """R-ROUTE-2: nothing can fill the gap: the worker is stale."""
    index = RouterIndex(block_size=2)
    with (
        EventPublisher(LOOPBACK, context=context) as pub,
        EventSubscriber(index, context=context) as sub,
    ):
        sub.add_worker("w", pub.endpoint)
        _connected(pub, sub, "w")  # batches sent before the subscription was up are lost too
        lost = index.counts("w")["lost"]
        _lose_one_batch(pub, sub, index)
        assert index.is_stale("w") and index.counts("w")["lost"] == lost + 1


def test_a_silent_replay_socket_times_out_into_a_loss(
    context: zmq.Context[zmq.Socket[bytes]],
) -> None:
    """R-ROUTE-2: no answer within the timeout: the missing batches are lost."""
    silent = context.socket(zmq.ROUTER)
    silent.setsockopt(zmq.LINGER, 0)
    silent.bind(LOOPBACK)
    index = RouterIndex(block_size=2)
    with (
        EventPublisher(LOOPBACK, context=context) as pub,
        EventSubscriber(index, replay_timeout_ms=100, context=context) as sub,
    ):
        sub.add_worker("w", pub.endpoint, silent.getsockopt_string(zmq.LAST_ENDPOINT))
        assert sub.counts("w")["replay_timeouts"] == 1  # the catch-up went unanswered
        _connected(pub, sub, "w")
        _lose_one_batch(pub, sub, index)
        assert index.is_stale("w") and sub.counts("w")["replay_timeouts"] == 2
    silent.close(linger=0)


def test_a_restarted_publisher_is_followed(context: zmq.Context[zmq.Socket[bytes]]) -> None:
    """R-ROUTE-1: a worker restarts (its cache empty, numbers from 0 again)."""
    index = RouterIndex(block_size=2)
    first = EventPublisher(LOOPBACK, context=context)
    endpoint = first.endpoint
    tree = RadixTree(8, 2, events=True)
    with EventSubscriber(index, context=context) as sub, contextlib.ExitStack() as stack:
        stack.callback(first.close)
        sub.add_worker("w", endpoint)
        _connected(first, sub, "w")
        tree.insert([1, 2])
        first.publish(tree.take_events()[0])
        _until(lambda: len(_holds(index, "w")) == 1, sub)
        first.close()
        again = stack.enter_context(_rebind(endpoint, context))
        fresh = RadixTree(8, 2, events=True)
        fresh.insert([3, 4])
        batch = fresh.take_events()[0]
        deadline = time.monotonic() + 5
        while index.counts("w")["restarts"] == 0:  # resend until the reconnect is up
            assert time.monotonic() < deadline
            again._next = 0
            again.publish(batch)
            sub.poll(50)
        assert _holds(index, "w") == set(dump_hashes(fresh.dump(), BlockHasher()))


def _rebind(endpoint: str, context: zmq.Context[zmq.Socket[bytes]]) -> EventPublisher:
    """A publisher on the endpoint a closed one used (ZeroMQ unbinds asynchronously)."""
    deadline = time.monotonic() + 5
    while True:
        try:
            return EventPublisher(endpoint, context=context)
        except zmq.ZMQError:
            assert time.monotonic() < deadline, f"{endpoint} stayed in use"
            time.sleep(0.05)


def test_bad_frames_are_counted_and_dropped(context: zmq.Context[zmq.Socket[bytes]]) -> None:
    index = RouterIndex(block_size=2)
    with (
        EventPublisher(LOOPBACK, context=context) as pub,
        EventSubscriber(index, context=context) as sub,
    ):
        sub.add_worker("w", pub.endpoint)
        _connected(pub, sub, "w")
        pub.send_raw(b"", b"\x00")
        pub.send_raw(b"", seq_bytes(pub.next_seq), b"not msgpack", b"extra")
        _until(lambda: sub.counts("w")["bad_frames"] == 2, sub)
        pub.send_raw(b"", seq_bytes(pub.next_seq), b"\xc1")  # a batch that cannot be decoded
        _until(lambda: index.counts("w")["malformed"] == 1, sub)
        assert index.is_stale("w")
        with pytest.raises(Exception, match="already subscribed"):
            sub.add_worker("w", pub.endpoint)
        sub.remove_worker("w")
        with pytest.raises(Exception, match="not subscribed"):
            sub.counts("w")
        with pytest.raises(Exception, match="not subscribed"):
            sub.remove_worker("w")
        assert index.workers() == []


def test_a_replay_socket_ignores_what_is_not_a_request(
    context: zmq.Context[zmq.Socket[bytes]],
) -> None:
    with EventPublisher(LOOPBACK, LOOPBACK, context=context) as pub:
        pub.publish(KVEventBatch(1.0, []))
        dealer = context.socket(zmq.DEALER)
        assert pub.replay_endpoint is not None
        dealer.connect(pub.replay_endpoint)
        dealer.send_multipart((b"", b"short"))
        dealer.send_multipart((b"", seq_bytes(0)))
        assert dealer.poll(2000)
        assert dealer.recv_multipart()[1:3] == [b"", seq_bytes(0)]
        assert dealer.recv_multipart() == [b"", b"", END_SEQ, b""]
        dealer.close(linger=0)
    with pytest.raises(Exception, match="buffer_steps"):
        EventPublisher(LOOPBACK, buffer_steps=0, context=context)
    with EventPublisher(LOOPBACK, LOOPBACK, context=context) as taken:
        with pytest.raises(zmq.ZMQError):  # the endpoint is taken: nothing is left open
            EventPublisher(taken.endpoint, context=context)
        with pytest.raises(zmq.ZMQError):
            EventPublisher(LOOPBACK, taken.endpoint, context=context)


def test_vllms_own_publisher_feeds_our_index() -> None:
    """R-EVENT-6, R-ROUTE-1: vLLM 0.33's ZmqEventPublisher (its own thread, frames and
    replay socket) sends a tree's batches as vLLM structs; our subscriber, joining after
    they were sent, replays them from vLLM's buffer, and then follows it live."""
    vllm = require_vllm()
    theirs = vllm.kv_events
    decoder = msgspec.msgpack.Decoder(theirs.KVEventBatch)
    port, replay_port = _free_port(), _free_port()
    publisher = theirs.ZmqEventPublisher(
        0, endpoint=f"tcp://*:{port}", replay_endpoint=f"tcp://*:{replay_port}"
    )
    hasher = BlockHasher()
    tree = RadixTree(4, 2, events=hasher)
    index = RouterIndex(hasher, 2)
    try:
        tree.insert([1, 2, 3, 4])
        tree.insert([5, 6, 7, 8, 9, 9])  # evicts: a removal and a store in one batch
        for batch in tree.take_events():
            publisher.publish(decoder.decode(encode_batch(batch)))
        time.sleep(0.3)  # its thread sends them before anyone listens
        endpoint, replay = f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.1:{replay_port}"
        with EventSubscriber(index) as sub:
            sub.add_worker("vllm", endpoint, replay)
            assert index.expected("vllm") == 2 and sub.counts("vllm")["replayed"] == 2
            assert _holds(index, "vllm") == set(dump_hashes(tree.dump(), hasher))
            tree.insert([1, 2, 3, 4])
            (batch,) = tree.take_events()
            publisher.publish(decoder.decode(encode_batch(batch)))
            # Sent before the subscription may be up: then the next one shows the gap.
            _until(lambda: index.expected("vllm") >= 3 or _nudge(publisher, decoder), sub)
            _until(lambda: _holds(index, "vllm") == set(dump_hashes(tree.dump(), hasher)), sub)
            assert not index.is_stale("vllm")
    finally:
        publisher.shutdown()


def _free_port() -> int:
    """A loopback port free now (vLLM's publisher binds a wildcard address by port)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _nudge(publisher: object, decoder: msgspec.msgpack.Decoder[object]) -> bool:
    """Publish an empty batch through vLLM's publisher (so a lost one shows as a gap)."""
    publisher.publish(decoder.decode(encode_batch(KVEventBatch(0.0, []))))  # type: ignore[attr-defined]
    time.sleep(0.05)
    return False


def test_our_publisher_speaks_vllms_frames(context: zmq.Context[zmq.Socket[bytes]]) -> None:
    """R-EVENT-6: a plain SUB socket reads (topic, seq, payload) and vLLM's structs decode
    the payload; the replay answers as vLLM's does."""
    vllm = require_vllm()
    decoder = msgspec.msgpack.Decoder(vllm.kv_events.KVEventBatch)
    tree = RadixTree(8, 2, events=True)
    tree.insert([1, 2, 3, 4], namespace="t")
    (batch,) = tree.take_events()
    with EventPublisher(LOOPBACK, LOOPBACK, topic="kv", context=context) as pub:
        sub = context.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"kv")
        sub.connect(pub.endpoint)
        deadline = time.monotonic() + 5
        while not sub.poll(20):
            assert time.monotonic() < deadline
            pub.publish(batch)
        topic, seq, payload = sub.recv_multipart()
        assert topic == b"kv" and int.from_bytes(seq, "big") >= 0
        decoded = decoder.decode(payload)
        assert decoded.events[0].block_hashes == batch.events[0].block_hashes  # type: ignore[union-attr]
        assert decode_batch(payload) == batch
        sub.close(linger=0)


def test_a_worker_removed_before_its_first_batch_and_a_garbled_replay(
    context: zmq.Context[zmq.Socket[bytes]],
) -> None:
    """A replay answer with the wrong frames is skipped up to the end marker; a worker
    the index never heard of is removed from the subscriber alone."""
    fake = context.socket(zmq.ROUTER)
    fake.setsockopt(zmq.LINGER, 0)
    fake.bind(LOOPBACK)
    index = RouterIndex(block_size=2)
    with contextlib.closing(fake), EventPublisher(LOOPBACK, context=context) as pub:
        sub = EventSubscriber(index, replay_timeout_ms=3000, context=context)

        def answer() -> None:
            client, _empty, _start = fake.recv_multipart()
            fake.send_multipart((client, b"", b"garbled"))
            fake.send_multipart((client, b"", b"", END_SEQ, b""))

        helper = threading.Thread(target=answer)
        helper.start()
        sub.add_worker("w", pub.endpoint, fake.getsockopt_string(zmq.LAST_ENDPOINT))
        helper.join()
        assert sub.counts("w")["replayed"] == 0 and index.workers() == []
        sub.remove_worker("w")
        sub.close()


def test_a_restart_whose_first_batches_were_lost_is_caught(
    context: zmq.Context[zmq.Socket[bytes]],
) -> None:
    """A restarted publisher's batch 0 never arrives (the SUB socket reconnected late):
    its next batches, numbered below what the index expects, are not ignored as repeats.
    With a replay socket the worker is exact again; without one it is stale (a subset)."""
    for with_replay in (True, False):
        _restart_with_batch_0_lost(context, with_replay)


def _restart_with_batch_0_lost(context: zmq.Context[zmq.Socket[bytes]], with_replay: bool) -> None:
    hasher = BlockHasher()
    index = RouterIndex(hasher, 2)
    old = RadixTree(8, 2, events=hasher)
    with EventSubscriber(index, context=context) as sub:
        first = EventPublisher(LOOPBACK, LOOPBACK if with_replay else None, context=context)
        endpoints = first.endpoint, first.replay_endpoint
        sub.add_worker("w", *endpoints)
        _connected(first, sub, "w")
        for tokens in ([1, 2], [3, 4], [5, 6]):
            old.insert(tokens)
            first.publish(old.take_events()[0])
        _until(lambda: len(_holds(index, "w")) == 3, sub)
        first.close()
        again = _rebind(endpoints[0], context) if not with_replay else None
        if with_replay:
            again = _rebind_with_replay(endpoints, context)
        assert again is not None
        fresh = RadixTree(8, 2, events=hasher)
        fresh.insert([7, 8])
        again.publish(fresh.take_events()[0], send=False)  # batch 0: lost
        fresh.insert([9, 9])
        batch = fresh.take_events()[0]
        deadline = time.monotonic() + 5
        while sub.counts("w")["missed_restarts"] == 0:  # until the reconnect is up
            assert time.monotonic() < deadline
            again._next = 1
            again.publish(batch)
            sub.poll(50)
        want = set(dump_hashes(fresh.dump(), hasher))
        _until(lambda: bool(_holds(index, "w")) and not sub.replaying("w"), sub)
        if with_replay:
            assert _holds(index, "w") == want and not index.is_stale("w")
        else:
            assert _holds(index, "w") < want and index.is_stale("w")
        again.close()


def _rebind_with_replay(
    endpoints: tuple[str, str | None], context: zmq.Context[zmq.Socket[bytes]]
) -> EventPublisher:
    deadline = time.monotonic() + 5
    while True:
        try:
            return EventPublisher(*endpoints, context=context)
        except zmq.ZMQError:
            assert time.monotonic() < deadline, f"{endpoints} stayed in use"
            time.sleep(0.05)


def test_live_batches_held_during_a_replay_are_applied_after_it(
    context: zmq.Context[zmq.Socket[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a replay is out, the worker's live batches wait (and, over the cap, are
    dropped and asked for again); a hole among them is asked for again; nothing else
    of the stream waits."""
    from kachedb_radix.spec.router import subscriber as subscriber_module

    monkeypatch.setattr(subscriber_module, "HELD_CAP", 2)
    fake = context.socket(zmq.ROUTER)
    fake.setsockopt(zmq.LINGER, 0)
    fake.bind(LOOPBACK)
    index = RouterIndex(block_size=2)
    with (
        contextlib.closing(fake),
        EventPublisher(LOOPBACK, LOOPBACK, context=context) as pub,
        EventSubscriber(index, context=context, replay_timeout_ms=10_000) as sub,
    ):
        sub.add_worker("w", pub.endpoint, fake.getsockopt_string(zmq.LAST_ENDPOINT), wait=False)
        assert sub.replaying("w")
        client, _, start = fake.recv_multipart()  # the catch-up request: not answered yet
        assert int.from_bytes(start, "big") == 0
        deadline = time.monotonic() + 5
        while sub.counts("w")["held"] == 0:  # live batches arrive while it is out
            assert time.monotonic() < deadline
            pub.publish(KVEventBatch(0.0, []))
            sub.poll(20)
        for _ in range(3):
            pub.publish(KVEventBatch(0.0, []))
        _until(lambda: sub.counts("w")["dropped"] >= 1, sub)
        assert index.workers() == []  # nothing applied while the replay is out
        # The replay answers with every batch there is: the held ones are repeats then.
        for seq, payload in pub._buffer:
            fake.send_multipart((client, b"", b"", seq_bytes(seq), payload))
        fake.send_multipart((client, b"", b"", END_SEQ, b""))
        _until(lambda: not sub.replaying("w") and index.expected("w") == pub.next_seq, sub)
        assert not index.is_stale("w") and index.counts("w")["lost"] == 0


def test_a_missed_restart_while_a_replay_is_out_and_a_restart_replay_without_batch_0(
    context: zmq.Context[zmq.Socket[bytes]],
) -> None:
    """A live batch numbered below the last live one arrives while a catch-up replay is
    out: that replay is dropped (its socket too, even with answers waiting in the same
    round) and everything from 0 is asked for; the replay no longer has batch 0 (a small
    buffer): the worker is cleared and stale from the first batch it has."""
    fake = context.socket(zmq.ROUTER)
    fake.setsockopt(zmq.LINGER, 0)
    fake.bind(LOOPBACK)
    index = RouterIndex(block_size=2)
    with (
        contextlib.closing(fake),
        EventPublisher(LOOPBACK, context=context) as pub,
        EventSubscriber(index, context=context, replay_timeout_ms=10_000) as sub,
    ):
        sub.add_worker("w", pub.endpoint, fake.getsockopt_string(zmq.LAST_ENDPOINT), wait=False)
        client, _, _ = fake.recv_multipart()
        deadline = time.monotonic() + 5
        while sub.counts("w")["held"] == 0:
            assert time.monotonic() < deadline
            pub._next = 5
            pub.publish(KVEventBatch(0.0, []))
            sub.poll(20)
        fake.send_multipart((client, b"", b"", seq_bytes(5), encode_batch(KVEventBatch(0.0, []))))
        pub._next = 3  # below the last live one: the publisher restarted, batch 0 was lost
        pub.publish(KVEventBatch(0.0, []))
        time.sleep(0.2)  # both the replay's answer and the live batch are waiting now
        sub.poll(0)
        assert sub.counts("w")["missed_restarts"] == 1 and sub.counts("w")["replays"] == 2
        client, _, start = fake.recv_multipart()  # the new dealer asks from 0
        assert int.from_bytes(start, "big") == 0
        for seq in (2, 3):  # the restarted publisher's buffer starts at 2
            payload = encode_batch(KVEventBatch(0.0, []))
            fake.send_multipart((client, b"", b"", seq_bytes(seq), payload))
        fake.send_multipart((client, b"", b"", END_SEQ, b""))
        _until(lambda: not sub.replaying("w"), sub)
        assert index.expected("w") == 4 and index.is_stale("w")


def test_a_hole_among_the_held_batches_is_asked_for_again(
    context: zmq.Context[zmq.Socket[bytes]],
) -> None:
    fake = context.socket(zmq.ROUTER)
    fake.setsockopt(zmq.LINGER, 0)
    fake.bind(LOOPBACK)
    index = RouterIndex(block_size=2)
    empty = encode_batch(KVEventBatch(0.0, []))
    with (
        contextlib.closing(fake),
        EventPublisher(LOOPBACK, context=context) as pub,
        EventSubscriber(index, context=context, replay_timeout_ms=10_000) as sub,
    ):
        sub.add_worker("w", pub.endpoint, fake.getsockopt_string(zmq.LAST_ENDPOINT), wait=False)
        client, _, _ = fake.recv_multipart()
        deadline = time.monotonic() + 5
        while sub.counts("w")["held"] == 0:  # batch 10 held
            assert time.monotonic() < deadline
            pub._next = 10
            pub.publish(KVEventBatch(0.0, []))
            sub.poll(20)
        pub._next = 12  # 11 lost on the way
        pub.publish(KVEventBatch(0.0, []))
        _until(lambda: sub.counts("w")["held"] >= 2, sub)
        for seq in range(11):  # the catch-up: 0..10
            fake.send_multipart((client, b"", b"", seq_bytes(seq), empty))
        fake.send_multipart((client, b"", b"", END_SEQ, b""))
        _until(lambda: sub.counts("w")["replays"] == 2, sub)
        client, _, start = fake.recv_multipart()
        assert int.from_bytes(start, "big") == 11  # the hole among the held ones
        for seq in (11, 12):
            fake.send_multipart((client, b"", b"", seq_bytes(seq), empty))
        fake.send_multipart((client, b"", b"", END_SEQ, b""))
        _until(lambda: not sub.replaying("w"), sub)
        assert index.expected("w") == 13 and not index.is_stale("w")
