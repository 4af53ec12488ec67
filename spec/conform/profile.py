"""Deviation profiles: what a candidate declares about itself, in a TOML file it ships.

A real cache makes policy choices this spec makes differently (SGLang evicts whole
leaf nodes, reuses freed pages last-freed-first, stamps with wall time). Without a
way to say so, the kit stops at the first such difference and the candidate learns
nothing about the rest -- whether its eviction respects pins, say. A profile
declares those choices; the kit then generates and compares accordingly and the
verdict reads "conforms with declared deviations: R-...". A profile::

    name = "my-cache 1.2"
    block_sizes = [1, 16]          # supported block sizes (default: any)
    pool_sizes = [2, 100000]       # smallest and largest pool (default: any)
    token_limit = 2147483648       # token ids it accepts are below this (default 2**32)
    match_cap = "last_token"       # none | last_token: a match leaves the last token
    policy = "lfu"                 # the eviction policy it runs (R-POL-*; default lru)
    tiers = ["host"]               # the slower tiers it keeps (the tiers level; default any)

    [policy_options]               # that policy's options (default: its defaults)

    [events]                       # the events level: how it names blocks (R-EVENT-2)
    scheme = "sha256_cbor"         # a BlockHasher scheme (default sha256_cbor)
    seed = "vllm-none-hash"        # its root seed (default vLLM's)

    [namespaces]                   # names it folds into others (default: none)
    as_default = [""]              # ... into the default namespace (an empty salt)
    aliases = { "Tenant" = "tenant" }  # ... into another name

    [tolerate]                     # each key optional; the first value is the default
    eviction_granularity = "whole_leaf_node"   # per_block | whole_leaf_node
    evicted_set = "covering"       # exact | covering (whole nodes covering what was asked)
    allocation_order = "any"       # smallest_free_first | any
    recency = "not_compared"       # exact | not_compared
    error_kinds = "mapped"         # exact | mapped (through [errors])
    removal_order = "any"          # eviction_order | per_block | any (its own order)
    store_events = "any"           # per_run | any (its own split of stores into events)
    event_fields = "hashes"        # exact | none_as_absent | hashes (extra keys, LoRA its own)
    reset_events = "cleared"       # silent | cleared (a fresh cache announces a clear)

    [index]                        # a router index's choices (conform --index), likewise
    copies = "one"                 # counted | one (one entry per block and worker)
    parents = "dropped"            # kept | dropped (a store under a parent not held)
    sequence = "not_checked"       # checked | not_checked (batch numbers its subscriber's)
    malformed = "refused"          # stale | refused (an undecodable batch changes nothing)
    errors = "raised"              # silent | raised (a skipped event raises, changing nothing)

    [errors]                       # with error_kinds = "mapped": its names -> kinds
    TypeError = "token_type"

    [waive]                        # rules not followed, each with its reason
    R-TOK-3 = "token ids are int64 and never range-checked"

``[index]`` is read only by the index level (:mod:`.index`), which checks router
indexes rather than caches: its choices relax R-ROUTE rules there (:data:`INDEX_RELAXES`)
and mean nothing to the cache levels.

``[events]`` is not a deviation either: it names the block hashes the candidate's events
carry, and the kit's oracle names its blocks the same way.

``tiers`` is not a deviation either: it names the slower tiers the candidate keeps
(``"host"``, ``"disk"``), and at the ``tiers`` level the kit then draws every reset with
exactly those -- each listed tier present, with a size drawn as usual, every other
absent -- so a cache that has no disk tier (SGLang's HiCache: its storage tier is an
external service) is checked on what it keeps instead of refusing most resets. Without
it the kit draws hosts and disks freely (a host now and then absent).

At the ``tiers`` level the eviction and allocation tolerances apply in every tier: the
kit's tiered oracle adopts the candidate's choices from its answers -- the device's as
at the other levels, each slower tier's from the moves into it (its new ids) and the
blocks it dropped or moved on down (its victims) -- where they fit
(:class:`~kachedb_radix.spec.conform.oracle.TieredOracle`). What is demoted, copied,
restored or refused stays the spec's: a difference there is a finding.

``policy`` and ``[policy_options]`` are not deviations: they say which of the spec's
policies the candidate runs (the ``policies`` level), and the kit builds its oracle
with the same, so every eviction is checked against that policy's keys.

``token_limit``, ``match_cap`` and ``[namespaces]`` describe inputs the engine treats
otherwise, and the kit's oracle treats them the same way, so everything else is still
compared: tokens at or above the limit are refused as ``token_range`` (R-TOK-3 against
the declared range; R-TOK-1 is the deviation) and valid ones are drawn below it; under
``match_cap = "last_token"`` a match reuses at most ``len(tokens) - 1`` tokens (the
last token is recomputed for its logits, vLLM's rule), so a fully cached prompt's last
block is recomputed, and an insert of one may evict to find it a block (R-MATCH-1,
R-INS-5); a namespace folded into another is the same namespace to the oracle and to
the safety check, which then holds the engine to exactly that folding and nothing more
(R-NS-1 is the deviation; R-NS-2, never waived, still refuses any other crossing).

Tolerance modes relax the rules listed in :data:`RELAXES`; the kit then *adopts*
the candidate's admissible choice (the blocks it evicted, the ids it allocated)
into its oracle, so the two stay in step and everything else is still compared
exactly. Waived rules are not probed (their bad inputs are not generated) and a
finding attributed to one is reported as waived. The safety rules
(:data:`SAFETY_RULES`) are checked whatever the profile says and cannot be waived.

:func:`load` reads a file; :func:`parse` checks already-parsed TOML data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from kachedb_radix.reference.errors import ERROR_KINDS, InvalidArgumentError
from kachedb_radix.reference.events import DEFAULT_SCHEME, DEFAULT_SEED, BlockHasher
from kachedb_radix.reference.policies import DEFAULT_POLICY, check_policy

from ..inputs import InputError, read_toml
from .rules import load_rules

#: Each tolerance and its allowed values; the first is the spec's own (strict) choice.
MODES: dict[str, tuple[str, ...]] = {
    "eviction_granularity": ("per_block", "whole_leaf_node"),
    "evicted_set": ("exact", "covering"),
    "allocation_order": ("smallest_free_first", "any"),
    "recency": ("exact", "not_compared"),
    "error_kinds": ("exact", "mapped"),
    "removal_order": ("eviction_order", "per_block", "any"),
    "store_events": ("per_run", "any"),
    "event_fields": ("exact", "none_as_absent", "hashes"),
    "reset_events": ("silent", "cleared"),
}

#: A router index's choices (``[index]``, the index level) and their allowed values; the
#: first is the spec's own.
INDEX_MODES: dict[str, tuple[str, ...]] = {
    "copies": ("counted", "one"),
    "parents": ("kept", "dropped"),
    "sequence": ("checked", "not_checked"),
    "malformed": ("stale", "refused"),
    "errors": ("silent", "raised"),
}

#: The rules each non-strict tolerance relaxes, and why (shown as the waiver reason).
RELAXES: dict[tuple[str, str], tuple[tuple[str, ...], str]] = {
    ("eviction_granularity", "whole_leaf_node"): (
        ("R-EVICT-1",),
        "declared: evicts whole leaf nodes (any order inside a node)",
    ),
    ("evicted_set", "covering"): (
        ("R-EVICT-4", "R-INS-5"),
        "declared: frees whole nodes covering what was asked (may free more)",
    ),
    ("allocation_order", "any"): (
        ("R-ALLOC-2", "R-INS-4"),
        "declared: allocates any free ids (compared up to the ids it chose)",
    ),
    ("recency", "not_compared"): (
        ("R-LRU-1", "R-LRU-2", "R-LRU-3", "R-LRU-4", "R-EVICT-2", "R-EVICT-3"),
        "declared: recency is its own (stamps, clock and victim choice not compared)",
    ),
    ("error_kinds", "mapped"): (
        ("R-ERR-3",),
        "declared: error kinds mapped from its own exception names",
    ),
    ("removal_order", "per_block"): (
        ("R-EVENT-4",),
        "declared: one BlockRemoved per block, in eviction order (the order still compared)",
    ),
    ("removal_order", "any"): (
        ("R-EVENT-4",),
        "declared: removes evicted blocks in its own order (a batch's removals compared as a set)",
    ),
    ("store_events", "any"): (
        ("R-EVENT-3",),
        "declared: splits stores into events its own way (compared block by block)",
    ),
    ("event_fields", "none_as_absent"): (
        ("R-EVENT-3",),
        "declared: extra keys of all None where none are meant (every other field compared)",
    ),
    ("event_fields", "hashes"): (
        ("R-EVENT-3",),
        "declared: extra keys and LoRA fields of its own (hashes, parents, tokens compared)",
    ),
    ("reset_events", "cleared"): (
        ("R-EVENT-1",),
        "declared: a fresh cache first announces AllBlocksCleared (dropped before comparing)",
    ),
}

#: The R-ROUTE rules each non-strict ``[index]`` choice relaxes at the index level, and why.
INDEX_RELAXES: dict[tuple[str, str], tuple[tuple[str, ...], str]] = {
    ("copies", "one"): (
        ("R-ROUTE-5",),
        "declared: an index keeps one entry per block and worker (a removal drops it)",
    ),
    ("parents", "dropped"): (
        ("R-ROUTE-3",),
        "declared: an index drops a store whose parent the worker does not hold",
    ),
    ("sequence", "not_checked"): (
        ("R-ROUTE-1",),
        "declared: an index applies every batch it is given (batch numbers are its "
        "subscriber's; gaps and restarts not probed)",
    ),
    ("malformed", "refused"): (
        ("R-ROUTE-2",),
        "declared: an index refuses a batch it cannot decode and keeps the worker's entries",
    ),
    ("errors", "raised"): (
        ("R-ROUTE-3",),
        "declared: an index raises on an event it skips, after changing nothing",
    ),
}

#: Rules the policy-free safety check enforces (spec.safety): never waivable.
SAFETY_RULES: tuple[str, ...] = (
    "R-MATCH-3",
    "R-PIN-3",
    "R-ALLOC-1",
    "R-NS-2",
    "R-INV-1",
    "R-ERR-2",
)

_TOP_KEYS = {
    "name",
    "block_sizes",
    "pool_sizes",
    "token_limit",
    "match_cap",
    "namespaces",
    "tolerate",
    "errors",
    "waive",
    "policy",
    "policy_options",
    "events",
    "tiers",
    "index",
}

#: The slower tiers a profile's ``tiers`` may name (the device is always there).
SLOWER_TIERS = ("host", "disk")

#: The token limit of the spec (R-TOK-1): ids are unsigned 32-bit integers.
TOKEN_LIMIT = 2**32

#: ``match_cap`` values: the first is the spec's.
MATCH_CAPS = ("none", "last_token")


class ProfileError(ValueError):
    """A profile that cannot be used; the message names the file and the setting."""


@dataclass(frozen=True)
class Profile:
    """A candidate's declared deviations (see the module docstring).

    Attributes:
        name: a label for reports.
        source: the file it was read from, if any.
        block_sizes: supported block sizes, None for any.
        pool_sizes: smallest and largest supported pool, None for any.
        waived: rule id -> reason, for rules the candidate does not follow.
        modes: tolerance -> chosen value (every key of :data:`MODES`).
        errors: with ``error_kinds = "mapped"``, the candidate's names -> kinds.
    """

    name: str = "strict"
    source: str | None = None
    block_sizes: tuple[int, ...] | None = None
    pool_sizes: tuple[int, int] | None = None
    waived: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    modes: Mapping[str, str] = field(
        default_factory=lambda: MappingProxyType({key: values[0] for key, values in MODES.items()})
    )
    errors: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    token_limit: int = TOKEN_LIMIT
    match_cap: str = "none"
    namespace_aliases: Mapping[str, str | None] = field(
        default_factory=lambda: MappingProxyType({})
    )
    policy: str = DEFAULT_POLICY
    policy_options: Mapping[str, Any] | None = None
    events: Mapping[str, str] = field(
        default_factory=lambda: MappingProxyType({"scheme": DEFAULT_SCHEME, "seed": DEFAULT_SEED})
    )
    tiers: tuple[str, ...] | None = None
    index: Mapping[str, str] = field(
        default_factory=lambda: MappingProxyType(
            {key: values[0] for key, values in INDEX_MODES.items()}
        )
    )

    def index_mode(self, choice: str) -> str:
        """The value chosen for ``[index]`` key ``choice`` (of :data:`INDEX_MODES`). O(1)."""
        return self.index[choice]

    def index_deviations(self) -> dict[str, str]:
        """The R-ROUTE rules the ``[index]`` choices relax, with why. O(choices)."""
        return dict(sorted(_relaxed(INDEX_RELAXES, self.index).items()))

    def with_policy(self, policy: str, options: Mapping[str, Any] | None = None) -> Profile:
        """The same profile, the candidate running ``policy`` with ``options``. O(1).

        Raises:
            ProfileError: an unknown policy or option (R-POL-1).
        """
        name, _ = _policy(policy, options, f"profile {self.source or self.name}")
        return replace(self, policy=name, policy_options=None if options is None else dict(options))

    def reset_fields(self) -> dict[str, Any]:
        """What a ``reset`` step adds for the policy: nothing for plain lru. O(1)."""
        if self.policy == DEFAULT_POLICY and self.policy_options is None:
            return {}
        options = None if self.policy_options is None else dict(self.policy_options)
        return {"policy": self.policy, "policy_options": options}

    def events_fields(self) -> dict[str, Any]:
        """What a ``reset`` step adds at the ``events`` level: the scheme. O(1)."""
        return {"events": dict(self.events)}

    def fold_namespace(self, namespace: object) -> object:
        """``namespace`` as the engine takes it: folded by ``[namespaces]``, else itself
        (anything that is not a str stays as it is, to be refused by R-NS-4). O(1)."""
        if isinstance(namespace, str) and namespace in self.namespace_aliases:
            return self.namespace_aliases[namespace]
        return namespace

    def mode(self, tolerance: str) -> str:
        """The value chosen for ``tolerance`` (a key of :data:`MODES`). O(1)."""
        return self.modes[tolerance]

    @property
    def strict(self) -> bool:
        """No waiver, every tolerance at the spec's own choice, the spec's inputs."""
        return (
            not self.waived
            and all(self.modes[key] == values[0] for key, values in MODES.items())
            and self.token_limit == TOKEN_LIMIT
            and self.match_cap == "none"
            and not self.namespace_aliases
        )

    @property
    def adopts_eviction(self) -> bool:
        """Whether the kit follows the candidate's choice of victims (any eviction mode)."""
        return (
            self.modes["eviction_granularity"] != "per_block"
            or self.modes["evicted_set"] != "exact"
            or self.modes["recency"] != "exact"
        )

    @property
    def adopts_allocation(self) -> bool:
        """Whether the kit follows the candidate's choice of new block ids."""
        return self.modes["allocation_order"] != "smallest_free_first"

    @property
    def compares_recency(self) -> bool:
        """Whether stamps and the clock are compared."""
        return self.modes["recency"] == "exact"

    def deviations(self) -> dict[str, str]:
        """Every rule not held to the letter, with its reason, in SPEC order. O(rules)."""
        found = _relaxed(RELAXES, self.modes)
        if self.token_limit != TOKEN_LIMIT:
            found.setdefault("R-TOK-1", f"declared: token ids below {self.token_limit}")
        if self.match_cap == "last_token":
            reason = "declared: a match leaves the last token to recompute (its logits)"
            found.setdefault("R-MATCH-1", reason)
            found.setdefault("R-INS-5", reason + "; an insert may evict to recompute it")
        if self.namespace_aliases:
            folded = ", ".join(
                f"{name!r} -> {'default' if into is None else repr(into)}"
                for name, into in self.namespace_aliases.items()
            )
            found.setdefault("R-NS-1", f"declared: names folded into others ({folded})")
        found.update(self.waived)
        order = {rule: index for index, rule in enumerate(load_rules())}
        return dict(sorted(found.items(), key=lambda item: order.get(item[0], len(order))))

    def map_kind(self, kind: str) -> str:
        """A candidate's error kind as the spec names it. O(1).

        With ``error_kinds = "mapped"`` a name in ``[errors]`` (a kind, or an
        exception class name, also as ``unexpected:<Class>``) is translated;
        anything else is kept.
        """
        if self.modes["error_kinds"] != "mapped":
            return kind
        bare = kind.removeprefix("unexpected:")
        return self.errors.get(kind, self.errors.get(bare, kind))

    @property
    def shown_source(self) -> str | None:
        """:attr:`source` as reports show it: a file shipped inside this project as a
        path relative to its root (``spec/peers/sglang.toml``), so a committed report
        names no machine's directories; any other file as given. O(path length)."""
        if self.source is None:
            return None
        try:
            return Path(self.source).resolve().relative_to(_PROJECT).as_posix()
        except (ValueError, OSError):
            return self.source

    def to_json(self) -> dict[str, Any]:
        """The profile as JSON data (for reports). O(size)."""
        return {
            "name": self.name,
            "source": self.shown_source,
            "block_sizes": None if self.block_sizes is None else list(self.block_sizes),
            "pool_sizes": None if self.pool_sizes is None else list(self.pool_sizes),
            "tolerate": dict(self.modes),
            "errors": dict(self.errors),
            "waived": dict(self.waived),
            "token_limit": self.token_limit,
            "match_cap": self.match_cap,
            "namespace_aliases": dict(self.namespace_aliases),
            "policy": self.policy,
            "policy_options": None if self.policy_options is None else dict(self.policy_options),
            "events": dict(self.events),
            "tiers": None if self.tiers is None else list(self.tiers),
            "index": dict(self.index),
        }


#: The directory holding the ``spec`` folder (the checkout, or the installed import root):
#: shipped profiles are shown relative to it (``spec/peers/sglang.toml``).
_PROJECT = Path(__file__).resolve().parents[2]

#: The spec to the letter: what the kit uses when no profile is given.
STRICT = Profile()


def load(path: str | Path) -> Profile:
    """Read and check the profile in TOML file ``path``. O(size of the file).

    Raises:
        ProfileError: the file cannot be read, is not TOML, or is not a valid
            profile (see :func:`parse`).
    """
    path = Path(path)
    try:
        data = read_toml(path, "profile")  # missing, binary, not UTF-8, nested too deeply
    except InputError as exc:
        raise ProfileError(str(exc)) from None
    return parse(data, str(path))


def parse(data: Mapping[str, Any], source: str = "<profile>") -> Profile:
    """Check parsed TOML data and build the profile. O(size).

    Raises:
        ProfileError: an unknown key, table, tolerance, value, rule id or error kind;
            a waiver without a reason or of a safety rule; contradictory settings
            (``evicted_set = "exact"`` with whole-node eviction; an ``[errors]``
            table without ``error_kinds = "mapped"`` or the reverse); bad sizes.
    """
    where = f"profile {source}"
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise ProfileError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    name = data.get("name", Path(source).stem)
    if not isinstance(name, str) or not name:
        raise ProfileError(f"{where}: name must be a non-empty string")
    modes = _modes(_table(data, "tolerate", where), where)
    index = _modes(_table(data, "index", where), where, INDEX_MODES, "[index] choice")
    errors = _errors(_table(data, "errors", where), modes["error_kinds"], where)
    if modes["evicted_set"] == "exact" and modes["eviction_granularity"] == "whole_leaf_node":
        raise ProfileError(
            f'{where}: evicted_set = "exact" contradicts eviction_granularity = '
            '"whole_leaf_node" (whole nodes cannot free exactly the blocks asked for); '
            'declare evicted_set = "covering"'
        )
    match_cap = data.get("match_cap", "none")
    if match_cap not in MATCH_CAPS:
        raise ProfileError(f"{where}: match_cap = {match_cap!r}: choose {' | '.join(MATCH_CAPS)}")
    options = data.get("policy_options")
    policy, _ = _policy(data.get("policy", DEFAULT_POLICY), options, where)
    return Profile(
        name=name,
        source=source,
        block_sizes=_block_sizes(data.get("block_sizes"), where),
        pool_sizes=_pool_sizes(data.get("pool_sizes"), where),
        waived=MappingProxyType(_waivers(_table(data, "waive", where), where)),
        modes=MappingProxyType(modes),
        errors=MappingProxyType(errors),
        token_limit=_token_limit(data.get("token_limit", TOKEN_LIMIT), where),
        match_cap=match_cap,
        namespace_aliases=MappingProxyType(_aliases(_table(data, "namespaces", where), where)),
        policy=policy,
        policy_options=None if options is None else dict(options),
        events=MappingProxyType(_events(_table(data, "events", where), where)),
        tiers=_tiers(data.get("tiers"), where),
        index=MappingProxyType(index),
    )


def _tiers(value: Any, where: str) -> tuple[str, ...] | None:
    """``tiers``: a list of distinct slower tier names, fastest first."""
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or not all(name in SLOWER_TIERS for name in value)
        or len(set(value)) != len(value)
    ):
        raise ProfileError(
            f"{where}: tiers = {value!r}: a list of the slower tiers it keeps, from "
            f"{', '.join(SLOWER_TIERS)}"
        )
    return tuple(name for name in SLOWER_TIERS if name in value)


def _policy(name: Any, options: Any, where: str) -> tuple[str, dict[str, object]]:
    """``policy`` and ``[policy_options]`` checked as a tree checks them (R-POL-1)."""
    try:
        return check_policy(name, options)
    except InvalidArgumentError as exc:
        raise ProfileError(f"{where}: {exc}") from None


def _events(table: Mapping[str, Any], where: str) -> dict[str, str]:
    """``[events]``: a scheme :class:`BlockHasher` knows and a seed (R-EVENT-2)."""
    unknown = set(table) - {"scheme", "seed"}
    if unknown:
        raise ProfileError(f"{where}: [events]: unknown key(s) {', '.join(sorted(unknown))}")
    chosen = {
        "scheme": table.get("scheme", DEFAULT_SCHEME),
        "seed": table.get("seed", DEFAULT_SEED),
    }
    try:
        BlockHasher(chosen["scheme"], chosen["seed"])
    except InvalidArgumentError as exc:
        raise ProfileError(f"{where}: [events]: {exc}") from None
    return chosen


def _token_limit(value: Any, where: str) -> int:
    if not _positive(value) or value < 2 or value > TOKEN_LIMIT:
        raise ProfileError(
            f"{where}: token_limit = {value!r}: an int from 2 to 2**32 (ids are below it)"
        )
    limit: int = value
    return limit


def _aliases(table: Mapping[str, Any], where: str) -> dict[str, str | None]:
    unknown = set(table) - {"as_default", "aliases"}
    if unknown:
        raise ProfileError(f"{where}: [namespaces]: unknown key(s) {', '.join(sorted(unknown))}")
    folded: dict[str, str | None] = {}
    defaults = table.get("as_default", [])
    if not isinstance(defaults, list) or not all(isinstance(name, str) for name in defaults):
        raise ProfileError(f"{where}: [namespaces] as_default must be a list of names")
    folded.update(dict.fromkeys(defaults))
    aliases = table.get("aliases", {})
    if not isinstance(aliases, Mapping) or not all(
        isinstance(into, str) for into in aliases.values()
    ):
        raise ProfileError(f"{where}: [namespaces] aliases must map names to names")
    for name, into in aliases.items():
        if name in folded or into in aliases:
            raise ProfileError(
                f"{where}: [namespaces] {name!r} is folded twice, or into a folded name"
            )
        folded[name] = into
    return folded


def _table(data: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    table = data.get(key, {})
    if not isinstance(table, Mapping):
        raise ProfileError(f"{where}: [{key}] must be a table")
    return table


def _relaxed(
    table: Mapping[tuple[str, str], tuple[tuple[str, ...], str]], chosen: Mapping[str, str]
) -> dict[str, str]:
    """Each rule a chosen value relaxes, with the first reason given for it. O(table)."""
    found: dict[str, str] = {}
    for (key, value), (rules, reason) in table.items():
        if chosen[key] == value:
            for rule in rules:
                found.setdefault(rule, reason)
    return found


def _modes(
    table: Mapping[str, Any],
    where: str,
    allowed: Mapping[str, tuple[str, ...]] = MODES,
    what: str = "tolerance",
) -> dict[str, str]:
    modes = {key: values[0] for key, values in allowed.items()}
    for key, value in table.items():
        if key not in allowed:
            raise ProfileError(
                f"{where}: unknown {what} {key!r}; {what}s are {', '.join(allowed)}"
            )
        if value not in allowed[key]:
            choices = " | ".join(allowed[key])
            raise ProfileError(f"{where}: {key} = {value!r}: choose {choices}")
        modes[key] = value
    return modes


def _errors(table: Mapping[str, Any], mode: str, where: str) -> dict[str, str]:
    if mode == "mapped" and not table:
        raise ProfileError(f'{where}: error_kinds = "mapped" needs an [errors] table')
    if mode == "exact" and table:
        raise ProfileError(f'{where}: an [errors] table needs error_kinds = "mapped"')
    errors: dict[str, str] = {}
    for name, kind in table.items():
        if kind not in ERROR_KINDS:
            raise ProfileError(
                f"{where}: [errors] {name} = {kind!r} is not an error kind "
                f"({', '.join(sorted(ERROR_KINDS))})"
            )
        errors[name] = kind
    return errors


def _waivers(table: Mapping[str, Any], where: str) -> dict[str, str]:
    rules = load_rules()
    waived: dict[str, str] = {}
    for rule, reason in table.items():
        if rule not in rules:
            raise ProfileError(f"{where}: [waive] {rule}: no such rule in SPEC.md")
        if rule in SAFETY_RULES:
            raise ProfileError(
                f"{where}: [waive] {rule} is a safety rule, checked whatever the profile "
                "says; it cannot be waived"
            )
        if not isinstance(reason, str) or not reason.strip():
            raise ProfileError(f"{where}: [waive] {rule} needs a reason (a non-empty string)")
        waived[rule] = reason.strip()
    return waived


def _block_sizes(value: Any, where: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(_positive(size) for size in value):
        raise ProfileError(f"{where}: block_sizes must be a non-empty list of ints >= 1")
    return tuple(sorted(set(value)))


def _pool_sizes(value: Any, where: str) -> tuple[int, int] | None:
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(_positive(size) for size in value)
        or value[0] > value[1]
    ):
        raise ProfileError(
            f"{where}: pool_sizes must be [smallest, largest], ints with 1 <= smallest <= largest"
        )
    return (value[0], value[1])


def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1
