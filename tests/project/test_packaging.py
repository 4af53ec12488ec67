"""The packaging facts agree with each other: the supported Python versions (requires-python,
the classifiers, the README, the Pythons CI runs), the version's single source, the quick
suite's modules, the one import root. A wheel is built and inspected here; the whole build
(sdist, manylinux repair, a compiler-free install running every command) is ``.ci/package``."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from tests.support.paths import ROOT


def _project() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)


def _classified_versions() -> list[str]:
    """The ``Programming Language :: Python :: 3.x`` classifiers' versions, ascending."""
    prefix = "Programming Language :: Python :: "
    classifiers: list[str] = _project()["project"]["classifiers"]
    found = [name.removeprefix(prefix) for name in classifiers if name.startswith(prefix)]
    return sorted((name for name in found if re.fullmatch(r"3\.\d+", name)), key=Version)


def test_classifiers_start_at_requires_python() -> None:
    versions = _classified_versions()
    assert versions, "no Programming Language :: Python :: 3.x classifier"
    required = SpecifierSet(_project()["project"]["requires-python"])
    assert all(version in required for version in versions)
    lowest = Version(versions[0])
    below = f"{lowest.major}.{lowest.minor - 1}"
    assert below not in required, f"requires-python allows {below}, which no classifier lists"


def test_readme_states_the_supported_versions() -> None:
    line = next(
        line
        for line in (ROOT / "README.md").read_text().split("\n\n")
        if line.startswith("Supported Python versions:")
    )
    stated = re.findall(r"\b3\.\d+\b", line.split("(", 1)[0])
    assert stated == _classified_versions()
    assert f'`requires-python = "{_project()["project"]["requires-python"]}"`' in line


def test_ci_runs_the_lowest_and_the_highest_version() -> None:
    run = (ROOT / ".ci" / "run").read_text()
    match = re.search(r"^ci_pythons=\(([\d. ]+)\)$", run, flags=re.MULTILINE)
    assert match is not None, ".ci/run does not name its Pythons in ci_pythons=(...)"
    versions = _classified_versions()
    assert match.group(1).split() == [versions[0], versions[-1]]


def test_the_version_has_one_source() -> None:
    project = _project()
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "kachedb_radix.reference._version.__version__"
    assert "__version__ = " in (ROOT / "reference" / "_version.py").read_text()


#: How a quick module marks itself; ``.ci/package`` finds the quick suite's modules by this
#: line (the fresh environment there has no source tree to collect the rest from).
QUICK_MARK = "pytestmark = pytest.mark.quick"


def test_quick_modules_are_found_by_their_mark(request: pytest.FixtureRequest) -> None:
    """The modules ``.ci/package`` finds by :data:`QUICK_MARK` are exactly those whose tests
    carry the ``quick`` marker, and they are the ones the quick suite is meant to have."""
    tests = ROOT / "tests"
    by_text = {
        path.relative_to(tests).as_posix()
        for path in tests.rglob("test_*.py")
        if QUICK_MARK in path.read_text().splitlines()
    }
    by_marker = {
        Path(str(item.path)).relative_to(tests).as_posix()
        for item in request.session.items
        if item.get_closest_marker("quick") is not None
    }
    if request.session.items and len({item.path for item in request.session.items}) > 20:
        # A whole-suite run (CI's coverage run leaves tests/accel out): the folders it
        # collected hold exactly the marked modules of those folders.
        items = request.session.items
        folders = {Path(str(item.path)).relative_to(tests).parts[0] for item in items}
        assert by_marker == {name for name in by_text if name.split("/")[0] in folders}
    assert {"tree/test_tree.py", "accel/test_basics.py", "project/test_cli.py"} <= by_text


def _package_folders() -> set[str]:
    """Every folder with an ``__init__.py`` under the three package folders, as its
    import name under the root."""
    found = set()
    for top in ("reference", "accel", "spec"):
        for init in (ROOT / top).rglob("__init__.py"):
            if ".ci" not in init.parts and "__pycache__" not in init.parts:
                folder = init.parent.relative_to(ROOT).as_posix().replace("/", ".")
                found.add(f"kachedb_radix.{folder}")
    return found


def test_every_package_is_listed_under_the_import_root() -> None:
    """pyproject.toml lists every package (a new subpackage left out would be missing from
    the wheel), all under ``kachedb_radix``, and maps the three top folders to it."""
    setuptools = _project()["tool"]["setuptools"]
    assert set(setuptools["packages"]) == _package_folders()
    assert setuptools["package-dir"] == {
        "kachedb_radix.accel": "accel",
        "kachedb_radix.reference": "reference",
        "kachedb_radix.spec": "spec",
    }
    assert _project()["project"]["scripts"]["kachedb-radix"].startswith("kachedb_radix.")


def test_the_import_root_links_lead_to_the_package_folders() -> None:
    """``.ci/import-root/kachedb_radix/`` (what mypy and the work copies import from) holds
    exactly one link per top folder, to that folder."""
    links = ROOT / ".ci" / "import-root" / "kachedb_radix"
    assert sorted(path.name for path in links.iterdir()) == ["accel", "reference", "spec"]
    for link in links.iterdir():
        assert link.is_symlink() and link.resolve() == (ROOT / link.name).resolve()


@pytest.mark.slow
def test_the_wheel_has_one_top_level_package(tmp_path: Path) -> None:
    """Built from this tree, the wheel installs ``kachedb_radix`` and nothing else beside its
    dist-info: the three packages and the C extension inside it."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path), str(ROOT)],
        check=True, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("kachedb_radix-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        top_level = archive.read(next(n for n in names if n.endswith("top_level.txt"))).decode()
    tops = {name.split("/", 1)[0] for name in names}
    (dist_info,) = {top for top in tops if top.endswith(".dist-info")}
    assert tops == {"kachedb_radix", dist_info}, tops
    assert top_level.split() == ["kachedb_radix"]
    assert {name.split("/")[1] for name in names if name.startswith("kachedb_radix/")} == {
        "accel",
        "reference",
        "spec",
    }
    assert any(re.fullmatch(r"kachedb_radix/accel/_radix\.cpython-.*\.so", name) for name in names)
