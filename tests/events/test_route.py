"""``kachedb-radix route``: the scoring rule, the HTTP/JSON API over a real socket, the
router following real publishers, the demo, and usage errors (a message, exit 2)."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import numpy as np
import pytest
from rich.console import Console

from kachedb_radix.reference import RadixTree
from kachedb_radix.reference.events import BlockHasher, KVEventBatch
from kachedb_radix.reference.router import RouterIndex
from kachedb_radix.spec.cli.main import main as cli_main
from kachedb_radix.spec.router.publisher import EventPublisher
from kachedb_radix.spec.router.service import BadRequest, Router, parse_route_request, serve_http

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
    for loads, message in [({"w9": 1}, "names no worker"), ({"w0": -1}, "a load is a number")]:
        with pytest.raises(BadRequest, match=message):
            router.route([1], loads=loads)
    with pytest.raises(BadRequest, match="namespace"):
        router.route([1], namespace=3)  # type: ignore[arg-type]
    with pytest.raises(BadRequest, match="token"):
        router.route([-1])
    with pytest.raises(BadRequest, match="overlap_weight"):
        Router(RouterIndex(), overlap_weight=0)


def _post(url: str, body: bytes) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _get(url: str) -> tuple[int, object]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_the_http_api_over_a_real_socket(fed: tuple[Router, dict[str, RadixTree]]) -> None:
    router, _ = fed
    server = serve_http(router, "127.0.0.1", 0)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        status, body = _post(f"{base}/route", json.dumps({"tokens": list(range(16))}).encode())
        assert status == 200 and body["worker"] == "w0" and body["depths"] == {"w0": 3, "w1": 1}
        status, body = _post(f"{base}/route", b'{"tokens": [0, 1, 2, 3], "loads": {"w0": 9}}')
        assert status == 200 and body["worker"] == "w1"
        for payload, message in [
            (b"{", "not JSON"),
            (b"[1]", "JSON object"),
            (b'{"tokens": 3}', '"tokens" must be a list'),
            (b'{"tokens": [1], "nope": 1}', "unknown fields: nope"),
            (b'{"tokens": [1], "loads": [1]}', '"loads" must be an object'),
            (b'{"tokens": ["x"]}', "token"),
            (b'{"tokens": [1], "loads": {"w7": 1}}', "names no worker"),
        ]:
            status, body = _post(f"{base}/route", payload)
            assert status == 400 and message in str(body["error"]), (payload, body)
        status, rows = _get(f"{base}/workers")
        assert (
            status == 200 and isinstance(rows, list) and [r["worker"] for r in rows] == ["w0", "w1"]
        )
        assert rows[0]["blocks"] == 3 and rows[0]["stale"] is False and "gaps" in rows[0]["index"]
        assert _get(f"{base}/health") == (200, {"workers": 2, "blocks": 3})
        missing = _get(f"{base}/nope")
        assert missing[0] == 404 and "no such path" in str(missing[1])
        status, body = _post(f"{base}/nope", b"{}")
        assert status == 404 and "POST /route" in str(body)
    finally:
        server.shutdown()
        server.server_close()


def test_parse_route_request_keeps_what_it_reads() -> None:
    assert parse_route_request(b'{"tokens": [1, 2], "namespace": "t"}') == ([1, 2], "t", {})


def test_the_command_follows_real_workers(capsys: pytest.CaptureFixture[str]) -> None:
    tree = RadixTree(16, 4, events=True)
    tree.insert(list(range(8)))
    with EventPublisher(LOOPBACK, LOOPBACK) as publisher:
        for batch in tree.take_events():
            publisher.publish(batch)  # before the router starts: it catches up by replay
        worker = f"w0={publisher.endpoint},{publisher.replay_endpoint}"
        argv = ["route", "--worker", worker, "--block-size", "4", "--duration", "0.3", "--plain"]
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
        (["--listen", "nowhere"], "--listen wants HOST:PORT"),
        (["--demo", "--worker", "a=tcp://x:1"], "give no --worker"),
        (["--demo", "--workers", "0"], "must be >= 1"),
        (["--worker", "a"], "--worker wants NAME=PUB"),
        (["--worker", "a=x,y,z"], "--worker wants NAME=PUB"),
        (["--worker", "a=tcp://127.0.0.1:1", "--worker", "a=tcp://127.0.0.1:2"], "given twice"),
        (["--block-size", "0", "--demo"], "--block-size must be >= 1"),
        (["--overlap-weight", "0", "--demo"], "overlap_weight"),
        (["--worker", "a=not-an-endpoint"], "cannot subscribe"),
        (["--worker", "a=tcp://127.0.0.1:1,bad"], "cannot subscribe"),
    ],
)
def test_usage_errors_exit_2_with_a_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["route", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_taken_listen_port_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    held, port = _busy_port()
    try:
        assert cli_main(["route", "--demo", "--listen", f"127.0.0.1:{port}"]) == 2
    finally:
        held.close()
    assert "cannot listen on" in capsys.readouterr().err


def test_the_table_is_printed_while_following_and_on_ctrl_c(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kachedb_radix.spec.cli import route as route_cli

    router = Router(RouterIndex(BlockHasher(), 4))
    console = Console(no_color=True, width=100)
    monkeypatch.setattr(route_cli, "TABLE_EVERY_S", 0.0)
    route_cli._follow(router, console, 0.3)
    assert capsys.readouterr().out.count("workers") >= 2  # the periodic table and the last

    def interrupted(timeout_ms: int = 0) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(router, "poll", interrupted)
    route_cli._follow(router, console, None)
    assert "workers" in capsys.readouterr().out
    monkeypatch.undo()
    with EventPublisher(LOOPBACK) as never_heard:
        assert not route_cli.caught_up(router, {"ghost": never_heard}, 0.05)
    router.close()


def test_an_oversized_body_is_refused(fed: tuple[Router, dict[str, RadixTree]]) -> None:
    import http.client

    router, _ = fed
    server = serve_http(router, "127.0.0.1", 0)
    try:
        connection = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=5)
        connection.putrequest("POST", "/route")
        connection.putheader("Content-Length", str(10**12))
        connection.endheaders()
        response = connection.getresponse()
        assert response.status == 400 and b"at most" in response.read()
        connection.close()
    finally:
        server.shutdown()
        server.server_close()
