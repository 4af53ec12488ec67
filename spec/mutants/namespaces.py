"""Mutants of namespaces (R-NS-*)."""

from __future__ import annotations

from kachedb_radix.reference.node import Node
from kachedb_radix.reference.tokens import as_token_list
from kachedb_radix.reference.walk import Path

from .base import MutantTree, mutant


@mutant("namespace_falls_back_to_default", "R-NS-2")
class NamespaceFallsBackToDefault(MutantTree):
    """A match in a namespace with nothing cached searches the default namespace."""

    def _walk(self, namespace: str | None, tokens: list[int], limit: int) -> tuple[Path, int]:
        if self.calling == "match" and namespace not in self._roots:
            namespace = None
        return super()._walk(namespace, tokens, limit)


@mutant("empty_namespace_kept", "R-NS-3")
class EmptyNamespaceKept(MutantTree):
    """A namespace whose last block is evicted stays listed, empty."""

    def _remove_leaf(self, leaf: Node) -> None:
        parent_id = self._parents[leaf.nid]
        assert parent_id is not None
        parent = self._nodes[parent_id]
        emptied = parent.with_children(parent.children.delete(leaf.first_block(self._block_size)))
        del self._nodes[leaf.nid], self._parents[leaf.nid]
        if self._parents[parent_id] is None and not emptied.children:
            # Keep the empty root filed under its namespace instead of dropping it.
            self._nodes[parent_id] = emptied
            self._roots = self._roots.set(self._root_names[parent_id], emptied)
            return
        self._replace(emptied)
        if self._parents.get(parent_id) is not None:
            self._offer(parent_id)


@mutant("namespace_not_validated", "R-NS-4")
class NamespaceNotValidated(MutantTree):
    """A namespace that is neither None nor a str is accepted."""

    def _validate(self, tokens: object, namespace: object) -> list[int]:
        return as_token_list(tokens)
