"""Writes a pre-tokenized JSONL data set of long samples for GPU pipeline runs (no downloads):
N samples of L tokens (ids below --vocab), loss mask on the second half (the "response").

    python3 bench/gpu/make_long_data.py OUT.jsonl --samples 300 --length 3072 --vocab 151000
"""
import argparse
import random


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--samples", type=int, default=300)
    ap.add_argument("--length", type=int, default=3072)
    ap.add_argument("--vocab", type=int, default=151000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    with open(a.out, "w") as f:
        for _ in range(a.samples):
            ids = [rng.randrange(a.vocab) for _ in range(a.length)]
            half = a.length // 2
            mask = [0] * half + [1] * (a.length - half)
            f.write('{"input_ids":[' + ",".join(map(str, ids)) + '],"loss_mask":[' + ",".join(map(str, mask)) + "]}\n")


if __name__ == "__main__":
    main()
