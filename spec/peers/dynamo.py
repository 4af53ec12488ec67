"""NVIDIA Dynamo's own router index, ``RadixTree`` from ``ai-dynamo-runtime`` 1.6.1, as an
index candidate of the kit's index level (``kachedb-radix conform --index dynamo``).

Install the wheel without its dependencies (its compiled core runs on a CPU)::

    pip install --no-deps ai-dynamo-runtime==1.6.1

:class:`DynamoIndex` speaks :class:`~kachedb_radix.spec.conform.index.IndexCandidate`
by turning each batch into the JSON ``KvCacheEvent`` Dynamo's tree applies
(``{"event_id", "data": {"stored": {"parent_hash", "blocks": [{"block_hash",
"tokens_hash"}]}} | {"removed": {"block_hashes"}} | "cleared", "dp_rank"}``), each
block's ``tokens_hash`` computed by Dynamo's own ``compute_block_hash_for_seq`` over the
store's tokens in the prompt's namespace; a query's depths are ``find_matches`` over
the query's local hashes, by ``(worker_id, dp_rank)``.  A payload that does not decode
is given to the tree as it is (it is not JSON either).  Nothing of Dynamo's code is in
this project.

The profile it ships (``dynamo.toml``) declares the choices Dynamo's tree documents by
what it does: one entry per block and worker, a store under an unknown parent
dropped ("Failed to find parent block; skipping store operation"), event ids not
checked by the tree (its subscriber's), an undecodable event refused, and a skipped
event raised to the caller after changing nothing.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from kachedb_radix.reference.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
)

#: The Dynamo release the adapter is written against.
PINNED = "1.6.1"


def load() -> ModuleType:
    """``dynamo._core`` from the pinned wheel.

    Raises:
        ImportError: the wheel is absent or another release (the message says how to
            install the pinned one).
    """
    install = f"pip install --no-deps ai-dynamo-runtime=={PINNED}"
    try:
        version = importlib.metadata.version("ai-dynamo-runtime")
    except importlib.metadata.PackageNotFoundError:
        raise ImportError(f"ai-dynamo-runtime is not installed ({install})") from None
    if version != PINNED:
        raise ImportError(f"ai-dynamo-runtime {version} is installed, not {PINNED} ({install})")
    return importlib.import_module("dynamo._core")


class DynamoIndex:
    """Dynamo's ``RadixTree`` behind the index candidate protocol (module docstring).

    Args:
        block_size: the workers' tokens per block (for the local hashes).

    Cost: each call is the tree's, plus hashing a store's or a query's tokens.
    """

    implementation = f"dynamo {PINNED} RadixTree"

    def __init__(self, block_size: int = 2) -> None:
        self._core = load()
        self._tree: Any = self._core.RadixTree()
        self._block_size = block_size

    def apply(
        self, worker: tuple[int, int], seq: int, batch: KVEventBatch | bytes, namespace: str | None
    ) -> str:
        """Each event of ``batch`` as one ``apply_event`` (event id ``seq``). O(blocks).

        Raises:
            RuntimeError, ValueError: as Dynamo's tree raises them.
        """
        worker_id, rank = worker
        if isinstance(batch, bytes):
            self._tree.apply_event(worker_id, batch)
            return "applied"
        for event in batch.events:
            data = self._data(event, namespace)
            payload = {"event_id": seq, "data": data, "dp_rank": rank}
            self._tree.apply_event(worker_id, json.dumps(payload).encode())
        return "applied"

    def _data(self, event: object, namespace: str | None) -> object:
        if isinstance(event, BlockStored):
            local = self._local(list(event.token_ids), namespace)
            blocks = [
                {"block_hash": int(block_hash), "tokens_hash": tokens_hash}
                for block_hash, tokens_hash in zip(event.block_hashes, local, strict=True)
            ]
            parent = event.parent_block_hash
            return {
                "stored": {"parent_hash": None if parent is None else int(parent), "blocks": blocks}
            }
        if isinstance(event, BlockRemoved):
            return {"removed": {"block_hashes": [int(h) for h in event.block_hashes]}}
        if isinstance(event, AllBlocksCleared):
            return "cleared"
        raise ValueError(f"no Dynamo event for {type(event).__name__}")

    def _local(self, tokens: Sequence[int], namespace: str | None) -> list[int]:
        found: list[int] = self._core.compute_block_hash_for_seq(
            list(tokens), self._block_size, cache_namespace=namespace
        )
        return found

    def lost(self, worker: tuple[int, int], resume_at: int) -> None:
        """Dynamo's tree has no notion of lost batches (its subscriber resyncs): the
        worker's blocks are cleared, as a resync starts. O(its blocks)."""
        worker_id, rank = worker
        payload = {"event_id": resume_at, "data": "cleared", "dp_rank": rank}
        self._tree.apply_event(worker_id, json.dumps(payload).encode())

    def remove_worker(self, worker: int) -> None:
        """``remove_worker`` of the worker id (all its ranks). O(its blocks)."""
        self._tree.remove_worker(worker)

    def depths(
        self, tokens: Sequence[int], namespace: str | None, hashes: Sequence[int]
    ) -> dict[tuple[int, int], int]:
        """``find_matches`` over the query's local hashes. O(blocks x workers)."""
        scores: dict[tuple[int, int], int] = self._tree.find_matches(
            self._local(tokens, namespace)
        ).scores
        return {worker: depth for worker, depth in scores.items() if depth}
