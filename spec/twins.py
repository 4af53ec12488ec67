"""One home for picking a twin: the reference or the C twin (``accel``), by name, by the
environment, or both for a suite that runs every implementation.

Every class the reference exports has a twin of the same name and API in
:mod:`kachedb_radix.accel` (``RadixTree``, ``TieredTree``, ``RouterIndex``, ``BlockPool``,
``KVCache``, ``BlockAllocator``). Whoever needs one -- the conformance kit, the gate,
``simulate``, ``route``, ``serve``, the tests and the benchmarks -- asks here:

* :func:`twin_class` -- the class ``cls`` of the twin ``name`` (None: :func:`default_twin`);
* :func:`default_twin` -- ``accel`` unless ``KACHEDB_RADIX_PURE=1`` (:data:`PURE_SWITCH`)
  selects the pure-Python reference;
* :func:`twin_classes` -- every twin's class, by name, for a suite that runs each: the
  reference always, ``accel`` unless the pure switch is set;
* :func:`find_twins` -- the same for a caller that reports a missing twin instead of
  failing (the benchmarks: a case that cannot run is skipped, saying why).

No silent fallback: an unknown name or class is a :class:`TwinError` (a ``ValueError``),
``accel`` asked for where its C extension did not build is a :class:`TwinUnavailable`
(an ``ImportError``) naming the way out, and the class handed back is checked to be
the one asked for (its ``implementation`` attribute names the twin), so no caller can
time, serve or test the reference while believing it runs the C twin.

Cost: an import the first time a twin is asked for, O(1) after.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from types import ModuleType
from typing import Any

#: The environment switch that selects the pure-Python reference everywhere: set to
#: ``1``, the default twin is the reference and suites run the reference alone.
PURE_SWITCH = "KACHEDB_RADIX_PURE"

#: The twins, the reference first.
TWIN_NAMES: tuple[str, ...] = ("reference", "accel")

#: The classes both twins export under one name.
TWIN_CLASSES: tuple[str, ...] = (
    "RadixTree",
    "TieredTree",
    "RouterIndex",
    "BlockPool",
    "KVCache",
    "BlockAllocator",
)

#: Where each twin's classes live.
_MODULES: Mapping[str, str] = {
    "reference": "kachedb_radix.reference",
    "accel": "kachedb_radix.accel",
}


class TwinError(ValueError):
    """An unknown twin or class name; the message lists the known ones."""


class TwinUnavailable(ImportError):
    """The C twin was asked for but its extension cannot be imported here."""


def pure(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the pure switch is set (``KACHEDB_RADIX_PURE=1``). O(1)."""
    return (os.environ if environ is None else environ).get(PURE_SWITCH) == "1"


def default_twin(environ: Mapping[str, str] | None = None) -> str:
    """``reference`` when the pure switch is set, else ``accel``. O(1)."""
    return "reference" if pure(environ) else "accel"


def check_name(name: str) -> str:
    """``name`` when it names a twin. O(1).

    Raises:
        TwinError: it names none.
    """
    if name not in TWIN_NAMES:
        raise TwinError(f"unknown implementation {name!r}; choose from {', '.join(TWIN_NAMES)}")
    return name


def twin_module(name: str) -> ModuleType:
    """The package of twin ``name`` (``kachedb_radix.reference`` or ``kachedb_radix.accel``).

    Raises:
        TwinError: unknown name.
        TwinUnavailable: ``accel`` where its C extension did not build.
    """
    try:
        return importlib.import_module(_MODULES[check_name(name)])
    except ImportError as exc:
        raise TwinUnavailable(
            f"the C twin cannot be imported ({exc}); build it with `pip install -e .` "
            f"(needs a C compiler), or set {PURE_SWITCH}=1 to run the reference"
        ) from exc


def twin_class(name: str | None = None, cls: str = "RadixTree") -> Any:
    """Class ``cls`` of twin ``name`` (None: :func:`default_twin`), checked to be that
    twin's own. O(1) after the first import.

    Raises:
        TwinError: unknown twin or class name.
        TwinUnavailable: ``accel`` where its C extension did not build.
    """
    chosen = default_twin() if name is None else check_name(name)
    if cls not in TWIN_CLASSES:
        raise TwinError(f"no twin class {cls!r}; the twins export {', '.join(TWIN_CLASSES)}")
    found = getattr(twin_module(chosen), cls)
    # Every class but the allocator names its twin; a class that names another is a
    # substitution (a C twin module re-exporting the reference's class, say).
    implementation = getattr(found, "implementation", chosen)
    if implementation != chosen:
        raise TwinError(f"asked for the {chosen} {cls}, got the {implementation} one")
    return found


def twin_classes(
    cls: str = "RadixTree", environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Class ``cls`` of every twin a suite runs, by name: the reference always, ``accel``
    unless the pure switch is set. O(1) after the first import.

    Raises:
        TwinError: unknown class name.
        TwinUnavailable: ``accel`` is due (no pure switch) but cannot be imported: only
            the switch may drop it.
    """
    names = ("reference",) if pure(environ) else TWIN_NAMES
    return {name: twin_class(name, cls) for name in names}


def find_twins(
    cls: str = "RadixTree", environ: Mapping[str, str] | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """Class ``cls`` of every twin that can run here, and why each other cannot: for a
    caller that reports a missing twin rather than failing (the benchmarks). The pure
    switch drops ``accel`` on purpose; an extension that did not build drops it with
    the import error as the reason. O(1) after the first import.

    Raises:
        TwinError: unknown class name.
    """
    found = {"reference": twin_class("reference", cls)}
    missing: dict[str, str] = {}
    if pure(environ):
        missing["accel"] = f"{PURE_SWITCH}=1"
        return found, missing
    try:
        found["accel"] = twin_class("accel", cls)
    except TwinUnavailable as exc:
        missing["accel"] = f"not importable: {exc.__cause__ or exc}"
    return found, missing
