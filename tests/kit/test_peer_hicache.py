"""SGLang 0.5.23's HiCache tree through the kit's tiers level: its own code from the pinned
wheel (``UnifiedRadixCache`` with ``init_hicache``, the Python tree core), its profile, the
differences it has (each a committed minimal trace), the copies it issues followed as moves
by the safety check; and the kit's general parts this target needed -- the tiered oracle
adopting a candidate's choices in every tier, the profile's ``tiers``.

The wheel is installed without dependencies (``pip install --no-deps sglang==0.5.23``, as
``.ci/run`` does); where it is not installed the tests that need it skip, saying so.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from kachedb_radix import reference
from kachedb_radix.reference.tiers import TieredTree
from kachedb_radix.spec.conform.adapter import TreeAdapter
from kachedb_radix.spec.conform.candidate import CandidateError
from kachedb_radix.spec.conform.generate import RandomChooser, tiers_fields
from kachedb_radix.spec.conform.profile import ProfileError, load, parse
from kachedb_radix.spec.conform.replay import read_trace, replay
from kachedb_radix.spec.conform.run import KitSettings, run_kit
from kachedb_radix.spec.peers import PEERS, TRACES
from kachedb_radix.spec.peers import sglang as plain
from kachedb_radix.spec.peers import sglang_hicache as peer
from kachedb_radix.spec.peers.sglang_hicache_pools import HostPool

INSTALLED = plain.installed_version() == plain.PINNED
REQUIRED = os.environ.get("KACHEDB_RADIX_REQUIRE_SGLANG") == "1"
needs_sglang = pytest.mark.skipif(
    not INSTALLED and not REQUIRED,
    reason=f"sglang {plain.PINNED} is not installed (`pip install --no-deps "
    f"sglang=={plain.PINNED}`; .ci/run installs it, offline it cannot be)",
)

#: Each committed trace and the rule it shows first (the file name's rule, its suffix
#: naming which of SGLang's behaviours).
TRACE_RULES = {
    "R-TIER-3": "R-TIER-3",  # write_back backs up the evicted node alone
    "R-TIER-3-host": "R-TIER-3",  # host eviction takes host-only childless nodes only
    "R-TIER-4": "R-TIER-4",  # a full host of device copies refuses a write-through backup
    "R-TIER-6": "R-TIER-6",  # load back refuses fewer than 10 tokens, answering 0 loaded
    "R-TIER-6-room": "R-TIER-6",  # ... and a load without device room, likewise
    "R-TIER-7": "R-TIER-7",  # a host lock holds the anchor node only
    "R-PIN-4": "R-PIN-4",
    "R-PIN-5": "R-PIN-5",
}

TIERS = {"host": 4, "disk": 0, "write_through": False}

#: The levels ``conform --tiers`` checks a tree candidate at.
LEVELS = frozenset({"core", "pinning", "eviction", "namespaces", "tiers"})


@needs_sglang
@pytest.mark.parametrize("name", sorted(TRACE_RULES))
def test_each_finding_has_a_minimal_trace(name: str) -> None:
    """R-TIER-3, R-TIER-4, R-TIER-6, R-TIER-7, R-PIN-4, R-PIN-5: each committed trace
    still shows its difference on SGLang under its shipped profile, at the last of a few
    steps, and the reference replays it cleanly."""
    steps = read_trace(TRACES / f"sglang-hicache-0-5-23-{name}.jsonl")
    assert len(steps) <= 6
    found = replay(steps, peer.HiCacheCandidate(), profile=load(peer.PROFILE)).difference
    assert found is not None and found.index == len(steps) - 1
    assert found.rule == TRACE_RULES[name] and found.kind != "safety"
    strict = TreeAdapter(reference.RadixTree, "reference", tier_factory=TieredTree)
    assert replay(steps, strict).passed
    committed = {path.stem for path in TRACES.glob("sglang-hicache-*.jsonl")}
    assert committed == {f"sglang-hicache-0-5-23-{name}" for name in TRACE_RULES}


@needs_sglang
def test_the_kit_finds_them_and_the_safety_check_passes() -> None:
    """R-TIER-8, R-TIER-7 (safety): a short run under the profile reports findings, each
    attributed to a rule, none a safety finding: every copy SGLang issued, followed as a
    move, moved the block it names (the labels check), and nothing is a traceback."""
    target = PEERS["sglang-hicache"]
    report = run_kit(
        target.factory()(),
        LEVELS,
        KitSettings(examples=40, shrink=False, seed=7),
        profile=load(target.profile),
    )
    assert report.findings, "SGLang's HiCache differs from the spec: the kit must say where"
    assert all(finding.kind in ("disagreement", "inadmissible") for finding in report.findings)
    known = {"R-TIER-3", "R-TIER-4", "R-TIER-6", "R-TIER-7", "R-PIN-4", "R-PIN-5"}
    assert {finding.rule for finding in report.findings} <= known
    rules = {row["rule"]: row["status"] for row in report.to_json()["table"]}
    assert rules["R-TIER-8"] == "pass" and rules["R-TIER-1"] == "pass"


@needs_sglang
def test_moves_are_sglangs_copies_in_issue_order() -> None:
    """R-TIER-8: a write_back eviction's backup is a move run before the caller's write;
    a load back's copies are the restore's ``restored``, from the host pages SGLang
    recorded on the node, into the pages its allocator handed out."""
    cache = peer.HiCacheCandidate()
    cache.reset(3, 4, tiers={"host": 6, "disk": 0, "write_through": False})
    tokens = list(range(12))
    assert cache.insert(tokens, None, False)["allocated"] == [0, 1, 2]
    demoted = cache.evict(3)
    assert demoted["freed"] == [0, 1, 2] and demoted["dropped"] == []
    assert demoted["moves"] == [["device", block, "host", block] for block in (0, 1, 2)]
    assert cache.lookup(tokens, None, False)["tiers"] == ["host"] * 3
    back = cache.restore(tokens, None, False)
    assert back["restored"] == [["host", block, "device", block] for block in (0, 1, 2)]
    assert back["length"] == 12 and cache.match(tokens, None, False)["blocks"] == back["blocks"]


@needs_sglang
def test_write_through_deletes_a_victim_never_backed_up() -> None:
    """R-TIER-3 (peer note): under write_through a device victim with no host copy (its
    backup refused by a full host, R-TIER-4) is deleted, not demoted: dropped from the
    device, found in no tier."""
    cache = peer.HiCacheCandidate()
    cache.reset(2, 1, tiers={"host": 1, "disk": 0, "write_through": True})
    assert cache.insert([1], None, False)["after"] == [["device", 0, "host", 0]]
    assert cache.insert([2], None, False)["after"] == []  # the host is full: no backup
    evicted = cache.evict(2)
    assert sorted(evicted["freed"]) == [0, 1] and evicted["dropped"] == [["device", 1]]
    assert cache.lookup([1], None, False)["tiers"] == ["host"]
    assert cache.lookup([2], None, False)["length"] == 0


@needs_sglang
def test_a_disk_tier_and_other_levels_are_refused_with_a_reason() -> None:
    """R-TIER-1: SGLang's storage tier is an external service: a disk is refused (and the
    profile keeps the kit from drawing one); so are a policy and events it does not run."""
    cache = peer.HiCacheCandidate()
    with pytest.raises(CandidateError, match="no disk tier") as refused:
        cache.reset(4, 1, tiers={"host": 4, "disk": 4, "write_through": False})
    assert refused.value.kind == "invalid_argument"
    for bad in ({"host": 0, "write_through": True}, {"host": -1}, {"hosts": 1}, [4]):
        with pytest.raises(CandidateError):
            cache.reset(4, 1, tiers=bad)
    with pytest.raises(CandidateError):
        cache.reset(4, 1, policy="lfu", tiers=TIERS)
    with pytest.raises(CandidateError):
        cache.reset(4, 1, events={"scheme": "sglang"}, tiers=TIERS)
    assert load(peer.PROFILE).tiers == ("host",)


@needs_sglang
def test_without_a_host_it_is_sglangs_device_tree_alone() -> None:
    """R-TIER-1: ``{"host": 0}`` builds the cache without ``init_hicache``; a reset with no
    tiers at all answers as a plain tree (no moves), and the tier calls are refused."""
    cache = peer.HiCacheCandidate()
    cache.reset(2, 1, tiers={"host": 0})
    cache.insert([1, 2], None, False)
    answer = cache.insert([3], None, False)  # evicts the whole node [1, 2]: no host
    assert sorted(answer["evicted"]) == [0, 1] and answer["moves"] == []
    assert answer["dropped"] == [["device", block] for block in answer["evicted"]]
    assert cache.dump()["tiers"] == {}
    cache.reset(2, 1)
    assert "moves" not in cache.insert([1], None, False)
    with pytest.raises(CandidateError, match="no tiers"):
        cache.lookup([1], None, False)


def test_the_host_pool_keeps_sglangs_free_list_order() -> None:
    """R-ALLOC-2 (declared ``any``): the host pool hands out slots from the front and puts
    freed slots aside until the front runs short (``pool_host/base.py``)."""
    pool = HostPool(3, 2)
    first = pool.alloc(4)
    assert first is not None and first.tolist() == [0, 1, 2, 3]
    assert pool.free([0, 1]) == 2 and pool.take_freed() == [0]
    taken = pool.alloc(2)
    assert taken is not None and taken.tolist() == [4, 5]  # the front first
    again = pool.alloc(2)
    assert again is not None and again.tolist() == [0, 1]  # then the released slots
    assert pool.alloc(2) is None and pool.available_size() == 0


def test_without_the_pinned_wheel_the_target_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A missing or other sglang is a clear message naming the install command."""
    monkeypatch.setattr(peer, "installed_version", lambda: None)
    with pytest.raises(plain.SGLangUnavailable, match=r"pip install --no-deps sglang==0\.5\.23"):
        peer.load()


# ---------------------------------------------------------------------- the kit's parts


class _LargestFirst(reference.RadixTree):
    """A tree that allocates the largest free ids first (another allocator order)."""

    def choose_new_blocks(self, count: int) -> Any:
        free = sorted(self.dump()["free"], reverse=True)
        return free[:count]


class _LargestFirstTiers(TieredTree):
    tree_type = _LargestFirst


def _tiered(tree: type[Any], tiered: type[Any]) -> TreeAdapter:
    return TreeAdapter(tree, "largest-first", tier_factory=tiered)


def test_the_tiered_oracle_adopts_another_allocation_order_in_every_tier() -> None:
    """R-INS-4, R-ALLOC-2 (declared ``any``): a tiered candidate whose every tier hands
    out the largest free ids is a finding at the strict spec, and conforms once its
    profile declares ``allocation_order = "any"``: the oracle takes the device's ids from
    ``allocated`` and the host's and disk's from the moves into them."""
    settings = KitSettings(examples=25, shrink=False, seed=3, first=True, steps=80, pool=(2, 32))
    levels = LEVELS
    strict = run_kit(_tiered(_LargestFirst, _LargestFirstTiers), levels, settings)
    assert strict.findings
    profile = parse({"name": "largest-first", "tolerate": {"allocation_order": "any"}})
    relaxed = run_kit(_tiered(_LargestFirst, _LargestFirstTiers), levels, settings,
                      profile=profile)  # fmt: skip
    assert not relaxed.findings, relaxed.findings[0].explain()
    rules = {row["rule"]: row["status"] for row in relaxed.to_json()["table"]}
    assert rules["R-TIER-3"] == "pass" and rules["R-TIER-8"] == "pass"


def test_a_profiles_tiers_are_the_tiers_the_kit_draws() -> None:
    """R-TIER-1: ``tiers = ["host"]`` draws a host every reset and never a disk; the key
    takes the slower tiers' names only, each once."""
    for seed in range(40):
        drawn = tiers_fields(RandomChooser(seed), 8, ("host",))["tiers"]
        assert drawn["host"] >= 1 and drawn["disk"] == 0
        both = tiers_fields(RandomChooser(seed), 8, ("host", "disk"))["tiers"]
        assert both["host"] >= 1 and both["disk"] >= 1
    assert parse({"tiers": ["disk", "host"]}).tiers == ("host", "disk")
    assert parse({}).tiers is None and parse({"tiers": ["host"]}).to_json()["tiers"] == ["host"]
    for bad in (["device"], ["host", "host"], "host", [1]):
        with pytest.raises(ProfileError, match="tiers"):
            parse({"tiers": bad})


def test_the_hicache_target_is_registered_with_its_profile() -> None:
    """The target name, its description and its shipped profile."""
    target = PEERS["sglang-hicache"]
    assert target.profile == peer.PROFILE and Path(target.profile).is_file()
    assert "init_hicache" in target.description
