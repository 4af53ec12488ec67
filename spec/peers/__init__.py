"""Real caches behind adapters, checked by the kit as targets (``kachedb-radix conform
sglang``).

Each peer is its project's own code from a pinned release, installed without dependencies, with a
thin adapter to the plain-data candidate protocol and the deviation profile it ships
(:mod:`kachedb_radix.spec.conform.profile`). Nothing of a peer's code is in this project: an adapter
loads it from the installed package and fails with the install command when it is absent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..conform.candidate import Candidate

#: Where the minimal traces of each peer's differences live.
TRACES = Path(__file__).with_name("traces")


@dataclass(frozen=True)
class Peer:
    """A peer target.

    Attributes:
        name: its target name.
        description: what it is, in a few words.
        profile: the profile it ships.
        factory: returns a zero-argument constructor of its candidate (a cache's
            :class:`Candidate`; for :data:`INDEX_PEERS` an index candidate).
    """

    name: str
    description: str
    profile: Path
    factory: Callable[[], Callable[[], Any]]  # a Candidate's, or an index candidate's


def _sglang() -> Callable[[], Candidate]:
    """The SGLang adapter's constructor, once the pinned wheel is known to be there.

    Raises:
        ImportError: the pinned sglang wheel is not installed.
    """
    from .sglang import SGLangCandidate, load

    load()  # fail now, with the install command, rather than at the first open
    return SGLangCandidate


def _sglang_hicache() -> Callable[[], Candidate]:
    """The SGLang HiCache adapter's constructor, once the pinned wheel is known to load.

    Raises:
        ImportError: the pinned sglang wheel is not installed, or its HiCache files do
            not load.
    """
    from .sglang_hicache import HiCacheCandidate, load

    load()
    return HiCacheCandidate


def _dynamo() -> Callable[[], Any]:
    """The Dynamo index adapter's constructor, once the pinned wheel is known to load.

    Raises:
        ImportError: the pinned ai-dynamo-runtime wheel is not installed.
    """
    from .dynamo import DynamoIndex, load

    load()
    return DynamoIndex


#: The index peers by target name (``kachedb-radix conform --index NAME``).
INDEX_PEERS: dict[str, Peer] = {
    "dynamo": Peer(
        "dynamo",
        "NVIDIA Dynamo 1.6.1's router index (ai-dynamo-runtime's RadixTree)",
        Path(__file__).with_name("dynamo.toml"),
        _dynamo,
    ),
}

#: The peers by target name.
PEERS: dict[str, Peer] = {
    "sglang": Peer(
        "sglang",
        "SGLang 0.5.23's RadixCache (sglang/srt/mem_cache/radix_cache.py)",
        Path(__file__).with_name("sglang.toml"),
        _sglang,
    ),
    "sglang-hicache": Peer(
        "sglang-hicache",
        "SGLang 0.5.23's HiCache tree (UnifiedRadixCache with init_hicache, its host tier)",
        Path(__file__).with_name("sglang_hicache.toml"),
        _sglang_hicache,
    ),
}
