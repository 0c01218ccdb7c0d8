#!/usr/bin/env bash
# bench/gpu/plan_check.sh BUILD_DIR OUT_DIR — `hsring plan --measure --json` for three configs
# (the base, a [train] micro_batch_tokens variant, a [ring] slot_tokens variant) and the
# predicted-vs-measured table of target and drafter peak memory (torch allocated) and rates, for
# BENCHMARKS.md (issue 14: within 10%). On the GPU machine after bin/gpu-build:
#
#   bench/gpu/plan_check.sh build-gpu OUT
#
# Environment (defaults for the GPU machine):
#   PLAN_BASE=config/qwen3-8b-1t1d.toml   the base config
#   PLAN_MBT=8192                         micro_batch_tokens of the second config
#   PLAN_SLOT=65536 PLAN_RING=24GiB       slot_tokens (= tokens_per_step) and [ring] size of the third
#   PLAN_DATA=runs/long.jsonl             data set; made by make_long_data.py when missing
#   PLAN_SAMPLES=300 PLAN_LENGTH=3072     its size
#   PLAN_DEVICE=cuda PLAN_SECONDS=20      --device, --seconds of each measurement
#   PLAN_GPUS=4                           GPUs to split between targets and drafters
#   PLAN_CONFIGS="base mbt slot"          which of the three to run
# On the CPU (a check of the path, not of the numbers), e.g.:
#   PLAN_BASE=config/demo.toml PLAN_DATA=data/demo.jsonl PLAN_DEVICE=cpu PLAN_MBT=256 PLAN_SLOT=2048 \
#     PLAN_RING=64MiB PLAN_SECONDS=2 bench/gpu/plan_check.sh build OUT
# OUT_DIR gets NAME.toml, NAME.json (the plan), NAME.log (stderr) per config and plan_check.md.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
session_init "$@"
export HSRING_BIN_DIR="$build/bench"   # hsring-bench of this build

base=${PLAN_BASE:-config/qwen3-8b-1t1d.toml}
data=${PLAN_DATA:-runs/long.jsonl}
if [ ! -f "$data" ]; then
  mkdir -p "$(dirname "$data")"
  "$py" bench/gpu/make_long_data.py "$data" --samples "${PLAN_SAMPLES:-300}" --length "${PLAN_LENGTH:-3072}"
fi
data=$(cd "$(dirname "$data")" && pwd)/$(basename "$data")

# set_key FILE TABLE KEY VALUE: replace the key in its table, or add it right after the header.
set_key() {
  local f=$1 table=$2 key=$3 value=$4
  "$py" - "$f" "$table" "$key" "$value" <<'EOF'
import re, sys
path, table, key, value = sys.argv[1:]
lines = open(path).read().split("\n")
cur, header = None, None
for i, l in enumerate(lines):
    m = re.match(r"^\s*\[([^\]]+)\]\s*$", l)
    if m:
        cur = m.group(1).strip()
        if cur == table:
            header = i
        continue
    if cur == table and re.match(rf"^\s*{re.escape(key)}\s*=", l):
        lines[i] = f"{key} = {value}"
        break
else:
    if header is None:
        lines += ["", f"[{table}]"]
        header = len(lines) - 1
    lines.insert(header + 1, f"{key} = {value}")
open(path, "w").write("\n".join(lines))
EOF
}

make_config() {
  local name=$1 cfg="$out/$1.toml"
  cp "$base" "$cfg"
  set_key "$cfg" data path "\"$data\""
  set_key "$cfg" run name "\"plan-$name\""
  echo "$cfg"
}

c1=$(make_config base)
c2=$(make_config mbt)
set_key "$c2" train micro_batch_tokens "${PLAN_MBT:-8192}"
c3=$(make_config slot)
set_key "$c3" ring slot_tokens "${PLAN_SLOT:-65536}"
set_key "$c3" train tokens_per_step "${PLAN_SLOT:-65536}"
set_key "$c3" ring size "\"${PLAN_RING:-24GiB}\""

{
  echo "# hsring plan --measure: $(date -u)"
  command -v nvidia-smi > /dev/null && nvidia-smi -L
  git log -1 --oneline 2>/dev/null
} > "$out/plan_check.md"
status=0
names=${PLAN_CONFIGS:-base mbt slot}
for name in $names; do
  cfg="$out/$name.toml"
  echo "== $name: $hs plan $cfg --measure --json" >&2
  "$hs" plan "$cfg" --measure --json --seconds "${PLAN_SECONDS:-20}" --device "${PLAN_DEVICE:-cuda}" \
    --gpus "${PLAN_GPUS:-4}" > "$out/$name.json" 2> "$out/$name.log"
  rc=$?
  echo "   exit $rc" >&2
  # 0 fits, 1 does not fit (still measured: the JSON says which); anything else is a failure.
  [ $rc -le 1 ] || status=1
done

"$py" - "$out" $names >> "$out/plan_check.md" <<'EOF'
import json, os, sys
out, names = sys.argv[1], sys.argv[2:]
gib = lambda b: b / 2**30
def pct(pred, meas):
    return f"{100 * (pred - meas) / meas:+.1f}%" if meas else "n/a"
rows = []
for n in names:
    try:
        j = json.load(open(os.path.join(out, n + ".json")))
    except Exception as e:
        rows.append(f"| {n} | failed: {e} |")
        continue
    m = j.get("measure", {})
    t, d = m.get("target", {}), m.get("drafter", {})
    w = j["workload"]
    rec = m.get("recommended") or {}
    split = f"{rec.get('targets')}+{rec.get('drafters')} ({rec.get('samples_per_s', 0):.2f} samples/s)" if rec else "n/a"
    err = "; ".join(x["bench"]["error"] for x in (t, d) if x.get("bench") and not x["bench"].get("ok"))
    rows.append(
        f"| {n} | slot {w['target_batch_tokens']}, micro-batch {w['micro_batch_tokens']} "
        f"(worst {w['worst_micro_batch']['samples']} samples, {w['worst_micro_batch']['rows']} rows) "
        f"| {gib(t.get('predicted_allocated_bytes', 0)):.2f} | {gib(t.get('measured_peak_allocated_bytes', 0)):.2f} "
        f"| {pct(t.get('predicted_allocated_bytes', 0), t.get('measured_peak_allocated_bytes', 0))} "
        f"| {gib(d.get('predicted_allocated_bytes', 0)):.2f} | {gib(d.get('measured_peak_allocated_bytes', 0)):.2f} "
        f"| {pct(d.get('predicted_allocated_bytes', 0), d.get('measured_peak_allocated_bytes', 0))} "
        f"| {t.get('tokens_per_s', 0):.0f} | {d.get('tokens_per_s', 0):.0f} | {d.get('samples_per_s', 0):.2f} "
        f"| {split} |" + (f" {err}" if err else ""))
print()
print("| config | shapes | target pred GiB | meas GiB | diff | drafter pred GiB | meas GiB | diff "
      "| target tok/s | drafter tok/s | drafter samples/s | recommended split |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
print("\n".join(rows))
print()
print("Peaks are torch's allocated peaks (what the plan predicts before its CUDA-context and slack parts).")
for n in names:
    try:
        j = json.load(open(os.path.join(out, n + ".json")))
        ph = j["measure"]["drafter"]["bench"]["result"].get("phases", [])
        res = j["measure"]["drafter"]["bench"]["result"]
    except Exception:
        continue
    print(f"\n{n}: drafter after a step {gib(res.get('static_allocated_bytes', 0)):.2f} GiB, peak reserved "
          f"{gib(res.get('peak_reserved_bytes', 0)):.2f} GiB; first slot by micro-batch (GiB):")
    for p in ph:
        print(f"  mb {p['micro_batch']}: {p['tokens']} tokens, {p['blocks']} blocks: before {gib(p['before_bytes']):.2f}, "
              f"forward peak {gib(p['forward_peak_bytes']):.2f}, after forward {gib(p['after_forward_bytes']):.2f}, "
              f"backward peak {gib(p['backward_peak_bytes']):.2f}")
EOF
cat "$out/plan_check.md"
exit $status
