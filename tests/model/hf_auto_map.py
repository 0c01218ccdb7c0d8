#!/usr/bin/env python3
"""Does transformers load an exported drafter with the DFlash model code? (test_hf_parity.cpp)

  hf_auto_map.py DRAFTER_DIR

The export's config.json names the public DFlash code in auto_map ("REPO--dflash.DFlashDraftModel",
transformers' form for code that lives in another hub repo). Offline, the repo cannot be
fetched, so a stand-in dflash.py (a DFlashDraftModel with the public parameter layout, no
forward) is put at the relative path REPO/ under a scratch working directory: transformers'
dynamic-module code treats an existing local directory named like the repo as that repo, so
everything else -- parsing auto_map, trust_remote_code, importing the class, loading the
weights into it -- is transformers' own path. Checks:
  1. AutoModel.from_pretrained(DIR, trust_remote_code=True) builds DFlashDraftModel from REPO's
     dflash.py, with every tensor of model.safetensors loaded and none missing;
  2. the same call on a copy without auto_map builds a plain Qwen3 model: the silent misload
     auto_map exists to prevent (so this test fails if auto_map is dropped).

Exit code 77 (skip) only when transformers cannot be imported.
"""
import json
import os
import shutil
import sys
import tempfile

os.environ["HF_HUB_OFFLINE"] = "1"  # never reach the network: the code must come from the local stand-in

try:
    import torch
    import transformers
    from transformers import AutoModel
    from safetensors.torch import load_file
except ImportError as e:  # the only reason to skip
    print(f"skipped: transformers not importable: {e}", file=sys.stderr)
    sys.exit(77)

# A stand-in for the public dflash.py: the same class name and parameter names (fc, hidden_norm,
# norm, layers.N.* as transformers' Qwen3 decoder layer names them), nothing else.
STAND_IN = '''
import torch
from transformers.models.qwen3.modeling_qwen3 import Qwen3Config, Qwen3DecoderLayer, Qwen3PreTrainedModel, Qwen3RMSNorm

HSRING_STAND_IN = True


class DFlashDraftModel(Qwen3PreTrainedModel):
    config_class = Qwen3Config

    def __init__(self, config):
        super().__init__(config)
        layer_ids = config.dflash_config["target_layer_ids"]
        self.layers = torch.nn.ModuleList(Qwen3DecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.fc = torch.nn.Linear(len(layer_ids) * config.hidden_size, config.hidden_size, bias=False)
        self.hidden_norm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.norm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.block_size = config.block_size
        self.target_layer_ids = layer_ids
        self.post_init()

    def forward(self, *args, **kwargs):
        raise NotImplementedError("stand-in for the public dflash.py: loading only")
'''


def fail(msg):
    print(f"hf_auto_map.py: FAILED: {msg}", file=sys.stderr)
    sys.exit(1)


def main():
    if len(sys.argv) != 2:
        fail("usage: hf_auto_map.py DRAFTER_DIR")
    drafter = os.path.abspath(sys.argv[1])
    with open(os.path.join(drafter, "config.json")) as f:
        cfg = json.load(f)
    ref = cfg.get("auto_map", {}).get("AutoModel")
    if not ref or "--" not in ref:
        fail(f"config.json has no auto_map AutoModel entry naming a hub repo: {cfg.get('auto_map')}")
    repo = ref.split("--")[0]
    weights = load_file(os.path.join(drafter, "model.safetensors"))

    scratch = tempfile.mkdtemp(prefix="hsring-auto-map-")
    cwd = os.getcwd()
    try:
        os.makedirs(os.path.join(scratch, repo))
        with open(os.path.join(scratch, repo, "dflash.py"), "w") as f:
            f.write(STAND_IN)
        # transformers caches dynamic modules under HF_MODULES_CACHE; keep it in the scratch dir.
        os.environ["HF_MODULES_CACHE"] = os.path.join(scratch, "modules")
        os.chdir(scratch)

        model, info = AutoModel.from_pretrained(drafter, trust_remote_code=True, output_loading_info=True)
        name = type(model).__name__
        module = sys.modules[type(model).__module__]
        if name != "DFlashDraftModel" or not getattr(module, "HSRING_STAND_IN", False):
            fail(f"AutoModel built {type(model).__module__}.{name}, not DFlashDraftModel from {repo}/dflash.py")
        if info["missing_keys"] or info["unexpected_keys"]:
            fail(f"weights do not line up: missing {sorted(info['missing_keys'])}, unexpected {sorted(info['unexpected_keys'])}")
        state = model.state_dict()
        for k, v in weights.items():
            if not torch.equal(state[k].to(v.dtype), v):
                fail(f"tensor {k} differs after loading")
        print(f"with auto_map: {type(model).__module__}.{name}, {len(weights)} tensors loaded")

        # The same directory without auto_map: transformers falls back to model_type qwen3.
        plain = os.path.join(scratch, "no-auto-map")
        shutil.copytree(drafter, plain)
        del cfg["auto_map"]
        with open(os.path.join(plain, "config.json"), "w") as f:
            json.dump(cfg, f)
        other = AutoModel.from_pretrained(plain, trust_remote_code=True)
        if type(other).__name__ != "Qwen3Model":
            fail(f"without auto_map expected transformers' plain Qwen3Model, got {type(other).__name__}")
        print(f"without auto_map: {type(other).__module__}.{type(other).__name__} (the misload auto_map prevents)")
    finally:
        os.chdir(cwd)
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"transformers {transformers.__version__}: ok")


if __name__ == "__main__":
    main()
