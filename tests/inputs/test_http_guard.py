"""The HTTP guard both services share (spec/inputs/http.py) and the typed JSON decoder:
who may talk to a service, and how much it may send; each refusal a status and a line."""

from __future__ import annotations

import msgspec
import pytest

from kachedb_radix.spec.inputs import InputError, decode_json
from kachedb_radix.spec.inputs.http import (
    HttpRefusal,
    RequestGuard,
    header_lists,
    is_loopback,
    split_host,
    unauthenticated_warning,
)


def _check(guard: RequestGuard, method: str = "POST", **headers: str) -> int:
    pairs = [(name.replace("_", "-"), value) for name, value in headers.items()]
    return guard.check(method, header_lists(pairs))


def _refused(guard: RequestGuard, method: str = "POST", **headers: str) -> HttpRefusal:
    with pytest.raises(HttpRefusal) as refused:
        _check(guard, method, **headers)
    assert "\n" not in str(refused.value)
    return refused.value


def test_split_host_reads_names_ports_and_v6_literals() -> None:
    assert split_host("LocalHost:8080") == ("localhost", 8080)
    assert split_host("example.org") == ("example.org", None)
    assert split_host("[::1]:9") == ("[::1]", 9)
    assert split_host("[::1]") == ("[::1]", None)
    for bad in ("", "a b", "x:99999", "x:-1", "x:1a", "[::1", "[::1]x", "a/b:1", "u@h:1", ":80"):
        with pytest.raises(ValueError):
            split_host(bad)


def test_loopback_names() -> None:
    assert all(map(is_loopback, ("localhost", "127.0.0.1", "127.9.9.9", "::1", "[::1]")))
    assert not any(map(is_loopback, ("10.0.0.1", "0.0.0.0", "example.org", "localhost.evil")))


def test_a_loopback_listener_answers_only_to_loopback_names() -> None:
    guard = RequestGuard("127.0.0.1", 8765)
    for host in ("127.0.0.1:8765", "localhost:8765", "[::1]:8765", "127.0.0.1"):
        assert _check(guard, "GET", Host=host) == 0
    assert _refused(guard, Host="evil.example:8765").status == 421  # DNS rebinding
    assert _refused(guard, Host="127.0.0.1:9999").status == 421  # another port
    assert _refused(guard, Host="10.0.0.1:8765").status == 421
    assert _refused(guard).status == 400  # no Host at all
    assert _refused(guard, Host="a b").status == 400
    with pytest.raises(HttpRefusal, match="exactly one Host"):
        guard.check("GET", {"host": ["127.0.0.1", "127.0.0.1"]})


def test_other_listeners_answer_to_ip_literals_and_the_names_allowed() -> None:
    wide = RequestGuard("0.0.0.0", 80, allow_hosts=("Router.Internal",))
    for host in ("10.1.2.3", "[2001:db8::1]:80", "localhost", "router.internal"):
        assert _check(wide, "GET", Host=host) == 0
    assert _refused(wide, Host="evil.example").status == 421
    named = RequestGuard("10.0.0.5", 80)
    assert _check(named, "GET", Host="10.0.0.5") == 0
    assert _check(named, "GET", Host="10.9.9.9") == 0  # an IP literal cannot be rebound
    assert _refused(named, Host="gateway.example").status == 421


def test_cross_site_writes_are_refused_and_reads_are_not() -> None:
    guard = RequestGuard("127.0.0.1", 8765)
    host = "127.0.0.1:8765"
    for origin in ("http://127.0.0.1:8765", "http://localhost:8765", "HTTP://[::1]:8765"):
        assert _check(guard, Host=host, Origin=origin) == 0
    for origin in (
        "http://evil.example",
        "http://evil.example:8765",
        "null",
        "http://127.0.0.1",  # port 80, not ours
        "https://127.0.0.1:8765/path",
        "ftp://127.0.0.1:8765",
        "http://a b:8765",
    ):
        refused = _refused(guard, Host=host, Origin=origin)
        assert refused.status == 403 and "cross-site" in str(refused), origin
    assert _check(RequestGuard("127.0.0.1", 443), Host="127.0.0.1", Origin="https://localhost") == 0
    for site in ("cross-site", "same-site"):
        assert _refused(guard, Host=host, Sec_Fetch_Site=site).status == 403
    assert _check(guard, Host=host, Sec_Fetch_Site="same-origin") == 0
    # A read is never refused for its origin: the browser keeps its answer from the page.
    assert _check(guard, "GET", Host=host, Origin="http://evil.example") == 0


def test_the_body_length_is_checked_before_a_byte_is_read() -> None:
    guard = RequestGuard("127.0.0.1", 1, max_body=100)
    host = "127.0.0.1:1"
    assert _check(guard, Host=host, Content_Length="100") == 100
    assert _check(guard, Host=host) == 0
    assert _refused(guard, Host=host, Content_Length="101").status == 413
    assert _refused(guard, Host=host, Content_Length="-1").status == 400
    assert _refused(guard, Host=host, Content_Length="9" * 30).status == 400
    assert _refused(guard, Host=host, Transfer_Encoding="chunked").status == 400
    with pytest.raises(HttpRefusal, match="differ"):
        guard.check("POST", {"host": [host], "content-length": ["1", "2"]})
    assert guard.check("POST", {"host": [host], "content-length": ["3", "3"]}) == 3


def test_the_warning_for_a_reachable_listener() -> None:
    assert unauthenticated_warning("127.0.0.1") is None
    assert unauthenticated_warning("localhost") is None
    for host in ("0.0.0.0", "10.0.0.5", "", "::"):
        text = unauthenticated_warning(host)
        assert text is not None and "no authentication" in text and "\n" not in text


class _Shape(msgspec.Struct, forbid_unknown_fields=True):
    tokens: list[int]


def test_decode_json_reads_a_declared_shape_or_says_where_it_is_wrong() -> None:
    assert decode_json(b'{"tokens": [1, 2]}', _Shape, "the body") == _Shape([1, 2])
    for data, message in [
        (b'{"tokens": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "at `$.tokens[0]`"),
        (b'{"tokens": [1], "x": 1}', "unknown field `x`"),
        (b"\xff", "the body: not JSON"),
        (b'{"tokens": [NaN]}', "not JSON"),
    ]:
        with pytest.raises(InputError) as refused:
            decode_json(data, _Shape, "the body")
        assert str(refused.value).startswith("the body: ") and message in str(refused.value)
