#!/usr/bin/env bash
# bench/gpu/real_target.sh BUILD_DIR OUT_DIR — a drafter that speeds up a real model, on one GPU.
# SECTIONS (default "bcmgps"), each after the ones it needs:
#   b  build hsring's programs into BUILD_DIR (meson + ninja, as bin/gpu-build; carry ".carry")
#   c  bin/make-target --preset cpu (-> OUT/pycode-1m.tgz: bin/demo's target, models/pycode-1m)
#   m  bin/make-target --preset gpu (models/pycode-25m, PROMPTS (40,000) + 64 prompts, --split SPLIT (70,3,24,3))
#      both from the corpus .debs in .carry/debs (bin/make-target downloads them where apt works)
#   g  `hsring data generate`: the target's greedy answers to the prompts and the held-out prompts
#   p  `hsring run config/real-pycode.toml`: the drafter trains on the target's hidden states,
#      tau of checkpoints during training and of the export; ledger verify; metrics -> OUT
#   s  `hsring model spec-decode` of the export at batch 1: bf16 (tau, tokens/s both ways, speedup),
#      bf16 --eager (the same without the decode engine's CUDA graphs)
#      and fp32 against the public DFlash loop (bench/gpu/spec_reference.py)
# DRAFTER=eagle3: sections p and s with config/real-pycode-eagle3.toml (an EAGLE-3 drafter on the same
# target and answers; spec-decode drafts a chain of 5; no public DFlash loop for it).
# PIPELINE_LIMIT_S (420) bounds the run; EPOCHS overrides the config's; GEN_SAMPLES answers only the first N prompts; SPEC_MAX_NEW
# (128) new tokens per prompt; SPEC_MODES (bf16 bf16-eager fp32) the spec-decode runs of section s; FP32_BEFORE_S skips
# the fp32 and reference runs after that second; WORK (/tmp/real-target-work) the logs' folder (one per concurrent run).
set -uo pipefail
build=${1:?usage: $0 BUILD_DIR OUT_DIR}
sections=${SECTIONS:-bcmgps}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 1
for d in /opt/torch/.venv/bin ${CUDA_HOME:-/usr/local/cuda}/bin; do [ -d "$d" ] && export PATH="$d:$PATH"; done
if [[ $sections == *b* ]]; then
  if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" --buildtype=release -Dtorch_prefix="$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))')" \
      -Dcuda=enabled -Dtorch_cuda=enabled -Dkernels=enabled -Dgpu_tests=disabled > /tmp/meson-setup.log 2>&1 ||
      { tail -n 30 /tmp/meson-setup.log; exit 1; }
  fi
  ninja -C "$build" src/cli/hsring src/worker/hsring-target src/worker/hsring-drafter src/model/hsring-model \
    > /tmp/ninja.log 2>&1 || { tail -n 40 /tmp/ninja.log; exit 1; }
fi
[[ $sections == b ]] && exit 0
mkdir -p "$build"
source "$root/bench/gpu/lib.sh"
session_init "$build" "${2:?usage: $0 BUILD_DIR OUT_DIR}"
work=${WORK:-/tmp/real-target-work}   # logs stay on the machine: OUT brings back at most 8 files
mkdir -p "$work"
model=models/pycode-25m
name=real-pycode${DRAFTER:+-$DRAFTER}   # config/$name.toml, runs/$name
[ "${DRAFTER:-dflash}" = dflash ] && name=real-pycode
[ -f "config/$name.toml" ] || { echo "real_target.sh: DRAFTER=$DRAFTER: no config/$name.toml" >&2; exit 1; }

if [[ $sections == *c* ]]; then
  say "== bin/make-target --preset cpu (bin/demo's target, trained here on the GPU)"
  rm -rf runs/pycode-1m
  HSRING_PYTHON=$py bin/make-target --preset cpu --out runs/pycode-1m --source .carry/debs --device cuda \
    --prompts 600 --eval-prompts 60 --prompt-len 32:96 2>&1 | tee "$work/make_cpu.txt" | grep -E "perplexity|ready|corpus|tokenizer" | tee -a "$out/summary.txt"
  tar -czf "$out/pycode-1m.tgz" -C runs pycode-1m
fi
if [[ $sections == *m* ]]; then
  say "== bin/make-target --preset gpu"
  rm -rf "$model"
  HSRING_PYTHON=$py bin/make-target --preset gpu --out "$model" --source .carry/debs --device cuda \
    --split "${SPLIT:-70,3,24,3}" --prompts "${PROMPTS:-40000}" --eval-prompts 64 --prompt-len 64:192 2>&1 | tee "$work/make_gpu.txt" | grep -vE "Writing|^\s*$" | tee -a "$out/summary.txt"
  cp "$model/make_target.json" "$out/pycode-25m.make_target.json"
  cp "$model/train_log.jsonl" "$out/pycode-25m.train_log.jsonl"
fi

if [[ $sections == *g* ]]; then
  say "== hsring data generate: the target's answers (config/real-pycode.toml [generate])"
  for part in prompts:answers eval:eval; do
    t0=$SECONDS
    "$hs" data generate config/real-pycode.toml --prompts "$model/data/${part%%:*}.jsonl" ${GEN_SAMPLES:+--samples $GEN_SAMPLES} \
      --out "runs/real-pycode-${part##*:}.jsonl" --device cuda > "$work/gen_${part##*:}.txt" 2>&1
    say "   ${part%%:*}: exit $? in $((SECONDS - t0)) s: $(tail -n 1 "$work/gen_${part##*:}.txt")"
  done
fi

if [[ $sections == *p* ]]; then
  cfg=config/$name.toml
  if [ -n "${EPOCHS:-}" ]; then  # a copy beside it: its relative paths stay valid
    cfg=config/$name-epochs.toml
    sed "s/^epochs = .*/epochs = $EPOCHS/" "config/$name.toml" > "$cfg"
  fi
  say "== hsring run $cfg ${EPOCHS:+(epochs = $EPOCHS)}"
  run_dir=runs/$name
  rm -rf "$run_dir"
  t0=$SECONDS
  "$hs" run "$cfg" --fresh > "$work/run.log" 2>&1 &
  sup=$!
  while kill -0 $sup 2>/dev/null; do
    sleep 5
    if [ $((SECONDS - t0)) -ge "${PIPELINE_LIMIT_S:-420}" ]; then
      say "   time limit: hsring stop"
      "$hs" stop --run-dir "$run_dir" >> "$work/run.log" 2>&1
      break
    fi
  done
  wait $sup
  say "   hsring run exit $? after $((SECONDS - t0)) s: $(grep -E 'complete|stopped' "$work/run.log" | tail -n 1)"
  "$hs" ledger verify "$run_dir" > "$work/verify.txt" 2>&1
  say "   ledger verify exit $?: $(tail -n 1 "$work/verify.txt")"
  cp "$run_dir/metrics.jsonl" "$out/$name.metrics.jsonl"
  tail -n 8 "$work/run.log" | sed 's/^/   | /' | tee -a "$out/summary.txt"
  "$py" - "$run_dir/metrics.jsonl" <<'PY' | tee -a "$out/summary.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steps = [r for r in rows if "loss" in r and "step" in r]
if steps:
    k = max(1, len(steps) // 10)
    f, l = steps[:k], steps[-k:]
    avg = lambda rs, key: sum(r[key] for r in rs) / len(rs)
    print(f"   {len(steps)} steps; loss {avg(f, 'loss'):.3f} -> {avg(l, 'loss'):.3f}; acceptance estimate "
          f"{avg(f, 'accept_len'):.3f} -> {avg(l, 'accept_len'):.3f}")
for r in rows:
    if "spec" in r:
        s = r["spec"]
        print(f"   tau at step {r['step']}: {s['tau']:.3f} ({s['prompts']} prompts{', the export' if s.get('final') else ''}; "
              f"{s['verify_steps']} verify steps in {s.get('seconds', r.get('seconds', 0)):.2f} s)")
    if "eval" in r:
        print(f"   held-out after step {r['step']}: loss {r['eval']['loss']:.3f}, acceptance estimate {r['eval']['accept_len']:.3f}")
PY
fi

if [[ $sections == *s* ]] && [ -f "runs/$name/drafter/config.json" ]; then
  export_dir=runs/$name/drafter
  max_new=${SPEC_MAX_NEW:-128}
  for mode in ${SPEC_MODES:-bf16 bf16-eager fp32}; do
    dtype=${mode%-eager}
    flag=()
    [ $mode = bf16-eager ] && flag=(--eager)   # the same, decode and verify steps op by op (no CUDA graphs)
    [ $dtype = fp32 ] && [ $SECONDS -gt "${FP32_BEFORE_S:-100000}" ] && { say "   fp32 and the reference loop skipped: no time left"; break; }
    say "== hsring model spec-decode ($mode, batch 1, $max_new new tokens, $model/data/eval.jsonl)"
    "$hs" model spec-decode "$export_dir" --target "$model" --device cuda --dtype $dtype "${flag[@]}" \
      --prompts "$model/data/eval.jsonl" --max-new-tokens "$max_new" --json > "$out/spec_$mode.json" 2> "$work/spec_$mode.err"
    say "   exit $?: $(tail -n 2 "$work/spec_$mode.err" | tr '\n' ' ')"
    "$py" - "$out/spec_$mode.json" <<'PY' | tee -a "$out/summary.txt"
import json, sys
j = json.load(open(sys.argv[1]))
lossless = sum(p["lossless"] for p in j["prompts"])
steps = j["verify_steps"]
print(f"   tau {j['tau']:.3f} over {steps} verify steps, {j['new_tokens']} new tokens, lossless {lossless}/{len(j['prompts'])}; "
      f"speculative {j['spec_tokens_per_s']:.1f} tokens/s vs plain {j['target_tokens_per_s']:.1f}: speedup {j['speedup']:.2f}x; "
      f"per verify step draft {1000 * j['draft_seconds'] / steps:.2f} ms, verify {1000 * j['verify_seconds'] / steps:.2f} ms, "
      f"plain {1000 / j['target_tokens_per_s']:.2f} ms per token; graphs: verify {j['decode_graphs']}, draft {j.get('draft_graphs')}")
PY
  done
  if [ $name = real-pycode ] && [ -s "$out/spec_fp32.json" ]; then
    say "== the same export through the public DFlash loop (fp32, transformers on the GPU)"
    "$py" bench/gpu/spec_reference.py "$export_dir" "$model" "$model/data/eval.jsonl" "$out/spec_fp32.json" \
      --max-new "$max_new" > "$work/reference.txt" 2>&1
    say "   exit $?"
    tail -n 12 "$work/reference.txt" | tee -a "$out/summary.txt"
  fi
fi
