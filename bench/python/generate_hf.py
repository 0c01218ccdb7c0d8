"""Batched greedy generation with transformers, the baseline of `hsring-model generate` (issue 21).

  generate_hf.py make-model DIR --shape qwen3-8b|qwen3-1.7b [--seed S]
      a HF Qwen3 directory of that shape with random bf16 weights (written on the GPU), no
      eos_token_id (both engines then generate exactly max_new_tokens)
  generate_hf.py make-prompts FILE --count N --min-len A --max-len B --vocab V [--seed S]
      JSONL prompts of random tokens (input_ids only), lengths uniform in [A, B]
  generate_hf.py generate DIR --prompts FILE --batch B --max-new-tokens N [--json]
      transformers' generate, greedy, bf16, sdpa attention, B prompts per call (left padded, in file
      order, as they come); one warm-up call first (not timed). Prints tokens/s of new tokens and
      each prompt's output ids (--json: one object).
  generate_hf.py check DIR --prompts FILE --outputs HSRING.json [--count N]
      teacher-forced check of `hsring-model generate --json`'s greedy tokens: transformers runs each
      prompt + hsring's output in one forward (bf16) and counts the new tokens that are its argmax,
      and for the others how far below the max their logit is (bf16 near-ties); the same for
      transformers' own generate output when --hf-outputs is given (its KV-cached decode against
      its full forward: the noise floor of bf16)."""
import argparse
import json
import random
import sys
import time

import torch

SHAPES = {
    # name: hidden, layers, heads, kv heads, head dim, intermediate, vocab
    "qwen3-8b": (4096, 36, 32, 8, 128, 12288, 151936),
    "qwen3-1.7b": (2048, 28, 16, 8, 128, 6144, 151936),
}


def make_model(a):
    from transformers import Qwen3Config, Qwen3ForCausalLM
    h, n, heads, kv, d, inter, vocab = SHAPES[a.shape]
    cfg = Qwen3Config(hidden_size=h, num_hidden_layers=n, num_attention_heads=heads, num_key_value_heads=kv,
                      head_dim=d, intermediate_size=inter, vocab_size=vocab, max_position_embeddings=40960,
                      rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=False, torch_dtype="bfloat16",
                      eos_token_id=None, bos_token_id=None)
    torch.manual_seed(a.seed)
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    # transformers initialises with std 0.02 everywhere; norms stay ones. Sharpen the LM head a
    # little so greedy tokens are not near ties everywhere (bf16 differences then flip fewer).
    with torch.no_grad():
        model.lm_head.weight.mul_(4.0)
    model.generation_config.eos_token_id = None
    model.save_pretrained(a.dir, safe_serialization=True)
    print(f"wrote {a.dir}: {a.shape}, {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters")


def make_prompts(a):
    rng = random.Random(a.seed)
    with open(a.file, "w") as f:
        for _ in range(a.count):
            n = rng.randint(a.min_len, a.max_len)
            f.write(json.dumps({"input_ids": [rng.randrange(16, a.vocab) for _ in range(n)]}) + "\n")


@torch.no_grad()
def generate(a):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(a.dir, dtype=torch.bfloat16, attn_implementation="sdpa").cuda().eval()
    with open(a.prompts) as f:
        prompts = [json.loads(line)["input_ids"] for line in f]

    def batch_call(ps):
        n = max(len(p) for p in ps)
        ids = torch.tensor([[0] * (n - len(p)) + p for p in ps], device="cuda")
        mask = torch.tensor([[0] * (n - len(p)) + [1] * len(p) for p in ps], device="cuda")
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=a.max_new_tokens,
                             min_new_tokens=a.max_new_tokens, do_sample=False, pad_token_id=0,
                             eos_token_id=None)
        return out[:, n:].tolist()

    batch_call(prompts[: a.batch])  # warm-up
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    outputs = []
    for i in range(0, len(prompts), a.batch):
        outputs += batch_call(prompts[i: i + a.batch])
    torch.cuda.synchronize()
    s = time.perf_counter() - t0
    new = sum(len(o) for o in outputs)
    res = {"tokens_per_s": new / s, "seconds": s, "new_tokens": new, "prompts": len(prompts), "batch": a.batch,
           "output_ids": outputs}
    if a.json:
        print(json.dumps(res))
    else:
        print(f"transformers generate: {new} new tokens in {s:.2f} s = {new / s:.0f} tokens/s (batch {a.batch})")


@torch.no_grad()
def check(a):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(a.dir, dtype=torch.bfloat16, attn_implementation="sdpa").cuda().eval()
    with open(a.prompts) as f:
        prompts = [json.loads(line)["input_ids"] for line in f][: a.count]
    runs = {"hsring": [o["output_ids"] for o in json.load(open(a.outputs))["outputs"]]}
    if a.hf_outputs:
        runs["transformers"] = json.load(open(a.hf_outputs))["output_ids"]
    for name, outs in runs.items():
        agree, total, gaps = 0, 0, []
        for p, o in zip(prompts, outs):
            ids = torch.tensor([p + o], device="cuda")
            logits = model(ids).logits[0, len(p) - 1: len(p) - 1 + len(o)].float()
            top = logits.max(-1)
            mine = logits.gather(-1, torch.tensor(o, device="cuda")[:, None])[:, 0]
            hit = (mine == top.values)
            agree += int(hit.sum())
            total += len(o)
            gaps += ((top.values - mine) / top.values.abs().clamp_min(1e-6))[~hit].tolist()
        gaps.sort()
        print(f"{name}: {agree} of {total} greedy tokens ({100 * agree / total:.1f}%) are transformers' full-forward "
              f"argmax; the others' logits are below the max by a median {100 * (gaps[len(gaps) // 2] if gaps else 0):.3f}%"
              f", at most {100 * (gaps[-1] if gaps else 0):.3f}% ({len(gaps)} tokens)")


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make-model")
    m.add_argument("dir")
    m.add_argument("--shape", default="qwen3-8b", choices=sorted(SHAPES))
    m.add_argument("--seed", type=int, default=0)
    q = sub.add_parser("make-prompts")
    q.add_argument("file")
    q.add_argument("--count", type=int, default=64)
    q.add_argument("--min-len", type=int, default=128)
    q.add_argument("--max-len", type=int, default=512)
    q.add_argument("--vocab", type=int, default=151936)
    q.add_argument("--seed", type=int, default=0)
    g = sub.add_parser("generate")
    g.add_argument("dir")
    g.add_argument("--prompts", required=True)
    g.add_argument("--batch", type=int, default=16)
    g.add_argument("--max-new-tokens", type=int, default=128)
    g.add_argument("--json", action="store_true")
    c = sub.add_parser("check")
    c.add_argument("dir")
    c.add_argument("--prompts", required=True)
    c.add_argument("--outputs", required=True)
    c.add_argument("--hf-outputs")
    c.add_argument("--count", type=int, default=16)
    a = p.parse_args()
    {"make-model": make_model, "make-prompts": make_prompts, "generate": generate, "check": check}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
