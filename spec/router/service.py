"""The router service behind ``kachedb-radix route``: an index fed by workers' event
streams, a scoring rule, and a small HTTP/JSON API.

Scoring (as NVIDIA Dynamo's KV router weighs overlap against load): a request of ``n``
whole blocks would make worker ``w`` prefill ``n - depth(w)`` blocks, ``depth`` its
matched depth in the index (R-ROUTE-4), on top of its load ``load(w)`` (what the caller
says it is running, in blocks; 0 when not given)::

    cost(w) = overlap_weight * (n - depth(w)) + load(w)

The worker with the lowest cost wins; ties go to the deeper match, then to the worker
added first.  A stale worker (R-ROUTE-2) is scored on what the index knows of it, a
lower bound of its cache, and flagged.

The API (JSON in and out, described by the OpenAPI 3.1 document ``openapi.json`` beside
this module and served at ``GET /openapi.json``; a bad request gets a 4xx status and
``{"error": "..."}`` naming what was wrong, never a traceback):

* ``POST /route`` ``{"tokens": [...], "namespace": null, "loads": {"w0": 3}}`` ->
  ``{"worker", "blocks", "depths", "costs", "stale"}``;
* ``POST /route/batch`` ``{"requests": [{...}, ...]}`` -> ``{"decisions": [...]}``, one
  per request in order (at most ``LIMITS["route_batch"]``);
* ``GET /workers`` -> one entry per worker: blocks held, expected sequence number,
  stale, catching up, its hash check (:mod:`.scheme_check`), the index's and the
  subscriber's counters;
* ``GET /health`` -> ``{"ok", "workers", "blocks", "stale", "catching_up",
  "problems"}``: ``ok`` is false while a worker's hashes are known not to be the
  router's (``problems`` says which and what to do).

**The intake** (issue 34's design).  One asyncio loop runs both the HTTP server and the
event intake.  The workers' ZeroMQ sockets' file descriptors are watched by the loop;
when one is readable the loop runs :meth:`EventSubscriber.poll` with a time budget of
:data:`INTAKE_SLICE_S` (applying whole batches), then goes back to serving requests,
and comes back for the rest of the frames on its next turn.  So a lookup waits at most
one slice of batches behind the intake (and never for a ZeroMQ poll or a replay: a
replay is a request sent and an answer read as it comes, :mod:`.subscriber`), and a
burst of events is absorbed at the loop's full speed between requests.  The index is
still guarded by :attr:`Router.lock`, held one batch (or one lookup) at a time, so the
same :class:`Router` can be driven from other threads (``route --demo`` decides in its
own thread while the loop applies events); the lock is never held across I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import msgspec
import zmq

from kachedb_radix.reference.errors import InvalidArgumentError, RadixError
from kachedb_radix.reference.events import BlockStored, KVEventBatch
from kachedb_radix.reference.router import RouterIndex
from kachedb_radix.reference.tokens import TOKEN_LIMIT, as_token_list
from kachedb_radix.spec.inputs import LIMITS, InputError, decode_json

from .hashes import ChainMemo
from .http import HttpServer, Request, Response, Routes, error_response, json_response
from .scheme_check import SchemeCheck
from .subscriber import EventSubscriber

#: The most a load may be, in blocks: far above any real queue, and small enough that
#: every cost stays a finite float.
MAX_LOAD = 1e15
#: The most time one turn of the intake spends applying batches before the loop serves
#: requests again.
INTAKE_SLICE_S = 0.002
#: How often the intake looks at its sockets even when no descriptor said so (ZeroMQ's
#: descriptors are edge-triggered; replay deadlines need a clock).
INTAKE_TICK_S = 0.05
#: Requests of a batch decided between two turns of the loop.
BATCH_SLICE = 64

#: The OpenAPI 3.1 document of this API (committed; served at ``GET /openapi.json``).
OPENAPI = Path(__file__).with_name("openapi.json")

Token = Annotated[int, msgspec.Meta(ge=0, lt=TOKEN_LIMIT)]
Load = Annotated[float, msgspec.Meta(ge=0, le=MAX_LOAD)]


class RouteBody(msgspec.Struct, forbid_unknown_fields=True):
    """A ``POST /route`` body."""

    tokens: Annotated[list[Token], msgspec.Meta(max_length=LIMITS["route_tokens"].maximum)]
    namespace: str | None = None
    loads: dict[str, Load] | None = None


class BatchBody(msgspec.Struct, forbid_unknown_fields=True):
    """A ``POST /route/batch`` body."""

    requests: Annotated[list[RouteBody], msgspec.Meta(max_length=LIMITS["route_batch"].maximum)]


class BadRequest(InputError):
    """A request the router refuses; the message says why (one line)."""


#: A token id as JSON Schema's ``integer`` allows it: also a number with no fraction.
_WholeFloat = Annotated[float, msgspec.Meta(ge=0, le=TOKEN_LIMIT - 1)]


class _LaxRouteBody(msgspec.Struct, forbid_unknown_fields=True):
    """A ``POST /route`` body whose tokens may be written as ``1.0`` (JSON's numbers
    do not tell ``1`` from ``1.0``; JSON Schema's ``integer`` takes both)."""

    tokens: Annotated[
        list[Token | _WholeFloat], msgspec.Meta(max_length=LIMITS["route_tokens"].maximum)
    ]
    namespace: str | None = None
    loads: dict[str, Load] | None = None


class _LaxBatchBody(msgspec.Struct, forbid_unknown_fields=True):
    requests: Annotated[list[_LaxRouteBody], msgspec.Meta(max_length=LIMITS["route_batch"].maximum)]


def _whole(tokens: list[int | float]) -> list[int] | None:
    """``tokens`` as ints, or None when one has a fraction. O(n)."""
    if not all(isinstance(t, int) or t.is_integer() for t in tokens):
        return None
    return [int(t) for t in tokens]


def decode_route(body: bytes) -> RouteBody:
    """A ``POST /route`` body. The strict decoder first (all of it in C); a body with a
    token written as a whole float (``1.0``) is read again, more slowly. O(size).

    Raises:
        BadRequest: not of :class:`RouteBody`'s shape (msgspec's message, its path).
    """
    try:
        return decode_json(body, RouteBody, "the body")
    except InputError as strict:
        try:
            lax = decode_json(body, _LaxRouteBody, "the body")
        except InputError:
            raise BadRequest(str(strict)) from None
        tokens = _whole(lax.tokens)
        if tokens is None:
            raise BadRequest(str(strict)) from None
        return RouteBody(tokens, lax.namespace, lax.loads)


def decode_batch(body: bytes) -> BatchBody:
    """A ``POST /route/batch`` body, as :func:`decode_route` reads each request.

    Raises:
        BadRequest: not of :class:`BatchBody`'s shape.
    """
    try:
        return decode_json(body, BatchBody, "the body")
    except InputError as strict:
        try:
            lax = decode_json(body, _LaxBatchBody, "the body")
        except InputError:
            raise BadRequest(str(strict)) from None
        requests = []
        for item in lax.requests:
            tokens = _whole(item.tokens)
            if tokens is None:
                raise BadRequest(str(strict)) from None
            requests.append(RouteBody(tokens, item.namespace, item.loads))
        return BatchBody(requests)


@dataclass(frozen=True)
class Decision:
    """Where a request goes, and why."""

    worker: Hashable | None
    blocks: int
    depths: dict[Hashable, int]
    costs: dict[Hashable, float]
    stale: list[Hashable]

    def to_json(self) -> dict[str, Any]:
        """Plain data (worker names as strings)."""
        return {
            "worker": None if self.worker is None else str(self.worker),
            "blocks": self.blocks,
            "depths": {str(w): d for w, d in self.depths.items()},
            "costs": {str(w): c for w, c in self.costs.items()},
            "stale": [str(w) for w in self.stale],
        }


class Router:
    """An index, the subscriber that feeds it, the hash check and the scoring rule.

    Args:
        index: the router index (either twin's).
        overlap_weight: the weight of a block to prefill against a block of load (> 0,
            finite).
        context: the ZeroMQ context of the subscriptions (default: the process's).
        replay_timeout_ms: how long a worker's replay may take (see the subscriber).
    """

    def __init__(
        self,
        index: RouterIndex | Any,
        overlap_weight: float = 1.0,
        *,
        context: zmq.Context[zmq.Socket[bytes]] | None = None,
        replay_timeout_ms: int = 1000,
    ) -> None:
        if not 0 < overlap_weight < float("inf"):
            raise BadRequest(f"overlap_weight must be > 0 and finite, got {overlap_weight!r}")
        self.index = index
        self.overlap_weight = overlap_weight
        self.lock = threading.Lock()
        self.check = SchemeCheck(index.hasher, index.block_size)
        self.subscriber = EventSubscriber(
            index,
            lock=self.lock,
            context=context,
            replay_timeout_ms=replay_timeout_ms,
            inspect=self.check.observe,
        )
        self._workers: list[Hashable] = []
        self._order: dict[Hashable, int] = {}
        self._memos = threading.local()  # a ChainMemo per thread that decides
        self._learned: dict[Hashable, int] = {}  # a learning worker's next batch number

    def add_worker(
        self, name: Hashable, endpoint: str, replay: str | None = None, *, wait: bool = True
    ) -> None:
        """Subscribe to a worker's publisher (see :class:`EventSubscriber`).

        Raises:
            InvalidArgumentError: ``name`` is a worker already.
            zmq.ZMQError: an endpoint ZeroMQ cannot connect to.
        """
        if name in self._order:
            raise InvalidArgumentError(f"worker {name!r} is a worker already")
        self.subscriber.add_worker(name, endpoint, replay, wait=wait)
        self._order[name] = len(self._workers)
        self._workers.append(name)

    def add_learning_worker(self, name: Hashable) -> None:
        """A worker with no event stream: the index holds, for it, the blocks of every
        request this router sent it, never forgotten -- what a gateway without KV events
        can know (NVIDIA Dynamo's router without events guesses the same way; the
        planner's ``simulate --index gateway`` models it). O(1).

        Raises:
            InvalidArgumentError: ``name`` is a worker already.
        """
        if name in self._order:
            raise InvalidArgumentError(f"worker {name!r} is a worker already")
        self._learned[name] = 0
        self._order[name] = len(self._workers)
        self._workers.append(name)

    @property
    def workers(self) -> list[Hashable]:
        """The workers added, in order."""
        return list(self._workers)

    def poll(self, timeout_ms: int = 0, *, budget_s: float | None = None) -> int:
        """Apply whatever the workers sent (:meth:`EventSubscriber.poll`); the lock is
        taken per batch, never while waiting."""
        return self.subscriber.poll(timeout_ms, budget_s=budget_s)

    def route(
        self,
        tokens: object,
        namespace: str | None = None,
        loads: Mapping[Any, float] | None = None,
    ) -> Decision:
        """Score every worker for ``tokens`` (any token input the tree takes) and pick
        one (see the module docstring). O(n * w) for n tokens and w workers.

        Raises:
            BadRequest: malformed tokens or namespace, or a load that is not a finite
                number in [0, :data:`MAX_LOAD`] or names no worker.
        """
        for worker, load in (loads or {}).items():
            if isinstance(load, bool) or not isinstance(load, int | float):
                raise BadRequest(f"a load is a number of blocks, got {load!r} for {worker!r}")
            if not 0 <= load <= MAX_LOAD:  # NaN fails both
                raise BadRequest(f"a load is from 0 to {MAX_LOAD:g} blocks, got {load!r}")
        if namespace is not None and not isinstance(namespace, str):
            raise BadRequest(f"namespace must be null or a string, got {namespace!r}")
        try:
            token_list = as_token_list(tokens)  # once: any token input, as the tree takes
        except RadixError as exc:
            raise BadRequest(str(exc)) from None
        return self.decide(token_list, namespace, {w: float(x) for w, x in (loads or {}).items()})

    def decide(
        self, tokens: list[int], namespace: str | None, loads: Mapping[Any, float]
    ) -> Decision:
        """:meth:`route` for checked input: token ids already in range, loads finite
        and in range. The request is hashed outside the lock; the lock is held for the
        index lookup alone; its blocks' hashes are remembered (:mod:`.hashes`), so a
        prefix seen before is not hashed again. O(n * w).

        Raises:
            BadRequest: a load names no worker.
        """
        order = self._order
        for worker in loads:
            if worker not in order:
                raise BadRequest(f"loads names no worker: {str(worker)[:60]!r}")
        index = self.index
        memo = getattr(self._memos, "memo", None)
        if memo is None:
            memo = self._memos.memo = ChainMemo(index.hasher, index=index)
        hashes = memo.external_chain(tokens, index.block_size, namespace)
        with self.lock:
            depths = index.query_hashes(hashes)
            stale = [w for w in depths if index.is_stale(w)] if depths else []
        blocks = len(hashes)
        weight = self.overlap_weight
        best: Hashable | None = None
        best_key: tuple[float, int, int] | None = None
        costs: dict[Hashable, float] = {}
        for worker in self._workers:
            depth = depths.get(worker, 0)
            cost = weight * (blocks - depth) + loads.get(worker, 0.0)
            costs[worker] = cost
            key = (cost, -depth, order[worker])
            if best_key is None or key < best_key:
                best, best_key = worker, key
        if best in self._learned and hashes:
            self._learn(best, hashes)
        return Decision(best, blocks, depths, costs, stale)

    def _learn(self, worker: Hashable, hashes: list[Any]) -> None:
        """Hold ``hashes`` for learning ``worker``: a store of its own numbering."""
        stored = BlockStored(hashes, None, [], self.index.block_size, None, "GPU", None)
        with self.lock:
            seq = self._learned[worker]
            self._learned[worker] = seq + 1
            self.index.apply(worker, seq, KVEventBatch(0.0, [stored]))

    def table(self) -> list[dict[str, Any]]:
        """One row per worker (what ``GET /workers`` returns). O(workers)."""
        rows = []
        with self.lock:
            known = set(self.index.workers())
            for worker in self._workers:
                seen = worker in known
                learning = worker in self._learned
                rows.append(
                    {
                        "worker": str(worker),
                        "blocks": self.index.held(worker) if seen else 0,
                        "expected": self.index.expected(worker) if seen else 0,
                        "stale": self.index.is_stale(worker) if seen else False,
                        "catching_up": not learning and self.subscriber.replaying(worker),
                        "hashes": self.check.verdict(worker).to_json(),
                        "index": self.index.counts(worker) if seen else {},
                        "subscriber": {} if learning else self.subscriber.counts(worker),
                    }
                )
        return rows

    def health(self) -> dict[str, Any]:
        """What ``GET /health`` returns: whether the router can route (no worker's
        hashes known to differ from its own), and counts. O(workers)."""
        problems = []
        for worker in self._workers:
            verdict = self.check.verdict(worker)
            if verdict.problem is not None:
                problems.append({"worker": str(worker), "problem": verdict.problem})
        with self.lock:
            known = set(self.index.workers())
            stale = [str(w) for w in self._workers if w in known and self.index.is_stale(w)]
            blocks = len(self.index)
        catching_up = [
            str(w) for w in self._workers if w not in self._learned and self.subscriber.replaying(w)
        ]
        return {
            "ok": not problems,
            "workers": len(self._workers),
            "blocks": blocks,
            "stale": stale,
            "catching_up": catching_up,
            "problems": problems,
        }

    def close(self) -> None:
        """Close the subscriber's sockets."""
        self.subscriber.close()


def parse_route_request(body: bytes) -> tuple[list[int], str | None, dict[str, float]]:
    """The tokens, namespace and loads of a ``POST /route`` body. O(size).

    Raises:
        BadRequest: not JSON, not an object of the declared fields, a token outside
            [0, 2**32), a load that is not a number from 0 to :data:`MAX_LOAD`.
    """
    request = decode_route(body)
    return request.tokens, request.namespace, dict(request.loads or {})


class RouteService:
    """The API of a :class:`Router` on ``host:port`` and its event intake, on the
    running asyncio loop (the module docstring's design).

    Args:
        router: what answers.
        host, port: where to listen (port 0: any free one; :attr:`port` once started).
        allow_hosts: more ``Host`` names to answer to (a reverse proxy's).
    """

    def __init__(
        self, router: Router, host: str, port: int, allow_hosts: tuple[str, ...] = ()
    ) -> None:
        self.router = router
        routes = Routes()
        routes.add("POST", "/route", self._route)
        routes.add("POST", "/route/batch", self._batch)
        routes.add("GET", "/workers", lambda _: json_response(200, router.table()))
        routes.add("GET", "/health", lambda _: json_response(200, router.health()))
        routes.add("GET", "/openapi.json", self._openapi)
        self.http = HttpServer(routes, host, port, allow_hosts)
        self._watched: dict[int, zmq.Socket[bytes]] = {}
        self._generation = -1
        self._scheduled = False
        self._tick: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def port(self) -> int:
        """The port listened on."""
        return self.http.port

    async def start(self) -> None:
        """Listen, and start the intake.

        Raises:
            OSError: the address cannot be bound.
        """
        self._loop = asyncio.get_running_loop()
        await self.http.start()
        self._schedule()
        self._arm_tick()

    async def close(self) -> None:
        """Stop the intake and the server (the router stays open). Idempotent."""
        if self._tick is not None:
            self._tick.cancel()
            self._tick = None
        if self._loop is not None:
            for fd in list(self._watched):
                self._loop.remove_reader(fd)
        self._watched.clear()
        await self.http.close()

    # -------------------------------------------------------------- the intake

    def _schedule(self) -> None:
        if not self._scheduled and self._loop is not None:
            self._scheduled = True
            self._loop.call_soon(self._intake)

    def _arm_tick(self) -> None:
        assert self._loop is not None
        self._tick = self._loop.call_later(INTAKE_TICK_S, self._ticked)

    def _ticked(self) -> None:
        self._schedule()
        self._arm_tick()

    def _intake(self) -> None:
        """One turn: apply frames for at most a slice, then let the loop serve."""
        self._scheduled = False
        subscriber = self.router.subscriber
        subscriber.poll(0, budget_s=INTAKE_SLICE_S)
        if subscriber.generation != self._generation:
            self._rewatch()
        if subscriber.more:
            self._schedule()

    def _rewatch(self) -> None:
        """Watch exactly the subscriber's sockets' descriptors."""
        assert self._loop is not None
        subscriber = self.router.subscriber
        self._generation = subscriber.generation
        wanted = {int(sock.getsockopt(zmq.FD)): sock for sock in subscriber.sockets()}
        for fd in set(self._watched) - set(wanted):
            self._loop.remove_reader(fd)
        for fd in set(wanted) - set(self._watched):
            self._loop.add_reader(fd, self._schedule)
        self._watched = wanted

    # -------------------------------------------------------------- the API

    def _route(self, request: Request) -> Response:
        try:
            tokens, namespace, loads = parse_route_request(request.body)
            decision = self.router.decide(tokens, namespace, loads)
        except BadRequest as exc:
            return error_response(400, str(exc))
        return json_response(200, decision.to_json())

    async def _batch(self, request: Request) -> Response:
        try:
            body = decode_batch(request.body)
        except BadRequest as exc:
            return error_response(400, str(exc))
        decisions = []
        for number, item in enumerate(body.requests):
            if number and number % BATCH_SLICE == 0:
                await asyncio.sleep(0)  # let the intake and other clients in
            try:
                decision = self.router.decide(item.tokens, item.namespace, item.loads or {})
            except BadRequest as exc:
                return error_response(400, f"requests[{number}]: {exc}")
            decisions.append(decision.to_json())
        return json_response(200, {"decisions": decisions})

    def _openapi(self, _request: Request) -> Response:
        return json_response(200, openapi_document([str(w) for w in self.router.workers]))


def openapi_document(workers: list[str]) -> dict[str, Any]:
    """The committed OpenAPI document, the names a load may give set to ``workers``
    (what this router accepts). O(size of the document)."""
    document: dict[str, Any] = json.loads(OPENAPI.read_text("utf-8"))
    names = document["components"]["schemas"]["Loads"]["propertyNames"]
    names["enum"] = workers
    return document


class RunningService:
    """A :class:`RouteService` on a loop of its own in a daemon thread (for the demo
    and tests): :attr:`url`, and :meth:`close`."""

    def __init__(self, router: Router, host: str, port: int) -> None:
        self.service = RouteService(router, host, port)
        self._loop = asyncio.new_event_loop()
        started = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            try:
                self._loop.run_until_complete(self.service.start())
            except BaseException as exc:  # reported to the caller below
                failure.append(exc)
                started.set()
                return
            started.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="route-service", daemon=True)
        self._thread.start()
        started.wait()
        if failure:
            self._thread.join()
            self._loop.close()
            raise failure[0]

    @property
    def port(self) -> int:
        """The port listened on."""
        return self.service.port

    @property
    def url(self) -> str:
        """``http://host:port``."""
        return f"http://{_url_host(self.service.http.host)}:{self.port}"

    def close(self) -> None:
        """Stop the service and its loop. Idempotent."""
        if self._loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(self.service.close(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()


def _url_host(host: str) -> str:
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def serve_in_thread(router: Router, host: str = "127.0.0.1", port: int = 0) -> RunningService:
    """Start ``router``'s API and intake on a thread of their own; the running service.

    Raises:
        OSError: the address cannot be bound.
    """
    return RunningService(router, host, port)


def wait_caught_up(
    router: Router, targets: Mapping[Hashable, int], seconds: float, *, poll: bool = True
) -> bool:
    """Whether, within ``seconds``, the index expects at least ``targets[w]`` next for
    every worker ``w`` (polling the subscriber itself when ``poll``; else waiting for
    the loop that does). O(workers) per check."""
    deadline = time.monotonic() + seconds
    while True:
        with router.lock:
            known = set(router.index.workers())
            done = all(w in known and router.index.expected(w) >= seq for w, seq in targets.items())
        if done:
            return True
        if time.monotonic() > deadline:
            return False
        if poll:
            router.poll(20)
        else:
            time.sleep(0.0005)


__all__ = [
    "BadRequest",
    "BatchBody",
    "Decision",
    "InvalidArgumentError",
    "RouteBody",
    "RouteService",
    "Router",
    "RunningService",
    "parse_route_request",
    "serve_in_thread",
    "wait_caught_up",
]
