"""The gate's memory shapes: bytes a tree keeps per cached block, beyond the tokens.

Not a timing: a tree that reports its own allocations (``memory_bytes()``, a dict with
``total``, ``tokens`` and ``scratch``) is built in each shape below, and the figure is
``(total - tokens - scratch) / cached blocks`` -- what the tree spends on structure, ids,
pins, stamps, its published versions and slack, beyond the ``4 * B`` bytes of the tokens
themselves.  Deterministic (fixed seeds), so any change is a real one.

Shapes (block size 16, uint32 tokens):

* ``one_edge`` -- one 8,192-block edge;
* ``chat_turns`` -- 256 conversations of 8 turns of 4 blocks, each turn extending its leaf;
* ``random_prompts`` -- 2,000 prompts: one of 16 shared 8-block system prompts plus 1-16
  blocks of their own;
* ``one_block_nodes`` -- the worst case: 64 levels of one-block nodes, 8 siblings each
  (every block its own node);
* ``grouped`` -- the eviction-tree shape at 10^5 (quick) or 10^6 blocks: groups of 15
  leaves of 4 blocks under a shared 4-block prefix.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .shapes import TreeFactory, make_tree

B = 16


def _tokens(rng: np.random.Generator, blocks: int) -> np.ndarray[Any, np.dtype[np.uint32]]:
    return rng.integers(0, 50_000, size=blocks * B, dtype=np.uint32)


def one_edge(factory: TreeFactory, impl: str) -> Any:
    tree = make_tree(factory, impl, 8192, B)
    tree.insert(_tokens(np.random.default_rng(1), 8192))
    return tree


def chat_turns(factory: TreeFactory, impl: str) -> Any:
    rng = np.random.default_rng(5)
    tree = make_tree(factory, impl, 256 * 32, B)
    for conversation in range(256):
        history = np.zeros(0, dtype=np.uint32)
        for _turn in range(8):
            history = np.concatenate([history, _tokens(rng, 4)])
            tree.insert(history, f"user{conversation % 4}")
    return tree


def random_prompts(factory: TreeFactory, impl: str) -> Any:
    rng = np.random.default_rng(5)
    systems = [_tokens(rng, 8) for _ in range(16)]
    tree = make_tree(factory, impl, 2000 * 16 + 16 * 8, B)
    for _ in range(2000):
        body = _tokens(rng, int(rng.integers(1, 17)))
        tree.insert(np.concatenate([systems[int(rng.integers(0, 16))], body]))
    return tree


def one_block_nodes(factory: TreeFactory, impl: str, levels: int = 64, siblings: int = 8) -> Any:
    rng = np.random.default_rng(1)
    prompt = _tokens(rng, levels)
    tree = make_tree(factory, impl, levels * siblings + 8, B)
    tree.insert(prompt)
    rng = np.random.default_rng(2)
    for level in range(levels):
        for _ in range(siblings - 1):
            other = rng.integers(50_000, 100_000, size=B, dtype=np.uint32)
            tree.insert(np.concatenate([prompt[: level * B], other]))
    return tree


def grouped(factory: TreeFactory, impl: str, cached_blocks: int) -> Any:
    """Groups of 15 leaves of 4 blocks on a shared 4-block prefix, ``cached_blocks`` in
    all; generated group by group so no token list outlives its insert."""
    rng = np.random.default_rng(cached_blocks)
    tree = make_tree(factory, impl, cached_blocks + 64, B)
    while tree.stats().cached < cached_blocks:
        table = rng.integers(0, 128_256, size=(16, 4 * B), dtype=np.int64).tolist()
        for leaf in range(1, 16):
            tree.insert(table[0] + table[leaf])
            if tree.stats().cached >= cached_blocks:
                break
    return tree


def memory_shapes(quick: bool) -> dict[str, Callable[[TreeFactory, str], Any]]:
    """The shapes by name (``grouped`` at 10^5 blocks when ``quick``, else 10^6)."""
    size = 100_000 if quick else 1_000_000
    return {
        "one_edge": one_edge,
        "chat_turns": chat_turns,
        "random_prompts": random_prompts,
        "one_block_nodes": one_block_nodes,
        f"grouped/{size}": lambda factory, impl: grouped(factory, impl, size),
    }


def reports_memory(tree: Any) -> bool:
    """Whether the tree reports its own allocations."""
    return callable(getattr(tree, "memory_bytes", None))


def bytes_per_block(tree: Any) -> float:
    """Bytes the tree keeps per cached block beyond the token bytes (see the module
    docstring).  O(nodes)."""
    parts = tree.memory_bytes()
    own = int(parts["total"]) - int(parts["tokens"]) - int(parts.get("scratch", 0))
    return own / max(1, int(tree.stats().cached))
