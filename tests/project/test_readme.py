"""The README stays true and short: its tree picture is what the demo draws, its layout
table names real files, and it fits in 12 KiB (the rest is in docs/).

Its examples, commands and links are checked with every other page's, in test_docs.py.
"""

from __future__ import annotations

import re

from kachedb_radix.reference import RadixTree
from kachedb_radix.spec.cli.demo import run_demo
from tests.support import docs
from tests.support.paths import ROOT

README = ROOT / "README.md"

#: The README's budget: what it is, install, the two commands, the API in one example,
#: a tree, the commands and the layout. Everything else belongs on a docs page.
MAX_BYTES = 12 * 1024

#: Where the tests live now: one folder per capability, and shared helpers.
TEST_FOLDERS = {
    "tree", "snapshots", "accel", "kit", "protocol", "blockpool", "simulate", "explain",
    "gate", "project", "support", "events", "tiers",
}  # fmt: skip


def test_readme_is_short() -> None:
    size = len(README.read_bytes())
    assert size <= MAX_BYTES, f"README.md is {size} bytes; move sections to docs/"


def test_readme_keeps_the_two_commands() -> None:
    """The project's contract: the main job and the test command, exactly."""
    blocks = docs.blocks(README.read_text(), "console")
    commands = [command for body in blocks for command in docs.console_commands(body)]
    assert "kachedb-radix simulate" in commands
    assert "python -m pytest" in commands
    assert "pip install -e '.[test]'" in commands


def test_readme_tree_picture_is_the_demo_output() -> None:
    """The picture in the README is exactly the tree the demo ends with (R-DUMP-1)."""
    (picture,) = docs.blocks(README.read_text(), "text")
    assert picture.strip() in run_demo(RadixTree)


def test_readme_layout_table_names_real_files() -> None:
    """Every file named in "How the code is laid out" exists where the table says.

    A name with a folder is taken from the repository's root; a bare name is looked up
    beside the previous path of its cell (``tree.py``, ``walk.py`` under
    ``reference/``; ``lockstep.py`` under ``conform/``), or in ``spec/`` in the toolbox
    table, which names spec/'s files bare. A test must sit in one of the capability
    folders of ``tests/``.
    """
    text = README.read_text()
    section = text[text.index("## How the code is laid out") : text.index("## The API")]
    checked = tests = 0
    for row in section.splitlines():
        cells = [cell.strip() for cell in row.split("|")[1:-1]]
        if len(cells) < 2 or cells[0].startswith(("capability", "toolbox", "---")):
            continue
        for cell in cells:
            folder = ROOT / "spec"
            for name in re.findall(r"`([\w./]+)`", cell):
                if not re.search(r"(/|\.(py|c|h|md|json|toml))$", name):
                    continue  # an API name, not a file
                # From the root, from spec/ (the toolbox table), or beside the last path.
                places = [folder / name] if "/" not in name.rstrip("/") else []
                places += [ROOT / name, ROOT / "spec" / name, folder / name]
                path = next((place for place in places if place.exists()), places[0])
                if "/" in name:
                    folder = path if name.endswith("/") else path.parent
                assert path.exists(), f"README layout table names {name}: {path} is missing"
                if name.startswith("tests/"):
                    assert path.parent.parent == ROOT / "tests", f"{name}: not in tests/<folder>/"
                    assert path.parent.name in TEST_FOLDERS, f"{name}: unknown test folder"
                    tests += 1
                checked += 1
    assert checked >= 30 and tests >= 10
