"""Presets, dtypes, shapes and size arithmetic of reference.blockpool.layout."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given

from kachedb_radix.reference.blockpool import (
    PRESETS,
    ConfigError,
    KVDType,
    Layout,
    PoolSpec,
    PoolTooLargeError,
    get_preset,
)
from kachedb_radix.reference.blockpool.layout import format_bytes
from tests.support.blockpool import pool_specs

KIB = 1024


def test_llama_3_8b_is_128_kib_per_token() -> None:
    p = get_preset("llama-3-8b")
    assert (p.num_layers, p.num_kv_heads, p.head_dim, p.dtype) == (32, 8, 128, KVDType.FP16)
    assert p.bytes_per_token == 128 * KIB
    spec = PoolSpec.from_preset(p, num_blocks=1000, block_size=16)
    assert spec.bytes_per_token == 128 * KIB
    assert spec.bytes_per_block == 2 * 2**20
    assert spec.total_bytes == 1000 * 2 * 2**20
    assert spec.chunk_bytes == 16 * 8 * 128 * 2 == 32 * KIB


def test_llama_3_70b_fp8_is_160_kib_per_token() -> None:
    spec = PoolSpec.from_preset("Llama-3-70B-FP8", num_blocks=3, block_size=32)
    assert spec.dtype is KVDType.FP8_E4M3
    assert spec.storage_dtype == "uint8"
    assert spec.bytes_per_token == 160 * KIB
    assert spec.total_bytes == 3 * 32 * 160 * KIB


def test_preset_dtype_override() -> None:
    spec = PoolSpec.from_preset("llama-3-8b", num_blocks=1, dtype="fp8")
    assert spec.dtype is KVDType.FP8_E4M3
    assert spec.bytes_per_token == 64 * KIB


def test_presets_table_consistent() -> None:
    for name, p in PRESETS.items():
        assert get_preset(name.upper()) is p
        assert p.bytes_per_token == p.num_layers * 2 * p.num_kv_heads * p.head_dim * (
            p.dtype.itemsize
        )


def test_unknown_preset_and_dtype() -> None:
    with pytest.raises(ConfigError, match="llama-3-8b"):
        get_preset("gpt-2")
    with pytest.raises(ConfigError, match="'int4'"):
        KVDType.parse("int4")


@pytest.mark.parametrize(
    ("label", "itemsize", "storage"),
    [
        ("fp16", 2, "float16"),
        ("bf16", 2, "uint16"),
        ("fp8", 1, "uint8"),
        ("fp8_e5m2", 1, "uint8"),
        ("fp32", 4, "float32"),
    ],
)
def test_dtypes(label: str, itemsize: int, storage: str) -> None:
    d = KVDType.parse(label)
    assert (d.itemsize, d.storage) == (itemsize, storage)


@pytest.mark.parametrize(
    "field", ["num_blocks", "block_size", "num_layers", "num_kv_heads", "head_dim"]
)
@pytest.mark.parametrize("bad", [0, -3, True, 1.5, "4", None])
def test_bad_dimensions_refused(field: str, bad: Any) -> None:
    kw: dict[str, Any] = {
        "num_blocks": 2,
        "block_size": 2,
        "num_layers": 2,
        "num_kv_heads": 2,
        "head_dim": 2,
    }
    kw[field] = bad
    with pytest.raises(ConfigError, match=field):
        PoolSpec(**kw)


def test_layout_from_string_and_bad_layout() -> None:
    spec = PoolSpec(1, 1, 1, 1, 1, layout="layer_major")  # type: ignore[arg-type]
    assert spec.layout is Layout.LAYER_MAJOR
    with pytest.raises(ConfigError, match="diagonal"):
        PoolSpec(1, 1, 1, 1, 1, layout="diagonal")  # type: ignore[arg-type]


def test_fitting_and_check_fits() -> None:
    spec = PoolSpec.from_preset("llama-3-8b", num_blocks=1, block_size=16)
    fitted = spec.fitting(10 * spec.bytes_per_block + 5)
    assert fitted.num_blocks == 10
    fitted.check_fits(fitted.total_bytes)
    with pytest.raises(PoolTooLargeError) as info:
        fitted.check_fits(fitted.total_bytes - 1, "device free memory")
    assert info.value.source == "device free memory"
    assert "device free memory" in str(info.value)
    with pytest.raises(PoolTooLargeError):
        spec.fitting(spec.bytes_per_block - 1)


@given(spec=pool_specs())
def test_size_identities(spec: PoolSpec) -> None:
    item = spec.itemsize
    assert spec.total_bytes == math.prod(spec.pool_shape) * item
    assert spec.bytes_per_block == math.prod(spec.block_shape) * item
    assert spec.num_layers * math.prod(spec.layer_shape) * item == spec.total_bytes
    assert spec.bytes_per_block == 2 * spec.num_layers * spec.chunk_bytes
    assert spec.num_segments * spec.segment_bytes == spec.bytes_per_block
    assert spec.buffer_bytes(3) == math.prod(spec.buffer_shape(3)) * item
    assert spec.with_blocks(7).total_bytes == 7 * spec.bytes_per_block


def test_format_bytes() -> None:
    assert format_bytes(100) == "100 B"
    assert format_bytes(128 * KIB) == "128.0 KiB"
    assert format_bytes(3 * 2**30) == "3.0 GiB"
