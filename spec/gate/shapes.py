"""The gate's standard shapes: deterministic trees and the workloads timed on them.

Everything here is built from fixed seeds, so every run, every implementation and every
baseline see exactly the same token sequences in the same order.  The benchmark suite
(``benchmarks/``) and the plot use the same shapes.

* the four tree shapes for match latency (:data:`SHAPES`): each is a list of sequences
  to insert plus one fully cached *query path*; a match of length L queries its first L
  tokens, so the whole query is cached (a full match);
* workloads (:class:`Workload`): a timed call plus an optional untimed per-round setup,
  for match, insert, the serving cycle and eviction -- the steady state
  (:func:`evict_workload`) and the first eviction after a fill
  (:func:`first_evict_workload`, the worst case of a lazily cleaned queue).

A tree is any object with the ``kachedb_radix.reference.RadixTree`` API (built by a factory
``factory(num_blocks, block_size)``); it is typed ``Any`` here.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Tokens per block for every match and insert case (the default of the tree).
BLOCK_SIZE = 16
#: Token ids are drawn from [0, VOCAB): Llama-3's vocabulary size.
VOCAB = 128_256
#: Root seed; every shape and workload derives its own seed from it.
SEED = 20_250_601

#: Prompt lengths of the match cases (the full sweep) and the quick subset.
MATCH_LENGTHS = (16, 64, 256, 1024, 4096, 16_384, 65_536, 131_072)
QUICK_MATCH_LENGTHS = (16, 1024, 16_384)
#: How token ids are handed to ``match``.
INPUT_KINDS = ("list", "uint32", "int64")
#: The branchy shape is built by one insert per sibling, each walking from the root,
#: so building L tokens of it costs O(L^2 / B) through the public API (measured with
#: the reference: 4.7 s for 1,024 levels, 18.5 s for 2,048). Its sweep stops here.
BRANCHY_MAX_TOKENS = 16_384
#: Cached-block counts of the eviction cases (full sweep, quick subset).
EVICT_SIZES = (1_000, 10_000, 100_000, 1_000_000)
QUICK_EVICT_SIZES = (1_000, 1_000_000)
#: Blocks freed by one timed ``evict`` call.
EVICT_BATCH = 64
#: The first-eviction shape: a few shared heads, many leaves under each.
FIRST_EVICT_HEADS = 8
FIRST_EVICT_HEAD_BLOCKS = 4
FIRST_EVICT_LEAF_BLOCKS = 8

TreeFactory = Callable[..., Any]


# ---------------------------------------------------------------- trees


def make_tree(
    factory: TreeFactory, name: str, num_blocks: int, block_size: int, policy: str = "lru"
) -> Any:
    """A tree of implementation ``name`` evicting by ``policy``; fails if the class reports
    another name."""
    tree = (
        factory(num_blocks, block_size)
        if policy == "lru"
        else factory(num_blocks, block_size, policy=policy)
    )
    actual = getattr(tree, "implementation", None)
    if actual != name:
        raise RuntimeError(f"asked for implementation {name!r}, got {actual!r}")
    return tree


# ---------------------------------------------------------------- tokens


def random_tokens(rng: np.random.Generator, count: int) -> list[int]:
    """``count`` token ids drawn uniformly from the vocabulary, as Python ints."""
    values: list[int] = rng.integers(0, VOCAB, size=count, dtype=np.int64).tolist()
    return values


def as_input(tokens: list[int], kind: str) -> object:
    """``tokens`` as the given input kind: a fresh ``list``, or a NumPy uint32/int64 array."""
    if kind == "list":
        return list(tokens)
    if kind == "uint32":
        return np.asarray(tokens, dtype=np.uint32)
    if kind == "int64":
        return np.asarray(tokens, dtype=np.int64)
    raise ValueError(f"unknown input kind {kind!r}; choose from {INPUT_KINDS}")


def _seed(*parts: object) -> np.random.Generator:
    # A stable seed per (shape, parameters): str hashes are salted per process, so
    # digest the parts' repr with a fixed polynomial instead.
    digest = SEED
    for char in repr(parts):
        digest = (digest * 1_000_003 + ord(char)) % (2**63)
    return np.random.default_rng(digest)


# ---------------------------------------------------------------- match shapes


@dataclass(frozen=True)
class Shape:
    """A tree to build and the fully cached path whose prefixes are queried.

    Attributes:
        name: short id used in case names.
        description: one line for people.
        sequences: token sequences inserted in this order to build the tree.
        query: a cached path; a match of length L uses ``query[:L]``.
        blocks: the exact number of blocks the tree needs at B=16, when the builder
            knows it (0: use the sum of the sequences' blocks, an upper bound).
    """

    name: str
    description: str
    sequences: list[list[int]]
    query: list[int]
    blocks: int = 0

    def block_bound(self) -> int:
        """The pool size to build with: enough that building never evicts."""
        if self.blocks:
            return self.blocks
        return sum(len(tokens) // BLOCK_SIZE for tokens in self.sequences) + 1


def long_edge(max_tokens: int) -> Shape:
    """One sequence inserted once: a single edge of ``max_tokens / B`` blocks."""
    query = random_tokens(_seed("long_edge", max_tokens), max_tokens)
    return Shape("long_edge", f"one edge of {max_tokens // BLOCK_SIZE} blocks", [query], query)


def branchy(levels: int, siblings: int = 8) -> Shape:
    """A path of ``levels`` one-block nodes, each level holding ``siblings`` siblings.

    The main path is inserted first, then ``siblings - 1`` one-block sequences branch
    off at every depth, deepest first (each split leaves a one-block node behind).
    """
    rng = _seed("branchy", levels, siblings)
    main = random_tokens(rng, levels * BLOCK_SIZE)
    sequences = [main]
    for depth in reversed(range(levels)):
        prefix = main[: depth * BLOCK_SIZE]
        for _ in range(siblings - 1):
            sequences.append(prefix + random_tokens(rng, BLOCK_SIZE))
    return Shape(
        "branchy",
        f"{levels} one-block nodes, {siblings} siblings per level",
        sequences,
        main,
        blocks=levels * siblings,
    )


def system_prompts(max_tokens: int, count: int = 10_000, prompt_tokens: int = 128) -> Shape:
    """A root with ``count`` distinct system prompts of ``prompt_tokens`` tokens each.

    The query path is one of them, continued to ``max_tokens`` tokens.
    """
    rng = _seed("system_prompts", max_tokens, count, prompt_tokens)
    prompts: list[list[int]] = rng.integers(
        0, VOCAB, size=(count, prompt_tokens), dtype=np.int64
    ).tolist()
    firsts = {tuple(prompt[:BLOCK_SIZE]) for prompt in prompts}
    if len(firsts) != count:  # pragma: no cover - 16 random tokens of 128,256 never repeat
        raise AssertionError("system prompts must start with distinct blocks")
    chosen = prompts[count // 2]
    query = chosen + random_tokens(rng, max(0, max_tokens - prompt_tokens))
    return Shape(
        "system_prompts",
        f"{count} distinct system prompts of {prompt_tokens} tokens at the root",
        [*prompts, query],
        query[:max_tokens],
    )


def chat(
    max_tokens: int,
    conversations: int = 400,
    prompts: int = 8,
    forks: int = 32,
    prompt_tokens: int = 512,
) -> Shape:
    """Conversations sharing ``prompts`` system prompts, with branching turns.

    A turn is a user message (16-256 tokens) and a reply (32-512 tokens). Each
    conversation starts on a system prompt or, one time in four, forks an earlier
    conversation after one of its turns (an edited or regenerated turn), then adds 1-6
    turns. The query path is a long conversation on prompt 0 (``max_tokens`` tokens)
    off which ``forks`` conversations branch at random turn boundaries.
    """
    rng = _seed("chat", max_tokens, conversations, prompts, forks, prompt_tokens)
    system = [random_tokens(rng, prompt_tokens) for _ in range(prompts)]

    def turn() -> list[int]:
        length = int(rng.integers(16, 257)) + int(rng.integers(32, 513))
        return random_tokens(rng, length)

    def flat(turns: list[list[int]]) -> list[int]:
        return list(itertools.chain.from_iterable(turns))

    finished: list[list[list[int]]] = []
    sequences: list[list[int]] = []
    for _ in range(conversations):
        if finished and rng.random() < 0.25:
            base = finished[int(rng.integers(len(finished)))]
            turns = base[: int(rng.integers(1, len(base) + 1))]
        else:
            turns = [system[int(rng.integers(prompts))]]
        turns = turns + [turn() for _ in range(int(rng.integers(1, 7)))]
        finished.append(turns)
        sequences.append(flat(turns))

    long_turns = [system[0]]
    total = prompt_tokens
    while total < max_tokens:
        long_turns.append(turn())
        total += len(long_turns[-1])
    query = flat(long_turns)[:max_tokens]
    sequences.append(query)
    for _ in range(forks):
        cut = int(rng.integers(1, len(long_turns) + 1))
        sequences.append(flat(long_turns[:cut])[:max_tokens] + turn())
    return Shape(
        "chat",
        f"{conversations} conversations on {prompts} system prompts, branching turns, "
        f"{forks} forks off the queried one",
        sequences,
        query,
    )


#: Shape builders by name, each taking the longest prompt length it must serve.
SHAPES: dict[str, Callable[[int], Shape]] = {
    "long_edge": long_edge,
    "branchy": lambda max_tokens: branchy(max_tokens // BLOCK_SIZE),
    "system_prompts": system_prompts,
    "chat": chat,
}


def shape_lengths(shape: str, lengths: tuple[int, ...]) -> tuple[int, ...]:
    """The prompt lengths a shape is measured at (branchy stops at BRANCHY_MAX_TOKENS)."""
    if shape == "branchy":
        return tuple(length for length in lengths if length <= BRANCHY_MAX_TOKENS)
    return lengths


@functools.lru_cache(maxsize=16)
def get_shape(name: str, max_tokens: int) -> Shape:
    """The shape ``name`` able to serve queries of up to ``max_tokens`` tokens (cached)."""
    return SHAPES[name](max_tokens)


def build_tree(factory: TreeFactory, impl: str, shape: Shape) -> Any:
    """Insert the shape's sequences into a fresh tree; check the query is fully cached."""
    tree = make_tree(factory, impl, shape.block_bound(), BLOCK_SIZE)
    for tokens in shape.sequences:
        tree.insert(tokens)
    _check_full_match(tree.match(shape.query).length, shape, impl)
    return tree


def _check_full_match(length: int, shape: Shape, impl: str) -> None:
    expected = len(shape.query) // BLOCK_SIZE * BLOCK_SIZE
    if length != expected:
        raise AssertionError(f"{impl} on {shape.name}: query matched {length}, not {expected}")


# ---------------------------------------------------------------- workloads


@dataclass
class Workload:
    """A timed call and what surrounds it.

    Attributes:
        run: the call that is timed.
        setup: called untimed before each timed call; None when ``run`` may simply be
            repeated (then calls are timed in batches).
        units: the reported figure is time per unit (``units`` per call).
        unit: what a unit is ("call", "block").
        keep: objects the workload keeps alive (the tree).
        rounds: a fixed number of timed rounds, for a call whose setup is expensive and
            whose first run is the point (None: sized by the policy).
        warmups: with ``rounds``, untimed rounds (setup and call) before the timed ones:
            each timed call is still the first on the state its own setup built, but the
            process has made such a state before (its allocator's arenas grown, its pages
            touched) -- as a server has.  0: none (a setup of seconds).
        cold: called before each batch of the interleaved anchor, to give the anchor the
            state the timed call found (the first eviction's flushed caches: an anchor
            timed warm beside a call timed cold drifts with the neighbours' use of the
            caches, which the call does not).  None: the anchor runs as it finds things.
    """

    run: Callable[[], object]
    setup: Callable[[], None] | None = None
    units: int = 1
    unit: str = "call"
    keep: list[object] = field(default_factory=list)
    rounds: int | None = None
    warmups: int = 0
    cold: Callable[[], None] | None = None


def match_workload(tree: Any, tokens: list[int], kind: str) -> Workload:
    """Repeated ``tree.match`` of ``tokens`` given as ``kind``; works for FlatIndex too."""
    data = as_input(tokens, kind)
    expected = len(tokens) // BLOCK_SIZE * BLOCK_SIZE
    found = tree.match(data).length
    if found != expected:
        raise AssertionError(f"match of {len(tokens)} tokens found {found}, not {expected}")
    return Workload(functools.partial(tree.match, data), keep=[tree, data])


def _make_room(tree: Any, needed: int) -> None:
    # Untimed: keep the timed insert from evicting (eviction is measured on its own).
    short = needed - tree.stats().free
    if short > 0:
        tree.evict(short)


def insert_fresh(factory: TreeFactory, impl: str, tokens: int = 1024) -> Workload:
    """Insert a sequence sharing nothing with the tree (all blocks new, one new leaf).

    Steady state: a pool of 8,192 blocks kept full of earlier sequences; room for the
    new blocks is evicted before the timer starts.
    """
    tree = make_tree(factory, impl, 8192, BLOCK_SIZE)
    rng = _seed("insert_fresh", impl, tokens)
    pending: list[object] = []

    def setup() -> None:
        _make_room(tree, tokens // BLOCK_SIZE)
        pending[:] = [as_input(random_tokens(rng, tokens), "uint32")]

    return Workload(lambda: tree.insert(pending[0]), setup, keep=[tree])


def insert_shared(factory: TreeFactory, impl: str, tokens: int = 1024) -> Workload:
    """Insert a cached 7/8 prefix plus a new 1/8 suffix (a new child under a shared node)."""
    tree = make_tree(factory, impl, 8192, BLOCK_SIZE)
    rng = _seed("insert_shared", impl, tokens)
    suffix = tokens // 8
    prefix = random_tokens(rng, tokens - suffix)
    for _ in range(2):  # two children: the prefix is an inner node from the start
        tree.insert(prefix + random_tokens(rng, suffix))
    pending: list[object] = []

    def setup() -> None:
        _make_room(tree, suffix // BLOCK_SIZE)
        pending[:] = [as_input(prefix + random_tokens(rng, suffix), "uint32")]

    return Workload(lambda: tree.insert(pending[0]), setup, keep=[tree])


def insert_split(factory: TreeFactory, impl: str, tokens: int = 1024) -> Workload:
    """Insert a sequence diverging in the middle of a cached edge (a node split).

    Setup caches a fresh ``tokens``-long edge; the timed insert shares its first half
    and diverges at the next block, so the edge splits and a sibling is added.
    """
    tree = make_tree(factory, impl, 8192, BLOCK_SIZE)
    rng = _seed("insert_split", impl, tokens)
    half = tokens // 2
    pending: list[object] = []

    def setup() -> None:
        _make_room(tree, tokens // BLOCK_SIZE + half // BLOCK_SIZE)
        edge = random_tokens(rng, tokens)
        tree.insert(edge)
        pending[:] = [as_input(edge[:half] + random_tokens(rng, half), "uint32")]

    return Workload(lambda: tree.insert(pending[0]), setup, keep=[tree])


def serving_cycle(
    factory: TreeFactory, impl: str, tokens: int = 1024, output: int = 256
) -> Workload:
    """One request as a serving engine runs it: match(pin=True), insert, release.

    A bank of 32 prompts of ``tokens`` tokens on 4 shared system prompts (512 tokens)
    is cached; each round takes the next prompt, matches and pins it, inserts prompt +
    a fresh ``output``-token reply, and releases the lease.
    """
    tree = make_tree(factory, impl, 8192, BLOCK_SIZE)
    rng = _seed("serving_cycle", impl, tokens, output)
    system = [random_tokens(rng, 512) for _ in range(4)]
    prompts = [system[i % 4] + random_tokens(rng, tokens - 512) for i in range(32)]
    for prompt in prompts:
        tree.insert(prompt)
    inputs = [as_input(prompt, "uint32") for prompt in prompts]
    turn = itertools.count()
    pending: list[object] = []

    def setup() -> None:
        _make_room(tree, (tokens + output) // BLOCK_SIZE)
        index = next(turn) % len(prompts)
        full = as_input(prompts[index] + random_tokens(rng, output), "uint32")
        pending[:] = [inputs[index], full]

    def run() -> None:
        lease = tree.match(pending[0], pin=True).lease
        tree.insert(pending[1])
        lease.release()

    return Workload(run, setup, keep=[tree])


def evict_sequences(cached_blocks: int, block_size: int) -> list[list[int]]:
    """Sequences for the eviction trees: groups of 15 leaves on a shared prefix.

    Each sequence is 8 blocks: a 4-block prefix shared by its group of 15 and a
    4-block tail of its own, so a group holds 64 blocks and the tree has one leaf per
    ~4.3 blocks -- the number of evictable leaves grows with the tree. Token ids are
    drawn from the whole uint32 range so that, at block size 1, groups almost never
    share a first token; a few spare groups cover the rare collision.
    """
    groups = cached_blocks // 60 + 2
    rng = _seed("evict", cached_blocks, block_size)
    chunk = 4 * block_size
    table: list[list[int]] = rng.integers(
        0, 2**32, size=(groups * 16, chunk), dtype=np.int64
    ).tolist()
    return [table[16 * (i // 15)] + table[16 * (i // 15) + i % 15 + 1] for i in range(groups * 15)]


def evict_workload(
    factory: TreeFactory,
    impl: str,
    cached_blocks: int,
    block_size: int = 1,
    batch: int = EVICT_BATCH,
) -> Workload:
    """``evict(batch)`` on a tree holding ``cached_blocks`` blocks; time per freed block.

    Block size 1 keeps a 10^6-block tree cheap to build. Before each timed call the
    tree is refilled (untimed) to ``cached_blocks`` by re-inserting, in order, the
    sequences the last calls evicted, so every call sees the same size and shape.
    """
    sequences = evict_sequences(cached_blocks, block_size)
    tree = make_tree(factory, impl, cached_blocks + 2 * batch, block_size)
    used = 0
    while tree.stats().cached < cached_blocks:
        tree.insert(sequences[used])
        used += 1
    del sequences[used:]
    target = tree.stats().cached
    cursor = itertools.count()

    def refill() -> None:
        while tree.stats().cached < target:
            tree.insert(sequences[next(cursor) % used])

    return Workload(lambda: tree.evict(batch), refill, units=batch, unit="block", keep=[tree])


def first_evict_sequences(
    cached_blocks: int,
    block_size: int,
    heads: int = FIRST_EVICT_HEADS,
    head_blocks: int = FIRST_EVICT_HEAD_BLOCKS,
    leaf_blocks: int = FIRST_EVICT_LEAF_BLOCKS,
) -> list[list[int]]:
    """The wide shared-prefix shape: ``heads`` shared prefixes of ``head_blocks`` blocks,
    each with ever more leaves of ``leaf_blocks`` blocks under it (round robin), enough
    to cache ``cached_blocks`` blocks.  The fan-out grows with the tree, as under a
    popular system prompt.  Token ids span the uint32 range, so leaves almost never
    share a first token; the few that would are simply not distinct leaves."""
    rng = _seed("first_evict", cached_blocks, block_size, heads, head_blocks, leaf_blocks)
    leaves = max(1, (cached_blocks - heads * head_blocks) // leaf_blocks + 1)
    prefix: list[list[int]] = rng.integers(
        0, 2**32, size=(heads, head_blocks * block_size), dtype=np.int64
    ).tolist()
    tails: list[list[int]] = rng.integers(
        0, 2**32, size=(leaves, leaf_blocks * block_size), dtype=np.int64
    ).tolist()
    return [prefix[i % heads] + tail for i, tail in enumerate(tails)]


#: What the inserts of a ``priority`` fill ask, round robin (R-POL-5).
FILL_RETENTION: tuple[dict[str, int], ...] = (
    {"priority": 90, "retain_for": 1000},
    {},
    {"priority": 10},
    {"priority": 60, "retain_for": 50},
)

#: Bytes written between a fill and its timed eviction: more than any CPU's caches hold.
CACHE_FLUSH_BYTES = 128 << 20
_FLUSH: list[np.ndarray[Any, np.dtype[np.uint8]]] = []


def flush_caches() -> None:
    """Write :data:`CACHE_FLUSH_BYTES` bytes, evicting the CPU caches (as a serving engine's
    own work between two evictions does).  O(CACHE_FLUSH_BYTES)."""
    if not _FLUSH:
        _FLUSH.append(np.zeros(CACHE_FLUSH_BYTES, dtype=np.uint8))
    _FLUSH[0] += 1


def first_evict_workload(
    factory: TreeFactory,
    impl: str,
    cached_blocks: int,
    block_size: int = 1,
    batch: int = EVICT_BATCH,
    rounds: int = 3,
    policy: str = "lru",
    warmups: int = 0,
) -> Workload:
    """The *first* ``evict(batch)`` after a fill of ``cached_blocks`` blocks, under eviction
    ``policy`` (R-POL-1); time per freed block.

    Each round fills a fresh tree (untimed: one insert per leaf of
    :func:`first_evict_sequences`, so the tree has the history of a long run), flushes the
    CPU caches, and times one ``evict`` -- the call that pays for that history if the
    eviction queue is cleaned lazily.  The flush puts every size on the same footing: in a
    server, other work runs between the fill and the eviction, so the tree is cold whatever
    its size, and what the growth from 10^3 to 10^6 blocks then measures is the work per
    block, not whether the tree fits in a cache.  ``rounds`` rounds after ``warmups``
    untimed ones, each a fill and an eviction of its own (timing the same tree twice
    would not be a first call).  Block size 1 keeps a 10^6-block fill affordable.

    Under ``priority`` the fill asks what a mixed workload asks (:data:`FILL_RETENTION`,
    round robin: some leaves held high for a while, some low, some at the default), so the
    eviction orders by priority and some priorities have fallen back by the eviction.
    """
    sequences = first_evict_sequences(cached_blocks, block_size)
    trees: list[Any] = []
    asks = FILL_RETENTION if policy == "priority" else ({},)

    def fill() -> None:
        trees.clear()  # the previous round's tree goes before the next one is built
        tree = make_tree(factory, impl, cached_blocks + 2 * batch, block_size, policy)
        for index, tokens in enumerate(sequences):
            if tree.stats().cached >= cached_blocks:
                break
            tree.insert(tokens, **asks[index % len(asks)])
        trees.append(tree)
        flush_caches()

    def run() -> object:
        freed = trees[0].evict(batch)
        if len(freed) != batch:
            raise AssertionError(f"{impl}: evict({batch}) freed {len(freed)} blocks")
        return freed

    return Workload(
        run,
        fill,
        units=batch,
        unit="block",
        keep=[trees],
        rounds=rounds,
        warmups=warmups,
        cold=flush_caches,
    )
