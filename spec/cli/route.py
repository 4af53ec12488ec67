"""``kachedb-radix route``: a router that keeps a KV-event index of its workers and says
which worker should take a request.

::

    kachedb-radix route --worker w0=tcp://10.0.0.5:5557,tcp://10.0.0.5:5558 ... \\
        [--listen 127.0.0.1:8700] [--engine vllm] [--block-size 16] [--hash sha256] [--duration S]
    kachedb-radix route --demo [--workers 4] [--requests 600] [--blocks 1500]

Each ``--worker NAME=PUB[,REPLAY]`` is a publisher speaking vLLM's wire
(:mod:`kachedb_radix.spec.router.publisher`: a vLLM engine's ``--kv-events-config``
endpoints, or ours). The router subscribes to all of them, keeps the index
(:class:`~kachedb_radix.reference.router.RouterIndex`), serves the HTTP/JSON API of
:mod:`kachedb_radix.spec.router.service` on ``--listen`` (its OpenAPI document at
``GET /openapi.json``) and prints a table of its workers (blocks, events, events/s,
gaps, replays, losses, stale, hash check) every few seconds. The API has no
authentication: on an address other than loopback the router says so; it answers
only requests whose ``Host`` it serves (``--allow-host`` adds a proxy's name) and
refuses cross-site writes.

When a worker's events carry token ids, the router checks its first blocks against
its own hash scheme and says, in its table, ``GET /health`` and on stderr, when they
differ and which scheme they look like, instead of answering depth 0 forever.

``--demo`` runs on a fresh clone with nothing else: it starts ``--workers`` local
workers (reference trees with events behind our publishers, on loopback), routes the
embedded chat-and-agent workload through the router (each worker's load: the blocks it
prefilled over the last 64 requests), and compares the token hit ratio with
round-robin over the same number of equal pools.

Exit status: 0 done, 2 a usage error (a message, never a traceback).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine, Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import zmq
from rich.console import Console
from rich.table import Table

from kachedb_radix.reference import OutOfBlocksError, RadixTree
from kachedb_radix.reference.events import (
    DEFAULT_ENGINE,
    ENGINE_NAMES,
    SCHEMES,
    BlockHasher,
    dump_hashes,
    engine_preset,
)

from ..inputs import LIMITS, count, real
from ..inputs.http import split_host, unauthenticated_warning
from ..router.publisher import EventPublisher
from ..router.service import Router, RouteService, serve_in_thread, wait_caught_up
from ..simulate.workload import WorkloadSpec, generate_requests
from ..twins import PURE_SWITCH, TWIN_NAMES, default_twin, twin_class

EXIT_OK = 0
EXIT_USAGE = 2
#: The demo's load window, in requests.
LOAD_WINDOW = 64
#: How often the router prints its table, in seconds.
TABLE_EVERY_S = 5.0
#: How long the demo waits for the router to catch up with its workers at the end.
CATCH_UP_S = 5.0
#: The largest block size the router takes (tokens).
MAX_BLOCK_SIZE = 65_536
#: The most requests and pool blocks of ``--demo`` (it builds two trees per worker).
MAX_DEMO_REQUESTS, MAX_DEMO_BLOCKS = 100_000, 65_536


class UsageError(ValueError):
    """A command line the router cannot run; the message says why."""


def listen_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) as ``(host, port)``; argparse's type for
    ``--listen``. O(len(text)).

    Raises:
        argparse.ArgumentTypeError: not HOST:PORT with a port from 0 to 65535.
    """
    try:
        host, port = split_host(text)
    except ValueError:
        host, port = "", None
    if not host or port is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT (a port from 0 to 65535)")
    return host.strip("[]"), port


def worker_spec(text: str) -> tuple[str, str | None, str | None]:
    """``NAME=PUB[,REPLAY]`` as ``(name, pub, replay or None)``, or a bare ``NAME`` (for
    ``--learn``) as ``(name, None, None)``; argparse's type for ``--worker``.
    O(len(text)).

    Raises:
        argparse.ArgumentTypeError: a missing name or endpoint, or more than two.
    """
    name, sep, endpoints = text.partition("=")
    if not name.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: want NAME=PUB[,REPLAY]")
    if not sep:
        return name, None, None
    parts = endpoints.split(",")
    if not parts[0] or len(parts) > 2 or not all(parts):
        raise argparse.ArgumentTypeError(f"{text!r}: want NAME=PUB[,REPLAY]")
    return name, parts[0], parts[1] if len(parts) == 2 else None


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``route`` subcommand to a CLI's subparsers."""
    parser = subparsers.add_parser(
        "route",
        help="a KV-aware router: subscribe to workers' KV events, say which worker has a prefix",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    workers_cap = LIMITS["route_workers"]
    parser.add_argument(
        "--worker",
        action="append",
        default=[],
        type=worker_spec,
        metavar="NAME=PUB[,REPLAY]",
        help=f"a worker's publisher endpoint and, optionally, its replay endpoint "
        f"({workers_cap.describe()})",
    )
    parser.add_argument(
        "--listen",
        default=("127.0.0.1", 0),
        type=listen_address,
        metavar="HOST:PORT",
        help="where the HTTP/JSON API listens (port 0: any free port; default 127.0.0.1:0); "
        "the API has no authentication",
    )
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host name the API also answers to (a reverse proxy's); by default only "
        "the addresses it listens on",
    )
    parser.add_argument(
        "--engine",
        choices=ENGINE_NAMES,
        default=DEFAULT_ENGINE,
        help="the workers' engine: its block hash, salt reading and block size at its defaults "
        f"(default: {DEFAULT_ENGINE}; kachedb-radix hash --engine E prints its hashes)",
    )
    parser.add_argument(
        "--block-size",
        type=count(1, MAX_BLOCK_SIZE),
        default=None,
        help=f"the workers' tokens per block (1 to {MAX_BLOCK_SIZE:,}; default: the engine's)",
    )
    parser.add_argument("--hash", choices=SCHEMES, default=None,
                        help="the workers' block hash (default: the engine's)")  # fmt: skip
    parser.add_argument("--seed", default=None, help="the hash's root seed (vLLM's PYTHONHASHSEED)")
    parser.add_argument(
        "--overlap-weight",
        type=real(0, 1e6, above=True),
        default=1.0,
        help="cost of a block to prefill against a block of load (above 0, at most 1e6)",
    )
    parser.add_argument(
        "--duration",
        type=real(0, 1e9),
        default=None,
        help="stop after this many seconds (0 to 1e9; default: never)",
    )
    parser.add_argument(
        "--learn",
        action="store_true",
        help="no event streams (give each --worker as a bare NAME): a worker holds what this "
        "router sent it, never forgotten, as a gateway without KV events must guess",
    )
    parser.add_argument(
        "--demo", action="store_true", help="local workers on loopback, fed the embedded workload"
    )
    demo_cap = LIMITS["route_demo_workers"]
    parser.add_argument(
        "--workers",
        type=count(1, demo_cap.maximum),
        default=4,
        help=f"--demo: how many workers ({demo_cap.describe()})",
    )
    parser.add_argument(
        "--requests",
        type=count(1, MAX_DEMO_REQUESTS),
        default=600,
        help=f"--demo: how many requests (1 to {MAX_DEMO_REQUESTS:,})",
    )
    parser.add_argument(
        "--blocks",
        type=count(1, MAX_DEMO_BLOCKS),
        default=1500,
        help=f"--demo: each worker's pool, in blocks (1 to {MAX_DEMO_BLOCKS:,})",
    )
    parser.add_argument(
        "--impl",
        choices=TWIN_NAMES,
        default=None,
        help=f"the router index's and --demo's trees' twin (default: accel, or reference when "
        f"{PURE_SWITCH}=1)",
    )
    parser.add_argument("--plain", action="store_true", help="plain text, no colours")
    parser.set_defaults(handler=run)


def _check_workers(workers: Sequence[tuple[str, str | None, str | None]]) -> None:
    cap = LIMITS["route_workers"].maximum
    if len(workers) > cap:
        raise UsageError(f"{len(workers):,} --worker options, over the most allowed, {cap:,}")
    seen: set[str] = set()
    for name, _, _ in workers:
        if name in seen:
            raise UsageError(f"--worker {name!r} is given twice")
        seen.add(name)


def _context(sockets: int) -> zmq.Context[zmq.Socket[bytes]]:
    """A ZeroMQ context with room for ``sockets`` sockets (its default is 1,023)."""
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    context.set(zmq.MAX_SOCKETS, max(1024, sockets + 64))
    return context


def _no_room(exc: zmq.ZMQError, sockets: int) -> str:
    if exc.errno == errno.EMFILE:
        return (
            f"cannot open {sockets:,} ZeroMQ sockets and their connections: too many open "
            "files (raise the limit with ulimit -n, or follow fewer workers)"
        )
    return f"cannot subscribe: {exc}"


def run(args: argparse.Namespace) -> int:
    """Run the router (or the demo) from parsed arguments; returns the exit status."""
    console = Console(no_color=args.plain, highlight=False, width=120 if args.plain else None)
    try:
        if args.demo and args.worker:
            raise UsageError("--demo starts its own workers: give no --worker")
        if not args.demo and not args.worker:
            raise UsageError("give --worker NAME=PUB[,REPLAY] (one per worker), or --demo")
        if args.demo and args.learn:
            raise UsageError("--demo follows its workers' events: give no --learn")
        for name, endpoint, _ in args.worker:
            if args.learn and endpoint is not None:
                raise UsageError(f"--learn takes bare worker names, got --worker {name}=...")
            if not args.learn and endpoint is None:
                raise UsageError(f"--worker {name!r} wants NAME=PUB[,REPLAY] (or --learn)")
        _check_workers(args.worker)
    except UsageError as exc:
        print(f"kachedb-radix route: {exc}", file=sys.stderr)
        return EXIT_USAGE
    engine = engine_preset(args.engine)
    if args.block_size is None:
        args.block_size = engine.block_size
    hasher = BlockHasher(
        args.hash or engine.scheme,
        engine.seed if args.seed is None else args.seed,
        engine.wire,
        engine.empty_is_none,
    )
    index_class: Any = twin_class(args.impl or default_twin(), "RouterIndex")
    sockets = 4 * args.workers if args.demo else 2 * len(args.worker)
    context = _context(sockets)
    router = Router(index_class(hasher, args.block_size), args.overlap_weight, context=context)
    router.check.report = lambda text: print(f"kachedb-radix route: {text}", file=sys.stderr)
    warning = unauthenticated_warning(args.listen[0])
    if warning is not None:
        print(f"kachedb-radix route: {warning}", file=sys.stderr)
    try:
        if args.demo:
            return _demo(args, router, hasher, console, sockets)
        return _live(args, router, console, sockets)
    finally:
        router.close()
        context.destroy(linger=0)


def _live(args: argparse.Namespace, router: Router, console: Console, sockets: int) -> int:
    """Follow the workers on the asyncio loop until ``--duration`` or a signal."""
    host, port = args.listen
    service = RouteService(router, host, port, tuple(args.allow_host))

    async def main() -> int:
        with _stopped_by_signals() as stop:
            try:
                await service.start()
            except OSError as exc:
                print(f"kachedb-radix route: cannot listen on {host}:{port}: {exc}",
                      file=sys.stderr)  # fmt: skip
                return EXIT_USAGE
            try:
                try:
                    for name, endpoint, replay in args.worker:
                        if args.learn:
                            router.add_learning_worker(name)
                        else:
                            router.add_worker(name, endpoint, replay, wait=False)
                except zmq.ZMQError as exc:
                    print(f"kachedb-radix route: {_no_room(exc, sockets)}", file=sys.stderr)
                    return EXIT_USAGE
                url = f"http://{_shown(host)}:{service.port}"
                console.print(
                    f"kachedb-radix route: API on {url} (POST /route, POST /route/batch, "
                    "GET /workers, GET /health, GET /openapi.json)"
                )
                await _follow(router, console, args.duration, stop)
                return EXIT_OK
            finally:
                await service.close()

    return _run_loop(main)


def _run_loop(main: Callable[[], Coroutine[Any, Any, int]]) -> int:
    """``asyncio.run(main())``, on a thread of its own when this thread already runs a
    loop (the command called from a notebook or another asyncio program)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    status: list[int] = []
    thread = threading.Thread(target=lambda: status.append(asyncio.run(main())), name="route")
    thread.start()
    thread.join()
    return status[0] if status else EXIT_USAGE


def _shown(host: str) -> str:
    return f"[{host}]" if ":" in host else host


@contextlib.contextmanager
def _stopped_by_signals() -> Iterator[asyncio.Event]:
    """An event that SIGINT and SIGTERM set while the running loop is in the block (on
    the main thread; elsewhere, only the duration ends the router)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    installed = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, stop.set)
            installed.append(signum)
    try:
        yield stop
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)


async def _follow(
    router: Router, console: Console, duration: float | None, stop: asyncio.Event | None = None
) -> None:
    """Let the loop serve and apply until ``duration`` elapses or ``stop`` is set; a
    table every :data:`TABLE_EVERY_S` seconds and at the end."""
    stop = stop or asyncio.Event()
    started = last = time.monotonic()
    events_before = 0
    while not stop.is_set():
        now = time.monotonic()
        remaining = None if duration is None else duration - (now - started)
        if remaining is not None and remaining <= 0:
            break
        wait = TABLE_EVERY_S - (now - last)
        if remaining is not None:
            wait = min(wait, remaining)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), max(wait, 0.0))
        now = time.monotonic()
        if now - last >= TABLE_EVERY_S:
            events = sum(row["index"].get("events", 0) for row in router.table())
            console.print(_table(router, (events - events_before) / (now - last)))
            events_before, last = events, now
    console.print(_table(router, None))


def _table(router: Router, rate: float | None) -> Table:
    title = "workers" + ("" if rate is None else f" ({rate:,.0f} events/s)")
    table = Table(title=title)
    columns = ("worker", "blocks", "batches", "events", "gaps", "replays", "lost", "stale")
    for column in (*columns, "hashes"):
        table.add_column(column, justify="left" if column in ("worker", "hashes") else "right")
    for row in router.table():
        index, sub = row["index"], row["subscriber"]
        table.add_row(
            row["worker"],
            f"{row['blocks']:,}",
            f"{index.get('batches', 0):,}",
            f"{index.get('events', 0):,}",
            str(index.get("gaps", 0)),
            str(sub.get("replays", 0)),
            str(index.get("lost", 0)),
            "catching up" if row["catching_up"] else "yes" if row["stale"] else "no",
            _hashes(row["hashes"]),
        )
    return table


def _hashes(verdict: dict[str, Any]) -> str:
    if verdict["state"] == "mismatch":
        return f"MISMATCH: {verdict['problem']}"
    return str(verdict["state"])


def caught_up(router: Router, publishers: dict[str, EventPublisher], seconds: float) -> bool:
    """Poll until the index has every batch the publishers numbered, or ``seconds``
    pass; whether it caught up. A worker that published nothing is caught up."""
    targets: dict[Hashable, int] = {n: p.next_seq for n, p in publishers.items() if p.next_seq}
    return wait_caught_up(router, targets, seconds)


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


def _demo(
    args: argparse.Namespace, router: Router, hasher: BlockHasher, console: Console, sockets: int
) -> int:
    size = args.block_size
    names = [f"w{i}" for i in range(args.workers)]
    tree = twin_class(args.impl or default_twin())
    trees = {name: tree(args.blocks, size, events=hasher) for name in names}
    plain = [tree(args.blocks, size) for _ in names]
    publishers: dict[str, EventPublisher] = {}
    context = router.subscriber.context
    host, port = args.listen
    try:
        try:
            for name in names:
                publishers[name] = EventPublisher(
                    "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", context=context
                )
            for name, publisher in publishers.items():
                router.add_worker(name, publisher.endpoint, publisher.replay_endpoint)
            service = serve_in_thread(router, host, port)
        except zmq.ZMQError as exc:
            print(f"kachedb-radix route: {_no_room(exc, sockets)}", file=sys.stderr)
            return EXIT_USAGE
        except OSError as exc:
            print(f"kachedb-radix route: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        try:
            console.print(
                f"kachedb-radix route: API on {service.url} (POST /route, POST /route/batch, "
                "GET /workers, GET /health, GET /openapi.json)"
            )
            routed, round_robin, elapsed = _run_demo(args, router, trees, plain, publishers)
            targets: dict[Hashable, int] = {
                n: p.next_seq for n, p in publishers.items() if p.next_seq
            }
            wait_caught_up(router, targets, CATCH_UP_S, poll=False)
            console.print(_table(router, None))
            with router.lock:
                exact = _exact(router, trees, hasher)
        finally:
            service.close()
    finally:
        for publisher in publishers.values():
            publisher.close()
    console.print(
        f"{args.requests:,} requests over {len(names)} workers of {args.blocks:,} blocks "
        f"in {elapsed:.1f} s: token hit ratio {routed.ratio():.1%} routed by prefix "
        f"against {round_robin.ratio():.1%} round-robin"
    )
    console.print("the index holds exactly each worker's blocks" if exact else
                  "the index differs from a worker's blocks (see the table)")  # fmt: skip
    return EXIT_OK


def _run_demo(
    args: argparse.Namespace,
    router: Router,
    trees: dict[str, RadixTree],
    plain: list[RadixTree],
    publishers: dict[str, EventPublisher],
) -> tuple[_Pools, _Pools, float]:
    """Route the workload through ``router`` (in this thread; the service's loop applies
    the events meanwhile) and round-robin beside it."""
    size = args.block_size
    names = list(trees)
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
        # The next request is routed once the index has this one's events, as a request
        # a few milliseconds later would be: the demo measures routing, not a race
        # between the intake and requests sent back to back.
        if publishers[worker].next_seq:
            wait_caught_up(router, {worker: publishers[worker].next_seq}, CATCH_UP_S, poll=False)
    return routed, round_robin, time.perf_counter() - started


def _exact(router: Router, trees: dict[str, RadixTree], hasher: BlockHasher) -> bool:
    """Whether the index holds exactly each worker's blocks (a worker that never
    published holds none)."""
    known = set(router.index.workers())
    return all(
        _holding(router, name, known) == set(dump_hashes(tree.dump(), hasher))
        for name, tree in trees.items()
    )


def _holding(router: Router, name: str, known: set[Hashable]) -> set[object]:
    return {h for h, _ in router.index.holdings(name)} if name in known else set()
