"""Pool geometry: dtypes, model presets, memory layouts and size arithmetic.

Nothing here allocates memory and nothing imports numpy, so sizes can be computed (and a pool
refused) before any allocation is attempted.

Canonical block shape: one KV block is always described, whatever the memory layout, as an
array of shape ``(num_layers, 2, block_size, num_kv_heads, head_dim)`` where index 0 of the
second axis is K and index 1 is V.  Gather buffers are ``(n, *block_shape)`` C-contiguous arrays
in that canonical order, so a buffer gathered from one layout can be scattered into the other.

Layouts:

* ``Layout.BLOCK_MAJOR``: one tensor ``[num_blocks, num_layers, 2, block_size, heads, head_dim]``;
  a block is one contiguous run of ``bytes_per_block`` bytes.
* ``Layout.LAYER_MAJOR``: one tensor per layer, ``[2, num_blocks, block_size, heads, head_dim]``
  (the arrangement serving engines such as vLLM use); one block is scattered over
  ``2 * num_layers`` chunks of ``chunk_bytes`` bytes each.

Invariants of :class:`PoolSpec`: every dimension is a positive ``int`` (``bool`` refused);
``bytes_per_block == block_size * bytes_per_token``;
``total_bytes == num_blocks * bytes_per_block == num_blocks * 2 * num_layers * chunk_bytes``.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, replace

from kachedb_radix.reference.blockpool.errors import ConfigError, PoolTooLargeError


class KVDType(enum.Enum):
    """Element type of the KV cache.

    ``storage`` names the numpy/cupy dtype used to hold it.  bf16 and fp8 have no portable
    numpy dtype, so they are stored as raw ``uint16`` / ``uint8``: every pool operation is a
    bit-exact move, so the bits never need interpreting.
    """

    FP32 = "fp32"
    FP16 = "fp16"
    BF16 = "bf16"
    FP8_E4M3 = "fp8_e4m3"
    FP8_E5M2 = "fp8_e5m2"

    @property
    def label(self) -> str:
        return str(self.value)

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return _DTYPE_INFO[self.value][0]

    @property
    def storage(self) -> str:
        """numpy/cupy dtype name holding the raw elements."""
        return _DTYPE_INFO[self.value][1]

    @classmethod
    def parse(cls, value: KVDType | str) -> KVDType:
        """Return the member for ``value`` (a member or a label such as ``"fp16"``, ``"fp8"``).

        Cost O(1).  Raises :class:`ConfigError` for an unknown label.
        """
        if isinstance(value, KVDType):
            return value
        aliases = {"fp8": "fp8_e4m3", "float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}
        label = aliases.get(str(value).lower(), str(value).lower())
        for member in cls:
            if member.label == label:
                return member
        known = ", ".join(m.label for m in cls)
        raise ConfigError(f"unknown KV dtype {value!r}; known: {known}, fp8")


_DTYPE_INFO: dict[str, tuple[int, str]] = {
    "fp32": (4, "float32"),
    "fp16": (2, "float16"),
    "bf16": (2, "uint16"),
    "fp8_e4m3": (1, "uint8"),
    "fp8_e5m2": (1, "uint8"),
}


class Layout(enum.Enum):
    """Memory arrangement of a pool (see the module docstring)."""

    BLOCK_MAJOR = "block_major"
    LAYER_MAJOR = "layer_major"


@dataclass(frozen=True)
class ModelPreset:
    """KV-relevant dimensions of a model."""

    name: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: KVDType

    @property
    def bytes_per_token(self) -> int:
        """KV bytes one token occupies across all layers (K and V)."""
        return self.num_layers * 2 * self.num_kv_heads * self.head_dim * self.dtype.itemsize


PRESETS: dict[str, ModelPreset] = {
    p.name: p
    for p in (
        # 32 * 2 * 8 * 128 * 2 bytes = 131072 = 128 KiB per token
        ModelPreset("llama-3-8b", 32, 8, 128, KVDType.FP16),
        # 80 * 2 * 8 * 128 * 1 byte = 163840 = 160 KiB per token
        ModelPreset("llama-3-70b-fp8", 80, 8, 128, KVDType.FP8_E4M3),
        ModelPreset("llama-3-70b", 80, 8, 128, KVDType.BF16),
    )
}


def get_preset(name: str) -> ModelPreset:
    """Look up a preset by name (case-insensitive).  Raises :class:`ConfigError` if unknown."""
    try:
        return PRESETS[name.lower()]
    except KeyError:
        raise ConfigError(
            f"unknown model preset {name!r}; known: {', '.join(sorted(PRESETS))}"
        ) from None


def _check_dim(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if value <= 0:
        raise ConfigError(f"{name} must be positive, got {value}")
    return value


@dataclass(frozen=True)
class PoolSpec:
    """Complete geometry of a block pool.  Construction validates every field.

    Raises :class:`ConfigError` on a non-int, ``bool`` or non-positive dimension, or an
    unknown dtype/layout.
    """

    num_blocks: int
    block_size: int
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: KVDType = KVDType.FP16
    layout: Layout = Layout.BLOCK_MAJOR

    def __post_init__(self) -> None:
        for name in ("num_blocks", "block_size", "num_layers", "num_kv_heads", "head_dim"):
            _check_dim(name, getattr(self, name))
        object.__setattr__(self, "dtype", KVDType.parse(self.dtype))
        if not isinstance(self.layout, Layout):
            try:
                object.__setattr__(self, "layout", Layout(self.layout))
            except ValueError:
                raise ConfigError(
                    f"unknown layout {self.layout!r}; known: " + ", ".join(m.value for m in Layout)
                ) from None

    # ----------------------------------------------------------------- constructors
    @classmethod
    def from_preset(
        cls,
        preset: ModelPreset | str,
        num_blocks: int,
        block_size: int = 16,
        layout: Layout = Layout.BLOCK_MAJOR,
        dtype: KVDType | str | None = None,
    ) -> PoolSpec:
        """Spec for ``num_blocks`` blocks of a model preset (optionally overriding its dtype)."""
        p = get_preset(preset) if isinstance(preset, str) else preset
        return cls(
            num_blocks=num_blocks,
            block_size=block_size,
            num_layers=p.num_layers,
            num_kv_heads=p.num_kv_heads,
            head_dim=p.head_dim,
            dtype=p.dtype if dtype is None else KVDType.parse(dtype),
            layout=layout,
        )

    def with_blocks(self, num_blocks: int) -> PoolSpec:
        """Same geometry with a different block count."""
        return replace(self, num_blocks=num_blocks)

    def fitting(self, budget_bytes: int) -> PoolSpec:
        """Same geometry with as many blocks as fit in ``budget_bytes``.

        Cost O(1).  Raises :class:`PoolTooLargeError` if not even one block fits.
        """
        n = budget_bytes // self.bytes_per_block
        if n < 1:
            raise PoolTooLargeError(self.bytes_per_block, budget_bytes, "memory_budget")
        return self.with_blocks(n)

    # ----------------------------------------------------------------- sizes (bytes)
    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def storage_dtype(self) -> str:
        """numpy/cupy dtype name used for storage (``float16``, ``uint16``, ``uint8``...)."""
        return self.dtype.storage

    @property
    def bytes_per_token(self) -> int:
        return self.num_layers * 2 * self.num_kv_heads * self.head_dim * self.itemsize

    @property
    def chunk_bytes(self) -> int:
        """Bytes of one block in one layer for one of K/V (the contiguous unit of LAYER_MAJOR)."""
        return self.block_size * self.num_kv_heads * self.head_dim * self.itemsize

    @property
    def bytes_per_block(self) -> int:
        return self.block_size * self.bytes_per_token

    @property
    def total_bytes(self) -> int:
        """Bytes the pool's storage needs (reported before allocating)."""
        return self.num_blocks * self.bytes_per_block

    def buffer_bytes(self, n: int) -> int:
        """Bytes of a gather buffer for ``n`` blocks."""
        return n * self.bytes_per_block

    def check_fits(self, available_bytes: int, source: str = "memory_budget") -> None:
        """Raise :class:`PoolTooLargeError` if ``total_bytes > available_bytes``.  Cost O(1)."""
        if self.total_bytes > available_bytes:
            raise PoolTooLargeError(self.total_bytes, available_bytes, source)

    # ----------------------------------------------------------------- shapes
    @property
    def block_shape(self) -> tuple[int, int, int, int, int]:
        """Canonical shape of one block: ``(layers, 2, block_size, heads, head_dim)``."""
        return (self.num_layers, 2, self.block_size, self.num_kv_heads, self.head_dim)

    @property
    def pool_shape(self) -> tuple[int, ...]:
        """Shape of the BLOCK_MAJOR storage tensor (also the canonical whole-pool view)."""
        return (self.num_blocks, *self.block_shape)

    @property
    def layer_shape(self) -> tuple[int, int, int, int, int]:
        """Shape of one LAYER_MAJOR per-layer tensor ``(2, num_blocks, block_size, heads, dim)``."""
        return (2, self.num_blocks, self.block_size, self.num_kv_heads, self.head_dim)

    def buffer_shape(self, n: int) -> tuple[int, ...]:
        """Shape of a contiguous gather/scatter buffer holding ``n`` blocks."""
        return (n, *self.block_shape)

    @property
    def num_segments(self) -> int:
        """Contiguous pieces one block is made of: 1 (BLOCK_MAJOR) or ``2 * layers``."""
        return 1 if self.layout is Layout.BLOCK_MAJOR else 2 * self.num_layers

    @property
    def segment_bytes(self) -> int:
        """Bytes of each contiguous piece of a block (``bytes_per_block / num_segments``)."""
        return self.bytes_per_block if self.layout is Layout.BLOCK_MAJOR else self.chunk_bytes


def format_bytes(n: int) -> str:
    """Human-readable binary size, e.g. ``128.0 KiB``."""
    if n < 1024:
        return f"{n} B"
    exp = min(int(math.log(n, 1024)), 5)
    return f"{n / 1024**exp:.1f} {['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'][exp]}"
