#!/usr/bin/env bash
# Line and branch coverage of the C twin (gcov), gated: kachedb_radix.accel._radix built with
# gcc --coverage in a temporary copy of the project, exercised by the tests of the C twin
# and by the fuzz corpus replayed through the differential harness, summarised per file,
# and failed when the total is under the thresholds.
#
#   accel/coverage.sh                      # the gate (about a minute on two cores)
#   COVERAGE_MIN_LINES=97 COVERAGE_MIN_BRANCHES=90 accel/coverage.sh   # the defaults
#   FUZZ_CORPUS=DIR accel/coverage.sh      # also replay a campaign's corpus
#   KEEP=1 accel/coverage.sh               # keep the directory (the .gcov files are in it)
#
# The tests are the ones that run the C twin: tests/accel (but the leak test, whose
# 200,000 calls add nothing to coverage) and the accel cases of tests/tree,
# tests/snapshots and tests/events (the C tree's events, the C router index), with a fixed Hypothesis seed so that two runs measure the same
# examples; -x stops at the first failure. -O0 so lines map to code one to one;
# branches are gcc's (each side of every condition, && and || included), counted
# "taken at least once". The figures in docs/reliability.md and accel/DESIGN.md come from this script; the
# branches no test can take are listed there ("Coverage").
set -euo pipefail

# shellcheck source=accel/workcopy.sh
source "$(dirname "${BASH_SOURCE[0]}")/workcopy.sh" coverage
rm -rf "$work/tests"
cp -r "$root/tests" "$root/benchmarks" "$work/"
find "$work/tests" -name __pycache__ -prune -exec rm -rf {} +
build_in_place "${CC:-gcc}" "--coverage -O0 -g" "--coverage"
check_built coverage
cd "$work"

min_lines="${COVERAGE_MIN_LINES:-97}"
min_branches="${COVERAGE_MIN_BRANCHES:-90}"
start=$SECONDS
# The C twin's tests (every test of tests/accel, the accel cases of the shared suites),
# then the fuzz corpus.
"$python" -m pytest tests/accel tests/tree tests/snapshots tests/events -k "accel" -q -p no:cacheprovider \
    -o addopts="" -x --hypothesis-seed=0 --deselect tests/accel/test_leak.py "$@"
"$python" -m tests.accel.fuzz_harness --seed-corpus "$work/seeds" >/dev/null
inputs=("$work"/seeds/* "$root"/tests/accel/fuzz_regressions/*)
if [[ -n "${FUZZ_CORPUS:-}" ]]; then
    cp -r "$FUZZ_CORPUS" "$work/campaign"  # a still-running campaign rewrites its corpus
    inputs+=("$work"/campaign/*)
fi
printf '%s\0' "${inputs[@]}" | xargs -0 -n 200 "$python" -m tests.accel.fuzz_harness >/dev/null
echo "coverage: replayed ${#inputs[@]} fuzz inputs"

objects="$(dirname "$(find build -name '_radix.o' | head -n 1)")"
# One gcov run per compiled unit (each file is one: accel/DESIGN.md, "Sources").
units=()
for gcno in "$objects"/*.gcno; do units+=("accel/$(basename "${gcno%.gcno}").c"); done
gcov -b -o "$objects" "${units[@]}" >"$work/gcov.txt" 2>"$work/gcov.err"
"$python" - "$work/gcov.txt" "$min_lines" "$min_branches" <<'EOF'
import re
import sys

# gcov -b prints, per source file: "File 'x'", "Lines executed:P% of N",
# "Branches executed:P% of N", "Taken at least once:P% of N", "Calls executed:...".
rows, name, totals = {}, None, {"lines": [0, 0], "branches": [0, 0]}
for line in open(sys.argv[1], encoding="utf-8"):
    if line.startswith("File '"):
        name = line.split("'")[1]
    elif line.startswith("Creating") or not line.strip():
        name = None  # the end of a file's block (a unit's summary line may follow)
    # Third-party code (accel/vendor/: xxHash, tested upstream) is not ours to gate.
    elif name and name.startswith("accel/") and not name.startswith("accel/vendor/") and (m := re.match(r"(Lines executed|Taken at least once):([\d.]+)% of (\d+)", line)):
        kind = "lines" if m.group(1) == "Lines executed" else "branches"
        total = int(m.group(3))
        hit = round(float(m.group(2)) * total / 100)
        rows.setdefault(name, {})[kind] = (hit, total)
print("| file | lines | branches taken |")
print("|---|---:|---:|")
for name in sorted(rows):
    cells = []
    for kind in ("lines", "branches"):
        hit, total = rows[name].get(kind, (0, 0))
        totals[kind][0] += hit
        totals[kind][1] += total
        cells.append(f"{100 * hit / total:.1f}% of {total}" if total else "-")
    print(f"| {name} | {cells[0]} | {cells[1]} |")
cells = [f"{100 * h / t:.1f}% of {t}" for h, t in (totals["lines"], totals["branches"])]
print(f"| **all** | **{cells[0]}** | **{cells[1]}** |")
failed = False
for kind, minimum in (("lines", float(sys.argv[2])), ("branches", float(sys.argv[3]))):
    hit, total = totals[kind]
    share = 100 * hit / total
    verdict = "ok" if share >= minimum else "UNDER THE GATE"
    failed |= share < minimum
    print(f"coverage: {kind} {share:.2f}% (gate {minimum:g}%): {verdict}")
sys.exit(1 if failed else 0)
EOF
echo "coverage: $((SECONDS - start)) s of tests, fuzz replay and gcov"
