#!/usr/bin/env python3
"""bench/gpu/widen_check.py SMALL_DIR WIDE_DIR ANSWERS.jsonl [--samples 64] [--max-new 128] [--device cuda]

A widened target (bin/widen-model) against the small one it was made from, both through
transformers in fp32 (TF32 off): the logits of every position of each answered sample (prompt +
answer: the part before the first loss_mask 1 is the prompt) over the small vocabulary, their max
abs difference, and that no padded id's logit is above the real maximum; then greedy generate of
every prompt (one left-padded batch per model) and whether the new tokens are equal, prompt by
prompt. Prints a summary line; exit 1 if the logits differ by more than 1e-4 or any output differs."""
import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("small")
ap.add_argument("wide")
ap.add_argument("answers")
ap.add_argument("--samples", type=int, default=64)
ap.add_argument("--max-new", type=int, default=128)
ap.add_argument("--device", default="cuda")
a = ap.parse_args()
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

rows = [json.loads(line) for line in open(a.answers) if line.strip()][: a.samples]
samples = [r["input_ids"] for r in rows]
prompts = [r["input_ids"][: r["loss_mask"].index(1)] if 1 in r["loss_mask"] else r["input_ids"] for r in rows]


def load(d):
    return AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval().to(a.device)


@torch.no_grad()
def logits_of(model):
    return [model(torch.tensor([s], device=a.device)).logits[0].cpu() for s in samples]


@torch.no_grad()
def greedy(model, pad_id):
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts], device=a.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=a.device)
    out = model.generate(ids, attention_mask=mask, max_new_tokens=a.max_new, do_sample=False, pad_token_id=pad_id)
    return out[:, width:].tolist()


t0 = time.time()
small = load(a.small)
pad = small.generation_config.pad_token_id or 0
small_logits, small_out = logits_of(small), greedy(small, pad)
del small
torch.cuda.empty_cache()
wide = load(a.wide)
params = sum(p.numel() for p in wide.parameters())
wide_logits, wide_out = logits_of(wide), greedy(wide, pad)
worst, above = 0.0, 0
for s, w in zip(small_logits, wide_logits):
    v = s.shape[-1]
    worst = max(worst, (s - w[:, :v]).abs().max().item())
    above += int((w[:, v:].amax(-1) > w[:, :v].amax(-1)).sum())
same = sum(x == y for x, y in zip(small_out, wide_out))
tokens = sum(len(s) for s in samples)
print(f"widened target {a.wide} ({params / 1e9:.2f}B parameters) vs {a.small}, transformers fp32 on {a.device}: "
      f"logits of {tokens} positions in {len(samples)} samples, max |diff| {worst:.3g}; positions where a padded id "
      f"is above the real maximum: {above}; greedy outputs ({a.max_new} new tokens, one left-padded batch) equal on "
      f"{same}/{len(prompts)} prompts ({time.time() - t0:.0f} s)")
raise SystemExit(0 if worst <= 1e-4 and above == 0 and same == len(prompts) else 1)
