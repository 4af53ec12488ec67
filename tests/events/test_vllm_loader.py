"""spec/peers/vllm.py: the pinned wheel is loaded by path with stand-ins, refused
with a message saying how to install it, and leaves sys.modules as it found it."""

from __future__ import annotations

import importlib.metadata
import sys

import pytest

from kachedb_radix.spec.peers import vllm as peer
from tests.support.vllm import require_vllm


def test_a_missing_or_other_wheel_is_refused_with_the_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(peer, "_LOADED", [])

    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    with pytest.raises(peer.VllmUnavailable, match=r"pip install --no-deps vllm==0\.33\.0"):
        peer.load_vllm()
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.1.0")
    with pytest.raises(peer.VllmUnavailable, match=r"vLLM 0\.1\.0 is installed, the tests pin"):
        peer.load_vllm()


def test_loading_restores_sys_modules_and_stand_ins_make_placeholders(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    require_vllm()
    monkeypatch.setattr(peer, "_LOADED", [])
    sentinel = type(sys)("vllm.v1")
    monkeypatch.setitem(sys.modules, "vllm.v1", sentinel)
    loaded = peer.load_vllm()
    assert sys.modules["vllm.v1"] is sentinel and "vllm.utils.hashing" not in sys.modules
    assert loaded.kv_events.KVEventBatch.__name__ == "KVEventBatch"
    stand_in = peer._StandIn("x")
    assert stand_in.Anything.__name__ == "Anything" and stand_in.Anything is stand_in.Anything
    built = stand_in.Config(1, endpoint="tcp://x")
    assert built.endpoint == "tcp://x" and built.args == (1,)
    with pytest.raises(AttributeError):
        stand_in.__wrapped__  # noqa: B018


def test_the_seed_is_given_as_pythonhashseed_and_put_back(monkeypatch: pytest.MonkeyPatch) -> None:
    require_vllm()
    monkeypatch.setenv("PYTHONHASHSEED", "kept")
    first = peer.vllm_block_hashes([1, 2], 2, "sha256_cbor", "0")
    assert first == peer.vllm_block_hashes([1, 2], 2, "sha256_cbor", "0")
    assert first != peer.vllm_block_hashes([1, 2], 2, "sha256_cbor", "1")
    import os

    assert os.environ["PYTHONHASHSEED"] == "kept"


def test_a_vllm_worker_refuses_what_its_scheduler_would_and_changes_nothing() -> None:
    """VllmWorker: a request id already running, or a request the free blocks cannot
    hold, is refused before vLLM's pool is touched; a block never cached has no copies."""
    require_vllm()
    worker = peer.VllmWorker(num_blocks=4, block_size=2)  # 3 blocks and the null block
    assert worker.admit("a", [1, 2, 3, 4]) == 0
    order = worker.eviction_order()
    with pytest.raises(ValueError, match="'a' is running"):
        worker.admit("a", [1, 2])
    with pytest.raises(ValueError, match="wants 2 free blocks, 1 are"):
        worker.admit("b", [1, 2, 3, 4, 5, 6, 7])  # its hit on [1, 2] is held by 'a'
    assert worker.eviction_order() == order and worker.pool.take_events() != []
    assert worker.copies([1, 2, 3, 4], None, 1) == 1 and worker.copies([9, 9], None, 0) == 0
    assert worker.hit([1, 2, 3, 4]) == 2 and worker.hit([1, 2, 3, 4], "salt") == 0
    with pytest.raises(KeyError):
        worker.finish("b")
    worker.finish("a")
    assert worker.take_batch() is None  # freeing queues no event
