"""The README stays true: its example runs and its tree picture is what the demo draws."""

from __future__ import annotations

import re

from kachedb_radix.reference import RadixTree
from kachedb_radix.spec.demo import run_demo
from tests.support.paths import ROOT

README = ROOT / "README.md"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_readme_python_examples_run() -> None:
    """Every worked example executes as written (R-MATCH-1, R-SNAP-2, R-EPOCH-2)."""
    examples = _blocks("python")
    assert len(examples) >= 2
    for example in examples:
        exec(compile(example, str(README), "exec"), {})


def test_readme_tree_picture_is_the_demo_output() -> None:
    """The picture in the README is exactly the tree the demo ends with (R-DUMP-1)."""
    (picture,) = _blocks("text")
    assert picture.strip() in run_demo(RadixTree)


def test_readme_layout_table_names_real_files() -> None:
    """Every file named in "How the code is laid out" exists where the table says.

    A bare name is looked up beside the previous path of its cell (``tree.py``,
    ``walk.py`` under ``reference/``), in ``tests/`` for tests, in ``spec/`` for the
    toolbox table.
    """
    text = README.read_text()
    section = text[text.index("## How the code is laid out") : text.index("## The API")]
    root = README.parent
    checked = 0
    for row in section.splitlines():
        cells = [cell.strip() for cell in row.split("|")[1:-1]]
        if len(cells) < 2 or cells[0].startswith(("capability", "toolbox", "---")):
            continue
        for cell in cells:
            folder = root / "spec"
            for name in re.findall(r"`([\w./]+)`", cell):
                if not re.search(r"(/|\.(py|c|h|md|json))$", name):
                    continue  # an API name, not a file
                if name.startswith("test_"):
                    path = root / "tests" / name
                elif "/" in name.rstrip("/") and (root / name).exists():
                    path = root / name
                    folder = path if name.endswith("/") else path.parent
                else:
                    path = folder / name
                assert path.exists(), f"README layout table names {name}: {path} is missing"
                checked += 1
    assert checked >= 30
