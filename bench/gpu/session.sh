#!/usr/bin/env bash
# bench/gpu/session.sh BUILD_DIR OUT_DIR — the GPU measurements of BENCHMARKS.md in one go, on
# the 2-GPU machine after bin/gpu-build and bin/hugepages:
#   1. hsring-bench target / drafter (LibTorch vs PyTorch eager, same run)
#   2. pipeline runs on long samples (bench/gpu/make_long_data.py), Qwen3-8B-shaped target(s) and
#      a 5-layer DFlash drafter at Qwen3-8B dims, 65,536-token slots:
#        p1: 1 target process on GPU0, drafter on GPU1
#        p3: 3 target processes sharing GPU0 (the seed topology squeezed), drafter on GPU1;
#            target.1 is SIGKILLed mid-run and restarted; the ledger must verify exactly once
#      each: trained tokens/s, target tokens/s, data-wait fraction, drafter peak GPU memory.
# Everything lands in OUT_DIR (summary.txt + session.tar.gz with logs and metrics).
# SKIP_MODEL_BENCH=1 / SKIP_PIPELINES=1 run one half; SAMPLES, KILL_AFTER_S, PIPELINE_LIMIT_S tune it.
set -uo pipefail
build=$(cd "${1:?usage: $0 BUILD_DIR OUT_DIR}" && pwd)
mkdir -p "${2:?usage: $0 BUILD_DIR OUT_DIR}"
out=$(cd "$2" && pwd)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
for d in /opt/torch/.venv/bin; do [ -d "$d" ] && export PATH="$d:$PATH"; done
py=$(command -v python3)
hs="$build/src/cli/hsring"
work="$out/work"
mkdir -p "$work" runs
say() { echo "$*" | tee -a "$out/summary.txt"; }
: > "$out/summary.txt"
say "$(date -u) $(nvidia-smi -L | tr '\n' ' ')"
say "$(git log -1 --oneline 2>/dev/null)"

if [ "${SKIP_MODEL_BENCH:-0}" != 1 ]; then
  say "== hsring-bench target"
  timeout 300 "$build/bench/hsring-bench" target --python "$py" > "$work/bench_target.txt" 2>&1
  say "   exit $?: $(tail -n 1 "$work/bench_target.txt")"
  say "== hsring-bench drafter"
  timeout 300 "$build/bench/hsring-bench" drafter --python "$py" > "$work/bench_drafter.txt" 2>&1
  say "   exit $?: $(tail -n 1 "$work/bench_drafter.txt")"
fi

[ "${SKIP_PIPELINES:-0}" = 1 ] || "$py" bench/gpu/make_long_data.py runs/long.jsonl --samples "${SAMPLES:-400}" --length 3072

# pipeline NAME CONFIG TARGETS KILL_AFTER_S: runs to completion (or a time limit), snapshots status.
pipeline() {
  local name=$1 config=$2 targets=$3 kill_after=$4
  local cfg="$work/$name.toml" run_dir="$root/runs/$name"
  sed -e "s/^targets = .*/targets = $targets/" -e "s/^name = .*/name = \"$name\"/" "$config" > "$cfg"
  sed -i "s|^path = .*|path = \"$root/runs/long.jsonl\"|" "$cfg"
  rm -rf "$run_dir"
  say "== pipeline $name: targets $targets ($(grep -E '^(slot_tokens|size)' "$cfg" | tr '\n' ' '))"
  local t0=$SECONDS
  "$hs" run "$cfg" --run-dir "$run_dir" --fresh > "$work/$name.log" 2>&1 &
  local sup=$!
  local killed=0
  while kill -0 $sup 2>/dev/null; do
    sleep 5
    "$hs" status --json --run-dir "$run_dir" >> "$work/$name.status.jsonl" 2>/dev/null && echo >> "$work/$name.status.jsonl"
    if [ "$kill_after" -gt 0 ] && [ $killed = 0 ] && [ $((SECONDS - t0)) -ge "$kill_after" ]; then
      "$hs" kill target.1 --run-dir "$run_dir" >> "$work/$name.log" 2>&1 && say "   SIGKILLed target.1 at $((SECONDS - t0)) s"
      killed=1
    fi
    if [ $((SECONDS - t0)) -ge "${PIPELINE_LIMIT_S:-300}" ]; then
      say "   time limit: hsring stop"
      "$hs" stop --run-dir "$run_dir" >> "$work/$name.log" 2>&1
      wait $sup
      break
    fi
  done
  wait $sup; local rc=$?
  say "   hsring run exit $rc after $((SECONDS - t0)) s: $(grep -E 'complete after|stopped' "$work/$name.log" | tail -n 1)"
  "$hs" ledger verify "$run_dir" > "$work/$name.verify.txt" 2>&1; say "   ledger verify exit $?: $(tail -n 1 "$work/$name.verify.txt")"
  cp "$run_dir/metrics.jsonl" "$work/$name.metrics.jsonl" 2>/dev/null
  cp -r "$run_dir/logs" "$work/$name.logs" 2>/dev/null
  "$py" bench/gpu/summarize_run.py "$run_dir" "$work/$name.log" | tee -a "$out/summary.txt"
  rm -rf "$run_dir/checkpoints"   # tens of GB of fp32 state: not needed after the summary
}

if [ "${SKIP_PIPELINES:-0}" != 1 ]; then
  pipeline p1 config/qwen3-8b-3t1d-squeezed.toml "[0]" 0
  pipeline p3 config/qwen3-8b-3t1d-squeezed.toml "[0, 0, 0]" "${KILL_AFTER_S:-60}"
fi

tar -czf "$out/session.tar.gz" -C "$out" work
rm -rf "$work"
say "== done"
