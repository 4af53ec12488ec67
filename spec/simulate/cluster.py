"""Many workers behind a router: each its own tree, the router fed by their KV events.

``--workers N --routing R`` splits a capacity evenly over ``N`` workers (the pool
column is the cluster's total; worker ``w`` gets ``capacity // N``, plus one for the
first ``capacity % N``) and sends each request to one of them:

* ``random`` -- uniformly (seeded: ``--seed``);
* ``round-robin`` -- in turn;
* ``least-loaded`` -- the fewest requests in flight (ties: the lowest index);
* ``prefix`` -- the deepest match in the router index (R-ROUTE-4), ties to the least
  loaded, then the lowest index: cache affinity first;
* ``cost`` -- the lowest ``overlap_weight * (blocks to prefill there) + (its active
  blocks)``, ties to the deeper match, then the lowest index. This is the trade NVIDIA
  Dynamo's KV router makes (its ``kv-overlap-score-weight``, default 1): a worker's
  prefill cost in blocks against its decode load in blocks, so a warm but busy
  worker loses to a cold idle one when the prefix saved is smaller than the queue.
* ``weighted`` -- llm-d's precise scheduler (its precise-prefix-cache-aware guide's
  scheduling profile): the highest ``2 x prefix + kv + queue``, where *prefix* is the
  share of the prompt's blocks the index finds on the worker, *kv* the share of its pool
  its requests do not need, and *queue* ``(most - waiting) / (most - fewest)`` over the
  workers' waiting queues (1 when they are equal); ties to the lowest index;
* ``cache-aware`` -- SGLang's router (``sglang_router``'s ``cache_aware`` policy, its
  v0.4 defaults): when the loads are imbalanced -- the busiest worker has more than
  :data:`BALANCE_ABS` requests more than the idlest *and* more than
  :data:`BALANCE_REL` times as many -- the least loaded; otherwise the deepest match
  when it covers more than :data:`CACHE_THRESHOLD` of the prompt, else the worker
  whose index holds the fewest blocks (the most room), ties to the lowest index.

**The index.** ``prefix`` and ``cost`` read a router index -- the ``RouterIndex`` of
the trees' implementation (:class:`kachedb_radix.accel.RouterIndex`, the C twin, with
accel trees; :class:`kachedb_radix.reference.router.RouterIndex` with the reference's),
or any class with its API (``--router-index module:Class``) -- fed by the workers' own
trees: each worker's tree is built with a
:class:`~kachedb_radix.reference.events.BlockHasher` (``xxh3_64``, Dynamo's, by far the
fastest of the schemes in Python: measured in docs/simulate.md), its batches are taken
after every operation, numbered per worker and applied in order. A tiered worker's
events name each block's tier (``medium``); the index counts a block held in any tier
as held, so ``prefix`` and ``cost`` route to a worker's host and disk copies too.
``--router-delay N`` holds each batch back until N more requests have been routed;
``--router-delay 50ms`` until 50 ms of trace time have passed (the router's view lags
the workers, as it does over a network). Never before the trace's clock
reaches the operation that emitted it: in the timed mode a step that ends after an
arrival has not happened yet for the router that routes it.

**Three indexes: fed by events, learned per gateway, learned at routing time.** With
``--index shared`` (default) every request is routed by the one index above, which
knows only what the workers' events have said -- after a prefill is *admitted*, so in
a burst, when every request arrives before any event, it knows nothing yet. With
``--index approximate`` the router learns at routing time instead, as SGLang's router
does with its approximate radix tree: one tree per worker, of the worker's own pool
size, evicting by LRU; each routed prompt is inserted into the tree of the worker it
was sent to the moment it is routed, and matches are read from those trees. It knows
what it sent, not what the workers kept (it never hears an eviction, and counts a
prompt as cached before its prefill has run), but it needs no event stream and is
never late. (SGLang bounds its tree by ``--max-tree-size``, 2**24 characters by
default, and evicts on a timer; here the worker's pool bounds each tree.) With
``--index gateway --gateways G`` there are G gateways, request ``i`` going to gateway
``i mod G``, each with its own index that learns only from its own decisions -- the
blocks of every prompt it routed, stored under the worker it chose, never removed --
which is how several gateways without an event stream approximate the workers'
caches. The gaps between them are what an event stream, and sharing it, buy.

**Load.** In the timed mode a worker's load is what it holds (waiting, prefilling,
decoding) and its active blocks the blocks those requests need (prompts, and the
outputs they have grown). The sequential mode has no
time; there a request counts as in flight for the next ``max_running`` requests
routed (the scheduler's cap), a sliding window that stands in for concurrency.

Reported per configuration: the cluster's hit ratio, and per worker its requests,
its hit ratio and its prompt tokens; balance = the busiest worker's prompt tokens
over the mean (1.0 is perfect).

Cost: routing is O(request blocks * workers) with an index, O(workers) without;
events O(blocks stored or evicted).
"""

from __future__ import annotations

import importlib
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kachedb_radix.reference.events import BlockHasher, BlockStored, KVEventBatch

from ..twins import twin_class
from .errors import SimulateError
from .sequential import PROGRESS_EVERY, Progress, Replay
from .tiers import TierRecord, is_tiered, tier_moves
from .trace import Trace

ROUTINGS = ("random", "round-robin", "least-loaded", "prefix", "cost", "weighted", "cache-aware")
#: The routings that read an index.
INDEXED = ("prefix", "cost", "weighted", "cache-aware")
#: ``weighted``: the weights of llm-d's prefix, KV-cache and queue scorers.
WEIGHTS = (2.0, 1.0, 1.0)
INDEXES = ("shared", "approximate", "gateway")
#: SGLang's cache-aware policy: the least loaded when the busiest worker has this many
#: requests more than the idlest ...
BALANCE_ABS = 32
#: ... and more than this many times as many (sglang_router's v0.4 defaults);
BALANCE_REL = 1.0001
#: else the deepest match when it covers more than this share of the prompt.
CACHE_THRESHOLD = 0.5
#: The router index of each tree implementation, used unless ``--router-index`` names
#: another: the twin of the trees that feed it.
INDEX_OF = {
    "reference": "kachedb_radix.reference.router:RouterIndex",
    "accel": "kachedb_radix.accel:RouterIndex",
}
#: The block hash the workers' events and the router's queries use.
HASH_SCHEME = "xxh3_64"


@dataclass(frozen=True)
class ClusterSpec:
    """How requests spread over workers (see the module docstring).

    Raises:
        SimulateError: a count, routing, index or delay out of range.
    """

    workers: int = 1
    routing: str = "round-robin"
    index: str = "shared"
    gateways: int = 1
    delay_requests: int = 0
    delay_ms: float | None = None
    overlap_weight: float = 1.0
    seed: int = 0
    #: ``module:Class`` of the router index; None: the trees' implementation's.
    router_index: str | None = None

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise SimulateError(f"--workers must be >= 1, got {self.workers}")
        if self.routing not in ROUTINGS:
            raise SimulateError(
                f"--routing: unknown routing {self.routing!r}; choose from {', '.join(ROUTINGS)}"
            )
        if self.index not in INDEXES:
            raise SimulateError(f"--index: choose from {', '.join(INDEXES)}, got {self.index!r}")
        if self.gateways < 1:
            raise SimulateError(f"--gateways must be >= 1, got {self.gateways}")
        if self.delay_requests < 0 or (self.delay_ms is not None and not self.delay_ms >= 0):
            raise SimulateError("--router-delay must be >= 0")
        if not self.overlap_weight > 0:
            raise SimulateError(f"--overlap-weight must be > 0, got {self.overlap_weight}")

    @property
    def uses_index(self) -> bool:
        """Whether routing reads a router index. O(1)."""
        return self.workers > 1 and self.routing in INDEXED

    @property
    def uses_events(self) -> bool:
        """Whether the workers' trees must emit events (a shared index to feed). O(1)."""
        return self.uses_index and self.index == "shared"

    @property
    def label(self) -> str:
        """``4xprefix``, ``4xcost@gw4``, ``4xprefix+2req``: how the tables name it. O(1)."""
        if self.workers == 1:
            return ""
        text = f"{self.workers}x{self.routing}"
        if self.uses_index and self.index == "gateway":
            text += f"@gw{self.gateways}"
        elif self.uses_index and self.index == "approximate":
            text += "@approx"
        if self.uses_index and self.delay_ms is not None:
            whole = self.delay_ms >= 1000 and self.delay_ms % 1000 == 0
            text += f"+{self.delay_ms / 1000:g}s" if whole else f"+{self.delay_ms:g}ms"
        elif self.uses_index and self.delay_requests:
            text += f"+{self.delay_requests}req"
        return text

    def pools(self, capacity: int, limit: int) -> list[int]:
        """Each worker's blocks: ``capacity`` split evenly, at least 1, at most ``limit``
        (more than the trace's working set is never used). O(workers)."""
        share, extra = divmod(capacity, self.workers)
        return [min(limit, max(1, share + (worker < extra))) for worker in range(self.workers)]


#: What a router index class must have: the calls the router makes.
INDEX_METHODS = ("apply", "query_hashes", "held", "workers")


def load_index_class(path: str) -> Any:
    """The class ``module:Class`` names, which must have the router index's methods
    (:data:`INDEX_METHODS`). O(the import).

    Raises:
        SimulateError: it cannot be imported, is not a class, or lacks a method.
    """
    module, _, name = path.partition(":")
    if not module or not name:
        raise SimulateError(f"--router-index {path!r}: expected module:Class")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as error:
        raise SimulateError(f"--router-index {path!r}: {error}") from None
    if not isinstance(found, type):
        raise SimulateError(f"--router-index {path!r}: not a class")
    missing = [method for method in INDEX_METHODS if not callable(getattr(found, method, None))]
    if missing:
        raise SimulateError(f"--router-index {path!r}: the class has no {missing[0]}() method")
    return found


def make_index(factory: Any, hasher: BlockHasher, block_size: int, path: str | None) -> Any:
    """A router index ``factory(hasher, block_size)``. O(its constructor).

    Raises:
        SimulateError: the constructor refuses those arguments.
    """
    try:
        return factory(hasher, block_size)
    except Exception as error:  # a third-party class: whatever it raises is its answer
        raise SimulateError(f"--router-index {path!r}: cannot be built: {error}") from None


def prompt_hashes(trace: Trace, hasher: BlockHasher) -> list[list[Any]]:
    """The external hash of every whole prompt block of every request (what the router
    queries with). O(total prompt tokens)."""
    size = trace.block_size
    chains = []
    for request in trace.requests:
        chain = hasher.chain(request.tokens.tolist(), size, request.namespace)
        chains.append([hasher.external(h) for h in chain])
    return chains


class Router:
    """The routing rule, its index(es) and the events on their way (module docstring).

    Args:
        spec: the cluster.
        trees: the workers' trees (built with events when ``spec.uses_events``).
        hashes: :func:`prompt_hashes` of the trace (when ``spec.uses_index``).
        window: the sequential mode's in-flight window (requests).
        implementation: the trees' implementation, whose router index is used unless
            ``spec.router_index`` names one.
    """

    def __init__(
        self,
        spec: ClusterSpec,
        trace: Trace,
        trees: Sequence[Any],
        hashes: list[list[Any]] | None,
        window: int = 256,
        implementation: str = "reference",
    ) -> None:
        self.spec = spec
        self.trace = trace
        self.trees = trees
        self.hashes = hashes
        self.rng = random.Random(spec.seed)
        self.routed = 0
        self.hasher = BlockHasher(HASH_SCHEME)
        self.indexes: list[Any] = []
        #: Each worker's pool in blocks (``weighted`` scores the share its requests need).
        self.pools = [max(1, int(tree.num_blocks)) for tree in trees] or [1] * spec.workers
        #: ``--index approximate``: one tree per worker, learned at routing time.
        self.approximate: list[Any] = []
        if spec.uses_index and spec.index == "approximate":
            factory = twin_class(implementation)
            self.approximate = [factory(tree.num_blocks, trace.block_size) for tree in trees]
        elif spec.uses_index:
            assert hashes is not None, "an index needs the prompts' hashes"
            factory = (
                twin_class(implementation, "RouterIndex")  # the trees' twin: spec/twins.py
                if spec.router_index is None
                else load_index_class(spec.router_index)
            )
            count = spec.gateways if spec.index == "gateway" else 1
            self.indexes = [make_index(factory, self.hasher, trace.block_size, spec.router_index)
                            for _ in range(count)]  # fmt: skip
        self.sequence = [[0] * spec.workers for _ in self.indexes]  # next batch number
        # Per worker, in the order emitted: (released at this time, at this many requests
        # routed, the batch). A worker's batches reach the index in order, none early.
        self.pending: list[deque[tuple[float, int, KVEventBatch]]] = [
            deque() for _ in range(spec.workers)
        ]
        # The sequential mode's stand-in for load: requests routed recently.
        self.window: deque[tuple[int, int]] = deque(maxlen=window)
        self.recent = [0] * spec.workers
        self.recent_blocks = [0] * spec.workers
        self.events_applied = 0

    # ------------------------------------------------------------------ events

    def observe(self, worker: int, time: float) -> None:
        """Take ``worker``'s tree's new batches, emitted at ``time``; they reach the index
        once the trace's clock has passed ``time`` plus the delay in ms, and once the
        delay in requests have been routed since. O(1) per batch."""
        if not self.spec.uses_events:
            return
        spec = self.spec
        at = time + (spec.delay_ms or 0.0)
        after = self.routed + spec.delay_requests
        queue = self.pending[worker]
        for batch in self.trees[worker].take_events():
            queue.append((at, after, batch))

    def deliver(self, now: float) -> None:
        """Apply every batch released at time ``now`` (see :meth:`observe`). O(their
        events + workers)."""
        index, numbers = self.indexes[0], self.sequence[0]
        routed = self.routed
        for worker, queue in enumerate(self.pending):
            while queue and queue[0][0] <= now and queue[0][1] <= routed:
                index.apply(worker, numbers[worker], queue.popleft()[2])
                numbers[worker] += 1
                self.events_applied += 1

    # ------------------------------------------------------------------ routing

    def route(
        self,
        request: int,
        time: float,
        loads: Sequence[int],
        active: Sequence[int],
        waiting: Sequence[int] | None = None,
    ) -> int:
        """The worker for ``request`` at ``time``, given each worker's requests
        (``loads``), the blocks they need (``active``) and how many wait (``waiting``;
        None: ``loads``). O(its blocks * workers) with an index."""
        spec = self.spec
        count = spec.workers
        if spec.uses_events:
            self.deliver(time)
        routing = spec.routing
        if routing == "random":
            chosen = self.rng.randrange(count)
        elif routing == "round-robin":
            chosen = self.routed % count
        elif routing == "least-loaded":
            chosen = min(range(count), key=lambda w: (loads[w], w))
        elif not spec.uses_index:  # one worker: nothing to choose, no index kept
            chosen = 0
        else:
            chosen = self._by_index(request, loads, active, loads if waiting is None else waiting)
        self.routed += 1
        return chosen

    def _by_index(
        self, request: int, loads: Sequence[int], active: Sequence[int], waiting: Sequence[int]
    ) -> int:
        """``prefix``, ``cost``, ``weighted`` or ``cache-aware`` over the index's match
        depths (in blocks), then what the index learns from the choice. O(blocks * workers)."""
        spec = self.spec
        count = spec.workers
        depths, blocks = self._depths(request)
        if spec.routing == "prefix":
            chosen = min(range(count), key=lambda w: (-depths.get(w, 0), loads[w], w))
        elif spec.routing == "cost":
            weight = spec.overlap_weight
            chosen = min(
                range(count),
                key=lambda w: (
                    weight * (blocks - depths.get(w, 0)) + active[w],
                    -depths.get(w, 0),
                    w,
                ),
            )
        elif spec.routing == "weighted":
            chosen = self._weighted(depths, blocks, active, waiting)
        else:
            chosen = self._cache_aware(depths, blocks, loads)
        if spec.index == "gateway" and blocks:
            assert self.hashes is not None
            self._learn(request % len(self.indexes), chosen, request, self.hashes[request])
        elif spec.index == "approximate":
            prompt = self.trace.requests[request]
            self.approximate[chosen].insert(prompt.tokens, prompt.namespace)
        return chosen

    def _depths(self, request: int) -> tuple[dict[int, int], int]:
        """Each worker's match depth for ``request``'s prompt, in blocks, and the
        prompt's whole blocks. O(blocks * workers)."""
        if self.approximate:
            prompt = self.trace.requests[request]
            size = self.trace.block_size
            found = {w: tree.match(prompt.tokens, prompt.namespace).length // size
                     for w, tree in enumerate(self.approximate)}  # fmt: skip
            return found, len(prompt.tokens) // size
        assert self.hashes is not None
        hashes = self.hashes[request]
        index = self.indexes[request % len(self.indexes)]
        return (index.query_hashes(hashes) if hashes else {}), len(hashes)

    def _weighted(
        self, depths: dict[int, int], blocks: int, active: Sequence[int], waiting: Sequence[int]
    ) -> int:
        """llm-d's precise scheduler's choice (see the module docstring). O(workers)."""
        prefix, kv, queue = WEIGHTS
        most, fewest = max(waiting), min(waiting)

        def score(w: int) -> tuple[float, int]:
            found = depths.get(w, 0) / blocks if blocks else 0.0
            free = 1.0 - min(1.0, active[w] / self.pools[w])
            short = (most - waiting[w]) / (most - fewest) if most > fewest else 1.0
            return -(prefix * found + kv * free + queue * short), w

        return min(range(self.spec.workers), key=score)

    def _cache_aware(self, depths: dict[int, int], blocks: int, loads: Sequence[int]) -> int:
        """SGLang's cache-aware choice (see the module docstring). O(workers)."""
        count = self.spec.workers
        low, high = min(loads), max(loads)
        if high - low > BALANCE_ABS and high > BALANCE_REL * low:
            return min(range(count), key=lambda w: (loads[w], w))
        best = min(range(count), key=lambda w: (-depths.get(w, 0), w))
        if blocks and depths.get(best, 0) > CACHE_THRESHOLD * blocks:
            return best
        return min(range(count), key=lambda w: (self._held(w), w))

    def _held(self, worker: int) -> int:
        """Blocks the index holds for ``worker`` (the approximate tree's, or the shared
        or first gateway's index's). O(1)."""
        if self.approximate:
            held: int = self.approximate[worker].stats().cached
            return held
        index = self.indexes[0]
        return int(index.held(worker)) if worker in index.workers() else 0

    def _learn(self, gateway: int, worker: int, request: int, hashes: list[Any]) -> None:
        """A gateway's own index stores the prompt it routed under the worker it chose."""
        tokens = self.trace.requests[request].tokens
        stored = BlockStored(
            block_hashes=hashes,
            parent_block_hash=None,
            token_ids=tokens[: len(hashes) * self.trace.block_size].tolist(),
            block_size=self.trace.block_size,
            lora_id=None,
            medium="GPU",
            lora_name=None,
        )
        numbers = self.sequence[gateway]
        self.indexes[gateway].apply(worker, numbers[worker], KVEventBatch(0.0, [stored]))
        numbers[worker] += 1

    def sequential_loads(self) -> tuple[list[int], list[int]]:
        """The sequential mode's loads: requests and prompt blocks in the window. O(1)."""
        return self.recent, self.recent_blocks

    def count_sequential(self, worker: int, blocks: int) -> None:
        """Record a routed request in the sequential mode's window. O(1)."""
        window = self.window
        if len(window) == window.maxlen:
            old, old_blocks = window[0]
            self.recent[old] -= 1
            self.recent_blocks[old] -= old_blocks
        window.append((worker, blocks))
        self.recent[worker] += 1
        self.recent_blocks[worker] += blocks


def replay_cluster_sequential(
    trace: Trace, trees: Sequence[Any], router: Router, progress: Progress | None = None
) -> Replay:
    """The sequential mode over workers: route, then match, insert and release on the
    chosen worker's tree (as :func:`~kachedb_radix.spec.simulate.sequential.replay_sequential`
    does on one). O(total tokens) tree work plus the routing.

    Raises:
        SimulateError: a delay in milliseconds on a trace without timestamps.
    """
    if router.spec.delay_ms is not None and not trace.has_timestamps():
        raise SimulateError("--router-delay in ms needs a timestamp on every request")
    size = trace.block_size
    lengths: list[int] = []
    workers: list[int] = []
    tiered = is_tiered(trees)
    host: list[int] = []
    disk: list[int] = []
    evictions = truncated = 0
    for index, request in enumerate(trace.requests):
        time = request.timestamp or 0.0
        loads, active = router.sequential_loads()
        worker = router.route(index, time, loads, active)
        router.count_sequential(worker, trace.prompt_blocks(request))
        tree = trees[worker]
        hit = tree.match(request.tokens, request.namespace, pin=True)
        sequence = request.sequence
        longest = tree.num_blocks * size
        if len(sequence) >= longest + size:
            sequence = sequence[:longest]
            truncated += 1
        evictions += len(tree.insert(sequence, request.namespace, **request.retention()).evicted)
        hit.lease.release()
        router.observe(worker, time)
        lengths.append(hit.length)
        workers.append(worker)
        if tiered:
            host.append(hit.host)
            disk.append(hit.disk)
        if progress is not None and len(lengths) % PROGRESS_EVERY == 0:
            progress(PROGRESS_EVERY)
    if progress is not None:
        progress(len(lengths) % PROGRESS_EVERY)
    tiers = None
    if tiered:
        demoted, dropped = tier_moves(trees)
        tiers = TierRecord(host, disk, demoted=demoted, dropped=dropped)
        evictions += sum(tree.restore_evictions for tree in trees)
    return Replay(
        lengths=lengths,
        order=list(range(len(lengths))),
        evictions=evictions,
        peak_pinned=max(lengths, default=0) // size,
        truncated=truncated,
        worker_of=workers,
        restored=sum(host) + sum(disk),
        tiers=tiers,
    )
