"""One version string: the package metadata, ``kachedb_radix.reference.__version__`` and
``kachedb-radix --version`` all come from ``reference/_version.py``."""

from __future__ import annotations

from importlib.metadata import version

import pytest
from packaging.version import Version

from kachedb_radix import reference
from kachedb_radix.spec.cli.main import main

#: In the quick suite (``python -m pytest -m quick``), run on the installed wheel in CI.
pytestmark = pytest.mark.quick


def test_metadata_and_module_agree() -> None:
    """Fails after a bump until the package is reinstalled (pip install -e .)."""
    assert version("kachedb-radix") == reference.__version__
    assert str(Version(reference.__version__)) == reference.__version__  # PEP 440, normalised


def test_command_line_prints_the_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"kachedb-radix {reference.__version__}\n"
