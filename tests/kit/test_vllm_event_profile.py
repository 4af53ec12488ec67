"""vLLM's own event stream through the events level's comparison (R-EVENT-3, R-EVENT-4):
the profile values that keep what vLLM passes, and diagnoses that name the field.

vLLM 0.33.0's own block pool (:class:`~kachedb_radix.spec.peers.vllm.VllmWorker`) caches a
prompt, frees it and caches another that evicts it; the reference tree does the same on
the same hashes (vLLM's preset).  vLLM sends one ``BlockRemoved`` per block, in eviction
order, and ``extra_keys`` of ``[None, ...]``; the reference one ``BlockRemoved`` and no
extra keys.  ``removal_order = "per_block"`` and ``event_fields = "none_as_absent"``
declare exactly that -- an order vLLM breaks is still found, and so is an extra key."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from kachedb_radix.reference import RadixTree
from kachedb_radix.reference.events import (
    BlockRemoved,
    BlockStored,
    KVEventBatch,
    decode_batch,
    encode_batch,
)
from kachedb_radix.reference.events.engines import engine_preset
from kachedb_radix.spec.conform.events import encode_payloads, normalise
from kachedb_radix.spec.conform.lockstep import first_difference
from kachedb_radix.spec.conform.profile import STRICT, parse
from kachedb_radix.spec.conform.rulemap import Observation, attribute
from tests.support.vllm import require_vllm

A = [1, 2, 3, 4]
B = [5, 6, 7, 8, 9, 10, 11, 12]

#: What vLLM's stream needs declared, and nothing more.
VLLM_EVENTS = parse({"tolerate": {"removal_order": "per_block", "event_fields": "none_as_absent"}})


def _streams() -> tuple[dict[str, Any], dict[str, Any]]:
    """(the reference's, vLLM's) events answer for the eviction step: B evicting A."""
    require_vllm()
    from kachedb_radix.spec.peers.vllm import VllmWorker

    worker = VllmWorker(5, 2)  # 4 blocks and vLLM's null block
    worker.admit("a", A)
    worker.take_batch()
    worker.finish("a")
    worker.admit("b", B)
    theirs = msgspec.msgpack.Encoder().encode(worker.take_batch())
    tree = RadixTree(4, 2, events=engine_preset("vllm").hasher())
    tree.insert(A)  # unpinned: evictable once B needs the blocks
    tree.take_events()
    tree.insert(B)
    (ours,) = tree.take_events()
    return {"ok": encode_payloads([encode_batch(ours)])}, {"ok": encode_payloads([theirs])}


def _compare(
    ours: dict[str, Any], theirs: dict[str, Any], modes: Any
) -> tuple[str | None, str, str]:
    left = normalise(ours, modes, with_ts=False, lenient=False)
    right = normalise(theirs, modes, with_ts=False, lenient=False)
    path = first_difference(left, right, "")
    if path is None:
        return None, "", ""
    found = attribute(Observation({"op": "events"}, left, right, path))
    return path, found.rule, found.cause


def test_vllm_s_eviction_differs_only_in_what_its_profile_declares() -> None:
    ours, theirs = _streams()
    events = decode_batch(_payload(theirs)).events
    removed = [e for e in events if isinstance(e, BlockRemoved)]
    assert [len(e.block_hashes) for e in removed] == [1, 1]  # one BlockRemoved per block
    path, rule, _ = _compare(ours, theirs, STRICT.modes)
    assert path is not None and rule in ("R-EVENT-5", "R-EVENT-4")  # the split shows first
    assert _compare(ours, theirs, VLLM_EVENTS.modes)[0] is None
    assert VLLM_EVENTS.deviations() == {
        "R-EVENT-3": "declared: extra keys of all None where none are meant (every other "
        "field compared)",
        "R-EVENT-4": "declared: one BlockRemoved per block, in eviction order (the order "
        "still compared)",
    }


def test_extra_keys_of_all_none_are_a_field_difference_named_with_its_values() -> None:
    """R-EVENT-3, not R-EVENT-2: no namespace is involved and the hashes are equal."""
    ours, theirs = _streams()
    per_block = parse({"tolerate": {"removal_order": "per_block"}})
    path, rule, cause = _compare(ours, theirs, per_block.modes)
    assert path is not None and path.endswith(".stored.extra_keys")
    assert rule == "R-EVENT-3"
    assert "extra_keys: None against [None, None, None, None]" in cause
    assert 'event_fields = "none_as_absent"' in cause


def test_per_block_still_compares_the_order_and_none_as_absent_still_compares_keys() -> None:
    ours, theirs = _streams()
    batch = decode_batch(_payload(theirs))
    first, second, stored = batch.events
    assert isinstance(stored, BlockStored)
    swapped = _answer(KVEventBatch(batch.ts, [second, first, stored]))
    path, rule, cause = _compare(ours, swapped, VLLM_EVENTS.modes)
    assert path is not None and rule == "R-EVENT-4"
    assert "in another order than they were evicted (hashes: [" in cause
    stored.extra_keys = [None, ("cache_salt", "t"), None, None]  # a real extra key
    keyed = _answer(KVEventBatch(batch.ts, [first, second, stored]))
    path, rule, cause = _compare(ours, keyed, VLLM_EVENTS.modes)
    assert path is not None and rule == "R-EVENT-2"
    assert "extra_keys: None against [None, ['cache_salt', 't']" in cause
    merged = parse({"tolerate": {"removal_order": "any", "event_fields": "none_as_absent"}})
    assert _compare(ours, swapped, merged.modes)[0] is None  # "any" drops the order check


def _payload(answer: dict[str, Any]) -> bytes:
    import base64

    return base64.b64decode(answer["ok"]["batches"][0])


def _answer(batch: KVEventBatch) -> dict[str, Any]:
    return {"ok": encode_payloads([encode_batch(batch)])}


@pytest.mark.parametrize("value", ["per_block", "none_as_absent"])
def test_the_new_values_are_named_in_the_profile_errors(value: str) -> None:
    from kachedb_radix.spec.conform.profile import ProfileError

    key = "removal_order" if value == "per_block" else "event_fields"
    with pytest.raises(ProfileError, match=value):
        parse({"tolerate": {key: "nonsense"}})
