#!/usr/bin/env bash
# Differential fuzzing of kachedb_radix.accel._radix against the reference (tests/accel/fuzz_harness.py) with
# atheris (libFuzzer for Python), on a build of the C twin instrumented for libFuzzer's
# coverage and checked by AddressSanitizer + UndefinedBehaviorSanitizer.
#
#   accel/fuzz.sh                         # bounded campaign: FUZZ_SECONDS (default 90)
#   FUZZ_RUNS=1000000 accel/fuzz.sh       # a campaign of that many executions (no time limit)
#   FUZZ_CORPUS=DIR accel/fuzz.sh         # keep the evolving corpus in DIR (default: temporary)
#   KEEP=1 accel/fuzz.sh                  # keep the temporary build directory
#   accel/fuzz.sh -jobs=2 ...             # extra arguments go to libFuzzer
#
# The long campaign of the closing note, on a shared machine:
#   FUZZ_RUNS=1000000 FUZZ_CORPUS=/tmp/kachedb-corpus nice -n 10 accel/fuzz.sh
#
# Needs clang (Debian: clang, libclang-rt-dev) and atheris (pip; installed here if
# missing). How: like accel/sanitize.sh, the sources are copied to a temporary
# directory and built there in place with
# -fsanitize=fuzzer-no-link,address,undefined (-fno-sanitize-recover, so undefined
# behaviour aborts); the interpreter is not instrumented, so atheris's own
# ASan+libFuzzer runtime (asan_with_fuzzer.so, which also carries UBSan's handlers) is
# LD_PRELOADed, leak detection is off (CPython keeps objects until exit by design) and
# PYTHONMALLOC=malloc routes the extension's PyMem allocations through ASan (short
# allocation stacks and a small quarantine keep that affordable: rerun a crash with
# ASAN_OPTIONS=detect_leaks=0:malloc_context_size=30 for full stacks). The seed
# corpus is the golden vectors and kit traces, encoded (tests/accel/fuzz_harness.py
# --seed-corpus), plus the regression inputs in tests/accel/fuzz_regressions/. Inputs are
# capped at FUZZ_MAX_LEN bytes (default 96, a dozen operations): short inputs keep the
# executions per second up, and every operation is checked on its own anyway.
#
# A crash or disagreement stops the campaign; libFuzzer writes the input to
# $FUZZ_ARTIFACTS (default: the current directory) as crash-*; minimise it (under the
# same instrumented build) with
#   accel/fuzz.sh --minimize crash-FILE tests/accel/fuzz_regressions/NAME
# and replay it: python -m tests.accel.fuzz_harness tests/accel/fuzz_regressions/NAME.
# Fix it, and keep the minimised input in tests/accel/fuzz_regressions/ (replayed by
# tests/accel/test_fuzz.py).
set -euo pipefail

if ! command -v clang >/dev/null; then
    echo "fuzz: clang not found (Debian: apt-get install clang libclang-rt-dev)" >&2
    exit 1
fi
# shellcheck source=accel/workcopy.sh
source "$(dirname "${BASH_SOURCE[0]}")/workcopy.sh" fuzz
if ! "$python" -c 'import atheris' 2>/dev/null; then
    "$python" -m pip install --quiet atheris
fi
rm -rf "$work/tests"
cp -r "$root/tests" "$work/"
find "$work/tests" -name __pycache__ -prune -exec rm -rf {} +
flags="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
build_in_place clang "$flags -fno-omit-frame-pointer -O1 -g" "-fsanitize=address,undefined"

corpus="${FUZZ_CORPUS:-$work/corpus}"
mkdir -p "$corpus" "$work/seeds"
cd "$work"
"$python" -m tests.accel.fuzz_harness --seed-corpus "$work/seeds"
cp "$root"/tests/accel/fuzz_regressions/* "$work/seeds/" 2>/dev/null || true

atheris_dir="$("$python" -c 'import atheris; print(atheris.path())')"
export LD_PRELOAD="$atheris_dir/asan_with_fuzzer.so"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1:halt_on_error=1:allocator_may_return_null=1:malloc_context_size=2:quarantine_size_mb=16}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export PYTHONMALLOC=malloc

check_built fuzz

limits=(-max_len="${FUZZ_MAX_LEN:-96}")
if [[ -n "${FUZZ_RUNS:-}" ]]; then
    limits+=(-runs="$FUZZ_RUNS")
else
    limits+=(-max_total_time="${FUZZ_SECONDS:-90}")
fi
if [[ "${1:-}" == "--minimize" ]]; then
    cd "$caller"
    "$python" -c 'import sys; sys.path.insert(0, sys.argv[1]); from tests.accel.fuzz_harness import main
raise SystemExit(main(sys.argv[2:]))' "$work" --minimize "$2" "$3"
    exit
fi
# Crash files land where the caller is, unless FUZZ_ARTIFACTS says otherwise.
artifacts="${FUZZ_ARTIFACTS:-$caller}"
inputs=("$corpus" "$work/seeds")
for arg in "$@"; do
    # A file argument (a crash to minimise or replay) replaces the corpus.
    if [[ "$arg" != -* ]]; then inputs=(); fi
done
"$python" -m tests.accel.fuzz_harness "${limits[@]}" -artifact_prefix="$artifacts/" \
    -print_final_stats=1 "$@" "${inputs[@]}"
echo "fuzz: clean"
