#!/usr/bin/env bash
# Run every block-pool GPU test and GPU benchmark, and the tiered cache's GPU restore
# figures, writing results into OUTDIR (eight files):
#   junit-tests.xml, junit-bench.xml, bench.json, summary.md, gpu_check.log, nvidia-smi.txt,
#   tiers-gpu.md, tiers-gpu.json
# Usage: benchmarks/gpu_check.sh OUTDIR        (under 6 minutes; PYTHON=... to override)
# On a machine without a GPU everything skips, the summary says the GPU figures are
# unmeasured, and the script exits 0.  It exits 1 if a test or benchmark failed.
#
# A GPU machine that can install nothing needs two things carried from a machine that can
# (benchmarks/gpu_prepare.sh makes both): the C extension built for its Python
# (accel/_radix.cpython-3XX-*.so) and wheels of `immutables` and `typing_extensions` in
# .gpu-wheels/.  Torch is
# measured beside the pool whenever it is importable.
set -u
if [ $# -ne 1 ]; then
  echo "usage: $0 OUTDIR" >&2
  exit 2
fi
mkdir -p "$1"
OUT="$(cd "$1" && pwd)"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT" || exit 2
# Nothing is installed here: the checkout's import root (links to reference/, accel/ and
# spec/ under the name kachedb_radix) makes `import kachedb_radix` find the tree itself.
export PYTHONPATH="$ROOT/.ci/import-root${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python3}"
LOG="$OUT/gpu_check.log"
: >"$LOG"
NOTES=()
log() { echo "[gpu_check] $*" | tee -a "$LOG"; }
note() { NOTES+=(--note "$*"); log "$*"; }
START=$(date +%s)

# 1. Python test dependencies: carried wheels first (no network needed), then the index.
for mod in immutables typing_extensions; do
  if ! "$PY" -c "import $mod" >/dev/null 2>&1 && [ -d .gpu-wheels ]; then
    log "installing $mod from .gpu-wheels"
    "$PY" -m pip install -q --no-index --find-links .gpu-wheels "$mod" >>"$LOG" 2>&1 \
      || note "installing $mod from .gpu-wheels failed"
  fi
done
DEPS="numpy pytest hypothesis pytest_benchmark immutables typing_extensions"
if ! "$PY" -c "import ${DEPS// /, }" >/dev/null 2>&1; then
  log "installing missing test dependencies from the index"
  timeout 60 "$PY" -m pip install -q numpy pytest hypothesis pytest-benchmark immutables \
    typing_extensions >>"$LOG" 2>&1 || note "pip install of test dependencies failed"
fi
# The C twin of the tree: `import kachedb_radix.accel` needs it.  Carried, or built here if a compiler is.
if ! "$PY" -c "import kachedb_radix.accel" >/dev/null 2>&1; then
  log "kachedb_radix.accel._radix not importable for $("$PY" -V 2>&1); building it in place"
  timeout 90 "$PY" -c 'from setuptools import setup; setup()' build_ext --inplace -q \
    >>"$LOG" 2>&1 || note "building kachedb_radix.accel._radix failed (carry it: benchmarks/gpu_prepare.sh)"
fi

# 2. GPU and CuPy (install the wheel matching the driver's CUDA major version if missing).
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1; then
  CUDA_MAJOR=$(sed -n 's/.*CUDA Version: *\([0-9][0-9]*\)\..*/\1/p' "$OUT/nvidia-smi.txt" | head -n1)
  CUDA_MAJOR=${CUDA_MAJOR:-12}
  GPU_NAME=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n1)
  note "GPU: ${GPU_NAME:-unknown}; driver supports CUDA ${CUDA_MAJOR}"
  PKG=cupy-cuda12x
  if [ "$CUDA_MAJOR" -ge 13 ]; then PKG=cupy-cuda13x; fi
  if ! "$PY" -c "import cupy" >/dev/null 2>&1; then
    log "cupy not importable; installing ${PKG}[ctk]"
    timeout 150 "$PY" -m pip install -q "${PKG}[ctk]" >>"$LOG" 2>&1 \
      || timeout 100 "$PY" -m pip install -q "$PKG" >>"$LOG" 2>&1 \
      || note "installing $PKG failed"
  fi
  # CuPy compiles kernels with NVRTC; fetch it if this install lacks it.
  PROBE='import cupy; cupy.RawKernel("extern \"C\" __global__ void k(int* a){a[0]=1;}", "k").compile()'
  if "$PY" -c "import cupy" >/dev/null 2>&1 && ! "$PY" -c "$PROBE" >>"$LOG" 2>&1; then
    log "NVRTC probe failed; installing cuda-toolkit[nvrtc]==${CUDA_MAJOR}.*"
    timeout 100 "$PY" -m pip install -q "cuda-toolkit[nvrtc]==${CUDA_MAJOR}.*" >>"$LOG" 2>&1 \
      || note "installing NVRTC failed"
  fi
else
  echo "nvidia-smi not found or failed" >"$OUT/nvidia-smi.txt"
  note "no GPU visible (nvidia-smi missing or failing); CuPy not installed by this script"
fi
CUPY_VER=$("$PY" -c "import cupy; print(cupy.__version__)" 2>/dev/null || echo "not importable")
REASON=$("$PY" -c "from kachedb_radix.accel.blockpool import cupy_unavailable_reason as r; print(r() or 'available')" 2>&1 | tail -n1)
note "cupy: ${CUPY_VER}; kachedb_radix.accel.BlockPool (CuPy): ${REASON}"

# Warnings stay visible but do not fail this one-shot device run: CI enforces warnings as
# errors on the CPU, while CuPy and torch on an unknown driver may warn about themselves.
WARN=(-W default::UserWarning -W default::RuntimeWarning -W default::DeprecationWarning
  -W default::FutureWarning -W default::ResourceWarning)

# 3. Tests (both twins through the shared suite, the GPU-only tests, the kernel plans, the
#    host side of every call on the device and on the CPU fake).
timeout 150 "$PY" -m pytest -p no:cacheprovider "${WARN[@]}" tests/blockpool/test_pool.py \
  tests/blockpool/test_gpu.py tests/blockpool/test_kernels.py tests/blockpool/test_layout.py \
  tests/blockpool/test_device_path.py tests/blockpool/test_host_side.py -rs \
  --junitxml="$OUT/junit-tests.xml" 2>&1 | tee -a "$LOG" | tail -n 30
TEST_RC=${PIPESTATUS[0]}
note "tests exit code: ${TEST_RC}"

# 4. Benchmarks.
timeout 180 "$PY" -m pytest -p no:cacheprovider "${WARN[@]}" benchmarks/bench_blockpool.py -rs \
  --benchmark-json="$OUT/bench.json" --benchmark-columns=mean,stddev,rounds \
  --junitxml="$OUT/junit-bench.xml" 2>&1 | tee -a "$LOG" | tail -n 70
BENCH_RC=${PIPESTATUS[0]}
note "benchmarks exit code: ${BENCH_RC}; elapsed $(( $(date +%s) - START )) s"

# 4b. The tiered cache's restore (benchmarks/bench_tiers.py --gpu): a plan from pinned host
#     memory through kachedb_radix.accel.KVCache against one pinned cudaMemcpyAsync of the same bytes, and
#     a 32K-token prefix of Llama-3-8B fp16 and Llama-3-70B FP8 at full size (4 and 5 GiB).
#     Without a GPU it prints why the figures are unmeasured and exits 0.
timeout 240 "$PY" -m benchmarks.bench_tiers --gpu --json "$OUT/tiers-gpu.json" \
  >"$OUT/tiers-gpu.md" 2>&1
TIERS_RC=$?
tee -a "$LOG" <"$OUT/tiers-gpu.md" | tail -n 25
if grep -q "^## GPU restore: unmeasured" "$OUT/tiers-gpu.md"; then
  note "tier restore: GPU figures unmeasured ($(sed -n 's/^## GPU restore: unmeasured (\(.*\))$/\1/p' "$OUT/tiers-gpu.md"))"
fi
note "tier restore benchmark exit code: ${TIERS_RC} (tables in tiers-gpu.md)"

# 5. Summary.
"$PY" -m benchmarks.bench_blockpool summarize "$OUT/bench.json" "$OUT/summary.md" \
  --junit "$OUT/junit-tests.xml" --junit "$OUT/junit-bench.xml" "${NOTES[@]}" \
  || { log "summary failed"; exit 1; }

ok() { [ "$1" -eq 0 ] || [ "$1" -eq 5 ]; }  # 5: nothing collected
if ok "$TEST_RC" && ok "$BENCH_RC" && [ "$TIERS_RC" -eq 0 ]; then exit 0; fi
exit 1
