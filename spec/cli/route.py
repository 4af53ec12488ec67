"""``kachedb-radix route``: a router that keeps a KV-event index of its workers and says
which worker should take a request.

::

    kachedb-radix route --worker w0=tcp://10.0.0.5:5557,tcp://10.0.0.5:5558 ... \\
        [--listen 127.0.0.1:8700] [--block-size 16] [--hash sha256_cbor] [--duration S]
    kachedb-radix route --demo [--workers 4] [--requests 600] [--blocks 1500]

Each ``--worker NAME=PUB[,REPLAY]`` is a publisher speaking vLLM's wire
(:mod:`kachedb_radix.spec.router.publisher`: a vLLM engine's ``--kv-events-config``
endpoints, or ours). The router subscribes to all of them, keeps the index
(:class:`~kachedb_radix.reference.router.RouterIndex`), serves the HTTP/JSON API of
:mod:`kachedb_radix.spec.router.service` on ``--listen`` and prints a table of its
workers (blocks, events, events/s, gaps, replays, losses, stale) every few seconds.

``--demo`` runs on a fresh clone with nothing else: it starts ``--workers`` local
workers (reference trees with events behind our publishers, on loopback), routes the
embedded chat-and-agent workload through the router (each worker's load: the blocks it
prefilled over the last 64 requests), and compares the token hit ratio with
round-robin over the same number of equal pools.

Exit status: 0 done, 2 a usage error (a message, never a traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import zmq
from rich.console import Console
from rich.table import Table

from kachedb_radix.reference import OutOfBlocksError, RadixTree
from kachedb_radix.reference.errors import InvalidArgumentError
from kachedb_radix.reference.events import SCHEMES, BlockHasher, dump_hashes

from ..conform.targets import (
    IMPLEMENTATION_NAMES,
    PURE_SWITCH,
    default_implementation,
    tree_class,
)
from ..router.publisher import EventPublisher
from ..router.service import BadRequest, Router, serve_http
from ..simulate.workload import WorkloadSpec, generate_requests
from ..twins import twin_class

EXIT_OK = 0
EXIT_USAGE = 2
#: The demo's load window, in requests.
LOAD_WINDOW = 64
#: How often the router prints its table, in seconds.
TABLE_EVERY_S = 5.0
#: How long the demo waits for the router to catch up with its workers at the end.
CATCH_UP_S = 5.0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``route`` subcommand to a CLI's subparsers."""
    parser = subparsers.add_parser(
        "route",
        help="a KV-aware router: subscribe to workers' KV events, say which worker has a prefix",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--worker",
        action="append",
        default=[],
        metavar="NAME=PUB[,REPLAY]",
        help="a worker's publisher endpoint and, optionally, its replay endpoint",
    )
    parser.add_argument("--listen", default="127.0.0.1:0", metavar="HOST:PORT",
                        help="where the HTTP/JSON API listens (port 0: any free port)")  # fmt: skip
    parser.add_argument("--block-size", type=int, default=16, help="the workers' tokens per block")
    parser.add_argument(
        "--hash", choices=SCHEMES, default="sha256_cbor", help="the workers' block hash"
    )
    parser.add_argument("--seed", default=None, help="the hash's root seed (vLLM's PYTHONHASHSEED)")
    parser.add_argument("--overlap-weight", type=float, default=1.0,
                        help="cost of a block to prefill against a block of load")  # fmt: skip
    parser.add_argument("--duration", type=float, default=None,
                        help="stop after this many seconds (default: never)")  # fmt: skip
    parser.add_argument(
        "--demo", action="store_true", help="local workers on loopback, fed the embedded workload"
    )
    parser.add_argument("--workers", type=int, default=4, help="--demo: how many workers")
    parser.add_argument("--requests", type=int, default=600, help="--demo: how many requests")
    parser.add_argument(
        "--blocks", type=int, default=1500, help="--demo: each worker's pool, in blocks"
    )
    parser.add_argument(
        "--impl",
        choices=IMPLEMENTATION_NAMES,
        default=None,
        help=f"the router index's and --demo's trees' twin (default: accel, or reference when "
        f"{PURE_SWITCH}=1)",
    )
    parser.add_argument("--plain", action="store_true", help="plain text, no colours")
    parser.set_defaults(handler=run)


class UsageError(ValueError):
    """A command line the router cannot run; the message says why."""


def _listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise UsageError(f"--listen wants HOST:PORT, got {text!r}")
    return host, int(port)


def _workers(specs: Sequence[str]) -> list[tuple[str, str, str | None]]:
    parsed: list[tuple[str, str, str | None]] = []
    for spec in specs:
        name, sep, endpoints = spec.partition("=")
        parts = endpoints.split(",")
        if not sep or not name or not parts[0] or len(parts) > 2 or not all(parts):
            raise UsageError(f"--worker wants NAME=PUB[,REPLAY], got {spec!r}")
        if name in {n for n, _, _ in parsed}:
            raise UsageError(f"--worker {name!r} is given twice")
        parsed.append((name, parts[0], parts[1] if len(parts) == 2 else None))
    return parsed


def run(args: argparse.Namespace) -> int:
    """Run the router (or the demo) from parsed arguments; returns the exit status."""
    console = Console(no_color=args.plain, highlight=False, width=120 if args.plain else None)
    try:
        host, port = _listen(args.listen)
        if args.block_size < 1:
            raise UsageError(f"--block-size must be >= 1, got {args.block_size}")
        if args.demo:
            if args.worker:
                raise UsageError("--demo starts its own workers: give no --worker")
            if args.workers < 1 or args.requests < 1 or args.blocks < 1:
                raise UsageError("--workers, --requests and --blocks must be >= 1")
        elif not args.worker:
            raise UsageError("give --worker NAME=PUB[,REPLAY] (one per worker), or --demo")
        workers = _workers(args.worker)
        hasher = BlockHasher(args.hash) if args.seed is None else BlockHasher(args.hash, args.seed)
        twin = args.impl or default_implementation()
        index_class: Any = twin_class(twin, "RouterIndex")
        router = Router(index_class(hasher, args.block_size), args.overlap_weight)
    except (UsageError, BadRequest, InvalidArgumentError) as exc:
        print(f"kachedb-radix route: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        server = serve_http(router, host, port)
    except OSError as exc:
        print(f"kachedb-radix route: cannot listen on {args.listen}: {exc}", file=sys.stderr)
        router.close()
        return EXIT_USAGE
    url = f"http://{host}:{server.server_address[1]}"
    console.print(f"kachedb-radix route: API on {url} (POST /route, GET /workers, GET /health)")
    try:
        if args.demo:
            return _demo(args, router, hasher, console)
        try:
            for name, endpoint, replay in workers:
                router.add_worker(name, endpoint, replay)
        except zmq.ZMQError as exc:
            print(f"kachedb-radix route: cannot subscribe: {exc}", file=sys.stderr)
            return EXIT_USAGE
        _follow(router, console, args.duration)
        return EXIT_OK
    finally:
        server.shutdown()
        server.server_close()
        router.close()


def _follow(router: Router, console: Console, duration: float | None) -> None:
    """Apply events until ``duration`` elapses (or Ctrl-C), a table every 5 s."""
    started = last = time.monotonic()
    events_before = 0
    try:
        while duration is None or time.monotonic() - started < duration:
            router.poll(100)
            now = time.monotonic()
            if now - last >= TABLE_EVERY_S:
                events = sum(row["index"].get("events", 0) for row in router.table())
                console.print(_table(router, (events - events_before) / (now - last)))
                events_before, last = events, now
    except KeyboardInterrupt:
        pass
    console.print(_table(router, None))


def _table(router: Router, rate: float | None) -> Table:
    title = "workers" + ("" if rate is None else f" ({rate:,.0f} events/s)")
    table = Table(title=title)
    for column in ("worker", "blocks", "batches", "events", "gaps", "replays", "lost", "stale"):
        table.add_column(column, justify="left" if column == "worker" else "right")
    for row in router.table():
        index, sub = row["index"], row["subscriber"]
        table.add_row(
            row["worker"],
            f"{row['blocks']:,}",
            f"{index.get('batches', 0):,}",
            f"{index.get('events', 0):,}",
            str(index.get("gaps", 0)),
            str(sub["replays"]),
            str(index.get("lost", 0)),
            "yes" if row["stale"] else "no",
        )
    return table


def caught_up(router: Router, publishers: dict[str, EventPublisher], seconds: float) -> bool:
    """Poll until the index has every batch the publishers numbered, or ``seconds``
    pass; whether it caught up."""
    deadline = time.monotonic() + seconds
    while any(
        name not in router.index.workers() or router.index.expected(name) < pub.next_seq
        for name, pub in publishers.items()
    ):
        if time.monotonic() > deadline:
            return False
        router.poll(50)
    return True


@dataclass
class _Pools:
    """Token-hit accounting for one way of placing requests."""

    hit: int = 0
    total: int = 0

    def ratio(self) -> float:
        return self.hit / self.total if self.total else 0.0


def _serve(tree: RadixTree, tokens: object, sequence: object, namespace: str | None) -> int:
    """Match then insert, as an engine does per request; returns the tokens hit."""
    hit = tree.match(tokens, namespace).length
    with contextlib.suppress(OutOfBlocksError):  # longer than the whole pool: not cached
        tree.insert(sequence, namespace)
    return hit


def _demo(args: argparse.Namespace, router: Router, hasher: BlockHasher, console: Console) -> int:
    size = args.block_size
    names = [f"w{i}" for i in range(args.workers)]
    tree = tree_class(args.impl or default_implementation())
    trees = {name: tree(args.blocks, size, events=hasher) for name in names}
    plain = [tree(args.blocks, size) for _ in names]
    publishers = {name: EventPublisher("tcp://127.0.0.1:0", "tcp://127.0.0.1:0") for name in names}
    try:
        for name, publisher in publishers.items():
            router.add_worker(name, publisher.endpoint, publisher.replay_endpoint)
        requests = generate_requests(WorkloadSpec(requests=args.requests, block_size=size))
        routed, round_robin = _Pools(), _Pools()
        prefilled: dict[str, deque[tuple[int, int]]] = {name: deque() for name in names}
        started = time.perf_counter()
        for number, request in enumerate(requests):
            tokens = request.tokens
            decision = router.route(
                tokens.tolist(),
                request.namespace,
                {n: float(sum(b for _, b in prefilled[n])) for n in names},
            )
            worker = str(decision.worker)
            hit = _serve(trees[worker], tokens, request.sequence, request.namespace)
            routed.hit, routed.total = routed.hit + hit, routed.total + len(tokens)
            window = prefilled[worker]
            window.append((number, (len(tokens) - hit) // size))
            for queue in prefilled.values():
                while queue and queue[0][0] <= number - LOAD_WINDOW:
                    queue.popleft()
            other = plain[number % len(plain)]
            round_robin.hit += _serve(other, tokens, request.sequence, request.namespace)
            round_robin.total += len(tokens)
            for batch in trees[worker].take_events():
                publishers[worker].publish(batch)
            router.poll(0)
        caught_up(router, publishers, CATCH_UP_S)
        elapsed = time.perf_counter() - started
    finally:
        for publisher in publishers.values():
            publisher.close()
    console.print(_table(router, None))
    console.print(
        f"{len(requests):,} requests over {len(names)} workers of {args.blocks:,} blocks "
        f"in {elapsed:.1f} s: token hit ratio {routed.ratio():.1%} routed by prefix "
        f"against {round_robin.ratio():.1%} round-robin"
    )
    exact = all({h for h, _ in router.index.holdings(n)} == _held(trees[n], hasher) for n in names)
    console.print("the index holds exactly each worker's blocks" if exact else
                  "the index differs from a worker's blocks (see the table)")  # fmt: skip
    return EXIT_OK


def _held(tree: RadixTree, hasher: BlockHasher) -> set[object]:
    return set(dump_hashes(tree.dump(), hasher))
