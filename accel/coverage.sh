#!/usr/bin/env bash
# Line and branch coverage of the C twin (gcov): kachedb_radix.accel._radix built with gcc --coverage
# in a temporary copy of the project, exercised by the test suite's accel cases and by
# the fuzz corpus replayed through the differential harness, then summarised per file.
#
#   accel/coverage.sh                      # tests + seed corpus (a few minutes)
#   FUZZ_CORPUS=DIR accel/coverage.sh      # also replay a campaign's corpus
#   KEEP=1 accel/coverage.sh               # keep the directory (the .gcov files are in it)
#
# The figures in docs/reliability.md come from this script. -O0 so lines map to code
# one to one; branches are gcc's (each side of every condition, && and || included).
set -euo pipefail

# shellcheck source=accel/workcopy.sh
source "$(dirname "${BASH_SOURCE[0]}")/workcopy.sh" coverage
rm -rf "$work/tests"
cp -r "$root/tests" "$root/benchmarks" "$work/"
find "$work/tests" -name __pycache__ -prune -exec rm -rf {} +
build_in_place "${CC:-gcc}" "--coverage -O0 -g" "--coverage"
check_built coverage
cd "$work"

# The test suite's accel cases (every test parametrised by implementation, the accel
# tests, the differential tests, the fuzz regressions), then the fuzz corpus.
"$python" -m pytest tests -k "accel" -q -p no:cacheprovider -o addopts="" -x \
    --deselect tests/accel/test_leak.py "$@"
"$python" -m tests.accel.fuzz_harness --seed-corpus "$work/seeds" >/dev/null
inputs=("$work"/seeds/* "$root"/tests/accel/fuzz_regressions/*)
if [[ -n "${FUZZ_CORPUS:-}" ]]; then
    cp -r "$FUZZ_CORPUS" "$work/campaign"  # a still-running campaign rewrites its corpus
    inputs+=("$work"/campaign/*)
fi
printf '%s\0' "${inputs[@]}" | xargs -0 -n 200 "$python" -m tests.accel.fuzz_harness >/dev/null
echo "coverage: replayed ${#inputs[@]} fuzz inputs"

objects="$(dirname "$(find build -name '_radix.o' | head -n 1)")"
# One gcov run per compiled unit (snapshot.c is #included into _radix.c and reported
# under it).
units=()
for gcno in "$objects"/*.gcno; do units+=("accel/$(basename "${gcno%.gcno}").c"); done
gcov -b -o "$objects" "${units[@]}" >"$work/gcov.txt" 2>"$work/gcov.err"
"$python" - "$work/gcov.txt" <<'EOF'
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
    elif name and name.startswith("accel/") and (m := re.match(r"(Lines executed|Taken at least once):([\d.]+)% of (\d+)", line)):
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
EOF
