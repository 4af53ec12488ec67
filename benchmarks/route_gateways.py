"""More than one router, for real, against the planner's model of them (issue 34.3).

::

    python -m benchmarks.route_gateways [--requests 400] [--workers 4] [--gateways 2]
        [--capacity 2000] [--no-wait] [--restart-at N]

The workload is ``kachedb-radix simulate``'s own (its embedded chat-and-agent workload,
written out by ``--save-workload`` and read back with its reader), and ``simulate``
itself runs first, unchanged, with ``--workers W --routing cost --index shared,gateway
--gateways G``: its token hit ratios for one shared index and for G gateways each with
its own are the figures to check. Then the same requests go through a real setup: W
workers (this project's trees, the planner's split of the capacity, events named with
the planner's ``xxh3_64``) behind real publishers, and G real ``kachedb-radix route``
processes, request ``i`` sent to gateway ``i mod G`` with the planner's sequential load
(each worker's prompt blocks over the last ``--max-running`` requests), served on the
worker it names (match, insert, release, as the planner does):

* **streams**: every gateway subscribed to every worker's events; before each request
  the driver waits until every gateway has applied everything published (the planner
  delivers events at once), so each gateway's index is the shared index, and every
  request is also asked of the other gateways: their **same-answer rate**;
  ``--no-wait`` sends the next request at once instead (the gateways then see the
  events when the network brings them: the same-answer rate that real lag gives);
  ``--restart-at N`` kills gateway 1 at request N and starts it again: it catches up
  through the workers' replay sockets, and the answers after it has are compared too;
* **learn**: ``route --learn`` gateways with no streams, each learning only what it
  routed (the planner's ``--index gateway``).

Reported: each setup's token hit ratio beside the planner's, the requests per worker,
the same-answer rate, and the difference. ``tests/events/test_route_gateways.py`` runs a
small case in CI and requires the waited setups to equal the planner exactly.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kachedb_radix.reference.events import BlockHasher
from kachedb_radix.spec.conform.targets import tree_class
from kachedb_radix.spec.router.publisher import EventPublisher
from kachedb_radix.spec.simulate.cluster import HASH_SCHEME, ClusterSpec
from kachedb_radix.spec.simulate.formats import read_trace
from kachedb_radix.spec.simulate.trace import Trace

from .route_service import free_port, get_json, post_json


def planner(
    requests: int, workers: int, gateways: int, capacity: int, out: Path, seed: int = 0
) -> tuple[dict[str, Any], Path]:
    """``kachedb-radix simulate`` on its embedded workload: its token hit ratios for
    ``shared`` and ``gateway``, and the workload it wrote."""
    trace = out / "workload.jsonl"
    command = [sys.executable, "-m", "kachedb_radix.spec", "simulate", "--requests",
               str(requests), "--seed", str(seed), "--save-workload", str(trace),
               "--workers", str(workers), "--routing", "cost", "--index", "shared,gateway",
               "--gateways", str(gateways), "--capacity", str(capacity), "--mode",
               "sequential", "--no-bounds", "--knee-rounds", "0", "--out", str(out),
               "--quiet", "--executor", "serial"]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, text=True)
    clusters = json.loads((out / "results.json").read_text())["points"][0]["clusters"]
    figures: dict[str, Any] = {}
    for name, result in clusters.items():
        kind = "gateway" if "@gw" in name else "shared"
        figures[kind] = result["token_hit_ratio"]
        figures[f"{kind}_requests"] = result["balance"]["requests"]
    return figures, trace


@contextlib.contextmanager
def gateway(arguments: Sequence[str], port: int) -> Iterator[subprocess.Popen[str]]:
    """One ``kachedb-radix route`` on ``port``, once it answers."""
    command = [sys.executable, "-m", "kachedb_radix.spec", "route", "--listen",
               f"127.0.0.1:{port}", "--plain", *arguments]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                get_json(f"http://127.0.0.1:{port}/health", 1.0)
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("a gateway did not start") from None
                time.sleep(0.05)
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(30)


@dataclass
class Outcome:
    """What one real setup did."""

    hit: int = 0
    prompt: int = 0
    requests: list[int] = field(default_factory=list)
    asked: int = 0
    same: int = 0
    after_restart_asked: int = 0
    after_restart_same: int = 0
    recovered: bool = True

    @property
    def ratio(self) -> float:
        """Token hit ratio."""
        return self.hit / self.prompt if self.prompt else 0.0

    @property
    def same_rate(self) -> float:
        """Share of requests every gateway routed alike (1.0 with one gateway)."""
        return self.same / self.asked if self.asked else 1.0

    def to_json(self) -> dict[str, Any]:
        """Plain data."""
        return {
            "hit_ratio": self.ratio,
            "requests": self.requests,
            "same_answer_rate": self.same_rate,
            "after_restart_same_answer_rate": (
                self.after_restart_same / self.after_restart_asked
                if self.after_restart_asked
                else None
            ),
            "recovered": self.recovered,
        }


def _caught_up(ports: Sequence[int], published: dict[str, int], seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while True:
        done = True
        for port in ports:
            rows = {r["worker"]: r for r in get_json(f"http://127.0.0.1:{port}/workers")}
            if any(
                rows[w]["expected"] < seq or rows[w]["catching_up"] for w, seq in published.items()
            ):
                done = False
                break
        if done:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)


def real_setup(
    trace: Trace,
    workers: int,
    gateways: int,
    capacity: int,
    *,
    learn: bool = False,
    wait: bool = True,
    restart_at: int | None = None,
    max_running: int = 256,
    implementation: str = "accel",
) -> Outcome:
    """The requests of ``trace`` through ``gateways`` real route processes and
    ``workers`` real trees (the module docstring)."""
    names = [f"w{i}" for i in range(workers)]
    pools = ClusterSpec(workers=workers).pools(capacity, 1 << 40)
    hasher = BlockHasher(HASH_SCHEME)
    factory = tree_class(implementation)
    trees = [factory(pool, trace.block_size, events=hasher) for pool in pools]
    size = trace.block_size
    outcome = Outcome(requests=[0] * workers)
    window: deque[tuple[int, int]] = deque(maxlen=max_running)
    recent = [0] * workers
    ports = [free_port() for _ in range(gateways)]
    with contextlib.ExitStack() as stack:
        publishers = [
            stack.enter_context(EventPublisher("tcp://127.0.0.1:0", "tcp://127.0.0.1:0"))
            for _ in names
        ]
        arguments = ["--hash", HASH_SCHEME, "--block-size", str(size)]
        if learn:
            arguments += ["--learn", *(f"--worker={n}" for n in names)]
        else:
            for name, publisher in zip(names, publishers, strict=True):
                arguments += [
                    "--worker",
                    f"{name}={publisher.endpoint},{publisher.replay_endpoint}",
                ]
        running = [stack.enter_context(gateway(arguments, port)) for port in ports]
        restarted: subprocess.Popen[str] | None = None
        for number, request in enumerate(trace.requests):
            if restart_at is not None and number == restart_at and gateways > 1:
                running[1].send_signal(signal.SIGKILL)
                running[1].wait()
                restarted = stack.enter_context(gateway(arguments, ports[1]))
            body = {
                "tokens": request.tokens.tolist(),
                "namespace": request.namespace,
                "loads": {n: float(recent[w]) for w, n in enumerate(names)},
            }
            chosen_by = number % gateways
            status, decision = post_json(f"http://127.0.0.1:{ports[chosen_by]}/route", body)
            assert status == 200, decision
            if not learn and gateways > 1:
                others = [
                    post_json(f"http://127.0.0.1:{port}/route", body)[1]["worker"]
                    for g, port in enumerate(ports)
                    if g != chosen_by
                ]
                alike = all(other == decision["worker"] for other in others)
                outcome.asked += 1
                outcome.same += alike
                if restarted is not None:
                    outcome.after_restart_asked += 1
                    outcome.after_restart_same += alike
            worker = names.index(decision["worker"])
            blocks = trace.prompt_blocks(request)
            if len(window) == window.maxlen:
                old, old_blocks = window[0]
                recent[old] -= old_blocks
            window.append((worker, blocks))
            recent[worker] += blocks
            tree = trees[worker]
            hit = tree.match(request.tokens, request.namespace, pin=True)
            sequence = request.sequence
            longest = tree.num_blocks * size
            if len(sequence) >= longest + size:
                sequence = sequence[:longest]
            tree.insert(sequence, request.namespace, **request.retention())
            hit.lease.release()
            outcome.hit += trace.saved_tokens(request, hit.length)
            outcome.prompt += request.prompt_tokens
            outcome.requests[worker] += 1
            for batch in tree.take_events():
                publishers[worker].publish(batch)
            if wait and not learn:
                published = {
                    n: p.next_seq for n, p in zip(names, publishers, strict=True) if p.next_seq
                }
                outcome.recovered &= _caught_up(ports, published)
        if not learn:
            published = {
                n: p.next_seq for n, p in zip(names, publishers, strict=True) if p.next_seq
            }
            outcome.recovered &= _caught_up(ports, published)
            tables = [
                {r["worker"]: r["blocks"] for r in get_json(f"http://127.0.0.1:{port}/workers")}
                for port in ports
            ]
            outcome.recovered &= all(table == tables[0] for table in tables)
    return outcome


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The planner, then the real setups; every figure."""
    with tempfile.TemporaryDirectory() as folder:
        figures, path = planner(
            args.requests, args.workers, args.gateways, args.capacity, Path(folder)
        )
        trace = read_trace(path, format="tokens", block_size=16)
    started = time.perf_counter()
    streams = real_setup(trace, args.workers, args.gateways, args.capacity,
                         wait=not args.no_wait, restart_at=args.restart_at)  # fmt: skip
    learned = real_setup(trace, args.workers, args.gateways, args.capacity, learn=True)
    return {
        "planner": figures,
        "streams": streams.to_json(),
        "learn": learned.to_json(),
        "seconds": time.perf_counter() - started,
        "load": os.getloadavg()[0],
    }


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.route_gateways")
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--gateways", type=int, default=2)
    parser.add_argument("--capacity", type=int, default=2000)
    parser.add_argument("--no-wait", action="store_true")
    parser.add_argument("--restart-at", type=int, default=None)
    args = parser.parse_args(argv)
    result = run(args)
    planned, streams, learned = result["planner"], result["streams"], result["learn"]
    print(
        f"{args.requests} requests, {args.workers} workers, {args.gateways} gateways, "
        f"{args.capacity:,} blocks in all:\n"
        f"  one shared index: planner {planned['shared']:.2%}, real gateways fed by the "
        f"streams {streams['hit_ratio']:.2%} (same-answer rate {streams['same_answer_rate']:.2%}"
        + (
            f", after a gateway's restart {streams['after_restart_same_answer_rate']:.2%}"
            if streams["after_restart_same_answer_rate"] is not None
            else ""
        )
        + f"; recovered: {streams['recovered']})\n"
        f"  an index per gateway: planner {planned['gateway']:.2%}, real learning gateways "
        f"{learned['hit_ratio']:.2%}\n"
        f"  requests per worker: planner {planned['shared_requests']} / "
        f"{planned['gateway_requests']}, real {streams['requests']} / {learned['requests']}"
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
