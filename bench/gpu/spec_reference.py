#!/usr/bin/env python3
"""bench/gpu/spec_reference.py EXPORT TARGET PROMPTS HSRING_JSON --max-new N [--device cuda]

The same drafter export through the public DFlash loop (tests/model/dflash_reference_loop.py:
z-lab's dflash_generate, greedy, fp32, transformers' target) as `hsring model spec-decode --dtype
fp32 --json` ran it (HSRING_JSON): per prompt, the acceptance lengths and output tokens must be
equal. Prints one line per prompt that differs and a summary; exit 1 if any differs."""
import argparse
import json
import os
import sys

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(root, "tests", "model"))
from dflash_reference_loop import dflash_generate_greedy, load_drafter, stop_tokens_of  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("export")
ap.add_argument("target")
ap.add_argument("prompts")
ap.add_argument("hsring_json")
ap.add_argument("--max-new", type=int, required=True)
ap.add_argument("--device", default="cuda")
a = ap.parse_args()
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
target = AutoModelForCausalLM.from_pretrained(a.target, dtype=torch.float32, attn_implementation="eager").eval().to(a.device)
drafter, dcfg = load_drafter(a.export, a.device)
stops = stop_tokens_of(target)
mine = json.load(open(a.hsring_json))
same_lengths = same_tokens = 0
total = steps = 0
with open(a.prompts) as f:
    prompts = [json.loads(line)["input_ids"] for line in f if line.strip()]
prompts = prompts[:len(mine["prompts"])]
for i, p in enumerate(prompts):
    tokens, lengths = dflash_generate_greedy(target, drafter, dcfg, p, a.max_new, stops)
    got = mine["prompts"][i]
    same_lengths += got["acceptance_lengths"] == lengths
    same_tokens += got["output_ids"] == tokens
    if got["acceptance_lengths"] != lengths or got["output_ids"] != tokens:
        print(f"prompt {i}: hsring lengths {got['acceptance_lengths']} vs reference {lengths}; tokens "
              f"{'equal' if got['output_ids'] == tokens else 'differ'}")
    total, steps = total + sum(lengths), steps + len(lengths)
print(f"reference loop (fp32, {a.device}, stop tokens {list(stops)}) on {len(prompts)} prompts x {a.max_new} new tokens: tau {total / steps:.4f} "
      f"vs hsring {mine['tau']:.4f}; acceptance lengths equal on {same_lengths}/{len(prompts)} prompts, "
      f"output tokens on {same_tokens}/{len(prompts)}")
sys.exit(0 if same_lengths == same_tokens == len(prompts) else 1)
