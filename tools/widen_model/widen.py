"""The arithmetic of widening: a small Qwen3 target (and its DFlash / EAGLE-3 drafters) embedded
exactly into a larger Qwen3 shape, so the large model computes the small one's function at the
large one's cost.

The residual stream of the large model is the small one's in its first d of D dimensions and
exactly zero in the rest. Every weight that writes into the residual (embedding, o_proj, down_proj)
has zero rows there; every weight that reads it sees zeros in the added columns. Added query heads,
KV heads and MLP units are zero rows whose outputs the zero columns of o_proj / down_proj drop. Added
layers have zero o_proj and down_proj: they add nothing to the residual.

RMSNorm over D dims of [x, 0]: sqrt(|x|^2 / D + eps_D) = sqrt(d / D) * sqrt(|x|^2 / d + eps_d) when
eps_D = eps_d * d / D, so a weight w * sqrt(d / D) gives the small norm's output exactly. The q/k
norms run over head_dim, which does not change, but read the config's one eps: scaling q_proj and
k_proj by c = sqrt(eps_D / eps_d) = sqrt(d / D) turns their eps_D back into eps_d (a q/k norm of
c * q with eps c^2 * eps is the norm of q with eps). With D / d a power of 4, sqrt(d / D) is a power
of two and every scaled weight is exact in bf16 too.

Padded vocabulary rows: embedding zero; LM-head rows copies of one real row (`pad_row`): their
logits equal that row's, and greedy decoding takes the first maximum, so a padded id never wins.
"""
import math

import torch


class WidenError(Exception):
    """A shape that cannot embed, or input the tool cannot read: one message for the user."""


def power_of_4(ratio):
    """True when ratio = 4^k for an integer k >= 0."""
    k = round(math.log(ratio, 4)) if ratio >= 1 else -1
    return k >= 0 and 4 ** k == ratio


class Geometry:
    """What maps the small model into the large one.

    small / large: dicts with hidden, layers, heads, kv_heads, head_dim, intermediate, vocab, eps.
    depths: the large layer index of each small layer (strictly increasing); dtype: the weights
    written ("bf16", "fp16", "fp32"): below fp32 the scales must be powers of two to stay exact."""

    def __init__(self, small, large, depths, pad_row, dtype):
        self.small, self.large, self.depths, self.pad_row = small, large, list(depths), pad_row
        s, l = small, large
        for key in ("hidden", "layers", "heads", "kv_heads", "intermediate", "vocab"):
            if l[key] < s[key]:
                raise WidenError(f"the large {key} ({l[key]}) is smaller than the small model's ({s[key]})")
        if l["head_dim"] != s["head_dim"]:
            raise WidenError(f"head_dim must stay {s['head_dim']} (the large shape has {l['head_dim']}): heads are "
                             "copied whole, and attention scales by 1/sqrt(head_dim)")
        if l["heads"] % l["kv_heads"] or s["heads"] % s["kv_heads"] or \
                l["heads"] // l["kv_heads"] != s["heads"] // s["kv_heads"]:
            raise WidenError(f"the query heads per KV head must be equal: small {s['heads']}/{s['kv_heads']}, "
                             f"large {l['heads']}/{l['kv_heads']} (query head i reads KV head i // group in both)")
        ratio = l["hidden"] / s["hidden"]
        if dtype != "fp32" and not power_of_4(ratio):
            raise WidenError(f"hidden {s['hidden']} -> {l['hidden']}: the ratio {ratio:g} must be a power of 4 for "
                             f"{dtype} weights (the norms scale by sqrt(d/D), exact only when it is a power of "
                             "two); write the large model in fp32, or train the small one at a hidden size that is")
        if len(self.depths) != s["layers"] or any(b <= a for a, b in zip(self.depths, self.depths[1:])) or \
                self.depths[0] < 0 or self.depths[-1] >= l["layers"]:
            raise WidenError(f"--depths must give {s['layers']} strictly increasing layer indices in 0..{l['layers'] - 1}"
                             f", got {self.depths}")
        if not 0 <= pad_row < s["vocab"]:
            raise WidenError(f"the padded LM-head rows copy row {pad_row}, which is not a row of the small vocabulary "
                             f"(0..{s['vocab'] - 1})")
        self.scale = math.sqrt(s["hidden"] / l["hidden"])     # norms' weights and q/k projections
        self.eps = s["eps"] * s["hidden"] / l["hidden"]

    def layer_id(self, k):
        """The large model's layer whose output is small layer k's (layer ids as HF: output of
        decoder layer k). The last layer's output is read after the final norm (HF hidden_states[-1])
        in both, so it maps to the large model's last layer wherever the small one sits."""
        if not 0 <= k < self.small["layers"]:
            raise WidenError(f"layer id {k} is not a layer of the {self.small['layers']}-layer small target")
        return self.large["layers"] - 1 if k == self.small["layers"] - 1 else self.depths[k]

    # --- pieces -------------------------------------------------------------------------------
    def norm(self, w):
        """RMSNorm over the hidden size: [D], the small weight scaled in the first d, zero after."""
        out = torch.zeros(self.large["hidden"], dtype=torch.float32)
        out[: w.numel()] = w.float() * self.scale
        return out

    def matrix(self, w, rows, cols, blocks_in=None):
        """A zero [rows, cols] with the small matrix in its top-left corner; blocks_in = (n, d, D):
        the small matrix's columns are n blocks of d (concatenated inputs), each placed at k * D."""
        out = torch.zeros(rows, cols, dtype=torch.float32)
        w = w.float()
        if blocks_in is None:
            out[: w.shape[0], : w.shape[1]] = w
        else:
            n, d, big = blocks_in
            if w.shape[1] != n * d:
                raise WidenError(f"a matrix of {w.shape[1]} input columns is not {n} blocks of {d}")
            for k in range(n):
                out[: w.shape[0], k * big: k * big + d] = w[:, k * d:(k + 1) * d]
        return out

    def decoder_layer(self, get, prefix, qk_norm, inputs=1):
        """One decoder layer's tensors, widened. `get(name)` returns the small tensor of
        prefix + name; inputs = 2 for EAGLE-3's layer (q/k/v read [embedding, hidden])."""
        l, hd = self.large, self.large["head_dim"]
        q_dim, kv_dim = l["heads"] * hd, l["kv_heads"] * hd
        blocks = None if inputs == 1 else (inputs, self.small["hidden"], l["hidden"])
        qk = self.scale if qk_norm else 1.0   # c: turns eps_D back into eps_d inside the q/k norms
        out = {
            "self_attn.q_proj.weight": self.matrix(get("self_attn.q_proj.weight") * qk, q_dim, inputs * l["hidden"], blocks),
            "self_attn.k_proj.weight": self.matrix(get("self_attn.k_proj.weight") * qk, kv_dim, inputs * l["hidden"], blocks),
            "self_attn.v_proj.weight": self.matrix(get("self_attn.v_proj.weight"), kv_dim, inputs * l["hidden"], blocks),
            "self_attn.o_proj.weight": self.matrix(get("self_attn.o_proj.weight"), l["hidden"], q_dim),
            "mlp.gate_proj.weight": self.matrix(get("mlp.gate_proj.weight"), l["intermediate"], l["hidden"]),
            "mlp.up_proj.weight": self.matrix(get("mlp.up_proj.weight"), l["intermediate"], l["hidden"]),
            "mlp.down_proj.weight": self.matrix(get("mlp.down_proj.weight"), l["hidden"], l["intermediate"]),
            "input_layernorm.weight": self.norm(get("input_layernorm.weight")),
            "post_attention_layernorm.weight": self.norm(get("post_attention_layernorm.weight")),
        }
        if qk_norm:
            out["self_attn.q_norm.weight"] = get("self_attn.q_norm.weight").float().clone()
            out["self_attn.k_norm.weight"] = get("self_attn.k_norm.weight").float().clone()
        return {prefix + k: v for k, v in out.items()}

    def zero_layer(self, prefix, qk_norm):
        """An added layer: all zeros, so its attention and MLP add nothing to the residual."""
        l, hd = self.large, self.large["head_dim"]
        q_dim, kv_dim, h, m = l["heads"] * hd, l["kv_heads"] * hd, l["hidden"], l["intermediate"]
        shapes = {"self_attn.q_proj.weight": (q_dim, h), "self_attn.k_proj.weight": (kv_dim, h),
                  "self_attn.v_proj.weight": (kv_dim, h), "self_attn.o_proj.weight": (h, q_dim),
                  "mlp.gate_proj.weight": (m, h), "mlp.up_proj.weight": (m, h), "mlp.down_proj.weight": (h, m),
                  "input_layernorm.weight": (h,), "post_attention_layernorm.weight": (h,)}
        if qk_norm:
            shapes.update({"self_attn.q_norm.weight": (hd,), "self_attn.k_norm.weight": (hd,)})
        return {prefix + k: torch.zeros(s, dtype=torch.float32) for k, s in shapes.items()}

    def embedding(self, w):
        """[V, D]: the small rows in the first d columns; padded rows zero (never a real token's)."""
        return self.matrix(w, self.large["vocab"], self.large["hidden"])

    def lm_head(self, w, rows=None, pad_row=None):
        """[rows, D]: the small rows in the first d columns; padded rows copies of row pad_row."""
        rows = rows or self.large["vocab"]
        out = self.matrix(w, rows, self.large["hidden"])
        pad_row = self.pad_row if pad_row is None else pad_row
        out[w.shape[0]:] = out[pad_row]
        return out
