"""Check the built distributions: what the sdist and the wheels hold, and that they agree.

Usage: ``python .ci/check_dists.py SDIST WHEEL_FROM_SDIST WHEEL_FROM_TREE`` from the
repository root (``.ci/package`` calls it after ``python -m build``). Fails, naming each
problem, when:

* the sdist lacks a file git tracks (it is the whole source: tests and benchmarks too,
  found by setuptools-scm), or a file a user of the source needs (spec, vectors, stubs,
  ``py.typed``, LICENSE, README);
* the wheel lacks a file git tracks inside a package (its code and its data: spec,
  schemas, vectors, page assets, stubs, ``py.typed``), under the import root
  (``reference/tree.py`` is ``kachedb_radix/reference/tree.py`` in the wheel), other than
  the sources that stay in the sdist (``SOURCE_ONLY``) -- so a data file added without a
  ``package-data`` entry in pyproject.toml fails here, not on a user's machine;
* the wheel holds anything at its top level but the import root ``kachedb_radix/`` and its
  ``.dist-info`` folder, or ``top_level.txt`` names anything else;
* the wheel built from the sdist differs from the one built from the tree in its file
  list, or in any file but the compiled extension (its debug info names the temporary
  build folder) and RECORD (which hashes it).
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from fnmatch import fnmatch
from pathlib import Path

#: Files the sdist must hold, relative to its top folder.
SDIST_REQUIRED = (
    "LICENSE",
    "README.md",
    "pyproject.toml",
    "PKG-INFO",
    "spec/SPEC.md",
    "spec/protocol/schema.json",
    "accel/_radix.pyi",
    "accel/radix.h",
)
#: The package folders of the checkout, each installed under the import root.
PACKAGES = ("reference/", "spec/", "accel/")
#: The one top-level import package of the wheel.
ROOT_PACKAGE = "kachedb_radix"
#: Tracked files inside the packages that stay out of the wheel (fnmatch: ``*`` spans
#: folders): the C twin's sources (the wheel has it compiled) and its developer notes.
SOURCE_ONLY = ("accel/*.c", "accel/*.h", "accel/DESIGN.md", "accel/*.sh")
#: Tracked paths the sdist may leave out: the import root's links for mypy
#: (.ci/import-root/kachedb_radix/*, links to folders, which setuptools does not archive;
#: a checkout has them, and nothing built from the sdist needs them).
SDIST_OPTIONAL = (".ci/import-root/*",)


def sdist_names(path: Path) -> set[str]:
    """File names in the sdist, without its top folder."""
    with tarfile.open(path) as archive:
        # A link is a file of the sdist as it is of git (where setuptools archives it).
        members = archive.getmembers()
        names = {member.name for member in members if member.isfile() or member.issym()}
    return {name.split("/", 1)[1] for name in names}


def wheel_files(path: Path) -> dict[str, bytes]:
    """Each file of the wheel with its bytes."""
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def tracked() -> list[str]:
    """The files git tracks in this checkout."""
    listed = subprocess.run(["git", "ls-files"], capture_output=True, text=True, check=True)
    return listed.stdout.splitlines()


def problems(sdist: Path, from_sdist: Path, from_tree: Path) -> list[str]:
    """Every problem found, one sentence each."""
    found: list[str] = []
    in_sdist, sources = sdist_names(sdist), tracked()
    found += [f"sdist lacks {name}" for name in SDIST_REQUIRED if name not in in_sdist]
    found += [
        f"sdist lacks tracked file {name}"
        for name in sources
        if name not in in_sdist and not any(fnmatch(name, skip) for skip in SDIST_OPTIONAL)
    ]

    wheel, tree_wheel = wheel_files(from_sdist), wheel_files(from_tree)
    wanted = [
        name
        for name in sources
        if name.startswith(PACKAGES) and not any(fnmatch(name, glob) for glob in SOURCE_ONLY)
    ]
    found += [
        f"wheel lacks {ROOT_PACKAGE}/{name} (package-data?)"
        for name in wanted
        if f"{ROOT_PACKAGE}/{name}" not in wheel
    ]
    extension = f"{ROOT_PACKAGE}/accel/_radix."
    if not any(name.startswith(extension) and name.endswith(".so") for name in wheel):
        found.append(f"wheel lacks the compiled extension {extension}*.so")
    tops = {name.split("/", 1)[0] for name in wheel}
    dist_info = {top for top in tops if top.endswith(".dist-info")}
    others = sorted(tops - dist_info - {ROOT_PACKAGE})
    found += [f"the wheel's top level holds {top}" for top in others]
    for info in dist_info:
        listed = wheel.get(f"{info}/top_level.txt", b"").decode().split()
        if listed != [ROOT_PACKAGE]:
            found.append(f"{info}/top_level.txt names {listed}, not [{ROOT_PACKAGE!r}]")

    only_sdist = sorted(wheel.keys() - tree_wheel.keys())
    only_tree = sorted(tree_wheel.keys() - wheel.keys())
    found += [f"only the wheel built from the sdist has {name}" for name in only_sdist]
    found += [f"only the wheel built from the tree has {name}" for name in only_tree]
    for name in sorted(wheel.keys() & tree_wheel.keys()):
        if name.endswith((".so", "/RECORD")):
            continue
        if wheel[name] != tree_wheel[name]:
            found.append(f"{name} differs between the two wheels")
    return found


def main(argv: list[str]) -> int:
    """Print the verdict; exit status 1 when anything is wrong."""
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    sdist, from_sdist, from_tree = map(Path, argv)
    found = problems(sdist, from_sdist, from_tree)
    for problem in found:
        print(f"check_dists: {problem}", file=sys.stderr)
    if found:
        return 1
    print(
        f"check_dists: {sdist.name} holds every tracked file; the wheel built from it "
        f"({len(wheel_files(from_sdist))} files) is the wheel built from the tree"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
