#!/usr/bin/env python3
"""PyTorch eager baseline for `hsring-bench drafter --type eagle3`: one EAGLE-3 training step
(training-time-test forward over --ttt-steps steps, loss, backward, clip + AdamW) on the same
shapes, written the way SpecForge's EAGLE-3 trainer does it with its eager ("sdpa") backend
(specforge/modeling/draft/llama3_eagle.py: LlamaForCausalLMEagle3, specforge/core/eagle3.py):

- fc over the 3 fused layers -> one Llama decoder layer `midlayer`: input_layernorm on the token's
  embedding, hidden_norm on the hidden state, their concat [.., 2H] -> q/k/v;
- step k: RoPE at position + k; the k/v of every step kept in a growing cache; the queries see
  step 0's keys under the causal mask (a matmul) and each later step's key of their own row only
  ((q * k).sum(-1)), the scores concatenated, softmax in fp32, then p0 @ v0 + sum_i p_i * v_i;
- norm + the draft vocabulary's LM head; after each step the tokens, the target distribution and
  the loss mask move one position left (SpecForge's padding(left=False)).

The target distribution and the loss are hsring's (src/model/drafter/eagle3/loss.hpp): softmax of
the target's LM head rows of the draft vocabulary over norm(the target's last layer), computed
once per batch and shifted like SpecForge's target_p; forward KL weighted by decay^k, over the
first step's mask sum. The embedding and the LM head rows are the target's, frozen. bf16 autocast
over fp32 master weights, clip to norm 1, AdamW (fused on CUDA). Random weights and inputs
(values do not change the cost). Each sequence of n tokens gives n - 1 rows, as hsring's packed
batch does. Prints "RESULT {json}" last.
"""
import argparse
import json
import math
import time

import torch
import torch.nn.functional as F
from torch import nn

from drafter_eager import RMSNorm, rotate_half  # the DFlash baseline's: the same layers
from presets import PRESETS


def repeat_kv(x, rep):  # [B, kv_heads, L, D] -> [B, heads, L, D]
    if rep == 1:
        return x
    b, h, n, d = x.shape
    return x[:, :, None].expand(b, h, rep, n, d).reshape(b, h * rep, n, d)


class Attention(nn.Module):
    """SpecForge's LlamaAttention with cache_hidden (the training-time test)."""

    def __init__(self, p):
        super().__init__()
        h, d = p["hidden"], p["head_dim"]
        self.heads, self.kv_heads, self.head_dim = p["heads"], p["kv_heads"], d
        self.q_proj = nn.Linear(2 * h, p["heads"] * d, bias=False)
        self.k_proj = nn.Linear(2 * h, p["kv_heads"] * d, bias=False)
        self.v_proj = nn.Linear(2 * h, p["kv_heads"] * d, bias=False)
        self.o_proj = nn.Linear(p["heads"] * d, h, bias=False)

    def forward(self, x, cache, cos, sin, causal_bias):
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos[:, None] + rotate_half(q) * sin[:, None]
        k = k * cos[:, None] + rotate_half(k) * sin[:, None]
        rep = self.heads // self.kv_heads
        cache[0].append(repeat_kv(k, rep))
        cache[1].append(repeat_kv(v, rep))
        keys, values = cache
        scale = 1.0 / math.sqrt(self.head_dim)
        scores = torch.matmul(q, keys[0].transpose(2, 3)) * scale + causal_bias  # [B, heads, n, n]
        for ki in keys[1:]:  # each later step: the row's own key only
            scores = torch.cat((scores, ((q * ki).sum(-1) * scale)[..., None]), dim=-1)
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(probs[..., :n], values[0])
        for i, vi in enumerate(values[1:], start=1):
            out = out + probs[..., n + i - 1, None] * vi
        return self.o_proj(out.transpose(1, 2).reshape(b, n, -1))


class MLP(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.gate_proj = nn.Linear(p["hidden"], p["intermediate"], bias=False)
        self.up_proj = nn.Linear(p["hidden"], p["intermediate"], bias=False)
        self.down_proj = nn.Linear(p["intermediate"], p["hidden"], bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MidLayer(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.self_attn = Attention(p)
        self.mlp = MLP(p)
        self.input_layernorm = RMSNorm(p["hidden"], p["eps"])
        self.hidden_norm = RMSNorm(p["hidden"], p["eps"])
        self.post_attention_layernorm = RMSNorm(p["hidden"], p["eps"])

    def forward(self, emb, hidden, cache, cos, sin, causal_bias):
        x = torch.cat((self.input_layernorm(emb), self.hidden_norm(hidden)), dim=-1)
        h = hidden + self.self_attn(x, cache, cos, sin, causal_bias)
        return h + self.mlp(self.post_attention_layernorm(h))


class Eagle3Drafter(nn.Module):
    """LlamaForCausalLMEagle3's trained parts: fc, midlayer, norm (embedding and LM head frozen)."""

    def __init__(self, p):
        super().__init__()
        self.fc = nn.Linear(3 * p["hidden"], p["hidden"], bias=False)
        self.midlayer = MidLayer(p)
        self.norm = RMSNorm(p["hidden"], p["eps"])


def shift_left(x):
    """SpecForge's padding(x, left=False): one position left along dim 1, zeros at the end."""
    return torch.cat((x[:, 1:], torch.zeros_like(x[:, :1])), dim=1)


def ttt_loss(drafter, embed, lm_head, target_norm, eps, inv_freq, fused, last, tokens, loss_mask, steps, decay):
    """The training-time test over a batch of equal-length sequences (run it under autocast).
    fused [B, S, 3H], last [B, S, H] (the target's last layer), tokens [B, S], loss_mask [B, S].
    Row j of a sequence: fused layers of position j, token j + 1, position j + 1. Returns
    (loss_sum, weight_sum, [KL sum of each step]): loss_sum = sum_k decay^k KL sum_k, weight_sum =
    step 0's mask sum (hsring's eagle3_loss)."""
    s = fused.shape[1]
    n = s - 1
    dev = fused.device
    # The target distribution at positions 1..s-1 (no grad), once per batch, shifted per step.
    with torch.no_grad():
        h = last[:, 1:].float()
        h = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(last.dtype) * target_norm
        target_logp = F.log_softmax((h @ lm_head.t()).float(), -1)  # [B, n, Vd]
        target_p = target_logp.exp()
        target_plogp = torch.xlogy(target_p, target_p).sum(-1)  # sum_v p log p
    ids, mask = tokens[:, 1:], loss_mask[:, 1:].float()
    weight = mask.sum()
    cache = [[], []]
    loss, kl_sums = torch.zeros((), device=dev), []
    hidden = drafter.fc(fused[:, :n])
    # step 0's keys: those at or before the query's row (an additive mask in the activations' dtype)
    causal_bias = torch.full((n, n), float("-inf"), device=dev, dtype=hidden.dtype).triu(1)
    for k in range(steps):
        freqs = (torch.arange(n, device=dev) + 1 + k).float()[:, None] * inv_freq  # RoPE at position + k
        emb = torch.cat((freqs, freqs), -1)[None]
        cos, sin = emb.cos().to(hidden.dtype), emb.sin().to(hidden.dtype)
        hidden = drafter.midlayer(embed[ids], hidden, cache, cos, sin, causal_bias)
        logits = drafter.norm(hidden) @ lm_head.t()
        logq = F.log_softmax(logits.float(), -1)
        kl = target_plogp - (target_p * logq).sum(-1)  # [B, n]: KL(target || draft)
        kl_sums.append((kl * mask).sum())
        loss = loss + kl_sums[-1] * decay ** k
        if k + 1 < steps:
            ids, mask = shift_left(ids), shift_left(mask)
            target_p, target_plogp = shift_left(target_p), shift_left(target_plogp)
    return loss, weight, kl_sums


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="qwen3-8b")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--samples", type=int, default=1)
    ap.add_argument("--ttt-steps", type=int, default=7)
    ap.add_argument("--decay", type=float, default=0.8)
    ap.add_argument("--draft-vocab", type=int, default=32000)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--device", default="cuda", help="cpu: a smoke test of this script, not a measurement")
    args = ap.parse_args()
    p = PRESETS[args.preset]
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    bs, s, steps = args.samples, args.seq_len, args.ttt_steps
    vd = min(args.draft_vocab, p["vocab"]) if args.draft_vocab > 0 else p["vocab"]
    torch.manual_seed(0)
    with torch.device(dev):
        drafter = Eagle3Drafter(p)
        embed = (torch.randn(p["vocab"], p["hidden"]) * 0.02).to(torch.bfloat16)  # the target's, frozen
        lm_head = (torch.randn(vd, p["hidden"]) * 0.02).to(torch.bfloat16)  # its draft-vocabulary rows, frozen
        target_norm = torch.ones(p["hidden"], dtype=torch.bfloat16)
        fused = torch.randn(bs, s, 3 * p["hidden"], dtype=torch.bfloat16)  # low, middle, high layers
        last = torch.randn(bs, s, p["hidden"], dtype=torch.bfloat16)       # the target's last layer
        tokens = torch.randint(p["vocab"], (bs, s))
        loss_mask = torch.ones(bs, s)
    for param in drafter.parameters():
        if param.dim() > 1:
            nn.init.normal_(param, std=0.02)
    params = list(drafter.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.0, fused=cuda)
    d = p["head_dim"]
    inv = 1.0 / (p["theta"] ** (torch.arange(0, d, 2, dtype=torch.float, device=dev) / d))

    def step():
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss_sum, weight, _ = ttt_loss(drafter, embed, lm_head, target_norm, p["eps"], inv, fused, last, tokens,
                                           loss_mask, steps, args.decay)
        loss = loss_sum / weight
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss

    for _ in range(args.warmup):
        step()
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(args.iters):
        loss = step()
    sync()
    sec = (time.perf_counter() - t0) / args.iters
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else -1.0
    note = "cache_hidden eager attention, full [rows, draft vocab] logits per step"
    print(f"eager eagle3 {args.preset}: {bs} x {s} tokens, {steps} TTT steps, draft vocab {vd}: "
          f"{sec * 1e3:.1f} ms/step, {bs / sec:.2f} samples/s, loss {loss.item():.3f}, peak {peak:.1f} GiB ({note})")
    print("RESULT " + json.dumps({"step_s": sec, "samples_per_s": bs / sec, "peak_gib": peak,
                                  "loss": loss.item(), "note": note}))


if __name__ == "__main__":
    main()
