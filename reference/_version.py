"""The one version string of kachedb-radix.

Everything reads it from here: the package metadata (pyproject.toml's ``[tool.setuptools.dynamic]``,
which setuptools reads from this file without importing it), ``kachedb_radix.reference.__version__``
and ``kachedb-radix --version``. Bump it here, and add a README CHANGELOG entry, to make a release.
"""

__version__ = "0.1.0"
