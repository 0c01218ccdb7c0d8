"""bin/make-target — make a real (trained, not random) target for hsring, reproducibly.

  bin/make-target --preset gpu --out models/pycode-25m             # one H200: about 2 minutes
  bin/make-target --preset small --out models/pycode-small --device cpu  # 2 CPU cores: bin/demo's target

1. corpus: real Python code that Debian ships (the CPython 3.11 standard library and test suite,
   PSF-2.0; corpus.py), split by file into train / val / prompts / eval;
2. a byte-level BPE tokenizer trained on the train part (tokenizer.json: transformers loads it);
3. a Qwen3ForCausalLM of the preset's shape trained on the train part, its validation perplexity
   against the unigram baseline (train.py);
4. OUT: an ordinary HF model dir (config.json, model.safetensors, generation_config.json,
   tokenizer files) + make_target.json (corpus manifest, training record) + train_log.jsonl;
   OUT/data/prompts.jsonl and OUT/data/eval.jsonl: prompts from files the target never saw, for
   `[data] path` (the target answers them) and `[data] eval_path` / `[eval] spec_prompts`."""
import argparse
import json
import os
import re
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402
import prompts  # noqa: E402
import tokenizer  # noqa: E402
import train  # noqa: E402


def write_data(tok, parts, a, lo, hi):
    """OUT/data/prompts.jsonl and eval.jsonl; returns what they hold."""
    data = {}
    os.makedirs(os.path.join(a.out, "data"), exist_ok=True)
    for part, name, count, seed in (("prompts", "prompts.jsonl", a.prompts, a.seed),
                                    ("eval", "eval.jsonl", a.eval_prompts, a.seed + 1)):
        prompts.write(os.path.join(a.out, "data", name), prompts.make(tok, parts[part], count, lo, hi, seed))
        data[name] = {"part": part, "prompts": count, "tokens": f"{lo}..{hi}"}
    return data


def say_corpus(manifest, say):
    say(f"make-target: corpus {manifest['what']} ({manifest['licence'].split(' ')[0]}): "
        + ", ".join(f"{k} {manifest['files'][k]} files / {manifest['bytes'][k] / 1e6:.1f} MB" for k in manifest["files"]))


def rewrite_data(a, argv, source, lo, hi, say):
    """--data-only: OUT's data/ again from the corpus OUT was made from, split as it was (its prompts
    must come from files it never trained on), cut with OUT's own tokenizer."""
    from tokenizers import Tokenizer
    record_path = os.path.join(a.out, "make_target.json")
    with open(record_path) as f:
        record = json.load(f)
    seq = record["training"]["shape"]["seq"]
    if hi + 16 > seq:
        raise SystemExit(f"make-target: --prompt-len {lo}:{hi} leaves no room for answers in {a.out}'s {seq} positions")
    made = record["corpus"].get("split")
    split = tuple(made[n] for n in corpus.PART_NAMES) if isinstance(made, dict) else corpus.DEFAULT_SPLIT
    parts, manifest = corpus.collect(source, split)
    say_corpus(manifest, say)
    if record["corpus"]["sha256"] != manifest["sha256"]:
        raise SystemExit(f"make-target: --source {source} is not the corpus {a.out} was made from "
                         f"(sha256 {manifest['sha256'][:12]} vs {record['corpus']['sha256'][:12]})")
    record["data"] = write_data(Tokenizer.from_file(os.path.join(a.out, "tokenizer.json")), parts, a, lo, hi)
    record["data_made_by"] = "bin/make-target " + " ".join(argv)
    with open(record_path, "w") as f:
        json.dump(record, f, indent=1)


def parse_prompt_len(ap, text, seq):
    """--prompt-len MIN:MAX (1 <= MIN <= MAX); the default is 32:96, MAX cut to the preset's room."""
    if text is None:
        hi = min(96, seq - 16)
        return min(32, hi), hi
    m = re.fullmatch(r"(\d+):(\d+)", text.strip())
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        ap.error(f"--prompt-len {text}: write MIN:MAX, two whole numbers with 1 <= MIN <= MAX (e.g. 32:96)")
    return int(m.group(1)), int(m.group(2))


def main(argv):
    ap = argparse.ArgumentParser(prog="bin/make-target", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=sorted(train.PRESETS), required=True)
    ap.add_argument("--out", required=True, help="the model directory to write (must not exist, or --force)")
    ap.add_argument("--source", help="a directory of the corpus packages' .deb files, or of .py files "
                                     "(default: `apt-get download` the packages into runs/make-target/debs)")
    ap.add_argument("--device", default="auto", help="cuda, cpu or auto (cuda when there is one)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, help="training steps (default: the preset's)")
    ap.add_argument("--prompts", type=int, default=600, help="drafter training prompts (data/prompts.jsonl)")
    ap.add_argument("--eval-prompts", type=int, default=60, help="held-out prompts (data/eval.jsonl)")
    ap.add_argument("--prompt-len", help="MIN:MAX tokens per prompt (default 32:96, MAX at most the preset's "
                                         "positions - 16: room for answers)")
    ap.add_argument("--split", default="85,3,9,3",
                    help="percent of the corpus's files for TRAIN,VAL,PROMPTS,EVAL (by a hash of each path; the "
                         "target trains on TRAIN only; --data-only keeps the model's own split)")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads for torch (0: torch's default)")
    ap.add_argument("--force", action="store_true", help="overwrite OUT")
    ap.add_argument("--data-only", action="store_true",
                    help="keep the model in OUT (made by this script) and write its data/ again: other prompt counts "
                         "or lengths, cut with OUT's own tokenizer from the same files")
    a = ap.parse_args(argv)

    p = train.PRESETS[a.preset]
    lo, hi = parse_prompt_len(ap, a.prompt_len, p["seq"])
    for flag, value, least in (("--threads", a.threads, 0), ("--prompts", a.prompts, 1),
                               ("--eval-prompts", a.eval_prompts, 1), ("--steps", a.steps, 1)):
        if value is not None and value < least:
            ap.error(f"{flag} {value}: must be at least {least}")
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", a.device):
        ap.error(f"--device {a.device}: write cpu, cuda, cuda:N or auto")
    import torch
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error(f"--device {a.device}: torch sees no CUDA device here (use --device cpu)")
    if a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device("cuda" if a.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if a.device == "auto" else a.device))
    if not a.data_only and hi + 16 > p["seq"]:
        ap.error(f"--prompt-len {lo}:{hi}: prompts must leave room for answers in the preset's {p['seq']} positions "
                 f"(MAX at most {p['seq'] - 16})")
    if a.data_only:
        if not os.path.isfile(os.path.join(a.out, "make_target.json")):
            ap.error(f"--data-only: {a.out} is not a model dir made by bin/make-target (no make_target.json)")
    elif os.path.exists(a.out) and not a.force:
        ap.error(f"{a.out} exists (give --force to overwrite it)")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    work = os.path.join(root, "runs", "make-target")
    os.makedirs(work, exist_ok=True)
    source = a.source or corpus.fetch_debs(os.path.join(work, "debs"))
    say = lambda s: print(s, flush=True)  # noqa: E731

    t0 = time.time()
    if a.data_only:
        rewrite_data(a, argv, source, lo, hi, say)
        say(f"make-target: {a.out}/data written again ({time.time() - t0:.0f} s)")
        return 0
    parts, manifest = corpus.collect(source, corpus.parse_split(a.split))
    say_corpus(manifest, say)
    tok = tokenizer.train((t for _, t in parts["train"]), p["vocab"])
    ids = {k: tokenizer.encode_documents(tok, [t for _, t in v]) for k, v in parts.items()}
    manifest["tokens"] = {k: sum(len(d) for d in v) for k, v in ids.items()}
    say(f"make-target: BPE tokenizer of {p['vocab']} ids; tokens: "
        + ", ".join(f"{k} {n:,}" for k, n in manifest["tokens"].items()) + f" ({time.time() - t0:.0f} s)")

    # Everything is written into OUT.partial-PID and renamed to OUT at the end: a failed or
    # interrupted run leaves no half-made model dir.
    final_out, a.out = a.out, f"{a.out.rstrip('/')}.partial-{os.getpid()}"
    os.makedirs(a.out)
    try:
        make_model(a, argv, p, device, ids, parts, tok, manifest, lo, hi, say)
    except BaseException:
        shutil.rmtree(a.out, ignore_errors=True)
        raise
    if os.path.exists(final_out):
        shutil.rmtree(final_out)
    os.rename(a.out, final_out)
    say(f"make-target: {final_out} ready ({time.time() - t0:.0f} s): HF model dir + data/prompts.jsonl, data/eval.jsonl")
    return 0


def make_model(a, argv, p, device, ids, parts, tok, manifest, lo, hi, say):
    """Trains, exports and writes the data into a.out."""
    import torch
    say(f"make-target: training the {a.preset} preset on {device} ({p['steps'] if not a.steps else a.steps} steps "
        f"of {p['batch']} x {p['seq']} tokens)")
    model, result = train.train(ids, a.preset, a.out, device, a.seed, a.steps, log=say)
    say(f"make-target: validation perplexity {result['val_ppl']:.2f} (unigram baseline {result['unigram_val_ppl']:.1f}), "
        f"{result['parameters'] / 1e6:.2f}M parameters, {result['seconds']:.0f} s")

    train.export(model, a.out, torch.bfloat16)
    tokenizer.save(tok, a.out, p["seq"])
    data = write_data(tok, parts, a, lo, hi)
    record = {"made_by": "bin/make-target " + " ".join(argv), "corpus": manifest, "training": result,
              "data": data, "mask_token_id": tokenizer.MASK_ID, "eos_token_id": tokenizer.EOS_ID}
    with open(os.path.join(a.out, "make_target.json"), "w") as f:
        json.dump(record, f, indent=1)
    sample = model.to(torch.float32).generate(torch.tensor([ids["eval"][0][:24]]), max_new_tokens=40, do_sample=False)
    say("make-target: a greedy continuation of a held-out file:\n"
        + tok.decode(sample[0].tolist()).replace("\n", "\n    | "))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
