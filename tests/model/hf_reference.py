#!/usr/bin/env python3
"""Reference outputs from HF transformers for the C++ parity tests (test_hf_parity.cpp).

  hf_reference.py target --model DIR --tokens TOKENS.json --out OUT.safetensors
      Runs the HF causal LM in DIR (fp32, eager attention) on each token list alone and saves
      seq{S}.hidden.{I} (= output_hidden_states[I], I = 0..N) and seq{S}.logits.

  hf_reference.py dflash --drafter DIR --embed E.safetensors --hidden H.safetensors
                         --blocks BLOCKS.json --out OUT.safetensors
      Loads an exported DFlash drafter (config via transformers' AutoConfig, weights from its
      model.safetensors) into a small re-implementation of DFlash inference built from
      transformers' Qwen3 modules, and runs each block the way DFlash decodes: context =
      captured hidden states of the positions before the anchor, noise = embedding of
      [anchor token, MASK...], positions 0 .. anchor+B-1, non-causal. Saves block.{J} [B, H].

  hf_reference.py qwen3-moe --out DIR [--no-norm-topk-prob]
      Writes a tiny random Qwen3MoeForCausalLM with transformers' own save_pretrained, sharded
      (model.safetensors.index.json): 4 layers, layer 2 dense (mlp_only_layers), the others 8
      experts, top 2; router weights ~ N(0, 0.2^2) so routing is decided, norms in [0.5, 2.5].

  hf_reference.py gpt-oss --out DIR [--mxfp4-out DIR2]
      a tiny random GptOssForCausalLM (window 4 < the test sequences, sinks and biases non-zero, YaRN)
      saved by transformers in fp32; DIR2: the same with its experts shipped as MXFP4 blocks/scales
  hf_reference.py mxfp4 --out OUT.safetensors
      Random MXFP4 blocks [2, 6, 3, 16] and scales [2, 6, 3] (uint8, scales 118..135) and what
      transformers' convert_moe_packed_tensors makes of them (bf16 and fp32), transposed back to
      [2, 6, 96] (transformers stores experts input-major).

  hf_reference.py gpt-oss-mlp --out OUT.safetensors
      transformers' GptOssMLP (router + experts, eager) of a tiny random GptOssConfig (hidden 64,
      8 experts of width 32, top 2; weights ~ N(0, 0.3^2), biases ~ N(0, 0.5^2)) on x [24, 64] ~
      N(0, 2^2): its weights (transformers' layout), x, the output, and how many gate/up values
      the SwiGLU clamp cut (the test wants the clamp exercised).

  hf_reference.py yarn --out OUT.safetensors
      transformers' YaRN frequencies and attention factor (ROPE_INIT_FUNCTIONS["yarn"]) for
      gpt-oss-20b's rope_scaling (theta 150000, head_dim 64, factor 32, truncate false) and for a
      truncating one with mscale / mscale_all_dim: case{0,1}.inv_freq, case{0,1}.attention_factor.

  hf_reference.py sink-attention --out OUT.safetensors
      transformers' gpt-oss eager_attention_forward (sinks, GQA) on random q/k/v of two sequences
      (9 and 20 tokens) one at a time, with a sliding window of 4 and with full causal attention
      (transformers' mask semantics: key j visible to query i iff j <= i and j > i - window):
      q, k, v (packed [T, H, D]), sinks, out.window, out.full.

  hf_reference.py generate --model DIR --prompts PROMPTS.json --max-new-tokens N --out OUT.json
      transformers' greedy generate(do_sample=False) (fp32; eos from the directory's
      generation_config.json) on each prompt alone and on all of them in one left-padded batch;
      writes {"alone": [[new tokens]], "batched": [[...]]}, each cut after its first eos.

Every model is loaded with output_loading_info: a missing or unexpected tensor is an error
(transformers would otherwise initialise it at random).

Exit code 77 (skip) only when transformers cannot be imported.
"""
import argparse
import json
import os
import sys

try:
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.models.qwen3.modeling_qwen3 import Qwen3MLP, Qwen3RMSNorm, Qwen3RotaryEmbedding
    from safetensors.torch import load_file, save_file
except ImportError as e:  # the only reason to skip
    print(f"skipped: transformers/safetensors not importable: {e}", file=sys.stderr)
    sys.exit(77)


def load_model(path, **kwargs):
    model, info = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, output_loading_info=True, **kwargs)
    bad = {k: v for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v}
    assert not bad, f"{path}: transformers could not load every tensor: {bad}"
    return model.eval()


def run_target(args):
    model = load_model(args.model, attn_implementation="eager")
    seqs = json.load(open(args.tokens))
    out = {}
    with torch.no_grad():
        for s, ids in enumerate(seqs):
            res = model(torch.tensor([ids]), output_hidden_states=True)
            for i, h in enumerate(res.hidden_states):
                out[f"seq{s}.hidden.{i}"] = h[0].contiguous()
            out[f"seq{s}.logits"] = res.logits[0].contiguous()
    save_file(out, args.out, metadata={"transformers": transformers.__version__})


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Layer(torch.nn.Module):
    """One DFlash decoder layer: queries from the block, keys/values from [context | block]."""

    def __init__(self, cfg):
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.heads, self.kv_heads, self.d = cfg.num_attention_heads, cfg.num_key_value_heads, d
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)
        self.self_attn = torch.nn.Module()
        self.self_attn.q_proj = lin(h, self.heads * d)
        self.self_attn.k_proj = lin(h, self.kv_heads * d)
        self.self_attn.v_proj = lin(h, self.kv_heads * d)
        self.self_attn.o_proj = lin(self.heads * d, h)
        self.self_attn.q_norm = Qwen3RMSNorm(d, eps=cfg.rms_norm_eps)
        self.self_attn.k_norm = Qwen3RMSNorm(d, eps=cfg.rms_norm_eps)
        self.mlp = Qwen3MLP(cfg)
        self.input_layernorm = Qwen3RMSNorm(h, eps=cfg.rms_norm_eps)
        self.post_attention_layernorm = Qwen3RMSNorm(h, eps=cfg.rms_norm_eps)

    def forward(self, x, ctx, cos, sin):
        a = self.self_attn
        n_ctx, n_blk = ctx.shape[0], x.shape[0]
        h = self.input_layernorm(x)
        q = a.q_norm(a.q_proj(h).view(n_blk, self.heads, self.d)).transpose(0, 1)
        k = a.k_norm(torch.cat([a.k_proj(ctx), a.k_proj(h)]).view(n_ctx + n_blk, self.kv_heads, self.d)).transpose(0, 1)
        v = torch.cat([a.v_proj(ctx), a.v_proj(h)]).view(n_ctx + n_blk, self.kv_heads, self.d).transpose(0, 1)
        q = q * cos[-n_blk:] + rotate_half(q) * sin[-n_blk:]
        k = k * cos + rotate_half(k) * sin
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, 0), v.repeat_interleave(rep, 0)
        p = torch.softmax(q @ k.transpose(1, 2) / self.d**0.5, dim=-1)  # non-causal
        o = (p @ v).transpose(0, 1).reshape(n_blk, -1)
        x = x + a.o_proj(o)
        return x + self.mlp(self.post_attention_layernorm(x))


class Drafter(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        n_ctx = len(cfg.dflash_config["target_layer_ids"])
        self.layers = torch.nn.ModuleList([Layer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.fc = torch.nn.Linear(n_ctx * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.hidden_norm = Qwen3RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.norm = Qwen3RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.rotary = Qwen3RotaryEmbedding(cfg)

    def forward(self, noise, target_hidden, positions):
        ctx = self.hidden_norm(self.fc(target_hidden))
        cos, sin = self.rotary(noise[None], positions[None])
        cos, sin = cos[0], sin[0]
        x = noise
        for layer in self.layers:
            x = layer(x, ctx, cos, sin)
        return self.norm(x)


def run_dflash(args):
    cfg = AutoConfig.from_pretrained(args.drafter)
    assert cfg.architectures == ["DFlashDraftModel"], cfg.architectures
    drafter = Drafter(cfg)
    state = load_file(f"{args.drafter}/model.safetensors")
    missing, unexpected = drafter.load_state_dict(state, strict=False)
    # The rotary table is computed, not stored.
    assert not unexpected and all(m.startswith("rotary") for m in missing), (missing, unexpected)
    drafter = drafter.float().eval()
    embed = load_file(args.embed)["embed"]
    hidden = load_file(args.hidden)["hidden"]  # [L, T, H]
    spec = json.load(open(args.blocks))
    block, mask = cfg.dflash_config["block_size"], cfg.dflash_config["mask_token_id"]
    tokens = spec["tokens"]
    out = {}
    with torch.no_grad():
        for j, (anchor, begin) in enumerate(zip(spec["anchors"], spec["seq_begin"])):
            ctx = hidden[:, begin:anchor, :].permute(1, 0, 2).reshape(anchor - begin, hidden.shape[0] * hidden.shape[2])
            noise = embed[torch.tensor([tokens[anchor]] + [mask] * (block - 1))]
            positions = torch.arange(0, anchor - begin + block)
            out[f"block.{j}"] = drafter(noise, ctx, positions).contiguous()
    save_file(out, args.out)


def run_qwen3_moe(args):
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    cfg = Qwen3MoeConfig(vocab_size=512, hidden_size=64, intermediate_size=192, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, rope_parameters={
                             "rope_type": "default", "rope_theta": 1e6}, max_position_embeddings=4096,
                         num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, decoder_sparse_step=1,
                         mlp_only_layers=[2], norm_topk_prob=args.norm_topk_prob, tie_word_embeddings=False)
    model = Qwen3MoeForCausalLM(cfg).float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 2.5)
            elif name.endswith("mlp.gate.weight"):
                p.normal_(0, 0.2)
    model.save_pretrained(args.out, max_shard_size="100KB")


def run_generate(args):
    model = load_model(args.model)
    prompts = json.load(open(args.prompts))
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
    pad = 0
    common = dict(do_sample=False, max_new_tokens=args.max_new_tokens, pad_token_id=pad)

    def cut(ids):
        for i, t in enumerate(ids):
            if t in eos:
                return ids[: i + 1]
        return ids

    out = {"alone": [], "batched": []}
    with torch.no_grad():
        for p in prompts:
            ids = torch.tensor([p])
            res = model.generate(ids, attention_mask=torch.ones_like(ids), **common)
            out["alone"].append(cut(res[0, len(p):].tolist()))
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        res = model.generate(ids, attention_mask=mask, **common)
        out["batched"] = [cut(r[width:].tolist()) for r in res]
    json.dump(out, open(args.out, "w"))


def run_mxfp4(args):
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    g = torch.Generator().manual_seed(5)
    blocks = torch.randint(0, 256, (2, 6, 3, 16), generator=g, dtype=torch.int32).to(torch.uint8)
    scales = torch.randint(118, 136, (2, 6, 3), generator=g, dtype=torch.int32).to(torch.uint8)
    out = {"blocks": blocks, "scales": scales}
    for name, dt in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        out[name] = convert_moe_packed_tensors(blocks, scales, dtype=dt).transpose(1, 2).contiguous()
    save_file(out, args.out, metadata={"transformers": transformers.__version__})


def run_gpt_oss(args):
    """A tiny random GptOssForCausalLM (tiny-gpt-oss's shape: window 4, sinks, biases, YaRN) saved by
    transformers in fp32 to --out; with --mxfp4-out, the same model with its experts' weights drawn as
    MXFP4 blocks/scales (the fp32 copy holds their exact dequantisation) and shipped that way."""
    from transformers import GptOssConfig, GptOssForCausalLM
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    cfg = GptOssConfig(vocab_size=512, hidden_size=64, intermediate_size=32, num_hidden_layers=4,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=8,
                       num_experts_per_tok=2, sliding_window=4, max_position_embeddings=4096,
                       tie_word_embeddings=False)
    model = GptOssForCausalLM(cfg).float()
    g = torch.Generator().manual_seed(7)
    packed = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 2.5, generator=g)
            elif name.endswith("sinks"):
                p.copy_(torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            elif name.endswith("router.weight"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
            elif name.endswith("gate_up_proj") or name.endswith("down_proj"):
                e, k, n = p.shape  # input-major [E, in, out]: blocks over `in`, 32 values a group
                blocks = torch.randint(0, 256, (e, n, k // 32, 16), generator=g, dtype=torch.int32).to(torch.uint8)
                scales = torch.randint(119, 124, (e, n, k // 32), generator=g, dtype=torch.int32).to(torch.uint8)
                w = convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)
                assert w.shape == p.shape, (w.shape, p.shape)
                p.copy_(w)
                packed[name] = (blocks, scales)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    model.save_pretrained(args.out)
    if args.mxfp4_out:
        import shutil
        shutil.copytree(args.out, args.mxfp4_out)
        tensors = load_file(os.path.join(args.out, "model.safetensors"))
        for name, (blocks, scales) in packed.items():
            del tensors[name]
            tensors[name + "_blocks"], tensors[name + "_scales"] = blocks, scales
        save_file(tensors, os.path.join(args.mxfp4_out, "model.safetensors"), metadata={"format": "pt"})


def run_gpt_oss_mlp(args):
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssMLP
    cfg = GptOssConfig(hidden_size=64, intermediate_size=32, num_local_experts=8, num_experts_per_tok=2,
                       num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=128)
    cfg._experts_implementation = "eager"
    mlp = GptOssMLP(cfg).eval()
    g = torch.Generator().manual_seed(6)
    with torch.no_grad():
        for name, p in mlp.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (0.5 if name.endswith("bias") else 0.3))
        x = torch.randn(24, 64, generator=g) * 2
        out = mlp(x.unsqueeze(0))
        out = out[0] if isinstance(out, tuple) else out
        gate_up = torch.einsum("th,ehi->eti", x, mlp.experts.gate_up_proj) + mlp.experts.gate_up_proj_bias[:, None]
        clamped = int((gate_up[..., ::2] > 7).sum() + (gate_up[..., 1::2].abs() > 7).sum())
    tensors = {n: p.detach().contiguous() for n, p in mlp.named_parameters()}
    tensors.update({"x": x, "out": out.reshape(24, 64).contiguous(), "clamped": torch.tensor([clamped])})
    save_file(tensors, args.out, metadata={"transformers": transformers.__version__})


YARN_CASES = [
    {"rope_theta": 150000.0, "head_dim": 64, "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
     "original_max_position_embeddings": 4096, "truncate": False},
    {"rope_theta": 10000.0, "head_dim": 128, "factor": 40.0, "beta_fast": 32.0, "beta_slow": 1.0,
     "original_max_position_embeddings": 4096, "mscale": 1.0, "mscale_all_dim": 0.707},
]


def run_yarn(args):
    from transformers import GptOssConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    out = {}
    for i, c in enumerate(YARN_CASES):
        params = {k: v for k, v in c.items() if k != "head_dim"}
        params["rope_type"] = "yarn"
        cfg = GptOssConfig(head_dim=c["head_dim"], hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                           max_position_embeddings=int(c["factor"] * c["original_max_position_embeddings"]),
                           rope_parameters=params)
        inv_freq, attention_factor = ROPE_INIT_FUNCTIONS["yarn"](cfg, "cpu")
        out[f"case{i}.inv_freq"] = inv_freq.float().contiguous()
        out[f"case{i}.attention_factor"] = torch.tensor([float(attention_factor)], dtype=torch.float64)
    save_file(out, args.out, metadata={"transformers": transformers.__version__})


def run_sink_attention(args):
    from types import SimpleNamespace
    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward
    g = torch.Generator().manual_seed(7)
    lengths, hq, hkv, d, window = (9, 20), 4, 2, 16, 4
    t = sum(lengths)
    q, k, v = (torch.randn(t, h, d, generator=g) for h in (hq, hkv, hkv))
    sinks = torch.randn(hq, generator=g) * 2
    module = SimpleNamespace(sinks=sinks, num_key_value_groups=hq // hkv, training=False)
    out = {"q": q, "k": k, "v": v, "sinks": sinks}
    for name, w in (("window", window), ("full", None)):
        parts, a = [], 0
        for n in lengths:
            i, j = torch.arange(n).view(n, 1), torch.arange(n).view(1, n)
            visible = (j <= i) & ((j > i - w) if w else True)
            mask = torch.zeros(n, n).masked_fill(~visible, torch.finfo(torch.float32).min).view(1, 1, n, n)
            heads = [x[a:a + n].transpose(0, 1).unsqueeze(0) for x in (q, k, v)]  # [1, H, n, D]
            o, _ = eager_attention_forward(module, *heads, mask, scaling=d ** -0.5)
            parts.append(o[0])  # [n, Hq, D]
            a += n
        out[f"out.{name}"] = torch.cat(parts).contiguous()
    save_file(out, args.out, metadata={"transformers": transformers.__version__})


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("target")
    t.add_argument("--model", required=True)
    t.add_argument("--tokens", required=True)
    t.add_argument("--out", required=True)
    d = sub.add_parser("dflash")
    for k in ("--drafter", "--embed", "--hidden", "--blocks", "--out"):
        d.add_argument(k, required=True)
    g = sub.add_parser("generate")
    for k in ("--model", "--prompts", "--out"):
        g.add_argument(k, required=True)
    g.add_argument("--max-new-tokens", type=int, required=True)
    m = sub.add_parser("qwen3-moe")
    m.add_argument("--out", required=True)
    m.add_argument("--no-norm-topk-prob", dest="norm_topk_prob", action="store_false")
    x = sub.add_parser("mxfp4")
    x.add_argument("--out", required=True)
    o = sub.add_parser("gpt-oss-mlp")
    o.add_argument("--out", required=True)
    go = sub.add_parser("gpt-oss")
    go.add_argument("--out", required=True)
    go.add_argument("--mxfp4-out")
    y = sub.add_parser("yarn")
    y.add_argument("--out", required=True)
    a = sub.add_parser("sink-attention")
    a.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    {"target": run_target, "dflash": run_dflash, "generate": run_generate, "qwen3-moe": run_qwen3_moe,
     "mxfp4": run_mxfp4, "gpt-oss-mlp": run_gpt_oss_mlp, "gpt-oss": run_gpt_oss,
     "yarn": run_yarn, "sink-attention": run_sink_attention}[args.cmd](args)


if __name__ == "__main__":
    main()
