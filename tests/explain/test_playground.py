"""``kachedb-radix explain --serve``: the playground, over a real socket.

The form's fields become trace steps (bad ones refused with a message, the session
unchanged); the session records again after each step, undoes, loads a trace and saves
itself as one. In real headless Chromium the page answers an insert typed into it, a
pinned match, a refusal with its rule, and the rule's text; the command prints its
address, refuses a port already taken with a clear message, and stops on Ctrl-C without
a traceback.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from kachedb_radix.spec.explain.serve import (
    PlayError,
    PlayServer,
    Session,
    form_step,
    tokenize,
)


@pytest.fixture
def server() -> Iterator[PlayServer]:
    """A playground on a free loopback port, served from a thread; stopped after."""
    running = PlayServer(Session(), 0)
    thread = threading.Thread(target=running.serve_forever, daemon=True)
    thread.start()
    yield running
    running.shutdown()
    running.server_close()
    thread.join(5)


def test_the_form_becomes_steps_and_bad_fields_say_why() -> None:
    """The byte tokenizer, token ids, each operation; a malformed field is a PlayError
    naming it, and the session is unchanged by a refused change."""
    assert tokenize("hé", "text") == [104, 195, 169]  # UTF-8 bytes
    assert tokenize("1, 2 3", "ids") == [1, 2, 3]
    with pytest.raises(PlayError, match="'x' is not a token id"):
        tokenize("1 x", "ids")
    insert = form_step({"op": "insert", "tokens": "abcd", "input": "text", "pin": True})
    assert insert == {"op": "insert", "tokens": [97, 98, 99, 100], "namespace": None, "pin": True,
                      "note": 'typed as text: "abcd"'}  # fmt: skip
    assert form_step({"op": "evict", "number": "2"}) == {"op": "evict", "count": 2}
    assert form_step({"op": "release", "number": 1}) == {"op": "release", "lease": 1}
    for fields, message in (
        ({"op": "drop"}, "unknown operation"),
        ({"op": "match", "tokens": ""}, "type a prompt"),
        ({"op": "evict", "number": "two"}, "evict needs a whole number"),
        ({"op": "reset", "number": 0, "block_size": 4}, "a pool of 1 to"),
    ):
        with pytest.raises(PlayError, match=message):
            form_step(fields)
    session = Session()
    before = session.trace()
    data = session.apply(form_step({"op": "insert", "tokens": "abcdefgh", "input": "text"}))
    assert len(data["frames"]) == 2 and data["live"] is True
    with pytest.raises(PlayError):
        session.load([{"op": "insert", "tokens": [1], "namespace": None, "pin": False}])
    assert len(session.steps) == 2
    session.undo()
    assert session.trace() == before


def test_the_playground_answers_in_the_browser(browser: Any, server: PlayServer) -> None:
    """An insert typed into the page is drawn as the tree's answer; a pinned match marks
    the walk and the pin; token ids out of range are refused by the tree (R-TOK-3, its
    text rendered); a malformed field is refused by the form; the session saves as a trace
    that opens again."""
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.set_default_timeout(30_000)  # a loaded two-core CI machine
    page.goto(server.url)
    page.fill("#play-tokens", "hello world, hello!")
    page.click("#play-go")
    page.wait_for_function("document.body.dataset.live === '2'")
    tree = page.locator("svg.tree")
    edge = tree.locator('g.node[data-kind="edge"]')
    assert edge.count() == 1 and edge.get_attribute("data-blocks") == "0 1 2 3"
    assert "new" in (edge.get_attribute("data-flags") or "")
    assert page.locator(".counts").inner_text().startswith("24 blocks: 4 cached")
    page.select_option("#play-op", "match")
    page.fill("#play-tokens", "hello world")
    page.check("#play-pin")
    page.click("#play-go")
    page.wait_for_function("document.body.dataset.live === '3'")
    assert "matched 8 tokens: #0-1, lease 1" in page.locator(".outcome").inner_text()
    assert "walk" in (tree.locator('g.node[data-node="k2"]').get_attribute("data-flags") or "")
    page.select_option("#play-input", "ids")
    page.fill("#play-tokens", "1 2 x")
    page.click("#play-go")
    page.locator("#play-error").wait_for(state="visible")
    # The browser itself refuses it (nothing is sent), saying why as the server would.
    said = page.locator("#play-error").inner_text()
    assert said == "prompt: 'x' is not a token id (a whole number)"
    page.uncheck("#play-pin")
    page.select_option("#play-op", "insert")
    page.fill("#play-tokens", "1 2 3 4294967296")
    page.click("#play-go")
    page.wait_for_function("document.body.dataset.live === '4'")
    assert page.locator("#play-error").is_hidden()
    assert "error: token_range" in page.locator(".outcome").inner_text()
    page.locator('.rules a.rule[data-rule="R-TOK-3"]').click()
    popup = page.locator("#rule-body")
    assert popup.locator("code").first.inner_text() == "[0, 2**32)"  # not bold garbage
    trace = page.evaluate("fetch('/trace.jsonl').then(r => r.text())")
    steps = [json.loads(line) for line in trace.splitlines()]
    assert [step["op"] for step in steps] == ["reset", "insert", "match", "insert"]
    page.click("#play-undo")
    page.wait_for_function("document.body.dataset.live === '3'")
    page.close()
    # The refused field never reached the server: no HTTP 400 logged, nothing went wrong.
    assert problems == []
    Session(steps)  # the saved trace opens again


def test_the_command_serves_refuses_a_taken_port_and_stops_on_ctrl_c() -> None:
    """``explain --serve``: its address on stdout, the page over HTTP; a second one on the
    same port exits 2 saying the port is taken; Ctrl-C (SIGINT) ends it with status 0 and
    no traceback."""
    command = [sys.executable, "-m", "kachedb_radix.spec", "explain", "--serve", "--port", "0"]
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert first.stdout is not None
        line = first.stdout.readline()
        assert line.startswith("playground: http://127.0.0.1:"), line
        url = line.split()[1]
        with urllib.request.urlopen(url, timeout=10) as answer:
            assert b'id="play-form"' in answer.read()
        port = url.rstrip("/").rsplit(":", 1)[1]
        taken = subprocess.run(
            [*command[:-1], port], capture_output=True, text=True, timeout=60, check=False
        )
        assert taken.returncode == 2
        assert f"port {port} on 127.0.0.1 is taken" in taken.stderr
        assert "Traceback" not in taken.stderr
        first.send_signal(signal.SIGINT)
        out, err = first.communicate(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, err
    assert "playground stopped" in out and "Traceback" not in err


def _post(url: str, body: str) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=body.encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.loads(error.read())


def test_the_server_refuses_what_it_cannot_take(
    server: PlayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every refusal is a status and a message, the session unchanged: an unknown route, a
    body that is not a form, a trace that is not one, a full session; the other operations
    of the form, a trace loaded, undo back to the first reset."""
    url = server.url
    with urllib.request.urlopen(url + "api/data", timeout=10) as answer:
        assert json.loads(answer.read())["live"] is True
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(url + "nowhere", timeout=10)
    assert missing.value.code == 404
    missing.value.close()
    assert _post(url + "api/nowhere", "{}")[0] == 404
    assert _post(url + "api/step", "[1]") == (
        400,
        {"error": "the form's fields: a JSON array, not an object"},
    )
    assert _post(url + "api/step", "{")[0] == 400
    status, answer = _post(url + "api/load", '{"op": "match", "tokens": [1]}\n')
    assert status == 400 and answer["error"] == "a trace starts with a reset step"
    assert _post(url + "api/load", "not json\n")[0] == 400
    for fields in (
        {"op": "reader"},
        {"op": "leave", "number": 1},
        {"op": "reset", "number": 6, "block_size": 2},
        {"op": "insert", "tokens": "abcd", "input": "text"},
    ):
        status, data = _post(url + "api/step", json.dumps(fields))
        assert status == 200, data
    assert [step["op"] for step in server.session.steps][-4:] == [
        "reader",
        "leave",
        "reset",
        "insert",
    ]
    monkeypatch.setattr("kachedb_radix.spec.explain.serve.MAX_STEPS", len(server.session.steps))
    status, answer = _post(url + "api/step", json.dumps({"op": "evict", "number": 1}))
    assert status == 400 and "save it and reset" in answer["error"]
    trace = '{"op": "reset", "num_blocks": 4, "block_size": 1}\n{"op": "evict", "count": 1}\n'
    status, data = _post(url + "api/load", trace)
    assert status == 200 and len(data["frames"]) == 2
    _post(url + "api/undo", "{}")
    status, data = _post(url + "api/undo", "{}")
    assert status == 200 and len(data["frames"]) == 1  # never past the first reset
    with pytest.raises(PlayError, match="unknown input mode"):
        tokenize("1", "words")
    with pytest.raises(PlayError, match="at most"):
        tokenize("x" * 5000, "text")
    with pytest.raises(PlayError, match="a number from 0 to"):
        form_step({"op": "evict", "number": -1})


def test_the_command_refuses_what_it_cannot_serve(capsys: pytest.CaptureFixture[str]) -> None:
    """``explain --serve`` with a target, a bad port or an unreadable trace: exit 2, a
    message, no traceback (nothing is served)."""
    from kachedb_radix.spec.cli.main import main

    assert main(["explain", "--serve", "--target", "accel"]) == 2
    assert "--serve runs the reference alone" in capsys.readouterr().err
    for args, said in ((["--port", "70000"], "over the most allowed, 65,535"),
                       (["missing.jsonl"], "missing.jsonl: no such file")):  # fmt: skip
        with pytest.raises(SystemExit) as stop:  # refused while parsing (issue 32)
            main(["explain", "--serve", *args])
        assert stop.value.code == 2 and said in capsys.readouterr().err


def _raw(server: PlayServer, method: str, path: str, body: bytes = b"",
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:  # fmt: skip
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
    try:
        connection.request(method, path, body, headers or {})
        answer = connection.getresponse()
        return answer.status, dict(answer.getheaders()), answer.read()
    finally:
        connection.close()


def test_a_foreign_page_cannot_drive_the_playground(server: PlayServer) -> None:
    """Issue 32: a text/plain POST with ``Origin: http://evil.example`` and ``Host:
    evil.example:8765`` loaded and stepped the playground (DNS rebinding, cross-site
    requests: any page the user visits could drive it). Now refused, nothing changed."""
    before = server.session.trace()
    port = server.server_address[1]
    trace = b'{"op": "reset", "num_blocks": 4, "block_size": 1}\n'
    step = json.dumps({"op": "insert", "tokens": "ab", "input": "text"}).encode()
    attacks = [
        ({"Host": "evil.example:8765", "Origin": "http://evil.example"}, 421),
        ({"Host": f"evil.example:{port}"}, 421),
        ({"Origin": "http://evil.example"}, 403),
        ({"Origin": "null"}, 403),
        ({"Sec-Fetch-Site": "cross-site"}, 403),
    ]
    for headers, status in attacks:
        for path, body in (("/api/load", trace), ("/api/step", step), ("/api/undo", b"{}")):
            got, answer_headers, payload = _raw(
                server, "POST", path, body, {"Content-Type": "text/plain", **headers}
            )
            assert got == status and "error" in json.loads(payload), (headers, path)
            assert answer_headers["Content-Type"] == "application/json"
    assert _raw(server, "GET", "/api/data", b"", {"Host": "evil.example:8765"})[0] == 421
    assert server.session.trace() == before
    same = {"Origin": f"http://127.0.0.1:{port}", "Content-Type": "application/json"}
    assert _raw(server, "POST", "/api/step", step, same)[0] == 200


def test_a_loaded_trace_is_held_to_the_forms_caps(server: PlayServer) -> None:
    """Issue 32: /api/load took a reset of 99999999999999 blocks (MemoryError, an empty
    reply), skipped the form's 4,096-block cap, and 3,000 steps though the limit is
    2,000. Each is a 400 now, naming the line, the session unchanged."""
    url = server.url
    before = server.session.trace()
    reset = '{{"op": "reset", "num_blocks": {n}, "block_size": {b}}}\n'
    cases = [
        (reset.format(n=99999999999999, b=4), "line 1: a reset's num_blocks of 99,999,999,999,999"),
        (reset.format(n=4097, b=4), "at most 4,096"),
        (reset.format(n=8, b=65), "block_size of 65"),
        (
            '{"op": "reset", "num_blocks": 8, "block_size": 2, "tiers": {"host": 10000000}}\n',
            "tiers.host of 10,000,000",
        ),
        (
            reset.format(n=8, b=2) + '{"op": "insert", "tokens": ' + json.dumps([1] * 5000) + "}\n",
            "line 2: 5,000 tokens, at most 4,096 a step",
        ),
        (reset.format(n=8, b=2) + '{"op": "evict", "count": 1}\n' * 2999, "3,000 steps"),
        ('{"op": "reset", "a": ' + "[" * 100_000 + "]" * 100_000 + "}\n", "nested deeper"),
        ('{"op": "reset", "num_blocks": NaN, "block_size": 1}\n', "not usable JSON"),
    ]
    for trace, message in cases:
        status, answer = _post(url + "api/load", trace)
        assert status == 400 and message in answer["error"], (message, answer)
    assert server.session.trace() == before
    with pytest.raises(PlayError, match="3,000 steps"):
        server.session.load([{"op": "reset", "num_blocks": 2, "block_size": 1}] * 3000)
    status, data = _post(url + "api/load", reset.format(n=4096, b=64))  # the caps themselves
    assert status == 200 and len(data["frames"]) == 1


def test_the_playground_speaks_json_and_describes_itself(server: PlayServer) -> None:
    """Refusals of the HTTP layer itself are JSON too; a method no route takes is a 405
    naming the one it does (the library answered 501); the form's fields are typed; the
    served OpenAPI document is the committed one."""
    from kachedb_radix.spec.explain.serve import OPENAPI

    status, headers, payload = _raw(server, "PUT", "/api/step", b"{}")
    assert status == 405 and headers["Allow"] == "POST" and b"not allowed" in payload
    assert _raw(server, "DELETE", "/nowhere")[0] == 404
    assert _raw(server, "PUT", "/api/step", b"{}", {"Host": "evil.example"})[0] == 421
    status, headers, payload = _raw(server, "HEAD", "/api/data")
    assert status == 405 and payload == b""
    status, headers, payload = _raw(server, "GET", "/api/step")
    assert status == 405 and headers["Allow"] == "POST"
    assert _raw(server, "POST", "/api/data", b"{}")[0] == 405
    status, headers, payload = _raw(server, "GET", "/openapi.json")
    assert status == 200 and json.loads(payload) == json.loads(OPENAPI.read_text())
    with socket_to(server) as sock:
        sock.sendall(b"GET /api/data HTTP/1.1\r\n" + b"X: y\r\n" * 101 + b"\r\n")
        answer = b"".join(iter(lambda: sock.recv(65536), b""))
    assert answer.split(b" ")[1] == b"431" and b'{"error":"Too many headers' in answer
    refused: list[tuple[dict[str, Any], str]] = [
        ({"op": "match"}, "type a prompt"),
        ({"op": "insert", "tokens": 5}, "'tokens' has the wrong type"),
        ({"op": "insert", "tokens": "ab", "pin": "yes"}, "'pin' has the wrong type"),
        ({"op": "insert", "tokens": "ab", "extra": 1}, "unknown field 'extra'"),
        ({"op": "evict", "number": 1.5}, "must be a whole number"),
        ({"op": "evict", "number": "1e3"}, "needs a whole number"),
        ({"op": "insert", "tokens": "1\t2", "input": "ids"}, "is not a token id"),
        ({"op": "insert", "tokens": "\ud800"}, "not Unicode text"),
        ({"op": "insert", "tokens": "ab", "namespace": "\ud800"}, "not Unicode text"),
        ({"op": "insert", "tokens": "ab", "input": "words"}, "unknown input mode"),
        ({"op": "reader", "tokens": "x" * 5000}, "at most 4,096"),
    ]
    for fields, message in refused:
        with pytest.raises(PlayError, match=message):
            form_step(fields)
    assert form_step({"op": "evict", "number": 3.0}) == {"op": "evict", "count": 3}
    assert form_step({"op": "evict", "number": "0003"}) == {"op": "evict", "count": 3}
    assert form_step({"op": "reader", "namespace": None}) == {"op": "reader"}
    assert _post(server.url + "api/undo", "[1]")[0] == 400
    assert _post(server.url + "api/events", '{"scheme": "", "more": 1}')[0] == 400


def socket_to(server: PlayServer) -> Any:
    import socket

    return socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=10)


def test_a_bug_in_a_handler_is_a_500_in_one_line(
    server: PlayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object) -> None:
        raise RuntimeError("planted")

    monkeypatch.setattr(server.session, "undo", broken)
    monkeypatch.setattr(server.session, "page", broken)
    assert _post(server.url + "api/undo", "{}") == (
        500,
        {"error": "internal error (RuntimeError: planted)"},
    )
    status, _, payload = _raw(server, "GET", "/")
    assert status == 500 and b"planted" in payload
