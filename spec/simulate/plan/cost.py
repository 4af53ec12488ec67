"""What one engine step costs on a worker: a roofline from the model and the GPUs.

A worker (one model replica on ``G`` GPUs, tensor parallel) runs *steps*: each step
carries a batch of tokens -- one decode token for every running request past its
prefill, and chunks of prompts still being prefilled (chunked prefill, see
:mod:`~kachedb_radix.spec.simulate.plan.engine`). A step costs the longer of its compute
and its memory traffic, plus a fixed overhead::

    step_ms = overhead_ms + max(compute_ms, memory_ms)

**Compute** (FLOP arithmetic; ``P`` the layers' parameters, ``L`` layers, ``d`` the
attention width = query heads x head dim, ``V`` vocabulary, ``h`` hidden size):

* a prefill chunk of ``k`` tokens at positions ``s+1 .. s+k`` (``s`` tokens before it
  cached or prefilled already)::

      linear    = 2 P k                                 (every matmul, mul + add)
      attention = 4 L d (k s + k (k + 1) / 2)           (QK^T and AV, causal)
      logits    = 2 V h, on the chunk that ends the prompt

  so a whole prompt of ``u`` uncached tokens after ``c`` cached ones costs
  ``2 P u + 4 L d (u c + u (u + 1) / 2)``: cached tokens are skipped by the linear
  term but still attended to -- the quadratic term is why long prompts hurt;
* ``b`` decode tokens whose contexts (each including its new token) add up to ``S``::

      2 (P + V h) b + 4 L d S

  ``compute_ms = FLOPs / (G * peak * mfu)``, ``peak`` the GPU's dense tensor rate at
  the model's compute dtype, ``mfu`` the share of it kernels reach (default 0.5).

**Memory**: the step reads every weight once, and the KV of every context its tokens
attend to, and writes the new tokens' KV::

      bytes = W + kv_bytes_per_token * (S + sum over chunks of (s + k))
      memory_ms = bytes / (G * HBM bandwidth * mbu)          (mbu default 0.7)

Decode is memory-bound (a batch of decodes reads the weights once: batching is
what makes it cheap); long prefill chunks are compute-bound.

**Restore** from a slower tier (``--tiers``, :mod:`~kachedb_radix.spec.simulate.tiers`):
the KV of ``t`` tokens restored from tier ``x`` takes::

      restore_ms(t, x) = latency_ms[x] + t * kv_bytes_per_token / bandwidth[x]

      bandwidth[host] = G * host link            (one direction of PCIe, per GPU)
      bandwidth[disk] = min(G * disk read, G * host link)   (disk -> host -> GPU)

with ``latency_ms`` a fixed cost per restore (default 0.02 ms from host: a DMA's
launch and completion; 0.1 ms from disk: an NVMe read's latency) and the disk read
bandwidth 6.5 GB/s per GPU by default (one PCIe Gen4 x4 NVMe drive per GPU, the DGX
H100's layout: a Gen4 x4 link carries 7.9 GB/s, datacenter Gen4 drives read 6.5-7
GB/s sequentially). The request's prefill waits for its restore.

**Overrides**: ``prefill_tokens_per_s`` replaces the prefill compute term by
``tokens / rate`` (no attention term: the old flat model); ``decode_ms`` makes a
step with any decode token last at least that long, its decode tokens adding no
compute: ``step_ms = overhead + max(compute, memory, decode_ms)``. Every constant
(peak, bandwidths, efficiencies, overhead) can be overridden on the command line.
Cost of the arithmetic: O(1) per chunk.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import SimulateError
from .hardware import Deployment

#: Steps of a solo prefill priced at once (bounds its memory: 8 arrays of this many floats).
SOLO_CHUNK = 1 << 16
#: Disk read bandwidth per GPU of a worker, bytes/s (see the module docstring).
DISK_BYTES_PER_S = 6.5e9
#: A restore's fixed cost from each slower tier, ms (see the module docstring).
HOST_LATENCY_MS = 0.02
DISK_LATENCY_MS = 0.1


@dataclass(frozen=True)
class CostModel:
    """One worker's step costs (see the module docstring). Rates are the worker's
    totals (every GPU of the replica).

    Raises:
        SimulateError: a rate or efficiency out of range.
    """

    layer_params: float
    layers: int
    attention_width: int
    logits_flops: float
    weight_bytes: float
    kv_bytes_per_token: int
    peak_flops: float
    hbm_bytes_per_s: float
    host_bytes_per_s: float
    mfu: float = 0.5
    mbu: float = 0.7
    overhead_ms: float = 2.0
    prefill_tokens_per_s: float | None = None
    decode_ms: float | None = None
    disk_bytes_per_s: float = DISK_BYTES_PER_S
    host_latency_ms: float = HOST_LATENCY_MS
    disk_latency_ms: float = DISK_LATENCY_MS
    #: What it prices: ``llama-3-8b on 1 x H100 SXM5 80 GB``.
    label: str = ""

    def __post_init__(self) -> None:
        for name in ("peak_flops", "hbm_bytes_per_s", "host_bytes_per_s", "disk_bytes_per_s"):
            if not getattr(self, name) > 0:
                raise SimulateError(f"{name.replace('_', ' ')} must be > 0")
        for name in ("host_latency_ms", "disk_latency_ms"):
            if not getattr(self, name) >= 0:
                flag = name.replace("_", "-")
                raise SimulateError(f"--{flag} must be >= 0, got {getattr(self, name)}")
        for name in ("mfu", "mbu"):
            if not 0 < getattr(self, name) <= 1:
                raise SimulateError(f"--{name} must be in (0, 1], got {getattr(self, name)}")
        if not self.overhead_ms >= 0:
            raise SimulateError(f"--step-overhead-ms must be >= 0, got {self.overhead_ms}")
        if self.prefill_tokens_per_s is not None and not self.prefill_tokens_per_s > 0:
            raise SimulateError(f"prefill throughput must be > 0, got {self.prefill_tokens_per_s}")
        if self.decode_ms is not None and not self.decode_ms >= 0:
            raise SimulateError(f"decode time must be >= 0, got {self.decode_ms}")

    @classmethod
    def of(
        cls,
        deployment: Deployment,
        *,
        peak_flops: float | None = None,
        hbm_bytes_per_s: float | None = None,
        host_bytes_per_s: float | None = None,
        disk_bytes_per_s: float | None = None,
        **knobs: float | None,
    ) -> CostModel:
        """The cost model of one worker of ``deployment``; GPU figures and the disk read
        bandwidth may be overridden (per GPU). O(1).

        Raises:
            SimulateError: the model lacks the service model's dimensions.
        """
        model, gpu, count = deployment.model, deployment.gpu, deployment.gpus
        if not model.can_serve:
            raise SimulateError(
                "the timed mode needs the model's hidden=, heads=, vocab= and params= "
                "(give a preset, or add them to --model)"
            )
        return cls(
            layer_params=model.layer_params,
            layers=model.layers,
            attention_width=model.attention_width,
            logits_flops=2.0 * model.vocab * model.hidden,
            weight_bytes=model.weight_bytes,
            kv_bytes_per_token=model.kv_bytes_per_token,
            peak_flops=count * _given(peak_flops, gpu.peak_flops(model.compute_dtype)),
            hbm_bytes_per_s=count * _given(hbm_bytes_per_s, gpu.hbm_bytes_per_s),
            host_bytes_per_s=count * _given(host_bytes_per_s, gpu.host_bytes_per_s),
            disk_bytes_per_s=count * _given(disk_bytes_per_s, DISK_BYTES_PER_S),
            label=f"{model.name} on {count} x {gpu.part}",
            **knobs,  # type: ignore[arg-type]
        )

    # ------------------------------------------------------------------ FLOPs

    def chunk_flops(self, start: int, tokens: int, last: bool) -> float:
        """FLOPs of a prefill chunk of ``tokens`` after ``start`` tokens. O(1)."""
        attention = 4.0 * self.layers * self.attention_width
        quadratic = tokens * start + tokens * (tokens + 1) / 2
        return (
            2.0 * self.layer_params * tokens
            + attention * quadratic
            + (self.logits_flops if last else 0.0)
        )

    def decode_flops(self, batch: int, contexts: int) -> float:
        """FLOPs of ``batch`` decode tokens over ``contexts`` tokens of context. O(1)."""
        attention = 4.0 * self.layers * self.attention_width
        return (2.0 * self.layer_params + self.logits_flops) * batch + attention * contexts

    # ------------------------------------------------------------------ times

    def compute_ms(self, flops: float) -> float:
        """Milliseconds ``flops`` take at the worker's efficient rate. O(1)."""
        return flops * 1000.0 / (self.peak_flops * self.mfu)

    def memory_ms(self, kv_tokens: int) -> float:
        """Milliseconds to read the weights and ``kv_tokens`` tokens of KV. O(1)."""
        moved = self.weight_bytes + self.kv_bytes_per_token * kv_tokens
        return moved * 1000.0 / (self.hbm_bytes_per_s * self.mbu)

    def step_ms(
        self,
        prefill_flops: float,
        prefill_tokens: int,
        decode_batch: int,
        decode_contexts: int,
        kv_tokens: int,
    ) -> float:
        """One step (see the module docstring); ``kv_tokens`` the KV it touches. O(1)."""
        if self.prefill_tokens_per_s is not None:
            compute = prefill_tokens * 1000.0 / self.prefill_tokens_per_s
        else:
            compute = self.compute_ms(prefill_flops)
        floor = 0.0
        if self.decode_ms is not None:
            floor = self.decode_ms if decode_batch else 0.0
        elif decode_batch:
            compute += self.compute_ms(self.decode_flops(decode_batch, decode_contexts))
        return self.overhead_ms + max(compute, self.memory_ms(kv_tokens), floor)

    def prefill_compute_ms(self, cached: int, uncached: int) -> float:
        """The compute a prompt's prefill needs (every chunk together; no overhead, no
        memory term): what the overload check adds up. O(1)."""
        if self.prefill_tokens_per_s is not None:
            return uncached * 1000.0 / self.prefill_tokens_per_s
        return self.compute_ms(self.chunk_flops(cached, uncached, True))

    def restore_bytes_per_s(self, tier: str) -> float:
        """The rate a restore from ``tier`` (``host`` or ``disk``) gets: the host link,
        or the slower of the disk and the host link (a disk block crosses both). O(1).

        Raises:
            SimulateError: not a slower tier.
        """
        if tier == "host":
            return self.host_bytes_per_s
        if tier == "disk":
            return min(self.disk_bytes_per_s, self.host_bytes_per_s)
        raise SimulateError(f"no restore from tier {tier!r}: host or disk")

    def restore_ms(self, tokens: int, tier: str = "host") -> float:
        """Milliseconds to bring ``tokens`` tokens of KV to the device from ``tier``
        (``host`` or ``disk``): its latency, then the bytes at its rate; 0 for none
        (see the module docstring). O(1).

        Raises:
            SimulateError: not a slower tier.
        """
        rate = self.restore_bytes_per_s(tier)
        if tokens <= 0:
            return 0.0
        latency = self.host_latency_ms if tier == "host" else self.disk_latency_ms
        return latency + tokens * self.kv_bytes_per_token * 1000.0 / rate

    def solo_prefill(self, prompt: int, cached: int, budget: int) -> dict[str, float]:
        """A prompt's prefill alone on an idle worker, chunked by ``budget`` tokens a
        step: its FLOPs and time, split into the linear and attention terms. Its steps
        are priced as arrays, :data:`SOLO_CHUNK` at a time: O(prompt / budget) array
        work in memory O(SOLO_CHUNK).
        """
        uncached = max(prompt - cached, 1)
        start = prompt - uncached
        linear = 2.0 * self.layer_params * uncached
        attention = 4.0 * self.layers * self.attention_width
        quadratic = attention * (uncached * start + uncached * (uncached + 1) / 2)
        steps = -(-uncached // budget)
        total_ms = 0.0
        for first in range(0, steps, SOLO_CHUNK):
            done = np.arange(first, min(steps, first + SOLO_CHUNK), dtype=np.float64) * budget
            tokens = np.minimum(float(budget), uncached - done)
            position = start + done
            flops = 2.0 * self.layer_params * tokens + attention * (
                tokens * position + tokens * (tokens + 1) / 2
            )
            flops[-1] += self.logits_flops if first + SOLO_CHUNK >= steps else 0.0
            if self.prefill_tokens_per_s is not None:
                compute = tokens * 1000.0 / self.prefill_tokens_per_s
            else:
                compute = flops * 1000.0 / (self.peak_flops * self.mfu)
            moved = self.weight_bytes + self.kv_bytes_per_token * (position + tokens)
            memory = moved * 1000.0 / (self.hbm_bytes_per_s * self.mbu)
            total_ms += float(np.sum(self.overhead_ms + np.maximum(compute, memory)))
        return {
            "linear_flops": linear,
            "attention_flops": quadratic,
            "compute_ms": self.compute_ms(linear + quadratic + self.logits_flops),
            "steps": float(steps),
            "ms": total_ms,
        }


def _given(override: float | None, datasheet: float) -> float:
    """An override when one is given (0 included: the model refuses it), else the
    datasheet's figure. O(1)."""
    return datasheet if override is None else override
