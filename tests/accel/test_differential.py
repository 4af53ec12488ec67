"""Differential test: accel.RadixTree against reference.RadixTree, in lockstep.

Hypothesis draws random operation sequences -- insert and match (with and without
pins, in several namespaces, from every accepted token container), release (twice,
foreign, cross-implementation), evict (including bad counts), stats, namespaces,
malformed inputs, snapshots, readers entering and leaving (twice), reclaim,
snapshot matches (also with malformed input) and clones (each operation then goes to
one tree of the growing forest, the original or a clone) -- over tiny alphabets, block sizes 1-4
and small pools, so splits, leaf extensions, evictions inside inserts and
out-of-blocks errors all happen often.
Both trees run every step; the outcome (the result's every field, or the error class),
``dump()`` (quarantine included), ``stats()``, ``namespaces()`` and ``version`` must
agree after every step for every tree of the forest (so a clone and its original stay
independent: each accel tree answers as its reference twin), every snapshot and reader
taken so far must still dump its own version identically in both, and every tree's
``check_invariants()`` must pass.
"""

from __future__ import annotations

import os
from functools import partial
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kachedb_radix import reference

if os.environ.get("KACHEDB_RADIX_PURE") == "1":
    pytest.skip("KACHEDB_RADIX_PURE=1: the C twin is not under test", allow_module_level=True)

from kachedb_radix import accel
from tests.support.twins import BAD_TOKENS
from tests.support.twins import check_pair as _check_pair
from tests.support.twins import containers as _containers
from tests.support.twins import outcome as _outcome
from tests.support.twins import run as _run

NAMESPACES = [None, "a", "b"]

token_lists = st.lists(st.integers(0, 2), max_size=18)

op_strategy = st.one_of(
    st.tuples(
        st.sampled_from(["insert", "match"]),
        token_lists,
        st.sampled_from(NAMESPACES),
        st.booleans(),
        st.sampled_from(
            [
                "list",
                "list",
                "list",
                "u32",
                "tuple",
                "i32",
                "i64",
                "array",
                "memoryview",
                "range_like",
            ]
        ),
    ),
    st.tuples(st.just("release"), st.integers(0, 30), st.sampled_from(["tree", "lease", "exit"])),
    st.tuples(
        st.just("evict"), st.one_of(st.integers(0, 6), st.sampled_from([-1, True, 1.5, 10**30]))
    ),
    st.tuples(
        st.just("bad_tokens"),
        st.integers(0, len(BAD_TOKENS) - 1),
        st.sampled_from(["insert", "match"]),
    ),
    st.tuples(st.just("bad_namespace"), st.sampled_from([5, b"a", ["a"]])),
    st.tuples(st.just("foreign_release"), st.sampled_from(["none", "cross", "int"])),
    st.tuples(st.sampled_from(["snapshot", "reader", "reader", "reclaim"])),
    st.tuples(st.just("leave"), st.integers(0, 30)),
    st.tuples(
        st.just("snap_match"),
        st.integers(0, 30),
        token_lists,
        st.sampled_from(NAMESPACES),
        st.sampled_from(["list", "u32", "i64", "tuple"]),
    ),
    st.tuples(st.just("snap_bad"), st.integers(0, 30), st.integers(0, len(BAD_TOKENS) - 1)),
    st.tuples(st.just("clone")),
    st.tuples(st.sampled_from(["switch", "drop"]), st.integers(0, 3)),
)

#: The most trees (the original and its clones) one example keeps.
MAX_FOREST = 4


@settings(
    max_examples=int(os.environ.get("ACCEL_DIFF_EXAMPLES", "250")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    num_blocks=st.integers(1, 12),
    block_size=st.integers(1, 4),
    ops=st.lists(op_strategy, max_size=40),
)
def test_accel_matches_reference_step_by_step(
    num_blocks: int, block_size: int, ops: list[tuple[Any, ...]]
) -> None:
    forest: list[tuple[Any, Any]] = [
        (reference.RadixTree(num_blocks, block_size), accel.RadixTree(num_blocks, block_size))
    ]
    current = 0
    leases: list[tuple[Any, Any]] = []
    snapshots: list[tuple[Any, Any]] = []
    readers: list[tuple[Any, Any]] = []
    for op in ops:
        kind = op[0]
        ref, acc = forest[current]
        if kind == "clone":
            if len(forest) < MAX_FOREST:
                forest.append((ref.clone(), acc.clone()))
        elif kind == "switch":
            current = op[1] % len(forest)
        elif kind == "drop":
            # Drop one tree (never the last); its leases, readers and snapshots live on.
            if len(forest) > 1:
                del forest[op[1] % len(forest)]
                current = min(current, len(forest) - 1)
        elif kind in ("insert", "match"):
            _, tokens, namespace, pin, container = op
            runs = []
            for tree in (ref, acc):
                data = _containers(tokens, container)
                method = getattr(tree, kind)
                runs.append(_run(partial(method, data, namespace, pin=pin)))
            assert runs[1][0] == runs[0][0], (op, runs)
            if runs[0][1] is not None and runs[0][1].lease is not None:
                leases.append((runs[0][1].lease, runs[1][1].lease))
        elif kind == "release":
            _, index, how = op
            if not leases:
                continue
            pair = leases[index % len(leases)]
            outs = []
            trees: tuple[Any, Any] = (ref, acc)
            for owner, lease in zip(trees, pair, strict=True):
                if how == "tree":
                    outs.append(_outcome(partial(owner.release, lease)))
                elif how == "lease":
                    outs.append(_outcome(lease.release))
                else:
                    outs.append(_outcome(lambda x=lease: x.__exit__(None, None, None)))
            assert outs[1] == outs[0], (op, outs)
            assert pair[1].released == pair[0].released
        elif kind == "evict":
            count = op[1]
            outs = [_outcome(partial(tree.evict, count)) for tree in (ref, acc)]
            assert outs[1] == outs[0], (op, outs)
        elif kind == "bad_tokens":
            bad = BAD_TOKENS[op[1]]
            outs = [_outcome(partial(getattr(tree, op[2]), bad)) for tree in (ref, acc)]
            assert outs[0][0] == "error", (op, outs)
            assert outs[1] == outs[0], (op, outs)
        elif kind == "bad_namespace":
            outs = [_outcome(partial(tree.insert, [1] * 4, op[1])) for tree in (ref, acc)]
            assert outs[1] == outs[0] == ("error", reference.InvalidArgumentError)
        elif kind == "foreign_release":
            how = op[1]
            pairs: list[tuple[Any, Any]] = [(ref, acc), (acc, ref)]
            for tree, other in pairs:
                if how == "none":
                    foreign: Any = None
                elif how == "int":
                    foreign = 7
                else:
                    other_lease = other.match([], pin=True).lease
                    foreign = other_lease
                with pytest.raises(reference.ForeignLeaseError):
                    tree.release(foreign)
                if how == "cross":
                    foreign.release()
        elif kind in ("snapshot", "reader"):
            pair = (getattr(ref, kind)(), getattr(acc, kind)())
            snapshots.append(pair)
            if kind == "reader":
                readers.append(pair)
                assert pair[1].epoch == pair[0].epoch
        elif kind == "reclaim":
            outs = [_outcome(tree.reclaim) for tree in (ref, acc)]
            assert outs[1] == outs[0], (op, outs)
        elif kind == "leave":
            if not readers:
                continue
            pair = readers[op[1] % len(readers)]
            outs = [_outcome(reader.leave) for reader in pair]
            assert outs[1] == outs[0], (op, outs)
            assert pair[1].left == pair[0].left
        elif kind == "snap_match":
            if not snapshots:
                continue
            _, index, tokens, namespace, container = op
            pair = snapshots[index % len(snapshots)]
            outs = [
                _outcome(partial(snap.match, _containers(tokens, container), namespace))
                for snap in pair
            ]
            assert outs[1] == outs[0], (op, outs)
        elif kind == "snap_bad":
            if not snapshots:
                continue
            pair = snapshots[op[1] % len(snapshots)]
            bad = BAD_TOKENS[op[2]]
            outs = [_outcome(partial(snap.match, bad)) for snap in pair]
            assert outs[0][0] == "error", (op, outs)
            assert outs[1] == outs[0], (op, outs)
        for index, (ref, acc) in enumerate(forest):
            _check_pair(ref, acc, snapshots if index == 0 else ())
