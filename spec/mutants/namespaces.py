"""Mutants of namespaces (R-NS-*)."""

from __future__ import annotations

from reference.node import Node
from reference.tree import _Path

from .base import MutantTree, mutant


@mutant("namespace_falls_back_to_default", "R-NS-2")
class NamespaceFallsBackToDefault(MutantTree):
    """A match in a namespace with nothing cached searches the default namespace."""

    def _match_walk(
        self, namespace: str | None, tokens: list[int], limit: int
    ) -> tuple[_Path, int]:
        if namespace not in self._roots:
            namespace = None
        return self._walk(namespace, tokens, limit)


@mutant("empty_namespace_kept", "R-NS-3")
class EmptyNamespaceKept(MutantTree):
    """A namespace whose last block is evicted stays listed, empty."""

    def _remove_leaf(self, leaf: Node) -> None:
        parent = leaf.parent
        assert parent is not None
        del parent.children[leaf.first_block(self._block_size)]
        leaf.parent = None
        self._nodes -= 1
        if not parent.is_root:
            self._queue.offer(parent, self._nodes)


@mutant("namespace_not_validated", "R-NS-4")
class NamespaceNotValidated(MutantTree):
    """A namespace that is neither None nor a str is accepted."""

    def _namespace_ok(self, namespace: object) -> None:
        return None
