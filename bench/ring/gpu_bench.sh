#!/usr/bin/env bash
# The ring benchmarks recorded in BENCHMARKS.md: run on the GPU machine after bin/gpu-build.
#   bench/ring/gpu_bench.sh BUILD_DIR OUT_DIR
set -uo pipefail
build=${1:-build-gpu}
out=${2:-.}
b="$build/bench/hsring-bench"
run() {
  echo "### hsring-bench $*" | tee -a "$out/ring_bench.txt"
  "$b" "$@" 2>&1 | tee -a "$out/ring_bench.txt"
}
run ring --writers 1 --readers 1 --slot-mib 256 --slots 8 --seconds 5 --cuda --huge-pages require
run ring --writers 1 --readers 1 --slot-mib 256 --slots 8 --seconds 5 --cuda --huge-pages require --depth 3
run ring --writers 2 --readers 1 --slot-mib 256 --slots 8 --seconds 5 --cuda --huge-pages require
run ring --writers 1 --readers 1 --slot-mib 256 --slots 8 --seconds 5 --cuda --huge-pages off
run ring --writers 1 --readers 1 --slot-mib 64 --slots 8 --seconds 5 --cuda --huge-pages require
run ring --writers 1 --readers 1 --slot-mib 256 --slots 8 --seconds 5 --huge-pages require
grep -E '^ring:' "$out/ring_bench.txt"
