"""Models: what a planner names with ``--model``, and the dimensions the figures need.

Two kinds of figure need a model:

* **sizing** -- bytes of KV cache per token, hence per block, hence GiB for a
  capacity. It needs the KV dimensions only: layers, KV heads, head dimension, KV
  dtype (``bytes/token = layers * 2 * kv_heads * head_dim * dtype bytes``, K and V).
  These come from the block pool's presets (:data:`kachedb_radix.reference.blockpool.PRESETS`),
  so the simulator and the pool never disagree about a model's KV size.
* **the service model** (:mod:`~kachedb_radix.spec.simulate.plan.cost`) -- the FLOPs of a
  forward pass and the bytes of weights a decode step reads. It needs more: the
  parameters a token multiplies through (the layers' matrices, embeddings aside), the
  attention width (query heads x head dim), the vocabulary (the logits' matmul) and
  the weights' and compute dtypes.

The presets (:data:`MODELS`), from each model's published configuration
(``config.json`` of meta-llama/Meta-Llama-3-8B and -70B; the FP8 variant as vLLM
serves e.g. neuralmagic/Meta-Llama-3-70B-Instruct-FP8: FP8 weights, activations and
KV cache):

================== ====== ====== ======= ======== ======== ========= ======== =======
name               layers hidden q heads kv heads head dim vocab     params   KV/token
================== ====== ====== ======= ======== ======== ========= ======== =======
llama-3-8b         32     4096   32      8        128      128,256   8.03 B   128 KiB
llama-3-70b        80     8192   64      8        128      128,256   70.6 B   320 KiB
llama-3-70b-fp8    80     8192   64      8        128      128,256   70.6 B   160 KiB
================== ====== ====== ======= ======== ======== ========= ======== =======

``layer_params`` -- what one token multiplies through in the decoder layers -- is the
total less the input embedding and the output head (each ``vocab * hidden``; Llama 3
does not tie them): 6.98 B for 8B, 68.5 B for 70B.

A model of one's own: ``--model layers=80,kv_heads=8,head_dim=128,dtype=fp8``
(sizing only), plus ``hidden=8192,heads=64,vocab=128256,params=70.6e9`` (and
optionally ``weights=fp8``) for the service model. Cost: O(1) everything.
"""

from __future__ import annotations

from dataclasses import dataclass

from kachedb_radix.reference.blockpool import PRESETS, KVDType
from kachedb_radix.reference.blockpool.errors import ConfigError

from ..errors import SimulateError

#: Bytes of one element of each dtype a model's weights or compute may use.
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}


@dataclass(frozen=True)
class ModelShape:
    """A model's dimensions (see the module docstring).

    Attributes:
        name: the preset's name, or ``custom``.
        layers, kv_heads, head_dim, kv_dtype: the KV cache's dimensions.
        hidden, heads, vocab, params: the service model's (0 when not given).
        weight_dtype: the weights' element type (``bf16``, ``fp8``, ...).
        compute_dtype: the tensor-core rate the matmuls run at (``bf16`` or ``fp8``).
    """

    name: str
    layers: int
    kv_heads: int
    head_dim: int
    kv_dtype: str
    hidden: int = 0
    heads: int = 0
    vocab: int = 0
    params: float = 0.0
    weight_dtype: str = "bf16"
    compute_dtype: str = "bf16"

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of one token over every layer, in bytes. O(1)."""
        itemsize = KVDType.parse(self.kv_dtype).itemsize
        return self.layers * 2 * self.kv_heads * self.head_dim * itemsize

    @property
    def can_serve(self) -> bool:
        """Whether the service model's dimensions are known. O(1)."""
        return self.hidden > 0 and self.heads > 0 and self.vocab > 0 and self.params > 0

    @property
    def attention_width(self) -> int:
        """Query heads x head dimension: the width of QK^T and AV per layer. O(1)."""
        return self.heads * self.head_dim

    @property
    def layer_params(self) -> float:
        """Parameters one token multiplies through in the layers (embedding and output
        head aside). O(1)."""
        return self.params - 2.0 * self.vocab * self.hidden

    @property
    def weight_bytes(self) -> float:
        """Bytes of all the weights (what a forward pass reads once). O(1)."""
        return self.params * DTYPE_BYTES[self.weight_dtype]

    def describe(self) -> str:
        """``llama-3-70b-fp8 (80 layers, 8 KV heads x 128, fp8 KV: 160 KiB/token)``. O(1)."""
        size = self.kv_bytes_per_token
        per_token = f"{size / 1024:g} KiB" if size >= 1024 else f"{size} B"
        return (
            f"{self.name} ({self.layers} layers, {self.kv_heads} KV heads x {self.head_dim}, "
            f"{self.kv_dtype} KV: {per_token}/token)"
        )


def _preset(
    kv: str, hidden: int, heads: int, params: float, weights: str, compute: str
) -> ModelShape:
    found = PRESETS[kv]
    return ModelShape(
        name=kv,
        layers=found.num_layers,
        kv_heads=found.num_kv_heads,
        head_dim=found.head_dim,
        kv_dtype="fp8" if found.dtype.itemsize == 1 else found.dtype.label,
        hidden=hidden,
        heads=heads,
        vocab=128_256,
        params=params,
        weight_dtype=weights,
        compute_dtype=compute,
    )


#: The presets, by name (the block pool's, with the service model's dimensions).
MODELS: dict[str, ModelShape] = {
    "llama-3-8b": _preset("llama-3-8b", 4096, 32, 8.03e9, "bf16", "bf16"),
    "llama-3-70b": _preset("llama-3-70b", 8192, 64, 70.6e9, "bf16", "bf16"),
    "llama-3-70b-fp8": _preset("llama-3-70b-fp8", 8192, 64, 70.6e9, "fp8", "fp8"),
}

_KEYS = {
    "layers": "layers",
    "kv_heads": "kv_heads",
    "head_dim": "head_dim",
    "dtype": "kv_dtype",
    "hidden": "hidden",
    "heads": "heads",
    "vocab": "vocab",
    "params": "params",
    "weights": "weight_dtype",
}


def parse_model(text: str) -> ModelShape:
    """A preset's name, or ``key=value,...`` (see the module docstring). O(len(text)).

    Raises:
        SimulateError: an unknown preset or key, a missing KV dimension, a bad value.
    """
    name = text.strip().lower()
    if name in MODELS:
        return MODELS[name]
    if "=" not in name:
        raise SimulateError(
            f"--model: unknown model {text!r}; presets: {', '.join(MODELS)}, or give "
            "layers=,kv_heads=,head_dim=,dtype= (and hidden=,heads=,vocab=,params= for TTFT)"
        )
    given: dict[str, str] = {}
    for item in name.split(","):
        key, _, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if key not in _KEYS or not value.strip():
            raise SimulateError(
                f"--model: {item.strip()!r} is not key=value with a key among {', '.join(_KEYS)}"
            )
        given[_KEYS[key]] = value.strip()
    missing = [key for key in ("layers", "kv_heads", "head_dim") if key not in given]
    if missing:
        raise SimulateError(f"--model: {missing[0]} is missing (layers, kv_heads, head_dim needed)")
    numbers: dict[str, float] = {}
    for key in ("layers", "kv_heads", "head_dim", "hidden", "heads", "vocab", "params"):
        if key in given:
            try:
                numbers[key] = float(given[key])
            except ValueError:
                raise SimulateError(f"--model: {key}={given[key]!r} is not a number") from None
            if not numbers[key] >= 1 or (key != "params" and numbers[key] != int(numbers[key])):
                raise SimulateError(f"--model: {key} must be a whole number >= 1")
    kv_dtype = given.get("kv_dtype", "bf16")
    weights = given.get("weight_dtype", "fp8" if kv_dtype.startswith("fp8") else "bf16")
    try:
        KVDType.parse(kv_dtype)
    except ConfigError as error:
        raise SimulateError(f"--model: {error}") from None
    if weights not in DTYPE_BYTES:
        raise SimulateError(f"--model: weights must be one of {', '.join(DTYPE_BYTES)}")
    shape = ModelShape(
        name="custom",
        layers=int(numbers["layers"]),
        kv_heads=int(numbers["kv_heads"]),
        head_dim=int(numbers["head_dim"]),
        kv_dtype=kv_dtype,
        hidden=int(numbers.get("hidden", 0)),
        heads=int(numbers.get("heads", 0)),
        vocab=int(numbers.get("vocab", 0)),
        params=numbers.get("params", 0.0),
        weight_dtype=weights,
        compute_dtype="fp8" if weights == "fp8" else "bf16",
    )
    if shape.can_serve and shape.layer_params <= 0:
        raise SimulateError("--model: params must exceed the embeddings (2 x vocab x hidden)")
    return shape
