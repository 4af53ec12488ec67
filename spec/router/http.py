"""A small HTTP/1.1 server on asyncio: what ``route``'s API runs on.

Why not :class:`http.server.ThreadingHTTPServer`: measured on this project's 2-core
machine (``docs/events.md``, "Speed of the service"), a thread per connection and its
``email``-based header parser serve a 64-block ``/route`` at a third of the rate of one
asyncio loop with this parser, and with 4x its p99 (the threads take turns on the GIL);
uvicorn with httptools served at half the rate (its ASGI layer costs more than this
whole parser). One loop also lets the router apply its workers' events between
requests without a lock held across anything (:mod:`.service`).

What it speaks (RFC 9112, the subset a JSON API needs), each refusal a status and a
one-line JSON ``{"error": ...}``, the connection closed after it:

* request line ``METHOD SP /path[?query] SP HTTP/1.x``; a method that is not a token,
  a target that is not a path, or a bad line: 400; another HTTP version: 505;
* header lines ``name: value``, the name a token (no space before the colon), no line
  folding, no NUL: otherwise 400; the request line and headers together over
  ``LIMITS["http_header_bytes"]``: 431; more than :data:`MAX_HEADERS` of them: 431;
* then :meth:`~kachedb_radix.spec.inputs.http.RequestGuard.check`: Host, Origin, and a
  ``Content-Length`` body under its cap (400, 403, 413, 421), before the body is read;
  ``Expect: 100-continue`` is answered once the guard has passed (curl sends it);
* keep-alive by default in HTTP/1.1 (``Connection: close`` ends it), pipelined
  requests answered in order; a connection idle for :data:`IDLE_TIMEOUT_S` is closed,
  and one that takes over :data:`HEADER_TIMEOUT_S` to send a request gets 408;
* at most ``LIMITS["http_connections"]`` connections: the next one gets 503 and is
  closed; a client that does not read its answers stops being read from (asyncio's
  write buffer limits), so a slow client costs its own buffer and nothing else.

A handler takes a :class:`Request` and returns a :class:`Response`, or an awaitable of
one (the loop serves others while it runs); an exception in a handler is a bug, and is
answered 500 with its one-line type and message (logged with its traceback), never a
silent close.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus

from kachedb_radix.spec.inputs import LIMITS, dumps_json
from kachedb_radix.spec.inputs.http import HttpRefusal, RequestGuard

#: The most header lines one request may have.
MAX_HEADERS = 100
#: Seconds a connection may stay idle between requests before it is closed.
IDLE_TIMEOUT_S = 60.0
#: Seconds a client may take to send one request's line, headers and body.
HEADER_TIMEOUT_S = 10.0

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TARGET = re.compile(rb"/[\x21-\x7e]*")
_VERSION = re.compile(rb"HTTP/(\d)\.(\d)")

log = logging.getLogger("kachedb_radix.route.http")


@dataclass(frozen=True, slots=True)
class Request:
    """One request: ``path`` without its query, headers by lowercased name."""

    method: str
    path: str
    query: str
    headers: dict[str, list[str]]
    body: bytes


@dataclass(frozen=True, slots=True)
class Response:
    """One answer: a status, a body and its type, and extra headers."""

    status: int
    body: bytes
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()


def json_response(status: int, value: object, *headers: tuple[str, str]) -> Response:
    """``value`` as strict JSON (never NaN or Infinity). O(size)."""
    return Response(status, dumps_json(value).encode(), "application/json", headers)


def error_response(status: int, message: str, *headers: tuple[str, str]) -> Response:
    """``{"error": message}`` with ``status``. O(len(message))."""
    return json_response(status, {"error": message}, *headers)


Handler = Callable[[Request], Response | Awaitable[Response]]


class _Close(Exception):
    """A refusal after which the connection closes."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _reason(status: int) -> str:
    return HTTPStatus(status).phrase  # only standard statuses are sent


@dataclass
class _Counts:
    """What the server has seen (for ``GET /health`` and the tests)."""

    connections: int = 0
    open: int = 0
    requests: int = 0
    refused: int = 0
    errors: int = 0
    busy: int = 0
    timeouts: int = 0


@dataclass
class _Parsed:
    method: str
    path: str
    query: str
    headers: dict[str, list[str]]
    length: int
    keep_alive: bool
    expect_continue: bool
    head_end: int = 0


class HttpServer:
    """Serve ``handler`` on ``host:port`` (0: a free port) from the running loop.

    Args:
        handler: what answers each request.
        host, port: where to listen.
        allow_hosts: more names the guard accepts in ``Host`` (a proxy's).
    """

    def __init__(
        self, handler: Handler, host: str, port: int, allow_hosts: tuple[str, ...] = ()
    ) -> None:
        self.handler = handler
        self.host = host
        self.port = port
        self.allow_hosts = allow_hosts
        self.guard = RequestGuard(host, port, allow_hosts)
        self.counts = _Counts()
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[_Connection] = set()

    async def start(self) -> int:
        """Bind and start accepting; the port listened on.

        Raises:
            OSError: the address cannot be bound.
        """
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self), self.host, self.port, reuse_address=True, backlog=512
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self.guard = RequestGuard(self.host, self.port, self.allow_hosts)
        return self.port

    async def close(self) -> None:
        """Stop accepting and close every connection. Idempotent."""
        if self._server is not None:
            self._server.close()
            for connection in list(self._connections):
                connection.abort()
            await self._server.wait_closed()
            self._server = None


class _Connection(asyncio.Protocol):
    """One client's connection: parse, guard, dispatch, answer in order."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.parsed: _Parsed | None = None  # headers read, body awaited
        self.busy = False  # an async handler runs: later requests wait
        self.paused = False  # the client does not read: stop reading its requests
        self.closing = False
        self.timer: asyncio.TimerHandle | None = None
        self.timer_idle = False  # whether the timer is the idle one (else a request's)

    # -------------------------------------------------------------- asyncio's calls

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        counts = self.server.counts
        counts.connections += 1
        if len(self.server._connections) >= LIMITS["http_connections"].maximum:
            counts.busy += 1
            self._answer(error_response(503, "too many connections; try again"), False)
            return
        self.server._connections.add(self)
        counts.open = len(self.server._connections)
        self._arm(IDLE_TIMEOUT_S, idle=True)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self._disarm()
        self.server._connections.discard(self)
        self.server.counts.open = len(self.server._connections)

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self.buffer += data
        self._process()

    def pause_writing(self) -> None:
        self.paused = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.paused = False
        if self.transport is not None and not self.closing:
            self.transport.resume_reading()
            self._process()

    def abort(self) -> None:
        """Close at once (the server is stopping)."""
        self.closing = True
        if self.transport is not None:
            self.transport.abort()

    # -------------------------------------------------------------- timers

    def _arm(self, seconds: float, *, idle: bool) -> None:
        self._disarm()
        loop = asyncio.get_running_loop()
        self.timer = loop.call_later(seconds, self._timed_out, idle)
        self.timer_idle = idle

    def _disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _timed_out(self, idle: bool) -> None:
        self.timer = None
        if self.closing or self.busy:
            return
        self.server.counts.timeouts += 1
        if idle:
            self.closing = True
            if self.transport is not None:
                self.transport.close()
            return
        self._answer(error_response(408, "the request took too long to arrive"), False)

    # -------------------------------------------------------------- requests

    def _process(self) -> None:
        """Answer every whole request buffered, in order, while nothing waits; then
        time what is left: an idle connection, or a request begun and not finished."""
        while not (self.busy or self.paused or self.closing):
            try:
                parsed = self.parsed or self._head()
            except _Close as refusal:
                self.server.counts.refused += 1
                self._answer(error_response(refusal.status, str(refusal)), False)
                return
            if parsed is None:
                break  # the headers are not all here yet
            self.parsed = parsed
            end = parsed.head_end + parsed.length
            if len(self.buffer) < end:
                break  # the body is not all here yet
            body = bytes(self.buffer[parsed.head_end : end])
            del self.buffer[:end]
            self.parsed = None
            self._dispatch(parsed, body)
        if self.busy or self.closing:
            return
        if not self.buffer and self.parsed is None:
            self._arm(IDLE_TIMEOUT_S, idle=True)
        elif self.timer is None or self.timer_idle:
            self._arm(HEADER_TIMEOUT_S, idle=False)  # a request has begun: it has this long

    def _head(self) -> _Parsed | None:
        """Parse the request line and headers if all here; run the guard. O(their size).

        Raises:
            _Close: a malformed or refused request.
        """
        cap = LIMITS["http_header_bytes"].maximum
        while self.buffer[:2] == b"\r\n":  # RFC 9112 2.2: empty lines before a request
            del self.buffer[:2]
        end = self.buffer.find(b"\r\n\r\n", 0, cap + 4)
        if end < 0:
            if len(self.buffer) > cap:
                raise _Close(431, f"the request line and headers are over {cap:,} bytes")
            return None
        lines = bytes(self.buffer[:end]).split(b"\r\n")
        method, path, query, minor = _request_line(lines[0])
        if len(lines) - 1 > MAX_HEADERS:
            raise _Close(431, f"over {MAX_HEADERS} header lines")
        headers: dict[str, list[str]] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep or not _TOKEN.fullmatch(name) or b"\0" in value:
                raise _Close(400, f"a malformed header line: {line[:60]!r}")
            headers.setdefault(name.decode("ascii").lower(), []).append(
                value.strip(b" \t").decode("latin-1")
            )
        try:
            length = self.server.guard.check(method, headers)
        except HttpRefusal as refusal:
            raise _Close(refusal.status, str(refusal)) from None
        connection = ",".join(headers.get("connection", ())).lower()
        keep_alive = "close" not in connection if minor >= 1 else "keep-alive" in connection
        expect = ",".join(headers.get("expect", ())).strip().lower()
        if expect and expect != "100-continue":
            raise _Close(417, f"Expect {expect!r} is not supported")
        parsed = _Parsed(method, path, query, headers, length, keep_alive, bool(expect), end + 4)
        if parsed.expect_continue and len(self.buffer) < parsed.head_end + length:
            assert self.transport is not None
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return parsed

    def _dispatch(self, parsed: _Parsed, body: bytes) -> None:
        self._disarm()
        self.server.counts.requests += 1
        request = Request(parsed.method, parsed.path, parsed.query, parsed.headers, body)
        try:
            answer = self.server.handler(request)
        except Exception as exc:  # a bug: say so, keep serving
            answer = self._failed(exc)
        if not isinstance(answer, Response):
            self.busy = True
            task = asyncio.ensure_future(answer)
            task.add_done_callback(lambda done: self._finished(done, parsed.keep_alive))
            return
        self._answer(answer, parsed.keep_alive)

    def _finished(self, task: asyncio.Future[Response], keep_alive: bool) -> None:
        self.busy = False
        if self.closing:
            return
        try:
            answer = task.result()
        except Exception as exc:  # a bug in an async handler
            answer = self._failed(exc)
        self._answer(answer, keep_alive)
        self._process()

    def _failed(self, exc: Exception) -> Response:
        self.server.counts.errors += 1
        log.error("a handler failed", exc_info=exc)
        text = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
        return error_response(500, f"internal error ({text})")

    def _answer(self, response: Response, keep_alive: bool) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        head = [
            f"HTTP/1.1 {response.status} {_reason(response.status)}",
            f"Content-Type: {response.content_type}",
            f"Content-Length: {len(response.body)}",
            "Cache-Control: no-store",
            "X-Content-Type-Options: nosniff",
        ]
        head.extend(f"{name}: {value}" for name, value in response.headers)
        if not keep_alive:
            head.append("Connection: close")
        self.transport.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + response.body)
        if not keep_alive:
            self.closing = True
            self._disarm()
            self.transport.close()


def _request_line(line: bytes) -> tuple[str, str, str, int]:
    """``(method, path, query, minor version)`` of a request line. O(len(line)).

    Raises:
        _Close: malformed (400) or not HTTP/1.x (505).
    """
    parts = line.split(b" ")
    if len(parts) != 3:
        raise _Close(400, "a malformed request line (want METHOD /path HTTP/1.1)")
    method, target, version = parts
    if not _TOKEN.fullmatch(method):
        raise _Close(400, f"a malformed method: {method[:20]!r}")
    matched = _VERSION.fullmatch(version)
    if matched is None:
        raise _Close(400, f"a malformed HTTP version: {version[:20]!r}")
    if matched.group(1) != b"1":
        raise _Close(505, f"HTTP/{matched.group(1).decode()} is not served (HTTP/1.1 is)")
    if not _TARGET.fullmatch(target):
        raise _Close(400, f"a request target must be a path, got {target[:40]!r}")
    path, _, query = target.decode("ascii").partition("?")
    return method.decode("ascii"), path, query, int(matched.group(2))


@dataclass
class Routes:
    """Handlers by path and method, answering 404 and 405 (with ``Allow``) for the rest."""

    table: dict[str, dict[str, Handler]] = field(default_factory=dict)

    def add(self, method: str, path: str, handler: Handler) -> None:
        """Serve ``method path`` with ``handler``. O(1)."""
        self.table.setdefault(path, {})[method] = handler

    def __call__(self, request: Request) -> Response | Awaitable[Response]:
        methods = self.table.get(request.path)
        if methods is None:
            known = ", ".join(f"{m} {p}" for p, ms in self.table.items() for m in ms)
            return error_response(404, f"no such path: {request.path[:80]} ({known})")
        handler = methods.get(request.method)
        if handler is None:
            allowed = ", ".join(sorted(methods))
            return error_response(
                405, f"{request.method} is not allowed on {request.path}", ("Allow", allowed)
            )
        return handler(request)
