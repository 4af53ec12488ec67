#!/usr/bin/env bash
# Build kachedb_radix.accel._radix with AddressSanitizer + UndefinedBehaviorSanitizer in a temporary
# copy of the project and run the accel tests against that build.
#
#   accel/sanitize.sh            # from anywhere; exits non-zero on any report
#   KEEP=1 accel/sanitize.sh     # keep the temporary directory (its path is printed)
#
# How: the sources, reference/, spec/ and the tests are copied to a temporary directory
# (accel/workcopy.sh), built there in place with -fsanitize=address,undefined
# (-fno-sanitize-recover, so undefined behaviour aborts the run), and pytest runs from
# that directory with its import root first on the path, so `import kachedb_radix.accel`
# finds the sanitized build (checked before the run).
# The interpreter is not instrumented, so the ASan runtime is LD_PRELOADed (from
# `gcc -print-file-name=libasan.so`), leak detection is off (CPython keeps objects
# alive until exit by design) and PYTHONMALLOC=malloc routes every PyMem allocation of
# the extension through ASan's malloc so overruns of its arrays are caught.
#
# Besides the accel tests (the allocation-failure sweep and the invariant breaks among
# them: every error path under ASan) it runs the shared suite's accel cases (clone's
# included) and the conformance machine (kachedb-radix conform accel; CONFORM_EXAMPLES
# sets its example count).
# The leak test is not run here: ASan's quarantine holds freed memory on purpose, so
# a flat-RSS check means nothing under it (tests/accel/test_leak.py runs in the normal
# suite). The snapshot tests run here too, and the threaded stress test for accel
# only (4 reader threads + the writer, every GIL-free snapshot match under ASan; the
# reference's half of it takes minutes and has no C in it). Takes a few minutes on two
# cores.
set -euo pipefail

# shellcheck source=accel/workcopy.sh
source "$(dirname "${BASH_SOURCE[0]}")/workcopy.sh" sanitize
rm -rf "$work/tests"
cp -r "$root/tests" "$work/"
find "$work/tests" -name __pycache__ -prune -exec rm -rf {} +
build_in_place "${CC:-gcc}" \
    "-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -O1 -g" \
    "-fsanitize=address,undefined"

asan="$(gcc -print-file-name=libasan.so)"
ubsan="$(gcc -print-file-name=libubsan.so)"
export LD_PRELOAD="$asan $ubsan"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export PYTHONMALLOC=malloc

check_built sanitize
cd "$work"

start=$SECONDS
# The accel tests, then the shared suite's accel cases, then the conformance machine.
"$python" -m pytest tests/accel/test_basics.py tests/accel/test_differential.py \
    tests/accel/test_snapshots.py tests/accel/test_alloc_failures.py \
    tests/accel/test_invariants.py tests/accel/test_edges.py tests/snapshots/test_snapshots.py \
    tests/accel/test_router.py \
    "tests/snapshots/test_stress.py::test_readers_see_whole_versions_and_no_early_reuse[accel]" \
    -p no:cacheprovider -q -o addopts="" "$@"
"$python" -m pytest tests/tree/test_tree.py tests/tree/test_tokens.py tests/tree/test_bad_input.py \
    tests/tree/test_model.py tests/tree/test_clone.py tests/snapshots/test_reader_leak.py \
    tests/events/test_tree_events.py tests/events/test_router_index.py -k accel \
    -p no:cacheprovider -q \
    -o addopts="" "$@"
"$python" -m kachedb_radix.spec conform accel --examples "${CONFORM_EXAMPLES:-300}"
echo "sanitize: clean ($((SECONDS - start)) s of tests and conformance)"
