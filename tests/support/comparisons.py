"""Count the comparisons against operation and level names left outside their tables.

Issue 36: each operation's meaning is written once, in its row of
``spec/conform/operations.py``, and each level's name once, in ``spec/conform/levels.py``;
everything else asks the row (``row.frees``, ``row.resets``) or the level's constant. A
comparison against a name spelt out (``op == "insert"``, ``op in ("evict", ...)``,
``"snapshots" in levels``) re-spells a meaning, so this module finds them, by reading
the code (its syntax tree), and ``tests/kit/test_one_table.py`` holds the counts.

What counts: a comparison (``==``, ``!=``, ``in``, ``not in``) of a string literal --
or a literal tuple, list or set of them -- naming an operation or a level, with
anything else. A literal naming both (``"namespaces"``, ``"events"``: an operation and a
level) counts as a level when the other side's text mentions ``level``, else as an
operation. Tables themselves are left out: the two modules above. Run it as a script to
list every site::

    python -m tests.support.comparisons spec/conform spec/protocol spec/explain
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from kachedb_radix.spec.conform.levels import LEVELS
from kachedb_radix.spec.conform.operations import BY_NAME

#: The modules that are the tables (their literals are the names' one home).
TABLES = ("spec/conform/operations.py", "spec/conform/levels.py")

OPERATION_NAMES = frozenset(BY_NAME)
LEVEL_NAMES = frozenset(LEVELS)


@dataclass(frozen=True)
class Site:
    """One comparison against a name: where, of which kind, and its text."""

    path: str
    line: int
    kind: str  # "operation" or "level"
    text: str


def _literals(node: ast.expr) -> list[str] | None:
    """The strings of a literal string, or of a literal tuple/list/set (or
    ``frozenset(...)``/``set(...)`` of one) of strings; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        values = [
            e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
        ]
        return values if len(values) == len(node.elts) else None
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("frozenset", "set", "tuple")
        and len(node.args) == 1
    ):
        return _literals(node.args[0])
    return None


def _kind(names: list[str], other: ast.expr) -> str | None:
    levelish = "level" in ast.unparse(other)
    if any(name in LEVEL_NAMES for name in names) and (
        levelish or all(name not in OPERATION_NAMES for name in names if name in LEVEL_NAMES)
    ):
        return "level"
    if any(name in OPERATION_NAMES for name in names) and not levelish:
        return "operation"
    return None


def _compare(node: ast.Compare) -> Iterator[str]:
    left = node.left
    for op, right in zip(node.ops, node.comparators, strict=True):
        found: str | None = None
        lhs, rhs = _literals(left), _literals(right)
        if isinstance(op, ast.In | ast.NotIn | ast.Eq | ast.NotEq):
            if rhs is not None and lhs is None:
                found = _kind(rhs, left)
            elif lhs is not None and rhs is None and len(lhs) == 1:
                found = _kind(lhs, right)
        if found is not None:
            yield found
        left = right


def sites(roots: Sequence[str | Path], base: Path) -> list[Site]:
    """Every comparison against an operation or level name in the Python files under
    ``roots`` (relative to ``base``), the tables left out. O(size of the code)."""
    found: list[Site] = []
    for root in roots:
        for path in sorted((base / root).rglob("*.py")):
            relative = path.relative_to(base).as_posix()
            if relative in TABLES:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"), relative)
            for node in ast.walk(tree):
                if isinstance(node, ast.Compare):
                    for kind in _compare(node):
                        found.append(Site(relative, node.lineno, kind, ast.unparse(node)))
    return sorted(found, key=lambda site: (site.path, site.line))


def main(argv: Sequence[str]) -> int:
    """List the sites under the folders named (default: the kit's), then the counts."""
    base = Path(__file__).resolve().parents[2]
    roots = list(argv) or ["spec/conform", "spec/protocol", "spec/explain"]
    found = sites(roots, base)
    for site in found:
        print(f"{site.path}:{site.line}: {site.kind}: {site.text}")
    for kind in ("operation", "level"):
        files = Counter(site.path for site in found if site.kind == kind)
        print(f"{kind}-name comparisons: {sum(files.values())} in {len(files)} files")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
