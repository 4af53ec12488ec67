"""SGLang 0.5.23's own KV event recording, run from the wheel for ``conform sglang --events``.

With events on, SGLang's ``RadixCache`` records them through three more of the wheel's
files, all run unmodified:

* ``sglang/srt/mem_cache/events.py`` -- ``KVCacheEventRecorder``: a store per new node
  (one ``BlockStored`` per page, coalesced), a removal per evicted node;
* ``sglang/srt/disaggregation/kv_events.py`` -- the event structs (msgspec, tagged like
  vLLM's) and the namespace hashing of Dynamo's format;
* ``sglang/srt/mem_cache/utils.py`` -- the page hash chain and its int64 form, over
* ``sglang/srt/mem_cache/cpp_utils/native_hash.py`` -- the page hash itself, which SGLang
  computes in C++ (``hash_binding.cpp``, SHA-256 from OpenSSL).

SGLang builds that C++ file with torch's extension loader; without torch, this module
builds the same file (the wheel's own, untouched) with pybind11 and the system's C++
compiler and OpenSSL, once, into a cache directory, and hands SGLang's ``native_hash``
that module in place of its loader's.  The other imports those files make but the
recording paths never use (the network helpers, the runtime context, triton kernels,
pydantic's ``BaseModel`` for a config class, SGLang's environment table) are served by
stand-ins that do nothing, as :mod:`kachedb_radix.spec.peers.sglang_standins` does for
``radix_cache.py``.

:func:`event_modules` raises :class:`~kachedb_radix.spec.peers.sglang.SGLangUnavailable`
naming what is missing (pybind11, a compiler, OpenSSL's headers) when the build cannot
be made.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sysconfig
from pathlib import Path
from types import ModuleType
from typing import Any

#: The files run, relative to the wheel's root.
FILES = {
    "kv_events": "sglang/srt/disaggregation/kv_events.py",
    "native_hash": "sglang/srt/mem_cache/cpp_utils/native_hash.py",
    "utils": "sglang/srt/mem_cache/utils.py",
    "events": "sglang/srt/mem_cache/events.py",
}
NATIVE_SOURCE = "sglang/srt/mem_cache/cpp_utils/hash_binding.cpp"
NATIVE_NAME = "hicache_hash_cpp"


def _module(name: str, **names: Any) -> ModuleType:
    made = ModuleType(name, "Stand-in (spec.peers.sglang_events)")
    made.__dict__.update(names)
    return made


class _Unused:
    """A name the recording paths import but never call."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("not part of SGLang's event recording the kit runs")


def cache_dir() -> Path:
    """Where the built hash module is kept (``$XDG_CACHE_HOME/kachedb-radix``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kachedb-radix"


def native_module(root: Path) -> ModuleType:
    """SGLang's ``hash_binding.cpp`` built with pybind11 (cached by the source's SHA-256
    and the Python ABI) and loaded.

    Raises:
        ImportError: pybind11 is not installed, or the build fails (the compiler's
            message, cut short).
    """
    from .sglang import SGLangUnavailable

    source = root / NATIVE_SOURCE
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    target = cache_dir() / f"sglang-native-hash-{digest}" / f"{NATIVE_NAME}{suffix}"
    if not target.is_file():
        try:
            import pybind11
        except ImportError:
            raise SGLangUnavailable(
                "SGLang's event hashes are computed by its hash_binding.cpp, built here with "
                "pybind11: `pip install pybind11` (and a C++ compiler with OpenSSL's headers)"
            ) from None
        compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
        if compiler is None:
            raise SGLangUnavailable("building SGLang's hash_binding.cpp needs a C++ compiler")
        target.parent.mkdir(parents=True, exist_ok=True)
        building = target.with_name(f".{target.name}.{os.getpid()}")
        command = [
            compiler, "-O2", "-std=c++17", "-shared", "-fPIC", "-DNDEBUG",
            f"-DTORCH_EXTENSION_NAME={NATIVE_NAME}",
            f"-I{sysconfig.get_paths()['include']}", f"-I{pybind11.get_include()}",
            str(source), "-o", str(building), "-lcrypto",
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = done.stderr.strip().splitlines()[-3:]
            raise SGLangUnavailable(
                "building SGLang's hash_binding.cpp failed (it needs OpenSSL's headers, "
                f"libssl-dev): {' / '.join(tail)}"
            )
        os.replace(building, target)  # atomic: a concurrent build wins or loses whole
    spec = importlib.util.spec_from_file_location(NATIVE_NAME, target)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def event_modules(evict_policy: ModuleType) -> dict[str, ModuleType]:
    """The wheel's event modules, run, by import name (for ``radix_cache.py``'s imports
    of ``...events`` and ``...utils``). O(loading four files, and one build).

    Raises:
        SGLangUnavailable: the native hash module cannot be built.
    """
    from .sglang import _run

    distribution = importlib.metadata.distribution("sglang")
    root = Path(str(distribution.locate_file("")))
    native = native_module(root)
    served: dict[str, ModuleType] = {}
    if importlib.util.find_spec("pydantic") is None:
        served["pydantic"] = _module("pydantic", BaseModel=object)
    served.update(
        {
            "sglang.srt.runtime_context": _module("runtime_context", get_parallel=_Unused),
            "sglang.srt.utils.network": _module("network", NetworkAddress=_Unused),
            "sglang.srt.environ": _module("environ", envs=_module("envs")),
            "sglang.kernels.ops.kvcache.mla_buffer": _module(
                "mla_buffer",
                **{
                    name: _Unused
                    for name in (
                        "get_mla_kv_buffer_kernel",
                        "get_mla_kv_buffer_triton",
                        "set_mla_kv_buffer_dcp_sharded_triton",
                        "set_mla_kv_buffer_fp8_quant_kernel",
                        "set_mla_kv_buffer_kernel",
                        "set_mla_kv_buffer_triton",
                        "set_mla_kv_buffer_triton_fp8_quant",
                        "set_mla_kv_scale_buffer_kernel",
                        "set_mla_kv_scale_buffer_triton",
                    )
                },
            ),
            "sglang.srt.mem_cache.evict_policy": evict_policy,
        }
    )
    native_hash = _run(root / FILES["native_hash"], "native_hash", served)
    # The loader's one job, building hash_binding.cpp through torch, done above instead.
    native_hash.__dict__["_load_native_hash_module"] = lambda: native
    served["sglang.srt.mem_cache.cpp_utils.native_hash"] = native_hash
    kv_events = _run(root / FILES["kv_events"], "kv_events", served)
    served["sglang.srt.disaggregation.kv_events"] = kv_events
    utils = _run(root / FILES["utils"], "utils", served)
    served["sglang.srt.mem_cache.utils"] = utils
    events = _run(root / FILES["events"], "events", served)
    return {
        "sglang.srt.mem_cache.events": events,
        "sglang.srt.mem_cache.utils": utils,
        "sglang.srt.disaggregation.kv_events": kv_events,
    }


def batch_payload(kv_events: ModuleType, ts: float, events: list[Any]) -> bytes:
    """A batch of SGLang's recorded events as the msgpack payload its publisher sends:
    its own ``KVEventBatch`` struct (``[ts, events, attn_dp_rank]``), encoded by msgspec
    as SGLang's scheduler does. O(size)."""
    import msgspec

    batch = kv_events.KVEventBatch(ts=ts, events=events)
    payload: bytes = msgspec.msgpack.Encoder().encode(batch)
    return payload
