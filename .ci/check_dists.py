"""Check the built distributions: what the sdist and the wheels hold, and that they agree.

Usage: ``python .ci/check_dists.py SDIST WHEEL_FROM_SDIST WHEEL_FROM_TREE`` from the
repository root (``.ci/package`` calls it after ``python -m build``). Fails, naming each
problem, when:

* the sdist lacks a file git tracks (it is the whole source: tests and benchmarks too,
  found by setuptools-scm), or a file a user of the source needs (spec, vectors, stubs,
  ``py.typed``, LICENSE, README);
* the wheel lacks the package data the code reads at run time;
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
    "spec/protocol.schema.json",
    "accel/_radix.pyi",
    "accel/radix.h",
)
#: Files the wheel must hold: what the installed package reads or type checkers need.
WHEEL_REQUIRED = (
    "spec/SPEC.md",
    "spec/protocol.schema.json",
    "accel/_radix.pyi",
    "reference/py.typed",
    "spec/py.typed",
    "accel/py.typed",
)
#: Package data by pattern (fnmatch: ``*`` spans folders): every tracked file that
#: matches must be in the wheel.
WHEEL_DATA_PATTERNS = ("spec/vectors/*.jsonl", "*/py.typed", "*.pyi")


def sdist_names(path: Path) -> set[str]:
    """File names in the sdist, without its top folder."""
    with tarfile.open(path) as archive:
        names = {member.name for member in archive.getmembers() if member.isfile()}
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
    found += [f"sdist lacks tracked file {name}" for name in sources if name not in in_sdist]

    wheel, tree_wheel = wheel_files(from_sdist), wheel_files(from_tree)
    data = {name for name in sources for pattern in WHEEL_DATA_PATTERNS if fnmatch(name, pattern)}
    wanted = set(WHEEL_REQUIRED) | data
    found += [f"wheel lacks {name}" for name in sorted(wanted) if name not in wheel]
    if not any(name.startswith("accel/_radix.") and name.endswith(".so") for name in wheel):
        found.append("wheel lacks the compiled extension accel/_radix*.so")

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
