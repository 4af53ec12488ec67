"""Build the C twin ``accel._radix`` (project metadata lives in pyproject.toml).

``pip install -e '.[test]'`` compiles it; so does ``python setup.py build_ext --inplace``.
Extra flags (``-O2 -std=c11 -Wall -Wextra``) are passed to GCC and Clang only.
"""

from __future__ import annotations

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

SOURCES = [
    "accel/_radix.c",
    "accel/tokens.c",
    "accel/alloc.c",
    "accel/objects.c",
    "accel/inspect.c",
]
GCC_FLAGS = ["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-missing-field-initializers"]


class BuildExt(build_ext):
    """Add the GCC/Clang flags when the compiler is one of them."""

    def build_extensions(self) -> None:
        if self.compiler.compiler_type == "unix":
            for extension in self.extensions:
                extension.extra_compile_args = [*GCC_FLAGS, *extension.extra_compile_args]
        super().build_extensions()


setup(
    ext_modules=[
        Extension(
            "accel._radix",
            sources=SOURCES,
            # snapshot.c is compiled inside _radix.c's unit (it shares its static helpers).
            depends=["accel/radix.h", "accel/snapshot.c"],
        )
    ],
    cmdclass={"build_ext": BuildExt},
)
