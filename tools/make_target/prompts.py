"""The drafter's data: prompts cut from the corpus's held-out files (parts `prompts` and `eval`,
which the target never trained on), as hsring's pre-tokenized JSONL with no loss mask: the whole
line is the prompt, and the target writes the response (`[data] responses = "target"`)."""
import json

import numpy as np


def make(tok, docs, count, min_len, max_len, seed):
    """`count` prompts of min_len..max_len tokens, each starting at the beginning of a non-blank
    line of a document (documents visited in a seeded order, several prompts per document when
    count is larger than the part)."""
    rng = np.random.default_rng(seed)
    out = []
    order = rng.permutation(len(docs))
    tries = 0
    while len(out) < count:
        if tries > 50 * count:
            raise SystemExit(f"make-target: cannot cut {count} prompts of {min_len}+ tokens from {len(docs)} files")
        _, text = docs[order[tries % len(docs)]]
        tries += 1
        lines = text.split("\n")
        starts = [i for i, line in enumerate(lines) if line.strip()]
        if not starts:
            continue
        first = starts[int(rng.integers(len(starts)))]
        ids = tok.encode("\n".join(lines[first:])).ids
        want = int(rng.integers(min_len, max_len + 1))
        if len(ids) < want:
            continue
        out.append(ids[:want])
    return out


def write(path, prompts):
    with open(path, "w") as f:
        for p in prompts:
            f.write(json.dumps({"input_ids": p}, separators=(",", ":")) + "\n")
