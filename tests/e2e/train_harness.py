"""The real workers under `hsring run` on the CPU, for the e2e tests: a tiny Qwen3-shaped target
(preset:tiny unless `model` says otherwise), a 1-layer DFlash drafter, the first `samples` samples
of data/demo.jsonl; and metrics.jsonl read the way a user reads it (the surviving history)."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "supervisor"))
from harness import Run, process_gone  # noqa: E402

SOURCE = os.environ["HSRING_SOURCE_ROOT"]
sys.path.insert(0, os.path.join(SOURCE, "bin"))
from plot_run import read_metrics  # noqa: E402


def surviving_rows(run_dir):
    """metrics.jsonl's step rows as in the final weights' history (bin/plot_run.py's read_metrics:
    a {"resume": {"step": S}} line drops the rows of later steps written before it, whose weights
    died). Held-out evaluations are left out."""
    return read_metrics(run_dir)[0]


def tiny_qwen3_dir(out, seed, proj_std, norms="ones", head_scale=1.0, nan_token=None):
    """A HF Qwen3 dir of preset:tiny's shape (vocab 512), random fp32 weights: projections
    N(0, proj_std); norm weights ones, or uniform in [0.5, 2.5] (norms="random"); the LM head
    scaled by head_scale; the embedding row nan_token NaN when given. Returns `out`."""
    import json
    import numpy as np
    from safetensors.numpy import save_file
    rng = np.random.default_rng(seed)
    h, layers, heads, kv, d, inter, vocab = 64, 8, 4, 2, 16, 192, 512
    norm = (lambda n: rng.uniform(0.5, 2.5, n)) if norms == "random" else np.ones  # noqa: E731
    w = {"model.embed_tokens.weight": rng.normal(0, 0.125, (vocab, h)), "model.norm.weight": norm(h),
         "lm_head.weight": head_scale * rng.normal(0, 0.125, (vocab, h))}
    for i in range(layers):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(h)
        w[p + "post_attention_layernorm.weight"] = norm(h)
        w[p + "self_attn.q_norm.weight"] = norm(d)
        w[p + "self_attn.k_norm.weight"] = norm(d)
        for n, shape in (("self_attn.q_proj", (heads * d, h)), ("self_attn.k_proj", (kv * d, h)),
                         ("self_attn.v_proj", (kv * d, h)), ("self_attn.o_proj", (h, heads * d)),
                         ("mlp.gate_proj", (inter, h)), ("mlp.up_proj", (inter, h)), ("mlp.down_proj", (h, inter))):
            w[p + n + ".weight"] = rng.normal(0, proj_std, shape)
    if nan_token is not None:
        w["model.embed_tokens.weight"][nan_token] = np.nan
    os.makedirs(out)
    save_file({k: v.astype(np.float32) for k, v in w.items()}, os.path.join(out, "model.safetensors"))
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": h,
                   "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv,
                   "head_dim": d, "intermediate_size": inter, "vocab_size": vocab, "max_position_embeddings": 4096,
                   "rms_norm_eps": 1e-6, "rope_theta": 1e6, "hidden_act": "silu", "tie_word_embeddings": False,
                   "torch_dtype": "float32"}, f)
    return out


class TrainRun(Run):
    """Keywords: the config's topology, data and training keys (defaults below); `model`, a target
    dir; `ring_extra` / `target_extra` / `drafter_extra` / `data_extra` / `train_extra` / `tail`, more TOML lines;
    `eval_every` > 0 adds the demo's held-out set."""

    def __init__(self, tag, targets='["cpu"]', drafters='["cpu"]', tokens_per_step=0, epochs=2, samples=300,
                 eval_every=0, model="preset:tiny", lr=1e-2, warmup_steps=20, checkpoint_every=25, min_lr_ratio=0.1,
                 drafter_extra="", train_extra="", data_path=None, ring_extra="", target_extra="", **kw):
        self.settings = dict(targets=targets, drafters=drafters, tokens_per_step=tokens_per_step, epochs=epochs,
                             samples=samples, eval_every=eval_every, model=model, lr=lr, warmup_steps=warmup_steps,
                             checkpoint_every=checkpoint_every, min_lr_ratio=min_lr_ratio,
                             drafter_extra=drafter_extra, train_extra2=train_extra, data_path=data_path,
                             ring_extra=ring_extra, target_extra=target_extra)
        super().__init__(tag, **kw)

    def write_config(self, *args, **kwargs):
        c = self.settings
        data = c["data_path"]
        if data is None:
            data = os.path.join(self.tmp, "train.jsonl")
            with open(os.path.join(SOURCE, "data", "demo.jsonl")) as src, open(data, "w") as dst:
                for i, line in enumerate(src):
                    if i < c["samples"]:
                        dst.write(line)
        heldout = os.path.join(SOURCE, "data", "demo-heldout.jsonl")
        with open(self.config, "w") as f:
            f.write(f"""
[run]
name = "{self.name}"
run_dir = "{self.run_dir}"
seed = 11
[topology]
targets = {c["targets"]}
drafters = {c["drafters"]}
[ring]
slots = 6
slot_tokens = 512
huge_pages = "off"
{c["ring_extra"]}
[target]
model = "{c["model"]}"
{c["target_extra"]}
[drafter]
num_layers = 1
block_size = 8
{c["drafter_extra"]}
[data]
path = "{data}"
epochs = {c["epochs"]}
{f'eval_path = "{heldout}"' if c["eval_every"] else ""}
{self.data_extra}
[train]
lr = {c["lr"]}
min_lr_ratio = {c["min_lr_ratio"]}
warmup_steps = {c["warmup_steps"]}
tokens_per_step = {c["tokens_per_step"]}
num_anchors = 64
loss_decay_gamma = 4.0
checkpoint_every = {c["checkpoint_every"]}
eval_every = {c["eval_every"]}
{c["train_extra2"]}
[supervisor]
status_interval_s = 0.5
backoff_initial_s = 0.1
backoff_max_s = 0.5
stop_timeout_s = 60
{self.tail}
""")

    def supervisor_kill_and_rerun(self):
        """SIGKILL of the supervisor: its workers finish what they hold (the drafter its step and a
        checkpoint) and exit; a second `hsring run` waits for them and re-attaches."""
        pids = [w["pid"] for w in self.status()["workers"]]
        self.proc.kill()
        self.wait()
        end = time.time() + 60
        while time.time() < end and not all(process_gone(p) for p in pids):
            time.sleep(0.05)
        self.start()

    def kill_and_wait_restart(self, worker, at_step, until_step, timeout=200):
        """Once the run trains, SIGKILLs `worker` when the drafter reaches at_step and waits until
        it was restarted once and the drafter reached until_step."""
        self.wait_running(timeout=60)
        self.wait_for(lambda s: (s["drafter"]["step"] or 0) >= at_step, f"drafter step {at_step}", timeout=timeout)
        self.cli("kill", worker)
        self.wait_for(lambda s: self.worker(s, worker)["restarts"] == 1 and (s["drafter"]["step"] or 0) >= until_step,
                      f"{worker} restarted and the drafter at step {until_step}", timeout=timeout)

    def rows(self):
        return surviving_rows(self.run_dir)

    def evals(self):
        """The held-out evaluations of steps that survived."""
        return read_metrics(self.run_dir)[1]

    def export(self):
        with open(os.path.join(self.run_dir, "drafter", "model.safetensors"), "rb") as f:
            return f.read()
