"""Namespaces: separate roots, so nothing ever matches across them (R-NS-*).

A namespace is ``None`` (the default) or a string -- a tenant's salt, a LoRA
adapter, a model. Each has its own root in the tree; a walk starts at the root of
the namespace it is given and never leaves it (R-NS-2). A namespace exists while it
holds a block and disappears with its last one (R-NS-3). Anything else given as a
namespace is refused before the call changes anything (R-NS-4).

The tree (:mod:`kachedb_radix.reference.tree`) and its snapshots
(:mod:`kachedb_radix.reference.snapshot`) both check namespaces and list them in this
one order, so the two helpers live here, beside neither.
"""

from __future__ import annotations

from .errors import InvalidArgumentError


def check_namespace(namespace: object) -> None:
    """Raise InvalidArgumentError unless ``namespace`` is None or a str (R-NS-4). O(1)."""
    if namespace is not None and not isinstance(namespace, str):
        raise InvalidArgumentError(
            f"namespace must be None or a str, got {type(namespace).__name__} {namespace!r}"
        )


def namespace_order(namespace: str | None) -> tuple[bool, str]:
    """Sort key of namespaces: None first, then by name (R-NS-3). O(1)."""
    return (namespace is not None, namespace or "")
