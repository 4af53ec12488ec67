"""An out-of-process candidate: a child program speaking the JSON-lines protocol.

The kit starts the program, says ``hello``, then sends one request per line and
reads one answer per line. It never hangs: a reader thread feeds answers into a
queue read with a timeout, and stderr is drained by a second thread (its tail is
shown in diagnostics). A program that does not answer in time, exits, closes its
output, or answers something that is not a well-formed message raises
:class:`~kachedb_radix.spec.conform.candidate.CandidateFailure` naming the request, and is killed.

A hostile or broken program cannot take the kit down with it:

* **Bounded memory.** Output is read in bytes, a line at a time up to ``max_line``
  bytes: a longer answer (a flood without newlines) is a failure, not a growing
  buffer. At most a few answers wait in the queue (the reader then blocks, and so
  does the program's write). Stderr lines are cut to :data:`STDERR_LINE_CHARS` and
  only the last :data:`STDERR_LINES` are kept.
* **Any bytes.** Output that is not UTF-8 is decoded with replacement characters and
  then fails as malformed JSON; the diagnostic quotes its start. What the program wrote
  reaches the terminal escaped (:func:`~kachedb_radix.spec.inputs.printable`: its
  stderr, its name, its malformed answers), never as escape sequences.
* **No orphans.** The program runs in a process group (session) of its own, and
  everything in that group is ended with it: on close, stdin is closed and the
  program gets ``close_grace`` seconds to exit; then the group gets SIGTERM, then,
  after :data:`TERM_GRACE` seconds, SIGKILL -- so a program that ignores SIGTERM, and
  children it forked, go too. (A descendant that starts a session of its own has
  left the group on purpose and is out of reach.)
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import os
import queue
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence
from typing import IO, Any, NoReturn

from ..conform.candidate import CandidateError, CandidateFailure
from ..conform.levels import LEVELS, SNAPSHOTS, LevelError, ordered, parse_levels
from ..conform.operations import (
    BY_NAME,
    Forwarding,
    level_since,
    operation,
    operations_of,
    required_of,
)
from ..inputs import printable
from .messages import (
    PROTOCOL_VERSION,
    SNAPSHOT_FIELDS,
    SUPPORTED_PROTOCOLS,
    V2_FIELDS,
    ProtocolError,
    decode,
    encode,
    response_problem,
    upgrade_dump,
)

#: Seconds to wait for one answer.
DEFAULT_TIMEOUT = 10.0
#: Seconds to wait for the program to start and answer ``hello``.
DEFAULT_STARTUP_TIMEOUT = 30.0
#: Longest answer line accepted, in bytes (a dump of a large tree fits many times).
DEFAULT_MAX_LINE = 16 * 1024 * 1024
#: Stderr lines kept for diagnostics, and the characters kept of each.
STDERR_LINES = 20
STDERR_LINE_CHARS = 500
#: Seconds a program gets to exit after its stdin closes, then after SIGTERM.
CLOSE_GRACE = 2.0
TERM_GRACE = 1.0
#: Answers read ahead at most (the reader thread then waits for the kit).
_QUEUE_DEPTH = 4


class _TooLong:
    """Queued instead of an answer line that exceeded the limit."""


class StdioCandidate(Forwarding):
    """A candidate program driven over its stdin/stdout.

    Args:
        argv: the program and its arguments.
        timeout: seconds allowed per answer.
        startup_timeout: seconds allowed for the ``hello`` answer.
        name: the report name (default: the name the program gives in ``hello``).
        max_line: the longest answer line accepted, in bytes.
        close_grace: seconds the program gets to exit by itself when closed.

    Raises:
        CandidateFailure: the program could not be started, or its ``hello`` answer
            is missing, malformed, of an unknown protocol version or declares unknown
            levels (or ``snapshots`` under protocol 1).

    A program that answers ``hello`` with protocol 1 is driven at its levels with
    the version-1 answers (no snapshot stats; format-1 dumps are upgraded, see
    :func:`kachedb_radix.spec.protocol.messages.upgrade_dump`); one answering 2 with the
    operations of version 2 (no ``drop``); from 3 on with the ``operations`` it lists
    (those its levels cannot do without must be there).
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        timeout: float = DEFAULT_TIMEOUT,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        name: str | None = None,
        max_line: int = DEFAULT_MAX_LINE,
        close_grace: float = CLOSE_GRACE,
    ) -> None:
        self._argv = list(argv)
        self._timeout = timeout
        self._max_line = max_line
        self._close_grace = close_grace
        self._ids = itertools.count()
        self._answers: queue.Queue[str | _TooLong | None] = queue.Queue(_QUEUE_DEPTH)
        self._stderr: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self._closing = threading.Event()
        self._failed: str | None = None
        self._name = name or self._argv[0]
        self._protocol = PROTOCOL_VERSION
        self._levels: frozenset[str] = frozenset({"core"})
        self._operations: frozenset[str] = operations_of(self._levels, 1)
        try:
            self._process = subprocess.Popen(
                self._argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # its own process group: see _terminate
            )
        except OSError as exc:
            raise CandidateFailure(f"could not start {self._argv!r}: {exc}") from None
        assert self._process.stdout is not None and self._process.stderr is not None
        self._stdout_reader = _start_reader(
            self._process.stdout, self._queue_answer, max_line, self._closing
        )
        self._stderr_reader = _start_reader(
            self._process.stderr,
            self._keep_stderr,
            STDERR_LINE_CHARS,
            self._closing,
            stop_at_long=False,
        )
        try:
            hello = self._request("hello", {"protocol": PROTOCOL_VERSION}, startup_timeout)
            self._handshake(hello, name)
        except CandidateFailure:
            self.close()  # the caller gets no object to close: release the pipes here
            raise

    # ------------------------------------------------------------------ identity

    @property
    def name(self) -> str:
        """The report name."""
        return self._name

    @property
    def levels(self) -> frozenset[str]:
        """Levels declared in ``hello``."""
        return self._levels

    @property
    def block_sizes(self) -> tuple[int, ...] | None:
        """Block sizes declared in ``hello`` (None: any)."""
        return self._block_sizes

    @property
    def protocol(self) -> int:
        """The protocol version the program answered ``hello`` with."""
        return self._protocol

    @property
    def operations(self) -> frozenset[str]:
        """The operations it supports: listed in ``hello`` (protocol 3), else those of its
        version and levels."""
        return self._operations

    # ------------------------------------------------------------------ operations

    def forward(self, op: str, *args: Any) -> Any:
        """One request: ``op`` with ``args`` named by the table; its ``ok`` answer. A
        format-1 dump of a protocol-1 program is upgraded (:func:`upgrade_dump`).

        Raises:
            CandidateError: the program answered an error (its kind).
            CandidateFailure: no well-formed answer in time (the program is killed).
        """
        fields = {
            argument.name: value
            for argument, value in zip(operation(op).arguments, args, strict=True)
            # An argument newer than the program's protocol is left out: the kit passes
            # only its default there (the policies level needs protocol 4, events 5).
            if argument.since <= self._protocol
        }
        answer = self._request(op, fields)
        if BY_NAME[op].shape and self._protocol == 1:
            return upgrade_dump(answer)
        return answer

    def close(self) -> None:
        """Close the program's stdin and let it exit; then end its whole process group
        (SIGTERM, then SIGKILL). Idempotent; never hangs."""
        process = self._process
        try:
            assert process.stdin is not None
            process.stdin.close()  # also after a failure, when the program is gone
        except OSError:
            pass  # it exited with our last request unread: nothing left to flush
        self._terminate(self._close_grace)
        # Each reader closes its own stream when it ends (see _start_reader): one still
        # blocked (a pipe held by a descendant out of reach) keeps it until that end.
        for reader in (self._stdout_reader, self._stderr_reader):
            reader.join(timeout=1)

    # ------------------------------------------------------------------ internals

    def _handshake(self, hello: Any, name: str | None) -> None:
        version = hello.get("protocol")
        if version not in SUPPORTED_PROTOCOLS or isinstance(version, bool):
            self._fail(
                f"hello: speaks protocol {version!r}, the kit speaks "
                f"{' or '.join(map(str, SUPPORTED_PROTOCOLS))}"
            )
        self._protocol = version
        levels = hello.get("levels")
        if not isinstance(levels, list) or not all(isinstance(level, str) for level in levels):
            self._fail(f"hello: levels must be a list of names from {list(LEVELS)}")
        try:
            self._levels = parse_levels(levels)
        except LevelError as exc:
            self._fail(f"hello: {exc}")
        for level in ordered(self._levels):  # each level's version: the table's rows say
            if version < level_since(level):
                self._fail(f"hello: the {level} level needs protocol {level_since(level)}")
        self._operations = operations_of(self._levels, version)
        if version >= 3:
            listed = hello.get("operations")
            if not isinstance(listed, list) or not all(op in BY_NAME for op in listed):
                self._fail(f"hello: operations must be a list of names from {list(BY_NAME)}")
            missing = sorted(required_of(self._levels) - set(listed))
            if missing:
                self._fail(
                    f"hello: its levels cannot be judged without {', '.join(missing)}, "
                    "which it does not list in operations"
                )
            self._operations = frozenset(listed) & operations_of(self._levels, version)
        sizes = hello.get("block_sizes")
        if sizes is not None and not (
            isinstance(sizes, list) and sizes and all(_positive_int(size) for size in sizes)
        ):
            self._fail("hello: block_sizes must be null or a non-empty list of ints >= 1")
        self._block_sizes = None if sizes is None else tuple(sizes)
        if name is None and isinstance(hello.get("name"), str) and hello["name"]:
            self._name = printable(hello["name"])

    def _request(self, op: str, fields: dict[str, Any], timeout: float | None = None) -> Any:
        if self._failed is not None:
            raise CandidateFailure(f"{op}: {self._name} already failed earlier ({self._failed})")
        request_id = next(self._ids)
        try:
            line = encode({"id": request_id, "op": op, **fields})
        except ValueError as exc:  # a kit bug: it never sends non-JSON values
            raise CandidateFailure(f"{op}: request cannot be encoded: {exc}") from None
        what = f"request {request_id} ({op})"
        process = self._process
        assert process.stdin is not None
        try:
            process.stdin.write(line.encode("utf-8") + b"\n")
            process.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            self._fail(f"{what}: could not write it, {self._exit_status()}")
        try:
            reply = self._answers.get(timeout=timeout or self._timeout)
        except queue.Empty:
            self._fail(f"{what}: no answer within {timeout or self._timeout:g} s (killed)")
        if reply is None:
            self._fail(f"{what}: the program closed its output, {self._exit_status()}")
        if isinstance(reply, _TooLong):
            self._fail(
                f"{what}: answer longer than {self._max_line} bytes without a newline "
                "(flooded output; killed)"
            )
        try:
            message = decode(reply)
        except ProtocolError as exc:
            self._fail(f"{what}: malformed answer, {exc}; it began {reply[:120]!r}")
        problem = response_problem(request_id, op, message, self._extra_fields(op))
        if problem is not None:
            self._fail(f"{what}: malformed answer, {problem}")
        if "error" in message:
            error = message["error"]
            raise CandidateError(error["kind"], str(error.get("message", "")))
        return message["ok"]

    def _extra_fields(self, op: str) -> tuple[str, ...]:
        extra: tuple[str, ...] = ()
        if op != "hello" and self._protocol >= 2:
            extra += V2_FIELDS.get(op, ())
        if SNAPSHOTS in self._levels:
            extra += SNAPSHOT_FIELDS.get(op, ())
        return extra

    def _exit_status(self) -> str:
        try:
            code = self._process.wait(timeout=1)
        except subprocess.TimeoutExpired:
            return "though it is still running"
        return f"it exited with status {code}"

    def _queue_answer(self, line: bytes | None) -> None:
        item: str | _TooLong | None = None
        if line is not None:
            if len(line) > self._max_line and not line.endswith(b"\n"):
                item = _TooLong()
            else:
                item = line.decode("utf-8", errors="replace")
        while not self._closing.is_set():
            try:
                self._answers.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def _keep_stderr(self, line: bytes | None) -> None:
        if line is not None:
            text = line.decode("utf-8", errors="replace").rstrip("\n")
            self._stderr.append(printable(text[:STDERR_LINE_CHARS]))

    def _terminate(self, grace: float) -> None:
        """Let the program exit within ``grace`` seconds, then end its process group:
        SIGTERM, :data:`TERM_GRACE` seconds, SIGKILL (descendants that outlive it go too)."""
        process = self._process
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            _signal_group(process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=TERM_GRACE)
        _signal_group(process.pid, signal.SIGKILL)
        process.wait()
        self._closing.set()

    def _fail(self, message: str) -> NoReturn:
        self._terminate(0)
        self._stderr_reader.join(timeout=1)  # collect the last words it wrote
        tail = list(self._stderr)
        if tail:
            message += "\n  stderr (last lines):\n" + "\n".join(f"    {line}" for line in tail)
        message = printable(message)  # a malformed answer is quoted in it
        self._failed = message.splitlines()[0]
        raise CandidateFailure(f"{self._name}: {message}")


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _signal_group(pid: int, signum: signal.Signals) -> None:
    """Send ``signum`` to the process group led by ``pid``; gone already is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def _start_reader(
    stream: IO[bytes],
    sink: Callable[[bytes | None], None],
    limit: int,
    closing: threading.Event,
    *,
    stop_at_long: bool = True,
) -> threading.Thread:
    """Feed ``stream``'s lines, then ``None``, to ``sink`` on a daemon thread.

    At most ``limit + 1`` bytes of a line are ever held: a longer line is passed on
    cut there, and then either the reading stops (``stop_at_long``: the sink reports
    it) or the rest of that line is skipped. Either way the pipe keeps being drained,
    so the program never blocks on a full pipe while it is being ended.

    The thread owns ``stream`` and closes it when it ends: nobody else may close it,
    since closing it under a blocked read could block on the stream's lock, and a
    stream left to the garbage collector open would leak its descriptor."""

    def pump() -> None:
        try:
            while not closing.is_set():
                line = stream.readline(limit + 1)
                if not line:
                    break
                sink(line)
                if len(line) > limit and not line.endswith(b"\n"):
                    if stop_at_long:
                        while not closing.is_set() and stream.read(1 << 16):
                            pass
                        return
                    while (rest := stream.readline(1 << 16)) and not rest.endswith(b"\n"):
                        pass
        except (OSError, ValueError):  # pragma: no cover - a read error on the pipe (the
            pass  # stream is never closed under its reader) ends the stream like EOF
        finally:
            stream.close()
        sink(None)

    thread = threading.Thread(target=pump, name="kachedb-radix-stdio", daemon=True)
    thread.start()
    return thread
