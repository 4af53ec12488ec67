"""The one twin picker (spec/twins.py): by name, by the environment, with the pure switch,
and never a silent substitution."""

from __future__ import annotations

import pytest

from kachedb_radix import reference
from kachedb_radix.spec import twins


def test_by_name_each_class_of_each_twin() -> None:
    for cls in twins.TWIN_CLASSES:
        found = twins.twin_class("reference", cls)
        assert found is getattr(reference, cls)
        accel_class = twins.twin_class("accel", cls)
        assert accel_class.__module__.startswith("kachedb_radix.accel")
        assert getattr(accel_class, "implementation", "accel") == "accel"


def test_default_follows_the_pure_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(twins.PURE_SWITCH, raising=False)
    assert twins.default_twin() == "accel"
    assert twins.twin_class().implementation == "accel"
    monkeypatch.setenv(twins.PURE_SWITCH, "1")
    assert twins.default_twin() == "reference"
    assert twins.twin_class(None, "RouterIndex") is reference.RouterIndex
    # only "1" is the switch
    assert twins.default_twin({twins.PURE_SWITCH: "0"}) == "accel"


def test_suites_run_both_unless_pure() -> None:
    both = twins.twin_classes("TieredTree", {})
    assert list(both) == ["reference", "accel"]
    assert [cls.implementation for cls in both.values()] == ["reference", "accel"]
    assert list(twins.twin_classes("TieredTree", {twins.PURE_SWITCH: "1"})) == ["reference"]


def test_unknown_names_are_refused() -> None:
    with pytest.raises(twins.TwinError, match=r"unknown implementation 'pure'.*reference, accel"):
        twins.twin_class("pure")
    with pytest.raises(twins.TwinError, match="no twin class 'Tree'"):
        twins.twin_class("reference", "Tree")
    assert issubclass(twins.TwinError, ValueError)


@pytest.mark.usefixtures("without_accel")
def test_accel_missing_is_an_import_error_never_the_reference() -> None:
    with pytest.raises(twins.TwinUnavailable, match="KACHEDB_RADIX_PURE=1"):
        twins.twin_class("accel")
    with pytest.raises(ImportError):
        twins.twin_classes("RadixTree", {})
    found, missing = twins.find_twins("RadixTree", {})
    assert found == {"reference": reference.RadixTree}
    assert missing["accel"].startswith("not importable")
    found, missing = twins.find_twins("RadixTree", {twins.PURE_SWITCH: "1"})
    assert missing == {"accel": "KACHEDB_RADIX_PURE=1"}


def test_a_substituted_class_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from kachedb_radix import accel

    monkeypatch.setattr(accel, "RouterIndex", reference.RouterIndex)
    with pytest.raises(twins.TwinError, match="asked for the accel RouterIndex, got the reference"):
        twins.twin_class("accel", "RouterIndex")
