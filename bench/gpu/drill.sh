#!/usr/bin/env bash
# bench/gpu/drill.sh BUILD_DIR OUT_DIR — `hsring drill` on the GPU machine with the real workers
# (hsring-target / hsring-drafter: LibTorch, CUDA registration of the ring, device copies), for
# README's Reliability section. Run after bin/gpu-build (and bin/hugepages for huge_pages):
#   1. one target GPU + one drafter GPU (on a 1-GPU machine: both on GPU 0, allow_shared_gpus)
#   2. with 3+ GPUs: one target GPU + two data-parallel drafter ranks (NCCL)
# Each drill SIGKILLs and SIGSTOPs random workers and the supervisor, restarts workers and injects
# faults (HSRING_FAULT) until FAULTS (default 200) were dealt, then verifies every run dir.
# MODEL (default preset:tiny; e.g. preset:qwen3-8b: minutes per restart), SAMPLES (400), GAP_MS
# (400: restarts of real workers take seconds) and TIMEOUT_S (1800 per run) tune it.
# OUT_DIR gets summary.txt and each drill's output; the drills' work dirs stay on failure.
set -uo pipefail
build=$(cd "${1:?usage: $0 BUILD_DIR OUT_DIR}" && pwd)
mkdir -p "${2:?usage: $0 BUILD_DIR OUT_DIR}"
out=$(cd "$2" && pwd)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
hs="$build/src/cli/hsring"
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
say() { echo "$*" | tee -a "$out/summary.txt"; }
: > "$out/summary.txt"
say "$(date -u) $(nvidia-smi -L 2>/dev/null | tr '\n' ' ')"
say "$(git -C "$root" log -1 --oneline 2>/dev/null)"
[ "$gpus" -ge 1 ] || { say "drill.sh needs a GPU (found none)"; exit 1; }
shared=false
[ "$gpus" -ge 2 ] || shared=true

# drill NAME DRAFTERS: a config of one target on GPU 0 and DRAFTERS, then hsring drill on it.
drill() {
  local name=$1 drafters=$2
  local cfg="$out/$name.toml"
  cat > "$cfg" <<TOML
[run]
name = "gpudrill-$name"
seed = 7
[topology]
targets = [0]
drafters = $drafters
allow_shared_gpus = $shared
[ring]
slots = 8
slot_tokens = 2048
huge_pages = "auto"
[target]
model = "${MODEL:-preset:tiny}"
[drafter]
num_layers = 1
block_size = 8
[data]
path = "$root/data/demo.jsonl"
epochs = 2
[train]
tokens_per_step = $((2048 * 2 * $(echo "$drafters" | tr -cd ',' | wc -c | awk '{print $1 + 1}')))
checkpoint_every = 10
num_anchors = 64
TOML
  say "== drill $name: target on GPU 0, drafters $drafters, ${FAULTS:-200} faults"
  local t0=$SECONDS
  "$hs" drill "$cfg" --mode train --faults "${FAULTS:-200}" --seed "${SEED:-1}" --samples "${SAMPLES:-400}" \
    --gap-ms "${GAP_MS:-400}" --timeout "${TIMEOUT_S:-1800}" --stall-s 600 --work-dir "$out/$name-work" \
    > "$out/$name.txt" 2>&1
  local rc=$?
  say "   exit $rc after $((SECONDS - t0)) s"
  grep -E '^(drill|samples|ok|FAILED)' "$out/$name.txt" | sed 's/^/   /' | tee -a "$out/summary.txt" > /dev/null
}

if [ "$gpus" -ge 2 ]; then drill 1t1d "[1]"; else drill 1t1d-shared "[0]"; fi
[ "$gpus" -ge 3 ] && drill 1t2d "[1, 2]"
say "done"
