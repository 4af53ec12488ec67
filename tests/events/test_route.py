"""``kachedb-radix route``: the scoring rule, the HTTP/JSON API over a real socket, the
router following real publishers, the demo, and usage errors (a message, exit 2).

The reproductions of issue 32 each have a test here (they failed on the main branch
this replaced): the demo with workers that never published, 500 demo workers, a load
of 400 digits, of Infinity and of 1e400, ``--duration -1``, a 100,000-deep body."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from rich.console import Console

from kachedb_radix.reference import RadixTree
from kachedb_radix.reference.events import BlockHasher, KVEventBatch
from kachedb_radix.reference.router import RouterIndex
from kachedb_radix.spec.cli.main import main as cli_main
from kachedb_radix.spec.router.publisher import EventPublisher
from kachedb_radix.spec.router.service import (
    OPENAPI,
    BadRequest,
    Router,
    RunningService,
    parse_route_request,
    serve_in_thread,
)

LOOPBACK = "tcp://127.0.0.1:0"


def _sync(router: Router, publishers: dict[str, EventPublisher]) -> None:
    """Poll until the index has every batch published; an empty batch now and then shows
    a batch dropped while the subscription came up as a gap, which the replay fills."""
    deadline = time.monotonic() + 10
    while True:
        router.poll(20)
        known = router.index.workers()
        if all(
            n in known and router.index.expected(n) == p.next_seq for n, p in publishers.items()
        ):
            return
        assert time.monotonic() < deadline, "the router did not catch up"
        for publisher in publishers.values():
            publisher.publish(KVEventBatch(0.0, []))


@pytest.fixture
def fed() -> Iterator[tuple[Router, dict[str, RadixTree]]]:
    """A router following two real publishers: w0 holds blocks 0..11, w1 blocks 0..3."""
    router = Router(RouterIndex(BlockHasher(), 4))
    trees = {"w0": RadixTree(32, 4, events=True), "w1": RadixTree(32, 4, events=True)}
    publishers = {name: EventPublisher(LOOPBACK, LOOPBACK) for name in trees}
    try:
        for name, publisher in publishers.items():
            router.add_worker(name, publisher.endpoint, publisher.replay_endpoint)
        trees["w0"].insert(list(range(12)))
        trees["w1"].insert(list(range(4)))
        for name, tree in trees.items():
            for batch in tree.take_events():
                publishers[name].publish(batch)
        _sync(router, publishers)
        yield router, trees
    finally:
        router.close()
        for publisher in publishers.values():
            publisher.close()


@pytest.fixture
def served(fed: tuple[Router, dict[str, RadixTree]]) -> Iterator[RunningService]:
    """The fed router's API on a loop of its own."""
    service = serve_in_thread(fed[0])
    try:
        yield service
    finally:
        service.close()


def test_the_deepest_match_wins_unless_its_load_outweighs_it(
    fed: tuple[Router, dict[str, RadixTree]],
) -> None:
    """cost = overlap_weight * (blocks - depth) + load; ties: deeper, then first added."""
    router, _ = fed
    decision = router.route(list(range(16)))
    assert decision.worker == "w0" and decision.depths == {"w0": 3, "w1": 1}
    assert decision.costs == {"w0": 1.0, "w1": 3.0} and decision.blocks == 4
    assert router.route(list(range(16)), loads={"w0": 5}).worker == "w1"
    assert router.route([99] * 8).worker == "w0"  # a cold request: all tie, the first
    as_array = router.route(np.arange(16, dtype=np.uint32))  # any token input the tree takes
    assert as_array.blocks == 4 and as_array.costs == decision.costs
    assert router.route(list(range(16)), namespace="other").depths == {}
    refused: list[tuple[dict[str, Any], str]] = [
        ({"w9": 1}, "names no worker"),
        ({"w0": -1}, "a load is from 0"),
        ({"w0": float("inf")}, "a load is from 0"),
        ({"w0": float("nan")}, "a load is from 0"),
        ({"w0": 10**400}, "a load is from 0"),
        ({"w0": "3"}, "a load is a number"),
    ]
    for loads, message in refused:
        with pytest.raises(BadRequest, match=message):
            router.route([1], loads=loads)
    with pytest.raises(BadRequest, match="namespace"):
        router.route([1], namespace=3)  # type: ignore[arg-type]
    with pytest.raises(BadRequest, match="token"):
        router.route([-1])
    for weight in (0, float("inf"), float("nan")):
        with pytest.raises(BadRequest, match="overlap_weight"):
            Router(RouterIndex(), overlap_weight=weight)


def _request(
    service: RunningService,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", service.port, timeout=10)
    try:
        connection.request(method, path, body, headers or {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def _json(service: RunningService, method: str, path: str, body: bytes | None = None,
          headers: dict[str, str] | None = None) -> tuple[int, object]:  # fmt: skip
    status, answer_headers, payload = _request(service, method, path, body, headers)
    assert answer_headers["Content-Type"] == "application/json" and payload
    return status, json.loads(payload)  # strict JSON: no NaN or Infinity literal


def test_the_http_api_over_a_real_socket(served: RunningService) -> None:
    status, body = _json(served, "POST", "/route", json.dumps({"tokens": list(range(16))}).encode())
    assert status == 200 and isinstance(body, dict)
    assert body["worker"] == "w0" and body["depths"] == {"w0": 3, "w1": 1}
    status, body = _json(served, "POST", "/route", b'{"tokens": [0, 1, 2, 3], "loads": {"w0": 9}}')
    assert status == 200 and isinstance(body, dict) and body["worker"] == "w1"
    status, body = _json(served, "POST", "/route", b'{"tokens": [1], "loads": null}')
    assert status == 200
    for payload, message in [
        (b"{", "not JSON"),
        (b"[1]", "Expected `object`"),
        (b'{"tokens": 3}', "Expected `array`"),
        (b'{"tokens": [1], "nope": 1}', "unknown field `nope`"),
        (b'{"tokens": [1], "loads": [1]}', "Expected `object | null`"),
        (b'{"tokens": ["x"]}', "Expected `int`"),
        (b'{"tokens": [-1]}', ">= 0"),
        (b'{"tokens": [4294967296]}', "<= 4294967295"),
        (b'{"tokens": [1], "loads": {"w7": 1}}', "names no worker"),
        (b'{"tokens": [1], "namespace": 5}', "Expected `str | null`"),
        (b"\xff\xfe", "not JSON"),
    ]:
        status, body = _json(served, "POST", "/route", payload)
        assert status == 400 and isinstance(body, dict), payload
        assert message in str(body["error"]) and "\n" not in str(body["error"]), (payload, body)
    status, rows = _json(served, "GET", "/workers")
    assert status == 200 and isinstance(rows, list) and [r["worker"] for r in rows] == ["w0", "w1"]
    assert rows[0]["blocks"] == 3 and rows[0]["stale"] is False and "gaps" in rows[0]["index"]
    assert rows[0]["hashes"]["state"] == "ok" and rows[0]["catching_up"] is False
    status, health = _json(served, "GET", "/health")
    assert status == 200 and health == {
        "ok": True,
        "workers": 2,
        "blocks": 3,
        "stale": [],
        "catching_up": [],
        "problems": [],
    }
    status, missing = _json(served, "GET", "/nope")
    assert status == 404 and "no such path" in str(missing)
    status, headers, payload = _request(served, "GET", "/route")
    assert status == 405 and headers["Allow"] == "POST" and b"not allowed" in payload
    status, document = _json(served, "GET", "/openapi.json")
    committed = json.loads(OPENAPI.read_text())
    committed["components"]["schemas"]["Loads"]["propertyNames"]["enum"] = ["w0", "w1"]
    assert status == 200 and document == committed


def test_the_batch_endpoint_answers_each_request_as_route_does(served: RunningService) -> None:
    requests = [
        {"tokens": list(range(16))},
        {"tokens": [0, 1, 2, 3], "loads": {"w0": 9}},
        {"tokens": [5] * 9, "namespace": "t"},
    ] * 30  # more than one slice of the loop
    batch = json.dumps({"requests": requests}).encode()
    status, body = _json(served, "POST", "/route/batch", batch)
    assert status == 200 and isinstance(body, dict)
    singles = [
        _json(served, "POST", "/route", json.dumps(request).encode())[1] for request in requests[:3]
    ]
    assert body["decisions"] == singles * 30
    status, body = _json(served, "POST", "/route/batch", b'{"requests": [{"tokens": [1]}, '
                         b'{"tokens": [1], "loads": {"zz": 1}}]}')  # fmt: skip
    assert status == 400 and "requests[1]: loads names no worker" in str(body)
    too_many = json.dumps({"requests": [{"tokens": []}] * 4097}).encode()
    status, body = _json(served, "POST", "/route/batch", too_many)
    assert status == 400 and "length <= 4096" in str(body)
    assert _json(served, "POST", "/route/batch", b'{"requests": []}') == (200, {"decisions": []})


@pytest.mark.parametrize(
    ("loads", "why"),
    [
        ('{"w0": ' + "9" * 400 + "}", "out of range"),  # killed the handler (OverflowError)
        ('{"w0": 1e400}', "out of range"),  # answered "w0": Infinity
        ('{"w0": Infinity}', "not JSON"),
        ('{"w0": NaN}', "not JSON"),
        ('{"w0": 1e16}', "<= 1000000000000000.0"),
    ],
)
def test_a_load_that_is_no_finite_number_is_refused(
    served: RunningService, loads: str, why: str
) -> None:
    """Issue 32: a 400-digit load killed the handler; Infinity and 1e400 were answered
    with ``"w0": Infinity`` (not JSON). Now a 400 naming it; the API serves on."""
    status, body = _json(served, "POST", "/route", f'{{"tokens": [1], "loads": {loads}}}'.encode())
    assert status == 400 and why in str(body)
    assert _json(served, "POST", "/route", b'{"tokens": [1]}')[0] == 200


def test_a_deeply_nested_body_is_refused_in_one_line(served: RunningService) -> None:
    """Issue 32: 100,000 nested brackets posted to /route killed the handler (empty reply)."""
    deep = ('{"a":' * 100_000 + "1" + "}" * 100_000).encode()
    status, body = _json(served, "POST", "/route", deep)
    assert status == 400 and "unknown field `a`" in str(body)
    deeper = b'{"tokens": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    status, body = _json(served, "POST", "/route", deeper)
    assert status == 400 and "Expected `int`, got `array`" in str(body)
    status, body = _json(served, "POST", "/route/batch", b'{"requests": ' + b"[" * 100_000 + b"}")
    assert status == 400


def test_parse_route_request_keeps_what_it_reads() -> None:
    assert parse_route_request(b'{"tokens": [1, 2], "namespace": "t"}') == ([1, 2], "t", {})
    with pytest.raises(BadRequest, match="the body: not JSON"):
        parse_route_request(b"{")


@pytest.mark.parametrize(
    ("headers", "status", "message"),
    [
        ({"Host": "evil.example:PORT"}, 421, "not an address this server serves"),
        ({"Host": "127.0.0.1:1"}, 421, "not an address"),
        ({"Host": "localhost.evil.example"}, 421, "not an address"),
        ({"Host": "a b"}, 400, "is not NAME[:PORT]"),
        ({"Origin": "http://evil.example"}, 403, "cross-site"),
        ({"Origin": "null"}, 403, "cross-site"),
        ({"Origin": "http://127.0.0.1:1"}, 403, "cross-site"),
        ({"Sec-Fetch-Site": "cross-site"}, 403, "Sec-Fetch-Site"),
        ({"Transfer-Encoding": "chunked"}, 400, "Transfer-Encoding"),
    ],
)
def test_foreign_hosts_and_cross_site_writes_are_refused(
    served: RunningService, headers: dict[str, str], status: int, message: str
) -> None:
    """Issue 32: DNS rebinding (a foreign Host) and cross-site writes (a foreign Origin,
    a text/plain POST needing no preflight) are refused before the body is read."""
    headers = {k: v.replace("PORT", str(served.port)) for k, v in headers.items()}
    headers.setdefault("Content-Type", "text/plain")
    got, body = _json(served, "POST", "/route", b'{"tokens": [1]}', headers)
    assert got == status and message in str(body)
    same = {"Origin": f"http://localhost:{served.port}", "Host": f"localhost:{served.port}"}
    assert _json(served, "POST", "/route", b'{"tokens": [1]}', same)[0] == 200
    if "Origin" in headers or "Sec-Fetch-Site" in headers:  # reads need no Origin check
        assert _json(served, "GET", "/health", None, headers)[0] == 200


def _raw(port: int, data: bytes, read: bool = True) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        if not read:
            return b""
        chunks: list[bytes] = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


def test_the_http_layer_refuses_what_is_not_http_in_one_line(served: RunningService) -> None:
    port = served.port
    host = f"Host: 127.0.0.1:{port}\r\n".encode()
    cases = [
        (b"GARBAGE\r\n\r\n", b"400", b"malformed request line"),
        (b"GET /health HTTP/2.0\r\n" + host + b"\r\n", b"505", b"HTTP/2"),
        (b"GET /health HTTX/1.1\r\n" + host + b"\r\n", b"400", b"HTTP version"),
        (b"G(T /health HTTP/1.1\r\n" + host + b"\r\n", b"400", b"method"),
        (b"GET http://x/health HTTP/1.1\r\n" + host + b"\r\n", b"400", b"must be a path"),
        (b"GET /health HTTP/1.1\r\n" + host + b" folded\r\n\r\n", b"400", b"header line"),
        (b"GET /health HTTP/1.1\r\n" + host + b"Bad Name: x\r\n\r\n", b"400", b"header line"),
        (b"GET /health HTTP/1.1\r\n\r\n", b"400", b"exactly one Host"),
        (b"GET /health HTTP/1.1\r\n" + host + host + b"\r\n", b"400", b"exactly one Host"),
        (
            b"GET /health HTTP/1.1\r\n" + host + b"X: " + b"a" * 20000 + b"\r\n\r\n",
            b"431",
            b"over 16,384 bytes",
        ),
        (b"GET /health HTTP/1.1\r\n" + host + b"X: y\r\n" * 101 + b"\r\n", b"431", b"over 100"),
        (b"POST /route HTTP/1.1\r\n" + host + b"Content-Length: x\r\n\r\n", b"400", b"byte count"),
        (
            b"POST /route HTTP/1.1\r\n" + host + b"Content-Length: 1\r\nContent-Length: 2\r\n\r\n",
            b"400",
            b"differ",
        ),
        (
            b"POST /route HTTP/1.1\r\n" + host + b"Content-Length: 99999999999\r\n\r\n",
            b"413",
            b"over the cap",
        ),
        (b"POST /route HTTP/1.1\r\n" + host + b"Expect: magic\r\n\r\n", b"417", b"Expect"),
    ]
    for request, status, message in cases:
        answer = _raw(port, request)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.split(b" ")[1] == status and message in body, (request[:60], answer[:300])
        assert b"Connection: close" in head and json.loads(body)["error"]


def test_keep_alive_pipelining_and_expect_continue(served: RunningService) -> None:
    port = served.port
    host = f"Host: 127.0.0.1:{port}\r\n".encode()
    body = b'{"tokens": [0, 1, 2, 3]}'
    one = b"POST /route HTTP/1.1\r\n" + host + b"Content-Length: %d\r\n\r\n" % len(body) + body
    last = b"GET /health HTTP/1.1\r\n" + host + b"Connection: close\r\n\r\n"
    answer = _raw(port, b"\r\n" + one * 3 + last)  # a stray CRLF first is allowed
    assert answer.count(b"HTTP/1.1 200 OK") == 4 and answer.count(b'"worker":"w0"') == 3
    old = _raw(port, b"GET /health HTTP/1.0\r\n" + host + b"\r\n")  # 1.0: closes after one
    assert old.startswith(b"HTTP/1.1 200") and b"Connection: close" in old
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"POST /route HTTP/1.1\r\n" + host + b"Expect: 100-continue\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body))  # fmt: skip
        assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 OK")


def test_slow_clients_cost_only_themselves(
    fed: tuple[Router, dict[str, RadixTree]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that sends half a request and stalls gets 408; one that never reads its
    answers stops being read from; an idle one is closed; others are served meanwhile;
    over the connection cap a client gets 503."""
    from kachedb_radix.spec.inputs import limits
    from kachedb_radix.spec.router import http as route_http

    monkeypatch.setattr(route_http, "HEADER_TIMEOUT_S", 0.3)
    monkeypatch.setattr(route_http, "IDLE_TIMEOUT_S", 0.3)
    service = serve_in_thread(fed[0])
    try:
        port = service.port
        host = f"Host: 127.0.0.1:{port}\r\n".encode()
        stalled = socket.create_connection(("127.0.0.1", port), timeout=10)
        stalled.sendall(b"POST /route HTTP/1.1\r\n" + host)
        greedy = socket.create_connection(("127.0.0.1", port), timeout=10)
        body = json.dumps({"tokens": list(range(16_000))}).encode()
        request = b"POST /route HTTP/1.1\r\n" + host + b"Content-Length: %d\r\n\r\n" % len(body)
        greedy.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            for _ in range(400):  # never reads: its answers fill the buffers
                greedy.send(request + body)
        assert _json(service, "GET", "/health")[0] == 200  # others are served meanwhile
        stalled.settimeout(10)
        assert stalled.recv(65536).startswith(b"HTTP/1.1 408")
        idle = socket.create_connection(("127.0.0.1", port), timeout=10)
        assert idle.recv(10) == b""  # closed after the idle timeout
        for sock in (stalled, greedy, idle):
            sock.close()
        counts = service.service.http.counts
        assert counts.timeouts >= 2 and counts.errors == 0
        monkeypatch.setitem(limits.LIMITS, "http_connections", limits.Limit("c", 1, "", "", ""))
        holder = socket.create_connection(("127.0.0.1", port), timeout=10)
        time.sleep(0.05)
        assert _raw(port, b"").startswith(b"HTTP/1.1 503")
        holder.close()
    finally:
        service.close()


def test_a_handler_that_fails_answers_500_and_the_server_serves_on(
    served: RunningService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in a handler is a 500 with its one-line type, never a silent close."""
    router = served.service.router

    def broken(*args: object) -> None:
        raise RuntimeError("planted\nbug")

    monkeypatch.setattr(router, "decide", broken)
    status, body = _json(served, "POST", "/route", b'{"tokens": [1]}')
    assert status == 500 and body == {"error": "internal error (RuntimeError: planted bug)"}
    status, body = _json(served, "POST", "/route/batch", b'{"requests": [{"tokens": [1]}]}')
    assert status == 500 and "planted bug" in str(body)
    monkeypatch.undo()
    assert _json(served, "POST", "/route", b'{"tokens": [1]}')[0] == 200
    assert served.service.http.counts.errors == 2


def test_lookups_never_wait_for_the_intake(fed: tuple[Router, dict[str, RadixTree]]) -> None:
    """Issue 34: the intake never holds the lock lookups need. A worker whose replay
    socket never answers keeps a replay out for 30 s; meanwhile the lock is free and
    /route answers (the replay is still out after the answer came)."""
    import zmq

    router, _ = fed
    silent = router.subscriber.context.socket(zmq.ROUTER)
    silent.bind(LOOPBACK)
    router.subscriber.replay_timeout_ms = 30_000
    with EventPublisher(LOOPBACK) as publisher:
        router.add_worker("w2", publisher.endpoint, silent.getsockopt_string(zmq.LAST_ENDPOINT),
                          wait=False)  # fmt: skip
        service = serve_in_thread(router)
        try:
            assert router.subscriber.replaying("w2")
            assert router.lock.acquire(blocking=False)
            router.lock.release()
            status, body = _json(service, "POST", "/route", b'{"tokens": [0, 1, 2, 3]}')
            assert status == 200 and isinstance(body, dict) and body["worker"] == "w0"
            assert router.subscriber.replaying("w2")
            rows = _json(service, "GET", "/workers")[1]
            assert isinstance(rows, list) and rows[2]["catching_up"] is True
            health = _json(service, "GET", "/health")[1]
            assert isinstance(health, dict) and health["catching_up"] == ["w2"]
        finally:
            service.close()
    silent.close(linger=0)


def test_the_command_follows_real_workers(capsys: pytest.CaptureFixture[str]) -> None:
    tree = RadixTree(16, 4, events=True)
    tree.insert(list(range(8)))
    with EventPublisher(LOOPBACK, LOOPBACK) as publisher:
        for batch in tree.take_events():
            publisher.publish(batch)  # before the router starts: it catches up by replay
        worker = f"w0={publisher.endpoint},{publisher.replay_endpoint}"
        argv = ["route", "--worker", worker, "--block-size", "4", "--duration", "0.5", "--plain"]
        assert cli_main(argv) == 0
    out = capsys.readouterr().out
    assert "API on http://127.0.0.1:" in out and "w0" in out and "│      2 │" in out


def test_the_demo_routes_better_than_round_robin(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["route", "--demo", "--workers", "3", "--requests", "150", "--blocks", "400", "--plain"]
    assert cli_main(argv) == 0
    out = capsys.readouterr().out
    assert "the index holds exactly each worker's blocks" in out
    line = next(line for line in out.splitlines() if "routed by prefix" in line)
    routed, robin = (float(part.split("%")[0].split()[-1]) for part in line.split("against"))
    assert routed > robin


@pytest.mark.parametrize("argv", [["--requests", "5"], ["--blocks", "1", "--requests", "5"]])
def test_the_demo_with_workers_that_never_published(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 32: ``route --demo --requests 5`` (and ``--blocks 1``) failed with "no worker
    'w3' in this index": a worker that never published holds nothing."""
    assert cli_main(["route", "--demo", "--plain", *argv]) == 0
    captured = capsys.readouterr()
    assert "the index holds exactly each worker's blocks" in captured.out
    assert "Traceback" not in captured.err


def _busy_port() -> tuple[socket.socket, int]:
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    port: int = held.getsockname()[1]
    return held, port


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "give --worker"),
        (["--demo", "--worker", "a=tcp://x:1"], "give no --worker"),
        (["--worker", "a=tcp://127.0.0.1:1", "--worker", "a=tcp://127.0.0.1:2"], "given twice"),
        (["--worker", "a=not-an-endpoint"], "cannot subscribe"),
        (["--worker", "a=tcp://127.0.0.1:1,bad"], "cannot subscribe"),
        (["--worker", "a"], "--worker 'a' wants NAME=PUB[,REPLAY] (or --learn)"),
        (["--learn", "--worker", "a=tcp://x:1"], "--learn takes bare worker names"),
        (["--demo", "--learn"], "give no --learn"),
    ],
)
def test_usage_errors_exit_2_with_a_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["route", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--demo", "--workers", "500"], "500 is over the most allowed, 64"),  # ZMQError before
        (["--demo", "--workers", "0"], "below the least allowed, 1"),
        (["--demo", "--duration", "-1"], "-1 must be at least 0"),  # exited at once before
        (["--demo", "--duration", "nan"], "not a finite number"),
        (["--demo", "--requests", "0"], "below the least allowed"),
        (["--demo", "--requests", "99999999999"], "over the most allowed"),
        (["--demo", "--blocks", "99999999999"], "over the most allowed"),
        (["--block-size", "0", "--demo"], "below the least allowed, 1"),
        (["--overlap-weight", "0", "--demo"], "must be above 0"),
        (["--overlap-weight", "inf", "--demo"], "not a finite number"),
        (["--listen", "nowhere"], "is not HOST:PORT"),
        (["--listen", "127.0.0.1:99999"], "is not HOST:PORT"),
        (["--worker", "a=x,y,z"], "want NAME=PUB[,REPLAY]"),
        (["--worker", "=tcp://x:1"], "want NAME=PUB[,REPLAY]"),
    ],
)
def test_options_are_checked_at_parse_time(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every option through spec/inputs' argtypes: exit 2, one line naming it."""
    with pytest.raises(SystemExit) as exited:
        cli_main(["route", *argv])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_too_many_workers_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from kachedb_radix.spec.inputs import limits

    monkeypatch.setitem(limits.LIMITS, "route_workers", limits.Limit("w", 1, "", "", ""))
    argv = ["route", "--worker", "a=tcp://127.0.0.1:1", "--worker", "b=tcp://127.0.0.1:2"]
    assert cli_main(argv) == 2
    assert "2 --worker options, over the most allowed, 1" in capsys.readouterr().err


def test_running_out_of_sockets_is_a_clean_refusal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 32: ``--demo --workers 500`` died of ZMQError "Too many open files"; the cap
    refuses it now, and if sockets run out anyway the message says what to do."""
    import zmq

    def full(*args: object, **kwargs: object) -> None:
        raise zmq.ZMQError(24)  # EMFILE

    monkeypatch.setattr(EventPublisher, "__init__", full)
    assert cli_main(["route", "--demo", "--workers", "2", "--plain"]) == 2
    err = capsys.readouterr().err
    assert "too many open files (raise the limit with ulimit -n" in err and "Traceback" not in err


def test_a_taken_listen_port_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    held, port = _busy_port()
    try:
        assert cli_main(["route", "--demo", "--listen", f"127.0.0.1:{port}"]) == 2
        with EventPublisher(LOOPBACK) as publisher:
            argv = ["route", "--worker", f"a={publisher.endpoint}", "--listen", f"127.0.0.1:{port}"]
            assert cli_main(argv) == 2
    finally:
        held.close()
    assert capsys.readouterr().err.count("cannot listen on") == 2


def test_listening_beyond_loopback_says_there_is_no_authentication(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["route", "--demo", "--requests", "3", "--listen", "0.0.0.0:0", "--plain"]
    assert cli_main(argv) == 0
    err = capsys.readouterr().err
    assert "this API has no authentication" in err and "reachable from other machines" in err
    assert cli_main(["route", "--demo", "--requests", "3", "--plain"]) == 0
    assert "authentication" not in capsys.readouterr().err


def test_sigterm_stops_the_router_with_its_table() -> None:
    """The real command, in a process of its own: SIGTERM (or Ctrl-C) ends it with its
    last table and status 0, no traceback."""
    import signal
    import subprocess
    import sys

    with EventPublisher(LOOPBACK) as publisher:
        command = [sys.executable, "-m", "kachedb_radix.spec", "route", "--plain",
                   "--worker", f"w0={publisher.endpoint}"]  # fmt: skip
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert process.stdout is not None
        assert "API on http://127.0.0.1:" in process.stdout.readline()
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    assert process.returncode == 0 and "workers" in out and "Traceback" not in err


def test_the_table_is_printed_while_following(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kachedb_radix.spec.cli import route as route_cli

    router = Router(RouterIndex(BlockHasher(), 4))
    console = Console(no_color=True, width=100)
    monkeypatch.setattr(route_cli, "TABLE_EVERY_S", 0.05)

    async def timed() -> int:
        await route_cli._follow(router, console, 0.3)
        return 0

    assert route_cli._run_loop(timed) == 0
    assert capsys.readouterr().out.count("workers") >= 2  # the periodic table and the last

    with EventPublisher(LOOPBACK) as never_heard:
        never_heard.publish(KVEventBatch(0.0, []), send=False)
        assert not route_cli.caught_up(router, {"ghost": never_heard}, 0.05)
    router.close()


def test_the_command_runs_its_loop_beside_a_running_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Called from a thread that runs an asyncio loop already (a notebook), the command
    runs its own loop on a thread of its own."""
    import asyncio
    import threading

    statuses: list[int] = []

    def in_a_loop(argv: list[str]) -> None:
        async def inside() -> None:
            statuses.append(cli_main(argv))

        thread = threading.Thread(target=lambda: asyncio.run(inside()))
        thread.start()
        thread.join(60)

    in_a_loop(["route", "--demo", "--requests", "3", "--plain"])
    with EventPublisher(LOOPBACK) as publisher:
        in_a_loop(["route", "--worker", f"w0={publisher.endpoint}", "--duration", "0.2", "--plain"])
    assert statuses == [0, 0] and "workers" in capsys.readouterr().out


def test_an_oversized_body_is_refused_unread(served: RunningService) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", served.port, timeout=5)
    connection.putrequest("POST", "/route")
    connection.putheader("Content-Length", str(10**12))
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 413 and b"over the cap of 16,777,216 bytes" in response.read()
    connection.close()


def test_the_service_closes_twice_and_rewatches_a_dropped_replay_socket(
    fed: tuple[Router, dict[str, RadixTree]],
) -> None:
    """A replay that times out drops its socket: the loop stops watching it; closing
    the service (and the thread it runs on) twice does no harm."""
    import asyncio

    import zmq

    from kachedb_radix.spec.router.service import RouteService, _url_host

    router, _ = fed
    silent = router.subscriber.context.socket(zmq.ROUTER)
    silent.bind(LOOPBACK)
    router.subscriber.replay_timeout_ms = 50
    with EventPublisher(LOOPBACK) as publisher:
        replay = silent.getsockopt_string(zmq.LAST_ENDPOINT)
        router.add_worker("w2", publisher.endpoint, replay, wait=False)
        service = serve_in_thread(router)
        try:
            deadline = time.monotonic() + 10
            while router.subscriber.replaying("w2"):
                assert time.monotonic() < deadline
                time.sleep(0.02)
            time.sleep(0.2)  # the tick after the timeout rewatches
            assert len(service.service._watched) == len(router.subscriber.sockets())
        finally:
            service.close()
            service.close()
    silent.close(linger=0)
    idle = RouteService(router, "127.0.0.1", 0)
    asyncio.run(idle.close())  # never started
    assert [_url_host(h) for h in ("0.0.0.0", "", "::", "::1", "10.0.0.5")] == [
        "127.0.0.1",
        "127.0.0.1",
        "[::1]",
        "[::1]",
        "10.0.0.5",
    ]


def test_the_demo_on_the_reference_twin(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["route", "--demo", "--impl", "reference", "--requests", "20", "--plain"]
    assert cli_main(argv) == 0
    assert "the index holds exactly each worker's blocks" in capsys.readouterr().out


def test_a_learning_router_holds_what_it_sent_each_worker() -> None:
    """``route --learn``: no streams; a worker holds the blocks of every request this
    router sent it, never forgotten (the planner's ``--index gateway``)."""
    router = Router(RouterIndex(BlockHasher("xxh3_64"), 4))
    router.add_learning_worker("w0")
    router.add_learning_worker("w1")
    with pytest.raises(Exception, match="a worker already"):
        router.add_learning_worker("w0")
    with pytest.raises(Exception, match="a worker already"):
        router.add_worker("w1", "tcp://127.0.0.1:1")
    first = router.route(list(range(12)))
    assert first.worker == "w0" and first.depths == {}
    assert router.route(list(range(12)), loads={"w0": 2}).depths == {"w0": 3}
    assert router.route([7] * 4, loads={"w0": 9}).worker == "w1"
    rows = router.table()
    assert [(r["worker"], r["blocks"], r["catching_up"]) for r in rows] == [
        ("w0", 3, False),
        ("w1", 1, False),
    ]
    assert router.health()["ok"] and router.health()["catching_up"] == []
    assert router.route([]).worker == "w0"  # no blocks: nothing learned
    router.close()
    service_argv = ["route", "--learn", "--worker", "w0", "--worker", "w1", "--duration", "0.2"]
    assert cli_main([*service_argv, "--plain"]) == 0
