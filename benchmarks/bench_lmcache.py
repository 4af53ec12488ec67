"""The KV cache beside LMCache 0.5.6: every tier path, the same KV bytes, one process.

Run (LMCache and CPU torch in the environment; see "Environment" below)::

    python -m benchmarks.bench_lmcache                       # 16K tokens = 1 GiB, 5 rounds
    python -m benchmarks.bench_lmcache --tokens 1024 --rounds 1   # a smoke run

The KV: Llama-3-8B's geometry (8 KV heads of 128, fp16) with 16 of its 32 layers, 64 KiB a
token, so 16,384 tokens are 1 GiB. Both contenders hold the same bytes on their "device"
(host memory here: there is no GPU) and move them through their tiers:

The paths, for each contender:

* store to host -- ours: the device's eviction of the path into the host tier (a
  demotion); LMCache: ``store`` into its local CPU backend.
* restore from host -- ours: ``restore`` from the host tier; LMCache: ``retrieve`` from its
  local CPU backend.
* store to disk -- ours: the host tier's eviction of the path into the disk tier, in the
  page cache and not synced (LMCache syncs nothing); LMCache: ``store`` into the local
  disk backend (local CPU off) of an engine made for it over an empty folder (untimed),
  waited for until the backend has recorded every chunk, which it does once the chunk's
  file is written (in the page cache). Each store writes all 1 GiB: checked.
* restore from disk, warm and cold -- ours: ``restore`` from the disk tier; LMCache:
  ``retrieve`` from its local disk backend.

"Cold": each file's pages dropped first (``posix_fadvise(DONTNEED)`` after a flush). Every
round runs the two contenders of each path in a random order; every figure is a median,
in GB/s (10^9 bytes/s), and every restore's bytes are compared with the stored ones.

LMCache moves bytes between its memory objects and the engine's KV through a *GPU
connector*; its connectors need CUDA, so the one here, :class:`HostConnector`, is ours: a
``copy_`` of each chunk between the memory object and the engine's KV tensor (both in
LMCache's ``KV_2LTD`` layout: ``[2, layers, tokens, heads * head_dim]``), the one copy a
GPU connector's kernel makes. It is the only part of LMCache's path that is not LMCache's.

Environment: LMCache 0.5.6 installed without its dependencies (``pip install --no-deps
lmcache==0.5.6``: they pull CUDA packages), then CPU torch (``pip install torch==2.13.0``)
and the modules it imports (numpy<=2.2.6, msgspec, pyyaml, psutil, prometheus_client,
sortedcontainers, aiofile, aiofiles, py-cpuinfo, cachetools, safetensors, blake3, nvtx,
pyzmq, numba, requests, aiohttp, transformers, cryptography). Without LMCache the script
says so and exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench_disk import _drop_cache
from kachedb_radix.reference.blockpool import PoolSpec
from kachedb_radix.spec.gate import tiers as gate_tiers

BLOCK_TOKENS = 16
CHUNK_TOKENS = 256
PATHS = (
    "store to host",
    "restore from host",
    "store to disk",
    "restore from disk, warm",
    "restore from disk, cold",
)
OURS, THEIRS = "kachedb-radix", "LMCache 0.5.6"


def lmcache_missing() -> str | None:
    """Why LMCache cannot run here, or None."""
    try:
        import lmcache  # noqa: F401
        import torch  # noqa: F401
    except ImportError as error:
        return f"LMCache or torch not importable: {error}"
    return None


def _spec(tokens: int, layers: int) -> PoolSpec:
    spec = PoolSpec.from_preset("llama-3-8b", num_blocks=tokens // BLOCK_TOKENS,
                                block_size=BLOCK_TOKENS)  # fmt: skip
    return dataclasses.replace(spec, num_layers=layers)


def _timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


# ---------------------------------------------------------------- ours


class Ours:
    """The KV cache with device, host and disk tiers of the whole path each."""

    def __init__(self, spec: PoolSpec, kv: Any, folder: Path) -> None:
        self.spec, self.kv = spec, kv
        self.blocks = spec.num_blocks
        self.tokens = list(range(1, self.blocks * BLOCK_TOKENS + 1))
        self.slab = folder / "ours.slab"
        cls = gate_tiers.cpu_cache_class("accel")
        self.cache = cls(spec, model="llama-3-8b/16-layers", host_blocks=self.blocks,
                         disk_path=self.slab, disk_blocks=self.blocks)  # fmt: skip
        self.cache.store(self.tokens, kv)

    def _tiers(self) -> set[str]:
        return set(self.cache.lookup(self.tokens).tiers)

    def _up(self) -> None:
        if self.cache.lookup(self.tokens).on_device < self.blocks:
            self.cache.restore(self.tokens).handle.wait()

    def store_host(self) -> float:
        self._up()
        self.cache.evict(self.blocks, "host")  # the host copies gone (to disk, untimed)
        self.cache.evict(self.blocks, "disk")  # and the disk's: a store from scratch
        seconds = _timed(lambda: self.cache.evict(self.blocks))
        assert self._tiers() == {"host"}
        return seconds

    def restore_host(self) -> float:
        self._up()
        self.cache.evict(self.blocks)  # the host keeps its copies: no bytes move
        seconds = _timed(lambda: self.cache.restore(self.tokens).handle.wait())
        self._check()
        return seconds

    def store_disk(self) -> float:
        self._up()
        self.cache.evict(self.blocks)
        self.cache.evict(self.blocks, "disk")  # the disk empty, the path in the host tier
        seconds = _timed(lambda: self.cache.evict(self.blocks, "host"))
        assert self._tiers() == {"disk"}
        return seconds

    def restore_disk(self, cold: bool) -> float:
        self._up()
        self.cache.evict(self.blocks)
        self.cache.evict(self.blocks, "host")
        assert self._tiers() == {"disk"}
        if cold:
            self.cache.sync()
            _drop_cache(self.slab)
        seconds = _timed(lambda: self.cache.restore(self.tokens).handle.wait())
        self._check()
        return seconds

    def _check(self) -> None:
        got = self.cache.read(self.tokens)
        assert got.tobytes() == self.kv.tobytes(), "kachedb-radix restored other bytes"

    def close(self) -> None:
        self.cache.close()


# ---------------------------------------------------------------- theirs


def host_connector() -> Any:
    """LMCache's GPU connector interface over host memory (the module docstring)."""
    import torch
    from lmcache.v1.gpu_connector.gpu_connectors import GPUConnectorInterface

    class HostConnector(GPUConnectorInterface):  # type: ignore[misc]  # untyped peer
        def __init__(self, layers: int, hidden: int) -> None:
            self.layers, self.hidden = layers, hidden

        def get_shape(self, num_tokens: int) -> Any:
            return torch.Size([2, self.layers, num_tokens, self.hidden])

        def from_gpu(self, memory_obj: Any, start: int, end: int, **kwargs: Any) -> None:
            memory_obj.tensor.copy_(kwargs["kvcaches"][:, :, start:end])

        def to_gpu(self, memory_obj: Any, start: int, end: int, **kwargs: Any) -> None:
            kwargs["kvcaches"][:, :, start:end].copy_(memory_obj.tensor)

        def batched_from_gpu(self, memory_objs: Any, starts: Any, ends: Any, **kwargs: Any) -> None:
            for memory_obj, start, end in zip(memory_objs, starts, ends, strict=True):
                self.from_gpu(memory_obj, start, end, **kwargs)

        def batched_to_gpu(
            self, memory_objs: Any = None, starts: Any = None, ends: Any = None, **kwargs: Any
        ) -> None:
            for memory_obj, start, end in zip(memory_objs, starts, ends, strict=True):
                self.to_gpu(memory_obj, start, end, **kwargs)

    return HostConnector


class Theirs:
    """Two LMCache engines over the same KV: one with its local CPU backend, one with its
    local disk backend alone."""

    def __init__(self, spec: PoolSpec, kv: Any, folder: Path) -> None:
        import torch
        from lmcache.v1.cache_engine import LMCacheEngineBuilder
        from lmcache.v1.metadata import LMCacheMetadata

        tokens = spec.num_blocks * BLOCK_TOKENS
        self.tokens = list(range(1, tokens + 1))
        hidden = spec.num_kv_heads * spec.head_dim
        # The engine's KV, [2, layers, tokens, hidden], holding the same bytes as ``kv``.
        layered = np.ascontiguousarray(
            kv.reshape(spec.num_blocks, spec.num_layers, 2, BLOCK_TOKENS, hidden)
            .transpose(2, 1, 0, 3, 4).reshape(2, spec.num_layers, tokens, hidden)
        )  # fmt: skip
        self.device = torch.from_numpy(layered)
        self.out = torch.zeros_like(self.device)
        gib = spec.buffer_bytes(spec.num_blocks) / 2**30
        metadata = LMCacheMetadata(
            model_name="llama-3-8b/16-layers", world_size=1, local_world_size=1, worker_id=0,
            local_worker_id=0, kv_dtype=torch.float16,
            kv_shape=(spec.num_layers, 2, CHUNK_TOKENS, spec.num_kv_heads, spec.head_dim),
        )  # fmt: skip
        self._connector = host_connector()(spec.num_layers, hidden)
        self._metadata, self._folder, self._gib = metadata, folder, gib
        self._chunks = -(-tokens // CHUNK_TOKENS)
        self.builder = LMCacheEngineBuilder
        host = {"local_cpu": True, "max_local_cpu_size": 1.25 * gib + 0.1}
        self.host = self._engine("bench-host", host)
        self._disks = 0
        self.disk, self.disk_folder = self._disk_engine()

    def _engine(self, name: str, options: dict[str, Any]) -> Any:
        from lmcache.v1.config import LMCacheEngineConfig

        config = LMCacheEngineConfig.from_defaults(chunk_size=CHUNK_TOKENS, **options)
        engine = self.builder.get_or_create(
            name, config, self._metadata, self._connector, None, None
        )
        engine.post_init()
        return engine

    def _disk_engine(self) -> tuple[Any, Path]:
        """A new engine with the local disk backend alone, over a new, empty folder.

        A store to disk is timed on a fresh one: a store of chunks the backend has held
        writes nothing, even once they are removed (its ``remove`` took the files and
        the keys, and the next store of them wrote none -- the engine's ``clear`` skips
        that backend, "does not support clear"), which the first version of this
        benchmark timed as LMCache's store to disk (9.6 GB/s on a quiet machine)."""
        self._disks += 1
        folder = self._folder / f"lmcache-disk-{self._disks}"
        folder.mkdir()
        engine = self._engine(f"bench-disk-{self._disks}", {
            "local_cpu": False, "max_local_cpu_size": 1.25 * self._gib + 0.1,
            "local_disk": f"file://{folder}/", "max_local_disk_size": 1.25 * self._gib + 0.1,
        })  # fmt: skip
        return engine, folder

    def _stored(self, engine: Any) -> bool:
        return int(engine.lookup(self.tokens)) == len(self.tokens)

    def _disk_backend(self) -> Any:
        backends = self.disk.storage_manager.storage_backends
        return next(b for b in backends.values() if type(b).__name__ == "LocalDiskBackend")

    def _wait_for_disk(self) -> None:
        """Until every chunk of the path is in a file (the backend records a chunk's key
        once its file is written) and no write is queued."""
        disk = self._disk_backend()
        deadline = time.monotonic() + 300
        while len(disk.dict) < self._chunks or disk.disk_worker.put_tasks:
            if time.monotonic() > deadline:
                raise RuntimeError(f"LMCache wrote {len(disk.dict)} of {self._chunks} chunks")
            time.sleep(0.0005)

    def _disk_bytes(self) -> int:
        return sum(file.stat().st_size for file in self.disk_folder.rglob("*") if file.is_file())

    def store_host(self) -> float:
        self.host.clear()
        seconds = _timed(lambda: self.host.store(self.tokens, kvcaches=self.device))
        assert self._stored(self.host)
        return seconds

    def restore_host(self) -> float:
        if not self._stored(self.host):
            self.host.store(self.tokens, kvcaches=self.device)
        self.out.zero_()
        seconds = _timed(lambda: self.host.retrieve(self.tokens, kvcaches=self.out))
        self._check()
        return seconds

    def store_disk(self) -> float:
        self.builder.destroy(f"bench-disk-{self._disks}")
        shutil.rmtree(self.disk_folder)
        self.disk, self.disk_folder = self._disk_engine()

        def store() -> None:
            self.disk.store(self.tokens, kvcaches=self.device)
            self._wait_for_disk()

        seconds = _timed(store)
        assert self._stored(self.disk)
        assert self._disk_bytes() >= self.device.numel() * self.device.element_size(), (
            "LMCache's store to disk wrote less than the KV"
        )
        return seconds

    def restore_disk(self, cold: bool) -> float:
        if not self._stored(self.disk):
            self.disk.store(self.tokens, kvcaches=self.device)
            self._wait_for_disk()
        if cold:
            for file in self.disk_folder.rglob("*"):
                if file.is_file():
                    _drop_cache(file)
        self.out.zero_()
        seconds = _timed(lambda: self.disk.retrieve(self.tokens, kvcaches=self.out))
        self._check()
        return seconds

    def _check(self) -> None:
        same = np.array_equal(self.out.numpy().view(np.uint8), self.device.numpy().view(np.uint8))
        assert same, "LMCache restored other bytes"  # bytes: random fp16 holds NaNs

    def close(self) -> None:
        for name in ("bench-host", f"bench-disk-{self._disks}"):
            with contextlib.suppress(Exception):  # its shutdown logs, never fails the run
                self.builder.destroy(name)


# ---------------------------------------------------------------- the run


def _measure(contender: Ours | Theirs, path: str) -> float:
    """Seconds of ``contender``'s ``path`` (one of :data:`PATHS`)."""
    if path == "store to host":
        return contender.store_host()
    if path == "restore from host":
        return contender.restore_host()
    if path == "store to disk":
        return contender.store_disk()
    return contender.restore_disk(cold=path.endswith("cold"))


def run(tokens: int, layers: int, rounds: int, folder: Path) -> dict[str, Any]:
    spec = _spec(tokens, layers)
    rng = np.random.default_rng(56)
    kv = rng.integers(0, 256, spec.buffer_bytes(spec.num_blocks), dtype=np.uint8)
    kv = kv.view(spec.storage_dtype).reshape(spec.buffer_shape(spec.num_blocks))
    contenders: dict[str, Ours | Theirs] = {
        OURS: Ours(spec, kv, folder), THEIRS: Theirs(spec, kv, folder)
    }  # fmt: skip
    seconds: dict[str, dict[str, list[float]]] = {path: {OURS: [], THEIRS: []} for path in PATHS}
    order = random.Random(tokens)
    try:
        for round_number in range(rounds + 1):  # round 0: a warm-up, dropped
            for path in PATHS:
                names = list(contenders)
                order.shuffle(names)
                for name in names:
                    figure = _measure(contenders[name], path)
                    if round_number:
                        seconds[path][name].append(figure)
    finally:
        for contender in contenders.values():
            contender.close()
    return {"tokens": tokens, "layers": layers, "bytes": kv.nbytes, "rounds": rounds,
            "seconds": seconds}  # fmt: skip


def table(result: dict[str, Any]) -> str:
    nbytes = result["bytes"]
    lines = [
        f"| GB/s (median of {result['rounds']}) | {OURS} | {THEIRS} | {OURS} / {THEIRS} |",
        "| --- | ---: | ---: | ---: |",
    ]
    for path in PATHS:
        ours, theirs = (nbytes / statistics.median(result["seconds"][path][name]) / 1e9
                        for name in (OURS, THEIRS))  # fmt: skip
        lines.append(f"| {path} | {ours:.2f} | {theirs:.2f} | {ours / theirs:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=16_384, help="the prefix, in tokens")
    parser.add_argument("--layers", type=int, default=16, help="Llama-3-8B layers kept")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None, help="where the files go")
    parser.add_argument("--json", type=Path, default=None, help="write every round here")
    args = parser.parse_args(argv)
    missing = lmcache_missing()
    if missing is not None:
        print(f"## Beside LMCache: unmeasured ({missing})")
        return 0
    if args.tokens % CHUNK_TOKENS:
        parser.error(f"--tokens must be a multiple of {CHUNK_TOKENS} (LMCache's chunk)")
    logging.getLogger("lmcache").setLevel(logging.WARNING)
    os.environ.setdefault("LMCACHE_LOG_LEVEL", "WARNING")
    folder = Path(tempfile.mkdtemp(prefix="bench-lmcache-", dir=args.dir))
    try:
        started = time.perf_counter()
        result = run(args.tokens, args.layers, args.rounds, folder)
        result["seconds_total"] = time.perf_counter() - started
    finally:
        shutil.rmtree(folder)
    size = f"{result['bytes'] / 2**30:.2f} GiB"
    print(f"## Beside LMCache 0.5.6: {args.tokens:,} tokens of Llama-3-8B, {args.layers} "
          f"layers ({size}), one process, contenders alternated\n")  # fmt: skip
    print(table(result))
    print(f"\n({result['seconds_total']:.0f} s)")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
