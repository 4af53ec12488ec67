"""Models: what a planner names with ``--model``, and the dimensions the figures need.

Two kinds of figure need a model:

* **sizing** -- bytes of KV cache per token, hence per block, hence GiB for a
  capacity: ``layers * 2 * kv_heads * head_dim * dtype bytes`` (K and V), or for
  multi-head latent attention (DeepSeek's MLA, which caches one compressed latent and
  a shared rotary key a token and layer) ``layers * (kv_lora_rank + qk_rope_head_dim)
  * dtype bytes``.
* **the service model** (:mod:`~kachedb_radix.spec.simulate.plan.cost`) -- the FLOPs
  of a forward pass and the bytes of weights a decode step reads: the parameters a
  token multiplies through (the layers' matrices, embeddings aside; for a
  mixture-of-experts model the *active* ones: attention, the shared experts and the
  ``num_experts_per_tok`` routed ones), the attention width (query heads x head dim),
  the vocabulary (the logits' matmul), all the weights (every expert is read from
  HBM in a step that routes to it; a decode batch routes to nearly all), and the
  weights' and compute dtypes.

**Where a model comes from.** Three ways, all giving a :class:`ModelShape`:

1. a preset's name (:data:`MODELS`): the Llama 3 family (3, 3.1, 3.2, 3.3), Qwen3
   (dense 0.6B to 32B, MoE 30B-A3B and 235B-A22B), DeepSeek V3 and R1, Mistral 7B,
   Nemo, Small 3 and Large 2, Mixtral 8x7B and 8x22B. Each is its Hugging Face
   ``config.json`` (the repository is named in :data:`CONFIGS`), reduced to the keys
   below and read by :func:`from_config`, so a preset and ``--model
   path/to/config.json`` of the same model agree; the three ``llama-3-*`` names take
   their KV dimensions from the block pool's presets
   (:data:`kachedb_radix.reference.blockpool.PRESETS`), so the simulator and the pool
   never disagree about their KV size;
2. ``--model path/to/config.json``: any Hugging Face config (a ``text_config`` inside
   a multimodal one is used). Keys read: ``num_hidden_layers``, ``hidden_size``,
   ``num_attention_heads``, ``num_key_value_heads`` (default: the heads),
   ``head_dim`` (default ``hidden_size / num_attention_heads``), ``vocab_size``,
   ``intermediate_size``, ``tie_word_embeddings``, ``torch_dtype`` (or ``dtype``),
   ``quantization_config.quant_method`` (``fp8``: FP8 weights and matmuls); MLA's
   ``kv_lora_rank``, ``q_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``,
   ``v_head_dim``; mixtures of experts' ``n_routed_experts`` / ``num_experts`` /
   ``num_local_experts``, ``num_experts_per_tok``, ``moe_intermediate_size``,
   ``n_shared_experts`` or ``shared_expert_intermediate_size``, and which layers are
   dense (``first_k_dense_replace``, ``mlp_only_layers``, ``decoder_sparse_step``).
   The parameter count is computed from them (:func:`count_parameters`: gated MLPs,
   norms and routers included; the presets' computed totals are within 1% of the
   published ones, tested);
3. a shape: ``--model layers=80,kv_heads=8,head_dim=128,dtype=fp8`` (sizing only),
   plus ``hidden=8192,heads=64,vocab=128256,params=70.6e9`` (and optionally
   ``weights=fp8``, ``active=`` for a mixture of experts) for the service model.

The KV dtype is the model's (``torch_dtype``) unless ``--kv-dtype`` says otherwise
(``fp8``: vLLM's ``--kv-cache-dtype fp8``). Cost: O(1) everything (a config file is
read once, through :func:`kachedb_radix.spec.inputs.read_json`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kachedb_radix.reference.blockpool import PRESETS, KVDType
from kachedb_radix.reference.blockpool.errors import ConfigError

from ...inputs import InputError, read_json
from ..errors import SimulateError

#: Bytes of one element of each dtype a model's weights or compute may use.
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
#: ``torch_dtype`` names as configs spell them.
TORCH_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float8_e4m3fn": "fp8"}


@dataclass(frozen=True)
class ModelShape:
    """A model's dimensions (see the module docstring).

    Attributes:
        name: the preset's name, the config's, or ``custom``.
        layers, kv_heads, head_dim, kv_dtype: the KV cache's dimensions.
        hidden, heads, vocab, params: the service model's (0 when not given).
        weight_dtype: the weights' element type (``bf16``, ``fp8``, ...).
        compute_dtype: the tensor-core rate the matmuls run at (``bf16`` or ``fp8``).
        active_params: parameters a token multiplies through, embeddings included (a
            mixture of experts' active ones; 0: ``params``).
        kv_latent: MLA's cached width a token and layer (``kv_lora_rank +
            qk_rope_head_dim``; 0: K and V of ``kv_heads x head_dim``).
        attention_dim: a layer's attention width, query heads x head dim (0: ``heads
            x head_dim``; MLA's is the mean of its query-key and value widths).
        tied: the output head shares the input embedding's weights.
        source: where its dimensions come from.
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
    active_params: float = 0.0
    kv_latent: int = 0
    attention_dim: int = 0
    tied: bool = False
    source: str = ""

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V (or MLA's latent) of one token over every layer, in bytes. O(1)."""
        itemsize = KVDType.parse(self.kv_dtype).itemsize
        if self.kv_latent:
            return self.layers * self.kv_latent * itemsize
        return self.layers * 2 * self.kv_heads * self.head_dim * itemsize

    @property
    def can_serve(self) -> bool:
        """Whether the service model's dimensions are known. O(1)."""
        return self.hidden > 0 and self.heads > 0 and self.vocab > 0 and self.params > 0

    @property
    def attention_width(self) -> int:
        """Query heads x head dimension: the width of QK^T and AV per layer. O(1)."""
        return self.attention_dim or self.heads * self.head_dim

    @property
    def layer_params(self) -> float:
        """Parameters one token multiplies through in the layers (its active ones;
        embedding and output head aside). O(1)."""
        embeddings = (1 if self.tied else 2) * self.vocab * self.hidden
        return (self.active_params or self.params) - embeddings

    @property
    def weight_bytes(self) -> float:
        """Bytes of all the weights (what a forward pass reads once). O(1)."""
        return self.params * DTYPE_BYTES[self.weight_dtype]

    def describe(self) -> str:
        """``llama-3-70b-fp8 (80 layers, 8 KV heads x 128, fp8 KV: 160 KiB/token)``. O(1)."""
        size = self.kv_bytes_per_token
        per_token = f"{size / 1024:g} KiB" if size >= 1024 else f"{size} B"
        heads = (
            f"MLA latent {self.kv_latent}"
            if self.kv_latent
            else f"{self.kv_heads} KV heads x {self.head_dim}"
        )
        return f"{self.name} ({self.layers} layers, {heads}, {self.kv_dtype} KV: {per_token}/token)"


# ---------------------------------------------------------------------- configs


def _number(config: dict[str, Any], key: str, default: int | None = None) -> int:
    """A whole number >= 0 of ``config``'s, or ``default``.

    Raises:
        SimulateError: missing without a default, or not a whole number >= 0.
    """
    value = config.get(key, default)
    if value is None:
        raise SimulateError(f"--model: the config has no {key!r}")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SimulateError(f"--model: the config's {key!r} is {value!r}, not a whole number >= 0")
    return value


def _experts(config: dict[str, Any]) -> tuple[int, int]:
    """Routed experts and experts a token (0, 0 for a dense model). O(1)."""
    for key in ("n_routed_experts", "num_experts", "num_local_experts"):
        if config.get(key):
            return _number(config, key), _number(config, "num_experts_per_tok", 1)
    return 0, 0


def _dense_layers(config: dict[str, Any], layers: int) -> int:
    """How many of a mixture of experts' layers keep a dense MLP. O(layers)."""
    if "first_k_dense_replace" in config:
        return min(layers, _number(config, "first_k_dense_replace"))
    dense = set(config.get("mlp_only_layers") or [])
    step = max(1, _number(config, "decoder_sparse_step", 1))
    return sum(1 for layer in range(layers) if layer in dense or (layer + 1) % step)


def _attention_params(config: dict[str, Any], hidden: int, heads: int) -> tuple[float, int]:
    """A layer's attention parameters and its attention width (module docstring). O(1)."""
    if config.get("kv_lora_rank"):  # MLA
        rank = _number(config, "kv_lora_rank")
        rope = _number(config, "qk_rope_head_dim")
        query_key = _number(config, "qk_nope_head_dim") + rope
        value = _number(config, "v_head_dim")
        q_rank = config.get("q_lora_rank") or 0
        query = (
            hidden * q_rank + q_rank * heads * query_key if q_rank else hidden * heads * query_key
        )
        keys = hidden * (rank + rope) + rank * heads * (query_key - rope + value)
        return query + keys + heads * value * hidden + q_rank + rank, heads * (
            query_key + value
        ) // 2
    head_dim = _number(config, "head_dim", hidden // heads)
    kv_heads = _number(config, "num_key_value_heads", heads)
    width = heads * head_dim
    params = 2 * hidden * width + 2 * hidden * kv_heads * head_dim
    if config.get("attention_bias") or config.get("qkv_bias"):
        params += width + 2 * kv_heads * head_dim
    return params, width


def count_parameters(config: dict[str, Any]) -> tuple[float, float]:
    """``(total, active)`` parameters of a Hugging Face config (module docstring):
    attention, gated MLPs (dense, routed and shared experts, the router), two norms a
    layer, the embeddings and the output head unless tied. O(layers).

    Raises:
        SimulateError: a dimension missing or not a whole number.
    """
    hidden = _number(config, "hidden_size")
    layers = _number(config, "num_hidden_layers")
    heads = _number(config, "num_attention_heads")
    vocab = _number(config, "vocab_size")
    attention, _ = _attention_params(config, hidden, max(heads, 1))
    dense_mlp = 3 * hidden * _number(config, "intermediate_size", 0)
    experts, per_token = _experts(config)
    total = active = 0.0
    if experts:
        expert = (
            3
            * hidden
            * _number(config, "moe_intermediate_size", _number(config, "intermediate_size", 0))
        )
        shared = expert * _number(config, "n_shared_experts", 0)
        shared += 3 * hidden * _number(config, "shared_expert_intermediate_size", 0)
        dense = _dense_layers(config, layers)
        sparse = layers - dense
        router = hidden * experts
        total += sparse * (attention + experts * expert + shared + router)
        active += sparse * (attention + per_token * expert + shared + router)
        layers = dense
    total += layers * (attention + dense_mlp)
    active += layers * (attention + dense_mlp)
    norms = 2 * hidden * _number(config, "num_hidden_layers") + hidden
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    return total + norms + embeddings, active + norms + embeddings


def _dtype(config: dict[str, Any]) -> str:
    label = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    return TORCH_DTYPES.get(label, "bf16")


def from_config(
    config: dict[str, Any], name: str, source: str, kv_dtype: str | None = None
) -> ModelShape:
    """The shape of a Hugging Face ``config.json`` (already parsed; a multimodal one's
    ``text_config``). O(layers).

    Raises:
        SimulateError: a dimension missing, not a whole number, or impossible.
    """
    if isinstance(config.get("text_config"), dict):
        config = {"torch_dtype": _dtype(config), **config["text_config"]}
    hidden = _number(config, "hidden_size")
    heads = _number(config, "num_attention_heads")
    if not hidden or not heads or not _number(config, "num_hidden_layers"):
        raise SimulateError(
            "--model: the config's hidden_size, num_attention_heads and num_hidden_layers "
            "must be >= 1"
        )
    total, active = count_parameters(config)
    _, width = _attention_params(config, hidden, heads)
    quant = config.get("quantization_config")
    fp8 = isinstance(quant, dict) and str(quant.get("quant_method", "")).lower() == "fp8"
    weights = "fp8" if fp8 else _dtype(config)
    latent = 0
    if config.get("kv_lora_rank"):
        latent = _number(config, "kv_lora_rank") + _number(config, "qk_rope_head_dim")
    shape = ModelShape(
        name=name,
        layers=_number(config, "num_hidden_layers"),
        kv_heads=1 if latent else _number(config, "num_key_value_heads", heads),
        head_dim=latent or _number(config, "head_dim", hidden // heads),
        kv_dtype=kv_dtype or ("bf16" if weights == "fp8" else weights),
        hidden=hidden,
        heads=heads,
        vocab=_number(config, "vocab_size"),
        params=total,
        weight_dtype=weights,
        compute_dtype="fp8" if fp8 else "bf16",
        active_params=active if active < total else 0.0,
        kv_latent=latent,
        attention_dim=width if latent else 0,
        tied=bool(config.get("tie_word_embeddings")),
        source=source,
    )
    return shape


def read_config(path: Path, kv_dtype: str | None = None) -> ModelShape:
    """The shape of the Hugging Face ``config.json`` at ``path``. O(its size).

    Raises:
        SimulateError: unreadable, not a JSON object, or a dimension missing or bad.
    """
    try:
        config = read_json(path, "model config")
    except InputError as error:
        raise SimulateError(f"--model: {error}") from None
    if not isinstance(config, dict):
        raise SimulateError(f"--model: model config {path}: not a JSON object")
    folder = path.parent.name if path.name == "config.json" else ""  # a checkout's folder
    name = str(config.get("_name_or_path") or folder or path.stem)
    return from_config(config, name.rsplit("/", 1)[-1].lower() or "custom", str(path), kv_dtype)


def _llama(layers: int, hidden: int, heads: int, inter: int, **more: Any) -> dict[str, Any]:
    config = {"num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
              "num_key_value_heads": 8, "intermediate_size": inter, "vocab_size": 128256,
              "torch_dtype": "bfloat16"}  # fmt: skip
    return config | more


def _qwen3(layers: int, hidden: int, heads: int, inter: int, **more: Any) -> dict[str, Any]:
    config = {"num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
              "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": inter,
              "vocab_size": 151936, "torch_dtype": "bfloat16"}  # fmt: skip
    return config | more


_DEEPSEEK_V3 = {
    "num_hidden_layers": 61, "hidden_size": 7168, "num_attention_heads": 128,
    "num_key_value_heads": 128, "intermediate_size": 18432, "moe_intermediate_size": 2048,
    "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
    "first_k_dense_replace": 3, "q_lora_rank": 1536, "kv_lora_rank": 512,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
    "torch_dtype": "bfloat16", "quantization_config": {"quant_method": "fp8"},
}  # fmt: skip


def _mistral(
    layers: int, hidden: int, heads: int, inter: int, vocab: int, **more: Any
) -> dict[str, Any]:
    config = {"num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
              "num_key_value_heads": 8, "intermediate_size": inter, "vocab_size": vocab,
              "torch_dtype": "bfloat16"}  # fmt: skip
    return config | more


#: Each preset's config.json, reduced to the keys :func:`from_config` reads, and the
#: Hugging Face repository it comes from; with the parameter count the model's card
#: publishes (a test keeps :func:`count_parameters` within 1% of it).
CONFIGS: dict[str, tuple[str, dict[str, Any], float]] = {
    "llama-3.1-8b": ("meta-llama/Llama-3.1-8B", _llama(32, 4096, 32, 14336), 8.03e9),
    "llama-3.1-70b": ("meta-llama/Llama-3.1-70B", _llama(80, 8192, 64, 28672), 70.6e9),
    "llama-3.1-405b": ("meta-llama/Llama-3.1-405B", _llama(126, 16384, 128, 53248), 405.9e9),
    "llama-3.2-1b": ("meta-llama/Llama-3.2-1B",
                     _llama(16, 2048, 32, 8192, head_dim=64, tie_word_embeddings=True), 1.24e9),
    "llama-3.2-3b": ("meta-llama/Llama-3.2-3B",
                     _llama(28, 3072, 24, 8192, head_dim=128, tie_word_embeddings=True), 3.21e9),
    "llama-3.3-70b": ("meta-llama/Llama-3.3-70B-Instruct", _llama(80, 8192, 64, 28672), 70.6e9),
    "qwen3-0.6b": ("Qwen/Qwen3-0.6B",
                   _qwen3(28, 1024, 16, 3072, tie_word_embeddings=True), 0.596e9),
    "qwen3-1.7b": ("Qwen/Qwen3-1.7B", _qwen3(28, 2048, 16, 6144, tie_word_embeddings=True), 1.72e9),
    "qwen3-4b": ("Qwen/Qwen3-4B", _qwen3(36, 2560, 32, 9728, tie_word_embeddings=True), 4.02e9),
    "qwen3-8b": ("Qwen/Qwen3-8B", _qwen3(36, 4096, 32, 12288), 8.19e9),
    "qwen3-14b": ("Qwen/Qwen3-14B", _qwen3(40, 5120, 40, 17408), 14.8e9),
    "qwen3-32b": ("Qwen/Qwen3-32B", _qwen3(64, 5120, 64, 25600), 32.8e9),
    "qwen3-30b-a3b": ("Qwen/Qwen3-30B-A3B",
                      _qwen3(48, 2048, 32, 6144, num_key_value_heads=4, num_experts=128,
                             num_experts_per_tok=8, moe_intermediate_size=768), 30.5e9),
    "qwen3-235b-a22b": ("Qwen/Qwen3-235B-A22B",
                        _qwen3(94, 4096, 64, 12288, num_key_value_heads=4, num_experts=128,
                               num_experts_per_tok=8, moe_intermediate_size=1536), 235e9),
    "deepseek-v3": ("deepseek-ai/DeepSeek-V3", _DEEPSEEK_V3, 671e9),
    "deepseek-r1": ("deepseek-ai/DeepSeek-R1", _DEEPSEEK_V3, 671e9),
    "mistral-7b": ("mistralai/Mistral-7B-v0.3", _mistral(32, 4096, 32, 14336, 32768), 7.25e9),
    "mistral-nemo-12b": ("mistralai/Mistral-Nemo-Base-2407",
                         _mistral(40, 5120, 32, 14336, 131072, head_dim=128), 12.2e9),
    "mistral-small-24b": ("mistralai/Mistral-Small-24B-Base-2501",
                          _mistral(40, 5120, 32, 32768, 131072, head_dim=128), 23.6e9),
    "mistral-large-123b": ("mistralai/Mistral-Large-Instruct-2411",
                           _mistral(88, 12288, 96, 28672, 32768, head_dim=128), 123e9),
    "mixtral-8x7b": ("mistralai/Mixtral-8x7B-v0.1",
                     _mistral(32, 4096, 32, 14336, 32000, num_local_experts=8,
                              num_experts_per_tok=2), 46.7e9),
    "mixtral-8x22b": ("mistralai/Mixtral-8x22B-v0.1",
                      _mistral(56, 6144, 48, 16384, 32768, num_local_experts=8,
                               num_experts_per_tok=2), 141e9),
}  # fmt: skip


def _pool_preset(kv: str, hidden: int, heads: int, params: float, weights: str) -> ModelShape:
    """A block pool preset (its KV dimensions) with the service model's dimensions."""
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
        compute_dtype=weights,
        source=f"meta-llama/Meta-Llama-3-{kv.split('-')[2].upper()} and the block pool's "
        f"{kv!r} preset",
    )


#: The presets, by name (see the module docstring).
MODELS: dict[str, ModelShape] = {
    "llama-3-8b": _pool_preset("llama-3-8b", 4096, 32, 8.03e9, "bf16"),
    "llama-3-70b": _pool_preset("llama-3-70b", 8192, 64, 70.6e9, "bf16"),
    "llama-3-70b-fp8": _pool_preset("llama-3-70b-fp8", 8192, 64, 70.6e9, "fp8"),
    **{name: from_config(config, name, repo) for name, (repo, config, _) in CONFIGS.items()},
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
    "active": "active_params",
}


def parse_model(text: str, kv_dtype: str | None = None) -> ModelShape:
    """A preset's name, a ``config.json`` path, or ``key=value,...`` (see the module
    docstring); ``kv_dtype`` overrides the KV dtype. O(len(text)), or the file's size.

    Raises:
        SimulateError: an unknown preset or key, a missing KV dimension, a bad value,
            a config that cannot be read or lacks a dimension.
    """
    name = text.strip().lower()
    if kv_dtype is not None:
        try:
            KVDType.parse(kv_dtype)
        except ConfigError as error:
            raise SimulateError(f"--kv-dtype: {error}") from None
    if name in MODELS:
        found = MODELS[name]
        return found if kv_dtype is None else replace(found, kv_dtype=kv_dtype)
    if "=" not in name:
        path = Path(text.strip())
        if path.suffix == ".json" or path.exists():
            return read_config(path, kv_dtype)
        raise SimulateError(
            f"--model: unknown model {text!r}; presets: {', '.join(MODELS)}; or a config.json; "
            "or layers=,kv_heads=,head_dim=,dtype= (and hidden=,heads=,vocab=,params= for TTFT)"
        )
    return _parse_shape(text, name, kv_dtype)


def _parse_shape(text: str, name: str, kv_dtype: str | None) -> ModelShape:
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
    for key in (
        "layers",
        "kv_heads",
        "head_dim",
        "hidden",
        "heads",
        "vocab",
        "params",
        "active_params",
    ):
        if key in given:
            try:
                numbers[key] = float(given[key])
            except ValueError:
                raise SimulateError(f"--model: {key}={given[key]!r} is not a number") from None
            whole = key not in ("params", "active_params")
            if not (math.isfinite(numbers[key]) and numbers[key] >= 1) or (
                whole and numbers[key] != int(numbers[key])
            ):
                raise SimulateError(
                    f"--model: {key} must be a finite {'whole ' if whole else ''}number >= 1"
                )
    kv = kv_dtype or given.get("kv_dtype", "bf16")
    weights = given.get("weight_dtype", "fp8" if kv.startswith("fp8") else "bf16")
    try:
        KVDType.parse(kv)
    except ConfigError as error:
        raise SimulateError(f"--model: {error}") from None
    if weights not in DTYPE_BYTES:
        raise SimulateError(f"--model: weights must be one of {', '.join(DTYPE_BYTES)}")
    shape = ModelShape(
        name="custom",
        layers=int(numbers["layers"]),
        kv_heads=int(numbers["kv_heads"]),
        head_dim=int(numbers["head_dim"]),
        kv_dtype=kv,
        hidden=int(numbers.get("hidden", 0)),
        heads=int(numbers.get("heads", 0)),
        vocab=int(numbers.get("vocab", 0)),
        params=numbers.get("params", 0.0),
        weight_dtype=weights,
        compute_dtype="fp8" if weights == "fp8" else "bf16",
        active_params=numbers.get("active_params", 0.0),
        source="given on the command line",
    )
    if shape.can_serve and shape.layer_params <= 0:
        raise SimulateError("--model: params must exceed the embeddings (2 x vocab x hidden)")
    return shape
