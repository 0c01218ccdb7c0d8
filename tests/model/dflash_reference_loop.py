"""The public DFlash generation loop (z-lab's `dflash_generate`, dflash/model.py), greedy, written
again from its description for the parity checks: transformers' model as the target (DynamicCache,
cropped after each verify) and hf_reference.py's DFlash drafter (the public parameter layout).
Used by tests/e2e/test_spec_reference.py (CPU) and bench/gpu/spec_reference.py (the GPU export).
Importing it exits 77 when transformers is missing (through hf_reference)."""
import os

import hf_reference
import torch
from transformers import DynamicCache


def load_drafter(export, device="cpu"):
    """(drafter module in fp32, its dflash_config) from an exported drafter dir."""
    cfg = hf_reference.AutoConfig.from_pretrained(export)
    drafter = hf_reference.Drafter(cfg)
    missing, unexpected = drafter.load_state_dict(hf_reference.load_file(os.path.join(export, "model.safetensors")),
                                                  strict=False)
    if unexpected or not all(m.startswith("rotary") for m in missing):
        raise AssertionError(f"{export}: the drafter's tensors do not match the public layout: {missing} {unexpected}")
    return drafter.float().eval().to(device), cfg.dflash_config


def stop_tokens_of(target):
    """The target's eos ids (generation_config), as `hsring model spec-decode` takes them."""
    eos = target.generation_config.eos_token_id
    return tuple(eos if isinstance(eos, list) else [] if eos is None else [eos])


@torch.no_grad()
def dflash_generate_greedy(target, drafter, dcfg, prompt, max_new, stop_tokens=()):
    """z-lab's stopping rule: prefill; then, while the last accepted token's position is below
    prompt + max_new (one more step when exactly max_new tokens exist), draft a whole block [last
    accepted, MASK...] from the captured layers of every accepted token, verify it in one target
    forward, keep the longest prefix the target agrees with plus its next token (acceptance length
    = accepted + 1, never cut), crop the target's cache; a stop token among the new tokens ends the
    loop after its step. The output is cut to max_new tokens and after its first stop token. The
    drafter's context is recomputed over every accepted token (the loop's draft cache, cropped to
    `start` after each draft, holds exactly those). Returns (new tokens, acceptance lengths)."""
    block, layer_ids, mask = dcfg["block_size"], dcfg["target_layer_ids"], dcfg["mask_token_id"]
    embed, head = target.get_input_embeddings().weight, target.lm_head
    dev = embed.device

    def features(hidden_states):  # captured layer k = hidden_states[k + 1], concatenated
        return torch.cat([hidden_states[k + 1][0] for k in layer_ids], dim=-1)

    n = len(prompt)
    max_length = n + max_new
    cache = DynamicCache()
    out = target(torch.tensor([prompt], device=dev), past_key_values=cache, use_cache=True, output_hidden_states=True)
    context = features(out.hidden_states)
    seq = list(prompt) + [int(out.logits[0, -1].argmax())]
    start, lengths = n, []
    while start < max_length:
        ids = [seq[start]] + [mask] * (block - 1)
        rows = drafter(embed[torch.tensor(ids, device=dev)], context, torch.arange(0, start + block, device=dev))[1:]
        ids[1:] = head(rows).argmax(-1).tolist()
        out = target(torch.tensor([ids], device=dev), position_ids=torch.arange(start, start + block, device=dev)[None],
                     past_key_values=cache, use_cache=True, output_hidden_states=True)
        posterior = out.logits[0].argmax(-1).tolist()
        accepted = 0
        while accepted < block - 1 and ids[accepted + 1] == posterior[accepted]:
            accepted += 1
        seq = seq[:start + 1] + ids[1:accepted + 1] + [posterior[accepted]]
        start += accepted + 1
        if cache.get_seq_length() > start:  # drop the rejected tail (crop takes a negative count)
            cache.crop(start - cache.get_seq_length())
        lengths.append(accepted + 1)
        context = torch.cat([context, features(out.hidden_states)[:accepted + 1]])
        if any(t in stop_tokens for t in seq[n:]):
            break
    new = seq[n:min(start + 1, max_length)]
    for i, t in enumerate(new):
        if t in stop_tokens:
            return new[:i + 1], lengths
    return new, lengths
