#!/usr/bin/env python3
"""PyTorch eager baseline for hsring-bench-target: the same packed forward (a random-initialised
preset in bf16, tokens of several sequences packed into one batch, layers 0..max(--layers) run and
the --layers outputs kept), written the way transformers writes Qwen3/Llama (separate q/k/v and
gate/up projections, RMSNorm upcasting to fp32), with the best packed attention eager PyTorch
offers: torch.nn.attention.varlen.varlen_attn (the flash varlen kernel), else one causal SDPA per
sequence. Prints "RESULT {json}" last.
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F
from torch import nn

from presets import PRESETS

try:
    from torch.nn.attention.varlen import varlen_attn
except ImportError:
    varlen_attn = None


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Layer(nn.Module):
    def __init__(self, p):
        super().__init__()
        h, d = p["hidden"], p["head_dim"]
        self.p = p
        self.q_proj = nn.Linear(h, p["heads"] * d, bias=False)
        self.k_proj = nn.Linear(h, p["kv_heads"] * d, bias=False)
        self.v_proj = nn.Linear(h, p["kv_heads"] * d, bias=False)
        self.o_proj = nn.Linear(p["heads"] * d, h, bias=False)
        self.q_norm = RMSNorm(d, p["eps"]) if p["qk_norm"] else None
        self.k_norm = RMSNorm(d, p["eps"]) if p["qk_norm"] else None
        self.gate_proj = nn.Linear(h, p["intermediate"], bias=False)
        self.up_proj = nn.Linear(h, p["intermediate"], bias=False)
        self.down_proj = nn.Linear(p["intermediate"], h, bias=False)
        self.input_layernorm = RMSNorm(h, p["eps"])
        self.post_attention_layernorm = RMSNorm(h, p["eps"])

    def forward(self, h, cos, sin, cu, max_len, lengths):
        p, t = self.p, h.shape[0]
        x = self.input_layernorm(h)
        q = self.q_proj(x).view(t, p["heads"], p["head_dim"])
        k = self.k_proj(x).view(t, p["kv_heads"], p["head_dim"])
        v = self.v_proj(x).view(t, p["kv_heads"], p["head_dim"])
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if varlen_attn is not None and q.is_cuda:
            o = varlen_attn(q, k, v, cu, cu, max_len, max_len, window_size=(-1, 0))
        else:
            outs, start = [], 0
            for n in lengths:
                sl = slice(start, start + n)
                outs.append(F.scaled_dot_product_attention(
                    q[sl].transpose(0, 1)[None], k[sl].transpose(0, 1)[None], v[sl].transpose(0, 1)[None],
                    is_causal=True, enable_gqa=True)[0].transpose(0, 1))
                start += n
            o = torch.cat(outs)
        h = h + self.o_proj(o.reshape(t, -1))
        x = self.post_attention_layernorm(h)
        return h + self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="qwen3-8b")
    ap.add_argument("--lengths", required=True, help="comma-separated sequence lengths")
    ap.add_argument("--layers", required=True, help="captured layer ids")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default="cuda", help="cpu: a smoke test of this script, not a measurement")
    args = ap.parse_args()
    p = PRESETS[args.preset]
    lengths = [int(x) for x in args.lengths.split(",")]
    capture = sorted({int(x) for x in args.layers.split(",")})
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    torch.manual_seed(0)
    with torch.device(dev):
        embed = nn.Embedding(p["vocab"], p["hidden"]).to(torch.bfloat16)
        layers = nn.ModuleList([Layer(p) for _ in range(capture[-1] + 1)]).to(torch.bfloat16)
    for param in list(embed.parameters()) + list(layers.parameters()):
        if param.dim() > 1:
            nn.init.normal_(param, std=0.02)
    total = sum(lengths)
    tokens = torch.randint(p["vocab"], (total,), device=dev)
    cu = torch.tensor([0] + list(torch.tensor(lengths).cumsum(0)), dtype=torch.int32, device=dev)
    pos = torch.cat([torch.arange(n) for n in lengths]).to(dev)
    inv = 1.0 / (p["theta"] ** (torch.arange(0, p["head_dim"], 2, dtype=torch.float, device=dev) / p["head_dim"]))
    freqs = pos.float()[:, None] * inv[None]
    emb = torch.cat((freqs, freqs), -1)
    cos, sin = emb.cos().to(torch.bfloat16)[:, None], emb.sin().to(torch.bfloat16)[:, None]

    def forward():
        h = embed(tokens)
        kept = []
        for i, layer in enumerate(layers):
            h = layer(h, cos, sin, cu, max(lengths), lengths)
            if i in capture:
                kept.append(h)
        return kept

    with torch.inference_mode():
        for _ in range(args.warmup):
            forward()
        sync()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            forward()
        sync()
        s = (time.perf_counter() - t0) / args.iters
    attention = "varlen_attn (flash varlen)" if varlen_attn is not None and dev.type == "cuda" else "per-sequence SDPA"
    print(f"eager {args.preset}: {total} tokens, layers 0..{capture[-1]}: {s * 1e3:.1f} ms/batch, {attention}")
    print("RESULT " + json.dumps({"tokens_per_s": total / s, "s_per_batch": s, "attention": attention}))


if __name__ == "__main__":
    main()
