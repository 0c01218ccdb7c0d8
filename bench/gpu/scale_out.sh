#!/usr/bin/env bash
# bench/gpu/scale_out.sh BUILD_DIR OUT_DIR — data-parallel drafters on the 2-GPU machine, the
# measurements of BENCHMARKS.md's scale-out section, in one go (after bin/gpu-build):
#   1. the gradient sum over NCCL equals one rank's update (tests/distributed, 2 GPUs)
#   2. hsring-bench gang: 1 rank vs 2 ranks at the DFlash recipe shape on synthetic hidden
#      states: samples/s, scaling efficiency, all-reduce ms alone and exposed in the step
#   3. pipelines with a real Qwen3-8B-shaped target on GPU0 and the same global batch (2 slots of
#      16,384 tokens per step): d1 = 1 drafter on GPU1; d2 = 2 drafter ranks on GPU0 (beside the
#      target) and GPU1; d2k = d2 with checkpoints every 20 steps and drafter.1 SIGKILLed mid-run
#      (gang restart over NCCL), ledger verified.
#   4. issue 53's resize on GPUs: d2 for RESIZE_AFTER_S (90), `hsring stop`, then the same run dir
#      with drafters = [0] (one rank resumes the 2-rank checkpoint, re-planned), to the end or
#      PIPELINE_LIMIT_S; the resume lines and ledger verify.
# OUT_DIR: summary.txt, gang.json, scale_out.tar.gz (logs, metrics). SKIP_PIPELINES=1, SAMPLES,
# PIPELINE_LIMIT_S, KILL_AFTER_S tune it.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
session_init "$@"

say "== gradient sum over NCCL (2 ranks) = one rank's update"
HSRING_GSYNC_NCCL=1 HSRING_SOURCE_ROOT="$root" timeout 300 "$build/tests/distributed/test_gradient_sync" > "$work/gsync.txt" 2>&1
say "   exit $?: $(grep -E 'MESSAGE|Status' "$work/gsync.txt" | tr '\n' ' ' | cut -c1-600)"

say "== hsring-bench gang --ranks 2 (Qwen3-8B dims, 5 layers, 2 x 3072 tokens per rank and step)"
timeout 400 "$build/bench/hsring-bench" gang --ranks 2 > "$work/gang.txt" 2>&1
say "   exit $?:"; grep -vE '^\{|gang formed' "$work/gang.txt" | tee -a "$out/summary.txt"
tail -n 1 "$work/gang.txt" > "$out/gang.json"

if [ "${SKIP_PIPELINES:-0}" != 1 ]; then
  "$py" bench/gpu/make_long_data.py runs/long.jsonl --samples "${SAMPLES:-300}" --length 3072
  pipeline d1 config/qwen3-8b-1t1d.toml "" 0 "s/^tokens_per_step = .*/tokens_per_step = 32768/"
  two="s/^drafters = .*/drafters = [0, 1]\nallow_shared_gpus = true/"
  pipeline d2 config/qwen3-8b-1t1d.toml "" 0 "$two" "s/^tokens_per_step = .*/tokens_per_step = 32768/"
  pipeline d2k config/qwen3-8b-1t1d.toml drafter.1 "${KILL_AFTER_S:-70}" "$two" \
    "s/^tokens_per_step = .*/tokens_per_step = 32768/" "s/^checkpoint_every = .*/checkpoint_every = 20/"
  say "== resize: drafters on GPUs 0,1 -> GPU 0 between runs (a graceful stop, then one rank resumes)"
  cfg="$work/resize.toml" run_dir="$root/runs/resize"
  sed -e 's/^name = .*/name = "resize"/' -e "s|^path = .*|path = \"$root/runs/long.jsonl\"|" -e "$two" \
    -e "s/^tokens_per_step = .*/tokens_per_step = 32768/" -e "s/^checkpoint_every = .*/checkpoint_every = 20/" \
    config/qwen3-8b-1t1d.toml > "$cfg"
  rm -rf "$run_dir"
  "$hs" run "$cfg" --run-dir "$run_dir" --fresh > "$work/resize-2.log" 2>&1 &
  sup=$!
  sleep "${RESIZE_AFTER_S:-90}"
  "$hs" stop --run-dir "$run_dir" >> "$work/resize-2.log" 2>&1
  wait $sup
  say "   2 ranks: exit $?: $(grep -E 'stopped after|complete after' "$work/resize-2.log" | tail -n 1)"
  sed -i "s/^drafters = .*/drafters = [0]/" "$cfg"
  timeout "${PIPELINE_LIMIT_S:-300}" "$hs" run "$cfg" --run-dir "$run_dir" > "$work/resize-1.log" 2>&1
  say "   1 rank: exit $?: $(grep -E 'drafters \(count\)|drafter ranks >=|stopped after|complete after' "$work/resize-1.log" | cut -c1-200 | tr '\n' ' ')"
  "$hs" ledger verify "$run_dir" > "$work/resize.verify.txt" 2>&1
  say "   ledger verify exit $?: $(tail -n 1 "$work/resize.verify.txt")"
  cp "$run_dir/metrics.jsonl" "$work/resize.metrics.jsonl" 2>/dev/null
  rm -rf "$run_dir/checkpoints"
fi
tar -czf "$out/scale_out.tar.gz" -C "$out" work
rm -rf "$work"
say "== done"
