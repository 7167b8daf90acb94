#!/usr/bin/env bash
# The one command an offline GPU machine runs, from the repository root (see docs/gpu.md):
#
#   bash benchmarks/gpu/run.sh [--dry-run] [--part tests|bench|all] [--out DIR] [--time-limit-s N]
#                              [benchmark options...]
#
# Installs the kit (.gpu-kit/, from `make gpu-kit`) into /tmp/site without network, prints the GPU, its driver,
# torch and CUDA, runs the GPU tests (pytest -m gpu tests/gpu) and the GPU benchmark (python -m benchmarks.gpu;
# options other than the ones above go to it, e.g. --models sd15 --sections ladder), and writes into the output
# folder: results.json, results.md, images.png, tests.log, bench.log, and autotune-cache/ (inductor's
# autotuning timings, carried into the next run: benchmarks/gpu/autotune_cache.py).
#
#   --out DIR           the output folder (default: ./gpu-out)
#   --time-limit-s N    the seconds this whole command may take, when your machine or queue limits it
#                       (default: no limit). The benchmark then starts no new work once its share is spent
#                       and is interrupted in time to write what it measured.
#   --part tests|bench|all   the GPU tests, the benchmark, or both (default: all)
#   --dry-run           the same on this CPU with the bundled model and small numbers (the kit install is
#                       skipped when diffusers is already installed)
#   -h, --help          this text
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../.."

DRY=0
PART=all
OUT_DIR=./gpu-out
LIMIT_S=""  # the whole command's seconds; empty: no limit
BENCH_ARGS=()
usage() { sed -n '2,/^set /p' "$HERE/run.sh" | sed '$d' | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --dry-run) DRY=1 ;;
    --part) PART="${2:-}"; shift ;;
    --part=*) PART="${1#--part=}" ;;
    --out) OUT_DIR="${2:-}"; shift ;;
    --out=*) OUT_DIR="${1#--out=}" ;;
    --time-limit-s) LIMIT_S="${2:-}"; shift ;;
    --time-limit-s=*) LIMIT_S="${1#--time-limit-s=}" ;;
    *) BENCH_ARGS+=("$1") ;;
  esac
  shift
done
case "$PART" in tests|bench|all) ;; *) echo "--part must be tests, bench or all, not '$PART'" >&2; exit 2 ;; esac
if [ -z "$OUT_DIR" ]; then echo "--out needs a folder" >&2; exit 2; fi
if [ -n "$LIMIT_S" ] && ! [[ "$LIMIT_S" =~ ^[0-9]+$ ]]; then
  echo "--time-limit-s must be a whole number of seconds, not '$LIMIT_S'" >&2
  exit 2
fi

mkdir -p "$OUT_DIR"
PY=${PYTHON:-python3}
if [ "$DRY" = 1 ] && [ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ]; then PY=.venv/bin/python; fi
export HF_HUB_OFFLINE=1
# inductor's autotuning timings: merged in from earlier runs, returned in the output folder's autotune-cache/
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-${TMPDIR:-/tmp}/torchinductor-studio}
CARRIED_AUTOTUNE=${GPU_AUTOTUNE_CACHE:-benchmarks/gpu/autotune-cache}

install_kit() {
  if [ "$DRY" = 1 ] && "$PY" -c "import importlib.util as u, sys; sys.exit(u.find_spec('diffusers') is None)"; then
    echo "kit: not installed (dry run: diffusers is already installed)"
    return
  fi
  if ! ls .gpu-kit/*.whl >/dev/null 2>&1; then
    echo "kit: .gpu-kit/ has no wheels; run 'make gpu-kit' where there is network and carry .gpu-kit" >&2
    exit 3
  fi
  rm -rf /tmp/site  # what an earlier run installed: install afresh
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
  "$PY" -m pytest -m gpu tests/gpu -q 2>&1 | tee "$OUT_DIR/tests.log"
  echo "tests exit status: ${PIPESTATUS[0]}"
}

# The benchmark without a time limit, or with what is left of it: the command's limit minus the seconds spent
# so far and 20 s to write the report; the benchmark starts no new work 60 s before it is interrupted.
run_bench() {
  echo "== GPU benchmark"
  local dry=() limit=()
  [ "$DRY" = 1 ] && dry=(--dry-run)
  if [ -n "$LIMIT_S" ]; then
    local left=$((LIMIT_S - SECONDS - 20))
    if [ "$left" -lt 60 ]; then
      echo "benchmark: not started, only ${left} s left of --time-limit-s $LIMIT_S" | tee "$OUT_DIR/bench.log"
      return
    fi
    limit=(timeout --signal=INT --kill-after=15 "$left")
    BENCH_ARGS=(--budget-s "$((left - 60))" "${BENCH_ARGS[@]}")
  fi
  "${limit[@]}" "$PY" -m benchmarks.gpu "${dry[@]}" --out "$OUT_DIR" "${BENCH_ARGS[@]}" 2>&1 \
    | tee "$OUT_DIR/bench.log"
  echo "benchmark exit status: ${PIPESTATUS[0]}"
  [ -f "$OUT_DIR/results.json" ] && "$PY" -m benchmarks.gpu.report "$OUT_DIR" && cat "$OUT_DIR/results.md"
}

install_kit
describe
"$PY" -m benchmarks.gpu.autotune_cache "$CARRIED_AUTOTUNE" "$TORCHINDUCTOR_CACHE_DIR/cache"
[ "$PART" = bench ] || run_tests
[ "$PART" = tests ] || run_bench
"$PY" -m benchmarks.gpu.autotune_cache "$TORCHINDUCTOR_CACHE_DIR/cache" "$OUT_DIR/autotune-cache"
ls -l "$OUT_DIR"
