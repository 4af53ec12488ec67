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

The API (JSON in and out; a bad request gets status 400 and ``{"error": "..."}`` naming
what was wrong, never a traceback):

* ``POST /route`` ``{"tokens": [...], "namespace": null, "loads": {"w0": 3}}`` ->
  ``{"worker", "blocks", "depths", "costs", "stale"}``;
* ``GET /workers`` -> one entry per worker: blocks held, expected sequence number,
  stale, the index's and the subscriber's counters;
* ``GET /health`` -> ``{"workers": n, "blocks": distinct hashes}``.

The index is shared by the subscriber (which writes) and the HTTP threads (which read)
under one lock.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kachedb_radix.reference.errors import RadixError
from kachedb_radix.reference.router import RouterIndex
from kachedb_radix.reference.tokens import as_token_list

from .subscriber import EventSubscriber

#: The longest request body the API reads.
MAX_BODY = 64 * 1024 * 1024


class BadRequest(ValueError):
    """A request the API refuses; the message says why."""


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
    """An index, the subscriber that feeds it, and the scoring rule.

    Args:
        index: the router index.
        overlap_weight: the weight of a block to prefill against a block of load (> 0).
    """

    def __init__(self, index: RouterIndex, overlap_weight: float = 1.0) -> None:
        if not overlap_weight > 0:
            raise BadRequest(f"overlap_weight must be > 0, got {overlap_weight!r}")
        self.index = index
        self.overlap_weight = overlap_weight
        self.subscriber = EventSubscriber(index)
        self.lock = threading.Lock()
        self._workers: list[Hashable] = []

    def add_worker(self, name: Hashable, endpoint: str, replay: str | None = None) -> None:
        """Subscribe to a worker's publisher (see :class:`EventSubscriber`)."""
        with self.lock:
            self.subscriber.add_worker(name, endpoint, replay)
            self._workers.append(name)

    @property
    def workers(self) -> list[Hashable]:
        """The workers added, in order."""
        return list(self._workers)

    def poll(self, timeout_ms: int = 0) -> int:
        """Apply whatever the workers sent (:meth:`EventSubscriber.poll`)."""
        with self.lock:
            return self.subscriber.poll(timeout_ms)

    def route(
        self,
        tokens: object,
        namespace: str | None = None,
        loads: Mapping[Any, float] | None = None,
    ) -> Decision:
        """Score every worker for ``tokens`` and pick one (see the module docstring).
        O(n * w) for n tokens and w workers.

        Raises:
            BadRequest: malformed tokens or namespace, or a load that is not a number
                >= 0 or names no worker.
        """
        loads = dict(loads or {})
        for worker, load in loads.items():
            if worker not in self._workers:
                raise BadRequest(f"loads names no worker: {worker!r}")
            if isinstance(load, bool) or not isinstance(load, int | float) or not load >= 0:
                raise BadRequest(f"a load is a number >= 0, got {load!r} for {worker!r}")
        if namespace is not None and not isinstance(namespace, str):
            raise BadRequest(f"namespace must be null or a string, got {namespace!r}")
        try:
            token_list = as_token_list(tokens)  # once: any token input, as the tree takes
        except RadixError as exc:
            raise BadRequest(str(exc)) from None
        with self.lock:
            depths = self.index.query_tokens(token_list, namespace)
            known = set(self.index.workers())
            stale = [w for w in self._workers if w in known and self.index.is_stale(w)]
        blocks = len(token_list) // self.index.block_size
        costs = {
            w: self.overlap_weight * (blocks - depths.get(w, 0)) + float(loads.get(w, 0))
            for w in self._workers
        }
        order = {w: i for i, w in enumerate(self._workers)}
        best = min(
            self._workers, key=lambda w: (costs[w], -depths.get(w, 0), order[w]), default=None
        )
        return Decision(best, blocks, depths, costs, stale)

    def table(self) -> list[dict[str, Any]]:
        """One row per worker (what ``GET /workers`` returns)."""
        rows = []
        with self.lock:
            known = set(self.index.workers())
            for worker in self._workers:
                counts = self.index.counts(worker) if worker in known else {}
                rows.append(
                    {
                        "worker": str(worker),
                        "blocks": self.index.held(worker) if worker in known else 0,
                        "expected": self.index.expected(worker) if worker in known else 0,
                        "stale": self.index.is_stale(worker) if worker in known else False,
                        "index": counts,
                        "subscriber": self.subscriber.counts(worker),
                    }
                )
        return rows

    def close(self) -> None:
        """Close the subscriber's sockets."""
        with self.lock:
            self.subscriber.close()


def parse_route_request(body: bytes) -> tuple[object, str | None, dict[Hashable, float]]:
    """The tokens, namespace and loads of a ``POST /route`` body. O(size).

    Raises:
        BadRequest: not JSON, not an object, or a field of the wrong type.
    """
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"the body is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise BadRequest('the body must be a JSON object with "tokens"')
    unknown = sorted(set(data) - {"tokens", "namespace", "loads"})
    if unknown:
        raise BadRequest(f"unknown fields: {', '.join(unknown)}")
    if "tokens" not in data or not isinstance(data["tokens"], list):
        raise BadRequest('"tokens" must be a list of token ids')
    loads = data.get("loads") or {}
    if not isinstance(loads, dict):
        raise BadRequest('"loads" must be an object of worker name -> blocks')
    return data["tokens"], data.get("namespace"), loads


def serve_http(router: Router, host: str, port: int) -> ThreadingHTTPServer:
    """Start the API on ``host:port`` (0: any free port) in a daemon thread; returns the
    server (``server_address`` has the port; ``shutdown()`` stops it)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return None  # the live table reports; no line per request

        def _send(self, status: int, payload: object) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/workers":
                self._send(200, router.table())
            elif self.path == "/health":
                with router.lock:
                    self._send(200, {"workers": len(router.workers), "blocks": len(router.index)})
            else:
                self._send(404, {"error": f"no such path: {self.path} (GET /workers, /health)"})

        def do_POST(self) -> None:
            if self.path != "/route":
                self._send(404, {"error": f"no such path: {self.path} (POST /route)"})
                return
            try:
                length = int(self.headers.get("Content-Length", "0"))
                if not 0 <= length <= MAX_BODY:
                    raise BadRequest(f"a body of {length} bytes (at most {MAX_BODY})")
                tokens, namespace, loads = parse_route_request(self.rfile.read(length))
                decision = router.route(tokens, namespace, loads)
            except (BadRequest, ValueError) as exc:
                self._send(400, {"error": str(exc)})
                return
            self._send(200, decision.to_json())

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="route-http", daemon=True).start()
    return server
