"""Trace formats: the Mooncake block-hash format and the token format, read and checked.

Both are JSON lines, one request per line; blank lines are ignored and so are
fields neither format names (real traces carry extra metadata).

**mooncake** (block hashes; the format of the Mooncake FAST '25 traces)::

    {"timestamp": 277, "input_length": 32140, "output_length": 92, "hash_ids": [198, 199, ...]}

``hash_ids`` (required): one id per ``tokens_per_block``-token block of the prompt
(512 in Mooncake), chained over the prefix, so equal ids at equal positions mean an
equal prefix; each id any JSON integer -- small counters as in Mooncake, or the 64-bit
block hashes vLLM, Dynamo and llm-d emit, signed or unsigned. ``input_length``
(required) must need exactly that many blocks: ``len(hash_ids) == ceil(input_length
/ tokens_per_block)`` (this catches a wrong ``--hash-block-tokens``). ``output_length`` (default 0),
``timestamp`` (milliseconds, >= 0, optional) and ``namespace`` (a string, optional).

**tokens** (prompt token ids)::

    {"tokens": [128000, 882, ...], "output_tokens": [40, 1097], "timestamp": 1500.0,
     "namespace": "tenant-a"}

``tokens`` (required): the prompt's token ids, each in [0, 2**32). Optional:
``output_tokens`` (the reply's ids, inserted after the prompt), ``output_length``
(defaults to ``len(output_tokens)``, must agree with it when both are given),
``timestamp`` (milliseconds, >= 0) and ``namespace``.

Both formats may also carry ``priority`` (an int 0..100) and ``retain_for`` (clock
ticks >= 1, only with a priority): the retention the request's client asks for its
inserts (R-POL-5), which the ``priority`` policy honours and the others ignore; and
``stage`` (an int >= 0): the load stage of a benchmark's rate ladder the request
belongs to (TTFT is reported per stage, and ``--stage-gap`` runs them one after
another).

**Caps** (:data:`kachedb_radix.spec.inputs.LIMITS`): a prompt of at most
``request_tokens`` tokens, an output of at most ``output_tokens``, at most
``trace_requests`` requests, a line of at most ``line_bytes`` nested at most
``json_depth`` deep: past any of them the trace is refused in one line naming where.

**Hash ids to tree keys.** The tree's tokens are 32-bit, so a block-hash trace whose
ids all lie in [0, 2**32) uses them as they are; otherwise every distinct id of the
trace is given a dense key in the order first seen (0, 1, 2, ...) through one dict,
over the whole trace. The map is exact -- two ids share a key only when they are
equal -- for any trace with fewer than 2**32 distinct ids (any trace that fits in
memory), and since only equality of ids matters, every figure is the same as if the
tree held the ids themselves.

The file is read line by line through the shared input layer
(:func:`kachedb_radix.spec.inputs.iter_lines`: missing, a directory, binary or not
UTF-8 refused naming the file and the line); a line with more brackets than the
nesting cap is parsed by :func:`~kachedb_radix.spec.inputs.loads_json` first, which
refuses it in one line (msgspec would recurse), and so is the first line, which
tells the format. A UTF-8 byte-order mark at the start of the file is skipped
(editors on Windows write one); a UTF-16 file is refused, saying so.

The format is taken from ``--format`` or detected from the first non-blank line (a
``hash_ids`` field means mooncake, a ``tokens`` field means tokens). A bad line
raises :class:`~kachedb_radix.spec.simulate.errors.TraceLineError` naming the line and the field;
with ``skip_bad`` it is counted and left out instead. Decoding uses msgspec: typed
validation in C (its error paths name the field), and decoding alone about 3x faster
than the standard library's ``json.loads`` on Mooncake lines; reading a whole trace
into records is timed in ``benchmarks/bench_simulate.py`` (``test_parse``).
"""

from __future__ import annotations

import itertools
import math
import re
from array import array
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from ..inputs import LIMITS, InputError, iter_lines, loads_json
from .errors import SimulateError, TraceLineError
from .trace import Request, SkippedLine, Trace

FORMATS = ("mooncake", "tokens")

UTF8_BOM = b"\xef\xbb\xbf"
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
#: The placeholder tokens of a request whose hash ids need dense keys.
_WIDE = array("I")

TokenId = Annotated[int, Meta(ge=0, lt=2**32)]
Count = Annotated[int, Meta(ge=0, le=LIMITS["request_tokens"].maximum)]
Output = Annotated[int, Meta(ge=0, le=LIMITS["output_tokens"].maximum)]
Millis = Annotated[float, Meta(ge=0, le=1e15)]  # 31,000 years: finite, never overflowing
Stage = Annotated[int, Meta(ge=0, le=2**31)]
Priority = Annotated[int, Meta(ge=0, le=100)]
Ticks = Annotated[int, Meta(ge=1)]


class MooncakeLine(msgspec.Struct, kw_only=True):
    """One line of a block-hash trace."""

    hash_ids: list[int]
    input_length: Count
    output_length: Output = 0
    timestamp: Millis | None = None
    namespace: str | None = None
    priority: Priority | None = None
    retain_for: Ticks | None = None
    stage: Stage | None = None


class TokensLine(msgspec.Struct, kw_only=True):
    """One line of a token trace."""

    tokens: list[TokenId]
    output_tokens: (
        Annotated[list[TokenId], Meta(max_length=LIMITS["output_tokens"].maximum)] | None
    ) = None
    output_length: Output | None = None
    timestamp: Millis | None = None
    namespace: str | None = None
    priority: Priority | None = None
    retain_for: Ticks | None = None
    stage: Stage | None = None


_AT = re.compile(r"^(?P<reason>.*) - at `\$(?P<path>.*)`$")
_MISSING = re.compile(r"^Object missing required field `(?P<field>[^`]*)`")


def read_trace(
    path: str | Path,
    *,
    format: str = "auto",
    block_size: int = 16,
    tokens_per_block: int = 512,
    skip_bad: bool = False,
) -> Trace:
    """Read a trace file, line by line (see the module docstring). Cost: O(size of
    the file).

    Args:
        path: a JSON-lines file.
        format: ``auto``, ``mooncake`` or ``tokens``.
        block_size: B for token traces (block-hash traces always use 1).
        tokens_per_block: real tokens per hash id of block-hash traces.
        skip_bad: count and leave out bad lines instead of raising.

    Raises:
        SimulateError: the file cannot be read (missing, a directory, binary, not UTF-8,
            UTF-16), the format is unknown or cannot be told, a cap is passed, or no
            request is left.
        TraceLineError: a bad line (without ``skip_bad``).
    """
    lines = iter_lines(path, "trace")
    try:
        first = next(lines, None)
    except InputError as error:
        if _starts_utf16(Path(path)):
            raise SimulateError(_utf16(str(path))) from None
        raise SimulateError(str(error)) from None
    ahead = [] if first is None else [(first[0], first[1].removeprefix("\ufeff"))]
    return parse_lines(
        itertools.chain(ahead, lines), str(path), format=format, block_size=block_size,
        tokens_per_block=tokens_per_block, skip_bad=skip_bad,
    )  # fmt: skip


def _starts_utf16(path: Path) -> bool:
    """Whether the readable file ``path`` starts with a UTF-16 byte-order mark. O(1)."""
    try:
        with path.open("rb") as file:
            return file.read(2) in UTF16_BOMS
    except OSError:
        return False


def _utf16(source: str) -> str:
    return (
        f"{source}: the trace is UTF-16 (it starts with a UTF-16 byte-order mark); save it as UTF-8"
    )


def parse_trace(
    data: bytes,
    source: str,
    *,
    format: str = "auto",
    block_size: int = 16,
    tokens_per_block: int = 512,
    skip_bad: bool = False,
) -> Trace:
    """Parse a trace held in memory; ``source`` names it in messages. See :func:`read_trace`.

    Raises:
        SimulateError: as :func:`read_trace`.
        TraceLineError: a bad line (without ``skip_bad``).
    """
    if data.startswith(UTF16_BOMS):
        raise SimulateError(_utf16(source))
    try:
        text = data.removeprefix(UTF8_BOM).decode("utf-8")
    except UnicodeDecodeError as error:
        raise SimulateError(f"{source}: not UTF-8 (byte 0x{data[error.start]:02x} at offset "
                            f"{error.start})") from None  # fmt: skip
    lines = enumerate(text.splitlines(), 1)
    return parse_lines(lines, source, format=format, block_size=block_size,
                       tokens_per_block=tokens_per_block, skip_bad=skip_bad)  # fmt: skip


def parse_lines(
    lines: Iterable[tuple[int, str]],
    source: str,
    *,
    format: str = "auto",
    block_size: int = 16,
    tokens_per_block: int = 512,
    skip_bad: bool = False,
) -> Trace:
    """Parse a trace's ``(line number, text)`` lines; ``source`` names it in messages.
    See :func:`read_trace`. O(their size).

    Raises:
        SimulateError: as :func:`read_trace`.
        TraceLineError: a bad line (without ``skip_bad``).
    """
    if format not in ("auto", *FORMATS):
        raise SimulateError(f"unknown trace format {format!r}; choose auto, {', '.join(FORMATS)}")
    for name, value in (("block size", block_size), ("tokens per block", tokens_per_block)):
        if value < 1:
            raise SimulateError(f"{name} must be >= 1, got {value}")
    requests: list[Request] = []
    skipped: list[SkippedLine] = []
    wide: dict[int, list[int]] = {}  # the ids of lines with one beyond 32 bits, by line
    decoder: Any = None
    decode: Any = None
    most = LIMITS["trace_requests"].maximum
    try:
        for number, text in lines:
            if not text.strip():
                continue
            if decoder is None:
                format = detect_format(number, text, source) if format == "auto" else format
                decode = _mooncake_request if format == "mooncake" else _tokens_request
                decoder = msgspec.json.Decoder(MooncakeLine if format == "mooncake" else TokensLine)
            try:
                _check_nesting(text, number, source)
                requests.append(decode(decoder, text, number, source, tokens_per_block, wide))
            except TraceLineError as error:
                if not skip_bad:
                    raise
                skipped.append(SkippedLine(number, error.detail))
            if len(requests) > most:
                raise SimulateError(f"{source}: more than {most:,} requests (the cap)")
    except InputError as error:
        raise SimulateError(str(error)) from None
    if decoder is None:
        raise SimulateError(f"{source}: the trace is empty")
    if not requests:
        why = f" ({len(skipped)} bad lines skipped)" if skipped else ""
        raise SimulateError(f"{source}: no requests in the trace{why}")
    if format == "mooncake":
        if wide:
            requests = dense_keys(requests, wide)
        return Trace(requests, format, 1, tokens_per_block, source, skipped)
    return Trace(requests, format, block_size, 1, source, skipped)


def _check_nesting(text: str, number: int, source: str) -> None:
    """Refuse a line nested past the cap before msgspec, which recurses, sees it. O(len)."""
    if text.count("[") + text.count("{") > LIMITS["json_depth"].maximum:
        try:
            loads_json(text, "")
        except InputError as error:
            raise TraceLineError(source, number, None, str(error).lstrip(": ")) from None


def dense_keys(requests: list[Request], wide: dict[int, list[int]]) -> list[Request]:
    """``requests`` with every hash id replaced by its dense key (see the module
    docstring); ``wide`` holds the ids of the lines that did not fit 32 bits, by line
    number. O(total ids).

    Raises:
        SimulateError: 2**32 distinct ids or more (no 32-bit key is left).
    """
    keys: dict[int, int] = {}
    remapped = []
    for request in requests:
        ids = wide[request.line] if request.tokens is _WIDE else request.tokens.tolist()
        mapped = array("I", [keys.setdefault(value, len(keys)) for value in ids])
        if len(keys) > 1 << 32:  # pragma: no cover - it takes a trace of hundreds of GiB
            raise SimulateError("the trace has 2**32 distinct hash ids or more")
        remapped.append(replace(request, tokens=mapped, sequence=mapped))
    return remapped


def detect_format(number: int, text: str, source: str) -> str:
    """``mooncake`` or ``tokens``, from the first non-blank line's fields (parsed by
    :func:`~kachedb_radix.spec.inputs.loads_json`: depth-capped, finite). O(that line).

    Raises:
        TraceLineError: the first line is not a JSON object of either format.
    """
    try:
        first: Any = loads_json(text, "")
    except InputError as error:
        raise TraceLineError(source, number, None, str(error).lstrip(": ")) from None
    if isinstance(first, dict):
        if "hash_ids" in first:
            return "mooncake"
        if "tokens" in first:
            return "tokens"
    raise TraceLineError(
        source,
        number,
        None,
        "cannot tell the format: expected an object with a 'hash_ids' field (mooncake) "
        "or a 'tokens' field (tokens); give --format to say which",
    )


def _decode(decoder: msgspec.json.Decoder[Any], raw: str, number: int, source: str) -> Any:
    try:
        return decoder.decode(raw)
    except msgspec.ValidationError as error:
        raise _validation_error(str(error), number, source) from None
    except msgspec.DecodeError as error:
        raise TraceLineError(source, number, None, f"not valid JSON ({error})") from None


def _validation_error(message: str, number: int, source: str) -> TraceLineError:
    missing = _MISSING.match(message)
    if missing:
        return TraceLineError(source, number, missing["field"], "missing (it is required)")
    located = _AT.match(message)
    if located is None:
        return TraceLineError(source, number, None, message)
    path = located["path"].removeprefix(".")
    return TraceLineError(source, number, path or None, located["reason"])


def _mooncake_request(
    decoder: msgspec.json.Decoder[Any],
    raw: str,
    number: int,
    source: str,
    per_block: int,
    wide: dict[int, list[int]],
) -> Request:
    line: MooncakeLine = _decode(decoder, raw, number, source)
    needed = math.ceil(line.input_length / per_block)
    if len(line.hash_ids) != needed:
        raise TraceLineError(
            source,
            number,
            "hash_ids",
            f"has {len(line.hash_ids)} ids, but input_length {line.input_length} needs "
            f"{needed} blocks of {per_block} tokens (is --hash-block-tokens right?)",
        )
    _check_retention(line.priority, line.retain_for, number, source)
    try:
        ids = array("I", line.hash_ids)
    except OverflowError:  # an id beyond 32 bits: the whole trace gets dense keys
        ids = _WIDE
        wide[number] = line.hash_ids
    return Request(
        ids,
        ids,
        line.input_length,
        line.output_length,
        line.timestamp,
        line.namespace,
        number,
        line.priority,
        line.retain_for,
        line.stage,
    )


def _check_retention(
    priority: int | None, retain_for: int | None, number: int, source: str
) -> None:
    """A ``retain_for`` needs a ``priority`` (R-POL-8), as the tree will insist."""
    if retain_for is not None and priority is None:
        raise TraceLineError(source, number, "retain_for", "is given without a priority")


def _tokens_request(
    decoder: msgspec.json.Decoder[Any],
    raw: str,
    number: int,
    source: str,
    _per_block: int,
    _wide: dict[int, list[int]],
) -> Request:
    line: TokensLine = _decode(decoder, raw, number, source)
    prompt = array("I", line.tokens)
    sequence = prompt
    output_length = line.output_length or 0
    if line.output_tokens is not None:
        if line.output_length is not None and line.output_length != len(line.output_tokens):
            raise TraceLineError(
                source,
                number,
                "output_length",
                f"is {line.output_length} but output_tokens has {len(line.output_tokens)} ids",
            )
        output_length = len(line.output_tokens)
        sequence = prompt + array("I", line.output_tokens)
    _check_retention(line.priority, line.retain_for, number, source)
    return Request(
        prompt,
        sequence,
        len(prompt),
        output_length,
        line.timestamp,
        line.namespace,
        number,
        line.priority,
        line.retain_for,
        line.stage,
    )
