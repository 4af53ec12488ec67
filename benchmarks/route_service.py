"""The router as a service, measured as a user meets it (issue 34's figures).

::

    python -m benchmarks.route_service [--workers 16] [--rate 100000] [--clients 8]
        [--seconds 10] [--hash sha256] [--prompt repeat|fresh] [--client wrk|python]
        [--route-cmd "kachedb-radix route"] [--decision]

Three processes on loopback, as in production: a *fleet* (``python -m
benchmarks.route_service fleet``: ``--workers`` synthetic workers, each our
:class:`~kachedb_radix.spec.router.publisher.EventPublisher` on vLLM's wire, together
publishing ``--rate`` stored blocks a second, each batch storing a fresh 64-block chain
and removing the chain stored :data:`RESIDENT` batches before, so every worker holds a
bounded, moving set); the *router* (``kachedb-radix route --worker ...``, the real
command); and a *load generator*: ``wrk`` (Debian's) with ``--clients`` connections, or
this module's own asyncio client, each connection sending one request, waiting for the
answer, sending the next.

The request: a 64-block prompt (1,024 tokens) routed over the 16 workers, worker ``wI``
holding its first ``4 * I`` blocks (real hashes of the router's scheme, stored once
before the churn), so every answer has 15 depths; ``--prompt fresh`` sends a new
random prompt each time (every block hashed; wrk's Lua makes them).  Reported: the
latency percentiles and rate the generator saw, non-2xx answers, the events the router
applied during the run and its CPU seconds, the publishing rate achieved, and the
machine's load.  ``--decision`` adds the in-process decision (tokens in, worker out,
hashing included: :meth:`Router.decide` over the same 16-worker index), fresh and
repeated prompts, p50 and p99.

The fleet's streams are deterministic (:class:`SyntheticWorker`): a worker's holdings
after any number of batches are known without replaying them, which the fault tests
(``tests/events/test_route_faults.py``) compare the router's index with.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kachedb_radix.reference.events import (
    AllBlocksCleared,
    BlockHasher,
    BlockRemoved,
    BlockStored,
    ExternalHash,
    KVEventBatch,
)

#: Blocks a churn batch stores (and removes, once the worker holds RESIDENT chains).
CHURN_BLOCKS = 64
#: Chains a worker holds at once: a batch removes the chain stored this many before.
RESIDENT = 16
#: Tokens per block.
BLOCK_SIZE = 16
#: The query prompt's blocks, and the depth step between workers.
PROMPT_BLOCKS, DEPTH_STEP = 64, 4


# ---------------------------------------------------------------------- the fleet


def prompt_tokens(seed: int, number: int = 0) -> list[int]:
    """Query prompt ``number``'s tokens (deterministic). O(tokens)."""
    rng = random.Random(seed * 7919 + number)
    return [rng.randrange(50_000) for _ in range(PROMPT_BLOCKS * BLOCK_SIZE)]


@dataclass
class SyntheticWorker:
    """One worker's deterministic stream: batch 0 stores its share of the query prompt
    (``depth`` blocks, real hashes, token ids) and a 64-block warm-up chain (so the
    router's hash check settles on real blocks); batch ``k >= 1`` stores churn chain
    ``k`` and removes chain ``k - RESIDENT`` (with token ids only if ``tokens``: its hashes
    are no scheme's, and the router's hash check would rightly say so). ``generation``
    tells restarts apart. With
    ``cycle``, every ``cycle``-th batch clears the cache (``AllBlocksCleared``, as an
    engine's ``reset_prefix_cache`` does) and stores the prefixes again: a router that
    joined after the replay buffer moved on is stale only until the next one."""

    index: int
    hasher: BlockHasher
    seed: int
    generation: int = 0
    depth: int = 0
    churn_blocks: int = CHURN_BLOCKS
    tokens: bool = False
    cycle: int = 0
    _prefix: list[ExternalHash] = field(default_factory=list)
    _warm: list[ExternalHash] = field(default_factory=list)

    def __post_init__(self) -> None:
        prompt = prompt_tokens(self.seed)
        chain = self.hasher.chain(prompt, BLOCK_SIZE)
        self._prefix = [self.hasher.external(h) for h in chain[: self.depth]]
        warm = prompt_tokens(self.seed, 1000 + self.index)
        self._warm_tokens = warm
        self._warm = [self.hasher.external(h) for h in self.hasher.chain(warm, BLOCK_SIZE)]
        self._filler = [7] * (self.churn_blocks * BLOCK_SIZE) if self.tokens else []

    def churn_hash(self, chain: int, block: int) -> int:
        """Block ``block`` of churn chain ``chain``: unique per worker, generation and
        position, never a real scheme's hash of anything. O(1)."""
        return (
            (self.index + 1) << 52
            | (self.generation & 0xFF) << 44
            | (chain * self.churn_blocks + block) & ((1 << 44) - 1)
        )

    def chain_hashes(self, chain: int) -> list[ExternalHash]:
        """Churn chain ``chain``'s hashes. O(churn_blocks)."""
        base = self.churn_hash(chain, 0)
        return list(range(base, base + self.churn_blocks))

    def _start(self, k: int) -> int:
        """The batch the cycle of batch ``k`` began with. O(1)."""
        return k - k % self.cycle if self.cycle else 0

    def batch(self, k: int) -> KVEventBatch:
        """Batch number ``k`` of this generation. O(its blocks)."""
        if k == self._start(k):
            prompt = prompt_tokens(self.seed)
            events: list[Any] = [AllBlocksCleared()] if k else []
            events.append(
                BlockStored(self._warm, None, self._warm_tokens, BLOCK_SIZE, None, "GPU", None)
            )
            if self._prefix:
                tokens = prompt[: self.depth * BLOCK_SIZE]
                events.append(
                    BlockStored(self._prefix, None, tokens, BLOCK_SIZE, None, "GPU", None)
                )
            return KVEventBatch(0.0, events)
        stored = BlockStored(
            self.chain_hashes(k), None, self._filler, BLOCK_SIZE, None, "GPU", None
        )
        events = [stored]
        if k - RESIDENT > self._start(k):
            events.append(BlockRemoved(self.chain_hashes(k - RESIDENT), "GPU"))
        return KVEventBatch(time.time(), events)

    def holdings(self, published: int) -> set[ExternalHash]:
        """What this worker holds after batches ``0 .. published - 1``. O(held)."""
        if published <= 0:
            return set()
        held: set[ExternalHash] = set(self._warm) | set(self._prefix)
        first = max(self._start(published - 1) + 1, published - RESIDENT)
        for chain in range(first, published):
            held.update(self.chain_hashes(chain))
        return held


def _bind(pub: str, replay: str, buffer: int) -> Any:
    """A publisher on ``pub`` and ``replay``, retried while a killed predecessor's
    ports are still being let go."""
    from kachedb_radix.spec.router.publisher import EventPublisher

    deadline = time.monotonic() + 10
    while True:
        try:
            return EventPublisher(pub, replay, buffer_steps=buffer)
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def fleet_main(argv: Sequence[str]) -> int:
    """``python -m benchmarks.route_service fleet``: publish until ``--seconds`` pass
    or SIGTERM; prints the endpoints (one JSON line) first, the counts last."""
    parser = argparse.ArgumentParser(prog="route_service fleet")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--first", type=int, default=0, help="the first worker's index")
    parser.add_argument("--rate", type=float, default=100_000.0, help="stored blocks/s, all")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--hash", default="sha256")
    parser.add_argument("--generation", type=int, default=0)
    parser.add_argument("--endpoints", default=None, help="PUB,REPLAY for one worker")
    parser.add_argument("--buffer", type=int, default=10_000, help="replay buffer, batches")
    parser.add_argument("--churn-blocks", type=int, default=CHURN_BLOCKS)
    parser.add_argument("--start-delay", type=float, default=1.0)
    parser.add_argument("--cycle", type=int, default=0, help="clear the cache every N batches")
    args = parser.parse_args(argv)
    hasher = BlockHasher(args.hash)
    workers, publishers = [], []
    for number in range(args.workers):
        index = args.first + number
        pub, replay = args.endpoints.split(",") if args.endpoints else ("tcp://127.0.0.1:0",) * 2
        workers.append(
            SyntheticWorker(
                index,
                hasher,
                args.seed,
                args.generation,
                DEPTH_STEP * index % PROMPT_BLOCKS,
                args.churn_blocks,
                cycle=args.cycle,
            )
        )
        publishers.append(_bind(pub, replay, args.buffer))
    names = [f"w{w.index}" for w in workers]
    print(
        json.dumps(
            {
                "workers": [
                    [name, p.endpoint, p.replay_endpoint]
                    for name, p in zip(names, publishers, strict=True)
                ],
                "prompt": prompt_tokens(args.seed),
                "pid": os.getpid(),
            }
        ),
        flush=True,
    )
    stop = False

    def stopped(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, stopped)
    time.sleep(args.start_delay)  # subscribers connect (late ones replay anyway)
    for worker, publisher in zip(workers, publishers, strict=True):
        publisher.publish(worker.batch(0))
    started = time.perf_counter()
    sent = 0
    k = 1
    per_round = args.churn_blocks * len(workers)
    while not stop and time.perf_counter() - started < args.seconds:
        if args.rate > 0:
            for worker, publisher in zip(workers, publishers, strict=True):
                publisher.publish(worker.batch(k))
            sent += per_round
            k += 1
            ahead = started + sent / args.rate - time.perf_counter()
            if ahead > 0:
                time.sleep(ahead)
        else:
            time.sleep(0.05)
    elapsed = time.perf_counter() - started
    counts = {name: p.next_seq for name, p in zip(names, publishers, strict=True)}
    print(json.dumps({"published": counts, "blocks": sent, "seconds": elapsed}), flush=True)
    for publisher in publishers:
        publisher.close()
    return 0


# ---------------------------------------------------------------------- processes


def _python() -> list[str]:
    return [sys.executable]


@contextlib.contextmanager
def fleet(*args: str) -> Iterator[tuple[subprocess.Popen[str], dict[str, Any]]]:
    """A fleet process (``fleet_main``'s options); its endpoints line."""
    command = [*_python(), "-m", "benchmarks.route_service", "fleet", *args]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1]
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"the fleet did not start: {shlex.join(command)}")
        yield process, json.loads(line)
    finally:
        stop(process)


def stop(process: subprocess.Popen[Any], sig: int = signal.SIGTERM) -> None:
    """Stop ``process`` (its own id only), wait for it, close its pipes."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(sig)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for pipe in (process.stdout, process.stderr):
        if pipe is not None:
            pipe.close()


def get_json(url: str, timeout: float = 5.0) -> Any:
    """GET ``url``'s JSON."""
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        return json.loads(answer.read())


def post_json(url: str, value: object, timeout: float = 5.0) -> tuple[int, Any]:
    """POST ``value`` as JSON; ``(status, answer)``."""
    request = urllib.request.Request(
        url, json.dumps(value).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def free_port() -> int:
    """A loopback TCP port free now."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def router(
    workers: Sequence[Sequence[str]],
    *extra: str,
    route_cmd: Sequence[str] | None = None,
    port: int | None = None,
    stderr: Any = None,
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``kachedb-radix route`` following ``workers`` (``[name, pub, replay]``); its URL
    once ``GET /health`` answers."""
    port = port or free_port()
    command = [*(route_cmd or [*_python(), "-m", "kachedb_radix.spec", "route"])]
    for name, pub, replay in workers:
        command += ["--worker", f"{name}={pub},{replay}"]
    command += ["--listen", f"127.0.0.1:{port}", "--plain", *extra]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                get_json(f"{url}/health", 1.0)
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the router did not start: {shlex.join(command)}") from None
                time.sleep(0.1)
        yield process, url
    finally:
        stop(process)


def wait_blocks(url: str, at_least: int, seconds: float = 60.0) -> None:
    """Until the router's index holds ``at_least`` distinct hashes."""
    deadline = time.monotonic() + seconds
    while get_json(f"{url}/health")["blocks"] < at_least:
        if time.monotonic() > deadline:
            raise RuntimeError("the router did not catch up with the fleet")
        time.sleep(0.1)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------- load


_WRK_SCRIPT = """
local prompt = "%(prompt)s"
local fresh = %(fresh)s
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"tokens":[' .. prompt .. ']}'
request = function()
  if not fresh then return wrk.format() end
  local t = {}
  for i = 1, %(tokens)d do t[i] = math.random(0, 49999) end
  return wrk.format(nil, nil, nil, '{"tokens":[' .. table.concat(t, ",") .. ']}')
end
done = function(summary, latency, requests)
  local out = {requests = summary.requests, seconds = summary.duration / 1e6,
    non2xx = summary.errors.status, errors = summary.errors.connect + summary.errors.read
      + summary.errors.write + summary.errors.timeout}
  for _, p in ipairs({50, 90, 99, 99.9}) do out["p" .. p] = latency:percentile(p) / 1000 end
  local parts = {}
  for k, v in pairs(out) do parts[#parts + 1] = string.format('"%%s": %%s', k, v) end
  io.write("WRK_JSON {" .. table.concat(parts, ", ") .. "}\\n")
end
"""


def run_wrk(
    url: str, prompt: Sequence[int], clients: int, seconds: float, fresh: bool
) -> dict[str, Any]:
    """wrk's figures (latencies in ms) for ``clients`` connections over ``seconds``."""
    script = _WRK_SCRIPT % {
        "prompt": ",".join(map(str, prompt)),
        "fresh": "true" if fresh else "false",
        "tokens": len(prompt),
    }
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as file:
        file.write(script)
    try:
        threads = min(2, clients)
        done = subprocess.run(
            [
                "wrk",
                f"-t{threads}",
                f"-c{clients}",
                f"-d{seconds:g}s",
                "-s",
                file.name,
                f"{url}/route",
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode:
            raise RuntimeError(f"wrk failed: {done.stdout} {done.stderr}")
        out = done.stdout
    finally:
        os.unlink(file.name)
    line = next(line for line in out.splitlines() if line.startswith("WRK_JSON "))
    result: dict[str, Any] = json.loads(line.removeprefix("WRK_JSON "))
    result["rate"] = result["requests"] / result["seconds"]
    result["generator"] = "wrk"
    return result


async def _client(
    host: str,
    port: int,
    bodies: Sequence[bytes],
    until: float,
    latencies: list[float],
    status: list[int],
    failures: list[float],
) -> None:
    """One connection, one request in flight; a connection that fails (the router
    restarting) is counted in ``failures`` (at ``time.monotonic()``) and opened again."""
    head = f"POST /route HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
    number = 0
    writer: asyncio.StreamWriter | None = None
    while time.perf_counter() < until:
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection(host, port)
            body = bodies[number % len(bodies)]
            number += 1
            request = f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body
            started = time.perf_counter()
            writer.write(request)
            line = await reader.readline()
            if not line:
                raise ConnectionError("closed")
            length = 0
            while True:
                header = await reader.readline()
                if header in (b"\r\n", b""):
                    break
                if header.lower().startswith(b"content-length:"):
                    length = int(header.split(b":")[1])
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - started)
            status.append(int(line.split()[1]))
        except (OSError, asyncio.IncompleteReadError):
            failures.append(time.monotonic())
            if writer is not None:
                writer.close()
            writer = None
            await asyncio.sleep(0.05)
    if writer is not None:
        writer.close()


def python_load(
    url: str, prompt: Sequence[int], clients: int, seconds: float, fresh: bool
) -> dict[str, Any]:
    """This module's asyncio client: ``clients`` connections, one request in flight each."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    rng = random.Random(5)
    count = 2000 if fresh else 1
    bodies = [
        json.dumps(
            {"tokens": [rng.randrange(50_000) for _ in prompt] if fresh else list(prompt)}
        ).encode()
        for _ in range(count)
    ]
    latencies: list[float] = []
    status: list[int] = []
    failures: list[float] = []

    async def main() -> None:
        until = time.perf_counter() + seconds
        await asyncio.gather(
            *(
                _client(host, int(port), bodies[i:] or bodies, until, latencies, status, failures)
                for i in range(clients)
            )
        )

    started = time.perf_counter()
    asyncio.run(main())
    elapsed = time.perf_counter() - started
    latencies.sort()

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(len(latencies) * p / 100))] * 1000

    return {
        "generator": "python",
        "requests": len(latencies),
        "seconds": elapsed,
        "rate": len(latencies) / elapsed,
        "non2xx": sum(1 for s in status if s != 200),
        "errors": len(failures),
        "failures_at": failures,
        **{f"p{p:g}": pct(p) for p in (50, 90, 99, 99.9)},
    }


def load_main(argv: Sequence[str]) -> int:
    """``python -m benchmarks.route_service load URL``: the Python client alone, its
    figures as one JSON line (so that it runs in a process of its own)."""
    parser = argparse.ArgumentParser(prog="route_service load")
    parser.add_argument("url")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fresh", action="store_true")
    args = parser.parse_args(argv)
    result = python_load(args.url, prompt_tokens(args.seed), args.clients, args.seconds, args.fresh)
    print(json.dumps(result), flush=True)
    return 0


def run_python_load(
    url: str, clients: int, seconds: float, seed: int, fresh: bool
) -> dict[str, Any]:
    """The Python client in another process; its figures."""
    command = [*_python(), "-m", "benchmarks.route_service", "load", url]
    command += ["--clients", str(clients), "--seconds", str(seconds), "--seed", str(seed)]
    command += ["--fresh"] if fresh else []
    out = subprocess.run(
        command, capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[1]
    ).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


# ---------------------------------------------------------------------- decision


def decision_figures(hash_scheme: str, rounds: int = 3000, seed: int = 1) -> dict[str, Any]:
    """The in-process decision over a 16-worker index like the service's: p50 and p99
    in microseconds, the same prompt every time and a fresh one every time."""
    from kachedb_radix import accel
    from kachedb_radix.spec.router.service import Router

    hasher = BlockHasher(hash_scheme)
    router = Router(accel.RouterIndex(hasher, BLOCK_SIZE))
    for index in range(16):
        name = f"w{index}"
        router._order[name] = index  # a router with no sockets: its index fed directly
        router._workers.append(name)
        worker = SyntheticWorker(index, hasher, seed, depth=DEPTH_STEP * index)
        router.index.apply(name, 0, worker.batch(0))
    prompt = prompt_tokens(seed)
    rng = random.Random(9)
    fresh = [[rng.randrange(50_000) for _ in prompt] for _ in range(rounds)]
    out: dict[str, Any] = {}
    for label, prompts in (("repeat", [prompt] * rounds), ("fresh", fresh)):
        times = []
        for tokens in prompts:
            started = time.perf_counter()
            router.decide(tokens, None, {})
            times.append(time.perf_counter() - started)
        times.sort()
        out[label] = {
            "p50_us": times[len(times) // 2] * 1e6,
            "p99_us": times[int(len(times) * 0.99)] * 1e6,
        }
    assert router.decide(prompt, None, {}).worker == "w15"
    return out


# ---------------------------------------------------------------------- faults


@dataclass
class FaultRun:
    """The load and fault scenario's settings (``faults_main``)."""

    rate: float = 100_000.0
    seconds: float = 6.0
    workers: int = 2
    clients: int = 8
    seed: int = 1
    hash: str = "sha256"
    cycle: int = 2048
    buffer: int = 10_000
    churn_blocks: int = 64


def _worker_process(run: FaultRun, index: int, endpoints: tuple[str, str], generation: int,
                    seconds: float) -> tuple[subprocess.Popen[str], dict[str, Any]]:  # fmt: skip
    command = [*_python(), "-m", "benchmarks.route_service", "fleet", "--workers", "1",
               "--first", str(index), "--endpoints", ",".join(endpoints), "--rate",
               str(run.rate / run.workers), "--seconds", str(seconds), "--seed", str(run.seed),
               "--hash", run.hash, "--generation", str(generation), "--cycle", str(run.cycle),
               "--buffer", str(run.buffer), "--churn-blocks", str(run.churn_blocks),
               "--start-delay", "0.3"]  # fmt: skip
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1]
    )
    assert process.stdout is not None
    return process, json.loads(process.stdout.readline())


def _slow_clients(port: int) -> list[Any]:
    """A client that sent half a request and stalls, and one that pipelines requests
    for big answers and never reads them."""
    import socket

    host = f"Host: 127.0.0.1:{port}\r\n".encode()
    stalled = socket.create_connection(("127.0.0.1", port))
    stalled.sendall(b"POST /route HTTP/1.1\r\n" + host + b"Content-Length: 100\r\n\r\n{")
    greedy = socket.create_connection(("127.0.0.1", port))
    greedy.setblocking(False)
    with contextlib.suppress(BlockingIOError):
        for _ in range(4000):
            greedy.send(b"GET /openapi.json HTTP/1.1\r\n" + host + b"\r\n")
    return [stalled, greedy]


def faults(run: FaultRun) -> dict[str, Any]:
    """Load and faults on loopback (issue 34.4): workers publishing at ``run.rate`` blocks
    a second while ``run.clients`` clients route; worker 1 killed (SIGKILL) at a third
    of the run and started again (a new generation, numbered from 0); the router
    killed at two thirds and started again on the same port; two slow clients attached
    throughout. Afterwards every worker's blocks and every answer for the probe
    prompts must equal those of a fresh index rebuilt from the same events."""
    from kachedb_radix import accel

    hasher = BlockHasher(run.hash)
    endpoints = [
        (f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}")
        for _ in range(run.workers)
    ]
    names = [f"w{i}" for i in range(run.workers)]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    generations = [0] * run.workers
    events: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        processes = []
        for index in range(run.workers):
            process, _ = _worker_process(run, index, endpoints[index], 0, run.seconds + 60)
            stack.callback(stop, process)
            processes.append(process)
        listed = [[n, pub, replay] for n, (pub, replay) in zip(names, endpoints, strict=True)]
        extra = ["--hash", run.hash]
        routed = stack.enter_context(router(listed, *extra, port=port))
        wait_blocks(url, 64 * run.workers)
        slow = _slow_clients(port)
        load = subprocess.Popen(
            [*_python(), "-m", "benchmarks.route_service", "load", url, "--clients",
             str(run.clients), "--seconds", str(run.seconds), "--seed", str(run.seed)],
            stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1],
        )  # fmt: skip
        started = time.monotonic()
        time.sleep(run.seconds / 3)
        stop(processes[1], signal.SIGKILL)  # a worker killed mid-stream
        events["worker_killed"] = time.monotonic() - started
        time.sleep(0.3)
        generations[1] = 1
        processes[1], _ = _worker_process(run, 1, endpoints[1], 1, run.seconds + 60)
        stack.callback(stop, processes[1])
        time.sleep(max(0.0, started + 2 * run.seconds / 3 - time.monotonic()))
        stop(routed[0], signal.SIGKILL)  # the router killed mid-stream
        down = time.monotonic()
        events["router_killed"] = down - started
        routed = stack.enter_context(router(listed, *extra, port=port))
        up = time.monotonic()
        events["router_answering"] = up - started
        out, _ = load.communicate(timeout=run.seconds + 120)
        measured: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        for sock in slow:
            sock.close()
        published: dict[str, int] = {}
        rate = 0.0
        for name, process in zip(names, processes, strict=True):
            process.send_signal(signal.SIGTERM)
            tail, _ = process.communicate(timeout=60)
            counts = json.loads(tail.strip().splitlines()[-1])
            published[name] = counts["published"][name]
            rate += counts["blocks"] / counts["seconds"]  # this process's own rate
        recovered = _wait_recovered(url, published)
        rows = {row["worker"]: row for row in get_json(f"{url}/workers")}
        probes = [prompt_tokens(run.seed)] + [
            prompt_tokens(run.seed, 1000 + i) for i in range(run.workers)
        ]
        probes.append(prompt_tokens(run.seed + 99))
        status, answer = post_json(
            f"{url}/route/batch", {"requests": [{"tokens": p} for p in probes]}
        )
        assert status == 200, answer
    fresh = accel.RouterIndex(hasher, BLOCK_SIZE)
    for index, name in enumerate(names):
        depth = DEPTH_STEP * index % PROMPT_BLOCKS
        worker = SyntheticWorker(
            index, hasher, run.seed, generations[index], depth, run.churn_blocks, cycle=run.cycle
        )
        for k in range(published[name]):
            fresh.apply(name, k, worker.batch(k))
    same_blocks = all(rows[n]["blocks"] == fresh.held(n) and not rows[n]["stale"] for n in names)
    same_answers = all(
        {w: d for w, d in decision["depths"].items()}
        == {str(w): d for w, d in fresh.query_tokens(p).items()}
        for decision, p in zip(answer["decisions"], probes, strict=True)
    )
    outside = [t for t in measured.pop("failures_at") if not down - 0.5 <= t <= up + 0.5]
    return {
        "published_blocks_per_s": rate,
        "load": measured,
        "errors_outside_the_router_restart": len(outside),
        "events": events,
        "recovered": recovered,
        "same_blocks_as_a_fresh_index": same_blocks,
        "same_answers_as_a_fresh_index": same_answers,
        "router_stale_after": [n for n in names if rows[n]["stale"]],
        "router_rows": {
            n: {
                "index": rows[n]["index"],
                "subscriber": rows[n]["subscriber"],
                "blocks": rows[n]["blocks"],
                "fresh": fresh.held(n),
            }
            for n in names
        },
        "machine_load": os.getloadavg()[0],
    }


def _wait_recovered(url: str, published: dict[str, int], seconds: float = 120.0) -> bool:
    """Until the router expects every published batch next and replays nothing."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        rows = {row["worker"]: row for row in get_json(f"{url}/workers")}
        if all(
            rows[n]["expected"] >= seq and not rows[n]["catching_up"]
            for n, seq in published.items()
        ):
            return True
        time.sleep(0.1)
    return False


def faults_main(argv: Sequence[str]) -> int:
    """``python -m benchmarks.route_service faults``: the scenario of :func:`faults`."""
    parser = argparse.ArgumentParser(prog="route_service faults")
    defaults = FaultRun()
    for name, value in vars(defaults).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    args = parser.parse_args(argv)
    result = faults(FaultRun(**vars(args)))
    print(json.dumps(result))
    return 0 if result["recovered"] and result["same_answers_as_a_fresh_index"] else 1


# ---------------------------------------------------------------------- main


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """One run: fleet, router, load; the figures."""
    fleet_args = ["--workers", str(args.workers), "--rate", str(args.rate),
                  "--seconds", str(args.seconds + 30), "--hash", args.hash]  # fmt: skip
    route_cmd = shlex.split(args.route_cmd) if args.route_cmd else None
    with (
        fleet(*fleet_args) as (_, info),
        router(info["workers"], "--hash", args.hash, route_cmd=route_cmd) as (process, url),
    ):
        wait_blocks(url, 64 * args.workers)
        time.sleep(1.0)
        events_before = sum(r["index"].get("stored", 0) for r in get_json(f"{url}/workers"))
        cpu_before = cpu_seconds(process.pid)
        load_before = os.getloadavg()[0]
        fresh = args.prompt == "fresh"
        if args.client == "wrk":
            result = run_wrk(url, info["prompt"], args.clients, args.seconds, fresh)
        else:
            result = run_python_load(url, args.clients, args.seconds, 1, fresh)
        cpu = cpu_seconds(process.pid) - cpu_before
        rows = get_json(f"{url}/workers")
        events = sum(r["index"].get("stored", 0) for r in rows) - events_before
        health = get_json(f"{url}/health")
    result.update(
        {
            "router_cpu_s": cpu,
            "stored_blocks_applied": events,
            "applied_per_s": events / result["seconds"],
            "health_ok": health.get("ok"),
            "load_before": load_before,
            "load_after": os.getloadavg()[0],
        }
    )
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """The benchmark's command line (the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["fleet"]:
        return fleet_main(argv[1:])
    if argv[:1] == ["load"]:
        return load_main(argv[1:])
    if argv[:1] == ["faults"]:
        return faults_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m benchmarks.route_service")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--rate", type=float, default=100_000.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--hash", default="sha256")
    parser.add_argument("--prompt", choices=("repeat", "fresh"), default="repeat")
    parser.add_argument("--client", choices=("wrk", "python"), default=None)
    parser.add_argument("--route-cmd", default=None, help="the router command (default: ours)")
    parser.add_argument("--decision", action="store_true", help="the in-process decision too")
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args(argv)
    args.client = args.client or ("wrk" if shutil.which("wrk") else "python")
    print(f"machine: {os.cpu_count()} cpus, load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.decision:
        print("decision (in-process):", json.dumps(decision_figures(args.hash)))
    for _ in range(args.runs):
        result = measure(args)
        print(
            f"/route {args.prompt} prompt, {args.workers} workers, {args.clients} clients, "
            f"{args.rate:,.0f} blocks/s published ({result['generator']}): "
            f"p50 {result['p50']:.2f} ms, p90 {result['p90']:.2f} ms, p99 {result['p99']:.2f} ms, "
            f"{result['rate']:,.0f} req/s, non-2xx {result['non2xx']}, errors {result['errors']}; "
            f"applied {result['applied_per_s']:,.0f} stored blocks/s, router CPU "
            f"{result['router_cpu_s']:.1f} s, "
            f"load {result['load_before']:.1f}->{result['load_after']:.1f}"
        )
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
