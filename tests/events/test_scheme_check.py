"""A router that says when it cannot work (issue 33): a worker whose hashes are not the
router's -- another scheme, bytes not ints, another block size, a salt left out or
``""`` taken as none -- is named in the table, /health and the log, with what to do;
vLLM's own hashes (its pinned wheel) are recognised as vLLM's default."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest
from rich.console import Console

from kachedb_radix.reference import RadixTree
from kachedb_radix.reference.events import (
    ENGINES,
    BlockHasher,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
    encode_batch,
)
from kachedb_radix.reference.router import RouterIndex
from kachedb_radix.spec.cli import route as route_cli
from kachedb_radix.spec.router.publisher import EventPublisher
from kachedb_radix.spec.router.scheme_check import CHECK_BATCHES, ENGINE_OF, SchemeCheck
from kachedb_radix.spec.router.service import Router, serve_in_thread, wait_caught_up
from tests.support.vllm import require_vllm

TOKENS = list(range(1, 17))


def _stored(hasher: BlockHasher, tokens: list[int], size: int = 4, salt: str | None = None,
            *, extra: Any = None, hashes: list[Any] | None = None) -> bytes:  # fmt: skip
    chain = [hasher.external(h) for h in hasher.chain(tokens, size, salt)]
    keys = extra if extra is not None else ([(salt,)] + [None] * (len(chain) - 1) if salt else None)
    event = BlockStored(hashes or chain, None, tokens, size, None, "GPU", None, extra_keys=keys)
    return encode_batch(KVEventBatch(0.0, [event]))


def _verdict(router_hasher: BlockHasher, *payloads: bytes, size: int = 4) -> SchemeCheck:
    reported: list[str] = []
    check = SchemeCheck(router_hasher, size, reported.append)
    for payload in payloads:
        check.observe("w0", "applied", payload)
    assert len(reported) == (check.verdict("w0").problem is not None)
    return check


def test_a_worker_that_hashes_as_the_router_does_is_ok() -> None:
    ours = BlockHasher("sha256_cbor")
    check = _verdict(ours, _stored(ours, TOKENS), _stored(ours, TOKENS, salt="t"))
    verdict = check.verdict("w0")
    assert verdict.state == "ok" and verdict.problem is None and verdict.checked == 8
    assert check.settled("w0")
    check.inspect("w0", b"not looked at any more")  # settled: nothing is decoded


@pytest.mark.parametrize(
    ("theirs", "hint"),
    [
        (BlockHasher("sha256"), "they look like sha256: use --engine vllm"),
        (BlockHasher("dynamo"), "they look like dynamo: use --engine dynamo"),
        # unsalted, xxh3_64 is Dynamo's chain: the engine is named (dynamo comes first)
        (BlockHasher("xxh3_64"), "they look like dynamo: use --engine dynamo"),
        (BlockHasher("xxhash"), "they look like xxhash: use --hash xxhash"),
        (BlockHasher("sha256_cbor", wire="bytes"), "sha256_cbor (bytes, not ints)"),
        (BlockHasher("sha256_cbor", seed="42"), "nor any scheme this router knows"),
    ],
)
def test_another_scheme_is_named(theirs: BlockHasher, hint: str) -> None:
    ours = BlockHasher("sha256_cbor") if theirs.scheme != "sha256_cbor" else BlockHasher("sha256")
    if theirs.wire == "bytes" or theirs.seed == "42":
        ours = BlockHasher("sha256_cbor")
    problem = _verdict(ours, _stored(theirs, TOKENS)).verdict("w0").problem
    assert problem is not None and problem.startswith(f"worker w0's hashes are not {ours.scheme}")
    assert hint in problem


def test_a_scheme_no_engine_ships_is_named_by_its_hash_alone() -> None:
    """Salted, xxh3_64 is not Dynamo's hash (Dynamo seeds every block): the hint names
    the scheme, and no engine, as ENGINE_OF (read from the presets) has none for it."""
    assert {p.scheme: p.name for p in ENGINES.values()} == ENGINE_OF
    assert "xxh3_64" not in ENGINE_OF
    theirs = BlockHasher("xxh3_64")
    problem = _verdict(BlockHasher("sha256"), _stored(theirs, TOKENS, salt="t")).verdict("w0")
    assert problem.problem is not None
    assert "they look like xxh3_64: use --hash xxh3_64" in problem.problem


def test_salt_semantics_are_told_apart() -> None:
    ours = BlockHasher("sha256")
    unsalted = BlockHasher("sha256")
    # An engine that leaves the salt out of its hashes (SGLang's default event format).
    left_out = _stored(unsalted, TOKENS, extra=[("tenant",), None, None, None])
    check = _verdict(ours, _stored(ours, TOKENS), left_out)
    problem = check.verdict("w0").problem
    assert problem is not None and "leaves the cache salt out of its hashes" in problem
    # An engine for which "" is no salt (vLLM).
    empty = _stored(unsalted, TOKENS, extra=[("",), None, None, None])
    problem = _verdict(ours, empty).verdict("w0").problem
    assert problem is not None and 'treats "" as no salt' in problem


def test_a_block_size_that_differs_is_named() -> None:
    ours = BlockHasher("sha256")
    problem = _verdict(ours, _stored(ours, TOKENS, size=8), size=4).verdict("w0").problem
    assert problem == "worker w0's blocks are 8 tokens, the router's 4: use --block-size 8"


def test_what_cannot_be_checked_stays_unchecked() -> None:
    ours = BlockHasher("sha256")
    no_tokens = encode_batch(
        KVEventBatch(0.0, [BlockStored([1, 2], None, [], 4, None, None, None)])
    )
    lora = encode_batch(KVEventBatch(0.0, [BlockStored([1], None, [1, 2, 3, 4], 4, 7, None, "x")]))
    orphan = encode_batch(
        KVEventBatch(0.0, [BlockStored([1], 99, [1, 2, 3, 4], 4, None, None, None)])
    )
    multimodal = _stored(ours, TOKENS, extra=[("mm-hash", 3), None, None, None])
    check = _verdict(ours, no_tokens, lora, orphan, multimodal, b"\xc1 not msgpack")
    assert check.verdict("w0").state == "unchecked" and not check.settled("w0")
    for _ in range(CHECK_BATCHES):
        check.inspect("w0", no_tokens)
    assert check.settled("w0") and check.verdict("w0").state == "unchecked"


def test_a_chain_continued_from_a_checked_parent_is_checked_and_a_restart_checks_again() -> None:
    ours = BlockHasher("sha256")
    chain = [ours.external(h) for h in ours.chain(TOKENS, 4)]
    first = BlockStored(chain[:2], None, TOKENS[:8], 4, None, None, None)
    rest = BlockStored(chain[2:], chain[1], TOKENS[8:], 4, None, None, None)
    removed = BlockRemoved([chain[3]], None)
    out_of_range = BlockStored([7], None, [-1, 0, 0, 2**40], 4, None, None, None)
    batch = KVEventBatch(0.0, [out_of_range, first, rest, removed])
    check = SchemeCheck(ours, 4)
    check.observe("w0", "applied", encode_batch(batch))
    assert check.verdict("w0").state == "ok" and not check.settled("w0")  # the salt is unseen
    assert check.verdict("w0").checked == 4  # the chain continued from its parent too
    later = KVEventBatch(0.0, [BlockStored(chain[2:], chain[1], TOKENS[8:], 4, None, None, None)])
    check.observe("w0", "applied", encode_batch(later))  # not salted: not wanted now
    check.observe("w0", "applied", _stored(ours, TOKENS, salt="t"))
    assert check.settled("w0") and check.verdict("w0").checked == 8
    check.observe("w0", "restart", _stored(BlockHasher("xxh3_64"), TOKENS))
    problem = check.verdict("w0").problem
    assert problem is not None and "dynamo" in problem  # the restarted worker, checked anew
    check.observe("w0", "repeat", b"")  # a batch the index ignored is not looked at


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())


def test_the_router_says_so_in_its_table_health_and_log(caplog: pytest.LogCaptureFixture) -> None:
    """End to end: a worker publishing sha256 hashes to a sha256_cbor router over real
    sockets; /health is not ok and names the fix; a worker that agrees is ok."""
    router = Router(RouterIndex(BlockHasher("sha256_cbor"), 4))
    wrong, right = RadixTree(32, 4, events=BlockHasher("sha256")), RadixTree(32, 4, events=True)
    with (
        EventPublisher("tcp://127.0.0.1:0", "tcp://127.0.0.1:0") as one,
        EventPublisher("tcp://127.0.0.1:0", "tcp://127.0.0.1:0") as two,
    ):
        for tree, publisher in ((wrong, one), (right, two)):
            tree.insert(TOKENS)
            for batch in tree.take_events():
                publisher.publish(batch)
        router.add_worker("w0", one.endpoint, one.replay_endpoint)
        router.add_worker("w1", two.endpoint, two.replay_endpoint)
        assert wait_caught_up(router, {"w0": 1, "w1": 1}, 10)
        service = serve_in_thread(router)
        try:
            health = _get(f"{service.url}/health")
            rows = _get(f"{service.url}/workers")
        finally:
            service.close()
        console = Console(no_color=True, width=400)
        with console.capture() as captured:
            console.print(route_cli._table(router, None))
    router.close()
    assert "MISMATCH: worker w0's hashes are not sha256_cbor" in captured.get()
    assert health["ok"] is False and [p["worker"] for p in health["problems"]] == ["w0"]
    assert "they look like sha256: use --engine vllm" in health["problems"][0]["problem"]
    assert rows[0]["hashes"]["state"] == "mismatch" and rows[1]["hashes"]["state"] == "ok"
    assert any("worker w0's hashes are not sha256_cbor" in r.getMessage() for r in caplog.records)


def test_vllms_own_hashes_are_recognised_as_vllms_default() -> None:
    """Issue 33: with both at their defaults (vLLM 0.33's sha256, this router's
    sha256_cbor) the router held every block and answered 0; now it says why, naming
    the scheme vLLM's own request block hasher used (its pinned wheel)."""
    require_vllm()
    from kachedb_radix.spec.peers.vllm import load_vllm, vllm_block_hashes

    convert = load_vllm().kv_cache_utils.maybe_convert_block_hash
    digests = vllm_block_hashes(TOKENS, 4, "sha256", "vllm-none-hash", None)
    theirs = [convert(d) for d in digests]
    stored = BlockStored(theirs, None, TOKENS, 4, None, "GPU", None)
    check = _verdict(BlockHasher("sha256_cbor"), encode_batch(KVEventBatch(0.0, [stored])))
    problem = check.verdict("w0").problem
    assert problem is not None and "they look like sha256: use --engine vllm" in problem
    assert (
        _verdict(BlockHasher("sha256"), encode_batch(KVEventBatch(0.0, [stored])))
        .verdict("w0")
        .state
        == "ok"
    )
