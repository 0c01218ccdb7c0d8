#!/usr/bin/env python3
"""PyTorch eager baseline for hsring-bench-target: the same packed forward (a random-initialised
preset in bf16, tokens of several sequences packed into one batch, layers 0..max(--layers) run and
the --layers outputs kept), written the way transformers writes Qwen3/Llama (separate q/k/v and
gate/up projections, RMSNorm upcasting to fp32), with the best packed attention eager PyTorch
offers: torch.nn.attention.varlen.varlen_attn (the flash varlen kernel), else one causal SDPA per
sequence. Prints "RESULT {json}" last.

MoE presets (qwen3-30b-a3b, gpt-oss-20b) run their sparse MLP one of two ways (--moe):
  eager    transformers' eager experts: a loop over the experts that got tokens (one_hot mask,
           where, index_add_), as Qwen3MoeExperts / GptOssExperts run without a kernel library;
  grouped  the tokens sorted by expert and each projection one torch._grouped_mm (what a careful
           PyTorch user writes; transformers' "grouped_mm" experts implementation does the same).
gpt-oss: q/k/v/o biases, sliding-window layers (varlen window), sinks applied from the varlen
log-sum-exp, router and expert biases, the clamped SwiGLU.
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F
from torch import nn

from presets import PRESETS

try:
    from torch.nn.attention.varlen import AuxRequest, varlen_attn
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


class Experts(nn.Module):
    """Stacked experts, output-major like nn.Linear: gate_up [E, 2I, H], down [E, H, I]."""

    def __init__(self, p):
        super().__init__()
        e, h, i = p["experts"], p["hidden"], p["moe_intermediate"]
        self.p, self.oss = p, p.get("gpt_oss", False)
        self.router = nn.Linear(h, e, bias=self.oss)
        self.gate_up = nn.Parameter(torch.empty(e, 2 * i, h))
        self.down = nn.Parameter(torch.empty(e, h, i))
        self.gate_up_bias = nn.Parameter(torch.zeros(e, 2 * i)) if self.oss else None
        self.down_bias = nn.Parameter(torch.zeros(e, h)) if self.oss else None

    def act(self, gu):
        if self.oss:  # interleaved gate/up, clamped SwiGLU (limit 7, alpha 1.702)
            gate, up = gu[..., ::2].clamp(max=7.0), gu[..., 1::2].clamp(-7.0, 7.0)
            return (up + 1) * gate * torch.sigmoid(gate * 1.702)
        gate, up = gu.chunk(2, -1)
        return F.silu(gate) * up

    def route(self, x):
        logits = self.router(x)
        if self.oss:
            top, idx = logits.topk(self.p["top_k"], -1)
            return torch.softmax(top, -1), idx
        probs = torch.softmax(logits, -1, dtype=torch.float)
        w, idx = probs.topk(self.p["top_k"], -1)
        if self.p.get("norm_topk_prob"):
            w = w / w.sum(-1, keepdim=True)
        return w.to(x.dtype), idx

    def forward(self, x, mode):
        w, idx = self.route(x)
        out = torch.zeros_like(x)
        if mode == "eager":
            mask = F.one_hot(idx, self.p["experts"]).permute(2, 1, 0)  # [E, k, T]
            hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
            for e in hit:
                e = e[0]
                slot, tok = torch.where(mask[e])
                gu = F.linear(x[tok], self.gate_up[e], None if self.gate_up_bias is None else self.gate_up_bias[e])
                y = F.linear(self.act(gu), self.down[e], None if self.down_bias is None else self.down_bias[e])
                out.index_add_(0, tok, (y * w[tok, slot, None]).to(out.dtype))
            return out
        k = idx.shape[-1]
        flat = idx.reshape(-1)
        order = flat.argsort(stable=True)
        offs = torch.bincount(flat, minlength=self.p["experts"]).cumsum(0).to(torch.int32)
        rows = x[order // k]
        gu = torch._grouped_mm(rows, self.gate_up.transpose(1, 2), offs=offs)
        if self.gate_up_bias is not None:
            gu = gu + self.gate_up_bias[flat[order]]
        y = torch._grouped_mm(self.act(gu), self.down.transpose(1, 2), offs=offs)
        if self.down_bias is not None:
            y = y + self.down_bias[flat[order]]
        y = y * w.reshape(-1)[order, None]
        return out.index_add_(0, order // k, y)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Layer(nn.Module):
    def __init__(self, p, index=0, moe_mode="grouped"):
        super().__init__()
        h, d = p["hidden"], p["head_dim"]
        self.p = p
        bias = p.get("gpt_oss", False)
        self.q_proj = nn.Linear(h, p["heads"] * d, bias=bias)
        self.k_proj = nn.Linear(h, p["kv_heads"] * d, bias=bias)
        self.v_proj = nn.Linear(h, p["kv_heads"] * d, bias=bias)
        self.o_proj = nn.Linear(p["heads"] * d, h, bias=bias)
        self.sinks = nn.Parameter(torch.zeros(p["heads"])) if bias else None
        self.window = p["sliding_window"] if p.get("gpt_oss") and index % 2 == 0 else 0
        self.q_norm = RMSNorm(d, p["eps"]) if p["qk_norm"] else None
        self.k_norm = RMSNorm(d, p["eps"]) if p["qk_norm"] else None
        self.moe = Experts(p) if "experts" in p else None
        self.moe_mode = moe_mode
        if self.moe is None:
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
        if varlen_attn is not None and q.is_cuda and self.sinks is not None:
            window = (self.window - 1, 0) if self.window else (-1, 0)
            o, lse = varlen_attn(q, k, v, cu, cu, max_len, max_len, window_size=window, return_aux=AuxRequest(lse=True))
            keep = torch.sigmoid(lse.float() - self.sinks.float()[:, None]).transpose(0, 1)[..., None]
            o = (o.float() * keep).to(q.dtype)
        elif varlen_attn is not None and q.is_cuda:
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
        if self.moe is not None:
            return h + self.moe(x, self.moe_mode)
        return h + self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="qwen3-8b")
    ap.add_argument("--lengths", required=True, help="comma-separated sequence lengths")
    ap.add_argument("--layers", required=True, help="captured layer ids")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default="cuda", help="cpu: a smoke test of this script, not a measurement")
    ap.add_argument("--moe", choices=["eager", "grouped"], default="grouped",
                    help="MoE presets: transformers' per-expert loop, or grouped GEMMs over tokens sorted by expert")
    args = ap.parse_args()
    p = PRESETS[args.preset]
    lengths = [int(x) for x in args.lengths.split(",")]
    capture = sorted({int(x) for x in args.layers.split(",")})
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    torch.manual_seed(0)
    with torch.device(dev):
        embed = nn.Embedding(p["vocab"], p["hidden"]).to(torch.bfloat16)
        layers = nn.ModuleList([Layer(p, i, args.moe) for i in range(capture[-1] + 1)]).to(torch.bfloat16)
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
    moe = f", experts {args.moe}" if "experts" in p else ""
    print(f"eager {args.preset}: {total} tokens, layers 0..{capture[-1]}: {s * 1e3:.1f} ms/batch, {attention}{moe}")
    print("RESULT " + json.dumps({"tokens_per_s": total / s, "s_per_batch": s, "attention": attention,
                                  "moe": args.moe if "experts" in p else None}))


if __name__ == "__main__":
    main()
