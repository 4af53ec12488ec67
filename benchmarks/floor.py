"""The C twin's matcher against its floor: a bare C loop, built like the extension.

::

    python -m benchmarks.floor [--rounds 201] [--calls 200] [--callgrind]

The floor (``benchmarks/floor.c``, compiled here into a temporary directory with the
compiler, flags and setuptools machinery that build ``kachedb_radix.accel._radix``: the
``extra-compile-args`` and ``extra-link-args`` of pyproject.toml's ``ext-modules`` table,
CC/CFLAGS from the environment as for the extension) does only what a match's answer
needs: it takes the query's buffer and checks its format, walks the least tree holding
the shape -- a node per level with its children's first tokens, blocks and ids inline,
each level reached through the pointer the one before it chose (any tree's dependency:
the next node is known only once the block is found); per level a binary search of the
first tokens and one block comparison, or one memcmp over a long edge -- and copies the
matched ids out. Called from Python like the twin (one C function, a uint32
array), on the two shapes of issue 37 at 1,024 tokens: ``long_edge`` (one 64-block edge)
and ``branchy`` (64 one-block nodes, 8 siblings each).

Each round times ``tree.match(query)`` and ``floor.walk(query)`` (``calls`` calls each,
back to back, in alternating order: a pair a fraction of a millisecond apart, so a
machine's noisy moments hit both sides of it), and a ``noop`` C call (the price of any C
call from a Python loop); the figure is the median over rounds of the per-round ratio
twin / floor, with the spread of those ratios (the 10th to 90th percentile, and the
extremes). Beside it the twin against two fuller floors, the walk plus what a match must
also do and the bare walk leaves out: stamping the matched blocks (R-LRU-1), and handing
the ids back in a new object. ``--callgrind`` instead counts
instructions under ``valgrind --tool=callgrind`` (stable on a noisy machine): per call
inside the twin's ``Tree_match`` and the floor's ``floor_walk``, and the twin's
inclusive cost by function.

:func:`build` is also what ``benchmarks.events_cost`` uses for the bare hashes' floor.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SOURCE = Path(__file__).with_name("floor.c")
VENDOR = ROOT / "accel" / "vendor" / "xxhash"
#: The shapes, as spec.gate.shapes names them, at 1,024 tokens.
SHAPES = ("long_edge", "branchy")
TOKENS = 1024


def extension_table() -> dict[str, Any]:
    """pyproject.toml's ext-modules entry of the C twin."""
    with open(ROOT / "pyproject.toml", "rb") as file:
        table: list[dict[str, Any]] = tomllib.load(file)["tool"]["setuptools"]["ext-modules"]
    (radix,) = [ext for ext in table if ext["name"] == "kachedb_radix.accel._radix"]
    return radix


def build(where: Path | None = None) -> ModuleType:
    """``benchmarks/floor.c`` built as the extension is built, imported."""
    # setuptools' own machinery, as the extension's build uses it (imported by name: it
    # ships no type stubs, and the benchmark needs none of its types).
    setuptools: Any = importlib.import_module("setuptools")
    build_ext: Any = importlib.import_module("setuptools.command.build_ext").build_ext
    Distribution, Extension = setuptools.Distribution, setuptools.Extension
    radix = extension_table()
    out = Path(tempfile.mkdtemp(prefix="kachedb-floor-")) if where is None else where
    ext = Extension(
        "_kachedb_floor",
        sources=[str(SOURCE)],
        include_dirs=[str(VENDOR)],
        extra_compile_args=list(radix.get("extra-compile-args", [])),
        extra_link_args=list(radix.get("extra-link-args", [])),
    )
    dist = Distribution({"name": "kachedb-floor", "ext_modules": [ext]})
    command = build_ext(dist)
    command.build_lib = str(out)
    command.build_temp = str(out / "temp")
    command.ensure_finalized()
    command.run()
    (built,) = out.glob("_kachedb_floor*.so")
    spec = importlib.util.spec_from_file_location("_kachedb_floor", built)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shape(name: str) -> tuple[Any, Any, Any]:
    """The twin's tree of ``name``, the query as uint32, and the floor's flat copy
    (levels, siblings, tokens, ids) of the same path and siblings."""
    from kachedb_radix import accel
    from kachedb_radix.spec.gate.shapes import BLOCK_SIZE, branchy, build_tree, long_edge

    made = long_edge(TOKENS) if name == "long_edge" else branchy(TOKENS // BLOCK_SIZE)
    tree = build_tree(accel.RadixTree, "accel", made)
    query = np.asarray(made.query, dtype=np.uint32)
    path = tree.match(query).blocks
    levels = len(path)
    if name == "long_edge":
        flat = np.asarray(path, np.uint32).tobytes()
        return tree, query, (levels, 0, query.tobytes(), flat, bytes(4 * levels))
    # Per level, the siblings (the path's block among them), sorted by first token.
    dump = tree.dump()
    tokens: list[int] = []
    ids: list[int] = []
    onward: list[int] = []
    children = dump["namespaces"][0]["children"]
    for _ in range(levels):
        level = sorted(children, key=lambda child: child["tokens"][0])
        tokens.extend(t for child in level for t in child["tokens"][:BLOCK_SIZE])
        ids.extend(child["blocks"][0] for child in level)
        (index,) = [i for i, child in enumerate(level) if child["blocks"][0] in path]
        onward.append(index)
        children = level[index]["children"]
    siblings = len(ids) // levels
    return (
        tree,
        query,
        (
            levels,
            siblings,
            np.asarray(tokens, np.uint32).tobytes(),
            np.asarray(ids, np.uint32).tobytes(),
            np.asarray(onward, np.uint32).tobytes(),
        ),
    )


def _per_call(call: Any, arg: Any, calls: int) -> float:
    """Ns per call of ``call(arg)``, ``calls`` calls in a row."""
    began = time.perf_counter_ns()
    for _ in range(calls):
        call(arg)
    return (time.perf_counter_ns() - began) / calls


def measure(floor: ModuleType, rounds: int, calls: int) -> dict[str, dict[str, float]]:
    """Per shape: the medians (ns) and the twin / floor ratio's median and spread."""
    results: dict[str, dict[str, float]] = {}
    for name in SHAPES:
        tree, query, flat = shape(name)
        floor.load(*flat)
        assert floor.walk(query) == len(query) // 16 == len(tree.match(query).blocks)
        twin, bare, noop, ratios = [], [], [], []
        stamped, returned = [], []  # twin / each fuller floor, per round
        for r in range(rounds):
            first, second = (tree.match, floor.walk) if r % 2 == 0 else (floor.walk, tree.match)
            a, b = _per_call(first, query, calls), _per_call(second, query, calls)
            t, f = (a, b) if r % 2 == 0 else (b, a)
            twin.append(t)
            bare.append(f)
            noop.append(_per_call(floor.noop, query, calls))
            ratios.append(t / f)
            stamped.append(t / _per_call(floor.walk_stamp, query, calls))
            returned.append(t / _per_call(floor.walk_stamp_result, query, calls))
        deciles = statistics.quantiles(ratios, n=10)
        results[name] = {
            "twin_ns": statistics.median(twin),
            "floor_ns": statistics.median(bare),
            "noop_ns": statistics.median(noop),
            "ratio_stamped": statistics.median(stamped),
            "ratio_returned": statistics.median(returned),
            "ratio": statistics.median(ratios),
            "ratio_p10": deciles[0],
            "ratio_p90": deciles[-1],
            "ratio_min": min(ratios),
            "ratio_max": max(ratios),
        }
    return results


# ---------------------------------------------------------------------------- callgrind

CHILD = r"""
import sys
from benchmarks import floor
module = floor.build()
tree, query, flat = floor.shape(sys.argv[1])
module.load(*flat)
call = tree.match if sys.argv[2] == "twin" else module.walk
for _ in range(int(sys.argv[3])):
    call(query)
"""


def callgrind(calls: int) -> dict[str, dict[str, Any]]:
    """Instructions per call inside Tree_match and floor_walk, and Tree_match's
    inclusive cost by function (callgrind_annotate)."""
    if shutil.which("valgrind") is None:
        raise SystemExit("--callgrind needs valgrind (Debian: apt-get install valgrind)")
    results: dict[str, dict[str, Any]] = {}
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(ROOT)}
    for name in SHAPES:
        row: dict[str, Any] = {}
        for side, function in (("twin", "Tree_match"), ("floor", "floor_walk")):
            with tempfile.TemporaryDirectory() as work:
                out = Path(work) / "callgrind.out"
                done = subprocess.run(
                    ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                     f"--toggle-collect={function}", sys.executable, "-c", CHILD, name, side,
                     str(calls)],
                    capture_output=True, text=True, env=env, check=False,
                )  # fmt: skip
                found = re.search(r"Collected : (\d+)", done.stderr)
                if done.returncode != 0 or found is None:
                    raise SystemExit(f"callgrind failed:\n{done.stderr[-2000:]}")
                row[side] = int(found.group(1)) / calls
                if side == "twin":
                    row["parts"] = _inclusive(out, calls)
        results[name] = row
    return results


def _inclusive(out: Path, calls: int) -> list[tuple[str, float]]:
    """The twin's functions by inclusive instructions per call."""
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(out)],
        capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    parts: list[tuple[str, float]] = []
    for line in text.splitlines():
        found = re.match(r"\s*([\d,]+) \([\s\d.]+%\)\s+\S+?:(\w+)", line)
        if found and not found.group(2).startswith("0x"):
            parts.append((found.group(2), int(found.group(1).replace(",", "")) / calls))
    names = [name for name, _ in parts]
    # Tree_match and what it calls (the interpreter's frames above it left out).
    return parts[names.index("Tree_match") :][:16] if "Tree_match" in names else parts[:16]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.floor", description=__doc__)
    parser.add_argument("--rounds", type=int, default=201)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--callgrind", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    began = time.monotonic()
    if args.callgrind:
        counted = callgrind(args.calls)
        print(f"callgrind, {args.calls} calls a side, {time.monotonic() - began:.0f} s")
        print("| shape | twin (Ir/call) | floor (Ir/call) | twin / floor |")
        print("|---|---:|---:|---:|")
        for name, row in counted.items():
            ratio = row["twin"] / row["floor"]
            print(f"| {name} | {row['twin']:,.0f} | {row['floor']:,.0f} | {ratio:.2f} |")
        for name, row in counted.items():
            print(f"\n{name}, Tree_match inclusive (Ir/call):")
            for function, ir in row["parts"]:
                print(f"  {ir:9,.0f}  {function}")
        if args.json:
            args.json.write_text(json.dumps(counted, indent=1))
        return 0
    floor = build()
    results = measure(floor, args.rounds, args.calls)
    print(
        f"{args.rounds} interleaved rounds of {args.calls} calls, {time.monotonic() - began:.0f} s"
    )
    print(
        "| shape | twin (median) | floor (median) | a C call (noop) "
        "| twin / floor (median of rounds) | 10-90% of rounds | extremes |"
    )
    print("|---|---:|---:|---:|---:|---|---|")
    for name, row in results.items():
        print(
            f"| {name} | {row['twin_ns']:.0f} ns | {row['floor_ns']:.0f} ns "
            f"| {row['noop_ns']:.0f} ns | {row['ratio']:.2f} "
            f"| {row['ratio_p10']:.2f}-{row['ratio_p90']:.2f} "
            f"| {row['ratio_min']:.2f}-{row['ratio_max']:.2f} |"
        )
    print("\nThe twin against floors that also do what a match must (medians of rounds):\n")
    print("| shape | / floor + stamping (R-LRU-1) | / floor + stamping + a result object |")
    print("|---|---:|---:|")
    for name, row in results.items():
        print(f"| {name} | {row['ratio_stamped']:.2f} | {row['ratio_returned']:.2f} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
