"""Rule ids for findings: which rules of SPEC.md decide each observable the kit compares.

The map itself is data, ``rulemap.toml`` beside ``SPEC.md``; this module reads it
and applies it. :func:`attribute` names the rules of a finding -- a differing
answer field, a call rejected by one side only, an error of another kind -- with a
one-line likely cause and the primary rule's peer note; :func:`exercised` names the
rules a step exercised, so a run can report rule by rule what was checked.

Entries are matched, in the file's order, on the operation, a differing field (any
field name under which the two answers differ -- ``evicted``, ``stamps``, ``free``
...; ``*`` matches any, ``outcome`` a difference of ok against error or of two
error kinds) and on named predicates over the :class:`Observation`
(:data:`PREDICATES`; ``!name`` negates); the first entry that matches wins, so the
file lists root causes before their consequences.
"""

from __future__ import annotations

import itertools
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from kachedb_radix.reference.errors import InvalidArgumentError
from kachedb_radix.reference.policies import check_retention

from .operations import BY_NAME, OPERATIONS
from .rules import load_rules
from .steps import Outcome, Step

#: Where the map lives.
RULEMAP_PATH = Path(__file__).with_name("rulemap.toml")

_PATH_PART = re.compile(r"\.([A-Za-z_]+)|\[\d+\]")


@dataclass(frozen=True)
class Observation:
    """One compared step, as the predicates see it.

    Attributes:
        step: the step (its arguments; handles for leases and snapshots).
        expected: the reference's outcome.
        actual: the candidate's outcome (None when only asking what is exercised).
        path: the first differing path (``.ok.freed[2]``), "" when none.
        previous: for a read, the state-changing step it follows (with ``expect``).
        levels: the levels compared.
        facts: what the oracle knows about the step: ``block_size``, ``split``
            (the insert split an edge), ``readers`` (readers inside before it),
            ``pinned`` (blocks pinned before it), ``before`` (a snapshot of its
            shape before the step, dumped only when a diagnosis asks), ``key``
            (the reference's eviction key of a block id).
        focus: the field a diagnosis entry is looking at ("" for the first path).
    """

    step: Step
    expected: Outcome
    actual: Outcome | None = None
    path: str = ""
    previous: Step | None = None
    levels: frozenset[str] = frozenset()
    facts: Mapping[str, Any] = field(default_factory=dict)
    focus: str = ""

    @property
    def op(self) -> str:
        """The step's operation."""
        op: str = self.step["op"]
        return op

    @property
    def fields(self) -> tuple[str, ...]:
        """The field a diagnosis looks at: ``focus`` when set, ``("outcome",)`` for ok
        against error (or two error kinds), else the names along the first path."""
        if self.focus:
            return (self.focus,)
        if self.actual is not None and _outcome_differs(self.expected, self.actual):
            return ("outcome",)
        names = tuple(part for part in _PATH_PART.findall(self.path.split(" (")[0]) if part)
        return names[1:] if names[:1] in (("ok",), ("error",)) else names

    @property
    def differing(self) -> frozenset[str]:
        """Every field name under which the two outcomes differ (``outcome`` for ok
        against error). O(size of the outcomes)."""
        if self.actual is None:
            return frozenset()
        if _outcome_differs(self.expected, self.actual):
            return frozenset({"outcome"})
        found: set[str] = set()
        _collect(self.expected.get("ok"), self.actual.get("ok"), "", found)
        return frozenset(found)

    def expected_field(self) -> Any:
        """The expected answer's top-level differing field (None when absent)."""
        return _top(self.expected, self.fields)

    def actual_field(self) -> Any:
        """The actual answer's top-level differing field (None when absent)."""
        return _top(self.actual, self.fields)


def _collect(left: Any, right: Any, name: str, found: set[str]) -> None:
    """Add to ``found`` the names of the fields under which ``left`` and ``right`` differ."""
    if isinstance(left, dict) and isinstance(right, dict):
        for key in set(left) | set(right):
            if key not in left or key not in right:
                found.add(key)
            else:
                _collect(left[key], right[key], key, found)
    elif isinstance(left, list) and isinstance(right, list) and len(left) == len(right):
        for a, b in zip(left, right, strict=True):
            _collect(a, b, name, found)
    elif left != right or type(left) is not type(right):
        found.add(name or "outcome")


@dataclass(frozen=True)
class Attribution:
    """The rules a finding is attributed to.

    Attributes:
        rules: rule ids, the primary first.
        cause: a one-line likely cause.
        peer_note: the primary rule's **Peers.** note in SPEC.md ("" when none).
    """

    rules: tuple[str, ...]
    cause: str
    peer_note: str = ""

    @property
    def rule(self) -> str:
        """The primary rule."""
        return self.rules[0]


@dataclass(frozen=True)
class RuleMap:
    """The parsed ``rulemap.toml`` (see its header)."""

    ops: Mapping[str, tuple[str, ...]]
    kinds: Mapping[str, tuple[str, ...]]
    safety: Mapping[str, tuple[tuple[str, ...], str]]
    unexercised: Mapping[str, str]
    needs: Mapping[str, tuple[str, ...]]
    diagnose: tuple[Mapping[str, Any], ...]
    exercise: tuple[Mapping[str, Any], ...]

    def exercised_by(self, rule: str) -> frozenset[str]:
        """The operations whose steps can exercise ``rule`` (``"*"``: any). O(map)."""
        found = {op for op, rules in self.ops.items() if rule in rules}
        found |= {entry["op"] for entry in self.exercise if rule in entry["rules"]}
        return frozenset(found)

    def mentioned(self) -> set[str]:
        """Every rule id the map names anywhere. O(size of the map)."""
        found = {rule for rules in self.ops.values() for rule in rules}
        found |= {rule for rules in self.kinds.values() for rule in rules}
        found |= {rule for rules, _ in self.safety.values() for rule in rules}
        found |= set(self.unexercised)
        found |= set(self.needs) | {rule for rules in self.needs.values() for rule in rules}
        for entry in (*self.diagnose, *self.exercise):
            found |= {rule for rule in entry["rules"] if not rule.startswith("@")}
        return found


class RuleMapError(ValueError):
    """``rulemap.toml`` names an unknown rule, predicate or placeholder."""


@lru_cache(maxsize=1)
def load_map(path: Path = RULEMAP_PATH) -> RuleMap:
    """Read and check the map (cached). O(size of the file).

    Raises:
        RuleMapError: an unknown rule id, operation, predicate or ``@`` placeholder.
    """
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    rule_map = RuleMap(
        # Each operation's own rules are its row's (spec/conform/operations.py).
        ops={op.name: op.rules for op in OPERATIONS},
        kinds={kind: tuple(rules) for kind, rules in data["kinds"].items()},
        safety={
            name: (tuple(entry["rules"]), entry["cause"]) for name, entry in data["safety"].items()
        },
        unexercised=dict(data["unexercised"]),
        needs={rule: tuple(inputs) for rule, inputs in data.get("needs", {}).items()},
        diagnose=tuple(data["diagnose"]),
        exercise=tuple(data["exercise"]),
    )
    known = load_rules()
    unknown = sorted(rule_map.mentioned() - set(known))
    if unknown:
        raise RuleMapError(f"{path}: rules not in SPEC.md: {', '.join(unknown)}")
    for entry in (*rule_map.diagnose, *rule_map.exercise):
        if entry["op"] != "*" and entry["op"] not in BY_NAME:
            raise RuleMapError(f"{path}: unknown operation {entry['op']!r}")
        for name in entry.get("when", ()):
            _predicate(name)
        for rule in entry["rules"]:
            if rule.startswith("@") and rule not in ("@expected", "@actual", "@op"):
                raise RuleMapError(f"{path}: unknown placeholder {rule}")
    return rule_map


def attribute(observation: Observation) -> Attribution:
    """The rules and likely cause of a differing observation. O(entries * size).

    Falls back on the operation's own rules (its row's ``rules``) when no entry matches.
    """
    rule_map = load_map()
    differing = observation.differing
    for entry in rule_map.diagnose:
        if entry["op"] not in ("*", observation.op):
            continue
        wanted = entry["field"]
        if wanted == "*":
            focused = observation
        elif wanted in differing:
            focused = replace(observation, focus=wanted)
        else:
            continue
        if not all(_predicate(name)(focused) for name in entry.get("when", ())):
            continue
        rules = _expand(entry["rules"], focused, rule_map)
        if rules:
            return _attribution(rules, _cause(entry["cause"], focused))
    fallback = rule_map.ops.get(observation.op, ("R-DUMP-1",))
    return _attribution(fallback, f"{observation.op} answers differently")


def safety_attribution(prop: str, detail: str) -> Attribution:
    """The rules of a violated safety property (``[safety.<prop>]``), cause plus detail.

    Raises:
        KeyError: ``prop`` is not a safety property of the map.
    """
    rules, cause = load_map().safety[prop]
    return _attribution(rules, f"{cause}: {detail}" if detail else cause)


def exercised(
    observation: Observation,
    found: set[str] | None = None,
    pending: dict[str, list[ExerciseEntry]] | None = None,
) -> set[str]:
    """The rules ``observation`` (with its expected outcome) exercises, added to
    ``found`` (returned). Entries whose rules are all in ``found`` already are skipped,
    so a long run pays little for it; with ``pending`` (a caller's own dict, kept
    across calls with the same ``found``) each operation's entries are listed there and
    an entry once done is dropped from it for good. O(entries still pending)."""
    rule_map = load_map()
    found = set() if found is None else found
    op = observation.op
    entries = pending.get(op) if pending is not None else None
    if entries is None:
        entries = list(_exercise_entries(op))
        if pending is not None:
            pending[op] = entries
    done = False
    for predicates, rules, fixed in entries:
        if fixed and found.issuperset(rules):
            done = True
            continue
        if all(predicate(observation) for predicate in predicates):
            found.update(_expand(rules, observation, rule_map))
    if done and pending is not None:
        pending[op] = [entry for entry in entries if not (entry[2] and found.issuperset(entry[1]))]
    return found


@lru_cache(maxsize=64)
def _exercise_entries(op: str) -> tuple[ExerciseEntry, ...]:
    """The ``[[exercise]]`` entries of ``op``: predicates resolved once, rules, and
    whether the rules are all fixed ids (no ``@`` placeholder)."""
    return tuple(
        (
            tuple(_predicate(name) for name in entry.get("when", ())),
            tuple(entry["rules"]),
            not any(rule.startswith("@") for rule in entry["rules"]),
        )
        for entry in load_map().exercise
        if entry["op"] in ("*", op)
    )


def kind_rules(kind: str) -> tuple[str, ...]:
    """The rules that decide error kind ``kind`` (none for an unknown kind). O(1)."""
    return load_map().kinds.get(kind, ())


def peer_note(rule: str) -> str:
    """The **Peers.** note of ``rule`` in SPEC.md, as one line ("" when none). O(rules)."""
    found = load_rules().get(rule)
    if found is None or "**Peers.**" not in found.text:
        return ""
    return " ".join(found.text.split("**Peers.**", 1)[1].split())


def _attribution(rules: Iterable[str], cause: str) -> Attribution:
    unique = tuple(dict.fromkeys(rules))
    return Attribution(unique, cause, peer_note(unique[0]))


def _expand(rules: Iterable[str], observation: Observation, rule_map: RuleMap) -> list[str]:
    found: list[str] = []
    for rule in rules:
        if rule == "@expected":
            found.extend(rule_map.kinds.get(_kind(observation.expected), ()))
        elif rule == "@actual":
            found.extend(rule_map.kinds.get(_kind(observation.actual), ()))
        elif rule == "@op":
            found.extend(rule_map.ops.get(observation.op, ()))
        else:
            found.append(rule)
    return found


def _cause(template: str, observation: Observation) -> str:
    previous = observation.previous
    values = {
        "expected": _show(observation.expected, observation),
        "actual": _show(observation.actual, observation),
        "field": ".".join(observation.fields) or "the state",
        "after": previous["op"] if previous is not None else observation.op,
    }
    if "{leaf" in template:  # the innermost differing field, and its two values there
        leaf = _leaf(observation)
        pair = _first_pair(_ok(observation.expected), _ok(observation.actual), leaf)
        values["leaf"] = leaf or "a field"
        values["leaf_expected"], values["leaf_actual"] = (
            ("?", "?") if pair is None else (_shown_value(pair[0]), _shown_value(pair[1]))
        )
    return template.format(**values)


#: A field one side's answer does not have.
_ABSENT = object()


def _leaf(observation: Observation) -> str:
    """The field a diagnosis names: its focus, else the last name on the first path."""
    return observation.focus or (observation.fields[-1] if observation.fields else "")


def _ok(outcome: Outcome | None) -> Any:
    return (outcome or {}).get("ok")


def _first_pair(left: Any, right: Any, name: str) -> tuple[Any, Any] | None:
    """The two values of the first field ``name`` at one place in ``left`` and
    ``right`` that differ (:data:`_ABSENT` where one has none), walking both together;
    None when there is none. O(size)."""
    if not name:
        return None
    if isinstance(left, dict) and isinstance(right, dict):
        if name in left or name in right:
            here = left.get(name, _ABSENT), right.get(name, _ABSENT)
            if here[0] is _ABSENT or here[1] is _ABSENT or here[0] != here[1]:
                return here
        for key in [key for key in left if key in right]:
            found = _first_pair(left[key], right[key], name)
            if found is not None:
                return found
        return None
    if isinstance(left, list) and isinstance(right, list):
        for a, b in zip(left, right, strict=False):
            found = _first_pair(a, b, name)
            if found is not None:
                return found
    return None


def _shown_value(value: Any) -> str:
    return "absent" if value is _ABSENT else _clip(repr(value))


def _none_extra_keys(observation: Observation) -> bool:
    """The first differing ``extra_keys`` are none on one side and a list of only None
    on the other (or both such): no block has an extra key either way."""
    pair = _first_pair(_ok(observation.expected), _ok(observation.actual), "extra_keys")

    def no_key(value: Any) -> bool:
        return value is None or value is _ABSENT or (
            isinstance(value, list) and all(item is None for item in value)
        )

    return pair is not None and no_key(pair[0]) and no_key(pair[1])


def _show(outcome: Outcome | None, observation: Observation) -> str:
    if outcome is None:
        return "nothing"
    if "error" in outcome:
        return str(outcome["error"])
    value = _top(outcome, observation.fields)
    return "ok" if value is None else _clip(repr(value))


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _top(outcome: Outcome | None, fields: tuple[str, ...]) -> Any:
    if outcome is None or not fields or fields == ("outcome",):
        return None
    answer = outcome.get("ok")
    return answer.get(fields[0]) if isinstance(answer, dict) else None


def _kind(outcome: Outcome | None) -> str:
    return str(outcome.get("error", "")) if outcome is not None else ""


def _outcome_differs(expected: Outcome, actual: Outcome) -> bool:
    return ("error" in expected) != ("error" in actual) or (
        "error" in expected and expected["error"] != actual["error"]
    )


# ---------------------------------------------------------------------- predicates

Predicate = Callable[[Observation], bool]

#: An ``[[exercise]]`` entry, resolved: its predicates, its rules, whether they are all
#: fixed ids (no ``@`` placeholder).
ExerciseEntry = tuple[tuple[Predicate, ...], tuple[str, ...], bool]


def _predicate(name: str) -> Predicate:
    """The predicate called ``name`` (``after:OP``, ``level:L``, ``expected:KIND``,
    ``actual:KIND``, ``policy:NAME``, ``path:FIELD`` -- the first differing path goes
    through FIELD -- and ``has:FIELD`` -- the expected answer's FIELD is not empty -- take
    an argument; ``!name`` is the negation).

    Raises:
        RuleMapError: no such predicate.
    """
    if name.startswith("!"):
        inner = _predicate(name[1:])
        return lambda observation: not inner(observation)
    head, _, argument = name.partition(":")
    if argument:
        maker = _PARAMETRISED.get(head)
        if maker is None:
            raise RuleMapError(f"unknown predicate {name!r}")
        return maker(argument)
    found = PREDICATES.get(name)
    if found is None:
        raise RuleMapError(f"unknown predicate {name!r}")
    return found


def _both_lists(observation: Observation) -> tuple[list[Any], list[Any]] | None:
    expected, actual = observation.expected_field(), observation.actual_field()
    if isinstance(expected, list) and isinstance(actual, list):
        return expected, actual
    return None


def _compare_lists(test: Callable[[list[Any], list[Any]], bool]) -> Predicate:
    def check(observation: Observation) -> bool:
        lists = _both_lists(observation)
        return lists is not None and test(*lists)

    return check


def _same_multiset(left: list[Any], right: list[Any]) -> bool:
    try:
        return sorted(left) == sorted(right)
    except TypeError:
        return False


def _bad_parts(step: Step) -> list[tuple[str, Any, int]]:
    """The separately bad parts of a call's arguments, in the order R-TOK-5 checks
    them: ``(kind, value, index)``, index -1 for the whole input or the namespace."""
    tokens, parts = step.get("tokens"), []
    if isinstance(tokens, list) and not isinstance(tokens, bool):
        for index, token in enumerate(tokens):
            if not _valid_token(token):
                wrong_type = isinstance(token, bool) or not isinstance(token, int)
                parts.append(("token_type" if wrong_type else "token_range", token, index))
    elif "tokens" in step:
        parts.append(("token_type", tokens, -1))
    namespace = step.get("namespace")
    if namespace is not None and not isinstance(namespace, str):
        parts.append(("invalid_argument", namespace, -1))
    return parts


def _first_bad(test: Callable[[Any], bool]) -> Predicate:
    def check(observation: Observation) -> bool:
        parts = _bad_parts(observation.step)
        return bool(parts) and parts[0][2] >= 0 and test(parts[0][1])

    return check


def _later_bad_kind(observation: Observation) -> bool:
    """The candidate reported the kind of a bad part after the first: it checks in
    another order (R-TOK-5)."""
    kinds = [kind for kind, _, _ in _bad_parts(observation.step)]
    actual = _kind(observation.actual)
    return len(kinds) > 1 and actual != kinds[0] and actual in kinds[1:]


def _bad_in_partial(observation: Observation) -> bool:
    """Every bad token sits in the trailing partial block."""
    tokens = observation.step.get("tokens")
    parts = _bad_parts(observation.step)
    if not isinstance(tokens, list) or not parts or any(index < 0 for _, _, index in parts):
        return False
    whole = (
        len(tokens)
        // observation.facts.get("block_size", 1)
        * observation.facts.get("block_size", 1)
    )
    return all(index >= whole for _, _, index in parts)


def _block_children(dump: Any) -> dict[int, list[int]]:
    """Each cached block's next blocks (deeper on its path) in a dump."""
    children: dict[int, list[int]] = {}
    for edge in _dump_edges(dump):
        blocks = edge.get("blocks", [])
        for upper, lower in itertools.pairwise(blocks):
            children.setdefault(upper, []).append(lower)
        if blocks:
            children.setdefault(blocks[-1], []).extend(
                child["blocks"][0] for child in edge.get("children", []) if child.get("blocks")
            )
    return children


def _before(observation: Observation) -> Any:
    """The reference's shape before the step, as a (snapshot) dump; None if unknown."""
    before = observation.facts.get("before")
    return before.dump() if before is not None else None


def _ancestor_first(observation: Observation) -> bool:
    """Freed in this order, some block still had a cached descendant (R-EVICT-1)."""
    children = _block_children(_before(observation))
    freed = observation.actual_field()
    if not children or not isinstance(freed, list):
        return False
    gone: set[int] = set()
    for block in freed:
        if any(child not in gone for child in children.get(block, [])):
            return True
        gone.add(block)
    return False


def _missed_new_tail(observation: Observation) -> bool:
    """The candidate evicted every descendant of a block but not the block, which the
    reference evicted next: the block became a leaf tail and was never queued."""
    children = _block_children(_before(observation))
    expected, actual = observation.expected_field(), observation.actual_field()
    if not children or not isinstance(expected, list) or not isinstance(actual, list):
        return False
    freed = set(actual)
    key = observation.facts.get("key")  # the reference's eviction key of a block
    if key is not None and any(
        key(later) < key(earlier) for earlier, later in itertools.pairwise(actual)
    ):
        return False  # not even least recent first: the order itself is wrong (R-EVICT-2)
    return any(
        children.get(block) and block not in freed and freed.issuperset(children[block])
        for block in expected
    )


def _whole_edges(observation: Observation) -> bool:
    """Every edge the candidate freed blocks of was freed entirely (whole nodes)."""
    freed = observation.actual_field()
    edges = list(_dump_edges(_before(observation)))
    if not edges or not isinstance(freed, list) or not freed:
        return False
    chosen = set(freed)
    touched = [edge for edge in edges if chosen & set(edge.get("blocks", []))]
    return bool(touched) and all(set(edge["blocks"]) <= chosen for edge in touched)


def _pins_increase(observation: Observation) -> bool:
    """A block is pinned more than the block before it on its path (R-PIN-3)."""
    actual = (observation.actual or {}).get("ok")
    for edge in _dump_edges(actual):
        pins = edge.get("pins", [])
        if any(later > earlier for earlier, later in itertools.pairwise(pins)):
            return True
        if pins and any(
            child.get("pins", [0])[:1] > pins[-1:] for child in edge.get("children", [])
        ):
            return True
    return False


def _stamps_flat(observation: Observation) -> bool:
    """The candidate's dump gives every block the same stamp: it shows no recency (it
    stamps nothing, or keeps its recency elsewhere), where the reference's does."""

    def stamps(outcome: Outcome | None) -> set[Any]:
        dump = (outcome or {}).get("ok")
        return {stamp for edge in _dump_edges(dump) for stamp in edge.get("stamps", [])}

    return len(stamps(observation.actual)) == 1 and len(stamps(observation.expected)) > 1


def _namespace_count(test: Callable[[int, int], bool]) -> Predicate:
    """Compares how many namespaces the two dumps (or listings) hold."""

    def count(answer: Any) -> int | None:
        if not isinstance(answer, dict) or not isinstance(answer.get("namespaces"), list):
            return None
        return len(answer["namespaces"])

    def check(observation: Observation) -> bool:
        expected = count(observation.expected.get("ok"))
        actual = count((observation.actual or {}).get("ok"))
        return expected is not None and actual is not None and test(expected, actual)

    return check


def _field_differs(name: str) -> Predicate:
    def check(observation: Observation) -> bool:
        expected, actual = observation.expected.get("ok"), (observation.actual or {}).get("ok")
        if not isinstance(expected, dict) or not isinstance(actual, dict):
            return False
        return bool(expected.get(name) != actual.get(name))

    return check


def _valid_token(token: object) -> bool:
    return isinstance(token, int) and not isinstance(token, bool) and 0 <= token < 2**32


def _dump_edges(dump: Any) -> Iterable[dict[str, Any]]:
    if not isinstance(dump, dict):
        return
    stack = [child for space in dump.get("namespaces", []) for child in space.get("children", [])]
    while stack:
        edge = stack.pop()
        if isinstance(edge, dict):
            yield edge
            stack.extend(edge.get("children", []))


def _uncompressed(observation: Observation) -> bool:
    actual = (observation.actual or {}).get("ok")
    return any(len(edge.get("children", [])) == 1 for edge in _dump_edges(actual))


def _unsorted(observation: Observation) -> bool:
    actual = (observation.actual or {}).get("ok")
    if not isinstance(actual, dict):
        return False
    size = actual.get("block_size", 1)
    groups = [space.get("children", []) for space in actual.get("namespaces", [])]
    groups.extend(edge.get("children", []) for edge in _dump_edges(actual))
    for children in groups:
        keys = [child.get("tokens", [])[:size] for child in children if isinstance(child, dict)]
        if keys != sorted(keys):
            return True
    names = [space.get("namespace") for space in actual.get("namespaces", [])]
    return names != sorted(names, key=lambda name: (name is not None, name or ""))


def _ok_field(observation: Observation, name: str) -> Any:
    answer = observation.expected.get("ok")
    return answer.get(name) if isinstance(answer, dict) else None


def _own_path(observation: Observation) -> bool:
    reused = _ok_field(observation, "reused") or 0
    path = set((_ok_field(observation, "blocks") or [])[:reused])
    actual = observation.actual_field()
    return isinstance(actual, list) and bool(path & set(actual))


def _partial(observation: Observation) -> bool:
    tokens, size = observation.step.get("tokens"), observation.facts.get("block_size", 1)
    return isinstance(tokens, list) and len(tokens) % size != 0


def _removals(outcome: Outcome | None) -> set[str]:
    """The removed hashes of a normalised ``events`` outcome (as text)."""
    answer = (outcome or {}).get("ok")
    batches = answer.get("batches", []) if isinstance(answer, dict) else []
    return {
        repr(block_hash)
        for batch in batches if isinstance(batch, dict)
        for event in batch.get("events", []) if isinstance(event, dict) and "removed" in event
        for block_hash in event["removed"].get("hashes", [])
    }  # fmt: skip


PREDICATES: dict[str, Predicate] = {
    "removal_missing": lambda o: bool(_removals(o.expected) - _removals(o.actual)),
    "none_extra_keys": _none_extra_keys,
    "ok": lambda o: "ok" in o.expected,
    "error": lambda o: "error" in o.expected,
    "accepted": lambda o: "error" in o.expected and o.actual is not None and "ok" in o.actual,
    "refused": lambda o: "ok" in o.expected and o.actual is not None and "error" in o.actual,
    "kinds_differ": lambda o: (
        "error" in o.expected and o.actual is not None and "error" in o.actual
    ),
    "unexpected": lambda o: _kind(o.actual).startswith("unexpected:"),
    "multi_bad": lambda o: len(_bad_parts(o.step)) >= 2,
    "misjudged": lambda o: (
        "error" in o.expected
        and o.actual is not None
        and o.actual.get("error") != o.expected["error"]
    ),
    "later_bad_kind": _later_bad_kind,
    "bad_in_partial": _bad_in_partial,
    "first_bad_bool": _first_bad(lambda value: isinstance(value, bool)),
    "first_bad_limit": _first_bad(lambda value: value == 2**32 and not isinstance(value, bool)),
    "bad_tokens": lambda o: any(kind != "invalid_argument" for kind, _, _ in _bad_parts(o.step)),
    "ancestor_first": _ancestor_first,
    "whole_edges": _whole_edges,
    "missed_new_tail": _missed_new_tail,
    "pins_increase": _pins_increase,
    "quarantine_differs": _field_differs("quarantine"),
    "actual_evicted": lambda o: bool(((o.actual or {}).get("ok") or {}).get("evicted")),
    "max_token": lambda o: (
        isinstance(o.step.get("tokens"), list)
        and any(token == 2**32 - 1 for token in o.step["tokens"] if not isinstance(token, bool))
    ),
    "more": _compare_lists(lambda expected, actual: len(actual) > len(expected)),
    "one_more": _compare_lists(lambda expected, actual: len(actual) == len(expected) + 1),
    "fewer": _compare_lists(lambda expected, actual: len(actual) < len(expected)),
    "same_length": _compare_lists(lambda expected, actual: len(actual) == len(expected)),
    "reordered": _compare_lists(
        lambda expected, actual: actual != expected and _same_multiset(expected, actual)
    ),
    "sorted": _compare_lists(
        lambda expected, actual: (
            actual != expected and _same_multiset(expected, actual) and actual == sorted(actual)
        )
    ),
    "own_path": _own_path,
    "after_error": lambda o: o.previous is not None and "error" in o.previous.get("expect", {}),
    "after_pin": lambda o: o.previous is not None and bool(o.previous.get("pin")),
    "clock_only": lambda o: o.differing <= {"clock", "stamps"},
    "known_before": lambda o: o.facts.get("before") is not None,
    "uncompressed": _uncompressed,
    "unsorted": _unsorted,
    "split": lambda o: bool(o.facts.get("split")),
    "shape_same": lambda o: not o.differing & {"tokens", "blocks", "children", "namespaces"},
    "readers": lambda o: bool(o.facts.get("readers")),
    "pinned": lambda o: bool(o.facts.get("pinned")),
    "pin": lambda o: bool(o.step.get("pin")),
    "bad_namespace": lambda o: (
        "namespace" in o.step
        and o.step["namespace"] is not None
        and not isinstance(o.step["namespace"], str)
    ),
    "namespaced": lambda o: o.step.get("namespace") is not None,
    "bad_retention": lambda o: _bad_retention(o.step),
    "policy_named": lambda o: "policy" in o.step or "policy_options" in o.step,
    "partial": _partial,
    "reused": lambda o: bool(_ok_field(o, "reused")),
    "allocated": lambda o: bool(_ok_field(o, "allocated")),
    "evicted": lambda o: bool(_ok_field(o, "evicted") or _ok_field(o, "freed")),
    "ticks": lambda o: BY_NAME[o.op].ticks,
    "has_edges": lambda o: any(True for _ in _dump_edges(o.expected.get("ok"))),
    "stamps_flat": lambda o: _stamps_flat(o),
    "namespaces_more": _namespace_count(lambda expected, actual: actual > expected),
    "namespaces_fewer": _namespace_count(lambda expected, actual: actual < expected),
}

_PARAMETRISED: dict[str, Callable[[str], Predicate]] = {
    "after": lambda op: lambda o: o.previous is not None and o.previous.get("op") == op,
    "level": lambda level: lambda o: level in o.levels,
    "expected": lambda kind: lambda o: _kind(o.expected) == kind,
    "actual": lambda kind: lambda o: _kind(o.actual) == kind,
    "policy": lambda name: lambda o: o.facts.get("policy", "lru") == name,
    "path": lambda name: lambda o: f".{name}" in o.path,
    "has": lambda name: lambda o: bool(_ok_field(o, name)),
}


def _bad_retention(step: Step) -> bool:
    """The step's ``priority`` / ``retain_for`` are refused by every policy (R-POL-5)."""
    try:
        check_retention(step.get("priority"), step.get("retain_for"))
    except InvalidArgumentError:
        return True
    return False
