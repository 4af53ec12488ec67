"""The one version string of kachedb-radix.

Everything reads it from here: the package metadata (pyproject.toml's ``[tool.setuptools.dynamic]``,
which setuptools reads from this file without importing it), ``kachedb_radix.reference.__version__``
and ``kachedb-radix --version``. Bump it here, and add an entry to docs/changelog.md, to make a
release (docs/releasing.md).
"""

__version__ = "0.1.0"
