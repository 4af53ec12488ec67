"""The README stays true: its example runs and its tree picture is what the demo draws."""

from __future__ import annotations

import re
from pathlib import Path

from kachedb_radix.demo import run_demo
from reference import RadixTree

README = Path(__file__).resolve().parent.parent / "README.md"


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
