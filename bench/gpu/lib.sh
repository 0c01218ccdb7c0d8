# Sourced by the GPU session scripts (bench/gpu/*.sh).
#
# session_init BUILD_DIR OUT_DIR: sets build, out, root (and cd there), py (python3 of the GPU
# machine's torch venv when present), hs (hsring), work (OUT_DIR/work) and say() (echo + append
# to OUT_DIR/summary.txt); keeps NVLink multicast off (the machine's GPUs are shared); starts
# OUT_DIR/summary.txt with the date, the GPUs and the commit.
session_init() {
  build=$(cd "${1:?usage: $0 BUILD_DIR OUT_DIR}" && pwd)
  mkdir -p "${2:?usage: $0 BUILD_DIR OUT_DIR}"
  out=$(cd "$2" && pwd)
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  cd "$root" || exit 1
  for d in /opt/torch/.venv/bin; do [ -d "$d" ] && export PATH="$d:$PATH"; done
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  py=$(command -v python3)
  hs="$build/src/cli/hsring"
  work="$out/work"
  mkdir -p "$work" runs
  : > "$out/summary.txt"
  say "$(date -u) $(nvidia-smi -L 2>/dev/null | tr '\n' ' ')"
  say "$(git log -1 --oneline 2>/dev/null)"
}
say() { echo "$*" | tee -a "$out/summary.txt"; }

# Run one pipeline under `hsring run` and summarise it (needs session_init first).
#
# pipeline NAME CONFIG KILL_WORKER KILL_AFTER_S [SED_EXPR ...]
#   copies CONFIG with [run] name = NAME, [data] path = runs/long.jsonl and the sed expressions
#   applied; runs it to completion (or PIPELINE_LIMIT_S, then hsring stop), snapshots
#   `hsring status` every 5 s, SIGKILLs KILL_WORKER ("" = none) after KILL_AFTER_S seconds,
#   verifies the ledger and prints trained tokens/s, data wait and peak memory (summarize_run.py).
pipeline() {
  local name=$1 config=$2 kill_worker=$3 kill_after=$4
  shift 4
  local cfg="$work/$name.toml" run_dir="$root/runs/$name"
  sed -e "s/^name = .*/name = \"$name\"/" -e "s|^path = .*|path = \"$root/runs/long.jsonl\"|" "$config" > "$cfg"
  for e in "$@"; do sed -i "$e" "$cfg"; done
  rm -rf "$run_dir"
  say "== pipeline $name: $(grep -E '^(targets|drafters|slot_tokens|tokens_per_step|allow_shared_gpus)' "$cfg" | tr '\n' ' ')"
  local t0=$SECONDS
  "$hs" run "$cfg" --run-dir "$run_dir" --fresh > "$work/$name.log" 2>&1 &
  local sup=$!
  local killed=0
  while kill -0 $sup 2>/dev/null; do
    sleep 5
    "$hs" status --json --run-dir "$run_dir" >> "$work/$name.status.jsonl" 2>/dev/null && echo >> "$work/$name.status.jsonl"
    if [ -n "$kill_worker" ] && [ $killed = 0 ] && [ $((SECONDS - t0)) -ge "$kill_after" ]; then
      "$hs" kill "$kill_worker" --run-dir "$run_dir" >> "$work/$name.log" 2>&1 && say "   SIGKILLed $kill_worker at $((SECONDS - t0)) s"
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
  "$py" "$root/bench/gpu/summarize_run.py" "$run_dir" "$work/$name.log" | tee -a "$out/summary.txt"
  rm -rf "$run_dir/checkpoints"   # tens of GB of fp32 state: not needed after the summary
}

# gpu_tests BUILD FILTER: the model's GPU tests matching a doctest -tc filter, required not to skip;
# the summary gets the exit code and the failures/messages.
gpu_tests() {
  say "== GPU tests: $2"
  HSRING_GPU_TESTS=required "$1/tests/model/test_model" --test-suite=gpu -tc="$2" > "$work/gpu_tests.txt" 2>&1
  say "   exit $?"
  grep -E "test cases|assertions|ERROR|FAILED|MESSAGE|logged|CHECK" "$work/gpu_tests.txt" | head -n 40 | sed 's/^/   /' |
    tee -a "$out/summary.txt"
}

# plan_specforge BUILD WEIGHTS...: `hsring plan config/qwen3-8b-specforge-8gpu.toml --measure --gpus 8`
# once per [target] weights value (PLAN_SECONDS of drafter steps), on runs/specforge.jsonl.
plan_specforge() {
  local build=$1 weights
  shift
  [ -f runs/specforge.jsonl ] || "$py" bench/gpu/make_long_data.py runs/specforge.jsonl --samples 2000 --length 768
  export HSRING_BIN_DIR="$build/bench"
  for weights in "$@"; do
    say "== hsring plan config/qwen3-8b-specforge-8gpu.toml --measure --gpus 8 ([target] weights = $weights)"
    sed "s/^weights = .*/weights = \"$weights\"/" config/qwen3-8b-specforge-8gpu.toml > config/specforge-$weights.toml
    timeout 240 "$build/src/cli/hsring" plan config/specforge-$weights.toml --measure --gpus 8 \
      --seconds "${PLAN_SECONDS:-10}" > "$work/plan_$weights.txt" 2>&1
    say "   exit $?"
    grep -E "measured|target:|drafter:|peak memory|splits|target\(s\)|recommended|FAILED|samples/s" "$work/plan_$weights.txt" |
      sed 's/^/   /' | tee -a "$out/summary.txt"
    rm -f config/specforge-$weights.toml
  done
}
