"""bin/widen-model — a small trained Qwen3 target (and its drafters) embedded exactly into a larger
Qwen3 shape: the large model computes the small one's function (fp32 logits equal to rounding) at the
large one's cost: every weight is there and every matmul runs; only the function is the small one's.

  bin/widen-model target SMALL_DIR --shape qwen3-8b --out WIDE_DIR [--depths 0,1,9,17,25,33,34,35]
  bin/widen-model drafter SMALL_EXPORT --target WIDE_DIR --out WIDE_EXPORT [--draft-vocab 32000]

target: SMALL_DIR is a HF Qwen3 dir (bin/make-target); --shape names a preset of bench/python/presets.py
  (qwen3-8b) or gives hidden=,layers=,heads=,kv_heads=,intermediate=,vocab= (the rest from SMALL_DIR);
  head_dim and the query heads per KV head must match, and the hidden ratio be a power of 4 (exact
  bf16). --depths: where the small layers sit (default: spread from the first to the last layer); the
  others are zero layers. WIDE_DIR is an ordinary HF dir (its tokenizer files copied) + widen.json.
drafter: a DFlash or EAGLE-3 export of hsring for SMALL_DIR, widened for WIDE_DIR (its widen.json):
  the same layers, captured target layers mapped to the large model's, fc/norms/LM head widened.
  EAGLE-3: --draft-vocab pads its draft vocabulary with aliases of a real draft row (default: 32,000,
  the size public EAGLE-3 drafters of 8B targets use, or the small one's when larger).

How it stays exact: tools/widen_model/widen.py."""
import argparse
import json
import os
import shutil
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import widen  # noqa: E402
from widen import WidenError  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARD_BYTES = 2 << 30
COPIED_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def dtype_of(tensors):
    """The DTYPES name of the first floating tensor's dtype (what the small model was written in)."""
    names = {getattr(torch, v): k for k, v in DTYPES.items()}
    for t in tensors.values():
        if t.is_floating_point():
            return names.get(t.dtype, "fp32")
    return "fp32"


def read_json(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise WidenError(f"{path}: not found ({what})")
    except json.JSONDecodeError as e:
        raise WidenError(f"{path}: not valid JSON ({e})")


def shape_of(config):
    """The dims widen.Geometry reads, from a Qwen3 config.json."""
    heads = config["num_attention_heads"]
    return dict(hidden=config["hidden_size"], layers=config["num_hidden_layers"], heads=heads,
                kv_heads=config.get("num_key_value_heads", heads),
                head_dim=config.get("head_dim") or config["hidden_size"] // heads,
                intermediate=config["intermediate_size"], vocab=config["vocab_size"], eps=config["rms_norm_eps"])


def parse_shape(spec, small):
    """--shape: a preset name (bench/python/presets.py), or key=value pairs over the small shape."""
    sys.path.insert(0, os.path.join(ROOT, "bench", "python"))
    from presets import PRESETS
    if "=" not in spec:
        if spec not in PRESETS:
            raise WidenError(f"--shape {spec}: no such preset (known: {', '.join(sorted(PRESETS))}), or write "
                             "hidden=...,layers=...,heads=...,kv_heads=...,intermediate=...,vocab=...")
        p = PRESETS[spec]
        if p.get("experts") or p.get("gpt_oss") or not p.get("qk_norm"):
            raise WidenError(f"--shape {spec}: only dense Qwen3 shapes take a widened Qwen3")
        return dict(hidden=p["hidden"], layers=p["layers"], heads=p["heads"], kv_heads=p["kv_heads"],
                    head_dim=p["head_dim"], intermediate=p["intermediate"], vocab=p["vocab"])
    out = {k: v for k, v in small.items() if k != "eps"}
    for item in spec.split(","):
        key, _, value = item.partition("=")
        if key not in out or not value.isdigit():
            raise WidenError(f"--shape: '{item}' is not KEY=NUMBER with KEY one of {', '.join(out)}")
        out[key] = int(value)
    return out


def load_tensors(d):
    """Every tensor of a HF dir (model.safetensors, or the shards of its index) as fp32-able tensors."""
    from safetensors.torch import load_file
    index = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(read_json(index, "the shard index")["weight_map"].values())) if os.path.exists(index) \
        else ["model.safetensors"]
    tensors = {}
    for f in files:
        path = os.path.join(d, f)
        if not os.path.exists(path):
            raise WidenError(f"{path}: not found (the model's weights)")
        tensors.update(load_file(path))
    return tensors


class ShardWriter:
    """Writes tensors into shards of ~2 GiB and the index transformers and hsring read; a tensor is
    converted to the output dtype when added, so at most one shard is held in memory."""

    def __init__(self, out, dtype):
        self.out, self.dtype = out, getattr(torch, DTYPES[dtype])
        self.pending, self.pending_bytes, self.shards, self.total = {}, 0, [], 0

    def add(self, name, tensor):
        t = tensor.contiguous() if tensor.dtype in (torch.long, torch.bool) else tensor.to(self.dtype).contiguous()
        self.pending[name] = t
        self.pending_bytes += t.numel() * t.element_size()
        self.total += t.numel() * t.element_size()
        if self.pending_bytes >= SHARD_BYTES:
            self.flush()

    def flush(self):
        from safetensors.torch import save_file
        if self.pending:
            name = f"shard-{len(self.shards) + 1:05d}.safetensors"
            save_file(self.pending, os.path.join(self.out, name), metadata={"format": "pt"})
            self.shards.append((name, list(self.pending)))
            self.pending, self.pending_bytes = {}, 0

    def close(self):
        self.flush()
        n = len(self.shards)
        weight_map = {}
        for i, (name, keys) in enumerate(self.shards):
            final = "model.safetensors" if n == 1 else f"model-{i + 1:05d}-of-{n:05d}.safetensors"
            os.rename(os.path.join(self.out, name), os.path.join(self.out, final))
            weight_map.update({k: final for k in keys})
        if n > 1:
            with open(os.path.join(self.out, "model.safetensors.index.json"), "w") as f:
                json.dump({"metadata": {"total_size": self.total}, "weight_map": weight_map}, f, indent=1)
        return self.total


def staged(out, force, make):
    """Writes OUT through OUT.partial-PID, renamed at the end: a failure leaves nothing half-made."""
    if os.path.exists(out) and not force:
        raise WidenError(f"{out} exists (give --force to overwrite it)")
    tmp = f"{out.rstrip('/')}.partial-{os.getpid()}"
    os.makedirs(tmp)
    try:
        result = make(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if os.path.exists(out):
        shutil.rmtree(out)
    os.rename(tmp, out)
    return result


def default_depths(small_layers, large_layers):
    """The small layers spread from the large model's first layer to its last."""
    if small_layers == 1:
        return [large_layers - 1]
    return [round(k * (large_layers - 1) / (small_layers - 1)) for k in range(small_layers)]


def widen_target(a):
    cfg = read_json(os.path.join(a.small, "config.json"), "the small target's config")
    if cfg.get("model_type") != "qwen3":
        raise WidenError(f"{a.small}/config.json: model_type {cfg.get('model_type')!r}: widening takes a dense Qwen3 "
                         "target (model_type \"qwen3\")")
    small = shape_of(cfg)
    large = parse_shape(a.shape, small)
    depths = [int(x) for x in a.depths.split(",")] if a.depths else default_depths(small["layers"], large["layers"])
    record_path = os.path.join(a.small, "make_target.json")
    pad_row = a.pad_row
    if pad_row is None:  # the DFlash mask token: a row no text produces, so greedy never picks it
        pad_row = read_json(record_path, "")["mask_token_id"] if os.path.exists(record_path) else 0
    t = load_tensors(a.small)
    a.dtype = a.dtype or dtype_of(t)
    g = widen.Geometry(small, large, depths, pad_row, a.dtype)
    large["eps"] = g.eps
    tied = "lm_head.weight" not in t
    if tied and not cfg.get("tie_word_embeddings", False):
        raise WidenError(f"{a.small}: no lm_head.weight and tie_word_embeddings is false")
    new_cfg = dict(cfg)
    new_cfg.update(hidden_size=large["hidden"], num_hidden_layers=large["layers"], num_attention_heads=large["heads"],
                   num_key_value_heads=large["kv_heads"], head_dim=large["head_dim"],
                   intermediate_size=large["intermediate"], vocab_size=large["vocab"], rms_norm_eps=g.eps,
                   tie_word_embeddings=False, dtype=DTYPES[a.dtype],
                   layer_types=["full_attention"] * large["layers"], max_window_layers=large["layers"])
    new_cfg.pop("torch_dtype", None)
    where = {d: k for k, d in enumerate(depths)}

    def make(out):
        w = ShardWriter(out, a.dtype)
        w.add("model.embed_tokens.weight", g.embedding(t["model.embed_tokens.weight"]))
        for i in range(large["layers"]):
            prefix = f"model.layers.{i}."
            if i in where:
                k = where[i]
                layer = g.decoder_layer(lambda n: t[f"model.layers.{k}.{n}"], prefix, qk_norm=True)
            else:
                layer = g.zero_layer(prefix, qk_norm=True)
            for name, tensor in layer.items():
                w.add(name, tensor)
        w.add("model.norm.weight", g.norm(t["model.norm.weight"]))
        w.add("lm_head.weight", g.lm_head(t["model.embed_tokens.weight" if tied else "lm_head.weight"]))
        total = w.close()
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(new_cfg, f, indent=2)
        for name in COPIED_FILES:
            if os.path.exists(os.path.join(a.small, name)):
                shutil.copy(os.path.join(a.small, name), out)
        record = {"made_by": "bin/widen-model " + " ".join(a.argv), "small": os.path.abspath(a.small),
                  "small_shape": small, "large_shape": large, "depths": depths, "pad_row": pad_row,
                  "norm_scale": g.scale, "bytes": total, "dtype": a.dtype}
        with open(os.path.join(out, "widen.json"), "w") as f:
            json.dump(record, f, indent=1)
        return total

    t0 = time.time()
    total = staged(a.out, a.force, make)
    print(f"widen-model: {a.small} ({small['hidden']} x {small['layers']} layers) -> {a.out} ({large['hidden']} x "
          f"{large['layers']} layers, vocab {large['vocab']}; small layers at {depths}; {total / 1e9:.2f} GB of "
          f"{a.dtype} weights; {time.time() - t0:.0f} s)", flush=True)


def geometry_of(wide_dir, dtype):
    r = read_json(os.path.join(wide_dir, "widen.json"), "made by `bin/widen-model target`")
    return widen.Geometry(r["small_shape"], r["large_shape"], r["depths"], r["pad_row"], dtype)


def widen_drafter(a):
    cfg = read_json(os.path.join(a.small, "config.json"), "the drafter's config")
    t = load_tensors(a.small)
    a.dtype = a.dtype or dtype_of(t)
    g = geometry_of(a.target, a.dtype)
    arch = (cfg.get("architectures") or [""])[0]
    s, l = g.small, g.large
    if cfg.get("hidden_size") != s["hidden"] or cfg.get("vocab_size") != s["vocab"]:
        raise WidenError(f"{a.small}: hidden {cfg.get('hidden_size')} / vocab {cfg.get('vocab_size')} are not the "
                         f"small target's ({s['hidden']} / {s['vocab']}) that {a.target} was widened from")
    dims = dict(hidden_size=l["hidden"], num_attention_heads=l["heads"], num_key_value_heads=l["kv_heads"],
                head_dim=l["head_dim"], intermediate_size=l["intermediate"], vocab_size=l["vocab"], rms_norm_eps=g.eps)
    if cfg.get("num_attention_heads") != s["heads"] or cfg.get("num_key_value_heads") != s["kv_heads"] or \
            cfg.get("intermediate_size") != s["intermediate"]:
        raise WidenError(f"{a.small}: its heads/MLP ({cfg.get('num_attention_heads')}/{cfg.get('num_key_value_heads')}, "
                         f"{cfg.get('intermediate_size')}) are not the target's: only drafters with the target's "
                         "layer shape widen with it")
    new_cfg = dict(cfg)
    new_cfg.update(dims)
    new_cfg["num_target_layers"] = l["layers"]
    tensors = {}
    if arch == "DFlashDraftModel":
        ids = cfg["dflash_config"]["target_layer_ids"]
        new_ids = [g.layer_id(k) for k in ids]
        new_cfg["dflash_config"] = dict(cfg["dflash_config"], target_layer_ids=new_ids)
        for i in range(cfg["num_hidden_layers"]):
            tensors.update(g.decoder_layer(lambda n, i=i: t[f"layers.{i}.{n}"], f"layers.{i}.", qk_norm=True))
        tensors["fc.weight"] = g.matrix(t["fc.weight"], l["hidden"], len(ids) * l["hidden"],
                                        (len(ids), s["hidden"], l["hidden"]))
        tensors["hidden_norm.weight"] = g.norm(t["hidden_norm.weight"])
        tensors["norm.weight"] = g.norm(t["norm.weight"])
        new_cfg["layer_types"] = ["full_attention"] * cfg["num_hidden_layers"]
        what = f"DFlash, target layers {ids} -> {new_ids}"
    elif arch == "LlamaForCausalLMEagle3":
        hf_ids = cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]  # HF indices: layer k = k + 1
        new_hf_ids = [g.layer_id(k - 1) + 1 for k in hf_ids]
        new_cfg["eagle_config"] = dict(cfg["eagle_config"], eagle_aux_hidden_state_layer_ids=new_hf_ids)
        tensors.update(g.decoder_layer(lambda n: t[f"midlayer.{n}"], "midlayer.", qk_norm=False, inputs=2))
        tensors["midlayer.hidden_norm.weight"] = g.norm(t["midlayer.hidden_norm.weight"])
        tensors["fc.weight"] = g.matrix(t["fc.weight"], l["hidden"], 3 * l["hidden"], (3, s["hidden"], l["hidden"]))
        tensors["norm.weight"] = g.norm(t["norm.weight"])
        small_draft = cfg.get("draft_vocab_size", cfg["vocab_size"])
        draft = max(small_draft, min(a.draft_vocab or 32000, l["vocab"]))
        d2t_small = t["d2t"].long() if "d2t" in t else torch.zeros(small_draft, dtype=torch.long)
        targets = d2t_small + torch.arange(small_draft)
        # Padded draft ids alias a real draft row: the same LM-head row and the same target token, so
        # whatever wins a tie drafts the same token.
        alias = int((targets == g.pad_row).nonzero()[0]) if bool((targets == g.pad_row).any()) else 0
        tensors["lm_head.weight"] = g.lm_head(t["lm_head.weight"], rows=draft, pad_row=alias)
        new_targets = torch.cat([targets, torch.full((draft - small_draft,), int(targets[alias]))])
        if draft < l["vocab"]:
            tensors["d2t"] = new_targets - torch.arange(draft)
            t2d = torch.zeros(l["vocab"], dtype=torch.bool)
            t2d[new_targets] = True
            tensors["t2d"] = t2d
        new_cfg["draft_vocab_size"] = draft
        what = f"EAGLE-3, HF hidden states {hf_ids} -> {new_hf_ids}, draft vocabulary {small_draft} -> {draft}"
    else:
        raise WidenError(f"{a.small}/config.json: architectures {cfg.get('architectures')}: widening takes a DFlash "
                         "(DFlashDraftModel) or EAGLE-3 (LlamaForCausalLMEagle3) export of hsring")
    missing = sorted(k for k in t if k not in tensors and k not in ("d2t", "t2d"))
    if missing:
        raise WidenError(f"{a.small}: tensors widening does not know: {', '.join(missing[:6])}")

    def make(out):
        w = ShardWriter(out, a.dtype)
        for name in sorted(tensors):
            tensor = tensors[name]
            w.add(name, tensor)
        total = w.close()
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(new_cfg, f, indent=2)
        return total

    total = staged(a.out, a.force, make)
    print(f"widen-model: {a.small} -> {a.out} ({what}; {total / 1e9:.2f} GB of {a.dtype} weights)", flush=True)


def main(argv):
    ap = argparse.ArgumentParser(prog="bin/widen-model", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    t = sub.add_parser("target", help="widen a trained Qwen3 target")
    t.add_argument("small")
    t.add_argument("--shape", required=True, help="a preset name (qwen3-8b) or KEY=N,... over the small shape")
    t.add_argument("--depths", help="comma-separated large layer index of each small layer")
    t.add_argument("--pad-row", type=int, help="the row padded LM-head rows copy (default: the mask token)")
    d = sub.add_parser("drafter", help="widen a DFlash or EAGLE-3 export for a widened target")
    d.add_argument("small")
    d.add_argument("--target", required=True, help="the widened target dir (its widen.json)")
    d.add_argument("--draft-vocab", type=int, help="EAGLE-3: the widened draft vocabulary (default 32000)")
    for p in (t, d):
        p.add_argument("--out", required=True)
        p.add_argument("--dtype", choices=sorted(DTYPES), help="weights written (default: the small model's)")
        p.add_argument("--force", action="store_true", help="overwrite OUT")
    a = ap.parse_args(argv)
    a.argv = argv
    try:
        (widen_target if a.what == "target" else widen_drafter)(a)
    except WidenError as e:
        print(f"widen-model: {e}", file=sys.stderr)
        return 2
    except KeyError as e:
        print(f"widen-model: {a.small}: the tensor or key {e} is missing", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
