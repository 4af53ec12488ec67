"""JSON as the toolbox reads and writes it.

Reading (:func:`loads_json`):

- nesting is capped (``LIMITS["json_depth"]``) *before* the parser runs, so a line of
  100,000 brackets is refused in one line, never a ``RecursionError``;
- numbers are finite: ``NaN``, ``Infinity`` and ``-Infinity`` (which Python's ``json``
  accepts though JSON has no such literals) and a float that overflows (``1e400``) are
  refused, so nothing downstream ever computes with one;
- a parse error names where it happened (``trace t.jsonl line 3: not JSON (...)``).

Reading into a declared shape (:func:`decode_json`): a msgspec type (a ``Struct`` of
lists, ints, strings and bounded floats) checked while parsing, in C; nesting is capped
by the type itself (the parser refuses the first bracket the type has no room for, so a
100,000-deep body is refused at its second level), and msgspec refuses ``NaN``,
``Infinity`` and a float that overflows as JSON does. For HTTP bodies, whose shape is
fixed and whose size is large (a prompt's tokens).

Writing (:func:`dumps_json`): ``allow_nan=False`` always, so the toolbox never emits a
file or an HTTP answer that other JSON parsers reject.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, TypeVar

import msgspec

from .errors import InputError
from .limits import LIMITS

#: A JSON string (skipped: brackets inside strings do not nest) or one bracket.
_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def nesting_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON ``text`` (0 for a scalar).

    Brackets inside strings do not count. Text that is not JSON gets some number (the
    parser refuses it later). O(len(text)), in the regular-expression engine.
    """
    depth = deepest = 0
    for found in _STRING_OR_BRACKET.finditer(text):
        char = found.group()
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is too large for a float")
    return value


def loads_json(text: str, where: str, *, max_depth: int | None = None) -> Any:
    """Parse JSON ``text``; ``where`` names it in any error (``"trace t.jsonl line 3"``).

    ``max_depth`` defaults to ``LIMITS["json_depth"]``. O(len(text)).

    Raises:
        InputError: nested deeper than ``max_depth``; not JSON; a non-finite number
            (``NaN``, ``Infinity``, an overflowing float); an integer of more digits
            than Python converts.
    """
    cap = LIMITS["json_depth"].maximum if max_depth is None else max_depth
    # Fast path: the depth cannot exceed the number of opening brackets.
    if text.count("[") + text.count("{") > cap and nesting_depth(text) > cap:
        raise InputError(f"{where}: JSON nested deeper than {cap} levels")
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{where}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    except (ValueError, RecursionError) as exc:  # a refused number; int digits over the limit
        raise InputError(f"{where}: not usable JSON ({exc})") from None


_T = TypeVar("_T")


def decode_json(data: bytes, shape: type[_T], where: str) -> _T:
    """Parse JSON ``data`` into ``shape`` (a msgspec type with no ``Any`` in it);
    ``where`` names it in any error. O(len(data)).

    Raises:
        InputError: not UTF-8 JSON, or not of ``shape`` (msgspec's message, which names
            the path: ``Expected `int` >= 0 - at `$.tokens[3]```).
    """
    try:
        return msgspec.json.decode(data, type=shape)
    except msgspec.ValidationError as exc:
        raise InputError(f"{where}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise InputError(f"{where}: not JSON ({exc})") from None


def loads_json_object(text: str, where: str) -> dict[str, Any]:
    """:func:`loads_json`, and the value must be a JSON object. O(len(text)).

    Raises:
        InputError: as :func:`loads_json`, or the value is not an object.
    """
    value = loads_json(text, where)
    if not isinstance(value, dict):
        raise InputError(f"{where}: a JSON {_kind(value)}, not an object")
    return value


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return "number"


def dumps_json(value: Any, *, indent: int | None = None, sort_keys: bool = False) -> str:
    """``value`` as strict JSON text (never ``NaN`` or ``Infinity``). O(size of value).

    Raises:
        ValueError: ``value`` holds a non-finite float: a bug of the caller's, which must
            turn such a figure into ``null`` or refuse the input that produced it.
    """
    if indent is None:
        return json.dumps(value, allow_nan=False, sort_keys=sort_keys, separators=(",", ":"))
    return json.dumps(value, allow_nan=False, sort_keys=sort_keys, indent=indent)
