#!/usr/bin/env bash
# bench/gpu/spec_decode.sh BUILD_DIR OUT_DIR DRAFTER_DIR — speculative decoding at batch 1 on the
# Qwen3-8B preset (one H200), `hsring model spec-decode`: PROMPTS (8) random prompts of 256-512
# tokens, MAX_NEW (128) new tokens, against plain decoding of the same prompts in the same process
# (target_tokens_per_s): tau, acceptance lengths, lossless, tokens/s and the speedup, greedy and
# sampled (temperature 1, seed 1), and greedy in fp32 (SETTINGS="greedy sampled fp32" picks them):
# bf16's near-ties on random weights flip between a block verify and a one-token step, fp32's do
# not, so fp32 shows whether the loop itself is lossless. The preset's weights are drawn with
# PRESET_SEED (1: the seed of config/qwen3-8b-1t1d.toml, whose runs trained DRAFTER_DIR).
# OUT_DIR/spec_decode/summary.txt and one JSON per setting. TRACE=1: a Kineto trace of a short extra
# run of each setting (2 blocks speculative + 8 tokens plain, first prompt), summed with the host
# side (bench/gpu/trace_summary.py --host): where a decode step's wall time goes.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
session_init "${1:-}" "${2:?usage: $0 BUILD_DIR OUT_DIR DRAFTER_DIR}/spec_decode"
drafter=${3:?usage: $0 BUILD_DIR OUT_DIR DRAFTER_DIR}
[ -f "$drafter/config.json" ] || { say "FAIL: $drafter is not a drafter export"; exit 1; }
"$py" bench/python/generate_hf.py make-prompts "$work/prompts.jsonl" --count "${PROMPTS:-8}" --min-len 256 \
  --max-len 512 --vocab 151000
for setting in ${SETTINGS:-greedy sampled fp32}; do
  extra=()
  [ $setting = sampled ] && extra=(--temperature 1 --seed 1)
  [ $setting = fp32 ] && extra=(--dtype fp32)
  [ "${TRACE:-0}" = 1 ] && extra+=(--trace "$work/$setting.trace.json")
  "$hs" model spec-decode "$drafter" --target preset:qwen3-8b --preset-seed "${PRESET_SEED:-1}" --device cuda \
    --prompts "$work/prompts.jsonl" --max-new-tokens "${MAX_NEW:-128}" "${extra[@]}" --json \
    > "$out/$setting.json" 2> "$work/$setting.err"
  rc=$?
  [ $rc = 0 ] || { say "   $setting: exit $rc: $(tail -n 3 "$work/$setting.err")"; continue; }
  "$py" - "$out/$setting.json" "$setting" <<'PY' | tee -a "$out/summary.txt"
import json, sys
j = json.load(open(sys.argv[1]))
lossless = sum(p["lossless"] for p in j["prompts"])
where = [p["differs_at"] for p in j["prompts"] if not p["lossless"]]
print(f"   {sys.argv[2]} ({j['dtype']}): tau {j['tau']:.3f} over {j['verify_steps']} verify steps, {j['new_tokens']} new tokens; "
      f"lossless {lossless}/{len(j['prompts'])} prompts (others differ from plain decoding at new token {where}); "
      f"speculative {j['spec_tokens_per_s']:.1f} tokens/s "
      f"(draft {j['draft_seconds']:.2f} s, verify {j['verify_seconds']:.2f} s, prefill {j['prefill_seconds']:.2f} s) "
      f"vs plain decoding {j['target_tokens_per_s']:.1f} tokens/s: {j['speedup']:.2f}x")
steps = j["verify_steps"]
if steps:
    print(f"     per verify step: draft {1000 * j['draft_seconds'] / steps:.1f} ms, verify {1000 * j['verify_seconds'] / steps:.1f} ms; "
          f"plain decoding {1000 / j['target_tokens_per_s']:.1f} ms per token")
PY
  if [ -f "$work/$setting.trace.json" ]; then
    "$py" bench/gpu/trace_summary.py "$work/$setting.trace.json" --steps 1 --top 15 --host > "$out/$setting.trace.txt" 2>&1
    head -n 3 "$out/$setting.trace.txt" | sed 's/^/     /' | tee -a "$out/summary.txt"
    rm -f "$work/$setting.trace.json"
  fi
done
