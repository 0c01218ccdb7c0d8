"""Model presets, as src/model/shape/shape.cpp defines them (keep in sync)."""

PRESETS = {
    "tiny": dict(hidden=64, layers=8, heads=4, kv_heads=2, head_dim=16, intermediate=192, vocab=512,
                 theta=1e6, eps=1e-6, qk_norm=True, mask_token=511),
    "qwen3-8b": dict(hidden=4096, layers=36, heads=32, kv_heads=8, head_dim=128, intermediate=12288,
                     vocab=151936, theta=1e6, eps=1e-6, qk_norm=True, mask_token=151669),
    # Llama-3 rope scaling changes only the frequencies, not the cost: plain RoPE here.
    "llama3-8b": dict(hidden=4096, layers=32, heads=32, kv_heads=8, head_dim=128, intermediate=14336,
                      vocab=128256, theta=500000.0, eps=1e-5, qk_norm=False, mask_token=128002),
    # MoE presets: every layer sparse (experts of width moe_intermediate, top_k per token).
    "qwen3-30b-a3b": dict(hidden=2048, layers=48, heads=32, kv_heads=4, head_dim=128, intermediate=6144,
                          vocab=151936, theta=1e6, eps=1e-6, qk_norm=True, mask_token=151669, experts=128,
                          top_k=8, moe_intermediate=768, norm_topk_prob=True),
    # gpt-oss: biases, sinks and sliding windows change little of the cost; YaRN only the frequencies.
    "gpt-oss-20b": dict(hidden=2880, layers=24, heads=64, kv_heads=8, head_dim=64, intermediate=2880,
                        vocab=201088, theta=150000.0, eps=1e-5, qk_norm=False, mask_token=200000, experts=32,
                        top_k=4, moe_intermediate=2880, gpt_oss=True, sliding_window=128),
}
