#!/usr/bin/env bash
# bench/gpu/widened.sh BUILD_DIR OUT_DIR — the speedup a user of an 8B target would see, on one GPU:
# a real target's function at Qwen3-8B's cost (bin/widen-model), DFlash and EAGLE-3 at batch 1, 4, 16.
# SECTIONS (default "bmgpwcsr"), each after the ones it needs; WORK (/root/widened) keeps logs on the
# machine between calls, so the sections can span several device calls on one warm machine:
#   b  build hsring's programs into BUILD_DIR (bench/gpu/real_target.sh's section b; carry ".carry")
#   m  bin/make-target --preset gpu-widenable -> models/pycode-14m (PROMPTS 40,000 + 64 held out)
#   g  `hsring data generate`: the small target's greedy answers (config/real-pycode-14m.toml)
#   p  `hsring run`: the 2-layer DFlash drafter and the EAGLE-3 drafter side by side on GPU 0
#      (config/real-pycode-14m{,-eagle3}.toml, EPOCHS overrides theirs); ledger verify each
#   k  keep: the small target and both exports as OUT/small-pair.tgz.part-* (15 MiB each), so a later
#      session can carry them (.carry/small-pair/) instead of training again: section u unpacks them
#   w  bin/widen-model: target -> runs/pycode-14m-as-8b (Qwen3-8B dims, the small layers at DEPTHS
#      0,1,9,17,25,33,34,35), each export -> runs/widened-{dflash,eagle3}
#   c  bench/gpu/widen_check.py: transformers fp32 logits and greedy outputs, small vs widened
#   s  `hsring model spec-decode`, 64 held-out prompts x SPEC_MAX_NEW (128): per drafter, the small pair
#      (bf16, batch 1: the small-target row), the widened pair in fp32 (lossless, acceptance lengths
#      = the small pair's fp32 ones; FP32_BATCH (16) rows a step), bf16 at batch 1, 4 and 16 (BATCHES),
#      DRAFTERS ("dflash eagle3") picks the types, ONLY_WIDE=1 only the widened bf16 rows; the widened DFlash pair
#      through the public DFlash loop (bench/gpu/spec_reference.py, fp32, transformers)
#   t  a Kineto trace of the widened pairs' loop (DRAFTERS, default dflash): each graph launch's kernels,
#      GPU span and the idle GPU before it (bench/gpu/trace_summary.py --graphs), OUT/<type>.graphs.txt
#   r  `hsring run config/real-pycode-14m-as-8b.toml`: a DFlash drafter trained by the pipeline on the
#      widened target's hidden states (the first ANSWERS (4,000) answers, 1 epoch), tau of its export
# OUT_DIR: summary.txt and the spec-decode JSON of each measurement (at most 8 files come back: the
# rest stays in WORK).
set -uo pipefail
build=${1:?usage: $0 BUILD_DIR OUT_DIR}
sections=${SECTIONS:-bmgpwcsr}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 1
if [[ $sections == *b* ]]; then
  SECTIONS=b bench/gpu/real_target.sh "$build" "${2:?}" || exit 1
fi
[[ $sections == b ]] && exit 0
source "$root/bench/gpu/lib.sh"
session_init "$build" "${2:?usage: $0 BUILD_DIR OUT_DIR}"
work=${WORK:-/root/widened}
mkdir -p "$work"
small=models/pycode-14m
wide=runs/pycode-14m-as-8b
max_new=${SPEC_MAX_NEW:-128}
heldout=$small/data/eval.jsonl
export PYTHONUNBUFFERED=1

if [[ $sections == *m* ]]; then
  say "== bin/make-target --preset gpu-widenable"
  rm -rf "$small"
  HSRING_PYTHON=$py bin/make-target --preset gpu-widenable --out "$small" --source .carry/debs --device cuda \
    --split 70,3,24,3 --prompts "${PROMPTS:-40000}" --eval-prompts 64 --prompt-len 64:192 2>&1 |
    tee "$work/make.txt" | grep -E "perplexity|ready|parameters" | tee -a "$out/summary.txt"
fi

if [[ $sections == *u* ]]; then
  cat .carry/small-pair/small-pair.tgz.part-* | tar -xzf - && say "== the small pair unpacked from .carry/small-pair"
fi

if [[ $sections == *g* ]]; then
  say "== hsring data generate (config/real-pycode-14m.toml [generate])"
  for part in prompts:answers eval:eval; do
    t0=$SECONDS
    "$hs" data generate config/real-pycode-14m.toml --prompts "$small/data/${part%%:*}.jsonl" \
      --out "runs/real-pycode-14m-${part##*:}.jsonl" --device cuda > "$work/gen_${part##*:}.txt" 2>&1
    say "   ${part%%:*}: exit $? in $((SECONDS - t0)) s: $(tail -n 1 "$work/gen_${part##*:}.txt")"
  done
fi

# train NAME CONFIG: one `hsring run` to completion (or PIPELINE_LIMIT_S, then hsring stop: the next
# call's `train` resumes it from its checkpoint); ledger verify. A run whose export exists is kept.
train() {
  local name=$1 cfg=$2 t0=$SECONDS fresh=()
  if [ -f "runs/$name/drafter/config.json" ] && [ "${FRESH:-0}" != 1 ]; then
    say "   $name: trained already (runs/$name/drafter; FRESH=1 trains it again)"
    return
  fi
  if [ -n "${EPOCHS:-}" ]; then
    sed "s/^epochs = .*/epochs = $EPOCHS/" "$cfg" > "${cfg%.toml}-epochs.toml"
    cfg=${cfg%.toml}-epochs.toml
  fi
  if [ "${FRESH:-0}" = 1 ] || [ ! -d "runs/$name/checkpoints" ]; then
    rm -rf "runs/$name"
    fresh=(--fresh)
  fi
  "$hs" run "$cfg" --run-dir "runs/$name" "${fresh[@]}" >> "$work/$name.log" 2>&1 &
  local sup=$!
  while kill -0 $sup 2>/dev/null; do
    sleep 5
    if [ $((SECONDS - t0)) -ge "${PIPELINE_LIMIT_S:-560}" ]; then
      "$hs" stop --run-dir "runs/$name" >> "$work/$name.log" 2>&1
      wait $sup
      break
    fi
  done
  wait $sup
  say "   $name: hsring run exit $? after $((SECONDS - t0)) s: $(grep -E 'complete|stopped|real tau' "$work/$name.log" | tail -n 2 | tr '\n' ' ')"
  [ -f "runs/$name/drafter/config.json" ] || { say "   $name: not complete yet (run the section again to resume)"; return; }
  "$hs" ledger verify "runs/$name" > "$work/$name.verify.txt" 2>&1
  say "   $name: ledger verify exit $?: $(tail -n 1 "$work/$name.verify.txt")"
  "$py" - "runs/$name/metrics.jsonl" <<'PY' | tee -a "$out/summary.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steps = [r for r in rows if "loss" in r and "step" in r]
if steps:
    k = max(1, len(steps) // 10)
    avg = lambda rs, key: sum(r[key] for r in rs) / len(rs)
    print(f"   {len(steps)} steps; loss {avg(steps[:k], 'loss'):.3f} -> {avg(steps[-k:], 'loss'):.3f}")
for r in rows:
    if "spec" in r:
        s = r["spec"]
        print(f"   tau at step {r['step']}: {s['tau']:.3f}{' (the export)' if s.get('final') else ''}")
PY
  rm -rf "runs/$name/checkpoints"
}

if [[ $sections == *p* ]]; then
  say "== hsring run: DFlash (2 layers) and EAGLE-3 side by side on GPU 0 ${EPOCHS:+(epochs = $EPOCHS)}"
  train real-pycode-14m config/real-pycode-14m.toml &
  d=$!
  train real-pycode-14m-eagle3 config/real-pycode-14m-eagle3.toml
  wait $d
fi

if [[ $sections == *k* ]]; then
  tar -czf "$work/small-pair.tgz" "$small" runs/real-pycode-14m/drafter runs/real-pycode-14m-eagle3/drafter
  split -b 15M "$work/small-pair.tgz" "$out/small-pair.tgz.part-"
  say "== kept the small pair: $(ls "$out" | grep -c small-pair) parts of $(du -h "$work/small-pair.tgz" | cut -f1)"
fi

if [[ $sections == *w* ]]; then
  say "== bin/widen-model into Qwen3-8B's dims"
  t0=$SECONDS
  HSRING_PYTHON=$py bin/widen-model target "$small" --shape qwen3-8b --depths "${DEPTHS:-0,1,9,17,25,33,34,35}" \
    --out "$wide" --force 2>&1 | tee -a "$out/summary.txt"
  for d in dflash:real-pycode-14m eagle3:real-pycode-14m-eagle3; do
    HSRING_PYTHON=$py bin/widen-model drafter "runs/${d#*:}/drafter" --target "$wide" --out "runs/widened-${d%%:*}" \
      --force 2>&1 | tee -a "$out/summary.txt"
  done
  say "   $((SECONDS - t0)) s; $(du -sh "$wide" | cut -f1) on disk"
fi

if [[ $sections == *c* ]]; then
  say "== bench/gpu/widen_check.py (transformers fp32: logits and greedy outputs, small vs widened)"
  "$py" bench/gpu/widen_check.py "$small" "$wide" runs/real-pycode-14m-eval.jsonl --max-new "$max_new" \
    > "$work/check.txt" 2>&1
  say "   exit $?: $(tail -n 1 "$work/check.txt")"
fi

# spec NAME EXPORT TARGET DTYPE BATCH [flags]: one spec-decode run, its JSON in WORK (and OUT), one summary line.
spec() {
  local name=$1 export=$2 target=$3 dtype=$4 batch=$5
  shift 5
  "$hs" model spec-decode "$export" --target "$target" --device cuda --dtype "$dtype" --batch "$batch" "$@" \
    --prompts "$heldout" --max-new-tokens "$max_new" --json > "$work/$name.json" 2> "$work/$name.err"
  local rc=$?
  "$py" - "$work/$name.json" "$name" "$rc" <<'PY' | tee -a "$out/summary.txt"
import json, sys
try:
    j = json.load(open(sys.argv[1]))
except Exception:
    print(f"   {sys.argv[2]}: exit {sys.argv[3]}, no JSON"); sys.exit()
steps, n = j["verify_steps"], len(j["prompts"])
lossless = sum(p["lossless"] for p in j["prompts"])
limit = f", limit {j['memory_bound_ms_per_token']:.2f} ms" if "memory_bound_ms_per_token" in j else ""
print(f"   {sys.argv[2]}: {j['dtype']} batch {j['batch']}: tau {j['tau']:.3f}, lossless {lossless}/{n}; "
      f"{j['spec_tokens_per_s']:.1f} vs plain {j['target_tokens_per_s']:.1f} tok/s = {j['speedup']:.2f}x; "
      f"per step draft {j['draft_ms_per_step']:.2f} ms, verify {j['verify_ms_per_step']:.2f} ms; plain "
      f"{j['plain_ms_per_token']:.2f} ms/token{limit}; graphs verify {j['decode_graphs']} draft {j['draft_graphs']}")
PY
}

# same_lengths A B: acceptance lengths and outputs of two spec-decode JSONs, prompt by prompt.
same_lengths() {
  "$py" - "$work/$1.json" "$work/$2.json" <<'PY' | tee -a "$out/summary.txt"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
lengths = sum(x["acceptance_lengths"] == y["acceptance_lengths"] for x, y in zip(a["prompts"], b["prompts"]))
tokens = sum(x["output_ids"] == y["output_ids"] for x, y in zip(a["prompts"], b["prompts"]))
print(f"   widened vs small (fp32): acceptance lengths equal on {lengths}/{len(a['prompts'])} prompts, outputs on "
      f"{tokens}/{len(a['prompts'])}; tau {b['tau']:.4f} vs {a['tau']:.4f}")
PY
}

if [[ $sections == *s* ]]; then
  for type in ${DRAFTERS:-dflash eagle3}; do
    d=$type:real-pycode-14m
    [ "$type" = eagle3 ] && d=$type:real-pycode-14m-eagle3
    say "== spec-decode, $type: $max_new new tokens on each of the 64 held-out prompts"
    if [ "${ONLY_WIDE:-0}" != 1 ]; then
      spec "$type-small-bf16" "runs/${d#*:}/drafter" "$small" bf16 1
      # fp32 (lossless, acceptance lengths): FP32_BATCH (16) prompts as rows of each step both ways, so
      # plain fp32 decoding of the 8B model (~33 GB read per token) takes seconds, not minutes.
      spec "$type-small-fp32" "runs/${d#*:}/drafter" "$small" fp32 "${FP32_BATCH:-16}"
      spec "$type-wide-fp32" "runs/widened-$type" "$wide" fp32 "${FP32_BATCH:-16}"
      same_lengths "$type-small-fp32" "$type-wide-fp32"
    fi
    for b in ${BATCHES:-1 4 16}; do
      spec "$type-wide-bf16-b$b" "runs/widened-$type" "$wide" bf16 "$b"
    done
    cp "$work/$type-wide-bf16-b1.json" "$out/" 2>/dev/null
  done
  if [ "${REFERENCE:-1}" = 1 ] && [ -s "$work/dflash-wide-fp32.json" ]; then
    say "== the widened DFlash pair through the public DFlash loop (fp32, transformers on the GPU)"
    "$py" bench/gpu/spec_reference.py runs/widened-dflash "$wide" "$heldout" "$work/dflash-wide-fp32.json" \
      --max-new "$max_new" > "$work/reference.txt" 2>&1
    say "   exit $?: $(tail -n 1 "$work/reference.txt")"
  fi
fi

if [[ $sections == *t* ]]; then
  # Where a verify step's time goes: a Kineto trace of 2 blocks of the widened pair's loop (4 held-out
  # prompts, batch 1, bf16), every graph launch (draft, verify and extend steps, then plain steps)
  # with its kernels, span and the GPU idle before it, and the kernels of the first few launches.
  for type in ${DRAFTERS:-dflash}; do
    say "== trace, $type: the graph launches of a verify step"
    head -n 4 "$heldout" > "$work/trace-prompts.jsonl"
    "$hs" model spec-decode "runs/widened-$type" --target "$wide" --device cuda --dtype bf16 \
      --prompts "$work/trace-prompts.jsonl" --max-new-tokens 64 --trace "$work/$type.trace.json" --json \
      > "$work/$type-trace-run.json" 2> "$work/$type-trace-run.err"
    say "   spec-decode exit $?"
    {
      "$py" bench/gpu/trace_summary.py "$work/$type.trace.json" --graphs
      for i in 0 1 2 3 4 5 -1; do "$py" bench/gpu/trace_summary.py "$work/$type.trace.json" --graph "$i" --top 14; done
    } > "$out/$type.graphs.txt" 2>&1
    head -n 30 "$out/$type.graphs.txt"
  done
fi

if [[ $sections == *r* ]]; then
  say "== hsring run on the widened target's hidden states (DFlash, 2 layers at 4096)"
  head -n "${ANSWERS:-4000}" runs/real-pycode-14m-answers.jsonl > runs/real-pycode-14m-as-8b-answers.jsonl
  PIPELINE_LIMIT_S=${RUN_LIMIT_S:-420} train real-pycode-14m-as-8b config/real-pycode-14m-as-8b.toml
fi
tar -czf "$out/widened-logs.tgz" -C "$work" --exclude='*.partial*' . 2>/dev/null
say "== done"
