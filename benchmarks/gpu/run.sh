#!/usr/bin/env bash
# The one command an offline GPU machine runs, from the repository root (see docs/gpu.md):
#
#   bash benchmarks/gpu/run.sh [--dry-run] [--part tests|bench|all] [benchmark options...]
#
# Installs the kit (.gpu-kit/, from `make gpu-kit`) into /tmp/site without network, prints the GPU, its driver,
# torch and CUDA, runs the GPU tests (pytest -m gpu tests/gpu) and the GPU benchmark (python -m benchmarks.gpu;
# options after the ones above go to it, e.g. --models sd15 --sections ladder), and writes into $OUT (./gpu-out
# when unset): results.json, results.md, images.png, tests.log, bench.log, and autotune-cache/ (inductor's
# autotuning timings, carried into the next run: benchmarks/gpu/autotune_cache.py). The benchmark stops
# starting new work when its budget is spent and is interrupted before the 10-minute limit; what it measured is
# still written.
# --dry-run: the same on this CPU with the bundled model and small numbers (the kit install is skipped when
# diffusers already imports).
set -uo pipefail
cd "$(dirname "$0")/../.."

DRY=0
PART=all
LIMIT_S=${GPU_RUN_LIMIT_S:-580}  # the whole command, under the machine's 600 s
BENCH_ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --part) PART="$2"; shift ;;
    --part=*) PART="${1#--part=}" ;;
    *) BENCH_ARGS+=("$1") ;;
  esac
  shift
done
case "$PART" in tests|bench|all) ;; *) echo "--part must be tests, bench or all, not '$PART'" >&2; exit 2 ;; esac

OUT=${OUT:-./gpu-out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
if [ "$DRY" = 1 ] && [ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ]; then PY=.venv/bin/python; fi
export HF_HUB_OFFLINE=1
# inductor's autotuning timings: merged in from earlier runs, returned in $OUT/autotune-cache (autotune_cache.py)
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-${TMPDIR:-/tmp}/torchinductor-studio}
CARRIED_AUTOTUNE=${GPU_AUTOTUNE_CACHE:-benchmarks/gpu/autotune-cache}

install_kit() {
  if [ "$DRY" = 1 ] && "$PY" -c "import diffusers" 2>/dev/null; then
    echo "kit: not installed (dry run: diffusers already imports)"
    return
  fi
  if ! ls .gpu-kit/*.whl >/dev/null 2>&1; then
    echo "kit: .gpu-kit/ has no wheels; run 'make gpu-kit' where there is network and carry .gpu-kit" >&2
    exit 3
  fi
  rm -rf /tmp/site  # a machine still warm from an earlier call: install afresh
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu-kit/*.whl || exit 3
  export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
  echo "kit: installed $(ls .gpu-kit/*.whl | wc -l) wheels into /tmp/site"
}

describe() {
  echo "== environment"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  else
    echo "nvidia-smi: not found"
  fi
  "$PY" -c "import sys, torch; print('python', sys.version.split()[0], '| torch', torch.__version__, '| CUDA',
torch.version.cuda, '| cuDNN', torch.backends.cudnn.version(), '| GPU',
torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none')"
  cat .gpu-kit/xformers.txt 2>/dev/null | sed 's/^/xformers: /'
}

run_tests() {
  echo "== GPU tests"
  "$PY" -m pytest -m gpu tests/gpu -q 2>&1 | tee "$OUT/tests.log"
  echo "tests exit status: ${PIPESTATUS[0]}"
}

run_bench() {
  echo "== GPU benchmark"
  local left=$((LIMIT_S - SECONDS - 20))
  local budget=$((left - 60))
  if [ "$left" -lt 60 ]; then
    echo "benchmark: not started, only ${left} s left" | tee "$OUT/bench.log"
    return
  fi
  local dry=()
  [ "$DRY" = 1 ] && dry=(--dry-run)
  timeout --signal=INT --kill-after=15 "$left" \
    "$PY" -m benchmarks.gpu "${dry[@]}" --out "$OUT" --budget-s "$budget" "${BENCH_ARGS[@]}" 2>&1 \
    | tee "$OUT/bench.log"
  echo "benchmark exit status: ${PIPESTATUS[0]}"
  [ -f "$OUT/results.json" ] && "$PY" -m benchmarks.gpu.report "$OUT" && cat "$OUT/results.md"
}

install_kit
describe
"$PY" -m benchmarks.gpu.autotune_cache "$CARRIED_AUTOTUNE" "$TORCHINDUCTOR_CACHE_DIR/cache"
[ "$PART" = bench ] || run_tests
[ "$PART" = tests ] || run_bench
"$PY" -m benchmarks.gpu.autotune_cache "$TORCHINDUCTOR_CACHE_DIR/cache" "$OUT/autotune-cache"
ls -l "$OUT"
