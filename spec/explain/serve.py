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
sizes a person types); a lock serialises changes. Routes:

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
========================  ==========================================================

With events on (the form's "KV events" choice, or ``explain --serve --events``), each step
lists the KV event batches the reference emitted (R-EVENT-*): what a router fed by this
cache would be told. The saved trace keeps the scheme in its resets.
"""

from __future__ import annotations

import json
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kachedb_radix.reference.events import DEFAULT_SEED, SCHEMES

from ..conform.operations import BY_NAME
from ..conform.replay import TraceError, parse_trace
from ..conform.steps import Step, resets
from .events import with_events, without_events
from .page import page_data, page_html
from .record import RecordError, record
from .view import frame_views

#: The pool a new session starts with: small enough to fill by typing.
DEFAULT_BLOCKS, DEFAULT_BLOCK_SIZE = 24, 4

#: The most steps a session keeps (each change records the session again).
MAX_STEPS = 2000

#: The most tokens one step may carry, and the largest pool a reset may ask for.
MAX_TOKENS, MAX_POOL = 4096, 4096

#: The operations the form offers.
FORM_OPS = ("match", "insert", "release", "evict", "reader", "leave", "reset")


class PlayError(ValueError):
    """A form or a trace the playground cannot take; the message says what is wrong."""


def tokenize(text: str, mode: str) -> list[int]:
    """The tokens of ``text``: ``mode`` ``"text"`` is the byte tokenizer (each UTF-8 byte
    one token, 0-255); ``"ids"`` reads integers separated by spaces or commas (any
    integer: the tree itself refuses what is not a token, R-TOK-3). O(len(text)).

    Raises:
        PlayError: an unknown mode, a word that is not an integer, too many tokens.
    """
    if mode == "text":
        tokens = list(text.encode("utf-8"))
    elif mode == "ids":
        tokens = []
        for word in text.replace(",", " ").split():
            try:
                tokens.append(int(word))
            except ValueError:
                raise PlayError(f"{word!r} is not a token id (an integer)") from None
    else:
        raise PlayError(f"unknown input mode {mode!r}: text or ids")
    if len(tokens) > MAX_TOKENS:
        raise PlayError(f"{len(tokens)} tokens: the playground takes at most {MAX_TOKENS}")
    return tokens


def form_step(fields: dict[str, Any]) -> Step:
    """The trace step the form's ``fields`` ask for. O(tokens).

    Fields: ``op`` (one of :data:`FORM_OPS`), ``tokens`` and ``input`` (``text`` or
    ``ids``) for match and insert, ``namespace`` ("" for the default), ``pin``, and
    ``number``: the count to evict, the lease to release, the reader to leave, or the pool
    size of a reset (with ``block_size``).

    Raises:
        PlayError: an unknown operation, a missing or malformed field.
    """
    op = fields.get("op")
    if op not in FORM_OPS:
        raise PlayError(f"unknown operation {op!r}: one of {', '.join(FORM_OPS)}")
    row = BY_NAME[op]  # the form's fields are the row's arguments
    if row.prompts:
        typed, mode = str(fields.get("tokens", "")), str(fields.get("input", "text"))
        tokens = tokenize(typed, mode)
        if not tokens:
            raise PlayError("type a prompt (text, or token ids) first")
        namespace = str(fields.get("namespace") or "") or None
        step: Step = {"op": op, "tokens": tokens, "namespace": namespace,
                      "pin": bool(fields.get("pin"))}  # fmt: skip
        if mode == "text":
            # The prompt as typed: the page shows it beside its byte ids (the step's note).
            step["note"] = f"typed as text: {json.dumps(typed, ensure_ascii=False)}"
        return step
    if not row.arguments:
        return {"op": op}
    number = _number(fields.get("number"), op)
    if not row.resets:  # its one argument: the count, the lease or the reader
        return {"op": op, row.arguments[0].name: number}
    size = _number(fields.get("block_size"), op)
    if not 1 <= number <= MAX_POOL or not 1 <= size <= 64:
        raise PlayError(f"a pool of 1 to {MAX_POOL} blocks, of 1 to 64 tokens each")
    return {"op": op, "num_blocks": number, "block_size": size, "trace": "playground"}


def _number(value: Any, op: str) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise PlayError(f"{op} needs a whole number, not {value!r}") from None
    if number < 0:
        raise PlayError(f"{op} needs a number of 0 or more, not {number}")
    return number


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
            PlayError: the steps cannot be recorded (the session is unchanged).
        """
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
        return "".join(json.dumps(step) + "\n" for step in self.steps)

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


class _Handler(BaseHTTPRequestHandler):
    """The routes (module docstring); the session is the server's."""

    server: PlayServer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a request log would drown the terminal the command runs in."""

    def do_GET(self) -> None:
        session = self.server.session
        if self.path in ("/", "/index.html") or self.path.startswith("/?"):
            self._send(HTTPStatus.OK, session.page(), "text/html; charset=utf-8")
        elif self.path == "/api/data":
            self._json(HTTPStatus.OK, session.data)
        elif self.path == "/trace.jsonl":
            self._send(
                HTTPStatus.OK,
                session.trace(),
                "application/x-ndjson; charset=utf-8",
                {"Content-Disposition": 'attachment; filename="playground.jsonl"'},
            )
        else:
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no such page: {self.path}"})

    def do_POST(self) -> None:
        session = self.server.session
        try:
            body = self._body()
            if self.path == "/api/step":
                fields = json.loads(body or "{}")
                if not isinstance(fields, dict):
                    raise PlayError("send the form's fields as a JSON object")
                data = session.apply(form_step(fields))
            elif self.path == "/api/undo":
                data = session.undo()
            elif self.path == "/api/load":
                data = session.load(_trace(body))
            elif self.path == "/api/events":
                fields = json.loads(body or "{}")
                if not isinstance(fields, dict) or not isinstance(fields.get("scheme"), str):
                    raise PlayError('send {"scheme": NAME} (or "" for off)')
                data = session.set_events(fields["scheme"])
            else:
                self._json(HTTPStatus.NOT_FOUND, {"error": f"no such action: {self.path}"})
                return
        except (PlayError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            self._json(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
            return
        self._json(HTTPStatus.OK, data)

    def _body(self) -> str:
        length = int(self.headers.get("Content-Length") or 0)
        if length > 16 * 2**20:
            raise PlayError("the request is too large (16 MiB at most)")
        return self.rfile.read(length).decode("utf-8")

    def _json(self, status: HTTPStatus, value: Any) -> None:
        text = json.dumps(value, separators=(",", ":"))
        self._send(status, text, "application/json")

    def _send(
        self, status: HTTPStatus, text: str, kind: str, headers: dict[str, str] | None = None
    ) -> None:
        payload = text.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Cache-Control", "no-store")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)


def _trace(text: str) -> list[Step]:
    try:
        steps = parse_trace(text.splitlines(), "the uploaded trace")
    except TraceError as exc:
        raise PlayError(f"not a trace: {exc}") from None
    if not steps or not resets(steps[0]):
        raise PlayError("a trace starts with a reset step")
    return steps


class PlayServer(ThreadingHTTPServer):
    """The playground's server: loopback only, one session. Stop it with
    :meth:`shutdown` (from another thread) and :meth:`server_close`."""

    daemon_threads = True

    def __init__(self, session: Session, port: int = 0, host: str = "127.0.0.1") -> None:
        self.session = session
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        """The address to open."""
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/"
