"""The tiers of a tiered cache, fastest first, and what each is called on the wire.

A tiered cache keeps KV blocks in up to three kinds of memory (R-TIER-1):

* ``device`` -- the accelerator's memory, the only tier attention reads from; always present;
* ``host`` -- the host's DRAM (pinned, on a GPU machine), reached over the host link;
* ``disk`` -- local storage, reached through the host.

Order matters: a tier's victims are demoted to the next *present* tier after it
(R-TIER-3), and a match reports each block in the fastest tier that holds it (R-TIER-5).
In KV events each tier is a ``medium`` (R-TIER-9): vLLM 0.33's own names
(``vllm/distributed/kv_events.py``: ``MEDIUM_GPU``, ``MEDIUM_CPU``, ``MEDIUM_STORAGE``).
"""

from __future__ import annotations

from typing import Final

DEVICE: Final = "device"
HOST: Final = "host"
DISK: Final = "disk"

#: Every tier, fastest first.
TIERS: Final[tuple[str, ...]] = (DEVICE, HOST, DISK)

#: The ``medium`` each tier's KV events carry (R-TIER-9).
MEDIA: Final[dict[str, str]] = {DEVICE: "GPU", HOST: "CPU", DISK: "STORAGE"}

#: A tier's place in :data:`TIERS` (0 is the fastest).
RANK: Final[dict[str, int]] = {tier: rank for rank, tier in enumerate(TIERS)}
