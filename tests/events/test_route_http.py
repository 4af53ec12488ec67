"""route's HTTP/1.1 layer (spec/router/http.py) driven directly, through a transport
that records what it is told: flow control (a client that does not read stops being
read from), timers, closing, aborting, and asynchronous handlers answering in order."""

from __future__ import annotations

import asyncio
from typing import Any

from kachedb_radix.spec.router.http import (
    HttpServer,
    Request,
    Response,
    Routes,
    _Connection,
    json_response,
)


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.reading = True
        self.closed = False
        self.aborted = False

    def write(self, data: Any) -> None:
        self.written.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


GET = b"GET /x HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n"


def _server(routes: Routes) -> HttpServer:
    server = HttpServer(routes, "127.0.0.1", 1)
    return server


def _connection(server: HttpServer) -> tuple[_Connection, _Transport]:
    connection = _Connection(server)
    transport = _Transport()
    connection.connection_made(transport)
    return connection, transport


def test_a_client_that_does_not_read_is_not_read_from_until_it_does() -> None:
    async def run() -> None:
        routes = Routes()
        routes.add("GET", "/x", lambda _: json_response(200, {"ok": True}))
        connection, transport = _connection(_server(routes))
        connection.pause_writing()  # its answers fill the buffers
        assert not transport.reading
        connection.data_received(GET * 3)
        assert transport.written == []  # nothing answered while it does not read
        connection.resume_writing()
        assert transport.reading and len(transport.written) == 3
        connection.abort()
        assert transport.aborted
        connection.data_received(GET)  # after closing: ignored
        assert len(transport.written) == 3
        connection.resume_writing()
        connection.connection_lost(None)

    asyncio.run(run())


def test_async_handlers_answer_in_order_and_their_failures_are_500s() -> None:
    async def run() -> None:
        order: list[str] = []

        async def slow(request: Request) -> Response:
            await asyncio.sleep(0.01)
            order.append("slow")
            return json_response(200, {"slow": True})

        async def broken(request: Request) -> Response:
            raise RuntimeError("planted")

        routes = Routes()
        routes.add("GET", "/slow", slow)
        routes.add("GET", "/broken", broken)

        def fast(request: Request) -> Response:
            order.append("fast")
            return json_response(200, {})

        routes.add("GET", "/x", fast)
        connection, transport = _connection(_server(routes))
        host = b"Host: 127.0.0.1:1\r\n\r\n"
        connection.data_received(
            b"GET /slow HTTP/1.1\r\n" + host + GET + b"GET /broken HTTP/1.1\r\n" + host
        )
        await asyncio.sleep(0.1)
        assert order == ["slow", "fast"]
        statuses = [chunk.split(b" ")[1] for chunk in transport.written]
        assert statuses == [b"200", b"200", b"500"]
        connection.connection_lost(None)
        # A handler that ends after its connection closed answers nothing.
        connection2, transport2 = _connection(_server(routes))
        connection2.data_received(b"GET /slow HTTP/1.1\r\n" + host)
        connection2.connection_lost(None)
        await asyncio.sleep(0.05)
        assert transport2.written == []

    asyncio.run(run())


def test_timers_end_stalled_and_idle_connections() -> None:
    async def run() -> None:
        from kachedb_radix.spec.router import http

        http.HEADER_TIMEOUT_S, http.IDLE_TIMEOUT_S = 0.02, 0.02
        try:
            routes = Routes()
            routes.add("GET", "/x", lambda _: json_response(200, {}))
            server = _server(routes)
            stalled, transport = _connection(server)
            stalled.data_received(b"GET /x HTTP/1.1\r\n")
            await asyncio.sleep(0.1)
            assert transport.written[0].startswith(b"HTTP/1.1 408") and transport.closed
            idle, transport = _connection(server)
            idle.data_received(GET)
            await asyncio.sleep(0.1)
            assert transport.closed and len(transport.written) == 1
            busy, transport = _connection(server)
            busy.busy = True
            busy._timed_out(idle=True)  # a handler is running: the timer waits for it
            assert not transport.closed
            assert server.counts.timeouts == 2
        finally:
            http.HEADER_TIMEOUT_S, http.IDLE_TIMEOUT_S = 10.0, 60.0

    asyncio.run(run())


def test_the_server_closes_twice_without_harm() -> None:
    async def run() -> None:
        server = HttpServer(Routes(), "127.0.0.1", 0)
        await server.start()
        assert server.port > 0
        await server.close()
        await server.close()

    asyncio.run(run())
