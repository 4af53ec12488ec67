"""Coverage-guided differential fuzzing of the C twin (atheris, i.e. libFuzzer).

The fuzzer's bytes are decoded into a sequence of operations -- every public
operation of the tree, its leases, snapshots and readers (entered, left, used as
context managers, dropped without leaving), token input in every accepted container
and some odd ones (misaligned, read-only), malformed tokens, namespaces, counts and
constructor arguments -- and each operation runs on ``kachedb_radix.accel.RadixTree`` and
``kachedb_radix.reference.RadixTree`` in lockstep. After every step the outcomes (values, or the
error class, R-ERR-3), ``dump()``, ``stats()``, ``namespaces()``, clock and version
must agree, the latest snapshots must still dump alike, and the C twin's
``check_invariants()`` must pass; at the end of the input every snapshot and the
reference's ``check_invariants()`` too (:func:`tests.support.twins.check_pair`). Any
difference is an ``AssertionError``: libFuzzer saves the input as a crash.

How to run (``accel/fuzz.sh`` does all of it)::

    accel/fuzz.sh                   # bounded campaign: build with clang
                                    # -fsanitize=fuzzer-no-link,address,undefined, seed
                                    # the corpus, fuzz for FUZZ_SECONDS (default 90)
    FUZZ_RUNS=1000000 accel/fuzz.sh # a campaign of a million executions
    python -m tests.accel.fuzz_harness FILE...       # replay inputs, no atheris needed
    python -m tests.accel.fuzz_harness --seed-corpus DIR  # write the seed corpus

The byte format (decoded by :func:`run_one`, written by :func:`encode_trace`):
byte 0 gives the pool (``1 + b % 16`` blocks), byte 1 the block size
(``1 + b % 4``); then each operation is an opcode byte (``b % len(OPS)``) followed by
its argument bytes; a missing byte reads as 0. Token values come from a small
alphabet (shared prefixes, splits and evictions are then common) plus the widest
ids; the seed corpus is the golden vectors and kit traces, encoded.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from kachedb_radix import reference
from kachedb_radix.spec.conform.generate import (
    BAD_COUNTS,
    BAD_ELEMENTS,
    BAD_NAMESPACES,
    NON_SEQUENCES,
)
from kachedb_radix.spec.conform.steps import Step
from tests.support.twins import (
    BAD_TOKENS,
    CONTAINERS,
    check_pair,
    containers,
    lease_view,
    outcome,
    run,
)

T = TypeVar("T")

#: Operations, repeated as weights (the opcode byte indexes this tuple).
OPS: tuple[str, ...] = (
    "insert",
    "insert",
    "insert",
    "match",
    "match",
    "release",
    "evict",
    "bad_tokens",
    "foreign_release",
    "snapshot",
    "reader",
    "leave",
    "drop",
    "snapshot_match",
    "reclaim",
    "bad_tree",
    "lease_read",
    "render",
)

#: Token values: a small alphabet, twice weighted, and the widest ids (R-TOK-1).
TOKEN_VALUES: tuple[int, ...] = (0, 1, 2, 3, 0, 1, 2**32 - 1, 2**31)
#: Token bytes from here on stand for a malformed element (container ``raw`` only).
BAD_BYTE = 0xF0
#: Container kinds: the accepted ones, plus ``raw`` (a list that may hold bad elements).
TOKEN_KINDS: tuple[str, ...] = ("list", "list", "raw", *CONTAINERS)
#: Most tokens in one input.
MAX_TOKENS = 48
#: Namespaces: the default, the empty name (not the default, R-NS-1), two names.
NAMESPACES: tuple[str | None, ...] = (None, "", "a", "b")
#: Token inputs rejected whole: the shared list and the kit's non-sequences.
REJECTED: tuple[Any, ...] = (*BAD_TOKENS, *NON_SEQUENCES)
#: Constructor arguments both twins must reject (R-ERR-1).
BAD_TREES: tuple[tuple[Any, Any], ...] = (
    (0, 1),
    (-1, 1),
    (True, 1),
    (1.5, 1),
    ("4", 1),
    (None, 1),
    (4, 0),
    (4, -2),
    (4, True),
    (4, 2.0),
)
#: Ways to end a lease or a reader.
ENDINGS: tuple[str, ...] = ("call", "exit", "with", "tree")
#: Snapshots compared after every step (the latest ones; all at the end).
WATCHED = 3
#: Most operations decoded from one input.
MAX_OPS = 96

Pair = tuple[Any, Any]


class Cursor:
    """Reads the fuzzer's bytes one at a time; past the end every byte is 0."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    @property
    def exhausted(self) -> bool:
        """Whether every byte was read. O(1)."""
        return self._pos >= len(self._data)

    def byte(self) -> int:
        """The next byte, 0 past the end. O(1)."""
        if self._pos >= len(self._data):
            return 0
        value = self._data[self._pos]
        self._pos += 1
        return value

    def pick(self, options: Sequence[T]) -> T:
        """One of ``options``, chosen by the next byte. O(1)."""
        return options[self.byte() % len(options)]


def _tokens(cursor: Cursor) -> tuple[str, list[Any]]:
    kind = cursor.pick(TOKEN_KINDS)
    values: list[Any] = []
    for _ in range(cursor.byte() % MAX_TOKENS):
        code = cursor.byte()
        if kind == "raw" and code >= BAD_BYTE:
            values.append(BAD_ELEMENTS[(code - BAD_BYTE) % len(BAD_ELEMENTS)])
        else:
            values.append(TOKEN_VALUES[code % len(TOKEN_VALUES)])
    return kind, values


def _token_input(kind: str, values: list[Any]) -> object:
    """A fresh container per twin: neither can see what the other did to its input."""
    return list(values) if kind == "raw" else containers(values, kind)


def _namespace(cursor: Cursor) -> Any:
    code = cursor.byte()
    if code >= BAD_BYTE:
        return BAD_NAMESPACES[(code - BAD_BYTE) % len(BAD_NAMESPACES)]
    return NAMESPACES[code % len(NAMESPACES)]


def _count(cursor: Cursor) -> Any:
    code = cursor.byte()
    return BAD_COUNTS[(code - BAD_BYTE) % len(BAD_COUNTS)] if code >= BAD_BYTE else code % 24


def _same(label: object, calls: Sequence[Callable[[], Any]]) -> Any:
    outs = [outcome(call) for call in calls]
    assert outs[1] == outs[0], (label, outs)
    return outs[0]


def _end(how: str, owner: Any, thing: Any, kind: str) -> Callable[[], Any]:
    """A call that ends a lease or a reader the way ``how`` says."""
    if how == "exit":
        return partial(thing.__exit__, None, None, None)
    if how == "with":
        return partial(_with_block, thing)
    if how == "tree" and kind == "lease":
        return partial(owner.release, thing)
    return thing.release if kind == "lease" else thing.leave  # type: ignore[no-any-return]


def _with_block(thing: Any) -> None:
    with thing:
        pass


class Session:
    """One input's run: the two trees and everything they handed out, in pairs."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.trees: Pair = (
            reference.RadixTree(num_blocks, block_size),
            _accel().RadixTree(num_blocks, block_size),
        )
        self.leases: list[Pair] = []
        self.snapshots: list[Pair] = []
        self.readers: list[Pair] = []

    def step(self, op: str, cursor: Cursor) -> None:
        """Decode the arguments of ``op`` and run it on both twins; compare."""
        ref, acc = self.trees
        if op in ("insert", "match"):
            kind, values = _tokens(cursor)
            namespace = _namespace(cursor)
            pin = bool(cursor.byte() & 1)
            runs = [
                run(partial(getattr(t, op), _token_input(kind, values), namespace, pin=pin))
                for t in self.trees
            ]
            assert runs[1][0] == runs[0][0], (op, kind, values, namespace, pin, runs)
            if runs[0][1] is not None and runs[0][1].lease is not None:
                self.leases.append((runs[0][1].lease, runs[1][1].lease))
        elif op == "release":
            self._end_one(self.leases, "lease", cursor)
        elif op == "evict":
            count = _count(cursor)
            _same((op, count), [partial(t.evict, count) for t in self.trees])
        elif op == "bad_tokens":
            bad, name = cursor.pick(REJECTED), cursor.pick(("insert", "match", "snapshot"))
            if name == "snapshot":
                if self.snapshots:
                    pair = self.snapshots[cursor.byte() % len(self.snapshots)]
                    out = _same((op, bad), [partial(s.match, bad) for s in pair])
                    assert out[0] == "error", (op, bad, out)
            else:
                out = _same((op, bad), [partial(getattr(t, name), bad) for t in self.trees])
                assert out[0] == "error", (op, bad, out)
        elif op == "foreign_release":
            self._foreign_release(cursor.pick(("none", "int", "cross")))
        elif op in ("snapshot", "reader"):
            pair = (getattr(ref, op)(), getattr(acc, op)())
            self.snapshots.append(pair)
            if op == "reader":
                self.readers.append(pair)
                assert pair[1].epoch == pair[0].epoch
        elif op == "leave":
            self._end_one(self.readers, "reader", cursor)
        elif op == "drop":
            # Forget a reader without leave(): it must leave by itself (R-EPOCH-5).
            index = cursor.byte()
            if self.readers:
                dropped = self.readers.pop(index % len(self.readers))
                self.snapshots.remove(dropped)
                del dropped
        elif op == "snapshot_match":
            index = cursor.byte()
            kind, values = _tokens(cursor)
            namespace = _namespace(cursor)
            if self.snapshots:
                pair = self.snapshots[index % len(self.snapshots)]
                _same(
                    (op, kind, values, namespace),
                    [partial(s.match, _token_input(kind, values), namespace) for s in pair],
                )
        elif op == "reclaim":
            _same(op, [t.reclaim for t in self.trees])
        elif op == "bad_tree":
            args = cursor.pick(BAD_TREES)
            out = _same((op, args), [partial(t.__class__, *args) for t in self.trees])
            assert out == ("error", reference.InvalidArgumentError), (op, args, out)
        elif op == "lease_read":
            if self.leases:
                pair = self.leases[cursor.byte() % len(self.leases)]
                assert lease_view(pair[1]) == lease_view(pair[0])
                assert list(pair[1].blocks) == list(pair[0].blocks)
        else:  # render
            assert acc.render() == ref.render()

    def _end_one(self, pairs: list[Pair], kind: str, cursor: Cursor) -> None:
        """End one lease or reader pair, chosen and ended as the next bytes say."""
        index, how = cursor.byte(), cursor.pick(ENDINGS)
        if pairs:
            pair = pairs[index % len(pairs)]
            both = zip(self.trees, pair, strict=True)
            _same((kind, how), [_end(how, tree, thing, kind) for tree, thing in both])
            done = "released" if kind == "lease" else "left"
            assert getattr(pair[1], done) == getattr(pair[0], done)

    def _foreign_release(self, how: str) -> None:
        ref, acc = self.trees
        for tree, other in ((ref, acc), (acc, ref)):
            foreign: Any = None if how == "none" else 7
            if how == "cross":
                foreign = other.match([], pin=True).lease
            out = outcome(partial(tree.release, foreign))
            assert out == ("error", reference.ForeignLeaseError), (how, out)
            if how == "cross":
                foreign.release()

    def check(self, *, final: bool = False) -> None:
        """Every read agrees and the C twin's invariants hold; at the end of the input
        also every snapshot's reads and the reference's invariants (a pure-Python O(N)
        walk that would halve the executions per second if run after every step; the
        reference's dump is compared after every step all the same)."""
        shown = self.snapshots if final else self.snapshots[-WATCHED:]
        check_pair(*self.trees, shown, ref_invariants=final)


def _accel() -> Any:
    from kachedb_radix import accel

    return accel


def run_one(data: bytes) -> None:
    """Decode ``data`` and run it on both twins in lockstep.

    Raises:
        AssertionError: the twins disagreed, or an invariant failed.
    """
    cursor = Cursor(data)
    session = Session(1 + cursor.byte() % 16, 1 + cursor.byte() % 4)
    for _ in range(MAX_OPS):
        if cursor.exhausted:
            break
        session.step(cursor.pick(OPS), cursor)
        session.check()
    session.check(final=True)


# ---------------------------------------------------------------------- seed corpus


class _Encoder:
    """Writes a trace (spec/conform/steps.py's JSON steps) in the byte format run_one decodes."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.snapshots: list[int] = []  # trace handles, in the harness's list order
        self.readers: list[int] = []
        self.handles = 0
        self.leases = 0

    def op(self, name: str) -> None:
        self.out.append(OPS.index(name))

    def tokens(self, tokens: Any) -> bool:
        """Append a token input; False when the format cannot express it."""
        if not isinstance(tokens, list) or len(tokens) >= MAX_TOKENS:
            return False
        codes: list[int] = []
        for value in tokens:
            if _is_int(value) and value in TOKEN_VALUES:
                codes.append(TOKEN_VALUES.index(value))
            elif (found := _index(BAD_ELEMENTS, value)) is not None:
                codes.append(BAD_BYTE + found)
            else:
                return False
        kind = "raw" if any(code >= BAD_BYTE for code in codes) else "list"
        self.out += bytes([TOKEN_KINDS.index(kind), len(codes), *codes])
        return True

    def namespace(self, namespace: Any) -> bool:
        if (found := _index(NAMESPACES, namespace)) is not None:
            self.out.append(found)
        elif (found := _index(BAD_NAMESPACES, namespace)) is not None:
            self.out.append(BAD_BYTE + found)
        else:
            return False
        return True

    def step(self, step: Step) -> None:
        op = step["op"]
        if op in ("match", "insert"):
            if isinstance(step["tokens"], list):
                self._lookup(op, step)
            elif (found := _index(REJECTED, step["tokens"])) is not None:
                self.op("bad_tokens")
                self.out += bytes([found, ("insert", "match").index(op)])
        elif op == "release":
            if step["lease"] == 0:
                self.op("foreign_release")
                self.out.append(1)  # "int": a lease this tree never issued
            else:
                self.op("release")
                self.out += bytes([step["lease"] - 1, 0])
        elif op == "evict":
            count = step["count"]
            if _is_int(count) and 0 <= count < 24:
                self.op("evict")
                self.out.append(count)
            elif (found := _index(BAD_COUNTS, count)) is not None:
                self.op("evict")
                self.out.append(BAD_BYTE + found)
        elif op in ("snapshot", "reader"):
            self.op(op)
            self.handles += 1
            self.snapshots.append(self.handles)
            if op == "reader":
                self.readers.append(self.handles)
        elif op in ("leave", "drop") and step["snapshot"] in self.readers:
            self.op(op)
            self.out.append(self.readers.index(step["snapshot"]))
            if op == "leave":
                self.out.append(0)
            else:
                self.readers.remove(step["snapshot"])
                self.snapshots.remove(step["snapshot"])
        elif op == "snapshot_match" and step["snapshot"] in self.snapshots:
            start = len(self.out)
            self.op(op)
            self.out.append(self.snapshots.index(step["snapshot"]))
            if not (self.tokens(step["tokens"]) and self.namespace(step.get("namespace"))):
                del self.out[start:]
        elif op == "reclaim":
            self.op(op)
        # reads (dump, stats, namespaces, snapshot_dump) are compared after every step

    def _lookup(self, op: str, step: Step) -> None:
        start = len(self.out)
        self.op(op)
        if not (self.tokens(step["tokens"]) and self.namespace(step.get("namespace"))):
            del self.out[start:]
            return
        self.out.append(1 if step.get("pin") else 0)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _index(options: Sequence[Any], value: Any) -> int | None:
    """Position of ``value`` in ``options``, equal by type and value. O(len)."""
    for position, option in enumerate(options):
        if type(option) is type(value) and _equal(option, value):
            return position
    return None


def _equal(left: Any, right: Any) -> bool:
    try:
        return bool(left == right)
    except (TypeError, ValueError):  # NumPy arrays compare element-wise
        return False


def encode_trace(steps: Sequence[Step]) -> Iterator[bytes]:
    """Each reset-delimited trace of ``steps`` as one fuzzer input. O(size)."""
    encoder: _Encoder | None = None
    for step in steps:
        if step["op"] == "reset":
            if encoder is not None:
                yield bytes(encoder.out)
            encoder = _Encoder()
            encoder.out += bytes([(step["num_blocks"] - 1) % 16, (step["block_size"] - 1) % 4])
        elif encoder is not None:
            encoder.step(step)
    if encoder is not None:
        yield bytes(encoder.out)


def seed_inputs(kit_traces: int = 24) -> Iterator[bytes]:
    """The seed corpus: every golden vector trace and ``kit_traces`` traces the kit's
    generator draws at every level, encoded. Deterministic."""
    from kachedb_radix.spec.conform.replay import read_trace
    from kachedb_radix.spec.vectors import SUITES, generate_trace, path_of

    for suite in SUITES:
        yield from encode_trace(read_trace(path_of(suite)))
    levels = frozenset({"core", "pinning", "eviction", "namespaces", "snapshots"})
    for seed in range(kit_traces):
        yield from encode_trace(generate_trace(levels, 7000 + seed, f"kit/{seed}"))


def write_seed_corpus(directory: Path) -> int:
    """Write :func:`seed_inputs` into ``directory``, one file each; return the count."""
    directory.mkdir(parents=True, exist_ok=True)
    count = 0
    for count, data in enumerate(seed_inputs(), 1):
        (directory / f"seed-{count:03d}").write_bytes(data)
    return count


def failure(data: bytes) -> tuple[str, str, int] | None:
    """How ``data`` fails: the exception's class and where it was raised; None if it
    passes. O(one run)."""
    try:
        run_one(data)
    except Exception as exc:
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        return type(exc).__name__, frame.filename, frame.lineno or 0
    return None


def minimize(data: bytes) -> bytes:
    """The shortest input found that fails like ``data``: chunks of halving size are
    cut while the failure (class and place) stays the same, then bytes are lowered to
    0. Cost: O(n log n) runs for n bytes.

    Raises:
        ValueError: ``data`` does not fail.
    """
    wanted = failure(data)
    if wanted is None:
        raise ValueError("the input does not fail: nothing to minimise")
    chunk = max(1, len(data) // 2)
    while True:
        at, cut = 0, False
        while at < len(data):
            shorter = data[:at] + data[at + chunk :]
            if failure(shorter) == wanted:
                data, cut = shorter, True
            else:
                at += chunk
        if chunk == 1 and not cut:
            break
        chunk = max(1, chunk // 2) if not cut else chunk
    for at in range(len(data)):
        lowered = data[:at] + b"\0" + data[at + 1 :]
        if data[at] and failure(lowered) == wanted:
            data = lowered
    return data


def main(argv: Sequence[str]) -> int:
    """``--seed-corpus DIR``: write the seeds; ``--minimize CRASH OUT``: minimise a
    failing input; ``FILE...``: replay inputs; otherwise fuzz under atheris with
    libFuzzer's own arguments."""
    if len(argv) == 2 and argv[0] == "--seed-corpus":
        print(f"wrote {write_seed_corpus(Path(argv[1]))} seed inputs to {argv[1]}")
        return 0
    if len(argv) == 3 and argv[0] == "--minimize":
        data = Path(argv[1]).read_bytes()
        small = minimize(data)
        Path(argv[2]).write_bytes(small)
        print(f"minimised {len(data)} bytes to {len(small)}: {small.hex()} ({failure(small)})")
        return 0
    if argv and not any(arg.startswith("-") for arg in argv):
        for arg in argv:
            run_one(Path(arg).read_bytes())
        print(f"replayed {len(argv)} inputs: the twins agree")
        return 0
    import atheris  # only the fuzz build needs it (accel/fuzz.sh installs it)

    atheris.Setup([sys.argv[0], *argv], run_one)
    atheris.Fuzz()
    return 0  # atheris.Fuzz() exits the process itself


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
