"""The gate's tier cases (R-TIER-5, R-TIER-6): planning a restore, moving its bytes, and a
tiered serving loop, the last two as ratios to an anchor timed in the same pass.

For the twins ``reference`` and ``accel`` (the tiered tree a target of that name ships,
:class:`kachedb_radix.reference.tiers.TieredTree` or ``kachedb_radix.accel.TieredTree``):

* ``tiers/restore-plan/<blocks>`` -- per block brought up, ``lookup`` of a prompt whose
  cached prefix is spread over the three tiers, then ``restore`` of it: the tree's whole
  share of a restore (walking each tier, the device insert that picks the new ids, the
  sources' pins, the list of moves), no bytes. The prompt is a path of ``blocks`` blocks
  of 16 tokens: its first quarter on the device, the next quarter in host memory, the
  rest on disk only, so a restore brings up three quarters of it, one third of those from
  the host. The device has room for the whole path: the restore evicts nothing (the
  first eviction has cases of its own). Each round builds that state afresh, untimed
  (:func:`spread_path`): insert the path, evict it all to the host, evict half of the host
  to disk, insert the first quarter again.

* ``tiers/restore-host/<blocks>`` -- per block, :class:`~kachedb_radix.reference.tiers.
  KVCache`'s restore of a path demoted to the host tier (the twin's trees over the NumPy
  pool: the CPU twin), against its anchor ``tiers/copy/<blocks>``: ``numpy.copyto`` of the
  same bytes from the same host rows into the same device blocks. Its figure against the
  baseline is the restore's cost in memory copies of its bytes: a second copy, a slower
  copy or more bookkeeping shows; the state of a shared machine, which moves both alike,
  does not.
* ``tiers/demote-host/<blocks>`` -- per block, the device's eviction of that path into an
  empty host tier (the demotion's copies included), against the same anchor.
* ``tiers/replay/tiered`` -- a serving loop over a stream of conversation turns
  (:func:`conversation_prompts`: restore the cached prefix pinned, insert the sequence,
  release) on a tiered tree with a host tier under a device of a tenth of the stream's
  blocks, against its anchor ``tiers/replay/plain``: the same loop on the plain tree of
  that device (match pinned, insert, release). Its figure is what the tier layer costs a
  replay.

The quick set times 128 blocks (a 2,048-token prompt); the full set adds 2,048 blocks (a
32K-token prompt, the seed's example). The tree allocates as it walks: the ``memory``
calibration.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from kachedb_radix.reference.blockpool import PoolSpec

from ..twins import twin_class
from .shapes import BLOCK_SIZE, VOCAB, Workload, _seed

#: Path lengths in blocks: the quick set's, and the full set's.
QUICK_PLAN_BLOCKS = (128,)
FULL_PLAN_BLOCKS = (128, 2048)
#: The byte cases' geometry: Llama-3-8B's block (16 tokens, fp16, 8 KV heads of 128) with
#: a quarter of its layers, 512 KiB a block: 128 blocks are 64 MiB, past any CPU cache.
BYTES_SPEC = dataclasses.replace(
    PoolSpec.from_preset("llama-3-8b", num_blocks=128, block_size=BLOCK_SIZE), num_layers=8
)
#: The replay cases' stream: prompts, the device's blocks, the host's.
REPLAY_PROMPTS, REPLAY_DEVICE, REPLAY_HOST = 1500, 400, 4000


def tiered_tree_class(twin: str) -> Callable[..., Any]:
    """The tiered tree a twin ships (:mod:`kachedb_radix.spec.twins`: an unknown name is
    refused, never taken for the reference).

    Raises:
        TwinError: ``twin`` names no twin.
        TwinUnavailable: ``accel`` where its C extension did not build.
    """
    found: Callable[..., Any] = twin_class(twin, "TieredTree")
    return found


def plan_tokens(blocks: int) -> list[int]:
    """The prompt of ``blocks`` full blocks (a fixed seed per length)."""
    values: list[int] = (
        _seed("restore-plan", blocks).integers(0, VOCAB, blocks * BLOCK_SIZE).tolist()
    )
    return values


def spread_path(make: Callable[..., Any], tokens: list[int]) -> Any:
    """A fresh tiered tree holding ``tokens`` as the module docstring says: the first
    quarter on the device, the second in host memory, the rest on disk only."""
    blocks = len(tokens) // BLOCK_SIZE
    tree = make(blocks, blocks, blocks, BLOCK_SIZE)
    tree.adopt("disk", tokens)
    tree.adopt("host", tokens[: blocks // 2 * BLOCK_SIZE])
    tree.insert(tokens[: blocks // 4 * BLOCK_SIZE])
    return tree


def restore_plan_workload(twin: str, blocks: int) -> Workload:
    """``lookup`` then ``restore`` of a path spread over the tiers, per block restored."""
    make = tiered_tree_class(twin)
    tokens = plan_tokens(blocks)
    expected = {"device": blocks // 4, "host": blocks // 4, "disk": blocks - blocks // 2}
    check = spread_path(make, tokens)
    if getattr(check, "implementation", None) != twin:
        raise RuntimeError(f"asked for the {twin} tiered tree, got {check!r}")
    tiers = check.lookup(tokens).tiers
    counts = {tier: tiers.count(tier) for tier in expected}
    if counts != expected:  # a broken case would time something else
        raise AssertionError(f"the path is spread {counts}, not {expected}")
    state: list[Any] = [check]

    def setup() -> None:
        state[0] = spread_path(make, tokens)

    def run() -> object:
        tree = state[0]
        plan = tree.lookup(tokens).plan
        done = tree.restore(tokens)
        return plan, done

    return Workload(run, setup, units=blocks - blocks // 4, unit="block", keep=[state])


def cpu_cache_class(twin: str) -> Any:
    """The KV cache over the NumPy pool whose tiers are ``twin``'s trees (the CPU twin)."""
    from kachedb_radix.reference.tiers import KVCache

    tiers_type = tiered_tree_class(twin)
    return type(f"{twin.capitalize()}TreeKVCache", (KVCache,), {"tiers_type": tiers_type})


def _byte_cache(twin: str, blocks: int) -> tuple[Any, list[int]]:
    """A CPU-twin cache whose device and host hold ``blocks`` blocks of
    :data:`BYTES_SPEC`, the path of ``blocks`` blocks stored (each block's bytes its own),
    checked to come back whole from the host once."""
    spec = BYTES_SPEC.with_blocks(blocks)
    cache = cpu_cache_class(twin)(spec, host_blocks=blocks)
    if cache.tiers.implementation != twin:
        raise RuntimeError(f"asked for the {twin} tiered tree, got {cache.tiers!r}")
    tokens = plan_tokens(blocks)
    kv = np.empty(spec.buffer_shape(blocks), dtype=spec.storage_dtype)
    kv.reshape(blocks, -1).view(np.uint8)[:] = np.arange(blocks, dtype=np.uint8)[:, None]
    cache.store(tokens, kv)
    cache.evict(blocks)
    cache.restore(tokens).handle.wait()
    if cache.read(tokens).tobytes() != kv.tobytes():  # a broken case would time a wrong copy
        raise AssertionError("the restored bytes are not the stored ones")
    return cache, tokens


def restore_host_workload(twin: str, blocks: int) -> Workload:
    """``KVCache.restore`` of a path the device evicted to the host, per block."""
    cache, tokens = _byte_cache(twin, blocks)

    def setup() -> None:
        cache.evict(blocks)  # the host keeps its copies: no bytes move here

    def run() -> object:
        brought = cache.restore(tokens)
        brought.handle.wait()
        return brought

    return Workload(run, setup, units=blocks, unit="block", keep=[cache])


def demote_host_workload(twin: str, blocks: int) -> Workload:
    """The device's eviction of the path into an empty host tier, per block: the
    demotion's bookkeeping and its device -> host copies."""
    cache, tokens = _byte_cache(twin, blocks)

    def setup() -> None:
        if not cache.lookup(tokens).on_device:  # the last round demoted it: bring it back
            cache.restore(tokens).handle.wait()
        cache.evict(blocks, "host")  # no disk tier: the host copies are dropped

    def run() -> object:
        return cache.evict(blocks)

    return Workload(run, setup, units=blocks, unit="block", keep=[cache])


def copy_workload(blocks: int) -> Workload:
    """The anchor: ``numpy.copyto`` of ``blocks`` blocks of :data:`BYTES_SPEC` from host
    rows into device blocks (the bytes a restore moves, in one copy), per block."""
    spec = BYTES_SPEC.with_blocks(blocks)
    device = np.zeros(spec.buffer_shape(blocks), dtype=spec.storage_dtype)
    host = np.ones_like(device)
    return Workload(functools.partial(np.copyto, device, host), units=blocks, unit="block",
                    keep=[device, host])  # fmt: skip


def conversation_prompts(count: int) -> list[list[int]]:
    """``count`` prompts of a chat service: conversations opened on one of 8 system
    prompts (4 blocks each), each turn the conversation so far plus 1-6 blocks of new
    tokens; 30% of the prompts open a conversation, the rest continue one of the last 40.
    Deterministic."""
    rng = _seed("tiers-replay", count)
    systems = [rng.integers(0, VOCAB, 4 * BLOCK_SIZE).tolist() for _ in range(8)]
    open_ones: list[list[int]] = []
    prompts: list[list[int]] = []
    for _ in range(count):
        if not open_ones or rng.random() < 0.3:
            conversation = list(systems[int(rng.integers(8))])
            open_ones = [*open_ones[-39:], conversation]
        else:
            conversation = open_ones[int(rng.integers(len(open_ones)))]
        conversation += rng.integers(0, VOCAB, int(rng.integers(1, 7)) * BLOCK_SIZE).tolist()
        prompts.append(list(conversation))
    return prompts


def replay_workload(twin: str, tiered: bool) -> Workload:
    """The serving loop over :func:`conversation_prompts` (module docstring), one replay a
    round on fresh trees."""
    prompts = conversation_prompts(REPLAY_PROMPTS)
    if tiered:
        make = tiered_tree_class(twin)
    else:
        from kachedb_radix.reference import RadixTree

        if twin == "accel":
            from kachedb_radix.accel import RadixTree as AccelRadixTree

            make = AccelRadixTree
        else:
            make = RadixTree
    state: list[Any] = [None]

    def setup() -> None:
        if tiered:
            state[0] = make(REPLAY_DEVICE, REPLAY_HOST, 0, BLOCK_SIZE)
        else:
            state[0] = make(REPLAY_DEVICE, BLOCK_SIZE)

    def run() -> object:
        tree = state[0]
        longest = REPLAY_DEVICE * BLOCK_SIZE // 2
        hits = 0
        for prompt in prompts:
            prompt = prompt[:longest]
            found = tree.restore(prompt, pin=True) if tiered else tree.match(prompt, pin=True)
            hits += found.length
            tree.insert(prompt)
            tree.release(found.lease)
        return hits

    setup()
    if getattr(state[0], "implementation", twin) != twin:
        raise RuntimeError(f"asked for the {twin} tree, got {state[0]!r}")
    return Workload(run, setup, units=1, unit="replay", rounds=3, keep=[state])


def tier_cases(twin: str, quick: bool) -> dict[str, tuple[Callable[[], Workload], str | None]]:
    """The tier cases of ``twin``: name -> (workload maker, the anchor case or None)."""
    cases: dict[str, tuple[Callable[[], Workload], str | None]] = {
        f"tiers/restore-plan/{blocks}": (functools.partial(restore_plan_workload, twin, blocks),
                                         None)
        for blocks in (QUICK_PLAN_BLOCKS if quick else FULL_PLAN_BLOCKS)
    }  # fmt: skip
    blocks = BYTES_SPEC.num_blocks
    anchor = f"tiers/copy/{blocks}"
    cases[anchor] = (functools.partial(copy_workload, blocks), None)
    cases[f"tiers/restore-host/{blocks}"] = (
        functools.partial(restore_host_workload, twin, blocks),
        anchor,
    )
    cases[f"tiers/demote-host/{blocks}"] = (
        functools.partial(demote_host_workload, twin, blocks),
        anchor,
    )
    cases["tiers/replay/plain"] = (functools.partial(replay_workload, twin, False), None)
    cases["tiers/replay/tiered"] = (
        functools.partial(replay_workload, twin, True),
        "tiers/replay/plain",
    )
    return cases
