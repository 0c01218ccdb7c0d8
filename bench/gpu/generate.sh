#!/usr/bin/env bash
# bench/gpu/generate.sh BUILD_DIR OUT_DIR — issue 21's generation benchmark on one GPU: the
# target's decode engine (`hsring-model generate`, KV cache, continuous batching) against
# transformers' `generate` on the same random HF Qwen3 directory, the same prompts and batch, both
# bf16 greedy, in one run (bench/python/generate_hf.py writes the model and the prompts).
# OUT_DIR/generate/summary.txt: tokens/s of both, the ratio, and how far the greedy tokens agree
# (bf16 arithmetic differs between the two: the first differing token ends the comparison of a
# prompt). SHAPE (qwen3-8b), PROMPTS (64), BATCH (16), MAX_NEW (128), MIN_LEN/MAX_LEN (128/512).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
session_init "${1:-}" "${2:?usage: $0 BUILD_DIR OUT_DIR}/generate"
model_exe="$build/src/model/hsring-model"
[ -x "$model_exe" ] || { say "FAIL: $model_exe is missing: build it first"; exit 1; }
shape=${SHAPE:-qwen3-8b} batch=${BATCH:-16} max_new=${MAX_NEW:-128}
dir=${MODEL_DIR:-/tmp/hsring-gen-$shape}
prompts="$work/prompts.jsonl"
t0=$SECONDS
[ -f "$dir/config.json" ] || "$py" bench/python/generate_hf.py make-model "$dir" --shape "$shape" > "$work/make.txt" 2>&1 \
  || { say "FAIL: make-model"; tail -n 20 "$work/make.txt" | tee -a "$out/summary.txt"; exit 1; }
"$py" bench/python/generate_hf.py make-prompts "$prompts" --count "${PROMPTS:-64}" --min-len "${MIN_LEN:-128}" \
  --max-len "${MAX_LEN:-512}"
say "model $dir ($shape, random bf16) ready after $((SECONDS - t0)) s; ${PROMPTS:-64} prompts of ${MIN_LEN:-128}..${MAX_LEN:-512} tokens, batch $batch, $max_new new tokens each, greedy"
"$py" bench/python/generate_hf.py generate "$dir" --prompts "$prompts" --batch "$batch" --max-new-tokens "$max_new" \
  --json > "$work/hf.json" 2> "$work/hf.err" || { say "FAIL: transformers generate"; tail -n 20 "$work/hf.err" | tee -a "$out/summary.txt"; }
"$model_exe" generate "$dir" --prompts "$prompts" --batch "$batch" --max-new-tokens "$max_new" --device cuda \
  --json > "$work/hsring.json" 2> "$work/hsring.err" || { say "FAIL: hsring-model generate"; tail -n 20 "$work/hsring.err" | tee -a "$out/summary.txt"; }
"$py" - "$work/hf.json" "$work/hsring.json" <<'PY' | tee -a "$out/summary.txt"
import json, sys
hf, hs = (json.load(open(p)) for p in sys.argv[1:3])
a = hf["output_ids"]
b = [o["output_ids"] for o in hs["outputs"]]
same = sum(x == y for x, y in zip(a, b))
prefix = []
for x, y in zip(a, b):
    k = 0
    while k < min(len(x), len(y)) and x[k] == y[k]:
        k += 1
    prefix.append(k)
print(f"transformers generate: {hf['new_tokens']} new tokens in {hf['seconds']:.2f} s = {hf['tokens_per_s']:.0f} tokens/s")
print(f"hsring-model generate: {hs['new_tokens']} new tokens in {hs['seconds']:.2f} s = {hs['tokens_per_s']:.0f} tokens/s "
      f"(prefill {hs['prefill_seconds']:.2f} s, decode {hs['decode_seconds']:.2f} s)")
print(f"ratio hsring / transformers: {hs['tokens_per_s'] / hf['tokens_per_s']:.2f}x")
print(f"greedy tokens: {same} of {len(a)} prompts identical; common prefix mean {sum(prefix) / len(prefix):.1f}, "
      f"min {min(prefix)} of {len(a[0])} tokens")
PY
# Teacher-forced: are hsring's greedy tokens transformers' argmax (and transformers' own)? bf16
# near-ties make greedy runs part ways; this says whether each token is a correct greedy choice.
"$py" bench/python/generate_hf.py check "$dir" --prompts "$prompts" --outputs "$work/hsring.json" \
  --hf-outputs "$work/hf.json" --count "${CHECK_COUNT:-16}" 2> "$work/check.err" | tee -a "$out/summary.txt"
