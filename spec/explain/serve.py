"""``kachedb-radix explain --serve``: the playground, a local web server on the reference.

A student types a prompt -- token ids, or text through the built-in byte tokenizer (each
UTF-8 byte is a token, 0-255) -- picks an operation (match, insert, pin, release, evict,
take a reader's snapshot and leave it, reset) and watches the tree answer: the page is the
step-through page itself (:mod:`kachedb_radix.spec.explain.page`), with everything a static
page shows -- the tree, the pool, the rules, the "why", sub-steps, play -- and a form
above it. The session is a trace: ``GET /trace.jsonl`` saves it as the kit's JSON lines,
which ``explain TRACE`` (or ``explain --serve TRACE``) opens again anywhere.

One process, the standard library's :class:`http.server.ThreadingHTTPServer` on the
loopback interface only (no dependency, nothing reachable from elsewhere). The session is
kept as its list of steps and recorded again after each change (a few milliseconds for the
sizes a person types); a lock serialises changes. The routes, described by the OpenAPI 3.1
document ``openapi.json`` beside this module (served at ``GET /openapi.json``):

========================  ==========================================================
``GET /``                 the page
``GET /api/data``         the page's data (JSON)
``POST /api/step``        apply one operation from the form's fields; the new data, or
                          ``{"error": ...}`` (400) naming what was wrong, session unchanged
``POST /api/undo``        drop the last step
``POST /api/load``        replace the session with a trace (JSON lines in the body)
``POST /api/events``      KV events on (``{"scheme": "sha256_cbor"}``, any of the hash
                          schemes) or off (``{"scheme": ""}``): every reset of the session
                          names the scheme and each step shows the batches it emitted
``GET /trace.jsonl``      the session as a trace file
``GET /openapi.json``     the API's description
========================  ==========================================================

**Who may use it.** The playground has no authentication, so every request passes
:class:`~kachedb_radix.spec.inputs.http.RequestGuard` first: a ``Host`` that is not this
server's loopback address is refused (421: a page on another name rebound to 127.0.0.1),
and so is a write whose ``Origin`` is another site's (403: any page the user visits could
otherwise POST a ``text/plain`` body to it). Every answer is strict JSON (or the page,
or the trace); an error in a handler is a 500 with a one-line message, never a reset
connection. **How much.** A body is at most ``LIMITS["http_body_bytes"]``, JSON nests at
most ``LIMITS["json_depth"]`` levels, a session (typed or loaded) holds at most
``LIMITS["playground_steps"]`` steps, a step at most ``LIMITS["playground_tokens"]``
tokens, and a reset (the form's or a loaded trace's, its tiers too) at most
``LIMITS["playground_blocks"]`` blocks of at most ``LIMITS["playground_block_size"]``
tokens.

With events on (the form's "KV events" choice, or ``explain --serve --events``), each step
lists the KV event batches the reference emitted (R-EVENT-*): what a router fed by this
cache would be told. The saved trace keeps the scheme in its resets.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from kachedb_radix.reference.events import DEFAULT_SEED, SCHEMES

from ..conform.operations import BY_NAME
from ..conform.replay import TraceError, parse_trace
from ..conform.steps import Step, resets
from ..inputs import LIMITS, InputError, dumps_json, loads_json_object
from ..inputs.http import HttpRefusal, RequestGuard, header_lists
from .events import with_events, without_events
from .page import page_data, page_html
from .record import RecordError, record
from .view import frame_views

#: The pool a new session starts with: small enough to fill by typing.
DEFAULT_BLOCKS, DEFAULT_BLOCK_SIZE = 24, 4

#: The most steps a session keeps (each change records the session again).
MAX_STEPS = LIMITS["playground_steps"].maximum

#: The most tokens one step may carry, and the largest pool a reset may ask for.
MAX_TOKENS, MAX_POOL = LIMITS["playground_tokens"].maximum, LIMITS["playground_blocks"].maximum
#: The most tokens a block of a reset may hold.
MAX_BLOCK_SIZE = LIMITS["playground_block_size"].maximum

#: The OpenAPI 3.1 document of the playground's API (committed; served as it is).
OPENAPI = Path(__file__).with_name("openapi.json")

log = logging.getLogger("kachedb_radix.explain.serve")

#: The operations the form offers.
FORM_OPS = ("match", "insert", "release", "evict", "reader", "leave", "reset")


class PlayError(ValueError):
    """A form or a trace the playground cannot take; the message says what is wrong."""


def tokenize(text: str, mode: str) -> list[int]:
    """The tokens of ``text``: ``mode`` ``"text"`` is the byte tokenizer (each UTF-8 byte
    one token, 0-255); ``"ids"`` reads whole numbers (ASCII digits) separated by spaces or
    commas (any size: the tree itself refuses what is not a token, R-TOK-3).
    O(len(text)).

    Raises:
        PlayError: an unknown mode, a word that is not a whole number, text that is not
            Unicode (a lone surrogate), too many tokens.
    """
    if mode == "text":
        try:
            tokens = list(text.encode("utf-8"))
        except UnicodeEncodeError:
            raise PlayError("the prompt is not Unicode text (a lone surrogate)") from None
    elif mode == "ids":
        tokens = []
        for word in re.split("[ ,]+", text):
            if not word:
                continue
            if not (word.isascii() and word.isdigit()):
                raise PlayError(f"{word[:40]!r} is not a token id (a whole number)")
            tokens.append(int(word))
    else:
        raise PlayError(f"unknown input mode {mode!r}: text or ids")
    if len(tokens) > MAX_TOKENS:
        raise PlayError(f"{len(tokens)} tokens: the playground takes at most {MAX_TOKENS}")
    return tokens


#: The type every field of the form must have, whichever operation reads it.
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "tokens": (str,),
    "input": (str,),
    "namespace": (str, type(None)),
    "pin": (bool,),
    "number": (int, float, str),
    "block_size": (int, float, str),
}


def form_step(fields: dict[str, Any]) -> Step:
    """The trace step the form's ``fields`` ask for. O(tokens).

    Fields (``openapi.json``'s ``Fields``): ``op`` (one of :data:`FORM_OPS`),
    ``tokens`` (text) and ``input`` (``text`` or ``ids``) for match and insert,
    ``namespace`` ("" or null for the default), ``pin``, and ``number``: the count to
    evict, the lease to release, the reader to leave, or the pool size of a reset (with
    ``block_size``); a number is a whole number or its decimal digits. Every field is
    checked for its type, whichever operation reads it; no other field is taken.

    Raises:
        PlayError: an unknown operation or field, a missing or malformed one.
    """
    op = fields.get("op")
    if op not in FORM_OPS:
        raise PlayError(f"unknown operation {str(op)[:40]!r}: one of {', '.join(FORM_OPS)}")
    for name, value in fields.items():
        if name == "op":
            continue
        kinds = _FIELD_TYPES.get(name)
        if kinds is None:
            raise PlayError(f"unknown field {name[:40]!r}")
        whole = not isinstance(value, float) or value.is_integer()
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise PlayError(f"the field {name!r} has the wrong type ({type(value).__name__})")
        if not whole:
            raise PlayError(f"the field {name!r} must be a whole number, not {value!r}")
        if isinstance(value, str) and name == "tokens" and len(value) > MAX_TOKENS:
            raise PlayError(f"{len(value):,} characters of prompt: at most {MAX_TOKENS:,}")
    if fields.get("input", "text") not in ("text", "ids"):
        raise PlayError(f"unknown input mode {str(fields['input'])[:40]!r}: text or ids")
    namespace = fields.get("namespace")
    if namespace is not None and not _unicode(namespace):
        raise PlayError("the namespace is not Unicode text (a lone surrogate)")
    row = BY_NAME[op]  # the form's fields are the row's arguments
    if row.prompts:
        if "tokens" not in fields:
            raise PlayError("type a prompt (text, or token ids) first")
        mode = fields.get("input", "text")
        tokens = tokenize(fields["tokens"], mode)
        if not tokens:
            raise PlayError("type a prompt (text, or token ids) first")
        pin = fields.get("pin", False)
        step: Step = {"op": op, "tokens": tokens, "namespace": namespace or None, "pin": pin}
        if mode == "text":
            # The prompt as typed: the page shows it beside its byte ids (the step's note).
            step["note"] = f"typed as text: {json.dumps(fields['tokens'], ensure_ascii=False)}"
        return step
    if not row.arguments:
        return {"op": op}
    number = _number(fields.get("number"), op)
    if not row.resets:  # its one argument: the count, the lease or the reader
        return {"op": op, row.arguments[0].name: number}
    size = _number(fields.get("block_size"), op)
    if not 1 <= number <= MAX_POOL or not 1 <= size <= MAX_BLOCK_SIZE:
        raise PlayError(f"a pool of 1 to {MAX_POOL} blocks, of 1 to {MAX_BLOCK_SIZE} tokens each")
    return {"op": op, "num_blocks": number, "block_size": size, "trace": "playground"}


def _unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


#: The largest number a field takes (19 digits).
MAX_NUMBER = 10**19 - 1


def _number(value: Any, op: str) -> int:
    """A whole number from 0 to :data:`MAX_NUMBER`: an int, a float with no fraction
    (JSON does not tell ``2`` from ``2.0``), or its decimal digits (as the page's
    inputs send it)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    digits = isinstance(value, str) and value.isascii() and value.isdigit()
    if digits and len(value.lstrip("0")) <= 19:  # leading zeros are no size
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlayError(f"{op} needs a whole number, not {str(value)[:40]!r}")
    if not 0 <= value <= MAX_NUMBER:
        raise PlayError(f"{op} needs a number from 0 to {MAX_NUMBER}, not {value}")
    return value


class Session:
    """One playground: its trace, recorded again after each change.

    Args:
        steps: the trace to start from (it starts with a reset); None for an empty pool
            of :data:`DEFAULT_BLOCKS` blocks of :data:`DEFAULT_BLOCK_SIZE` tokens.
        title: the page's heading.
        events: the KV events scheme every reset names (``{"scheme": ..., "seed": ...}``);
            None: events off, unless a loaded trace's reset names a scheme itself.

    Raises:
        PlayError: ``steps`` cannot be recorded.
    """

    def __init__(
        self,
        steps: list[Step] | None = None,
        title: str = "playground",
        events: dict[str, str] | None = None,
    ) -> None:
        self.title = title
        self.lock = threading.Lock()
        self.steps: list[Step] = []
        self.events = events
        self._data: dict[str, Any] = {}
        self.load(steps or [_fresh()])

    def load(self, steps: list[Step]) -> dict[str, Any]:
        """Replace the session by ``steps`` (each reset naming the session's events scheme,
        when events are on); its data. O(recording).

        Raises:
            PlayError: more than :data:`MAX_STEPS` steps, or the steps cannot be recorded
                (the session is unchanged).
        """
        if len(steps) > MAX_STEPS:
            raise PlayError(f"{len(steps):,} steps: a session holds at most {MAX_STEPS:,}")
        with self.lock:
            if self.events is not None:
                steps = with_events(steps, self.events)
            self._data = self._recorded(steps, self.events)
            self.steps = list(steps)
            return self._data

    def set_events(self, scheme: str) -> dict[str, Any]:
        """KV events on with the hash scheme ``scheme`` (one of the hasher's schemes, the
        default seed), or off (``""``): the whole session is recorded again with every
        reset naming it, or none. The new data. O(recording).

        Raises:
            PlayError: an unknown scheme (the session is unchanged).
        """
        if scheme and scheme not in SCHEMES:
            raise PlayError(f"unknown events scheme {scheme!r}: one of {', '.join(SCHEMES)}")
        events = {"scheme": scheme, "seed": DEFAULT_SEED} if scheme else None
        with self.lock:
            steps = without_events(self.steps)
            if events is not None:
                steps = with_events(steps, events)
            self._data = self._recorded(steps, events)
            self.steps, self.events = steps, events
            return self._data

    def apply(self, step: Step) -> dict[str, Any]:
        """Add ``step`` (the tree may refuse it: a refusal is a step too); the new data.

        Raises:
            PlayError: the session is full, or the step is malformed (unchanged).
        """
        with self.lock:
            if len(self.steps) >= MAX_STEPS:
                raise PlayError(f"the session holds {MAX_STEPS} steps: save it and reset")
            if self.events is not None:
                (step,) = with_events([step], self.events)
            steps = [*self.steps, step]
            self._data = self._recorded(steps, self.events)
            self.steps = steps
            return self._data

    def undo(self) -> dict[str, Any]:
        """Drop the last step (never the first reset); the new data."""
        with self.lock:
            if len(self.steps) > 1:
                steps = self.steps[:-1]
                self._data = self._recorded(steps, self.events)
                self.steps = steps
            return self._data

    @property
    def data(self) -> dict[str, Any]:
        """The page's data for the session as it is."""
        return self._data

    def trace(self) -> str:
        """The session as JSON lines (a trace the kit and ``explain`` read)."""
        return "".join(dumps_json(step) + "\n" for step in self.steps)

    def page(self) -> str:
        """The whole page, the form above it."""
        source = "kachedb-radix explain --serve"
        return page_html(self.data, self.title, "", source, live=FORM, all_rules=True)

    def _recorded(self, steps: list[Step], events: dict[str, str] | None) -> dict[str, Any]:
        """The page's data for ``steps``; ``events`` the session's events scheme."""
        try:
            recording = record(steps, title=self.title, source="kachedb-radix explain --serve")
        except RecordError as exc:
            raise PlayError(str(exc)) from None
        data = page_data(recording, frame_views(recording))
        data["live"] = True
        data["eventsScheme"] = None if events is None else events["scheme"]
        return data


def _fresh() -> Step:
    return {
        "op": "reset",
        "num_blocks": DEFAULT_BLOCKS,
        "block_size": DEFAULT_BLOCK_SIZE,
        "trace": "playground",
    }


#: The form above the page (``play.js`` drives it).
_FORM = """<section id="playground" aria-label="playground"><form id="play-form">
<b>try it:</b>
<select id="play-op" aria-label="operation">
<option value="insert">insert</option><option value="match">match</option>
<option value="release">release lease</option><option value="evict">evict</option>
<option value="reader">take a reader's snapshot</option>
<option value="leave">leave (reader)</option>
<option value="reset">reset the pool</option></select>
<select id="play-input" aria-label="input"><option value="text">text (bytes)</option>
<option value="ids">token ids</option></select>
<input id="play-tokens" type="text" aria-label="prompt" placeholder="a prompt, or token ids"
 required data-max-tokens="$max_tokens">
<input id="play-namespace" type="text" aria-label="namespace" placeholder="namespace" size="9">
<label><input type="checkbox" id="play-pin"> pin</label>
<label id="play-number-label"><span>number</span> <input id="play-number" type="number" min="0"
 step="1" value="1" required data-max-pool="$max_pool" style="width: 5em"></label>
<label id="play-block-label">tokens per block <input id="play-block" type="number" min="1"
 max="64" step="1" value="4" required style="width: 4em"></label>
<label title="what a router fed by this cache is told, step by step (R-EVENT-*)">KV events
<select id="play-events" aria-label="KV events"><option value="">off</option>
$schemes</select></label>
<button type="submit" id="play-go">apply</button>
<button type="button" id="play-undo">undo</button>
<a id="play-trace" href="/trace.jsonl" download="playground.jsonl">save the session</a>
<label>open a trace <input type="file" id="play-load" accept=".jsonl,.json,.txt"></label>
</form><p id="play-error" role="alert" hidden></p></section>"""
FORM = (
    _FORM.replace(
        "$schemes", "".join(f'<option value="{name}">{name}</option>' for name in SCHEMES)
    )
    .replace("$max_tokens", str(MAX_TOKENS))
    .replace("$max_pool", str(MAX_POOL))
)


#: The playground's routes and the method each takes.
ROUTES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "/": "GET",
        "/index.html": "GET",
        "/api/data": "GET",
        "/trace.jsonl": "GET",
        "/openapi.json": "GET",
        "/api/step": "POST",
        "/api/undo": "POST",
        "/api/load": "POST",
        "/api/events": "POST",
    }
)


class _Handler(BaseHTTPRequestHandler):
    """The routes (module docstring); the session is the server's."""

    server: PlayServer

    #: The routes and their methods (anything else on them: 405 with ``Allow``).
    routes = ROUTES

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a request log would drown the terminal the command runs in."""

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's own refusals (a malformed request line, headers too
        long) as JSON, like every other answer."""
        self.close_connection = True
        text = message or HTTPStatus(code).phrase
        self._json(HTTPStatus(code), {"error": " ".join(text.split())})

    def __getattr__(self, name: str) -> Any:
        if name.startswith("do_"):  # a method no route takes: 405, not the library's 501
            return self._not_allowed
        raise AttributeError(name)

    def _not_allowed(self) -> None:
        path = self.path.split("?", 1)[0]
        if self._guarded(self.command) is None:
            return
        if path not in self.routes:
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no such page: {path[:80]}"})
            return
        allowed = self.routes[path]
        message = f"{self.command[:20]} is not allowed on {path} ({allowed} is)"
        self._json(HTTPStatus.METHOD_NOT_ALLOWED, {"error": message}, {"Allow": allowed})

    def _guarded(self, method: str) -> int | None:
        """The body's length when the request may be served; else None, refused."""
        try:
            return self.server.guard.check(method, header_lists(self.headers.items()))
        except HttpRefusal as refusal:
            self.close_connection = True
            self._json(HTTPStatus(refusal.status), {"error": str(refusal)})
            return None

    def do_GET(self) -> None:
        if self._guarded("GET") is None:
            return
        try:
            self._get()
        except Exception as exc:  # a bug: say so in one line, keep serving
            self._failed(exc)

    def _get(self) -> None:
        session = self.server.session
        path = self.path.split("?", 1)[0]
        if path in ("/", "/index.html"):
            self._send(HTTPStatus.OK, session.page(), "text/html; charset=utf-8")
        elif path == "/api/data":
            self._json(HTTPStatus.OK, session.data)
        elif path == "/trace.jsonl":
            self._send(
                HTTPStatus.OK,
                session.trace(),
                "application/x-ndjson; charset=utf-8",
                {"Content-Disposition": 'attachment; filename="playground.jsonl"'},
            )
        elif path == "/openapi.json":
            self._send(HTTPStatus.OK, OPENAPI.read_text("utf-8"), "application/json")
        elif path in self.routes:
            self._not_allowed()
        else:
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no such page: {path[:80]}"})

    def do_POST(self) -> None:
        length = self._guarded("POST")
        if length is None:
            return
        try:
            self._post(length)
        except Exception as exc:  # a bug: say so in one line, keep serving
            self._failed(exc)

    def _post(self, length: int) -> None:
        session = self.server.session
        path = self.path.split("?", 1)[0]
        try:
            body = self.rfile.read(length).decode("utf-8")
        except UnicodeDecodeError as exc:
            self._json(HTTPStatus.BAD_REQUEST, {"error": f"the body is not UTF-8 ({exc.reason})"})
            return
        try:
            if path == "/api/step":
                fields = loads_json_object(body or "{}", "the form's fields")
                data = session.apply(form_step(fields))
            elif path == "/api/undo":
                if body.strip():  # the page sends {}; nothing else is an undo
                    loads_json_object(body, "an undo's body")
                data = session.undo()
            elif path == "/api/load":
                data = session.load(_trace(body))
            elif path == "/api/events":
                fields = loads_json_object(body or "{}", "the events choice")
                if set(fields) != {"scheme"} or not isinstance(fields["scheme"], str):
                    raise PlayError('send {"scheme": NAME} (or "" for off), nothing else')
                data = session.set_events(fields["scheme"])
            elif path in self.routes:
                self._not_allowed()
                return
            else:
                self._json(HTTPStatus.NOT_FOUND, {"error": f"no such action: {path[:80]}"})
                return
        except (InputError, PlayError) as exc:
            self._json(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
            return
        self._json(HTTPStatus.OK, data)

    def _failed(self, exc: Exception) -> None:
        log.error("a playground handler failed", exc_info=exc)
        text = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
        self.close_connection = True
        self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"internal error ({text})"})

    def _json(self, status: HTTPStatus, value: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, dumps_json(value), "application/json", headers)

    def _send(
        self, status: HTTPStatus, text: str, kind: str, headers: dict[str, str] | None = None
    ) -> None:
        payload = text.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)


def _trace(text: str) -> list[Step]:
    """The steps of an uploaded trace, each line depth-capped JSON, the session's caps
    checked before anything is recorded. O(size).

    Raises:
        PlayError: not a trace, or a cap exceeded (naming the line).
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) > MAX_STEPS:
        raise PlayError(f"{len(lines):,} steps: a session holds at most {MAX_STEPS:,}")
    for number, line in enumerate(lines, 1):
        try:
            step = loads_json_object(line, f"not a trace: line {number}")
        except InputError as exc:
            raise PlayError(str(exc)) from None
        _check_caps(step, number)
    try:
        steps = parse_trace(lines, "the uploaded trace")
    except TraceError as exc:
        raise PlayError(f"not a trace: {exc}") from None
    if not steps or not resets(steps[0]):
        raise PlayError("a trace starts with a reset step")
    return steps


def _check_caps(step: dict[str, Any], number: int) -> None:
    """Refuse a step of a loaded trace that the form would refuse for its size."""
    tokens: Any = step.get("tokens")
    if isinstance(tokens, list | str) and len(tokens) > MAX_TOKENS:
        raise PlayError(f"line {number}: {len(tokens):,} tokens, at most {MAX_TOKENS:,} a step")
    if not resets(step):
        return
    sizes: list[tuple[str, object, int]] = [
        ("num_blocks", step.get("num_blocks"), MAX_POOL),
        ("block_size", step.get("block_size"), MAX_BLOCK_SIZE),
    ]
    tiers = step.get("tiers")
    if isinstance(tiers, dict):
        sizes += [(f"tiers.{k}", v, MAX_POOL) for k, v in tiers.items() if k != "write_through"]
    for name, value, cap in sizes:
        if isinstance(value, int) and not isinstance(value, bool) and value > cap:
            raise PlayError(
                f"line {number}: a reset's {name} of {value:,}: the playground takes at most "
                f"{cap:,}"
            )


class PlayServer(ThreadingHTTPServer):
    """The playground's server: loopback only, one session, every request through the
    guard (the module docstring). Stop it with :meth:`shutdown` (from another thread)
    and :meth:`server_close`."""

    daemon_threads = True

    def __init__(self, session: Session, port: int = 0, host: str = "127.0.0.1") -> None:
        self.session = session
        super().__init__((host, port), _Handler)
        self.guard = RequestGuard(host, self.server_address[1])

    @property
    def url(self) -> str:
        """The address to open."""
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/"
