"""The demo: a small multi-turn serving scenario replayed through the cache.

Two users share a system prompt; each has two turns; one conversation branches (the
user edits their second question); the pool is small, so a newcomer's long prompt
forces eviction while one request is still running with its blocks pinned. Each step
is what a serving engine does per request:

1. ``match(prompt, pin=True)``: find and pin the cached prefix (its KV is reused);
2. prefill the rest, generate a reply;
3. ``insert(prompt + reply)``: cache the new full blocks, evicting if short;
4. release the lease when the request finishes.

Tokens are small integers standing for words, 4 per block, so the picture stays
readable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

BLOCK_SIZE = 4
POOL_BLOCKS = 14


def _run(start: int, blocks: int) -> list[int]:
    """``blocks`` whole blocks of consecutive token ids from ``start``."""
    return list(range(start, start + blocks * BLOCK_SIZE))


SYSTEM = _run(100, 2)
ALICE_1, ALICE_REPLY_1 = _run(200, 1), _run(210, 1)
ALICE_2, ALICE_REPLY_2 = _run(220, 1), _run(230, 1)
ALICE_2_EDITED, ALICE_REPLY_2B = _run(240, 1), _run(250, 1)
BOB_1, BOB_REPLY_1 = _run(300, 1), _run(310, 1)
BOB_2, BOB_REPLY_2 = _run(320, 1), _run(330, 1)
CAROL_1, CAROL_REPLY_1 = _run(400, 4), _run(420, 1)


@dataclass(frozen=True)
class Request:
    """One request: who, the prompt, the reply, and whether it is still running at the end."""

    name: str
    prompt: list[int]
    reply: list[int]
    keeps_running: bool = False


SCENARIO = [
    Request("alice turn 1", SYSTEM + ALICE_1, ALICE_REPLY_1),
    Request("bob turn 1", SYSTEM + BOB_1, BOB_REPLY_1),
    Request("alice turn 2", SYSTEM + ALICE_1 + ALICE_REPLY_1 + ALICE_2, ALICE_REPLY_2),
    Request(
        "alice turn 2, edited (branch)",
        SYSTEM + ALICE_1 + ALICE_REPLY_1 + ALICE_2_EDITED,
        ALICE_REPLY_2B,
    ),
    Request(
        "bob turn 2 (long-running, stays pinned)",
        SYSTEM + BOB_1 + BOB_REPLY_1 + BOB_2,
        BOB_REPLY_2,
        keeps_running=True,
    ),
    Request("carol turn 1 (long prompt, pool short)", SYSTEM + CAROL_1, CAROL_REPLY_1),
]

_HEADER = (
    f"{'step':<42} {'asked':>5} {'matched':>7} {'reused':>6} {'new':>4} "
    f"{'allocated':<14} {'evicted':<14}"
)


def _ids(ids: Any) -> str:
    return ",".join(str(block_id) for block_id in ids) or "-"


def run_demo(tree_class: Any) -> str:
    """Replay :data:`SCENARIO` on a fresh tree of ``tree_class``; return the report text.

    Cost: a few dozen tree calls; well under a second for either implementation.
    """
    tree = tree_class(POOL_BLOCKS, BLOCK_SIZE)
    lines = [
        f"kachedb-radix demo: {tree.implementation} tree, pool of {POOL_BLOCKS} blocks "
        f"x {BLOCK_SIZE} tokens",
        "",
        _HEADER,
        "-" * len(_HEADER),
    ]
    running = []
    for request in SCENARIO:
        hit = tree.match(request.prompt, pin=True)
        done = tree.insert(request.prompt + request.reply, pin=request.keeps_running)
        lines.append(
            f"{request.name:<42} {len(request.prompt):>5} {hit.length:>7} "
            f"{len(hit.blocks):>6} {len(done.allocated):>4} "
            f"{_ids(done.allocated):<14} {_ids(done.evicted):<14}"
        )
        hit.lease.release()
        if request.keeps_running:
            running.append((request.name, done.lease))
    stats = tree.stats()
    lines += [
        "",
        f"still running: {', '.join(name for name, _ in running)}; "
        f"{stats.pinned} blocks pinned, {stats.evictable} evictable, {stats.free} free",
        "",
        tree.render(),
    ]
    for _, lease in running:
        lease.release()
    tree.check_invariants()
    return "\n".join(lines)
