"""Where things are in the checkout, for tests that read files beside the code."""

from __future__ import annotations

from pathlib import Path

#: The repository's root (the folder holding pyproject.toml).
ROOT = Path(__file__).resolve().parents[2]

#: The tests' data files (``tests/data/``).
DATA = ROOT / "tests" / "data"
