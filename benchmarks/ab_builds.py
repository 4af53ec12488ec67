"""Two builds of the C twin, paired on the same workloads (a change that must cost nothing).

::

    python -m benchmarks.ab_builds OLD_SO NEW_SO [--rounds 21]

``OLD_SO`` and ``NEW_SO`` are two builds of ``kachedb_radix.accel._radix`` (for example
the extension of a wheel built from an earlier commit: ``pip wheel --no-deps -w DIR .``
in a checkout of it, then unzip the ``.so``).  Each round runs one child process per
build, in turn (A B A B ...), each loading its build in place of the installed one and
timing the workloads below; the figure per workload is the median over rounds of the
paired ratio NEW / OLD, so a machine whose speed drifts between rounds moves both sides
of a pair alike.  The workloads, default policy, no events (what a change to the event
or policy code must leave alone):

* ``match/1024``: ``match`` of a cached 1,024-token prompt as a uint32 array;
* ``insert/evict``: ``insert`` of a new 1,024-token prompt into a full pool (64 blocks
  evicted first);
* ``cycle``: ``match(pin=True)``, ``insert``, ``release`` of a chat turn.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

CHILD = r"""
import importlib.util, json, statistics, sys, time
spec = importlib.util.spec_from_file_location("kachedb_radix.accel._radix", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules["kachedb_radix.accel._radix"] = module
spec.loader.exec_module(module)
import numpy as np
RadixTree = module.RadixTree  # the package's __init__ is not imported: it may name more

def timed(call, n):
    samples = []
    for _ in range(7):
        began = time.perf_counter_ns()
        for _ in range(n):
            call()
        samples.append((time.perf_counter_ns() - began) / n)
    return statistics.median(samples)

rng = np.random.default_rng(0)
out = {}
tree = RadixTree(4096, 16)
prompt = rng.integers(0, 128_000, 1024, dtype=np.uint32)
tree.insert(prompt)
out["match/1024"] = timed(lambda: tree.match(prompt), 20000)

full = RadixTree(256, 16)
prompts = [rng.integers(0, 128_000, 1024, dtype=np.uint32) for _ in range(400)]
for p in prompts[:4]:
    full.insert(p)
index = iter(range(4, 10**9))
out["insert/evict"] = timed(lambda: full.insert(prompts[next(index) % 400]), 300)

chat = RadixTree(8192, 16)
history = rng.integers(0, 128_000, 512).tolist()
def cycle():
    hit = chat.match(history, pin=True)
    history.extend(rng.integers(0, 128_000, 64).tolist())
    chat.insert(history)
    chat.release(hit.lease)
    if len(history) > 16000:
        del history[512:]
out["cycle"] = timed(cycle, 200)
print(json.dumps(out))
"""


def run(so: Path) -> dict[str, float]:
    """One child process timing the workloads with build ``so``."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(so)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"the child timing {so} failed:\n{done.stderr}")
    figures: dict[str, float] = json.loads(done.stdout)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ab_builds", description=__doc__)
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    for so in (args.old, args.new):
        if importlib.util.spec_from_file_location("probe", so) is None or not so.is_file():
            parser.error(f"{so} is not a built extension")
    ratios: dict[str, list[float]] = {}
    olds: dict[str, list[float]] = {}
    began = time.monotonic()
    for _ in range(args.rounds):
        old, new = run(args.old), run(args.new)
        for name in old:
            ratios.setdefault(name, []).append(new[name] / old[name])
            olds.setdefault(name, []).append(old[name])
    print(f"{args.rounds} rounds, {time.monotonic() - began:.0f} s")
    print("| workload | old (median ns) | new / old (median of pairs) | spread |")
    print("|---|---:|---:|---|")
    for name, pairs in ratios.items():
        print(
            f"| {name} | {statistics.median(olds[name]):,.0f} | {statistics.median(pairs):.3f} "
            f"| {min(pairs):.2f}-{max(pairs):.2f} |"
        )


if __name__ == "__main__":
    main()
