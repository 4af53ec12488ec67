"""GPUs, deployments and sizes: blocks in, GiB and GPUs out (and back).

**GPU classes** (:data:`GPUS`, ``--gpu``), from their makers' datasheets. Datasheets
quote tensor-core rates "with sparsity"; a dense matmul gets half, which is what is
kept here. The host link is one direction of the PCIe x16 link (datasheets quote
both directions added: 128 GB/s for Gen5, 64 GB/s for Gen4); it is what restoring
KV from host memory gets at best. Memory is the datasheet's figure, taken as GiB.

========== ============================ ====== ========= ========= ========== ========== ==========
name       part                         memory HBM       host link BF16 dense FP8 dense  GPU link
========== ============================ ====== ========= ========= ========== ========== ==========
h100       H100 SXM5 80 GB              80     3.35 TB/s 64 GB/s   989 TF/s   1,979 TF/s 900 GB/s
h100-pcie  H100 PCIe 80 GB              80     2.0 TB/s  64 GB/s   756 TF/s   1,513 TF/s 600 GB/s
h200       H200 SXM 141 GB              141    4.8 TB/s  64 GB/s   989 TF/s   1,979 TF/s 900 GB/s
b200       B200 180 GB (HGX)            180    8 TB/s    64 GB/s   2,250 TF/s 4,500 TF/s 1.8 TB/s
a100       A100 SXM4 80 GB              80     2.04 TB/s 32 GB/s   312 TF/s   --         600 GB/s
a100-40gb  A100 SXM4 40 GB              40     1.56 TB/s 32 GB/s   312 TF/s   --         600 GB/s
l40s       L40S 48 GB (PCIe)            48     864 GB/s  32 GB/s   362 TF/s   733 TF/s   --
mi300x     MI300X 192 GB (OAM)          192    5.3 TB/s  64 GB/s   1,307 TF/s 2,615 TF/s 896 GB/s
========== ============================ ====== ========= ========= ========== ========== ==========

Also named: ``h100-sxm`` (``h100``), ``a100-80gb`` (``a100``).

Sources: "NVIDIA H100 Tensor Core GPU" datasheet (SXM: BF16 1,979 and FP8 3,958
TFLOPS with sparsity, 3.35 TB/s, NVLink 900 GB/s, PCIe Gen5 128 GB/s; PCIe card: 80 GB
HBM2e at 2 TB/s, BF16 1,513 and FP8 3,026 TFLOPS with sparsity, NVLink bridge 600
GB/s); "NVIDIA H200 Tensor Core GPU" datasheet (SXM: 141 GB HBM3e, 4.8 TB/s, the same
tensor rates and links); "NVIDIA DGX B200" and "HGX B200" datasheets (8 GPUs: 1,440 GB
of HBM3e, 64 TB/s, FP8 72 and BF16 36 PFLOPS with sparsity, fifth-generation NVLink
1.8 TB/s a GPU, PCIe Gen5 to the host); "NVIDIA A100 Tensor Core GPU" datasheet (80 GB
SXM: 2,039 GB/s; 40 GB SXM: 1,555 GB/s; BF16 312 / 624 with sparsity, NVLink 600 GB/s,
PCIe Gen4 64 GB/s; no FP8: an FP8 model's matmuls run at the BF16 rate); "NVIDIA L40S"
datasheet (48 GB GDDR6, 864 GB/s, BF16 362.05 / 733, FP8 733 / 1,466 TFLOPS, PCIe Gen4
x16 64 GB/s bidirectional); "AMD Instinct MI300X Accelerator" data sheet (192 GB HBM3,
5.3 TB/s, FP16/BF16 1,307.4 / 2,614.9 and FP8 2,614.9 / 5,229.8 TFLOPS with sparsity,
Infinity Fabric 896 GB/s peer to peer, PCIe Gen5 x16 128 GB/s).

**A deployment** (:class:`Deployment`): each worker is one model replica on
``gpus`` GPUs (tensor parallel). Its KV budget is what vLLM's
``gpu_memory_utilization`` leaves, less the weights and a reserve for activations
and the runtime::

    kv bytes per worker = gpus * (memory * mem_util - reserve) - weight bytes

and a GPU's share of it is that over ``gpus``. "K GPUs of this class" for a pool of
G bytes is ``G / (kv bytes per GPU)``: how many such GPUs' HBM the pool fills.

**Sizes** (:class:`Sizing`): a tree block is ``tokens_per_block`` real tokens (512
for a Mooncake hash id, B for a token trace), so it takes ``tokens_per_block *
kv_bytes_per_token`` bytes (a partial last block takes a whole one, as in a paged
pool). ``--capacity`` accepts blocks (``20k``), tokens (``2Mtok``), bytes (``64GiB``,
``2TiB``, ``500GB``) and GPUs (``8gpu``), each floored to whole blocks.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..errors import SimulateError
from .models import ModelShape

GIB = 1024**3


@dataclass(frozen=True)
class GpuClass:
    """One GPU class's figures (see the module docstring); rates are dense, per GPU."""

    name: str
    part: str
    memory_gib: float
    hbm_bytes_per_s: float
    host_bytes_per_s: float
    nvlink_bytes_per_s: float
    bf16_flops: float
    fp8_flops: float | None
    source: str

    def peak_flops(self, dtype: str) -> float:
        """Dense tensor FLOP/s for ``dtype`` (``fp8`` falls back to BF16 without FP8). O(1)."""
        if dtype == "fp8" and self.fp8_flops is not None:
            return self.fp8_flops
        return self.bf16_flops


GPUS: dict[str, GpuClass] = {
    gpu.name: gpu
    for gpu in (
        GpuClass("h100", "H100 SXM5 80 GB", 80, 3.35e12, 64e9, 900e9, 989e12, 1979e12,
                 "NVIDIA H100 Tensor Core GPU datasheet (SXM5)"),
        GpuClass("h100-pcie", "H100 PCIe 80 GB", 80, 2.0e12, 64e9, 600e9, 756e12, 1513e12,
                 "NVIDIA H100 Tensor Core GPU datasheet (PCIe)"),
        GpuClass("h200", "H200 SXM 141 GB", 141, 4.8e12, 64e9, 900e9, 989e12, 1979e12,
                 "NVIDIA H200 Tensor Core GPU datasheet (SXM)"),
        GpuClass("b200", "B200 180 GB (HGX)", 180, 8.0e12, 64e9, 1800e9, 2250e12, 4500e12,
                 "NVIDIA DGX B200 / HGX B200 datasheets (a GPU's share)"),
        GpuClass("a100", "A100 SXM4 80 GB", 80, 2.039e12, 32e9, 600e9, 312e12, None,
                 "NVIDIA A100 Tensor Core GPU datasheet (80 GB SXM)"),
        GpuClass("a100-40gb", "A100 SXM4 40 GB", 40, 1.555e12, 32e9, 600e9, 312e12, None,
                 "NVIDIA A100 Tensor Core GPU datasheet (40 GB SXM)"),
        GpuClass("l40s", "L40S 48 GB", 48, 864e9, 32e9, 0.0, 362.05e12, 733e12,
                 "NVIDIA L40S datasheet"),
        GpuClass("mi300x", "MI300X 192 GB", 192, 5.3e12, 64e9, 896e9, 1307.4e12, 2614.9e12,
                 "AMD Instinct MI300X Accelerator data sheet"),
    )
}  # fmt: skip
#: Other names of the same classes.
ALIASES = {"h100-sxm": "h100", "a100-80gb": "a100"}
#: Every name ``--gpu`` takes.
GPU_NAMES = (*GPUS, *ALIASES)


def get_gpu(name: str) -> GpuClass:
    """The GPU class named ``name`` (case-insensitive). O(1).

    Raises:
        SimulateError: an unknown name.
    """
    word = name.strip().lower()
    try:
        return GPUS[ALIASES.get(word, word)]
    except KeyError:
        raise SimulateError(f"--gpu: unknown GPU {name!r}; known: {', '.join(GPU_NAMES)}") from None


@dataclass(frozen=True)
class Deployment:
    """A model on workers of ``gpus`` GPUs each (see the module docstring).

    Raises:
        SimulateError: a count, utilisation or reserve out of range, or weights that
            leave no room for KV.
    """

    model: ModelShape
    gpu: GpuClass
    gpus: int = 1
    mem_util: float = 0.9
    reserve_gib: float = 2.0

    def __post_init__(self) -> None:
        if self.gpus < 1:
            raise SimulateError(f"--gpus must be >= 1, got {self.gpus}")
        if not 0 < self.mem_util <= 1:
            raise SimulateError(f"--gpu-mem-util must be in (0, 1], got {self.mem_util}")
        if not self.reserve_gib >= 0:
            raise SimulateError(f"--gpu-reserve must be >= 0 GiB, got {self.reserve_gib}")
        if self.kv_bytes_per_worker <= 0:
            usable = self.gpus * (self.gpu.memory_gib * self.mem_util - self.reserve_gib)
            raise SimulateError(
                f"{self.model.name}'s weights ({self.model.weight_bytes / GIB:,.1f} GiB) leave no "
                f"room for KV on {self.gpus} x {self.gpu.part} ({usable:,.1f} GiB usable at "
                f"--gpu-mem-util {self.mem_util:g}): give more --gpus"
            )

    @property
    def kv_bytes_per_worker(self) -> float:
        """KV bytes one worker (replica) holds. O(1)."""
        per_gpu = (self.gpu.memory_gib * self.mem_util - self.reserve_gib) * GIB
        return self.gpus * per_gpu - self.model.weight_bytes

    @property
    def kv_bytes_per_gpu(self) -> float:
        """One GPU's share of a worker's KV budget. O(1)."""
        return self.kv_bytes_per_worker / self.gpus

    def describe(self) -> str:
        """``8 x H100 SXM5 80 GB per worker, 0.9 of memory: 62.0 GiB of KV per GPU``. O(1)."""
        return (
            f"{self.gpus} x {self.gpu.part} per worker at --gpu-mem-util {self.mem_util:g}, "
            f"{self.reserve_gib:g} GiB reserved per GPU: {self.kv_bytes_per_gpu / GIB:,.1f} GiB "
            f"of KV per GPU after the weights"
        )


@dataclass(frozen=True)
class Sizing:
    """Blocks <-> tokens <-> bytes <-> GPUs for one trace (see the module docstring).

    Attributes:
        tokens_per_block: real tokens per tree block.
        model: the model, or None (then only blocks and tokens).
        deployment: the GPUs, or None (then no GPU counts).
    """

    tokens_per_block: int
    model: ModelShape | None = None
    deployment: Deployment | None = None

    @property
    def block_bytes(self) -> int | None:
        """Bytes of one tree block, or None without a model. O(1)."""
        if self.model is None:
            return None
        return self.tokens_per_block * self.model.kv_bytes_per_token

    def tokens(self, blocks: float) -> float:
        """Real tokens ``blocks`` tree blocks hold. O(1)."""
        return blocks * self.tokens_per_block

    def gib(self, blocks: float) -> float | None:
        """GiB ``blocks`` tree blocks take, or None without a model. O(1)."""
        size = self.block_bytes
        return None if size is None else blocks * size / GIB

    def gpus(self, blocks: float) -> float | None:
        """GPUs of the deployment's class whose KV budget ``blocks`` fill, or None. O(1)."""
        size = self.block_bytes
        if size is None or self.deployment is None:
            return None
        return blocks * size / self.deployment.kv_bytes_per_gpu

    def worker_blocks(self, workers: int = 1) -> int | None:
        """Tree blocks the KV budget of ``workers`` workers holds, or None without a
        deployment. O(1)."""
        size = self.block_bytes
        if size is None or self.deployment is None:
            return None
        return int(workers * self.deployment.kv_bytes_per_worker // size)

    def describe(self, blocks: float) -> str:
        """``31,800 blocks = 2.43 TiB = 40.1 GPUs`` with what is known. O(1)."""
        text = f"{blocks:,.0f} blocks"
        gib = self.gib(blocks)
        if gib is None:
            return text + f" ({format_tokens(self.tokens(blocks))} tokens)"
        text += f" = {format_gib(gib)}"
        gpus = self.gpus(blocks)
        if gpus is not None and self.deployment is not None:
            text += f" = {gpus:,.1f} GPUs of this class ({self.deployment.gpu.part})"
        return text

    def parse(self, text: str, flag: str = "--capacity") -> int:
        """One ``--capacity`` item in blocks (see the module docstring); ``flag`` names
        the option in messages. O(len(text)).

        Raises:
            SimulateError: not a size, a unit the model or GPU is needed for but not
                given, or less than one block.
        """
        word = text.strip().replace("_", "").replace(" ", "")
        match = _SIZE.fullmatch(word)
        if match is None:
            raise SimulateError(
                f"{flag}: {text.strip()!r} is not a whole number of blocks or a size "
                "(expected blocks like 1000 or 20k, tokens like 2Mtok, bytes like 64GiB or "
                "2TB, or GPUs like 8gpu)"
            )
        number = float(match["number"])
        scale = _COUNT_SCALE.get(match["scale"].lower(), 1) if match["scale"] else 1
        unit = match["unit"].lower()
        amount = number * scale
        if unit in ("", "blocks", "block"):
            if amount != int(amount):
                raise SimulateError(
                    f"{flag}: {text.strip()!r} is not a whole number of blocks >= 1 "
                    "(expected a list like 1000,5000,20k)"
                )
            blocks = amount
        elif unit in ("tok", "tokens"):
            blocks = amount / self.tokens_per_block
        elif unit in _BYTES:
            size = self.block_bytes
            if size is None or scale != 1:
                raise SimulateError(f"{flag} {text.strip()}: a size in bytes needs --model")
            blocks = amount * _BYTES[unit] / size
        else:  # gpus
            size = self.block_bytes
            if size is None or self.deployment is None or scale != 1:
                raise SimulateError(f"{flag} {text.strip()}: GPUs need --model and --gpu")
            blocks = amount * self.deployment.kv_bytes_per_gpu / size
        if not blocks >= 1 or math.isinf(blocks):
            raise SimulateError(
                f"{flag}: {text.strip()!r} is not a whole number of blocks >= 1 "
                "(less than one block, or not a size)"
            )
        return int(blocks)


_BYTES = {
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
    "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
}  # fmt: skip
_COUNT_SCALE = {"k": 1_000, "m": 1_000_000}
_SIZE = re.compile(
    r"(?P<number>\d+(?:\.\d*)?|\.\d+)(?P<scale>[kKmM](?![iIbB]))?"
    r"(?P<unit>|blocks?|tok|tokens|[kKmMgGtT][iI]?[bB]|gpus?)",
    re.IGNORECASE,
)


def check_size(text: str) -> None:
    """Refuse a word that is not a size in any unit ``--capacity`` takes (which unit it
    is, and whether the model and GPU it needs are given, is for :meth:`Sizing.parse`).
    O(len(text)).

    Raises:
        SimulateError: not a size.
    """
    word = text.strip().replace("_", "").replace(" ", "")
    if _SIZE.fullmatch(word) is None:
        raise SimulateError(
            f"{text.strip()!r} is not a number of blocks or a size (expected blocks like "
            "1000 or 20k, tokens like 2Mtok, bytes like 64GiB or 2TB, or GPUs like 8gpu)"
        )


def format_gib(gib: float) -> str:
    """``0.5`` -> ``512 MiB``, ``62.04`` -> ``62.0 GiB``, ``2490`` -> ``2.43 TiB``. O(1)."""
    if gib >= 1024:
        return f"{gib / 1024:,.2f} TiB"
    if gib >= 1:
        return f"{gib:,.1f} GiB"
    return f"{gib * 1024:,.0f} MiB"


def format_tokens(tokens: float) -> str:
    """``16384000`` -> ``16.4M``. O(1)."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if tokens >= limit:
            return f"{tokens / limit:.3g}{suffix}"
    return f"{tokens:,.0f}"
