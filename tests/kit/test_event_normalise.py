"""How the events level compares two streams under a profile's modes (R-EVENT-1..6):
each mode's reading of a batch, on crafted payloads."""

from __future__ import annotations

from typing import Any

from kachedb_radix.reference.events import (
    AllBlocksCleared,
    BlockHasher,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
    encode_batch,
)
from kachedb_radix.spec.conform.events import encode_payloads, hasher_of, normalise

STRICT_MODES = {
    "reset_events": "exact",
    "store_events": "exact",
    "removal_order": "exact",
    "event_fields": "exact",
}


def _outcome(*batches: KVEventBatch) -> dict[str, Any]:
    return {"ok": encode_payloads([encode_batch(batch) for batch in batches])}


def _stored(hashes: list[Any], parent: Any = None, tokens: list[int] | None = None) -> Any:
    return BlockStored(hashes, parent, tokens or [0] * len(hashes), 1, None, "GPU", None)


def test_a_fresh_cache_s_announcement_is_dropped_when_declared() -> None:
    """R-EVENT-1: ``reset_events = "cleared"`` drops a leading AllBlocksCleared, and its
    batch when nothing else is in it."""
    modes = {**STRICT_MODES, "reset_events": "cleared"}
    announced = _outcome(KVEventBatch(0.0, [AllBlocksCleared()]), KVEventBatch(1.0, [_stored([7])]))
    shown = normalise(announced, modes, with_ts=False, lenient=False, after_reset=True)
    assert shown == {"ok": {"batches": [{"events": [{"stored": {
        "hashes": [7], "parent": None, "medium": "GPU", "tokens": [0], "block_size": 1,
        "extra_keys": None, "lora_id": None, "lora_name": None}}]}]}}  # fmt: skip
    strict = normalise(announced, STRICT_MODES, with_ts=True, lenient=False, after_reset=True)
    assert strict["ok"]["batches"][0] == {"events": [{"cleared": {}}], "ts": 0.0}


def test_stores_per_block_and_removals_as_sets() -> None:
    """R-EVENT-3, R-EVENT-4 under ``store_events = "any"`` and ``removal_order = "any"``;
    ``event_fields = "hashes"`` leaves extra keys and LoRA fields out."""
    modes = {**STRICT_MODES, "store_events": "any", "removal_order": "any",
             "event_fields": "hashes"}  # fmt: skip
    batch = KVEventBatch(
        1.0,
        [
            _stored([1, 2], tokens=[5, 6]),
            BlockRemoved([9, 3], "GPU"),
            BlockRemoved([4], "GPU"),
            BlockRemoved([8], "CPU"),
        ],
    )
    [shown] = normalise(_outcome(batch), modes, with_ts=False, lenient=False)["ok"]["batches"]
    assert shown["events"] == [
        {"stored": {"hashes": [1], "parent": None, "medium": "GPU", "tokens": [5]}},
        {"stored": {"hashes": [2], "parent": 1, "medium": "GPU", "tokens": [6]}},
        {"removed": {"hashes": [3, 4, 9], "medium": "GPU"}},
        {"removed": {"hashes": [8], "medium": "CPU"}},
    ]  # fmt: skip


def test_read_as_a_router_reads_them_and_digests_as_hex() -> None:
    """R-EVENT-6 waived (``lenient``): hashes, parents and media only; digests as hex."""
    modes = {**STRICT_MODES, "store_events": "any"}
    digest = bytes(range(32))
    batch = KVEventBatch(2.0, [_stored([digest], parent=None)])
    [shown] = normalise(_outcome(batch), modes, with_ts=False, lenient=True)["ok"]["batches"]
    assert shown["events"] == [
        {"stored": {"hashes": [digest.hex()], "parent": None, "medium": "GPU"}}
    ]
    assert normalise({"ok": {"batches": 3}}, modes, with_ts=False, lenient=True) == {
        "ok": {"malformed_answer": {"batches": 3}}
    }
    assert normalise({"error": "x"}, modes, with_ts=False, lenient=True) == {"error": "x"}


def test_a_reset_that_names_no_scheme_hashes_as_vllm_does() -> None:
    assert hasher_of(None) == BlockHasher()
    assert hasher_of({"scheme": "xxh3_64"}).scheme == "xxh3_64"
