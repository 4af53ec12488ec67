"""Trace formats: both read as documented, detected, written back; bad lines named or skipped."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from kachedb_radix.spec.simulate.errors import SimulateError, TraceLineError
from kachedb_radix.spec.simulate.export import mooncake_lines, token_lines, write_lines
from kachedb_radix.spec.simulate.formats import parse_trace, read_trace
from kachedb_radix.spec.simulate.prefix import prefix_paths
from kachedb_radix.spec.simulate.workload import WorkloadSpec, generate
from tests.support.simulate import MOONCAKE_SAMPLE, token_trace


def _lines(*objects: object) -> bytes:
    return "\n".join(o if isinstance(o, str) else json.dumps(o) for o in objects).encode()


def test_the_mooncake_sample_reads_as_documented() -> None:
    trace = read_trace(MOONCAKE_SAMPLE)
    first = trace.requests[0]
    assert (trace.format, trace.block_size, trace.token_scale) == ("mooncake", 1, 512)
    assert len(trace.requests) == 300 and trace.tokens_per_block == 512
    assert (first.prompt_tokens, first.output_tokens, first.timestamp) == (40160, 6, 0.0)
    assert first.tokens.tolist() == list(range(79)) and first.sequence is first.tokens
    assert first.tokens.typecode == "I" and first.line == 1 and first.namespace is None
    # the partial last block counts only its own tokens
    assert trace.saved_tokens(first, 79) == 40160 and trace.saved_tokens(first, 2) == 1024


def test_token_lines_with_every_field() -> None:
    data = _lines(
        {"tokens": [5, 6, 7], "output_tokens": [8, 9], "timestamp": 2, "namespace": "a"},
        "",
        {"tokens": [5, 6], "output_length": 4, "extra": "ignored"},
        {"tokens": [1], "output_tokens": [2], "output_length": 1},
    )
    trace = parse_trace(data, "t.jsonl", block_size=2)
    one, two, three = trace.requests
    assert (trace.format, trace.block_size, trace.token_scale) == ("tokens", 2, 1)
    assert one.sequence.tolist() == [5, 6, 7, 8, 9] and one.tokens.tolist() == [5, 6, 7]
    assert (one.output_tokens, one.timestamp, one.namespace, one.line) == (2, 2.0, "a", 1)
    assert (two.output_tokens, two.sequence is two.tokens, two.line) == (4, True, 3)
    assert three.output_tokens == 1
    assert not trace.has_timestamps()
    assert trace.prompt_blocks(one) == 1 and trace.saved_tokens(one, 2) == 2


def test_format_given_or_detected() -> None:
    tokens = _lines({"tokens": [1]})
    assert parse_trace(tokens, "x").format == "tokens"
    with pytest.raises(TraceLineError, match=r"line 1: field 'hash_ids': missing"):
        parse_trace(tokens, "x", format="mooncake")
    with pytest.raises(SimulateError, match="unknown trace format 'csv'"):
        parse_trace(tokens, "x", format="csv")
    with pytest.raises(SimulateError, match="block size must be >= 1"):
        parse_trace(tokens, "x", block_size=0)


BAD_LINES = [
    ('{"hash_ids": [1, "a"], "input_length": 600}', "hash_ids[1]", "Expected `int`, got `str`"),
    ('{"hash_ids": [1, 2.5], "input_length": 600}', "hash_ids[1]", "Expected `int`, got `float`"),
    ('{"input_length": 6}', "hash_ids", "missing (it is required)"),
    ('{"hash_ids": [1], "input_length": 6, "timestamp": -1}', "timestamp", ">= 0.0"),
    ('{"hash_ids": [1], "input_length": 6, "namespace": 3}', "namespace", "Expected `str"),
    ('{"hash_ids": [1, 2], "input_length": 6}', "hash_ids", "needs 1 blocks of 512 tokens"),
    ('{"hash_ids": [1]', None, "not valid JSON"),
    ("[1, 2]", None, "Expected `object`, got `array`"),
]


@pytest.mark.parametrize(("line", "field", "reason"), BAD_LINES)
def test_a_bad_line_is_named_with_its_field(line: str, field: str | None, reason: str) -> None:
    data = _lines({"hash_ids": [1], "input_length": 6}, line)
    with pytest.raises(TraceLineError) as caught:
        parse_trace(data, "trace.jsonl")
    error = caught.value
    assert (error.source, error.line, error.field) == ("trace.jsonl", 2, field)
    assert reason in error.reason
    assert str(error).startswith("trace.jsonl, line 2: ")


def test_bad_token_lines() -> None:
    good = {"tokens": [1]}
    with pytest.raises(TraceLineError, match=r"line 2: field 'output_length': is 3 but"):
        parse_trace(_lines(good, {"tokens": [1], "output_tokens": [1], "output_length": 3}), "t")
    with pytest.raises(TraceLineError, match=r"line 2: field 'tokens\[0\]'"):
        parse_trace(_lines(good, {"tokens": [True]}), "t")


def test_skip_bad_counts_and_skips() -> None:
    data = _lines({"hash_ids": [1], "input_length": 6}, *(line for line, _, _ in BAD_LINES))
    trace = parse_trace(data, "x", skip_bad=True)
    assert len(trace.requests) == 1
    assert [skipped.line for skipped in trace.skipped] == list(range(2, 2 + len(BAD_LINES)))
    assert trace.skipped[0].reason.startswith("field 'hash_ids[1]': Expected `int`")
    with pytest.raises(SimulateError, match=r"no requests in the trace \(1 bad lines skipped\)"):
        parse_trace(_lines({"hash_ids": [1]}), "x", skip_bad=True)


def test_traces_that_cannot_be_read(tmp_path: Path) -> None:
    with pytest.raises(SimulateError, match="the trace is empty"):
        parse_trace(b"\n  \n", "x")
    for first in ({"prompt": [1]}, [1]):
        with pytest.raises(TraceLineError, match="line 1: cannot tell the format"):
            parse_trace(_lines(first), "x")
    with pytest.raises(TraceLineError, match=r"line 1: not JSON"):
        parse_trace(b"{x", "x")
    with pytest.raises(SimulateError, match=r"x: not UTF-8 \(byte 0xff at offset 0\)"):
        parse_trace(b"\xff", "x")
    with pytest.raises(SimulateError, match=r"x: the trace is UTF-16 .*save it as UTF-8"):
        parse_trace('{"tokens": [1]}'.encode("utf-16"), "x")
    with pytest.raises(SimulateError, match=r"trace .*missing.jsonl: no such file"):
        read_trace(tmp_path / "missing.jsonl")
    (tmp_path / "utf16.jsonl").write_bytes('{"tokens": [1]}'.encode("utf-16"))
    with pytest.raises(SimulateError, match=r"utf16.jsonl: the trace is UTF-16"):
        read_trace(tmp_path / "utf16.jsonl")
    for name, data, message in (
        ("binary.jsonl", b'{"tokens": [1]}\n\x00\x01', "line 2: binary, not text"),
        ("latin1.jsonl", b'{"tokens": [1]}\n{"tokens": [1], "namespace": "\xe9"}\n',
         "line 2: not UTF-8"),
        ("empty.jsonl", b"", "the trace is empty"),
    ):  # fmt: skip
        (tmp_path / name).write_bytes(data)
        with pytest.raises(SimulateError, match=message):
            read_trace(tmp_path / name)
    with pytest.raises(SimulateError, match="a directory, not a file"):
        read_trace(tmp_path)


def test_lines_nested_past_the_cap_are_refused_in_one_line(tmp_path: Path) -> None:
    """100,000 nested brackets (issue 32): a one-line refusal naming the line, never a
    RecursionError, as the first line and as a later one (then skippable)."""
    deep = '{"a":' * 100_000 + "1" + "}" * 100_000
    good = '{"hash_ids": [1], "input_length": 10, "timestamp": 0}'
    for lines, number in (
        ([deep, good], 1),
        ([good, deep.replace('{"a":', '{"hash_ids": [1], "input_length": 10, "x":', 1)], 2),
    ):
        path = tmp_path / f"deep{number}.jsonl"
        path.write_text("\n".join(lines) + "\n")
        with pytest.raises(
            TraceLineError, match=f"line {number}: JSON nested deeper than 64 levels"
        ):
            read_trace(path)
    assert len(read_trace(tmp_path / "deep2.jsonl", skip_bad=True).requests) == 1


def test_token_trace_round_trip(tmp_path: Path) -> None:
    """The embedded workload written as a token trace reads back request for request."""
    trace = generate(WorkloadSpec(requests=30, seed=5))
    path = tmp_path / "w.jsonl"
    assert write_lines(token_lines(trace), path) == 30
    again = read_trace(path)
    assert again.requests == [
        dataclasses.replace(r, line=number) for number, r in enumerate(trace.requests, 1)
    ]
    assert any(r.priority is not None for r in again.requests)  # the retention travels too
    plain = token_trace([[1, 2]], outputs=[[]])
    assert (
        json.loads(path.read_text().splitlines()[0])["tokens"] == trace.requests[0].tokens.tolist()
    )
    assert list(token_lines(plain)) == [{"tokens": [1, 2], "output_length": 0, "timestamp": 0.0}]
    untimed = parse_trace(_lines({"tokens": [3]}), "u")
    assert list(token_lines(untimed)) == [{"tokens": [3], "output_length": 0}]


def test_mooncake_export_chains_hashes_over_prefixes(tmp_path: Path) -> None:
    """Equal prompt prefixes get equal ids, per namespace; the last chunk may be partial."""
    trace = token_trace(
        [[1, 2, 3, 4, 5], [1, 2, 3, 4, 9], [1, 2, 7], [1, 2, 3]],
        namespaces=[None, None, None, "b"],
    )
    lines = list(mooncake_lines(trace, tokens_per_block=2))
    assert [line["hash_ids"] for line in lines] == [[0, 1, 2], [0, 1, 3], [0, 4], [5, 6]]
    assert lines[3]["namespace"] == "b" and lines[0]["input_length"] == 5
    path = tmp_path / "m.jsonl"
    write_lines(iter(lines), path)
    again = read_trace(path, tokens_per_block=2)
    assert prefix_paths(again).count == 7
    with pytest.raises(ValueError, match="hashes a token trace"):
        list(mooncake_lines(again))


def test_a_utf8_byte_order_mark_is_skipped() -> None:
    """Issue 25: a BOM was reported as "invalid character (byte 0)" on line 1."""
    body = _lines({"hash_ids": [1, 2], "input_length": 1000}, {"hash_ids": [1], "input_length": 9})
    trace = parse_trace(b"\xef\xbb\xbf" + body, "bom.jsonl")
    assert [r.tokens.tolist() for r in trace.requests] == [[1, 2], [1]]
    assert parse_trace(b"\xef\xbb\xbf" + _lines({"tokens": [7]}), "t").format == "tokens"


def test_64_bit_hash_ids_get_dense_keys_without_collisions() -> None:
    """Issue 25: vLLM, Dynamo and llm-d emit 64-bit block hashes; they were refused.
    Every distinct id gets its own key in first-seen order, equal ids the same key --
    including ids equal modulo 2**32, which truncating would have merged."""
    big, other = 2**64 - 1, 2**32 + 7  # other == 7 modulo 2**32
    data = _lines(
        {"hash_ids": [big, other, 7], "input_length": 1500, "timestamp": 0},
        {"hash_ids": [big, 7], "input_length": 1000, "timestamp": 1},
        {"hash_ids": [-(2**63), other], "input_length": 600, "timestamp": 2},
    )
    trace = parse_trace(data, "wide.jsonl")
    assert [r.tokens.tolist() for r in trace.requests] == [[0, 1, 2], [0, 2], [3, 1]]
    assert all(r.sequence is r.tokens and r.tokens.typecode == "I" for r in trace.requests)
    assert prefix_paths(trace).count == 6  # [big], [big, other], [big, other, 7], [big, 7], ...
    small = parse_trace(_lines({"hash_ids": [5, 2**32 - 1], "input_length": 1024}), "s")
    assert small.requests[0].tokens.tolist() == [5, 2**32 - 1]  # 32-bit ids are kept as they are
