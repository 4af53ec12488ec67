"""The checked-input layer (spec/inputs): every refusal is one line naming the input.

Each reader and parse-time type is tried on what users actually hand over by mistake
(missing files, directories, binary, not UTF-8, deep nesting, NaN, huge numbers, empty
lists) and on good input, which it must return unchanged.
"""

from __future__ import annotations

import argparse
import os
import stat
from pathlib import Path

import pytest

from kachedb_radix.spec.inputs import (
    LIMITS,
    InputError,
    choice_list,
    count,
    count_list,
    count_range,
    dumps_json,
    input_path,
    input_path_or,
    iter_lines,
    json_object,
    limits_table,
    loads_json,
    loads_json_object,
    output_dir,
    output_file,
    printable,
    read_json,
    read_text,
    read_toml,
    real,
)
from kachedb_radix.spec.inputs.errors import QUOTE_CHARS, quote
from kachedb_radix.spec.inputs.jsontext import nesting_depth

DEEP = '{"a":' * 100_000 + "1" + "}" * 100_000


def _one_line(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text and text
    return text


# -- JSON ---------------------------------------------------------------------------


def test_json_good_values_parse_unchanged() -> None:
    assert loads_json('{"a": [1, 2.5, "x", null, true]}', "here") == {
        "a": [1, 2.5, "x", None, True]
    }
    assert loads_json_object('{"op": "insert"}', "here") == {"op": "insert"}


def test_json_deep_nesting_is_refused_before_the_parser() -> None:
    with pytest.raises(InputError, match="here: JSON nested deeper than 64 levels"):
        loads_json(DEEP, "here")
    # Exactly at the cap is fine; one more is refused.
    cap = LIMITS["json_depth"].maximum
    assert loads_json("[" * cap + "]" * cap, "here") == loads_json("[" * cap + "]" * cap, "x")
    with pytest.raises(InputError, match="deeper"):
        loads_json("[" * (cap + 1) + "]" * (cap + 1), "here")


def test_json_brackets_in_strings_do_not_nest() -> None:
    text = '{"a": "' + "[" * 1000 + '"}'
    assert nesting_depth(text) == 1
    assert loads_json(text, "here") == {"a": "[" * 1000}
    assert nesting_depth('"\\"[[["') == 0


@pytest.mark.parametrize("text", ["NaN", "[Infinity]", '{"a": -Infinity}', "1e400", "[-1e999]"])
def test_json_non_finite_numbers_are_refused(text: str) -> None:
    with pytest.raises(InputError, match="here: not usable JSON") as caught:
        loads_json(text, "here")
    _one_line(caught.value)


def test_json_huge_integer_is_refused() -> None:
    with pytest.raises(InputError, match="not usable JSON"):
        loads_json("1" * 5000, "here")


def test_json_not_json_names_the_place() -> None:
    with pytest.raises(InputError, match=r"trace t line 3: not JSON \(Expecting"):
        loads_json("{op:", "trace t line 3")


@pytest.mark.parametrize(
    ("text", "kind"),
    [("[]", "array"), ('"x"', "string"), ("null", "null"), ("true", "boolean"), ("1", "number")],
)
def test_json_object_wanted(text: str, kind: str) -> None:
    with pytest.raises(InputError, match=f"here: a JSON {kind}, not an object"):
        loads_json_object(text, "here")


def test_dumps_is_strict() -> None:
    assert dumps_json({"a": 1}) == '{"a":1}'
    assert dumps_json({"b": 1, "a": 2}, indent=1, sort_keys=True).startswith('{\n "a"')
    with pytest.raises(ValueError, match="not JSON compliant"):
        dumps_json({"a": float("nan")})


# -- errors -------------------------------------------------------------------------


def test_error_text_is_one_line_and_quotes_are_short() -> None:
    assert str(InputError("a\nb\tc")) == "a b c"
    long = "x" * 500
    assert quote(long).startswith(repr("x" * QUOTE_CHARS)) and "(500 characters)" in quote(long)
    assert quote("\x1b[31m") == repr("\x1b[31m")  # escape bytes never reach a terminal raw


# -- files --------------------------------------------------------------------------


def test_read_text_refusals(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        read_text(tmp_path / "nope", "profile")
    with pytest.raises(InputError, match="a directory, not a file"):
        read_text(tmp_path, "profile")
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"ok\xff")
    with pytest.raises(
        InputError, match=r"profile .*bad.toml: not UTF-8 \(byte 0xff at offset 2\)"
    ):
        read_text(bad, "profile")
    binary = tmp_path / "bin"
    binary.write_bytes(b"ab\0cd")
    with pytest.raises(InputError, match=r"binary, not text .a NUL byte at offset 2"):
        read_text(binary, "trace")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        read_text(fifo, "trace")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_read_text_unreadable(tmp_path: Path) -> None:  # pragma: no cover - CI runs as root
    locked = tmp_path / "locked"
    locked.write_text("x")
    locked.chmod(0)
    with pytest.raises(InputError, match="cannot be read"):
        read_text(locked, "trace")


def test_read_text_over_the_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kachedb_radix.spec.inputs import limits

    big = tmp_path / "big"
    big.write_text("x" * 100)
    monkeypatch.setitem(
        limits.LIMITS, "text_file_bytes", limits.Limit("text_file_bytes", 10, "bytes", "", "")
    )
    with pytest.raises(InputError, match="100 bytes, over the cap of 10"):
        read_text(big, "trace")


def test_iter_lines_streams_and_names_the_line(tmp_path: Path) -> None:
    good = tmp_path / "t.jsonl"
    good.write_bytes(b'{"a":1}\r\n\n{"b":2}')
    assert list(iter_lines(good, "trace")) == [(1, '{"a":1}'), (2, ""), (3, '{"b":2}')]
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"a":1}\n\xc3\x28\n')
    lines = iter_lines(bad, "trace")
    assert next(lines) == (1, '{"a":1}')
    with pytest.raises(InputError, match=r"trace .*bad.jsonl line 2: not UTF-8"):
        next(lines)


def test_iter_lines_long_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kachedb_radix.spec.inputs import limits

    monkeypatch.setitem(limits.LIMITS, "line_bytes", limits.Limit("line_bytes", 8, "bytes", "", ""))
    path = tmp_path / "t"
    path.write_text("short\n" + "y" * 50 + "\n")
    lines = iter_lines(path, "trace")
    assert next(lines) == (1, "short")
    with pytest.raises(InputError, match="line 2: over the cap of 8 bytes"):
        next(lines)


def test_read_json_and_toml(tmp_path: Path) -> None:
    js = tmp_path / "b.json"
    js.write_text('{"cases": {}}')
    assert read_json(js, "baseline") == {"cases": {}}
    js.write_text(DEEP)
    with pytest.raises(InputError, match=r"baseline .*b.json: JSON nested deeper"):
        read_json(js, "baseline")
    toml = tmp_path / "p.toml"
    toml.write_text('name = "x"\n[tolerate]\nmatch_cap = "last_token"\n')
    assert read_toml(toml, "profile") == {"name": "x", "tolerate": {"match_cap": "last_token"}}
    toml.write_text("a = " + "[" * 100_000 + "]" * 100_000)
    with pytest.raises(InputError, match=r"profile .*p.toml: nested deeper than 64 levels"):
        read_toml(toml, "profile")
    toml.write_text("a = [")
    with pytest.raises(InputError, match="not TOML"):
        read_toml(toml, "profile")
    # A quote inside a TOML literal string hides brackets from the count; the parser's
    # own recursion limit is then refused the same way.
    toml.write_text("x = '\"'\ny = " + "[" * 100_000 + "]" * 100_000 + "\nz = '\"'\n")
    with pytest.raises(InputError, match="nested too deeply"):
        read_toml(toml, "profile")


# -- argparse types -----------------------------------------------------------------


def _refused(parse: object, word: str, message: str) -> None:
    assert callable(parse)
    with pytest.raises(argparse.ArgumentTypeError, match=message) as caught:
        parse(word)
    _one_line(caught.value)


def test_count() -> None:
    steps = count(1, 2000)
    assert steps("7") == 7 and steps(" 2_000 ") == 2000 and steps.__name__ == "integer"
    _refused(steps, "0", "0 is below the least allowed, 1")
    _refused(steps, "2001", "2001 is over the most allowed, 2,000")
    _refused(steps, "1.5", "'1.5' is not an integer")
    _refused(steps, "x" * 200, r"\(200 characters\)")


def test_real() -> None:
    weight = real(0.0, 1e6)
    assert weight("0") == 0.0 and weight("2.5") == 2.5 and weight.__name__ == "number"
    for word in ("nan", "inf", "-inf", "1e400"):
        _refused(weight, word, "not a finite number")
    _refused(weight, "-1", "-1 must be at least 0")
    _refused(weight, "2e6", "over the most allowed")
    _refused(weight, "fast", "'fast' is not a number")
    timeout = real(0.0, 3600.0, above=True)
    _refused(timeout, "0", "0 must be above 0")
    assert timeout("0.5") == 0.5


def test_choice_list() -> None:
    policies = choice_list({"lru", "lfu", "fifo"}, most=2)
    assert policies("lru, lfu,lru") == ["lru", "lfu"]
    _refused(policies, ",,,", "empty name")
    _refused(policies, "", "empty name")
    _refused(policies, "lru,bogus", r"unknown 'bogus' \(choose from fifo, lfu, lru\)")
    _refused(policies, "lru,lfu,fifo", "3 names, over the most allowed, 2")


def test_paths(tmp_path: Path) -> None:
    real_file = tmp_path / "t.jsonl"
    real_file.write_text("x")
    assert input_path(str(real_file)) == real_file
    _refused(input_path, "", "an empty path")
    _refused(input_path, str(tmp_path / "nope"), "no such file")
    _refused(input_path, str(tmp_path), "a directory, not a file")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    _refused(input_path, str(fifo), "not a regular file")

    assert output_file(str(tmp_path / "out.json")) == tmp_path / "out.json"
    _refused(output_file, "", "an empty path")
    _refused(output_file, str(tmp_path), "a directory; give a file name")
    _refused(output_file, str(tmp_path / "no" / "out.json"), "no directory")
    assert output_file("relative.json") == Path("relative.json")

    assert output_dir(str(tmp_path / "new" / "deeper")) == tmp_path / "new" / "deeper"
    assert not (tmp_path / "new").exists()  # nothing is created while checking
    _refused(output_dir, "", "an empty path")
    _refused(output_dir, str(real_file), "a file, not a directory")
    _refused(output_dir, str(real_file / "below"), "is a file, not a directory")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere whatever the mode")
def test_paths_not_writable(tmp_path: Path) -> None:  # pragma: no cover - CI runs as root
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    _refused(output_file, str(locked / "x"), "cannot be written")
    _refused(output_dir, str(locked / "x"), "cannot be written")
    (tmp_path / "ro").write_text("x")
    (tmp_path / "ro").chmod(stat.S_IRUSR)
    _refused(input_path, str(tmp_path / "nope"), "no such file")


def test_limits_describe_themselves() -> None:
    assert LIMITS["json_depth"].describe() == "at most 64 levels"
    for name, row in LIMITS.items():
        assert row.name == name and row.maximum > 0 and row.why and row.what


# -- the primitives issue 32's options needed -----------------------------------------


def test_count_list() -> None:
    sizes = count_list(1, 1024, most_items=3)
    assert sizes("1, 2,2") == (1, 2) and sizes("7") == (7,) and sizes.__name__ == "list"
    _refused(sizes, "", "empty item")
    _refused(sizes, "1,,2", "empty item")
    _refused(sizes, "0", "0 is below the least allowed, 1")
    _refused(sizes, "1,2,3,4", "4 items, over the most allowed, 3")
    _refused(sizes, "2048", "over the most allowed, 1,024")
    _refused(sizes, "1,x", "'x' is not an integer")


def test_count_range() -> None:
    pools = count_range(1, 65536)
    assert pools("2-4096") == (2, 4096) and pools(" 8 ") == (8, 8) and pools.__name__ == "range"
    _refused(pools, "5-2", "the smaller end comes first")
    _refused(pools, "0-4", "0 is below the least allowed, 1")
    _refused(pools, "1-99999999", "over the most allowed, 65,536")
    _refused(pools, "-", "'' is not an integer")
    _refused(pools, "2-", "'' is not an integer")


def test_json_object() -> None:
    assert json_object('{"protected_percent": 50}') == {"protected_percent": 50}
    assert json_object.__name__ == "JSON object"
    _refused(json_object, "[1]", "a JSON array, not an object")
    _refused(json_object, "{", "not JSON")
    _refused(json_object, '{"a": NaN}', "not usable JSON")
    _refused(json_object, "[" * 100 + "]" * 100, "nested deeper than 64 levels")


def test_input_path_or(tmp_path: Path) -> None:
    profile = input_path_or("strict")
    assert profile("strict") == "strict" and profile.__name__ == "path"
    (tmp_path / "p.toml").write_text("")
    assert profile(str(tmp_path / "p.toml")) == tmp_path / "p.toml"
    _refused(profile, str(tmp_path / "nope.toml"), "no such file")
    _refused(profile, str(tmp_path), "a directory, not a file")


def test_printable_escapes_what_a_terminal_would_obey() -> None:
    """A candidate's stderr or answer reaches the terminal as text (issue 32)."""
    raw = "ok\tline\nnext \x1b[2J\x1b]0;title\x07 \x9b31m \u202eevil\u202c \x00 \r café"
    shown = printable(raw)
    assert shown == (
        "ok\tline\nnext \\x1b[2J\\x1b]0;title\\x07 \\x9b31m \\u202eevil\\u202c \\x00 \\r café"
    )
    assert not any(ord(char) < 32 and char not in "\t\n" for char in shown)
    assert printable("plain") == "plain"


def test_the_reliability_page_states_the_caps_of_the_table() -> None:
    """docs/reliability.md shows every cap as :data:`LIMITS` holds it, word for word."""
    page = (Path(__file__).parents[2] / "docs" / "reliability.md").read_text(encoding="utf-8")
    table = limits_table()
    assert table in page
    assert len(table.splitlines()) == len(LIMITS) + 2
    assert "| `pool_blocks` | 16,777,216 blocks |" in table
