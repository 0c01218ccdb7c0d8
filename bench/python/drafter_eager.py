#!/usr/bin/env python3
"""PyTorch eager baseline for hsring-bench-drafter: one DFlash training step (loss + backward +
AdamW) on the same shapes, written the way SpecForge's DFlash trainer does with its SDPA
backend: per sample, queries = all blocks, keys/values = [context | all blocks] under a dense
boolean mask (block i: context < anchor_i plus its own block), full-vocabulary logits and
F.cross_entropy, bf16 autocast over fp32 master weights, fused AdamW. Random weights and inputs
(values do not change the cost). Prints "RESULT {json}" last.
"""
import argparse
import json
import math
import time

import torch
import torch.nn.functional as F
from torch import nn

from presets import PRESETS


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight.to(dtype) * x.to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope(x, cos, sin):  # x [B, heads, L, D], cos/sin [B, L, D]
    return x * cos[:, None] + rotate_half(x) * sin[:, None]


class Layer(nn.Module):
    def __init__(self, p):
        super().__init__()
        h, d = p["hidden"], p["head_dim"]
        self.p = p
        self.q_proj = nn.Linear(h, p["heads"] * d, bias=False)
        self.k_proj = nn.Linear(h, p["kv_heads"] * d, bias=False)
        self.v_proj = nn.Linear(h, p["kv_heads"] * d, bias=False)
        self.o_proj = nn.Linear(p["heads"] * d, h, bias=False)
        self.q_norm, self.k_norm = RMSNorm(d, p["eps"]), RMSNorm(d, p["eps"])
        self.gate_proj = nn.Linear(h, p["intermediate"], bias=False)
        self.up_proj = nn.Linear(h, p["intermediate"], bias=False)
        self.down_proj = nn.Linear(p["intermediate"], h, bias=False)
        self.input_layernorm = RMSNorm(h, p["eps"])
        self.post_attention_layernorm = RMSNorm(h, p["eps"])

    def forward(self, x, ctx, cos, sin, mask):
        p = self.p
        b, q_len, _ = x.shape
        s = ctx.shape[1]
        hd = self.input_layernorm(x)
        q = self.q_norm(self.q_proj(hd).view(b, q_len, p["heads"], p["head_dim"])).transpose(1, 2)
        k = torch.cat([self.k_proj(ctx), self.k_proj(hd)], 1).view(b, s + q_len, p["kv_heads"], p["head_dim"])
        v = torch.cat([self.v_proj(ctx), self.v_proj(hd)], 1).view(b, s + q_len, p["kv_heads"], p["head_dim"])
        k, v = self.k_norm(k).transpose(1, 2), v.transpose(1, 2)
        q, k = rope(q, cos[:, s:], sin[:, s:]), rope(k, cos, sin)
        rep = p["heads"] // p["kv_heads"]
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.o_proj(o.transpose(1, 2).reshape(b, q_len, -1))
        hd = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(hd)) * self.up_proj(hd))


class Drafter(nn.Module):
    def __init__(self, p, layers, n_ctx):
        super().__init__()
        self.layers = nn.ModuleList([Layer(p) for _ in range(layers)])
        self.fc = nn.Linear(n_ctx * p["hidden"], p["hidden"], bias=False)
        self.hidden_norm = RMSNorm(p["hidden"], p["eps"])
        self.norm = RMSNorm(p["hidden"], p["eps"])

    def forward(self, noise, target_hidden, cos, sin, mask):
        ctx = self.hidden_norm(self.fc(target_hidden))
        x = noise
        for layer in self.layers:
            x = layer(x, ctx, cos, sin, mask)
        return self.norm(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="qwen3-8b")
    ap.add_argument("--layers", type=int, default=5)
    ap.add_argument("--seq-len", type=int, default=3072)
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--anchors", type=int, default=512)
    ap.add_argument("--block", type=int, default=16)
    ap.add_argument("--gamma", type=float, default=7.0)
    ap.add_argument("--mask-token", type=int, default=None)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--device", default="cuda", help="cpu: a smoke test of this script, not a measurement")
    args = ap.parse_args()
    p = PRESETS[args.preset]
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    bs, s, n, blk = args.samples, args.seq_len, args.anchors, args.block
    mask_token = p["mask_token"] if args.mask_token is None else args.mask_token
    torch.manual_seed(0)
    with torch.device(dev):
        drafter = Drafter(p, args.layers, args.layers)  # one captured target layer per drafter layer
        embed = (torch.randn(p["vocab"], p["hidden"]) * 0.02).to(torch.bfloat16)
        lm_head = (torch.randn(p["vocab"], p["hidden"]) * 0.02).to(torch.bfloat16)
        hidden = torch.randn(bs, s, args.layers * p["hidden"], dtype=torch.bfloat16)
        tokens = torch.randint(p["vocab"], (bs, s))
        loss_mask = torch.ones(bs, s)
    for param in drafter.parameters():
        if param.dim() > 1:
            nn.init.normal_(param, std=0.02)
    opt = torch.optim.AdamW(drafter.parameters(), lr=1e-4, weight_decay=0.0, fused=dev.type == "cuda")
    inv = 1.0 / (p["theta"] ** (torch.arange(0, p["head_dim"], 2, dtype=torch.float, device=dev) / p["head_dim"]))

    def step():
        # Anchors: n random loss-masked positions per sample with a later token, sorted.
        valid = loss_mask[:, : s - 1] > 0.5
        keys = torch.where(valid, torch.rand(bs, s - 1, device=dev), torch.full((bs, s - 1), 2.0, device=dev))
        anchors = keys.argsort(1)[:, :n].sort(1).values  # [bs, n]
        offs = torch.arange(blk, device=dev)
        pos_blk = (anchors[:, :, None] + offs).reshape(bs, n * blk)
        noise_ids = torch.full((bs, n, blk), mask_token, device=dev)
        noise_ids[:, :, 0] = tokens.gather(1, anchors)
        noise = embed[noise_ids.view(bs, -1)]
        positions = torch.cat([torch.arange(s, device=dev).expand(bs, s), pos_blk], 1)
        freqs = positions.float()[..., None] * inv
        emb = torch.cat((freqs, freqs), -1)
        cos, sin = emb.cos().to(torch.bfloat16), emb.sin().to(torch.bfloat16)
        kv = torch.arange(s + n * blk, device=dev)
        q_block = torch.arange(n * blk, device=dev) // blk
        anchor_of_q = anchors.repeat_interleave(blk, 1)  # [bs, Q]
        mask = (kv[None, None] < anchor_of_q[..., None]) | (
            (kv[None, None] >= s) & ((kv[None, None] - s) // blk == q_block[None, :, None]))
        labels_idx = pos_blk.clamp(max=s - 1)
        labels = tokens.gather(1, labels_idx)
        k = offs.repeat(n)[None]
        w = loss_mask.gather(1, labels_idx) * (k > 0) * (pos_blk < s)
        w = w * torch.exp(-(k - 1).clamp(min=0).float() / args.gamma)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            out = drafter(noise, hidden, cos, sin, mask[:, None])
            logits = out @ lm_head.t()
        ce = F.cross_entropy(logits.float().view(-1, p["vocab"]), labels.view(-1), reduction="none")
        loss = (ce * w.view(-1)).sum() / (w.sum() + 1e-6)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    for _ in range(args.warmup):
        step()
    sync()
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(args.iters):
        loss = step()
    sync()
    sec = (time.perf_counter() - t0) / args.iters
    peak = torch.cuda.max_memory_allocated() / 2**30 if dev.type == "cuda" else -1.0
    note = "dense-mask SDPA, full logits"
    print(f"eager drafter {args.preset} x{args.layers}: {bs} x {s} tokens, {n} anchors, block {blk}: "
          f"{sec * 1e3:.1f} ms/step, {bs / sec:.2f} samples/s, loss {loss.item():.3f}, peak {peak:.1f} GiB ({note})")
    print("RESULT " + json.dumps({"step_s": sec, "samples_per_s": bs / sec, "peak_gib": peak, "note": note}))


if __name__ == "__main__":
    main()
