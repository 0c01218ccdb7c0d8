#!/usr/bin/env bash
# bench/gpu/transport.sh BUILD_DIR OUT_DIR — issue 15's transport measurements in one GPU run
# (after bin/gpu-build), on 1 GPU (target and drafter share GPU 0: cudaIpc works between
# processes of one device) or 2+ (targets on GPU 1, the drafter on GPU 0):
#   1. tests/gpu/test_transport_cuda: bit-exact data through host, peer and peer+host, and a
#      SIGKILLed target's READY slots (peer: re-issued; peer+host: read from the host copy)
#   2. hsring-bench ring --cuda --transport host|peer|peer+host, each with its limit measured in
#      the same run (host: pinned D2H/H2D; peer kinds: a raw cudaIpc device-to-device copy)
#   3. synthetic pipelines through [transport] kind = "peer" and "peer+host" with target.0
#      SIGKILLed while the drafter pulls its batches, then `hsring ledger verify`
# OUT_DIR/transport/: summary.txt (every result, one line each), work/ (logs). About 4 minutes.
# BENCH_S (seconds per bench run, default 5), SLOT_MIB (default 64), SAMPLES (pipeline data set,
# default 400), KILL_AFTER_S (default 8) tune it.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
session_init "${1:-}" "${2:?usage: $0 BUILD_DIR OUT_DIR}/transport"
fail_count=0
check() {  # check NAME RC: one PASS/FAIL line
  if [ "$2" = 0 ]; then say "   PASS $1"; else say "   FAIL $1 (exit $2)"; fail_count=$((fail_count + 1)); fi
}

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "${gpus:-0}" -lt 1 ]; then
  say "FAIL: no GPU visible (nvidia-smi -L lists none): this script needs the GPU machine"
  exit 1
fi
# SKIP_BENCH=1: sections 1 and 3 only (no hsring-bench needed).
needed=("$hs" "$build/tests/gpu/test_transport_cuda" "$build/src/worker/hsring-synth-worker")
[ "${SKIP_BENCH:-0}" = 1 ] || needed+=("$build/bench/hsring-bench" "$build/bench/ring/hsring-bench-ring")
for f in "${needed[@]}"; do
  [ -x "$f" ] || { say "FAIL: $f is missing: build first (bin/gpu-build, or ninja -C $build)"; exit 1; }
done
tgpu=$([ "$gpus" -ge 2 ] && echo 1 || echo 0)
say "targets on GPU $tgpu, drafter on GPU 0"
if [ "$gpus" -ge 2 ]; then say "p2p GPU0<->GPU1: $(nvidia-smi topo -p2p r 2>/dev/null | awk 'NR==2 {print $3}')"; fi

say "== 1. tests/gpu/test_transport_cuda (host, peer, peer+host; SIGKILLed target)"
HSRING_GPU_TESTS=required timeout 120 "$build/tests/gpu/test_transport_cuda" > "$work/test_transport_cuda.txt" 2>&1
rc=$?
say "   $(grep -E 'test cases:' "$work/test_transport_cuda.txt" | tail -n 1)"
check test_transport_cuda $rc
[ $rc = 0 ] || tail -n 30 "$work/test_transport_cuda.txt" | tee -a "$out/summary.txt"

say "== 2. hsring-bench ring --cuda, ${SLOT_MIB:-64} MiB slots, ${BENCH_S:-5} s each"
declare -A ratio gbs
for kind in $([ "${SKIP_BENCH:-0}" = 1 ] || echo host peer peer+host); do
  log="$work/bench_${kind/+/_}.txt"
  timeout 90 "$build/bench/hsring-bench" ring --cuda --transport "$kind" --slot-mib "${SLOT_MIB:-64}" --slots 8 \
    --seconds "${BENCH_S:-5}" --huge-pages auto > "$log" 2>&1
  rc=$?
  line=$(grep -E '^ring: ' "$log" | tail -n 1)
  say "   --transport $kind: ${line:-no result}"
  grep -E '^(raw cudaIpc|pinned)' "$log" | sed 's/^/      /' | tee -a "$out/summary.txt"
  check "bench --transport $kind" $rc
  [ $rc = 0 ] || tail -n 15 "$log" | tee -a "$out/summary.txt"
  gbs[$kind]=$(echo "$line" | sed -n 's/^ring: \([0-9.]*\) GB.*/\1/p')
  ratio[$kind]=$(echo "$line" | sed -n 's/.*ratio \([0-9.]*\).*/\1/p')
done
if [ -n "${ratio[peer]:-}" ]; then
  ok=$(awk -v r="${ratio[peer]}" 'BEGIN {print (r >= 0.9) ? "yes" : "no"}')
  say "   peer >= 0.9 x raw cudaIpc copy: $ok (ratio ${ratio[peer]})"
fi

say "== 3. synthetic pipelines, target.0 SIGKILLed mid-run, ledger verified"
"$py" bench/gpu/make_long_data.py "$work/transport_data.jsonl" --samples "${SAMPLES:-400}" --length 3072 > /dev/null
for kind in peer peer+host; do
  name="transport-${kind/+/-}"
  run_dir="$root/runs/$name"
  cfg="$work/$name.toml"
  rm -rf "$run_dir"
  cat > "$cfg" <<EOF
[run]
name = "$name"
mode = "synthetic"
seed = 3
[topology]
targets = [$tgpu, $tgpu]
drafters = [0]
allow_shared_gpus = true
[ring]
slots = 8
slot_tokens = 4096
[transport]
kind = "$kind"
peer_buffers = 3
[target]
model = "preset:qwen3-8b"
[drafter]
inflight_slots = 2
[data]
path = "$work/transport_data.jsonl"
epochs = 1
[train]
tokens_per_step = 8192
checkpoint_every = 20
[supervisor]
restart = "on-failure"
status_interval_s = 1.0
EOF
  t0=$SECONDS
  HSRING_SYNTH_STEP_MS=60 timeout 100 "$hs" run "$cfg" --run-dir "$run_dir" --fresh > "$work/$name.log" 2>&1 &
  sup=$!
  killed=0
  while kill -0 $sup 2>/dev/null; do
    sleep 1
    # Kill once the drafter has pulled batches: the target's READY peer slots and its buffers die with it.
    if [ $killed = 0 ] && [ $((SECONDS - t0)) -ge "${KILL_AFTER_S:-8}" ]; then
      "$hs" kill target.0 --run-dir "$run_dir" >> "$work/$name.log" 2>&1 && say "   $kind: SIGKILLed target.0 at $((SECONDS - t0)) s"
      killed=1
    fi
  done
  wait $sup; rc=$?
  say "   $kind: hsring run exit $rc after $((SECONDS - t0)) s: $(grep -E 'complete after|stopped' "$work/$name.log" | tail -n 1)"
  say "   $kind: $(grep -hoE 'reclaimed pid [0-9]+ .*' "$run_dir"/logs/*.log "$work/$name.log" 2>/dev/null | head -n 2 | tr '\n' ' ')"
  say "   $kind: $(grep -hoE 'peer transport \([^)]*\)[^"]*' "$run_dir"/logs/*.log 2>/dev/null | sort -u | head -n 2 | tr '\n' ' ')"
  check "pipeline $kind (hsring run)" $rc
  "$hs" ledger verify "$run_dir" > "$work/$name.verify.txt" 2>&1; vrc=$?
  say "   $kind: ledger verify: $(tail -n 1 "$work/$name.verify.txt")"
  check "ledger verify $kind" $vrc
  cp -r "$run_dir/logs" "$work/$name.logs" 2>/dev/null
  rm -rf "$run_dir"
done

tar -czf "$out/transport.tar.gz" -C "$out" work && rm -rf "$work"
if [ $fail_count = 0 ]; then say "== done: all passed"; else say "== done: $fail_count FAILED (see above and transport.tar.gz)"; fi
exit $((fail_count > 0))
