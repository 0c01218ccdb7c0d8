#!/usr/bin/env bash
# bench/model/gpu_check.sh BUILD_DIR OUT_DIR — on the GPU machine, after bin/gpu-build (or any
# build with torch_cuda): runs the model GPU tests (a missing GPU fails instead of skipping), the
# CPU model suites, and the model benchmarks (target; the drafter's DFlash and EAGLE-3 steps).
# Logs and a summary go to OUT_DIR:
#   gpu_tests.log  cpu_tests.log  bench_target.txt  bench_drafter.txt  bench_eagle3.txt  summary.txt
# Exit status: non-zero if a test or a benchmark failed (every step runs regardless).
set -uo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR OUT_DIR" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
for d in /opt/torch/.venv/bin; do [ -d "$d" ] && export PATH="$d:$PATH"; done
export HSRING_PYTHON=${HSRING_PYTHON:-$(command -v python3)}
export HSRING_SOURCE_ROOT=$root HSRING_BUILD_ROOT=$build
test_exe=$build/tests/model/test_model
status=0
step() {  # step NAME LOG COMMAND...: runs, records the exit code, never stops the script
  local name=$1 log=$2; shift 2
  echo "== $name: $*" | tee -a "$out/summary.txt"
  local t0=$SECONDS
  "$@" > "$log" 2>&1
  local rc=$?
  echo "   exit $rc after $((SECONDS - t0)) s (log: $(basename "$log"))" | tee -a "$out/summary.txt"
  [ $rc -eq 0 ] || status=1
}
: > "$out/summary.txt"
{ date -u; nvidia-smi -L 2>&1; echo "python: $HSRING_PYTHON"; git -C "$root" log -1 --oneline 2>/dev/null; } >> "$out/summary.txt"

step "model GPU tests" "$out/gpu_tests.log" env HSRING_GPU_TESTS=required "$test_exe" --test-suite=gpu
step "model CPU tests" "$out/cpu_tests.log" "$test_exe" --test-suite=safetensors,target,dflash,cli
step "hsring-bench-target" "$out/bench_target.txt" "$build/bench/model/hsring-bench-target" --python "$HSRING_PYTHON"
step "hsring-bench-drafter" "$out/bench_drafter.txt" "$build/bench/model/hsring-bench-drafter" --python "$HSRING_PYTHON"
step "hsring-bench-drafter --type eagle3" "$out/bench_eagle3.txt" "$build/bench/model/hsring-bench-drafter" --type eagle3 --python "$HSRING_PYTHON"

{
  echo "== results"
  grep -h "test cases:" "$out/gpu_tests.log" "$out/cpu_tests.log" 2>/dev/null
  for f in bench_target bench_drafter bench_eagle3; do grep -v "^ *|\|^eager:" "$out/$f.txt" | tail -n 3; done
} | tee -a "$out/summary.txt"
exit $status
