"""The target: transformers' Qwen3ForCausalLM of a preset's shape, trained from scratch on the
corpus's training part (next-token loss on random windows of the documents' token stream), its
validation perplexity measured on the validation part, exported as a HF model directory."""
import json
import math
import os
import time

import numpy as np
import torch

# shape: hidden, layers, heads, kv heads, head dim, MLP width, vocabulary (rope theta 1e4 and
# RMSNorm eps 1e-6 unless given); the run: window
# length (= max_position_embeddings), batch, steps, peak lr, warmup; eval_every in steps.
PRESETS = {
    # tens of millions of parameters, minutes on one H200 (the GPU configs' target)
    "gpu": dict(hidden=512, layers=8, heads=8, kv=4, head_dim=64, inter=1536, vocab=8192,
                seq=512, batch=64, steps=800, lr=1.5e-3, warmup=80, eval_every=100),
    # ~14M parameters, minutes on one GPU: the real target that bin/widen-model embeds exactly into
    # Qwen3-8B's shape (head_dim 128, 4 query heads per KV head, hidden 4096/16 so the norms' scale
    # sqrt(256/4096) = 1/4 is exact in bf16; rope theta 1e6 and eps 16 x 1e-6, so the widened
    # config says Qwen3-8B's 1e6 and 1e-6)
    "gpu-widenable": dict(hidden=256, layers=8, heads=8, kv=2, head_dim=128, inter=1024, vocab=8192,
                          seq=512, batch=64, steps=800, lr=1.5e-3, warmup=80, eval_every=100,
                          theta=1e6, eps=1.6e-5),
    # ~1M parameters, trained on 2 CPU cores (bin/demo's target, checked in under models/)
    "cpu": dict(hidden=128, layers=4, heads=4, kv=2, head_dim=32, inter=384, vocab=2048,
                seq=256, batch=16, steps=3000, lr=3e-3, warmup=100, eval_every=500),
    # ~0.2M parameters, minutes on 2 CPU cores: the smaller real target of the tau test
    "small": dict(hidden=64, layers=2, heads=2, kv=1, head_dim=32, inter=192, vocab=1024,
                  seq=256, batch=16, steps=2000, lr=5e-3, warmup=100, eval_every=500),
    # seconds: what bin/test runs to show the script works end to end
    "test": dict(hidden=64, layers=2, heads=2, kv=1, head_dim=32, inter=128, vocab=384,
                 seq=64, batch=16, steps=150, lr=3e-3, warmup=10, eval_every=50),
}


def qwen3_config(p, eos_id):
    from transformers import Qwen3Config
    return Qwen3Config(vocab_size=p["vocab"], hidden_size=p["hidden"], intermediate_size=p["inter"],
                       num_hidden_layers=p["layers"], num_attention_heads=p["heads"],
                       num_key_value_heads=p["kv"], head_dim=p["head_dim"], hidden_act="silu",
                       max_position_embeddings=p["seq"], rms_norm_eps=p.get("eps", 1e-6), tie_word_embeddings=True,
                       rope_parameters={"rope_type": "default", "rope_theta": p.get("theta", 10000.0)}, attention_bias=False,
                       use_sliding_window=False, bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id)


def stream(docs):
    """The documents' ids joined into one int64 array (each already ends in EOS)."""
    return np.concatenate([np.asarray(d, dtype=np.int64) for d in docs])


class Windows:
    """Random windows of seq + 1 tokens from one stream (documents joined, each ending in EOS)."""

    def __init__(self, docs, seq, seed):
        self.stream = stream(docs)
        self.seq = seq
        self.rng = np.random.default_rng(seed)

    def batch(self, n):
        starts = self.rng.integers(0, len(self.stream) - self.seq - 1, size=n)
        return torch.from_numpy(np.stack([self.stream[s:s + self.seq + 1] for s in starts]))


@torch.no_grad()
def evaluate(model, docs, seq, device, max_tokens):
    """Mean next-token loss over consecutive windows of the stream (at most max_tokens predicted)."""
    tokens = stream(docs)
    n = min((len(tokens) - 1) // seq, max(1, max_tokens // seq))
    x = torch.from_numpy(tokens[:n * seq + 1].copy())
    total, count = 0.0, 0
    model.eval()
    for i in range(0, n, 16):
        rows = min(16, n - i)
        chunk = torch.stack([x[(i + r) * seq:(i + r) * seq + seq + 1] for r in range(rows)]).to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits = model(chunk[:, :-1]).logits.float()
        total += torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), chunk[:, 1:].reshape(-1),
                                                   reduction="sum").item()
        count += chunk[:, 1:].numel()
    model.train()
    return total / count


def unigram_loss(train_docs, val_docs, vocab):
    """The loss of the training part's token frequencies on val (add-one): what a model that learned
    nothing about context would score."""
    counts = np.bincount(stream(train_docs), minlength=vocab) + 1.0
    logp = np.log(counts / counts.sum())
    v = stream(val_docs)
    return float(-logp[v].mean())


def train(parts_ids, preset, out_dir, device, seed, steps=None, log=print):
    from transformers import Qwen3ForCausalLM
    p = dict(PRESETS[preset])
    if steps:
        p["steps"] = steps
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(qwen3_config(p, eos_id=0)).to(device)
    model.train()
    params = sum(t.numel() for t in model.parameters())
    decay = [t for t in model.parameters() if t.dim() >= 2]
    no_decay = [t for t in model.parameters() if t.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=p["lr"], betas=(0.9, 0.95), eps=1e-8, fused=device.type == "cuda")
    windows = Windows(parts_ids["train"], p["seq"], seed)
    val_budget = 400_000 if device.type == "cuda" else 60_000
    curve = []
    log_path = os.path.join(out_dir, "train_log.jsonl")
    t0 = time.time()
    tokens = 0
    with open(log_path, "w") as logf:
        for step in range(1, p["steps"] + 1):
            lr = p["lr"] * min(1.0, step / p["warmup"])
            if step > p["warmup"]:
                frac = (step - p["warmup"]) / max(1, p["steps"] - p["warmup"])
                lr = p["lr"] * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
            for g in opt.param_groups:
                g["lr"] = lr
            batch = windows.batch(p["batch"]).to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                logits = model(batch[:, :-1]).logits
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.size(-1)),
                                                     batch[:, 1:].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            tokens += batch[:, 1:].numel()
            row = None
            if step % 20 == 0 or step == 1 or step == p["steps"]:
                row = {"step": step, "loss": loss.item(), "grad_norm": float(norm), "lr": lr,
                       "tokens": tokens, "seconds": round(time.time() - t0, 2)}
                if not math.isfinite(row["loss"]):
                    raise SystemExit(f"make-target: the loss is {row['loss']} at step {step}: training diverged")
            if step % p["eval_every"] == 0 or step == p["steps"]:
                row = row or {"step": step, "tokens": tokens, "seconds": round(time.time() - t0, 2)}
                row["val_loss"] = evaluate(model, parts_ids["val"], p["seq"], device, val_budget)
                row["val_ppl"] = math.exp(row["val_loss"])
                curve.append({"step": step, "val_ppl": row["val_ppl"]})
                log(f"  step {step}/{p['steps']}: train loss {row.get('loss', float('nan')):.3f}, "
                    f"val perplexity {row['val_ppl']:.2f}, {tokens / (time.time() - t0):,.0f} tokens/s")
            if row:
                logf.write(json.dumps(row) + "\n")
                logf.flush()
    seconds = time.time() - t0
    val_loss = evaluate(model, parts_ids["val"], p["seq"], device, val_budget)
    result = {"preset": preset, "shape": {k: p[k] for k in ("hidden", "layers", "heads", "kv", "head_dim", "inter",
                                                               "vocab", "seq")},
              "parameters": params, "steps": p["steps"], "batch": p["batch"], "lr": p["lr"], "seed": seed,
              "train_tokens_seen": tokens, "seconds": round(seconds, 1), "device": str(device),
              "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "val_loss": val_loss, "val_ppl": math.exp(val_loss),
              "unigram_val_ppl": math.exp(unigram_loss(parts_ids["train"], parts_ids["val"], p["vocab"])),
              "val_curve": curve}
    return model, result


def export(model, out_dir, dtype):
    """config.json + model.safetensors (tied embedding: no lm_head tensor) + generation_config.json."""
    model = model.to("cpu", dtype=dtype)
    model.config.dtype = dtype
    model.save_pretrained(out_dir, safe_serialization=True)
