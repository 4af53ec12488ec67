"""Golden vectors: traces with the reference's answers, for implementers without Python.

One file per level combination (``core.jsonl``, ``pinning.jsonl``, ...,
``full.jsonl`` with every level before snapshots, ``snapshots.jsonl`` with
snapshots, readers and eviction), each holding several traces generated from fixed
seeds. A snapshots trace ends with every reader leaving and a ``reclaim``, so each
shows a grace period ending. Every
trace starts with a ``reset`` step naming the trace and the levels it needs; every
step carries the reference's outcome as ``"expect"``, already reduced to those
levels (no clock or stamps without ``eviction``). Leases are named by handle: the
n-th lease issued since the reset is ``n``; ``0`` was never issued. Snapshots and
readers likewise: the n-th taken since the reset is snapshot handle ``n``.

Regenerate with ``python -m kachedb_radix.spec.vectors --write``; ``--check`` (the default)
exits 1 when the committed files differ from what the reference produces now.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..conform.generate import Inputs, RandomChooser, draw_step
from ..conform.levels import SNAPSHOTS, ordered
from ..conform.lockstep import Lockstep, reference_oracle
from ..conform.steps import Step

#: Where the vector files live.
VECTOR_DIR = Path(__file__).parent

#: Vector files and the levels each exercises.
SUITES: dict[str, frozenset[str]] = {
    "core": frozenset({"core"}),
    "pinning": frozenset({"core", "pinning"}),
    "eviction": frozenset({"core", "eviction"}),
    "namespaces": frozenset({"core", "namespaces"}),
    "full": frozenset({"core", "pinning", "eviction", "namespaces"}),
    "snapshots": frozenset({"core", "eviction", "snapshots"}),
}

#: Traces per file and operations per trace.
TRACES = 6
STEPS = 30
#: A dump step after every this many operations (and at the end of each trace).
DUMP_EVERY = 5
#: At the ``snapshots`` level, a dump of the oldest snapshot after every this many.
SNAPSHOT_DUMP_EVERY = 10


def generate_trace(levels: frozenset[str], seed: int, name: str) -> list[Step]:
    """One trace of ``STEPS`` operations drawn from ``seed``. Deterministic.

    Cost: O(STEPS) reference calls (plus a dry run per insert without eviction).
    """
    chooser = RandomChooser(seed)
    block_size = chooser.integer(1, 4)
    num_blocks = chooser.integer(2, 12)
    inputs = Inputs(block_size)
    lockstep = Lockstep(reference_oracle(), levels, check_reads=False)
    lockstep.run(
        {
            "op": "reset",
            "num_blocks": num_blocks,
            "block_size": block_size,
            "trace": name,
            "levels": ordered(levels),
        }
    )
    done = 0
    while done < STEPS:
        step = draw_step(chooser, inputs, levels, num_blocks, lockstep)
        if step is None:
            continue
        lockstep.run(step)
        done += 1
        if done % DUMP_EVERY == 0 or done == STEPS:
            lockstep.run({"op": "dump"})
        kept = [h for h in range(1, lockstep.snapshots + 1) if h not in lockstep.dropped]
        if SNAPSHOTS in levels and kept and done % SNAPSHOT_DUMP_EVERY == 0:
            lockstep.run({"op": "snapshot_dump", "snapshot": kept[0]})
    if SNAPSHOTS in levels:
        for handle in list(lockstep.inside):
            lockstep.run({"op": "leave", "snapshot": handle})
        lockstep.run({"op": "reclaim"})
        lockstep.run({"op": "dump"})
    lockstep.run({"op": "stats"})
    lockstep.run({"op": "namespaces"})
    return [
        {key: value for key, value in step.items() if key != "actual"} for step in lockstep.trace
    ]


def render_suite(name: str) -> str:
    """The text of one vector file, as the reference produces it now. Deterministic."""
    levels = SUITES[name]
    lines: list[str] = []
    for index in range(TRACES):
        seed = 1000 * list(SUITES).index(name) + index
        for step in generate_trace(levels, seed, f"{name}/{index}"):
            lines.append(json.dumps(step))
    return "\n".join(lines) + "\n"


def path_of(name: str) -> Path:
    """The file of suite ``name``."""
    return VECTOR_DIR / f"{name}.jsonl"


def stale() -> list[str]:
    """Names of suites whose committed file differs from the reference's output now."""
    return [
        name
        for name in SUITES
        if not path_of(name).exists()
        or path_of(name).read_text(encoding="utf-8") != render_suite(name)
    ]


def write() -> list[Path]:
    """Regenerate every vector file; return their paths."""
    written = []
    for name in SUITES:
        path = path_of(name)
        path.write_text(render_suite(name), encoding="utf-8")
        written.append(path)
    return written
