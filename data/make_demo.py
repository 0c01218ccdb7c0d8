#!/usr/bin/env python3
"""Writes data/demo.jsonl: the small deterministic data set of the demo and the tests.

Every sample is a prompt (loss_mask 0) that states a task and its arguments, then a response
(loss_mask 1) that follows from the prompt by a fixed rule, so a tiny drafter can learn to
predict the next few tokens. Integer arithmetic and our own splitmix64 only: the output is the
same byte for byte on every machine and Python version. data/README.md describes the format.

    python3 data/make_demo.py            # (re)write data/demo.jsonl next to this script
    python3 data/make_demo.py --check    # exit 1 if data/demo.jsonl is not what this writes
    python3 data/make_demo.py -o -       # to stdout
    python3 data/make_demo.py --heldout  # data/demo-heldout.jsonl: 60 other samples of the same
                                         # tasks ([data] eval_path of the demo), never trained
"""
import argparse
import json
import pathlib
import sys

SEED = 20250101
NUM_SAMPLES = 600
HELDOUT_SEED, HELDOUT_SAMPLES = 20250202, 60
MIN_LEN, MAX_LEN = 64, 400

# Token ids; all < 511 (the `tiny` preset: vocab 512, id 511 = the DFlash mask token).
BOS, SEP, EOS = 1, 2, 3
COUNT, REPEAT, COPY, REVERSE, STAIRS, WALK = 4, 5, 6, 7, 8, 9
TASKS = [COUNT, REPEAT, COPY, REVERSE, STAIRS, WALK]
# How often each task is drawn (out of sum): WALK, predictable from the anchor alone, is where a
# tiny drafter learns fastest; the others need the context.
WEIGHTS = {COUNT: 2, REPEAT: 2, COPY: 1, REVERSE: 1, STAIRS: 2, WALK: 6}
VALUE0, NUM_VALUES = 16, 256  # value v in 0..255 is token 16 + v
FILLER0, NUM_FILLER = 272, 239  # filler tokens 272..510: noise before the task in the prompt
MASK64 = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def below(self, n):
        """Uniform in [0, n) by rejection (no modulo bias)."""
        limit = (1 << 64) - (1 << 64) % n
        while True:
            x = self.next()
            if x < limit:
                return x % n

    def between(self, lo, hi):
        """Uniform in [lo, hi]."""
        return lo + self.below(hi - lo + 1)


def value(v):
    return VALUE0 + v % NUM_VALUES


def successor_table():
    """A fixed permutation of the 256 values (the same for every sample): WALK follows it."""
    rng = SplitMix64(SEED ^ 0x57414C4B)
    perm = list(range(NUM_VALUES))
    for i in range(NUM_VALUES - 1, 0, -1):
        j = rng.below(i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


SUCCESSOR = successor_table()


def draw_task(rng):
    r = rng.below(sum(WEIGHTS.values()))
    for task in TASKS:
        if r < WEIGHTS[task]:
            return task
        r -= WEIGHTS[task]
    raise AssertionError


def make_sample(rng, task):
    # Total length: the smaller of two uniform draws, so short samples are more common
    # (mean ~176 tokens) and the file stays small; integer-only, hence reproducible.
    total = min(rng.between(MIN_LEN, MAX_LEN), rng.between(MIN_LEN, MAX_LEN))
    filler = [FILLER0 + rng.below(NUM_FILLER) for _ in range(rng.between(0, 24))]
    if task == COUNT:  # a, a+s, a+2s, ... (mod 256)
        a, s = rng.below(NUM_VALUES), rng.between(1, 7)
        args = [value(a), value(s)]
        make = lambda n: [value(a + s * k) for k in range(n)]
    elif task == REPEAT:  # the motif over and over
        motif = [value(rng.below(NUM_VALUES)) for _ in range(rng.between(3, 9))]
        args = [value(len(motif))] + motif
        make = lambda n: [motif[k % len(motif)] for k in range(n)]
    elif task == WALK:  # a, P(a), P(P(a)), ... along the fixed permutation P
        a = rng.below(NUM_VALUES)
        args = [value(a)]

        def make(n):
            out, v = [], a
            for _ in range(n):
                out.append(value(v))
                v = SUCCESSOR[v]
            return out
    elif task == STAIRS:  # a (r times), a+1 (r times), ...
        a, r = rng.below(NUM_VALUES), rng.between(2, 4)
        args = [value(a), value(r)]
        make = lambda n: [value(a + k // r) for k in range(n)]
    else:  # COPY / REVERSE a span given in the prompt: the response is as long as the span
        span_len = max(8, (total - len(filler) - 4) // 2)
        span = [value(rng.below(NUM_VALUES)) for _ in range(span_len)]
        prompt = [BOS] + filler + [task] + span + [SEP]
        response = (span if task == COPY else span[::-1]) + [EOS]
        return prompt, response
    prompt = [BOS] + filler + [task] + args + [SEP]
    response = make(max(8, total - len(prompt) - 1)) + [EOS]
    return prompt, response


def generate(seed=SEED, num_samples=NUM_SAMPLES):
    rng = SplitMix64(seed)
    lines = []
    for i in range(num_samples):
        task = draw_task(rng) if i >= len(TASKS) else TASKS[i]
        prompt, response = make_sample(rng, task)
        ids = prompt + response
        assert all(0 <= t < 511 for t in ids) and MIN_LEN <= len(ids) <= MAX_LEN + 8
        sample = {"input_ids": ids, "loss_mask": [0] * len(prompt) + [1] * len(response)}
        lines.append(json.dumps(sample, separators=(",", ":")) + "\n")
    return "".join(lines)


def main():
    here = pathlib.Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", default=None, help="file to write, '-' = stdout")
    ap.add_argument("--check", action="store_true", help="compare with --output instead of writing it")
    ap.add_argument("--heldout", action="store_true", help="the held-out set (data/demo-heldout.jsonl)")
    args = ap.parse_args()
    if args.output is None:
        args.output = str(here / ("demo-heldout.jsonl" if args.heldout else "demo.jsonl"))
    text = generate(HELDOUT_SEED, HELDOUT_SAMPLES) if args.heldout else generate()
    if args.check:
        path = pathlib.Path(args.output)
        if not path.is_file() or path.read_text() != text:
            flag = " --heldout" if args.heldout else ""
            print(f"{path} is not what data/make_demo.py{flag} writes: run python3 data/make_demo.py{flag}",
                  file=sys.stderr)
            return 1
        return 0
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w", newline="\n") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
