#!/usr/bin/env bash
# bench/gpu/resume.sh BUILD_DIR OUT_DIR — issue 20 on one GPU: the kill schedule that once trained
# NaN after a resume, against unkilled runs of the same config (invariant 10, docs/architecture.md).
#
# Config: config/qwen3-8b-1t1d.toml with target and drafter sharing GPU 0 (allow_shared_gpus),
# checkpoint_every = 6, SAMPLES (300) x 3,072-token samples (bench/gpu/make_long_data.py).
#   ref   an unkilled run (REF2=1: a second one, for the GPU's run-to-run spread)
#   kill  `hsring kill drafter.0` after 9 metrics rows (the time to its next trained step is the
#         restart time), SIGKILL of the supervisor at 20 rows, the orphaned drafter checkpoints and
#         exits, a second `hsring run` re-attaches and completes
# Then: ledger verify, every metrics row finite, rejected samples and skipped steps, and the
# final exports compared (bench/gpu/compare_exports.py): max abs / relative difference.
# SKIP_REF=1 reuses runs/ref (and runs/ref2) of an earlier call (one call of the device tool is 10
# minutes at most); SKIP_KILL=1 stops after the unkilled run(s); REFS="ref ref2" names them.
# RESPONSES=target: [data] responses = "target" (the target answers every prompt, greedy, MAX_NEW
# (64) new tokens, no stop token: preset weights); the kill schedule (checkpoint_every = CKPT, 6)
# with answers re-generated for every re-issued sample.
# FP8=1: the FP8 target and the FP8 drafter ([target] weights, [train] matmul and lm_head = "fp8").
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
session_init "$@"
[ -f runs/long.jsonl ] || "$py" bench/gpu/make_long_data.py runs/long.jsonl --samples "${SAMPLES:-300}" --length 3072
cfg="$work/resume.toml"
sed -e "s/^name = .*/name = \"resume\"/" -e "s|^path = .*|path = \"$root/runs/long.jsonl\"|" \
    -e "s/^drafters = .*/drafters = [0]\nallow_shared_gpus = true/" \
    -e "s/^checkpoint_every = .*/checkpoint_every = ${CKPT:-6}/" config/qwen3-8b-1t1d.toml > "$cfg"
# FP8=1: [target] weights, [train] matmul and lm_head = "fp8" (issue 23's paths under the same kills).
if [ "${FP8:-0}" = 1 ]; then
  sed -i -e 's/^dtype = "bf16"/dtype = "bf16"\nweights = "fp8"/' -e 's/^lr = /matmul = "fp8"\nlm_head = "fp8"\nlr = /' "$cfg"
fi
if [ "${RESPONSES:-dataset}" = target ]; then
  sed -i -e 's/^epochs = .*/epochs = 1\nresponses = "target"/' "$cfg"
  printf '[generate]\nmax_new_tokens = %s\nstop_token_ids = []\n' "${MAX_NEW:-64}" >> "$cfg"
fi

rows() { local n; n=$(grep -c '"step_ms"' "$1/metrics.jsonl" 2>/dev/null); echo "${n:-0}"; }
finish() {  # NAME RUN_DIR
  "$hs" ledger verify "$2" > "$work/$1.verify.txt" 2>&1
  say "   $1: ledger verify exit $?: $(tail -n 1 "$work/$1.verify.txt")"
  cp "$2/metrics.jsonl" "$work/$1.metrics.jsonl" 2>/dev/null
  cp -r "$2/logs" "$work/$1.logs" 2>/dev/null
  "$py" bench/gpu/check_metrics.py "$2/metrics.jsonl" | tee -a "$out/summary.txt"
  # ~25 GB of fp32 state per run (two checkpoints kept): a reference needs only its export.
  [ "$1" = kill ] || rm -rf "$2/checkpoints"
}

for ref in ${REFS:-$([ "${SKIP_REF:-0}" = 1 ] || echo ref) $([ "${REF2:-0}" = 1 ] && echo ref2)}; do
  say "== $ref: unkilled"
  t0=$SECONDS
  "$hs" run "$cfg" --run-dir "runs/$ref" --fresh > "$work/$ref.log" 2>&1
  say "   hsring run exit $? after $((SECONDS - t0)) s: $(grep -E 'complete|stopped' "$work/$ref.log" | tail -n 1 | cut -c1-200)"
  finish "$ref" "runs/$ref"
done

if [ "${SKIP_KILL:-0}" = 1 ]; then tar -czf "$out/resume.tar.gz" -C "$out" work; rm -rf "$work"; say "== done (SKIP_KILL)"; exit 0; fi
say "== kill: drafter SIGKILL at 9 rows, supervisor SIGKILL at 20, re-attach"
t0=$SECONDS
"$hs" run "$cfg" --run-dir runs/kill --fresh > "$work/kill.log" 2>&1 &
sup=$!
while [ "$(rows runs/kill)" -lt 9 ] && kill -0 $sup 2>/dev/null; do sleep 0.2; done
before=$(rows runs/kill)
"$hs" kill drafter.0 --run-dir runs/kill >> "$work/kill.log" 2>&1
tk=$(date +%s.%N)
while [ "$(grep '"step_ms"' runs/kill/metrics.jsonl 2>/dev/null | grep -c '"incarnation":2')" -lt 1 ] && kill -0 $sup 2>/dev/null; do sleep 0.1; done
say "   drafter SIGKILL at row $before; its next trained step's metrics line $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $tk}") s later"
grep -E "started in|resumed from|no checkpoint|ring registered|drafter built" runs/kill/logs/drafter.0.log | tail -n 6 | sed 's/^/     /' | tee -a "$out/summary.txt"
while [ "$(rows runs/kill)" -lt 20 ] && kill -0 $sup 2>/dev/null; do sleep 0.2; done
kill -9 $sup
say "   supervisor SIGKILLed at row $(rows runs/kill)"
for i in $(seq 1 600); do pgrep -f "hsring-(drafter|target).*runs/kill" > /dev/null || break; sleep 0.5; done
"$hs" run "$cfg" --run-dir runs/kill > "$work/kill2.log" 2>&1
say "   second hsring run exit $? after $((SECONDS - t0)) s in all: $(grep -E 'complete|stopped' "$work/kill2.log" | tail -n 1 | cut -c1-200)"
grep -E "re-attached|rebuilt|READY slots kept" "$work/kill2.log" | head -n 3 | sed 's/^/     /' | tee -a "$out/summary.txt"
finish kill runs/kill
grep -hE "rejected|skipped|non-finite" runs/kill/logs/*.log | head -n 10 | sed 's/^/     /' | tee -a "$out/summary.txt"

say "== exports"
"$py" bench/gpu/compare_exports.py runs/ref/drafter runs/kill/drafter | tee -a "$out/summary.txt"
[ -d runs/ref2 ] && "$py" bench/gpu/compare_exports.py runs/ref/drafter runs/ref2/drafter | tee -a "$out/summary.txt"
rm -rf runs/ref2/checkpoints runs/kill/checkpoints
tar -czf "$out/resume.tar.gz" -C "$out" work
rm -rf "$work"
say "== done"
