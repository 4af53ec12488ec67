#!/usr/bin/env bash
# Build accel._radix with AddressSanitizer + UndefinedBehaviorSanitizer in a temporary
# copy of the project and run the accel tests against that build.
#
#   accel/sanitize.sh            # from anywhere; exits non-zero on any report
#   KEEP=1 accel/sanitize.sh     # keep the temporary directory (its path is printed)
#
# How: the sources, reference/, the accel tests and their conftest are copied to a
# temporary directory, built there in place with -fsanitize=address,undefined
# (-fno-sanitize-recover, so undefined behaviour aborts the run), and pytest runs from
# that directory so `import accel` finds the sanitized build (checked before the run).
# The interpreter is not instrumented, so the ASan runtime is LD_PRELOADed (from
# `gcc -print-file-name=libasan.so`), leak detection is off (CPython keeps objects
# alive until exit by design) and PYTHONMALLOC=malloc routes every PyMem allocation of
# the extension through ASan's malloc so overruns of its arrays are caught.
#
# Besides the accel tests it runs the shared suite's accel cases and the conformance
# machine (kachedb-radix conform accel; CONFORM_EXAMPLES sets its example count).
# The leak test is not run here: ASan's quarantine holds freed memory on purpose, so
# a flat-RSS check means nothing under it (tests/test_accel_leak.py runs in the normal
# suite). The snapshot tests run here too, and the threaded stress test for accel
# only (4 reader threads + the writer, every GIL-free snapshot match under ASan; the
# reference's half of it takes minutes and has no C in it). Takes a few minutes on two
# cores.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python}"
work="$(mktemp -d "${TMPDIR:-/tmp}/accel-sanitize.XXXXXX")"
if [[ "${KEEP:-0}" != "1" ]]; then
    trap 'rm -rf "$work"' EXIT
fi
echo "sanitize: building in $work"

mkdir -p "$work/accel" "$work/tests"
cp "$root"/accel/*.c "$root"/accel/*.h "$root"/accel/*.py "$root"/accel/*.pyi "$work/accel/"
mkdir -p "$work/accel/blockpool"
cp "$root"/accel/blockpool/*.py "$work/accel/blockpool/"
cp -r "$root/reference" "$root/spec" "$work/"
cp "$root/pyproject.toml" "$root/README.md" "$root/LICENSE" "$work/"
cp "$root/tests/__init__.py" "$root/tests/conftest.py" "$root/tests/support.py" \
    "$root/tests/model.py" "$root"/tests/test_accel_*.py "$root/tests/test_tree.py" \
    "$root/tests/test_tokens.py" "$root/tests/test_bad_input.py" "$root/tests/test_model.py" \
    "$root/tests/test_snapshots.py" "$root/tests/test_snapshot_stress.py" \
    "$root/tests/test_reader_leak.py" "$root/tests/twins.py" "$work/tests/"

flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -O1 -g"
(
    cd "$work"
    CFLAGS="$flags" LDFLAGS="-fsanitize=address,undefined" \
        "$python" -c 'from setuptools import setup; setup()' -q build_ext --inplace --force >/dev/null
)

asan="$(gcc -print-file-name=libasan.so)"
ubsan="$(gcc -print-file-name=libubsan.so)"
export LD_PRELOAD="$asan $ubsan"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export PYTHONMALLOC=malloc
unset PYTHONPATH

cd "$work"
built="$("$python" -c 'import accel._radix as m; print(m.__file__)')"
case "$built" in
    "$work"/*) echo "sanitize: testing $built" ;;
    *) echo "sanitize: picked up $built instead of the sanitized build" >&2; exit 1 ;;
esac

start=$SECONDS
# The accel tests, then the shared suite's accel cases, then the conformance machine.
"$python" -m pytest tests/test_accel_basics.py tests/test_accel_differential.py \
    tests/test_accel_snapshots.py tests/test_snapshots.py \
    "tests/test_snapshot_stress.py::test_readers_see_whole_versions_and_no_early_reuse[accel]" \
    -p no:cacheprovider -q -o addopts="" "$@"
"$python" -m pytest tests/test_tree.py tests/test_tokens.py tests/test_bad_input.py \
    tests/test_model.py tests/test_reader_leak.py -k accel -p no:cacheprovider -q \
    -o addopts="" "$@"
"$python" -m spec conform accel --examples "${CONFORM_EXAMPLES:-300}"
echo "sanitize: clean ($((SECONDS - start)) s of tests and conformance)"
