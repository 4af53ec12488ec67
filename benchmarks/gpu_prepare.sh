#!/usr/bin/env bash
# Prepare, on a machine with a compiler and the network, what benchmarks/gpu_check.sh needs on
# a GPU machine that can install nothing: the C extension built for that machine's Python, and
# wheels of the pure runtime dependencies (`immutables`, `typing_extensions`) for it.  Both land in git-ignored paths, to be carried to the device:
#
#   benchmarks/gpu_prepare.sh [PYTHON]      # default: python3.12 (the lent GPU machine's)
#
# prints the paths to carry:  accel/_radix.cpython-3XX-<platform>.so  and  .gpu-wheels
set -euo pipefail
PY="${1:-python3.12}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/gpu-prepare.XXXXXX")"
trap 'rm -rf "$work"' EXIT

"$PY" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q "setuptools>=77"
cd "$root"
"$work/venv/bin/python" -c 'from setuptools import setup; setup()' build_ext --inplace -q \
  >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
rm -rf .gpu-wheels
"$work/venv/bin/python" -m pip download -q --only-binary=:all: -d .gpu-wheels \
  immutables typing_extensions
so=$("$work/venv/bin/python" -c \
  'import sysconfig; print("accel/_radix" + sysconfig.get_config_var("EXT_SUFFIX"))')
test -f "$so"
echo "carry: $so .gpu-wheels"
