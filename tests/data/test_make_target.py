"""bin/make-target end to end on the CPU (its `test` preset, seconds): from a small corpus of real
Python files (this interpreter's own standard library) to an ordinary HF model dir that
transformers loads (model and tokenizer), whose validation perplexity beats the unigram baseline,
plus hsring prompt files cut from held-out files; a second run with the same seed writes the same
weights (made reproducibly); a bad --source is one clear message. And the checked-in demo target
(models/pycode-small) is what the script records it to be.

Skips (77) when transformers / tokenizers cannot be imported."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer
except ImportError as e:
    print(f"skipped: {e}", file=sys.stderr)
    sys.exit(77)

ROOT = os.environ.get("HSRING_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tools", "make_target")


def make(out, source, *extra):
    return subprocess.run([sys.executable, SCRIPT, "--preset", "test", "--out", out, "--source", source, "--device", "cpu",
                           "--threads", "1", "--prompts", "30", "--eval-prompts", "6", "--prompt-len", "16:40", *extra],
                          capture_output=True, text=True, timeout=600)


def small_corpus(dest):
    """~150 files of the running interpreter's standard library (real code, PSF licence)."""
    lib = os.path.dirname(os.__file__)
    names = sorted(n for n in os.listdir(lib) if n.endswith(".py"))[:150]
    os.makedirs(dest)
    for n in names:
        shutil.copy(os.path.join(lib, n), dest)
    return dest


def check(cond, msg):
    if not cond:
        print("FAIL:", msg, file=sys.stderr)
        sys.exit(1)


def main():
    tmp = tempfile.mkdtemp(prefix="make-target-test-")
    try:
        src = small_corpus(os.path.join(tmp, "corpus"))
        out = os.path.join(tmp, "model")
        r = make(out, src)
        check(r.returncode == 0, f"bin/make-target exited {r.returncode}: {r.stderr[-3000:]}")
        rec = json.load(open(os.path.join(out, "make_target.json")))
        t = rec["training"]
        check(t["val_ppl"] < t["unigram_val_ppl"],
              f"validation perplexity {t['val_ppl']:.1f} should beat the unigram baseline {t['unigram_val_ppl']:.1f}")
        check(rec["corpus"]["files"]["train"] > 0 and rec["corpus"]["files"]["eval"] > 0, rec["corpus"]["files"])
        check(rec["corpus"]["split"] == {"train": 85, "val": 3, "prompts": 9, "eval": 3}, rec["corpus"]["split"])
        # An ordinary HF dir: transformers loads model (every tensor) and tokenizer.
        model, info = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, output_loading_info=True)
        check(not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info)
        tok = AutoTokenizer.from_pretrained(out)
        text = "def add(a, b):\n    return a + b\n"
        check(tok.decode(tok(text)["input_ids"]) == text, "the tokenizer round-trips code")
        check(tok.eos_token_id == rec["eos_token_id"] and tok.mask_token_id == rec["mask_token_id"], "special tokens")
        vocab = model.config.vocab_size
        for name, count in (("prompts.jsonl", 30), ("eval.jsonl", 6)):
            lines = [json.loads(x) for x in open(os.path.join(out, "data", name))]
            check(len(lines) == count, f"{name}: {len(lines)} lines")
            for x in lines:
                ids = x["input_ids"]
                check(16 <= len(ids) <= 40 and all(0 <= i < vocab for i in ids), f"{name}: a prompt of {len(ids)} tokens")
                check(rec["mask_token_id"] not in ids, f"{name}: the mask token in a prompt")
        # --data-only: more prompts from the same files with the model's own tokenizer; the first ones
        # are the ones it wrote before (same seed), the model is untouched.
        before = open(os.path.join(out, "data", "prompts.jsonl")).read()
        weights = open(os.path.join(out, "model.safetensors"), "rb").read()
        r = make(out, src, "--data-only", "--prompts", "45")
        check(r.returncode == 0, f"--data-only exited {r.returncode}: {r.stderr[-2000:]}")
        after = open(os.path.join(out, "data", "prompts.jsonl")).read()
        check(after.startswith(before) and after.count("\n") == 45, "--data-only: 45 prompts, the first 30 as before")
        check(open(os.path.join(out, "model.safetensors"), "rb").read() == weights, "--data-only changed the model")
        # Reproducible: the same seed, the same weights (CPU).
        again = os.path.join(tmp, "again")
        r = make(again, src)
        check(r.returncode == 0, r.stderr[-2000:])
        a, b = load_file(os.path.join(out, "model.safetensors")), load_file(os.path.join(again, "model.safetensors"))
        check(a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), "a second run wrote other weights")
        # Bad input: one message naming the flag.
        r = make(os.path.join(tmp, "bad"), os.path.join(tmp, "nowhere"))
        check(r.returncode != 0 and "--source" in r.stderr and "no such directory" in r.stderr, r.stderr[-500:])
        r = make(os.path.join(tmp, "bad"), src, "--split", "90,3,9,3")
        check(r.returncode != 0 and "--split 90,3,9,3" in r.stderr and "adding up to 100" in r.stderr, r.stderr[-500:])
        check(not os.path.exists(os.path.join(tmp, "bad")), "a refused run left its OUT behind")
        # Bad flags: exit 2 with one line naming the flag, no traceback; the test preset's own
        # default --prompt-len is accepted (the run then stops at the bad --split).
        for flags, words in ((["--prompt-len", "abc"], "--prompt-len abc"), (["--prompt-len", "5"], "--prompt-len 5"),
                             (["--prompt-len", "96:32"], "--prompt-len 96:32"), (["--device", "tpu"], "--device tpu"),
                             (["--threads", "-2"], "--threads -2"), (["--prompt-len", "16:60"], "MAX at most 48"),
                             (["--split", "90,3,9,3"], "--split 90,3,9,3")):
            code = 1 if flags[0] == "--split" else 2  # argparse's usage errors exit 2
            r = subprocess.run([sys.executable, SCRIPT, "--preset", "test", "--out", os.path.join(tmp, "bad"), "--source",
                                src, "--device", "cpu", *flags], capture_output=True, text=True, timeout=120)
            check(r.returncode == code and words in r.stderr and "Traceback" not in r.stderr,
                  f"{flags}: exit {r.returncode}: {r.stderr[-800:]}")
        # The checked-in demo target is what the script made.
        demo = os.path.join(ROOT, "models", "pycode-small")
        rec = json.load(open(os.path.join(demo, "make_target.json")))
        check(rec["training"]["val_ppl"] < rec["training"]["unigram_val_ppl"] / 4, rec["training"])
        cfg = json.load(open(os.path.join(demo, "config.json")))
        check(cfg["model_type"] == "qwen3" and cfg["vocab_size"] == rec["training"]["shape"]["vocab"], cfg)
        print(f"make-target test preset: val perplexity {t['val_ppl']:.1f} < unigram {t['unigram_val_ppl']:.1f}; "
              f"models/pycode-small: {rec['training']['val_ppl']:.2f} < {rec['training']['unigram_val_ppl']:.1f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
