"""HTTP requests as the toolbox's services take them: whom they come from, and how big.

Both HTTP services (``route``'s API, :mod:`kachedb_radix.spec.router.service`, and the
playground of ``explain --serve``, :mod:`kachedb_radix.spec.explain.serve`) have no
authentication: whoever can reach the socket can use them. So each request passes one
guard, :meth:`RequestGuard.check`, before anything reads its body, and it refuses:

======================================  ======  =============================================
what                                    status  why
======================================  ======  =============================================
no ``Host``, or two                     400     HTTP/1.1 requires exactly one (RFC 9112 3.2)
a ``Host`` naming another server        421     DNS rebinding: a page on ``evil.example`` whose
                                                name now resolves to 127.0.0.1 reaches the
                                                service, but its requests still say ``Host:
                                                evil.example``
a write (not GET/HEAD/OPTIONS) whose    403     a cross-site request: any page the user visits
``Origin`` is another origin, or whose          can POST ``text/plain`` to localhost without a
``Sec-Fetch-Site`` says ``cross-site``          CORS preflight; browsers say where it came from
or ``same-site``
``Transfer-Encoding`` (chunked)         400     bodies come with a ``Content-Length`` only, so
                                                the size is known before a byte is read
a ``Content-Length`` that is not a      400
number, or two that differ
a body over the service's cap           413     ``LIMITS["http_body_bytes"]``: nothing is read
======================================  ======  =============================================

A name is *served* when it is an address the server listens on: ``localhost`` or a
loopback address for a loopback listener; for a listener on another address (or all
of them), any IP literal (an IP literal cannot be rebound: rebinding needs a name the
attacker's DNS answers for) and each name given with ``allow_hosts`` (a reverse proxy's
name). A port, when given, must be the one listened on. An ``Origin`` is same-origin
when its scheme is http or https, its name is served and its port is the listener's.

Requests without ``Origin`` (curl, scripts, Schemathesis) are not cross-site by
definition: only browsers send cross-site requests on a user's behalf, and browsers say
so. Reads (GET) need no ``Origin`` check: the same-origin policy keeps their answers
from a foreign page, and neither service sends CORS headers.

The guard reads only headers; it never changes anything. Its messages are one line
(:class:`HttpRefusal`), quoting at most :data:`~.errors.QUOTE_CHARS` of what was sent.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .errors import quote
from .limits import LIMITS

#: The methods that never change a service's state (RFC 9110 9.2.1).
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

#: A listener's wildcard addresses: every interface.
WILDCARDS = frozenset({"0.0.0.0", "::", ""})


class HttpRefusal(ValueError):
    """A request refused before its body was read: ``status`` and a one-line reason."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(" ".join(message.split()))
        self.status = status


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, brackets allowed) is this machine's
    loopback: ``localhost`` or 127.0.0.0/8 or ::1. O(len(host))."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@functools.lru_cache(maxsize=256)
def _serves(listen_host: str, allow_hosts: tuple[str, ...], name: str) -> bool:
    if name in (host.lower() for host in allow_hosts):
        return True
    if listen_host.lower() in WILDCARDS or not is_loopback(listen_host):
        if _ip_literal(name) or name == "localhost":
            return True
        return name.strip("[]") == listen_host.strip("[]").lower()
    return is_loopback(name)


def _ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return False
    return True


def split_host(value: str) -> tuple[str, int | None]:
    """``name[:port]`` (``[v6]:port`` too) as ``(name lowercased, port or None)``.
    O(len(value)).

    Raises:
        ValueError: not ``name[:port]`` with a port from 0 to 65535.
    """
    text = value.strip()
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise ValueError("an unclosed [")
        name, rest = text[: close + 1], text[close + 1 :]
        if rest and not rest.startswith(":"):
            raise ValueError("text after ]")
        port_text = rest[1:] if rest else None
    else:
        name, sep, port_text_or_empty = text.partition(":")
        port_text = port_text_or_empty if sep else None
    if not name or any(char in name for char in " \t/\\@?#"):
        raise ValueError("not a host name")
    if port_text is None:
        return name.lower(), None
    if not port_text.isdigit() or len(port_text) > 5 or int(port_text) > 65535:
        raise ValueError("not a port")
    return name.lower(), int(port_text)


@dataclass(frozen=True)
class RequestGuard:
    """Who may talk to a service listening on ``listen_host:port``, and how much.

    Args:
        listen_host: the address listened on (``127.0.0.1``, ``0.0.0.0``, ...).
        port: the port listened on (the real one, once bound).
        allow_hosts: more names the service answers to (a reverse proxy's).
        max_body: the largest body read, in bytes (default
            ``LIMITS["http_body_bytes"]``).
    """

    listen_host: str
    port: int
    allow_hosts: Sequence[str] = ()
    max_body: int = field(default_factory=lambda: LIMITS["http_body_bytes"].maximum)

    def serves(self, name: str) -> bool:
        """Whether host ``name`` (lowercased, brackets allowed) is one this service
        answers to (the module docstring). O(len(allow_hosts)); the last answers are
        remembered (a client sends the same Host every time)."""
        return _serves(self.listen_host, tuple(self.allow_hosts), name)

    def check(self, method: str, headers: Mapping[str, Sequence[str]]) -> int:
        """Refuse the request (method and headers, names lowercased, each with every
        value sent) unless it may be served; the body's length (0 without one).
        O(size of the headers).

        Raises:
            HttpRefusal: see the module docstring's table.
        """
        hosts = headers.get("host", ())
        if len(hosts) != 1:
            raise HttpRefusal(400, f"a request needs exactly one Host header, got {len(hosts)}")
        try:
            name, port = split_host(hosts[0])
        except ValueError:
            raise HttpRefusal(400, f"Host {quote(hosts[0])} is not NAME[:PORT]") from None
        if not self.serves(name) or (port is not None and port != self.port):
            raise HttpRefusal(
                421,
                f"Host {quote(hosts[0])} is not an address this server serves "
                f"(it listens on {self.listen_host}:{self.port})",
            )
        if method not in SAFE_METHODS:
            self._same_origin(headers)
        return self._length(headers)

    def _same_origin(self, headers: Mapping[str, Sequence[str]]) -> None:
        for site in headers.get("sec-fetch-site", ()):
            if site.strip().lower() in ("cross-site", "same-site"):
                raise HttpRefusal(403, f"a {site.strip()} write is refused (Sec-Fetch-Site)")
        for origin in headers.get("origin", ()):
            if not self._origin_served(origin.strip()):
                raise HttpRefusal(
                    403, f"a write from origin {quote(origin.strip())} is refused (cross-site)"
                )

    def _origin_served(self, origin: str) -> bool:
        scheme, sep, rest = origin.partition("://")
        if not sep or scheme.lower() not in ("http", "https") or "/" in rest:
            return False  # "null" (a sandboxed frame, a file: page) included
        try:
            name, port = split_host(rest)
        except ValueError:
            return False
        default = 80 if scheme.lower() == "http" else 443
        return self.serves(name) and (default if port is None else port) == self.port

    def _length(self, headers: Mapping[str, Sequence[str]]) -> int:
        if headers.get("transfer-encoding"):
            raise HttpRefusal(400, "Transfer-Encoding is not accepted: send a Content-Length")
        lengths = set(headers.get("content-length", ()))
        if not lengths:
            return 0
        if len(lengths) != 1:
            raise HttpRefusal(400, "Content-Length headers that differ")
        (text,) = lengths
        text = text.strip()
        if not text.isdigit() or len(text) > 20:
            raise HttpRefusal(400, f"Content-Length {quote(text)} is not a byte count")
        length = int(text)
        if length > self.max_body:
            raise HttpRefusal(
                413, f"a body of {length:,} bytes, over the cap of {self.max_body:,} bytes"
            )
        return length


def header_lists(pairs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """Header ``(name, value)`` pairs as ``{lowercased name: [values...]}``, the shape
    :meth:`RequestGuard.check` reads. O(number of headers)."""
    grouped: dict[str, list[str]] = {}
    for name, value in pairs:
        grouped.setdefault(name.lower(), []).append(value)
    return grouped


def unauthenticated_warning(listen_host: str) -> str | None:
    """The line a service prints when ``listen_host`` is reachable from other machines
    (anything but loopback), or None. O(1)."""
    if is_loopback(listen_host):
        return None
    return (
        f"warning: listening on {listen_host or '*'}, reachable from other machines: this "
        "API has no authentication (anyone who can reach the port can use it); put it "
        "behind a proxy that authenticates, or listen on 127.0.0.1"
    )
