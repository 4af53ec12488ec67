"""Issue 33's end-to-end check: ``kachedb-radix route`` at its defaults, fed by vLLM
0.33.0's own block pool through vLLM's own ZeroMQ publisher on loopback, answers the
depths vLLM's own lookup gives -- salted and unsalted, after evictions, with duplicate
copies of a block (R-ROUTE-4, R-ROUTE-5, R-EVENT-6).

vLLM's side is its code from the pinned wheel (:class:`~kachedb_radix.spec.peers.vllm.
VllmWorker`): its ``BlockPool`` and ``FullAttentionManager`` driven as its scheduler
drives them, its request block hasher at its defaults (``sha256``, no
``PYTHONHASHSEED``, block size 16, int event hashes), the events its pool queues
(``take_events``) published per step by its ``ZmqEventPublisher``. The router is the
real command in a process of its own (``route --worker vllm=PUB,REPLAY``, nothing else
but ``--plain``, which only sets how its table prints), asked over HTTP.

What is compared, after every phase and for every probe prompt: the router's matched
depth (``POST /route``'s ``depths``) against the blocks vLLM's
``find_longest_cache_hit`` finds among the prompt's whole blocks (``max_length`` the
prompt's length): what the worker holds. The scheduler reuses at most
``len(prompt) - 1`` tokens of it (the ``len - 1`` cap, which makes the duplicates);
that hit is ``min(depth, (len - 1) // 16)``, checked too.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kachedb_radix.spec.peers.vllm import VllmWorker
from tests.support.vllm import require_vllm

B = 16  # vLLM's default block size, and the vllm preset's


def _free_port() -> int:
    """A loopback port free now (vLLM's publisher binds a wildcard address by port)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _tokens(first: int, blocks: int, tail: int = 0) -> list[int]:
    """``blocks`` whole blocks and ``tail`` more tokens, counting up from ``first``."""
    return list(range(first, first + blocks * B + tail))


class _Route:
    """The ``route`` command in a process of its own, and its HTTP API."""

    def __init__(self, endpoint: str, replay: str, options: tuple[str, ...]) -> None:
        command = [sys.executable, "-m", "kachedb_radix.spec", "route", "--plain", *options,
                   "--worker", f"vllm={endpoint},{replay}"]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if "API on http://127.0.0.1:" not in line:
            raise AssertionError(line + self.process.communicate(timeout=30)[1])
        self.port = int(line.split("http://127.0.0.1:")[1].split()[0])

    def ask(self, method: str, path: str, body: object = None) -> Any:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            data = None if body is None else json.dumps(body)
            connection.request(method, path, data, {"Content-Type": "application/json"})
            response = connection.getresponse()
            assert response.status == 200, response.read()
            return json.loads(response.read())
        finally:
            connection.close()

    def depth(self, tokens: list[int], salt: str | None) -> int:
        decision = self.ask("POST", "/route", {"tokens": tokens, "namespace": salt})
        depth: int = decision["depths"].get("vllm", 0)
        return depth

    def expected(self) -> int:
        (row,) = self.ask("GET", "/workers")
        assert row["hashes"]["state"] != "mismatch", row["hashes"]
        expected: int = row["expected"]
        return expected

    def stop(self) -> tuple[str, str]:
        self.process.send_signal(signal.SIGTERM)
        return self.process.communicate(timeout=30)


class _Feed:
    """vLLM's publisher, with the count of batches it numbered."""

    def __init__(self, worker: VllmWorker) -> None:
        self.worker = worker
        self.port, self.replay_port = _free_port(), _free_port()
        self.publisher = worker.loaded.vllm.kv_events.ZmqEventPublisher(
            0,
            endpoint=f"tcp://*:{self.port}",  # vLLM binds only a wildcard (else connects)
            replay_endpoint=f"tcp://127.0.0.1:{self.replay_port}",
        )
        self.published = 0
        self.events: list[Any] = []

    def step(self) -> None:
        """Publish what the pool queued in this step, as vLLM's scheduler does."""
        batch = self.worker.take_batch()
        if batch is not None:
            self.events.extend(batch.events)
            self.publisher.publish(batch)
            self.published += 1

    def nudge(self) -> None:
        """An empty batch (vLLM's publisher numbers it): a live batch sent before the
        subscription came up then shows as a gap, which the router replays."""
        kv_events = self.worker.loaded.vllm.kv_events
        self.publisher.publish(kv_events.KVEventBatch(ts=time.time(), events=[]))
        self.published += 1


@pytest.fixture
def wired(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[VllmWorker, _Feed, list[_Route]]]:
    require_vllm()
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)  # vLLM's default root seed
    worker = VllmWorker(num_blocks=13, block_size=B)  # 12 blocks and vLLM's null block
    feed = _Feed(worker)
    routes: list[_Route] = []
    try:
        yield worker, feed, routes
    finally:
        for route in routes:
            if route.process.poll() is None:
                route.process.kill()
                route.process.communicate()
        feed.publisher.shutdown()


def _caught_up(route: _Route, feed: _Feed) -> None:
    deadline = time.monotonic() + 15
    quiet = time.monotonic()
    while route.expected() != feed.published:
        assert time.monotonic() < deadline, "the router did not catch up"
        time.sleep(0.02)
        if time.monotonic() - quiet > 0.5:
            feed.nudge()
            quiet = time.monotonic()


def _agree(
    route: _Route, feed: _Feed, probes: dict[str, tuple[list[int], str | None]]
) -> dict[str, int]:
    """Once the router has every batch published: each probe's depth, the router's
    equal to vLLM's (pytest prints the probes that differ); vLLM's depths, by probe."""
    _caught_up(route, feed)
    worker = feed.worker
    theirs = {name: worker.hit(tokens, salt) for name, (tokens, salt) in probes.items()}
    ours = {name: route.depth(tokens, salt) for name, (tokens, salt) in probes.items()}
    assert ours == theirs
    for name, (tokens, salt) in probes.items():  # the scheduler's reuse under its cap
        assert worker.hit(tokens, salt, len(tokens) - 1) == min(ours[name], (len(tokens) - 1) // B)
    return theirs


def _removed(events: list[Any], kv_events: Any) -> list[int]:
    return [h for e in events if isinstance(e, kv_events.BlockRemoved) for h in e.block_hashes]


def _stored(events: list[Any], kv_events: Any) -> list[int]:
    return [h for e in events if isinstance(e, kv_events.BlockStored) for h in e.block_hashes]


@pytest.mark.parametrize(
    "options", [(), ("--impl", "reference")], ids=["default twin", "reference twin"]
)
def test_route_at_its_defaults_answers_vllms_own_depths(
    wired: tuple[VllmWorker, _Feed, list[_Route]], options: tuple[str, ...]
) -> None:
    """The five phases below, each followed by :func:`_agree` over every probe."""
    worker, feed, routes = wired
    kv_events = worker.loaded.vllm.kv_events
    prompt = _tokens(0, 3, tail=5)  # three whole blocks: the cap never bites
    twice = _tokens(1000, 2)  # exactly two blocks: the cap recomputes the second
    again = _tokens(3000, 2)  # the same, its old copy first in the free queue
    probes = {
        "unsalted": (prompt, None),
        "empty salt": (prompt, ""),
        "salted": (prompt, "tenant-a"),
        "other salt": (prompt, "tenant-b"),
        "twice": (twice, None),
        "again": (again, None),
        "fresh": (_tokens(5000, 4), None),
    }

    def external(tokens: list[int], block: int) -> int:  # vLLM's int event hash
        digest = worker.hashes(tokens)[block]
        return int.from_bytes(digest, "big") & (2**64 - 1)

    # Phase 1, stores: one prompt unsalted and salted; the empty salt is no salt (the
    # whole prompt hits). All before the router starts: it replays vLLM's buffer.
    assert worker.admit("a", prompt) == 0
    feed.step()
    assert worker.admit("s", prompt, "tenant-a") == 0
    feed.step()
    assert worker.admit("e", prompt, "") == 3
    feed.step()
    for request in ("a", "s", "e"):
        worker.finish(request)
        feed.step()
    endpoints = f"tcp://127.0.0.1:{feed.port}", f"tcp://127.0.0.1:{feed.replay_port}"
    routes.append(_Route(*endpoints, options))
    route = routes[0]
    depths = _agree(route, feed, probes)
    assert depths == dict.fromkeys(probes, 0) | {"unsalted": 3, "empty salt": 3, "salted": 3}

    # Phase 2, evictions: a request takes every empty free block and two more. The
    # free queue is LRU, each request's blocks freed tail first, the salted prompt's
    # before the unsalted one's (reused last): its last two blocks go.
    evictor = _tokens(9000, worker.eviction_order().count(None) + 2)
    assert worker.admit("f", evictor) == 0
    feed.step()
    assert len(_removed(feed.events, kv_events)) == 2
    depths = _agree(route, feed, probes | {"evictor": (evictor, None)})
    assert (depths["salted"], depths["unsalted"]) == (1, 3)
    worker.finish("f")
    feed.step()

    # Phase 3, a duplicate: a prompt of exactly two blocks, then again. Under the cap
    # the second reuses one block and caches the other afresh in the block at the
    # free queue's head: two copies under one hash, each announced by a BlockStored.
    assert worker.admit("t1", twice) == 0
    feed.step()
    worker.finish("t1")
    feed.step()
    assert worker.admit("t2", twice) == 1
    feed.step()
    worker.finish("t2")
    feed.step()
    assert worker.copies(twice, None, 1) == 2
    assert _stored(feed.events, kv_events).count(external(twice, 1)) == 2
    assert _agree(route, feed, probes)["twice"] == 2

    # Phase 4, one copy evicted: a request takes free blocks up to the first copy.
    # vLLM sends its BlockRemoved and still hits on the other copy; so must the router.
    order = worker.eviction_order()
    first_copy = order.index(worker.hashes(twice)[1])
    assert order.count(order[first_copy]) == 2  # the other copy is freed later
    before = len(feed.events)
    evictor = _tokens(20000, first_copy + 1)
    assert worker.admit("g", evictor) == 0
    feed.step()
    assert external(twice, 1) in _removed(feed.events[before:], kv_events)
    assert worker.copies(twice, None, 1) == 1
    assert _agree(route, feed, probes | {"evictor": (evictor, None)})["twice"] == 2
    worker.finish("g")
    feed.step()

    # Phase 5, the cap's other outcome: when the old copy of the recomputed block is
    # the free queue's head, vLLM evicts it and caches the same block again, a
    # BlockRemoved then a BlockStored of one hash in one step.
    assert worker.admit("x1", again) == 0
    feed.step()
    worker.finish("x1")
    feed.step()
    head = worker.eviction_order().index(worker.hashes(again)[1])
    occupier = _tokens(40000, head)
    assert worker.admit("o", occupier) == 0  # holds every block before it
    feed.step()
    before = len(feed.events)
    assert worker.admit("x2", again) == 1
    feed.step()
    step = feed.events[before:]
    assert _removed(step, kv_events) == [external(again, 1)] == _stored(step, kv_events)
    assert worker.copies(again, None, 1) == 1
    assert _agree(route, feed, probes | {"occupier": (occupier, None)})["again"] == 2
    (row,) = route.ask("GET", "/workers")  # checked the hashes of vLLM's stores: its own
    assert row["hashes"]["state"] == "ok" and not row["stale"] and row["index"]["lost"] == 0
    assert route.ask("GET", "/health")["ok"]
    out, err = route.stop()
    assert route.process.returncode == 0 and "MISMATCH" not in out and "Traceback" not in err


def test_a_full_report_adds_no_copy(
    wired: tuple[VllmWorker, _Feed, list[_Route]],
) -> None:
    """R-ROUTE-5 (docs/events.md, "A request's full report"): a request with
    ``kv_cache_report_mode = "full"`` (a sampling parameter's ``extra_args``; vLLM's
    default is ``"incremental"``) makes vLLM announce the blocks it reused, a
    BlockStored with no parent of blocks it already holds, no new copy; vLLM later
    evicts each once. The router reads the announcement as a report, not a copy, so
    after the eviction it matches nothing, as vLLM (it matched 2 before the rule)."""
    worker, feed, routes = wired
    kv_events = worker.loaded.vllm.kv_events
    prompt = _tokens(0, 2, tail=5)
    assert worker.admit("a", prompt) == 0
    feed.step()
    worker.finish("a")
    assert worker.admit("b", prompt, report="full") == 2
    feed.step()
    worker.finish("b")
    stored = _stored(feed.events, kv_events)
    assert len(stored) == 4 and worker.copies(prompt, None, 0) == 1  # announced twice, held once
    assert worker.admit("evictor", _tokens(9000, worker.pool.get_num_free_blocks())) == 0
    feed.step()
    assert sorted(_removed(feed.events, kv_events)) == sorted(set(stored))  # each once
    endpoints = f"tcp://127.0.0.1:{feed.port}", f"tcp://127.0.0.1:{feed.replay_port}"
    routes.append(_Route(*endpoints, ()))
    route = routes[0]
    _caught_up(route, feed)
    assert worker.hit(prompt) == 0
    assert route.depth(prompt, None) == 0
    route.stop()
