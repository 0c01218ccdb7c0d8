#!/usr/bin/env bash
# bench/gpu/real_target_both.sh BUILD_DIR OUT_DIR — DFlash and EAGLE-3 drafters for the same real
# target (models/pycode-25m) in one GPU session, through bench/gpu/real_target.sh:
#   1. its section b (build) beside section m (make the target: Python, needs no build), then the
#      GPU tests named by GPU_TESTS (a doctest filter; "" skips them) beside section g (answers)
#   2. section p for both drafter types at once, each its own `hsring run` on GPU 0 (both runs are
#      bound by their drafter's step overheads, not the GPU's arithmetic, so they overlap)
#   3. section s for each export in turn, alone on the GPU (its timings)
# OUT_DIR: summary.txt, the GPU tests' tail and one tarball per drafter type (metrics, spec JSON).
# EPOCHS (3), PIPELINE_LIMIT_S (360), SPEC_MODES (bf16) pass through to real_target.sh.
# Time on an H100 (2026-12-06, EPOCHS=3): build beside make-target 176 s, answers 29 s, the two runs
# side by side ~300 s (each ~1.5x its time alone), spec-decode ~10 s each: ~530 s, close to one
# device call's 600 s; with EPOCHS=4 split it (sections b/m/g in one call, p and s in the next).
set -uo pipefail
build=${1:?usage: $0 BUILD_DIR OUT_DIR}
out=${2:?usage: $0 BUILD_DIR OUT_DIR}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 1
mkdir -p "$out"
t0=$SECONDS
say() { echo "[$((SECONDS - t0)) s] $*" | tee -a "$out/summary.txt"; }
rt=bench/gpu/real_target.sh
export EPOCHS=${EPOCHS:-3} PIPELINE_LIMIT_S=${PIPELINE_LIMIT_S:-360} SPEC_MODES=${SPEC_MODES:-bf16}

say "build beside make-target"
SECTIONS=b $rt "$build" "$out/build" > /tmp/both-build.log 2>&1 &
b=$!
SECTIONS=m WORK=/tmp/both-m $rt "$build" /tmp/both-m > /tmp/both-m.log 2>&1
say "make-target exit $?: $(grep -E 'validation perplexity' /tmp/both-m.log | tail -n 1)"
wait $b || { say "build failed"; tail -n 40 /tmp/both-build.log | tee -a "$out/summary.txt"; exit 1; }
say "built"
if [ -n "${GPU_TESTS-decode*}" ]; then
  (ninja -C "$build" tests/model/test_model > /tmp/both-tests-build.log 2>&1 &&
     "$build/tests/model/test_model" --test-suite=gpu --test-case="${GPU_TESTS-decode*}" > "$out/gpu_tests.txt" 2>&1;
   echo "exit $?" >> "$out/gpu_tests.txt") &
  tests=$!
fi
SECTIONS=g WORK=/tmp/both-g $rt "$build" /tmp/both-g > /tmp/both-g.log 2>&1
say "answers exit $?: $(grep -E 'samples' /tmp/both-g/summary.txt | tr '\n' ' ')"

for d in dflash eagle3; do
  DRAFTER=$d SECTIONS=p WORK=/tmp/both-$d-work $rt "$build" /tmp/both-$d > /tmp/both-$d.log 2>&1 &
  eval "pid_$d=$!"
done
wait "$pid_dflash"; say "DFlash run exit $?: $(grep -E 'hsring run exit' /tmp/both-dflash/summary.txt)"
wait "$pid_eagle3"; say "EAGLE-3 run exit $?: $(grep -E 'hsring run exit' /tmp/both-eagle3/summary.txt)"
[ -n "${tests:-}" ] && { wait "$tests"; say "GPU tests: $(grep -E 'test cases|exit' "$out/gpu_tests.txt" | tr '\n' ' ')"; }

for d in dflash eagle3; do
  DRAFTER=$d SECTIONS=s WORK=/tmp/both-$d-work $rt "$build" /tmp/both-$d-s > /tmp/both-$d-s.log 2>&1
  say "spec-decode $d: $(grep -E 'tau' /tmp/both-$d-s/summary.txt | tr '\n' ' ')"
  cat /tmp/both-$d/summary.txt /tmp/both-$d-s/summary.txt > /tmp/both-$d/all.txt
  tar -czf "$out/$d.tgz" -C /tmp both-$d both-$d-s
done
say "done"
