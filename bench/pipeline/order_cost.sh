#!/usr/bin/env bash
# bench/pipeline/order_cost.sh [BUILD_DIR] [OLD_BUILD_DIR] — what the fixed order of training
# (invariant 10, docs/architecture.md: the drafter trains plan slots in plan order, a slot written early waits
# in the ring) costs in throughput when the targets are unbalanced, as a ratio to the drafter's
# own limit measured in the same run: synthetic-mode pipelines (no models) where the drafter
# spends STEP_MS per slot and the two targets TARGET_MS (one fast, one slow) per slot.
#
#   limit  = slots / (STEP_MS per slot): the drafter never waits
#   ratio  = limit's time / the run's time in training (first to last step)
#   wait   = the drafter's data wait, % of its step time (metrics.jsonl data_wait_ms / step_ms)
#
# With OLD_BUILD_DIR (a build of a tree before the fixed order, where the drafter took the oldest
# READY slot, whatever it held), the same runs with it, for comparison.
# CPU only; each run takes about SAMPLES x 2 x STEP_MS / 4 ms.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
old=${2:-}
[ -n "$old" ] && old=$(cd "$old" && pwd)
work=$(mktemp -d /tmp/hsring-order-XXXXXX)
trap 'rm -rf "$work"' EXIT
samples=${SAMPLES:-400}
py=${HSRING_PYTHON:-$root/.venv/bin/python}
"$py" - "$work/data.jsonl" "$samples" <<'PY'
import json, random, sys
r = random.Random(3)
with open(sys.argv[1], "w") as f:
    for _ in range(int(sys.argv[2])):
        n = r.randint(60, 120)
        f.write(json.dumps({"input_ids": [r.randint(0, 500) for _ in range(n)]}) + "\n")
PY
run() {  # BIN_DIR NAME SLOTS STEP_MS TARGET_MS
  local bin=$1 name=$2 slots=$3 step=$4 tms=$5 dir="$work/$2"
  cat > "$work/$name.toml" <<TOML
[run]
name = "ord$$$name"
run_dir = "$dir"
mode = "synthetic"
seed = 5
[topology]
targets = ["cpu", "cpu"]
drafters = ["cpu"]
[ring]
slots = $slots
slot_tokens = 256
huge_pages = "off"
[target]
model = "preset:tiny"
[drafter]
num_layers = 1
inflight_slots = 2
[data]
path = "$work/data.jsonl"
epochs = 2
[train]
checkpoint_every = 100000
TOML
  HSRING_SYNTH_STEP_MS=$step HSRING_SYNTH_WRITE_MS=$tms "$bin/src/cli/hsring" run "$work/$name.toml" --fresh \
    > "$work/$name.log" 2>&1 || { echo "$name: hsring run failed: $(tail -n 3 "$work/$name.log")"; return; }
  "$py" - "$dir/metrics.jsonl" "$step" "$name" "$slots" "$tms" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if "step_ms" in r]
step = float(sys.argv[2])
span = (rows[-1]["time"] - rows[0]["time"]) * 1000 + rows[0]["step_ms"]
limit = len(rows) * step
wait = sum(r["data_wait_ms"] for r in rows) / sum(r["step_ms"] for r in rows)
print(f"  {sys.argv[3]:<28} ring {sys.argv[4]:>2} slots, targets {sys.argv[5]:>6} ms/slot: {len(rows)} steps in "
      f"{span / 1000:.2f} s, limit {limit / 1000:.2f} s: ratio {limit / span:.3f}, data wait {100 * wait:.2f}%")
PY
}
echo "order_cost: $(date -u), $(nproc) cores, $samples samples x 2 epochs, drafter 20 ms/slot"
for slots in 4 8; do
  for tms in "5,5" "5,40" "5,120"; do
    run "$build" "fixed-s${slots}-t${tms/,/-}" "$slots" 20 "$tms"
    [ -n "$old" ] && run "$old" "oldest-s${slots}-t${tms/,/-}" "$slots" 20 "$tms"
  done
done
