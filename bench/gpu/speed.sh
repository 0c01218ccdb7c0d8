#!/usr/bin/env bash
# bench/gpu/speed.sh BUILD_DIR OUT_DIR — issue 13's drafter measurements in one go on one H200,
# the build included in at most BUDGET_S = 450 s (7.5 minutes): each run has its own time limit,
# none starts once the budget is spent, and the runs come in order of importance:
#   recipe            hsring-bench drafter --phases at the recipe shape (Qwen3-8B dims, 5 layers,
#                     2 x 3,072-token samples, 512 anchors, block 16) with its PyTorch eager
#                     baseline, the step's FLOPs, TFLOP/s and the ratio to a bf16 GEMM
#                     [block rows x 4,096] x [4,096 x 12,288] timed in the same run
#   recipe_adamw_torch the same with --adamw torch (the optimizer step before the fused one), no eager
#   recipe_recompute  the same with --recompute layers ([train] recompute = "layers"), no eager
#   recipe_fp8        the same with --matmul fp8 ([train] matmul = "fp8"), no eager
#   long16k           one 16,384-token sample, recompute none
#   long16k_recompute one 16,384-token sample, recompute layers
#   long32k, long32k_recompute   the same at 32,768 tokens (last: skipped when the budget is spent)
# OUT_DIR gets 3 files (the device tool brings back at most 8): speed.md (the table, phases, FLOP
# breakdown), speed.json (every run's result line, exit code and seconds), and logs.tar.gz
# (<run>.log: each run's text output, eager's too).
#
# BUILD_DIR without build.ninja is configured as bin/gpu-build configures (after
# `bin/gpu-build --prepare` here, carry .carry); only hsring-bench-drafter is built.
# WARMUP (4) and ITERS (8): the recipe runs' warm-up and timed steps; LONG_WARMUP (12): the long
# samples' warm-up steps.
# CPU smoke run of the script itself (tiny shapes, checks the plumbing, measures nothing):
#   DEVICE=cpu bench/gpu/speed.sh build /tmp/speed-out
set -uo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR OUT_DIR" >&2
  exit 2
fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$1
mkdir -p "$2"
out=$(cd "$2" && pwd)
for d in /opt/torch/.venv/bin ${CUDA_HOME:-/usr/local/cuda}/bin; do [ -d "$d" ] && export PATH="$d:$PATH"; done
py=${HSRING_PYTHON:-$(command -v python3)}
[ -x "$root/.venv/bin/python" ] && [ -z "${HSRING_PYTHON:-}" ] && [ ! -d /opt/torch/.venv ] && py="$root/.venv/bin/python"
device=${DEVICE:-cuda}
budget=${BUDGET_S:-450}  # seconds in all, build included; the report needs a few more
t_start=$SECONDS

cd "$root"
if [ ! -f "$build/build.ninja" ]; then
  torch_prefix=$("$py" -c 'import torch,os;print(os.path.dirname(torch.__file__))')
  meson setup "$build" --buildtype=release -Dtorch_prefix="$torch_prefix" \
    -Dcuda=enabled -Dtorch_cuda=enabled -Dkernels=enabled -Dgpu_tests=enabled > "$out/build.log" 2>&1 ||
    { echo "speed.sh: meson setup failed (see $out/build.log)" >&2; exit 1; }
fi
build=$(cd "$build" && pwd)
bench=$build/bench/model/hsring-bench-drafter
ninja -C "$build" -j "${HSRING_JOBS:-$(nproc)}" bench/model/hsring-bench-drafter >> "$out/build.log" 2>&1 ||
  { echo "speed.sh: build failed (see $out/build.log)" >&2; exit 1; }
rm -f "$out/build.log"

if [ "$device" = cpu ]; then  # tiny shapes: the script's plumbing only
  shape=(--preset tiny --layers 2 --anchors 8 --block 4 --chunk 64 --iters 2 --warmup 1)
  recipe=(--seq-len 128 --samples 2)
  long=(--seq-len 512 --samples 1)
  longer=(--seq-len 1024 --samples 1)
else
  # Warm-up steps: each new attention key length meets a cuDNN plan on first use; a recipe step
  # has met nearly all of them after 4 steps, a 16k-32k-token sample after ~12.
  shape=(--preset qwen3-8b --layers 5 --anchors 512 --block 16 --chunk 4096 --iters "${ITERS:-8}" --warmup "${WARMUP:-4}")
  recipe=(--seq-len 3072 --samples 2)
  long=(--seq-len 16384 --samples 1 --warmup "${LONG_WARMUP:-12}")
  longer=(--seq-len 32768 --samples 1 --warmup "${LONG_WARMUP:-12}")
fi
common=(--device "$device" --python "$py" --json "${shape[@]}")

mkdir -p "$out/logs"
results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT
echo "speed.sh: built in $((SECONDS - t_start)) s"
# run NAME LIMIT_S ARGS...: one benchmark process; stdout (its JSON line) to $results/NAME.json.
run() {
  local name=$1 limit=$2; shift 2
  local left=$((budget - (SECONDS - t_start)))
  if [ "$left" -lt 30 ]; then
    echo "== $name: skipped (the budget of $budget s is spent)"
    echo "{\"exit\": -1, \"seconds\": 0, \"note\": \"skipped: budget spent\"}" > "$results/$name.status"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (limit $limit s): hsring-bench-drafter ${common[*]} $*"
  local t0=$SECONDS
  timeout "$limit" "$bench" "${common[@]}" "$@" > "$results/$name.json" 2> "$out/logs/$name.log"
  local rc=$?
  echo "   exit $rc after $((SECONDS - t0)) s"
  echo "{\"exit\": $rc, \"seconds\": $((SECONDS - t0)), \"limit_s\": $limit}" > "$results/$name.status"
}

run recipe 200 "${recipe[@]}" --phases
run recipe_adamw_torch 90 "${recipe[@]}" --phases --adamw torch --no-eager
run recipe_recompute 120 "${recipe[@]}" --phases --recompute layers --no-eager
run recipe_fp8 90 "${recipe[@]}" --matmul fp8 --no-eager
run long16k 120 "${long[@]}" --no-eager
run long16k_recompute 120 "${long[@]}" --recompute layers --no-eager
run long32k 90 "${longer[@]}" --no-eager
run long32k_recompute 90 "${longer[@]}" --recompute layers --no-eager

machine=$( { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "cpu ($(nproc) cores)"; } | head -n 1)
commit=$(git -C "$root" log -1 --format='%h %s' 2>/dev/null || echo unknown)
"$py" "$root/bench/gpu/speed_report.py" "$results" "$out" --machine "$machine" --commit "$commit" \
  --device "$device" --elapsed $((SECONDS - t_start))
rc=$?
tar czf "$out/logs.tar.gz" -C "$out" logs && rm -rf "$out/logs"
echo "speed.sh: $((SECONDS - t_start)) s in all; $out/speed.md, $out/speed.json"
exit $rc
