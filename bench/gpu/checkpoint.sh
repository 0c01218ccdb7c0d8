#!/usr/bin/env bash
# bench/gpu/checkpoint.sh BUILD_DIR OUT_DIR — how long a checkpoint holds training (issue 13), in
# two pipeline runs on the GPU machine after bin/gpu-build: a Qwen3-8B-shaped target and a 5-layer
# DFlash drafter at Qwen3-8B dims (fp32 master weights + AdamW state: ~12.6 GB per checkpoint),
# a checkpoint every CKPT_EVERY (3) steps of 65,536 tokens:
#   ck_sync  [train] checkpoint_background = false: the step waits until the checkpoint is on disk
#   ck_bg    checkpoint_background = true (the default): the step waits for the copy to host memory
# ck_bg's drafter is SIGKILLed after KILL_AFTER_S (60) s: it resumes from a checkpoint written
# from the host copies (optimizer state loaded back onto the GPU).
# Each is summarised by summarize_run.py (checkpoint pauses from metrics.jsonl's
# checkpoint_pause_ms, write times from the drafter's log) and its ledger verified.
# One GPU: target and drafter share GPU 0 (allow_shared_gpus); two or more: drafter on GPU 1.
# SAMPLES (240) x 3,072 tokens; PIPELINE_LIMIT_S (200) per run; MODES ("sync bg") the runs to make
# EPOCHS (1) of them (issue 35's measurement: MODES=bg SAMPLES=300 CKPT_EVERY=6 EPOCHS=4: 60 steps).
# TOKENS (65536) sets slot_tokens and tokens_per_step: target and drafter at 65,536 need an H200's
# memory when they share one GPU. 32,768 would checkpoint the same state (weights and AdamW moments
# do not depend on the step's tokens) at twice the steps, but on an H100 (2026-12-06) the drafter
# ran out of memory at its second step beside the target (drafter 54.7 GiB + target 22.7 GiB of
# 79.2): there, give the drafter its own GPU or use fewer tokens.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
session_init "$@"
gpus=$(nvidia-smi -L | wc -l)
drafter=1
[ "$gpus" -ge 2 ] || drafter=0
[ -f runs/long.jsonl ] || "$py" bench/gpu/make_long_data.py runs/long.jsonl --samples "${SAMPLES:-240}" --length 3072
every=${CKPT_EVERY:-3}
for mode in ${MODES:-sync bg}; do
  bg=false
  [ $mode = bg ] && bg=true
  kill=""; [ $mode = bg ] && kill=drafter.0   # the restart loads a checkpoint written from host copies
  pipeline "ck_$mode" config/qwen3-8b-3t1d-squeezed.toml "$kill" "${KILL_AFTER_S:-60}" \
    "s/^targets = .*/targets = [0]/" "s/^drafters = .*/drafters = [$drafter]/" \
    "s/^checkpoint_every = .*/checkpoint_every = $every\ncheckpoint_background = $bg/" "s/^epochs = .*/epochs = ${EPOCHS:-1}/" \
    "s/^slot_tokens = .*/slot_tokens = ${TOKENS:-65536}/" "s/^tokens_per_step = .*/tokens_per_step = ${TOKENS:-65536}/"
done
tar -czf "$out/checkpoint.tar.gz" -C "$out" work
rm -rf "$work"
say "== done"
