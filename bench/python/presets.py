"""Model presets, as src/model/shape.cpp defines them (keep in sync)."""

PRESETS = {
    "tiny": dict(hidden=64, layers=8, heads=4, kv_heads=2, head_dim=16, intermediate=192, vocab=512,
                 theta=1e6, eps=1e-6, qk_norm=True, mask_token=511),
    "qwen3-8b": dict(hidden=4096, layers=36, heads=32, kv_heads=8, head_dim=128, intermediate=12288,
                     vocab=151936, theta=1e6, eps=1e-6, qk_norm=True, mask_token=151669),
    # Llama-3 rope scaling changes only the frequencies, not the cost: plain RoPE here.
    "llama3-8b": dict(hidden=4096, layers=32, heads=32, kv_heads=8, head_dim=128, intermediate=14336,
                      vocab=128256, theta=500000.0, eps=1e-5, qk_norm=False, mask_token=128002),
}
